#include "core/shelf.h"

#include "core/driver.h"
#include "core/log.h"
#include "core/phys_batch.h"
#include "core/move.h"
#include "core/settings.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/trace.h"

#include <stdlib.h>

/* Host pieces of at most the block size, as a move to host cuts them:
 * what the host pool holds, ready and staged. */
static size_t piece_cap(void)
{
    size_t cap = gvm_settings.block_size / gvm_topo.gran * gvm_topo.gran;
    return cap ? cap : gvm_topo.gran;
}

/* Each block cut on its own, so no piece straddles two blocks. */
static int cut_blocks(const struct gvm_region *r, size_t cap, size_t *sizes)
{
    int n = 0;
    for (int i = 0; i < r->nblocks; i++)
        for (size_t left = r->blocks[i].size; left; n++) {
            size_t s = left < cap ? left : cap;
            if (sizes) sizes[n] = s;
            left -= s;
        }
    return n;
}

/* The device whose engine copies block b out: its own, or for memory on
 * host the allocating device, which always reaches the region. */
static int copier_of(const struct gvm_region *r, const struct gvm_block *b)
{
    return b->phys->loc >= 0 ? b->phys->loc : r->device;
}

/* Marks the end of unit u's copies on s (the context pushed). An event
 * the driver will not make ends the hand-off there: the rest of the
 * region leaves at put_end, as without one. */
static void mark_unit(struct gvm_shelf_op *op, int u, CUstream s)
{
    CUevent ev = NULL;
    if (DRV(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        if (DRV(cuEventRecord, ev, s) == CUDA_SUCCESS) {
            op->unit_done[u] = ev;
            return;
        }
        DRV(cuEventDestroy_v2, ev);
    }
    op->nunits = u;
}

/* Copies between a region's addresses and a host piece: through its
 * staging mapping, or into and out of its registered pages. */
static CUresult copy_to_piece(struct gvm_phys *h, CUdeviceptr src, CUstream s)
{
    return h->host ? DRV(cuMemcpyDtoHAsync_v2, h->host, src, h->size, s)
                   : DRV(cuMemcpyDtoDAsync_v2, h->staging, src, h->size, s);
}

static CUresult copy_from_piece(CUdeviceptr dst, struct gvm_phys *h, CUstream s)
{
    return h->host ? DRV(cuMemcpyHtoDAsync_v2, dst, h->host, h->size, s)
                   : DRV(cuMemcpyDtoDAsync_v2, dst, h->staging, h->size, s);
}

/* Issues the copies of every block through the region's own addresses
 * into the pieces' staging mappings; the devices whose streams carry them
 * are added to op->streams (put_end waits for them, also after a failure:
 * the pieces go back to the pool afterwards). A hand-off marks the end of
 * each unit. */
static CUresult copy_out(struct gvm_shelf_op *op)
{
    struct gvm_region *r = op->r;
    struct gvm_phys *const *pieces = op->pieces;
    CUresult rc = CUDA_SUCCESS;
    int k = 0, u = 0;
    for (int i = 0; i < r->nblocks && rc == CUDA_SUCCESS;) {
        int dev = copier_of(r, &r->blocks[i]);
        CUstream s = NULL;
        if ((rc = gvm_topo_push(dev)) != CUDA_SUCCESS) break;
        if ((rc = gvm_topo_stream(dev, GVM_OUT_OF, &s)) == CUDA_SUCCESS) op->streams |= 1u << dev;
        for (; rc == CUDA_SUCCESS && i < r->nblocks && copier_of(r, &r->blocks[i]) == dev; i++) {
            const struct gvm_block *b = &r->blocks[i];
            for (size_t o = 0; rc == CUDA_SUCCESS && o < b->size; o += pieces[k++]->size) {
                /* A piece still being made: the copies before it run meanwhile. */
                if (op->batch && (rc = gvm_phys_batch_wait(op->batch, k)) != CUDA_SUCCESS) break;
                rc = copy_to_piece(pieces[k], (CUdeviceptr)(r->base + b->off + o), s);
            }
            if (rc == CUDA_SUCCESS && u < op->nunits && op->unit_end[u] == i + 1) mark_unit(op, u++, s);
        }
        gvm_topo_pop();
    }
    return rc;
}

/* Waits for the copies on the streams of `streams` in direction dir. A
 * stream of ours carries its context, so its wait needs no push: one that
 * failed would skip the wait, and the caller's rollback would then release
 * memory the copies still write (the simulated driver's kernels in flight
 * caught it, tests/sim/flight.c). Copies that went to the context's own
 * stream (ours refused) need it pushed. */
static CUresult wait_streams(uint32_t streams, int dir)
{
    CUresult rc = CUDA_SUCCESS;
    for (int dev = 0; streams; dev++, streams >>= 1) {
        if (!(streams & 1)) continue;
        CUstream s = gvm_topo_stream_made(dev, dir);
        CUresult done;
        if (s) {
            done = DRV(cuStreamSynchronize, s);
        } else if ((done = gvm_topo_push(dev)) == CUDA_SUCCESS) {
            done = DRV(cuStreamSynchronize, NULL);
            gvm_topo_pop();
        }
        if (rc == CUDA_SUCCESS) rc = done;
    }
    return rc;
}

/* Unmaps blocks [b0, b1), keeping each piece in old[i]; a failure maps
 * back those already unmapped. */
static CUresult unmap_range(struct gvm_region *r, struct gvm_phys **old, int b0, int b1)
{
    for (int i = b0; i < b1; i++) {
        CUresult rc = gvm_region_unmap_block(r, i, &old[i]);
        if (rc == CUDA_SUCCESS) continue;
        while (i-- > b0)
            if (gvm_region_map_block(r, i, old[i]) != CUDA_SUCCESS) {
                if (!gvm_driver_gone(CUDA_SUCCESS))
                    gvm_error("cannot map %#lx back after a failed pause: that piece of it is lost",
                              (unsigned long)(r->base + r->blocks[i].off));
                gvm_phys_put(old[i]);
            }
        return rc;
    }
    return CUDA_SUCCESS;
}

/* Pooled or created, staged; idle memory at loc given back once if they
 * do not fit, as a move does. */
static CUresult get_pieces(int loc, const size_t *sizes, int n, struct gvm_phys **out)
{
    CUresult rc = gvm_phys_get_many(loc, sizes, n, true, out);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_move_make_room(loc)) rc = gvm_phys_get_many(loc, sizes, n, true, out);
    return rc;
}

