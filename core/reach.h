/* Which devices reach the memory of a device's allocations. gvmshim grants
 * memory only to the devices that reach it natively (core/region.c), since
 * every device granted makes mapping it, on a move's critical path, cost
 * about as much again. */
#ifndef GVM_REACH_H
#define GVM_REACH_H

#include "core/cuda_api.h"

/* The program enabled peer access for device `dev` to the memory of
 * device `owner` (cuCtxEnablePeerAccess): dev's kernels now reach owner's
 * allocations natively, so dev is granted access to all of them, wherever
 * their memory lives now or later. Once per pair;
 * disabling peer access again revokes nothing. Returns the first driver
 * error of a grant (the grants after it are still made). */
CUresult gvm_reach_enable(int owner, int dev);

#endif
