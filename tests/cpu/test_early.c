/* A program whose library calls the driver from its constructor, before
 * the preloaded gvmshim's constructor ran (tests/cpu/early_ctor.c):
 * gvmshim must configure itself then, answer as the driver does, and go
 * on serving the allocations the program makes later, through the entry
 * point that early call resolved. It once loaded an empty libcuda path
 * there (dlopen("") is the program, whose lookups found gvmshim's own
 * hooks), and the first call recursed until the stack ran out. */
#define _GNU_SOURCE
#include "gvmshim.h"
#include "linked.h"

#include <dlfcn.h>

extern void *early_alloc_fn;
extern CUresult early_rc;
extern int early_version;

static void a_constructor_before_gvmshims_reaches_the_driver(void)
{
    CHECK_EQ(early_rc, CUDA_SUCCESS);
    CHECK(early_version > 0);
    CHECK(early_alloc_fn != NULL);
}

static void allocations_after_it_are_served(void)
{
    start();
    CUdeviceptr p = 0;
    CHECK_EQ(((__typeof__(&cuMemAlloc_v2))early_alloc_fn)(&p, 4 * MiB), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = (gvm_status(*)(const void *, gvm_info *))dlsym(RTLD_DEFAULT,
                                                                                                  "gvm_query");
    CHECK(query != NULL);
    gvm_info info;
    CHECK_EQ(query((void *)p, &info), GVM_OK);
    CHECK_EQ(info.size, 4 * MiB);
    CHECK_EQ(cuMemsetD8(p, 0x5a, 4 * MiB), CUDA_SUCCESS);
    unsigned char b = 0;
    CHECK_EQ(cuMemcpyDtoH(&b, p + 4 * MiB - 1, 1), CUDA_SUCCESS);
    CHECK_EQ(b, 0x5a);
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
}

static const struct test_case cases[] = {
    TEST_ENTRY(a_constructor_before_gvmshims_reaches_the_driver)
    TEST_ENTRY(allocations_after_it_are_served)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