static void op_free(struct gvm_shelf_op *op)
{
    for (int u = 0; op->unit_done && u < op->r->nblocks; u++)
        if (op->unit_done[u]) DRV(cuEventDestroy_v2, op->unit_done[u]);
    free(op->unit_end);
    free(op->unit_done);
    free(op->sizes);
    free(op->pieces);
    free(op->old);
    op->unit_end = NULL;
    op->unit_done = NULL;
    op->sizes = NULL;
    op->pieces = NULL;
    op->old = NULL;
}

static void trace_op(const struct gvm_shelf_op *op, int to)
{
    if (__atomic_load_n(&gvm_trace_enabled, __ATOMIC_RELAXED))
        gvm_trace_move(op->why, op->r->base, op->r->mapped, op->from, to, op->t0, gvm_trace_now(),
                       op->rc == CUDA_SUCCESS);
}

/* ---- hand-off -------------------------------------------------------------
 *
 * In a swap the region coming in needed room for all of itself beside the
 * regions leaving, whose memory went back only once their copies were all
 * done: on the read loop at 1.25x the limit that room was 128 MiB of
 * the device's slots (30 weights resident where 31 fit; natively the loop
 * runs at 1.32x the bound with 31 and 1.47x with 30, scripts/probe
 * overlap.py, one H100, 2026-11-26). A put begun with hand-off instead
 * gives its device memory to the take unit by unit (a unit: blocks of at
 * least the block size, each block one host piece, all on one device), as
 * soon as the unit's copy is done, so a swap needs room for one unit and
 * the copies of both directions still overlap. The contents of a handed
 * unit then live only in its host pieces until put_end; a put that fails
 * after that copies them back (restore_block). */

