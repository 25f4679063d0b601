/* The one operation that changes where a region's memory lives. Every
 * move — the program's gvm_migrate, the policy's spills, promotions,
 * pauses and resumes — goes through it: it takes the region's lock, checks
 * that the region's state allows the move, moves the pieces (move.h),
 * updates the region's fields and counts it. The policy decides what goes
 * where and when; it never writes a region itself. */
#ifndef GVM_RELOCATE_H
#define GVM_RELOCATE_H

#include "core/region.h"

enum gvm_reloc {
    /* The program's own move (gvm_migrate): loc becomes the region's home,
     * so the policy does not undo it. Refused while paused. */
    GVM_RELOC_EXPLICIT = 1 << 0,
    /* The policy sends a region that lies wholly on its home device to loc
     * (a peer or host): stamped as spilled, counted as a spill. Refused
     * when paused, pinned, or not wholly at home. */
    GVM_RELOC_SPILL = 1 << 1,
    /* The policy brings a spilled region to loc (its home): the stamp is
     * cleared, counted as a promotion. Refused when not spilled, paused or
     * pinned. */
    GVM_RELOC_PROMOTE = 1 << 2,
    /* gvm_pause: loc GVM_LOC_HOST keeps the contents there (readable);
     * GVM_LOC_NONE releases the memory without a copy (resume gives zeroed
     * memory). Refused when already paused. */
    GVM_RELOC_PAUSE = 1 << 3,
    /* gvm_resume: back to where it was paused from (loc is not used).
     * Refused when not paused. */
    GVM_RELOC_RESUME = 1 << 4,
    /* With GVM_RELOC_PAUSE to GVM_LOC_HOST: the copy waits unmapped, on the
     * shelf (core/shelf.h); touching the memory faults until the resume.
     * With GVM_RELOC_SPILL to GVM_LOC_HOST (spill_host_map=lazy): the same
     * for a spill, where the region allows it (an allocation of its own
     * that no alias shows); the program's calls that reach it map it first
     * (GVM_RELOC_MAPPED), kernels bring it back or map it (policy/spill.c). */
    GVM_RELOC_SHELVE = 1 << 5,
    /* Alone: a lazily spilled region gets its shelf mapped at its
     * addresses (it stays on host, readable by every pointer); any other
     * region is left as it is. Allowed in every state: a paused region
     * mapped stays paused. */
    GVM_RELOC_MAPPED = 1 << 6,
    /* With GVM_RELOC_PAUSE | GVM_RELOC_SHELVE: a pause that keeps its copy
     * readable, as one without GVM_RELOC_SHELVE, whose host memory is
     * mapped at the region's addresses only once the program reaches them
     * (its shelf counts as a lazy spill's: the calls that reach it map it
     * first, GVM_RELOC_MAPPED). Creating pinned host memory to map costs
     * ~250 ms/GiB (bench/RESULTS.md, pinned-memory creation rate); the
     * shelf takes the process's own pages, registered at the link's speed,
     * so the device memory is free at the speed of the copy. A region whose
     * state does not allow a lazy copy (region.h, shelvable in
     * relocate.c) is paused mapped. */
    GVM_RELOC_MAP_LATER = 1 << 7,
    /* No flag says "the caller has waited already": a wait counts only
     * when made after the move holds the region (a launch reaching it is
     * then queued already, or waits for the move: core/move.h), so every
     * move makes its own. */
};

/* Relocates r as `how` says. Returns CUDA_SUCCESS; CUDA_ERROR_NOT_FOUND
 * when r is not a live allocation's region; CUDA_ERROR_NOT_PERMITTED when
 * its state refuses this move (see above; nothing was done); or the error
 * of a failed move, after which r is exactly as it was. */
CUresult gvm_relocate(struct gvm_region *r, int loc, unsigned how);

/* The same, for a caller that holds r->op already. */
CUresult gvm_relocate_locked(struct gvm_region *r, int loc, unsigned how);

/* A swap after one wait for queued work: brings the spilled region `in`
 * to its home `home` while the regions out[0..nout) leave for to[i], the
 * two directions at once on the copy engines (move.h, gvm_move_lanes).
 * The caller must know that the device has room for `in` beside what is
 * leaving (the held cap is not lifted) or, when `in` and the regions
 * leaving for host are shelved (GVM_RELOC_SHELVE), room for one unit
 * (gvm_shelf_swap_room): those hand their memory to `in` as their copies
 * finish. What leaves makes room for the next swap. A region in out that
 * is busy (another thread holds its lock) or whose state refuses a spill
 * is skipped. out_flags: GVM_RELOC_SHELVE
 * for those leaving for host. The swap waits once it holds every region
 * (no launch reaching them can slip in between the wait and the copies):
 * for their last uses when `in` comes from its shelf and all leave
 * shelved (core/usemark.h), else for the devices. Returns how many left; *in_rc
 * is gvm_relocate's answer for `in` (the wait's error when it failed). */
int gvm_relocate_swap(struct gvm_region *in, int home, struct gvm_region *const *out, const int *to, int nout,
                      unsigned out_flags, CUresult *in_rc);

/* Many regions paused to host (how GVM_RELOC_PAUSE, with or without
 * GVM_RELOC_SHELVE | GVM_RELOC_MAP_LATER), resumed (GVM_RELOC_RESUME), or
 * spilled to host (GVM_RELOC_SPILL, alone, with GVM_RELOC_SHELVE, or with
 * both: memory released for another party, core/region.h shelf_pause), as
 * one batch: one wait for the devices once every region is held, then the
 * moves back to back (gvm_move_lanes), where a move per region waited for
 * the devices each time and began only after the one before it ended.
 * Only the first lock may wait (as in a swap): a region another thread
 * holds or uses, whose state refuses the move, whose copy is on a shelf,
 * or that was discarded, is skipped (rc[i] GVM_RELOCATE_SKIPPED: move it
 * with gvm_relocate). Otherwise rc[i] is gvm_relocate's answer for r[i],
 * and before/after (n rows of ndev) its bytes on each device around the
 * move. A failed move leaves its region as it was (an out-of-memory
 * resume too: room may be made for it, then gvm_relocate); the others
 * still move. Returns how many moved. */
#define GVM_RELOCATE_SKIPPED CUDA_ERROR_NOT_READY
int gvm_relocate_batch(struct gvm_region *const *r, int n, unsigned how, CUresult *rc, size_t *before,
                       size_t *after, int ndev);

/* While on (counted: calls nest), spills leave nothing unmapped: those
 * asked to shelve (GVM_RELOC_SHELVE) map their copy on host as others
 * do. For a call whose reach is unknown (a graph's launch, a launch
 * scanned in part): it maps every lazy spill, then closes the move gate
 * (core/move.h); a lazy spill run in between by another thread would
 * leave a region it reaches unmapped, and without the hold the two could
 * chase each other for ever. */
void gvm_relocate_hold_unmapped(bool on);

/* The device a paused region comes back to: where its memory was when it
 * was paused (its home when it was on host then). Read without its lock. */
static inline int gvm_relocate_resume_device(const struct gvm_region *r)
{
    int at = GVM_LOAD(r->paused_loc);
    return at >= 0 ? at : GVM_LOAD(r->device);
}

/* True for the answers of gvm_relocate that mean "not done, by choice". */
static inline bool gvm_relocate_refused(CUresult rc)
{
    return rc == CUDA_ERROR_NOT_FOUND || rc == CUDA_ERROR_NOT_PERMITTED;
}

#endif
