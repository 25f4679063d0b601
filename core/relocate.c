#include "core/relocate.h"

#include "core/capture.h"
#include "core/driver.h"
#include "core/log.h"
#include "core/move.h"
#include "core/shelf.h"
#include "core/slab.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/trace.h"
#include "core/usemark.h"

#include <stdlib.h>
#include <string.h>

/* What a move is, as the trace names it. */
static const char *reason(unsigned how)
{
    if (how & GVM_RELOC_SPILL) return "spill";
    if (how & GVM_RELOC_PROMOTE) return "promote";
    if (how & GVM_RELOC_PAUSE) return "pause";
    if (how & GVM_RELOC_RESUME) return "resume";
    return "migrate";
}

static CUresult move_to(struct gvm_region *r, int loc, unsigned how)
{
    return gvm_move_blocks(r, loc, true, reason(how));
}

/* Spilled lazily: its contents wait on the shelf, its addresses unmapped. */
static bool lazy(const struct gvm_region *r) { return r->shelf_spill; }

/* Calls of unknown reach being issued (gvm_relocate_hold_unmapped). */
static unsigned unmapped_holds;

void gvm_relocate_hold_unmapped(bool on)
{
    __atomic_add_fetch(&unmapped_holds, on ? 1u : (unsigned)-1, __ATOMIC_SEQ_CST);
}

/* Whether a spill of r to host may leave it unmapped (GVM_RELOC_SHELVE):
 * not a chunk, whose free slots the program may be handed meanwhile, nor
 * a region an alias shows (the alias would keep the old memory), nor one
 * a texture or tensor map reads (no launch scan sees that read), nor
 * while a call that may reach any region is being issued. Read once the
 * move holds r (gvm_move_enter), so a move that read no hold has
 * finished by the time the holder closes the move gate. */
static bool shelvable(const struct gvm_region *r, int loc, unsigned how)
{
    return (how & GVM_RELOC_SHELVE) && loc == GVM_LOC_HOST && GVM_LOAD(r->kind) == GVM_REGION_LARGE &&
           !r->aliases && !__atomic_load_n(&r->read_by_handle, __ATOMIC_SEQ_CST) &&
           !__atomic_load_n(&unmapped_holds, __ATOMIC_SEQ_CST);
}

/* A lazy spill or its return counts as the move it is (a map in place
 * moves nothing). */
static CUresult counted(struct gvm_region *r, int to, CUresult rc)
{
    if (rc == CUDA_SUCCESS) gvm_move_count(r->mapped, to == GVM_LOC_HOST ? r->home : GVM_LOC_HOST, to);
    return rc;
}

/* A lazily spilled region taken to loc: fresh memory on a device, or
 * its shelf mapped where it is, on host. */
static CUresult unshelve(struct gvm_region *r, int loc, unsigned how)
{
    return loc >= 0 ? counted(r, loc, gvm_shelf_take(r, loc, reason(how))) : gvm_shelf_map_in_place(r);
}

/* Whether r's state allows the move `how` asks for. */
static bool allowed(const struct gvm_region *r, int loc, unsigned how)
{
    bool paused = r->flags & GVM_RF_PAUSED, pinned = r->flags & GVM_RF_PINNED;
    if (how == GVM_RELOC_MAPPED) return true;   /* maps in place: where it lives stays */
    if (how & GVM_RELOC_RESUME) return paused;
    if (paused) return false;
    /* Other processes map its pieces (core/share.h): a move would split the
     * two views. */
    if (r->flags & GVM_RF_SHARED) return false;
    if (how & GVM_RELOC_PAUSE) return !pinned;
    if (how & GVM_RELOC_SPILL) return !pinned && loc != r->home && gvm_region_location(r) == r->home;
    /* The record may have been freed and reused since the policy picked it:
     * only an allocation that belongs at loc is promoted there. */
    if (how & GVM_RELOC_PROMOTE) return !pinned && GVM_LOAD(r->spilled_at) && GVM_LOAD(r->home) == loc;
    return true;
}