/* Units of at least cap bytes, where the put may hand off at all. */
static void plan_units(struct gvm_shelf_op *op, size_t cap)
{
    struct gvm_region *r = op->r;
    op->dev = -1;
    if (!r->nblocks || op->n != r->nblocks || !r->blocks[0].phys) return;
    int dev = r->blocks[0].phys->loc;
    for (int i = 0; i < r->nblocks; i++)
        if (!r->blocks[i].phys || r->blocks[i].phys->loc != dev) return;
    if (dev < 0) return;
    op->unit_end = calloc((size_t)r->nblocks, sizeof *op->unit_end);
    op->unit_done = calloc((size_t)r->nblocks, sizeof *op->unit_done);
    if (!op->unit_end || !op->unit_done) return;   /* op_free frees either */
    size_t bytes = 0;
    for (int i = 0; i < r->nblocks; i++) {
        bytes += r->blocks[i].size;
        if (bytes >= cap || i + 1 == r->nblocks) {
            op->unit_end[op->nunits++] = i + 1;
            bytes = 0;
        }
    }
    op->dev = dev;
}

/* Frees room at dev for a take: the device memory of the next unit of
 * the swap's puts whose copy is done (waited for). False when none is
 * left; a put whose unit cannot leave fails (put_end restores it). */
static bool hand_off_next_unit(struct gvm_shelf_op *puts, int n, int dev)
{
    for (int i = 0; i < n; i++) {
        struct gvm_shelf_op *o = &puts[i];
        if (!o->r || o->rc != CUDA_SUCCESS || o->dev != dev || o->released >= o->nunits) continue;
        int b1 = o->unit_end[o->released];
        CUresult rc = DRV(cuEventSynchronize, o->unit_done[o->released]);
        if (rc == CUDA_SUCCESS) rc = unmap_range(o->r, o->old, o->handed, b1);
        if (rc != CUDA_SUCCESS) {
            o->rc = rc;
            continue;
        }
        for (int b = o->handed; b < b1; b++) {
            gvm_phys_put(o->old[b]);
            o->old[b] = NULL;
        }
        o->handed = b1;
        o->released++;
        gvm_stat_inc(swap_handoffs);
        return true;
    }
    return false;
}

/* Copies host piece h into piece p (staged) on dev's engine, and waits;
 * without a stream of ours (its event refused), on the context's own. */
static CUresult copy_back(struct gvm_phys *p, struct gvm_phys *h, int dev)
{
    CUstream s = NULL;
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    (void)gvm_topo_stream(dev, GVM_INTO, &s);   /* s stays NULL when refused */
    rc = copy_from_piece(p->staging, h, s);
    /* Also after a failed copy: what was queued before, ahead of the piece's reuse. */
    CUresult done = DRV(cuStreamSynchronize, s);
    gvm_topo_pop();
    return rc != CUDA_SUCCESS ? rc : done;
}

/* A registered piece has no handle to map at a region's addresses: *h is
 * replaced by a created piece holding its bytes (copied on dev's engine,
 * which reaches every host piece). On failure *h is as it was. */
static CUresult with_handle(struct gvm_phys **h, int dev)
{
    if (!(*h)->host) return CUDA_SUCCESS;
    struct gvm_phys *p = NULL;
    CUresult rc = get_pieces(GVM_LOC_HOST, &(*h)->size, 1, &p);
    /* Tried twice: where this serves a failed put, the bytes are nowhere else. */
    if (rc == CUDA_SUCCESS && (rc = copy_back(p, *h, dev)) != CUDA_SUCCESS) rc = copy_back(p, *h, dev);
    if (rc != CUDA_SUCCESS) {
        gvm_phys_put(p);
        return rc;
    }
    gvm_phys_put(*h);
    *h = p;
    return CUDA_SUCCESS;
}

/* Block i of a failed put, handed off, gets its contents back at its
 * addresses: in fresh device memory, or, when the device has no room
 * left for it (the take holds it), its host piece mapped in place, as a
 * spill that maps leaves memory: readable at every address either way. */
