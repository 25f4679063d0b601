/* Host pieces pinned by registering pages of the process's own
 * (cuMemHostRegister) instead of creating them (cuMemCreate): a copy to or
 * from host memory needs only pinned pages, and these come far faster
 * where a move has none ready. One H100 host, 2026-11-27 (scripts/probe/
 * pinrate.c): cuMemCreate of host memory 5.2 GB/s on 1, 4 or 8 threads
 * (the driver serializes it), registering 50-54 GB/s, and zeroing the
 * pages (huge pages, the kernel's first-touch fault) 8.4 GB/s on one
 * thread, 36.5 on eight; a first 8 GiB unmapped pause, its pieces made
 * this way on 8 threads beside its copies, 28.6-29.7 GB/s against 4.6-5.0
 * (without huge pages 14.5). They have no handle, so nothing maps them at
 * an allocation's addresses: they serve what only copies, the shelf (lazy
 * spills, unmapped pauses); mapping a shelf in place copies them into
 * created pieces first. Their staging address is the host pointer, which
 * every context's copies reach (registered portable). */
#ifndef GVM_HOSTPIN_H
#define GVM_HOSTPIN_H

#include "core/piece.h"

#include <stdbool.h>

/* Whether pieces may be registered: the setting, and a driver with the
 * entry points. */
bool gvm_hostpin_usable(void);

/* A registered host piece of `size` bytes (a multiple of the page size),
 * counted as held at GVM_LOC_HOST like a created one; the pages are
 * zeroed by the calling thread (page faults run in parallel across
 * threads, the driver's creation does not). Registered in the primary
 * context of dev (the device whose copies use it: a context it already
 * has), which also unregisters it. CUDA_ERROR_OUT_OF_MEMORY, nothing
 * touched, when the kernel has less than size and 1 GiB available. */
CUresult gvm_hostpin_create(size_t size, int dev, struct gvm_phys **out);

/* Where the kernel's free memory is read (MemAvailable): a piece is
 * registered only while 1 GiB more than it is available. Tests point it
 * at a file of their own; NULL or a missing file: no check. */
void gvm_hostpin_set_meminfo(const char *path);

/* dev's primary context was reset, taking the registrations made in it:
 * pieces registered there are plain host memory from now on (copies still
 * work, from pageable pages), and are unmapped without unregistering. */
void gvm_hostpin_forget(int dev);

/* Unregisters and unmaps p's pages and frees p (gvm_phys_destroy calls it
 * for registered pieces). */
void gvm_hostpin_destroy(struct gvm_phys *p);

#endif