/* Unmaps every piece and gives its memory back to the driver. If a piece
 * cannot be unmapped, those before it are gone already: the region counts
 * as discarded all the same, so a resume refills what is missing. */
static CUresult discard(struct gvm_region *r, bool *released)
{
    if (r->shelf) {
        gvm_region_drop_shelf(r);
        *released = true;
    }
    for (int i = 0; i < r->nblocks; i++) {
        struct gvm_phys *old = NULL;
        if (!r->blocks[i].phys) continue;
        CUresult rc = gvm_region_unmap_block(r, i, &old);
        if (rc != CUDA_SUCCESS) return rc;
        gvm_phys_destroy(old);
        *released = true;
    }
    return CUDA_SUCCESS;
}

/* A pause's bookkeeping for a region whose memory went to host. */
static void paused_at(struct gvm_region *r, int where)
{
    GVM_STORE(r->flags, r->flags | GVM_RF_PAUSED);
    GVM_STORE(r->paused_loc, where >= 0 ? where : r->home);
    gvm_stat_inc(pauses);
}

static void bytes_by_device(const struct gvm_region *r, size_t *at, int ndev)
{
    for (int d = 0; d < ndev; d++) at[d] = gvm_region_bytes_at(r, d);
}

static CUresult pause(struct gvm_region *r, int loc, unsigned how)
{
    int where = gvm_region_location(r);
    CUresult rc;
    bool released = false;
    if (loc == GVM_LOC_NONE) {
        /* Unmapping memory a kernel still reads would kill the kernel. */
        rc = gvm_topo_quiesce();
        if (rc == CUDA_SUCCESS) rc = discard(r, &released);
        if (rc == CUDA_SUCCESS || released) GVM_STORE(r->flags, r->flags | GVM_RF_DISCARDED);
    } else if ((how & GVM_RELOC_MAP_LATER) && shelvable(r, loc, how)) {
        /* Mapped when reached: a lazy spill's shelf already is. */
        rc = r->shelf ? CUDA_SUCCESS : gvm_shelf_put(r, false, true, "pause");
        if (rc == CUDA_SUCCESS) gvm_region_shelf_pause_later(r);
    } else if ((how & GVM_RELOC_SHELVE) && !(how & GVM_RELOC_MAP_LATER)) {
        rc = r->shelf ? CUDA_SUCCESS : gvm_shelf_put(r, false, false, "pause");
        if (rc == CUDA_SUCCESS) gvm_region_shelf_paused(r);   /* a lazy spill's shelf keeps the pause's copy */
    } else if (r->shelf) {
        rc = gvm_shelf_map_in_place(r);   /* the pause keeps its copy readable */
    } else {
        rc = move_to(r, GVM_LOC_HOST, how);
    }
    if (rc == CUDA_SUCCESS || released) paused_at(r, where);
    return rc;
}

/* Fresh zeroed memory for the pieces a discarding pause released. */
static CUresult refill(struct gvm_region *r, int dev)
{
    for (int i = 0; i < r->nblocks; i++) {
        if (r->blocks[i].phys) continue;
        struct gvm_phys *p = NULL;
        CUresult rc = gvm_phys_get(dev, r->blocks[i].size, false, &p);
        if (rc == CUDA_SUCCESS) rc = gvm_region_map_block(r, i, p);
        if (rc != CUDA_SUCCESS) {
            if (p && !r->blocks[i].phys) gvm_phys_put(p);
            return rc;
        }
    }
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    rc = DRV(cuMemsetD8_v2, (CUdeviceptr)r->base, 0, r->mapped);
    gvm_topo_pop();
    return rc;
}

/* A resume's bookkeeping for a region back on device dev. */
static void resumed_at(struct gvm_region *r, int dev)
{
    GVM_STORE(r->flags, r->flags & ~(unsigned)(GVM_RF_PAUSED | GVM_RF_DISCARDED));
    /* Spilled before the pause, back home now: resident again, so a
     * victim again when its device runs out of room. */
    if (dev == GVM_LOAD(r->home)) GVM_STORE(r->spilled_at, 0);
    gvm_stat_inc(resumes);
}

