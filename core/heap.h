/* The program's allocations: serve, find, free. Large allocations own a
 * region (reused from a per-device cache of mapped regions when a freed one
 * of the same size is there); small ones live in slab chunks. */
#ifndef GVM_HEAP_H
#define GVM_HEAP_H

#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

/* One allocation of the program, found from any address inside it. */
struct gvm_ref {
    struct gvm_region *region;   /* its region (a chunk for small ones) */
    uintptr_t base;              /* the address the program was given (in the view p is in) */
    size_t off;                  /* its offset from the region's base */
    size_t size;                 /* the size it asked for */
    int slot;                    /* slot in a chunk, -1 for large ones */
};

/* Where a new allocation goes. */
struct gvm_place {
    int loc;                     /* device ordinal or GVM_LOC_HOST */
    uint64_t interleave;         /* nonzero: stripe 2 MiB pieces over these devices */
    bool spill;                  /* loc only for lack of room: it belongs on its device (its
                                    home), is counted as a spill and promoted when room returns */
};

/* No reservation can be larger than the 47-bit user address space: larger
 * requests fail with CUDA_ERROR_OUT_OF_MEMORY as natively, before any
 * rounding of their size could wrap. */
#define GVM_HEAP_ALLOC_MAX ((size_t)1 << 47)

/* Serves size bytes for the program on `device` (its current context ctx),
 * placed as `place` says. Returns the driver error a native cuMemAlloc
 * would give (CUDA_ERROR_OUT_OF_MEMORY when nothing fits). */
CUresult gvm_heap_alloc(size_t size, int device, CUcontext ctx, const struct gvm_place *place,
                        int tag, uintptr_t *out);

/* Frees the allocation whose base is p, after the work that may still use
 * it is done (native cuMemFree waits too). Returns CUDA_ERROR_NOT_FOUND
 * when p is not gvmshim's (the caller passes it through) and
 * CUDA_ERROR_INVALID_VALUE for an address inside, but not at the base of,
 * an allocation. */
CUresult gvm_heap_free(uintptr_t p);

/* Finds the live allocation containing p. Lock-free. */
bool gvm_heap_find(uintptr_t p, struct gvm_ref *ref);

/* For a copy or set touching memory from p on: the region of the live
 * allocation containing p (alias resolved), with *room the bytes from p to
 * that allocation's end (the size the program asked for). NULL with
 * *room = 0 when p is in gvmshim's address space but in no live
 * allocation (freed memory, padding); NULL with *room = SIZE_MAX when p is
 * not gvmshim's. Lock-free, one address-map lookup. */
struct gvm_region *gvm_heap_span(uintptr_t p, size_t *room);

/* The region (alias resolved to its target) whose reservation contains p,
 * live or not; NULL when p is not in gvmshim's address space. */
struct gvm_region *gvm_heap_region(uintptr_t p);

/* The buffer id pointer queries report for ref. */
uint64_t gvm_heap_buffer_id(const struct gvm_ref *ref);

/* Bytes on device that gvmshim holds but the program does not use
 * (cached regions, idle chunks, pooled pieces): reported as free. */
size_t gvm_heap_idle_bytes(int device);

/* Disposes of the frees deferred while a stream capture was open, now
 * that none is (a no-op while one is, or when there are none). */
void gvm_heap_settle_deferred(void);

/* A large allocation freed cache_idle (ns; 0: never) or longer after it
 * was served is given back at once rather than cached. */
void gvm_heap_set_cache_idle(uint64_t ns);

/* Gives back the freed allocations cached on device for idle_ns or more
 * (waiting for the device, once, if their users may still run), and the
 * device's pooled pieces when none came or went for as long; returns the
 * bytes released. */
size_t gvm_heap_trim_idle(int device, uint64_t idle_ns);

/* Gives idle memory on loc back to the driver; returns bytes freed. */
size_t gvm_heap_trim(int loc);

/* Bytes of a large allocation's address headroom for `rounded` bytes. */
size_t gvm_heap_headroom(size_t rounded);

#endif
