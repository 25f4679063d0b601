/* A reset of a device's primary context (cudaDeviceReset). */
#ifndef GVM_RESET_H
#define GVM_RESET_H

#include "core/cuda_api.h"

/* After the driver reset dev's primary context ctx (NULL: it was not
 * active): frees every allocation the program made in ctx, gives back the
 * memory gvmshim kept for reuse on dev, and forgets gvmshim's streams,
 * events, registrations and retain there. No other thread may be using
 * dev, as the driver asks of the reset itself. */
void gvm_reset_device(int dev, CUcontext ctx);

/* After the driver destroyed ctx, a context of device dev the program made
 * (cuCtxCreate): frees every allocation the program made in it. */
void gvm_reset_context(int dev, CUcontext ctx);

#endif