static CUresult resume(struct gvm_region *r, unsigned how)
{
    int dev = gvm_relocate_resume_device(r);
    CUresult rc = (r->flags & GVM_RF_DISCARDED) ? refill(r, dev)
                  : r->shelf                     ? gvm_shelf_take(r, dev, "resume")
                                                 : move_to(r, dev, how);
    if (rc == CUDA_SUCCESS) resumed_at(r, dev);
    return rc;
}

/* The region's fields and the counters after a successful move. */
static void moved(struct gvm_region *r, int loc, unsigned how)
{
    if (how & GVM_RELOC_EXPLICIT) {
        /* Where the program puts it is where it belongs: no longer spilled
         * (the policy would neither evict it nor bring it "back"). */
        GVM_STORE(r->home, loc);
        GVM_STORE(r->spilled_at, 0);
    }
    if (how & GVM_RELOC_SPILL) {
        GVM_STORE(r->spilled_at, gvm_clock_tick());
        gvm_stat_inc(spills);
        gvm_stat_add(spilled_bytes, r->mapped);
        gvm_debug("spill: moved %#lx (%zu bytes, last use %lu) from device %d to %d", (unsigned long)r->base,
                  r->mapped, (unsigned long)r->last_use, r->home, loc);
    }
    if (how & GVM_RELOC_PROMOTE) {
        GVM_STORE(r->spilled_at, 0);
        gvm_stat_inc(promotions);
        gvm_stat_add(promoted_bytes, r->mapped);
        gvm_debug("promote: moved %#lx (%zu bytes) back to %d", (unsigned long)r->base, r->mapped, loc);
    }
}

CUresult gvm_relocate_locked(struct gvm_region *r, int loc, unsigned how)
{
    /* Acquire: a reused record may have become live again under another owner. */
    if (!gvm_region_live(r) || GVM_LOAD(r->kind) == GVM_REGION_ALIAS) return CUDA_ERROR_NOT_FOUND;
    if (!allowed(r, loc, how)) return CUDA_ERROR_NOT_PERMITTED;
    /* Mapped already: nothing to do, and no wait for the calls using it. */
    if ((how & GVM_RELOC_MAPPED) && !lazy(r)) return CUDA_SUCCESS;
    gvm_move_enter(r);
    CUstreamCaptureMode mode = gvm_capture_relax();
    CUresult rc;
    if (how & GVM_RELOC_PAUSE)
        rc = pause(r, loc, how);
    else if (how & GVM_RELOC_RESUME)
        rc = resume(r, how);
    else if (lazy(r))
        rc = unshelve(r, how & GVM_RELOC_MAPPED ? GVM_LOC_HOST : loc, how);
    else if (shelvable(r, loc, how))
        rc = counted(r, loc, gvm_shelf_put(r, false, true, reason(how)));
    else
        rc = move_to(r, loc, how);
    gvm_capture_restore(mode);
    gvm_move_leave(r);
    if (rc == CUDA_SUCCESS) moved(r, loc, how);
    return rc;
}

CUresult gvm_relocate(struct gvm_region *r, int loc, unsigned how)
{
    pthread_mutex_lock(&r->op);
    CUresult rc = gvm_relocate_locked(r, loc, how);
    pthread_mutex_unlock(&r->op);
    gvm_slab_reap_skipped();
    return rc;
}

/* Takes r for a move `how` to loc: its lock and the move entered, its
 * state checked. With `try` (the regions after the first of a swap) it
 * waits for neither: a call holding r announced may be waiting for the
 * region this thread already moves. */
static bool take(struct gvm_region *r, int loc, unsigned how, bool try)
{
    if (try ? pthread_mutex_trylock(&r->op) != 0 : pthread_mutex_lock(&r->op) != 0) return false;
    if (gvm_region_live(r) && GVM_LOAD(r->kind) != GVM_REGION_ALIAS && allowed(r, loc, how)) {
        if (!try) {
            gvm_move_enter(r);
            return true;
        }
        if (gvm_move_try_enter(r)) return true;
    }
    pthread_mutex_unlock(&r->op);
    return false;
}

