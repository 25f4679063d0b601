/* Spilling: making room on a device at its limit, for a new allocation or
 * for spilled data a kernel launch is about to read. */
#ifndef GVM_POLICY_SPILL_H
#define GVM_POLICY_SPILL_H

#include "core/cuda_api.h"
#include "core/region.h"

#include <stdbool.h>
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

/* The same for memory another party needs now (a limit lowered live, a
 * process giving way to others sharing the device): the regions bound for
 * host leave as one batch (core/relocate.h, gvm_relocate_batch), and,
 * where gvm_spill_maps_later, their copies go to the process's own pinned
 * pages and are mapped at their addresses only when a call reaches them
 * (every launch maps them first: preload/hooks_launch.c): creating pinned
 * memory to map runs at ~5 GB/s (bench/RESULTS.md), registering the
 * process's pages at the link's speed. The rest as gvm_spill_down_to. */
CUresult gvm_spill_release(int device, size_t limit, size_t *moved);

/* Whether moves from outside may leave their copies to be mapped once
 * reached: pause_host_map=lazy, launches tracked, host memory mappable. */
bool gvm_spill_maps_later(void);

/* Called before a kernel launch with the regions its arguments reach (not
 * yet announced): spilled ones are brought back to their device now, after
 * enough regions the launch does not use have left to make room; where
 * option swap_in says so (by default, data on a peer GPU), only when they
 * fit without others leaving: else the kernel reads them in place. */
void gvm_policy_before_launch(struct gvm_region *const *used, int n);

/* Lazily spilled memory (spill_host_map=lazy) the program is about to
 * reach: gvm_policy_use_mapped takes r, announced with *tick
 * (gvm_use_region_in), and returns it announced with its memory mapped
 * (its shelf mapped in place, on host, when it was lazily spilled).
 * gvm_policy_map_spilled maps every lazily spilled region, for a call
 * whose reach is unknown (a graph's launch, a launch whose arguments were
 * not all scanned). Both cost one load while nothing is lazily spilled. */
struct gvm_region *gvm_policy_use_mapped(struct gvm_region *r, uint64_t *tick);
void gvm_policy_map_spilled(void);

/* Whether announced r waits lazily spilled (a cheap test, one load while
 * nothing is). */
static inline bool gvm_policy_unmapped(const struct gvm_region *r)
{
    return __builtin_expect(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED) != 0, 0) &&
           __atomic_load_n(&r->shelf_spill, __ATOMIC_RELAXED);
}

#endif
