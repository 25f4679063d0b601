/* For the gpu programs linked with libcuda (-lcuda): a driver call that
 * must succeed, failing the case with the error's name. */
#ifndef GVM_GPU_LINKED_CU_H
#define GVM_GPU_LINKED_CU_H

#include "gpu_test.h"

#define CU(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *n_ = nullptr;                                          \
            cuGetErrorName(r_, &n_);                                           \
            gt::fail_at(__FILE__, __LINE__, "%s -> %d (%s)", #call, (int)r_, n_ ? n_ : "?"); \
        }                                                                      \
    } while (0)

#endif