static void give_back(struct gvm_region *r, int loc, unsigned how, CUresult rc)
{
    gvm_move_leave(r);
    if (rc == CUDA_SUCCESS) moved(r, loc, how);
    pthread_mutex_unlock(&r->op);
}

/* The destination of r in a batch `how`, or GVM_LOC_NONE when r moves
 * on its own: a copy on a shelf, a discarded one (refilled, not moved). */
static int batch_loc(const struct gvm_region *r, unsigned how)
{
    if (r->shelf || (r->flags & GVM_RF_DISCARDED)) return GVM_LOC_NONE;
    return how & GVM_RELOC_RESUME ? gvm_relocate_resume_device(r) : GVM_LOC_HOST;
}

/* The batch's regions whose copy goes to a shelf mapped later
 * (GVM_RELOC_MAP_LATER): their puts begin after the one wait, beside the
 * mapped moves, and end after them. */
struct later {
    int *at;                    /* their indices in the batch */
    struct gvm_shelf_op *op;
    int n;
};

static void later_begin(struct later *l, struct gvm_region *const *r, unsigned how)
{
    for (int j = 0; j < l->n; j++) gvm_shelf_put_begin(&l->op[j], r[l->at[j]], true, true, false, reason(how));
}

/* A spill counts as the move it is; a copy mapped later is announced to
 * the calls that must map it first (core/region.h, shelf_pause). */
static void later_end(struct later *l, struct gvm_region *const *r, unsigned how, CUresult *rc)
{
    for (int j = 0; j < l->n; j++) {
        struct gvm_region *x = r[l->at[j]];
        CUresult got = gvm_shelf_put_end(&l->op[j]);
        if (how & GVM_RELOC_SPILL) counted(x, GVM_LOC_HOST, got);
        if (got == CUDA_SUCCESS && (how & GVM_RELOC_MAP_LATER)) gvm_region_shelf_pause_later(x);
        rc[l->at[j]] = got;
    }
}

/* The kinds of batch: pauses (mapped, or mapped once reached), resumes,
 * and spills to host (mapped, shelved, or shelved and mapped once
 * reached). */
static bool batch_kind(unsigned how)
{
    const unsigned shelve_later = GVM_RELOC_SHELVE | GVM_RELOC_MAP_LATER;
    return how == GVM_RELOC_PAUSE || how == GVM_RELOC_RESUME || how == (GVM_RELOC_PAUSE | shelve_later) ||
           how == GVM_RELOC_SPILL || how == (GVM_RELOC_SPILL | GVM_RELOC_SHELVE) ||
           how == (GVM_RELOC_SPILL | shelve_later);
}

/* Whether r's copy goes to a shelf in the batch `how`: a pause mapped
 * once reached, or a spill shelved, where r allows it. */
static bool batch_shelves(const struct gvm_region *r, unsigned how)
{
    bool pause_later = (how & GVM_RELOC_PAUSE) && (how & GVM_RELOC_MAP_LATER);
    return (pause_later || (how & GVM_RELOC_SPILL)) && shelvable(r, GVM_LOC_HOST, how);
}

/* r[i]'s end of the batch: its bookkeeping, its bytes after, its lock. */
static void batch_done(struct gvm_region *x, int i, int where, unsigned how, CUresult rc, size_t *after, int ndev)
{
    if (rc == CUDA_SUCCESS) {
        if (how & GVM_RELOC_RESUME) resumed_at(x, where);
        else if (how & GVM_RELOC_PAUSE) paused_at(x, where);
    }
    bytes_by_device(x, after + (size_t)i * (size_t)ndev, ndev);
    give_back(x, GVM_LOC_HOST, how, rc);
}

