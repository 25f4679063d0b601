/* Per-region completion: where the policy must know that no queued work
 * still uses a region before moving it, it waits for that region's last
 * uses instead of for every device. Each kernel launch whose arguments
 * were all scanned records an event after itself, per region it named and
 * per stream (a region keeps GVM_USEMARK_STREAMS of them); any other use
 * (a copy or memset through the hooks, a launch on a stream beyond those,
 * an event that could not be recorded) stamps the region "unknown", and
 * work whose reach is not known at all (a graph, a launch whose arguments
 * were not all scanned) stamps every region so. A wait over unknown
 * regions is a whole wait (gvm_topo_quiesce) unless one begun after the
 * stamp has finished.
 *
 * The guarantee is the lazy spill's (spill_host_map=lazy): a kernel that
 * reaches a region through an address it was not given is not covered.
 * So only moves that already rely on that use it (lazy swaps: every
 * region involved spilled or spilling unmapped); all others wait for the
 * devices. Recording starts with the first such wait (itself whole), so a
 * program that never swaps lazily never pays for it. */
#ifndef GVM_USEMARK_H
#define GVM_USEMARK_H

#include "core/cuda_api.h"

#include <stdbool.h>
#include <stdint.h>

#define GVM_USEMARK_STREAMS 2

struct gvm_region;

struct gvm_usemark {
    bool busy;                            /* a spin lock: held for one driver call at most */
    uint64_t unknown;                     /* gvm_topo_quiesce_epoch() + 1 at the last use not recorded; 0: none */
    CUevent ev[GVM_USEMARK_STREAMS];      /* created on first use, kept with the record */
    CUstream stream[GVM_USEMARK_STREAMS]; /* the stream each event was last recorded on */
    uintptr_t owner[GVM_USEMARK_STREAMS]; /* for a per-thread default stream, its thread's number; else 0 */
    bool used[GVM_USEMARK_STREAMS];
    unsigned era;                         /* gvm_usemark_forget's count when its events were valid */
};

/* Whether launches record their uses (set by the first gvm_usemark_wait). */
extern bool gvm_usemark_recording;

static inline bool gvm_usemark_on(void) { return __atomic_load_n(&gvm_usemark_recording, __ATOMIC_SEQ_CST); }

/* After a launch queued on `stream` (per_thread: the calling thread's
 * default stream) that named r[0..n): an event per region after it. */
void gvm_usemark_launch(struct gvm_region *const *r, int n, CUstream stream, bool per_thread);

/* A use of r whose completion is not recorded (call after the use is
 * queued). */
void gvm_usemark_unknown(struct gvm_region *r);

/* Work that may reach any region (call after it is queued); `why` names
 * it in the debug log of the next whole wait. */
void gvm_usemark_untracked(const char *why);

/* A context was reset: every event made so far may be gone with it. Each
 * region drops its events (never touching them: the driver may hand their
 * handles to the program's new events) the next time it is used; those of
 * contexts still alive leak, a few per region and reset. */
void gvm_usemark_forget(void);

/* A reused record starts with no uses: those of its last allocation are
 * covered by the wait that let its memory be reused. */
void gvm_usemark_reset(struct gvm_region *r);

/* Waits until no queued work uses r[0..n): their recorded events, or one
 * whole wait when any use is unknown (stats use_waits counts the event
 * waits). Returns CUDA_SUCCESS or the error of the wait (a whole wait's,
 * when an event wait failed: the sticky error the devices hold, if any). */
CUresult gvm_usemark_wait(struct gvm_region *const *r, int n);

#endif
