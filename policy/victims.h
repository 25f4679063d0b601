/* Which regions the policy moves, and in what order: those that may leave
 * a device (coldest first, or in the order a swap wants), and spilled
 * ones worth bringing back (hottest first). Gathered from core's live
 * list; each region's lock is taken only by the move itself, which checks
 * again that the region still qualifies (core/relocate.h). */
#ifndef GVM_POLICY_VICTIMS_H
#define GVM_POLICY_VICTIMS_H

#include "core/region.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gvm_victim {
    struct gvm_region *r;
    uint64_t last_use;
    uint32_t next_use;   /* launches until its predicted use (policy/recur.h), when a period is known */
};

struct gvm_victims {
    struct gvm_victim *v;
    size_t n, cap;
};

/* Regions living on their home `device` that may leave it (live, neither
 * paused nor pinned), least recently used first; when the program's loop
 * is learned (policy/recur.h), those needed furthest ahead first. */
void gvm_victims_resident(int device, struct gvm_victims *out);

/* Spilled regions that belong on `device` and were used since they left,
 * most recently used first; when the loop is learned, those needed soonest
 * first. */
void gvm_victims_spilled(int device, struct gvm_victims *out);

/* Every spilled region that belongs on `device`, used since it left or
 * not, in the same order (for bringing memory home once a limit rises). */
void gvm_victims_spilled_all(int device, struct gvm_victims *out);

/* Lazily spilled regions (core/shelf.h), on every device, oldest use
 * first. */
void gvm_victims_unmapped(struct gvm_victims *out);

/* Regions to send out of `device` so that `need` bytes come in, never one
 * of keep[0..nkeep). First those idle for longer than the incoming region
 * was (`since`, its last use: its reuse distance), oldest first: truly
 * cold, like blocks a framework's allocator keeps cached. Then the most
 * recently used: a training loop sweeps its weights in order, and under
 * LRU every swap would evict exactly the weight needed next (a cyclic
 * sweep larger than the device misses on every access), while the most
 * recently used one is needed last. When the loop is learned, simply those
 * needed furthest ahead first. Returns how many (0 when they cannot make
 * `need` bytes). */
size_t gvm_victims_for_swap(int device, size_t need, uint64_t since, struct gvm_region *const *keep, int nkeep,
                            struct gvm_victims *out);

/* Whether a region other than `except` that belongs on `device` lies
 * spilled: another swap-in is to be expected. */
bool gvm_victims_more_spilled(int device, const struct gvm_region *except);

void gvm_victims_free(struct gvm_victims *v);

#endif