int gvm_relocate_batch(struct gvm_region *const *r, int n, unsigned how, CUresult *rc, size_t *before,
                       size_t *after, int ndev)
{
    size_t cells = (size_t)(n > 0 ? n : 1);
    struct gvm_move_req *req = calloc(cells, sizeof *req);
    int *where = calloc(cells, sizeof *where), m = 0;
    int *taken = calloc(cells, sizeof *taken), nt = 0;
    struct later later = {calloc(cells, sizeof *later.at), calloc(cells, sizeof *later.op), 0};
    for (int i = 0; i < n; i++) rc[i] = GVM_RELOCATE_SKIPPED;
    bool ok = req && where && taken && later.at && later.op;
    if (!ok || !batch_kind(how)) {
        free(req), free(where), free(taken), free(later.at), free(later.op);
        return 0;
    }
    /* Only the first lock may wait (as in a swap): a region another thread
     * holds or uses is left to the caller, and no two movers wait on each
     * other. */
    for (int i = 0; i < n; i++) {
        if (!take(r[i], GVM_LOC_HOST, how, nt > 0)) continue;
        int loc = batch_loc(r[i], how);
        if (loc == GVM_LOC_NONE) {
            give_back(r[i], loc, how, CUDA_ERROR_NOT_READY);
            continue;
        }
        where[i] = how & GVM_RELOC_RESUME ? loc : gvm_region_location(r[i]);
        bytes_by_device(r[i], before + (size_t)i * (size_t)ndev, ndev);
        taken[nt++] = i;
        if (batch_shelves(r[i], how))
            later.at[later.n++] = i;
        else
            req[m++] = (struct gvm_move_req){r[i], loc, reason(how), CUDA_SUCCESS};
    }
    /* One wait, once every region is held: a launch reaching one of them
     * is then queued already or waits for the batch (core/move.h). */
    CUresult waited = nt ? gvm_topo_quiesce() : CUDA_SUCCESS;
    if (waited == CUDA_SUCCESS && nt) {
        CUstreamCaptureMode mode = gvm_capture_relax();
        later_begin(&later, r, how);
        gvm_move_lanes(req, m, NULL, 0);
        later_end(&later, r, how, rc);
        gvm_capture_restore(mode);
    }
    /* req follows r's order: one pass finds each. */
    for (int j = 0, i = 0; j < m; j++, i++) {
        while (r[i] != req[j].r) i++;
        rc[i] = req[j].rc;
    }
    int done = 0;
    for (int j = 0; j < nt; j++) {
        int i = taken[j];
        if (waited != CUDA_SUCCESS) rc[i] = waited;
        if (rc[i] == CUDA_SUCCESS) done++;
        batch_done(r[i], i, where[i], how, rc[i], after, ndev);
    }
    gvm_slab_reap_skipped();
    free(req), free(where), free(taken), free(later.at), free(later.op);
    return done;
}

/* The lazy halves of a swap: regions leaving unmapped, and `in` when it
 * comes from its shelf, each begun before the mapped moves run (both
 * directions then share the copy engines) and ended after them. A lazy
 * `in` takes the device memory of those leaving unmapped as their copies
 * finish (core/shelf.h, hand-off), so it needs room for one unit only. */
struct lazy_half {
    struct gvm_shelf_op *put, take;   /* put[i] for req[i] where shelve[i], else zeroed */
    bool taking;
    uint64_t t[3];                    /* begun, puts issued, take issued (gvm_trace_now; the debug line) */
    int handed;                       /* units the puts handed to the take */
};

static void lazy_begin(struct lazy_half *h, struct gvm_move_req *req, const bool *shelve, int n,
                       struct gvm_move_req *in)
{
    h->taking = lazy(in->r);
    h->t[0] = gvm_trace_now();
    memset(h->put, 0, (size_t)n * sizeof *h->put);
    for (int i = 0; i < n; i++)
        if (shelve[i]) gvm_shelf_put_begin(&h->put[i], req[i].r, true, true, h->taking, req[i].why);
    h->t[1] = gvm_trace_now();
    if (h->taking) gvm_shelf_take_begin(&h->take, in->r, in->loc, in->why, h->put, n);
    h->t[2] = gvm_trace_now();
}