static void restore_block(struct gvm_shelf_op *op, int i)
{
    struct gvm_region *r = op->r;
    struct gvm_phys *h = op->pieces[i], *p = NULL;   /* one piece per block in a hand-off */
    CUresult rc = get_pieces(op->dev, &r->blocks[i].size, 1, &p);
    if (rc == CUDA_SUCCESS) rc = copy_back(p, h, op->dev);
    if (rc == CUDA_SUCCESS) rc = gvm_region_map_block(r, i, p);
    if (rc == CUDA_SUCCESS) return;
    if (p) gvm_phys_put(p);
    CUresult placed = with_handle(&op->pieces[i], op->dev);
    if (placed == CUDA_SUCCESS) placed = gvm_region_map_block(r, i, op->pieces[i]);
    if (placed == CUDA_SUCCESS) {
        op->pieces[i] = NULL;   /* the region's now */
        gvm_warn("%#lx+%zu stays in host memory after a failed spill (driver error %d)", (unsigned long)r->base,
                 r->blocks[i].off, rc);
        return;
    }
    if (!gvm_driver_gone(placed))   /* else it went with the driver */
        gvm_error("cannot put %#lx+%zu back after a failed spill: that piece of it is lost", (unsigned long)r->base,
                  r->blocks[i].off);
}

/* ---- put and take ---------------------------------------------------------- */

/* The put's host pieces: pooled ones at once, the others made while the
 * copies into the first run (a first spill or pause finds no pool ready:
 * creating pinned memory was its whole cost). Only copies reach them, so
 * they may be registered pages. Idle memory given back once if they do
 * not fit, as a move does. */
static CUresult start_pieces(struct gvm_shelf_op *op)
{
    int dev = op->r->device;   /* it has a context: the program allocated there */
    CUresult rc = gvm_phys_batch_start(GVM_LOC_HOST, op->sizes, op->n, true, dev, op->pieces, &op->batch);
    if (rc != CUDA_ERROR_OUT_OF_MEMORY || !gvm_move_make_room(GVM_LOC_HOST)) return rc;
    return gvm_phys_batch_start(GVM_LOC_HOST, op->sizes, op->n, true, dev, op->pieces, &op->batch);
}

void gvm_shelf_put_begin(struct gvm_shelf_op *op, struct gvm_region *r, bool quiesced, bool spill, bool hand_off,
                         const char *why)
{
    *op = (struct gvm_shelf_op){
        .r = r, .why = why, .spill = spill, .t0 = gvm_trace_now(), .from = gvm_region_location(r), .dev = -1};
    size_t cap = piece_cap();
    op->n = cut_blocks(r, cap, NULL);
    op->sizes = calloc((size_t)op->n + 1, sizeof *op->sizes);
    op->pieces = calloc((size_t)op->n + 1, sizeof *op->pieces);
    op->old = calloc((size_t)r->nblocks + 1, sizeof *op->old);
    CUresult rc = op->sizes && op->pieces && op->old ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        cut_blocks(r, cap, op->sizes);
        if (hand_off) plan_units(op, cap);
        /* A kernel still writing the region would write after the copy. */
        if (!quiesced) rc = gvm_topo_quiesce();
    }
    if (rc == CUDA_SUCCESS) {
        op->got = true;
        rc = start_pieces(op);
    }
    if (rc == CUDA_SUCCESS) rc = copy_out(op);
    if (op->batch) {
        CUresult made = gvm_phys_batch_end(op->batch, rc != CUDA_SUCCESS);
        op->batch = NULL;
        if (rc == CUDA_SUCCESS) rc = made;
    }
    op->rc = rc;
}

CUresult gvm_shelf_put_end(struct gvm_shelf_op *op)
{
    struct gvm_region *r = op->r;
    CUresult done = wait_streams(op->streams, GVM_OUT_OF);
    if (op->rc == CUDA_SUCCESS) op->rc = done;
    if (op->rc == CUDA_SUCCESS) op->rc = unmap_range(r, op->old, op->handed, r->nblocks);
    if (op->rc == CUDA_SUCCESS) {
        for (int i = op->handed; i < r->nblocks; i++) gvm_phys_put(op->old[i]);
        gvm_region_set_shelf(r, op->pieces, op->n, op->spill);
        op->pieces = NULL;
    } else if (op->got) {
        for (int i = 0; i < op->handed; i++) restore_block(op, i);
        for (int k = 0; k < op->n; k++)
            if (op->pieces[k]) gvm_phys_put(op->pieces[k]);
    }
    trace_op(op, GVM_LOC_HOST);
    op_free(op);
    return op->rc;
}

