/* The policy as the preload layer asks for it: its start, where a new
 * allocation goes (rules, the device limit, spill), frees, and what the
 * program is told about free memory. */
#ifndef GVM_POLICY_PLACE_H
#define GVM_POLICY_PLACE_H

#include "core/cuda_api.h"
#include "policy/config.h"

#include <stdint.h>

/* After the core started: takes the limits, starts the promoter. */
CUresult gvm_policy_start(const struct gvm_config *cfg);

/* Serves an allocation for the program: rules, device limit, spill. The
 * error is what the native call would return when nothing fits. */
CUresult gvm_policy_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out);

/* Frees a gvmshim allocation (CUDA_ERROR_NOT_FOUND: not ours). */
CUresult gvm_policy_free(uintptr_t p);

/* Reserves room under device's cap for bytes of device memory the program
 * creates itself (core/direct.h), making room as an allocation would;
 * CUDA_ERROR_OUT_OF_MEMORY (what cuMemCreate answers on a full device)
 * when none can be made. */
CUresult gvm_policy_reserve_direct(int device, size_t bytes);

/* Adjusts cuMemGetInfo's answer for device. */
void gvm_policy_meminfo(int device, size_t *free_bytes, size_t *total_bytes);

#endif
