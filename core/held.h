/* The physical memory gvmshim holds, per location: every cuMemCreate it
 * makes goes through gvm_phys_create, which reserves here first, so these
 * counts are the whole of it (live allocations, slab chunks, cached
 * regions, pools, memory freed but not yet settled, staging pieces).
 * Each location may have a cap: a reservation that would pass it fails,
 * atomically, so no two threads together can pass it either. */
#ifndef GVM_HELD_H
#define GVM_HELD_H

#include <stdbool.h>
#include <stddef.h>

/* Reserves bytes at loc; false (nothing reserved) when the cap would be
 * passed. */
bool gvm_held_reserve(int loc, size_t bytes);

/* Gives a reservation back. */
void gvm_held_release(int loc, size_t bytes);

/* Bytes held at loc now, and the most held at once so far. */
size_t gvm_held_bytes(int loc);
size_t gvm_held_peak(int loc);

/* The cap of loc (SIZE_MAX: none). */
void gvm_held_set_cap(int loc, size_t bytes);
size_t gvm_held_cap(int loc);

#endif