CUresult gvm_shelf_put(struct gvm_region *r, bool quiesced, bool spill, const char *why)
{
    struct gvm_shelf_op op;
    gvm_shelf_put_begin(&op, r, quiesced, spill, false, why);
    return gvm_shelf_put_end(&op);
}

size_t gvm_shelf_swap_room(size_t need)
{
    size_t unit = piece_cap();
    return need < unit ? need : unit;
}

/* Fresh memory for block i, filled from the shelf pieces from *k on and
 * mapped at the region's addresses (the copy may still run: nothing reads
 * the region before the take returns). A block still mapped (a rollback
 * that could not unmap it) keeps its piece. */
static CUresult take_block(struct gvm_shelf_op *op, int i, CUstream s, int *k)
{
    struct gvm_region *r = op->r;
    struct gvm_block *b = &r->blocks[i];
    struct gvm_phys *p = NULL;
    int dev = op->dev;
    CUresult rc = b->phys ? CUDA_SUCCESS : get_pieces(dev, &b->size, 1, &p);
    while (rc == CUDA_ERROR_OUT_OF_MEMORY && hand_off_next_unit(op->puts, op->nputs, dev))
        rc = get_pieces(dev, &b->size, 1, &p);
    for (size_t o = 0; o < b->size && *k < r->nshelf; o += r->shelf[(*k)++]->size)
        if (rc == CUDA_SUCCESS && p)
            rc = copy_from_piece(p->staging + o, r->shelf[*k], s);
    if (rc == CUDA_SUCCESS && p) rc = gvm_region_map_block(r, i, p);
    if (rc != CUDA_SUCCESS && p) {
        DRV(cuStreamSynchronize, s);   /* its copies, before the piece goes back */
        gvm_phys_put(p);
    }
    return rc;
}

/* Unmaps what a failed take mapped: blocks [0, n). */
static void untake(struct gvm_region *r, int n)
{
    for (int i = 0; i < n; i++) {
        struct gvm_phys *old = NULL;
        if (!r->blocks[i].phys) continue;
        if (gvm_region_unmap_block(r, i, &old) == CUDA_SUCCESS)
            gvm_phys_put(old);
        else if (!gvm_driver_gone(CUDA_SUCCESS))
            gvm_warn("cannot unmap %#lx after a failed resume; the next resume keeps what it holds",
                     (unsigned long)(r->base + r->blocks[i].off));
    }
}

void gvm_shelf_take_begin(struct gvm_shelf_op *op, struct gvm_region *r, int dev, const char *why,
                          struct gvm_shelf_op *puts, int nputs)
{
    *op = (struct gvm_shelf_op){
        .r = r, .why = why, .t0 = gvm_trace_now(), .from = GVM_LOC_HOST, .dev = dev, .puts = puts, .nputs = nputs};
    CUstream s = NULL;
    CUresult rc = gvm_topo_push(dev);
    if (rc == CUDA_SUCCESS) {
        if ((rc = gvm_topo_stream(dev, GVM_INTO, &s)) == CUDA_SUCCESS) op->streams = 1u << dev;
        int k = 0;
        for (; rc == CUDA_SUCCESS && op->mapped < r->nblocks; op->mapped++)
            if ((rc = take_block(op, op->mapped, s, &k)) != CUDA_SUCCESS) break;
        gvm_topo_pop();
    }
    op->rc = rc;
}

CUresult gvm_shelf_take_end(struct gvm_shelf_op *op)
{
    CUresult done = wait_streams(op->streams, GVM_INTO);
    if (op->rc == CUDA_SUCCESS) op->rc = done;
    trace_op(op, op->dev);
    if (op->rc != CUDA_SUCCESS) {
        untake(op->r, op->mapped);
        return op->rc;
    }
    gvm_region_drop_shelf(op->r);
    return CUDA_SUCCESS;
}

