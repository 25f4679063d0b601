/* Moving memory under a live pointer.
 *
 * Copies and sets the program enqueues through the hooks announce
 * themselves on the regions they touch (gvm_use_begin/end). A migration
 * raises `moving`, waits until no announced call is inside, then waits for
 * all queued device work: from then on nothing the program started can
 * touch the old memory, and announced calls wait for the move to finish.
 * Each side writes, then reads the other's, all seq_cst (announce r, then
 * read moving; moving=1, then look for announcements of r): Dekker's
 * handshake, one side always sees the other (move.c). */
#ifndef GVM_MOVE_H
#define GVM_MOVE_H

#include "core/ids.h"
#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

/* The region whose address range holds p, announced as in use (waits while
 * it moves); NULL when p is not gvmshim's. Pair with gvm_use_end. */
struct gvm_region *gvm_use_begin(uintptr_t p);

/* The same for a region already found. */
void gvm_use_region(struct gvm_region *r);

/* gvm_use_region for one of the regions a single call touches: they share
 * one tick of the use clock, *tick (0 before the first of them needs one;
 * regions used together have no order among themselves). A region that
 * already holds the newest tick is left as it is: nothing was used since,
 * so it is still the most recent, and a call repeated on the same regions
 * writes neither the clock nor them (a locked add and a cache line passed
 * between threads, on every call). */
void gvm_use_region_in(struct gvm_region *r, uint64_t *tick);

/* gvm_use_region_in for the n distinct regions of one call, announced with
 * one fence where the thread's slots have room (a launch reaching several
 * allocations, a copy between two). Each is ended with gvm_use_end. */
void gvm_use_regions(struct gvm_region *const *r, int n);

/* Ends an announcement of r (NULL: nothing) on the thread that made it. */
void gvm_use_end(struct gvm_region *r);

/* Launches whose reach is not known (graphs, launches not scanned or
 * scanned in part) hold this gate for the launch call, and a move closes
 * it (and waits for holders) before it starts. Enter and leave on one
 * thread. */
void gvm_move_gate_enter(void);
void gvm_move_gate_leave(void);

/* Gives idle memory at loc back to the driver for a move's destinations
 * (as a move does when its destinations do not fit); the bytes freed. */
size_t gvm_move_make_room(int loc);

/* Counts a move of `bytes` from `from` to `to` (bytes_migrated and the
 * migration counter of its direction). */
void gvm_move_count(size_t bytes, int from, int to);

/* Marks r as being moved and waits out announced calls. */
void gvm_move_enter(struct gvm_region *r);
void gvm_move_leave(struct gvm_region *r);

/* gvm_move_enter for a thread that already moves another region: it does
 * not wait, since a call announced on r may itself be waiting for that
 * other region (a copy between the two: the stress test hung so, a swap
 * holding its incoming region while waiting out a victim's announcement).
 * False, with nothing changed, when r is in use or a graph launch is in
 * the gate. */
bool gvm_move_try_enter(struct gvm_region *r);

/* Moves every block of r that is not at loc there: destinations first
 * (failure changes nothing), then, with `quiesce`, a wait for all queued
 * work (without: the caller has just waited itself, since two moves running
 * at once, one in and one out, must not each wait for the other's copies),
 * then copy block i on the copy engines while block i-1 is remapped. `why`
 * names the move in the trace ("spill", "promote"...). Caller holds r->op
 * and has entered the move (gvm_move_enter). On failure every block is
 * back where it was. */
CUresult gvm_move_blocks(struct gvm_region *r, int loc, bool quiesce, const char *why);

/* A move of the lanes below: r to loc; rc is its result, as
 * gvm_move_blocks returns it. */
struct gvm_move_req {
    struct gvm_region *r;
    int loc;
    const char *why;
    CUresult rc;
};

/* Runs two lanes of moves at once, group by group, so that a swap's
 * outgoing copies and incoming copies share the time on the two copy
 * engines (and the CPU's remaps of one overlap the other's copies). Each
 * lane's moves run in order; each move is what gvm_move_blocks does
 * without its wait (the caller has quiesced), including its rollback. The
 * lanes must move in opposite directions or between other devices: the
 * events of one device and direction serve one move at a time. Caller
 * holds every region's op and has entered each move. */
void gvm_move_lanes(struct gvm_move_req *a, int na, struct gvm_move_req *b, int nb);

#endif
