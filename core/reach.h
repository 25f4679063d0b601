/* Which devices reach the host-resident memory of a device's allocations.
 * gvmshim grants host-resident memory only to the devices that reach it
 * natively (core/region.c), since every device granted makes mapping host
 * memory, on a spill's critical path, cost as much again. */
#ifndef GVM_REACH_H
#define GVM_REACH_H

#include "core/cuda_api.h"

/* The program enabled peer access for device `dev` to the memory of
 * device `owner` (cuCtxEnablePeerAccess): dev's kernels now reach owner's
 * allocations natively, so dev is granted access to those that are host-
 * resident now and to every one that becomes so later. Once per pair;
 * disabling peer access again revokes nothing. Returns the first driver
 * error of a grant (the grants after it are still made). */
CUresult gvm_reach_host(int owner, int dev);

#endif