static void lazy_end(struct lazy_half *h, struct gvm_move_req *req, const bool *shelve, int n,
                     struct gvm_move_req *in)
{
    for (int i = 0; i < n; i++) {
        h->handed += h->put[i].released;
        if (shelve[i]) req[i].rc = counted(req[i].r, req[i].loc, gvm_shelf_put_end(&h->put[i]));
    }
    if (!h->taking) return;
    in->rc = gvm_shelf_take_end(&h->take);
    /* Its memory may have been what leaves now. */
    if (in->rc == CUDA_ERROR_OUT_OF_MEMORY) in->rc = gvm_shelf_take(in->r, in->loc, in->why);
    counted(in->r, in->loc, in->rc);
}

/* The wait before a swap's copies: for the last uses of its regions when
 * every one is lazy (in from its shelf, all leaving unmapped: the lazy
 * spill's promise covers only kernels given their addresses, as the
 * events do), else for the devices. */
static CUresult wait_for_uses(struct gvm_region *in, const struct gvm_move_req *req, const bool *shelve, int n)
{
    struct gvm_region *all[n + 1];
    all[0] = in;
    for (int i = 0; i < n; i++) {
        if (!shelve[i]) return gvm_topo_quiesce();
        all[i + 1] = req[i].r;
    }
    return lazy(in) ? gvm_usemark_wait(all, n + 1) : gvm_topo_quiesce();
}

int gvm_relocate_swap(struct gvm_region *in, int home, struct gvm_region *const *out, const int *to, int nout,
                      unsigned out_flags, CUresult *in_rc)
{
    const unsigned in_how = GVM_RELOC_PROMOTE, out_how = GVM_RELOC_SPILL | (out_flags & GVM_RELOC_SHELVE);
    *in_rc = CUDA_ERROR_NOT_PERMITTED;
    if (!take(in, home, in_how, false)) return 0;
    struct gvm_move_req req[nout > 0 ? nout : 1], mapped[nout > 0 ? nout : 1],
        back = {in, home, reason(in_how), CUDA_SUCCESS};
    bool shelve[nout > 0 ? nout : 1];
    struct gvm_shelf_op puts[nout > 0 ? nout : 1];
    int n = 0, nm = 0;
    /* Only the first lock may wait: a region another thread is moving or
     * freeing is simply not a victim, and no two swaps can wait on each
     * other. */
    for (int i = 0; i < nout; i++) {
        if (out[i] == in || !take(out[i], to[i], out_how, true)) continue;
        shelve[n] = shelvable(out[i], to[i], out_how);
        req[n++] = (struct gvm_move_req){out[i], to[i], reason(out_how), CUDA_SUCCESS};
        if (!shelve[n - 1]) mapped[nm++] = req[n - 1];
    }
    struct lazy_half h = {.put = puts};
    /* Waited for only now that every region is taken: a launch reaching
     * one of them is then either queued already (the wait covers it) or
     * waits for the swap (core/move.h). */
    CUresult rc = wait_for_uses(in, req, shelve, n);
    if (rc != CUDA_SUCCESS) {
        for (int i = 0; i < n; i++) give_back(req[i].r, req[i].loc, out_how, rc);
        give_back(in, home, in_how, rc);
        *in_rc = rc;
        return 0;
    }
    CUstreamCaptureMode mode = gvm_capture_relax();
    lazy_begin(&h, req, shelve, n, &back);
    gvm_move_lanes(mapped, nm, &back, h.taking ? 0 : 1);
    lazy_end(&h, req, shelve, n, &back);
    gvm_capture_restore(mode);
    gvm_debug("swap of %#lx: puts issued %.2f ms, take issued %.2f (%d units handed to it), mapped moves and "
              "ends %.2f", (unsigned long)in->base, (double)(h.t[1] - h.t[0]) / 1e6, (double)(h.t[2] - h.t[1]) / 1e6,
              h.handed, (double)(gvm_trace_now() - h.t[2]) / 1e6);
    for (int i = 0, j = 0; i < n; i++)
        if (!shelve[i]) req[i].rc = mapped[j++].rc;
    int gone = 0;
    for (int i = 0; i < n; i++) {
        gone += req[i].rc == CUDA_SUCCESS;
        give_back(req[i].r, req[i].loc, out_how, req[i].rc);
    }
    give_back(in, home, in_how, back.rc);
    gvm_slab_reap_skipped();
    *in_rc = back.rc;
    return gone;
}
