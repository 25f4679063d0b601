/* A library whose constructor calls the driver. The program needs it, so
 * glibc runs its constructors before those of the preloaded gvmshim: its
 * calls reach gvmshim's hooks before gvmshim's own constructor ran
 * (test_early.c). What it got is left for the program to check. */
#include "core/cuda_api.h"

#include <stddef.h>

void *early_alloc_fn;
CUresult early_rc = CUDA_ERROR_UNKNOWN;
int early_version;

__attribute__((constructor)) static void early(void)
{
    early_rc = cuInit(0);
    if (early_rc == CUDA_SUCCESS) early_rc = cuDriverGetVersion(&early_version);
    if (early_rc == CUDA_SUCCESS) early_rc = cuGetProcAddress_v2("cuMemAlloc", &early_alloc_fn, 12000, 0, NULL);
}
