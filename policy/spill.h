/* Spilling: making room on a device at its limit, for a new allocation or
 * for spilled data a kernel launch is about to read. */
#ifndef GVM_POLICY_SPILL_H
#define GVM_POLICY_SPILL_H

#include "core/cuda_api.h"
#include "core/region.h"

#include <stddef.h>
#include <stdint.h>

/* device is at its limit: make room by evicting least recently used
 * allocations to the spill targets (evict mode), or place the allocation
 * on a target (place mode, and evict mode's fallback). */
CUresult gvm_spill_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out);

/* Evicts from device, least recently used first, to the spill targets
 * until it holds at most `limit` bytes; *moved says how many left.
 * CUDA_ERROR_OUT_OF_MEMORY when nothing more can leave (no target has
 * room, or what is left may not move), the error of a failed move (that
 * allocation stays as it was), or CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * while a stream capture is open (moves would wait for it). */
CUresult gvm_spill_down_to(int device, size_t limit, size_t *moved);

/* Called before a kernel launch with the regions its arguments reach (not
 * yet announced): spilled ones are brought back to their device now, after
 * enough regions the launch does not use have left to make room; where
 * option swap_in says so (by default, data on a peer GPU), only when they
 * fit without others leaving: else the kernel reads them in place. */
void gvm_policy_before_launch(struct gvm_region *const *used, int n);

#endif