CUresult gvm_shelf_take(struct gvm_region *r, int dev, const char *why)
{
    struct gvm_shelf_op op;
    gvm_shelf_take_begin(&op, r, dev, why, NULL, 0);
    return gvm_shelf_take_end(&op);
}

/* Where each block's shelf pieces begin: first[i] for block i, first[nb]
 * past the last used (pieces of blocks since cut off are unused). */
static void shelf_starts(const struct gvm_region *r, int *first)
{
    int k = 0;
    for (int i = 0; i < r->nblocks; i++) {
        first[i] = k;
        for (size_t o = 0; o < r->blocks[i].size && k < r->nshelf; o += r->shelf[k++]->size) {}
    }
    first[r->nblocks] = k;
}

/* Unmaps the blocks this in-place map mapped (their pieces are still the
 * shelf's). */
static void unmap_placed(struct gvm_region *r, const bool *placed)
{
    for (int i = 0; i < r->nblocks; i++) {
        struct gvm_phys *old = NULL;
        if (placed[i] && gvm_region_unmap_block(r, i, &old) != CUDA_SUCCESS && !gvm_driver_gone(CUDA_SUCCESS))
            gvm_error("cannot unmap %#lx after a failed map of spilled memory", (unsigned long)(r->base + r->blocks[i].off));
    }
}

/* Splits each unmapped block into one block per shelf piece, still
 * unmapped (from the end: the indices before stay valid). */
static CUresult split_by_pieces(struct gvm_region *r)
{
    int nb = r->nblocks;
    int *first = calloc((size_t)nb + 1, sizeof *first);
    if (!first) return CUDA_ERROR_OUT_OF_MEMORY;
    shelf_starts(r, first);
    CUresult rc = CUDA_SUCCESS;
    for (int i = nb - 1; i >= 0 && rc == CUDA_SUCCESS; i--) {
        int n = first[i + 1] - first[i];
        if (r->blocks[i].phys || n < 2) continue;
        if (gvm_region_splice(r, i, i + 1, r->shelf + first[i], n)) rc = CUDA_ERROR_OUT_OF_MEMORY;
        for (int j = i; rc == CUDA_SUCCESS && j < i + n; j++) {
            r->blocks[j].phys = NULL;
            r->blocks[j].cpu = false;
        }
    }
    free(first);
    return rc;
}

/* Registered pieces have no handle to map at r's addresses. */
static CUresult shelf_with_handles(struct gvm_region *r)
{
    CUresult rc = CUDA_SUCCESS;
    for (int k = 0; k < r->nshelf && rc == CUDA_SUCCESS; k++) rc = with_handle(&r->shelf[k], r->device);
    return rc;
}

CUresult gvm_shelf_map_in_place(struct gvm_region *r)
{
    CUresult rc = shelf_with_handles(r);
    if (rc == CUDA_SUCCESS) rc = split_by_pieces(r);
    int nb = r->nblocks;
    int *first = rc == CUDA_SUCCESS ? calloc((size_t)nb + 1, sizeof *first) : NULL;
    bool *placed = rc == CUDA_SUCCESS ? calloc((size_t)nb + 1, sizeof *placed) : NULL;
    bool *taken = rc == CUDA_SUCCESS ? calloc((size_t)r->nshelf + 1, sizeof *taken) : NULL;
    if (rc == CUDA_SUCCESS && (!first || !placed || !taken)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) shelf_starts(r, first);
    for (int i = 0; rc == CUDA_SUCCESS && i < nb; i++) {
        if (r->blocks[i].phys || first[i + 1] - first[i] != 1) continue;
        if ((rc = gvm_region_map_block(r, i, r->shelf[first[i]])) == CUDA_SUCCESS) placed[i] = true;
    }
    if (rc == CUDA_SUCCESS) {
        /* Pieces no block took (a shrink cut theirs off) go back to the pool. */
        for (int i = 0; i < nb; i++)
            if (placed[i]) taken[first[i]] = true;
        for (int k = 0; k < r->nshelf; k++)
            if (!taken[k]) gvm_phys_put(r->shelf[k]);
        gvm_region_release_shelf(r);
    } else if (placed) {
        unmap_placed(r, placed);
    }
    free(first);
    free(placed);
    free(taken);
    return rc;
}
