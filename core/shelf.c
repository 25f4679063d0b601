#include "core/shelf.h"

#include "core/driver.h"
#include "core/log.h"
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

/* Issues the copies of every block through the region's own addresses
 * into the pieces' staging mappings; the devices whose streams carry them
 * are added to *streams (put_end waits for them, also after a failure:
 * the pieces go back to the pool afterwards). */
static CUresult copy_out(struct gvm_region *r, struct gvm_phys *const *pieces, uint32_t *streams)
{
    CUresult rc = CUDA_SUCCESS;
    int k = 0;
    for (int i = 0; i < r->nblocks && rc == CUDA_SUCCESS;) {
        int dev = copier_of(r, &r->blocks[i]);
        CUstream s = NULL;
        if ((rc = gvm_topo_push(dev)) != CUDA_SUCCESS) break;
        if ((rc = gvm_topo_stream(dev, GVM_OUT_OF, &s)) == CUDA_SUCCESS) *streams |= 1u << dev;
        for (; rc == CUDA_SUCCESS && i < r->nblocks && copier_of(r, &r->blocks[i]) == dev; i++) {
            const struct gvm_block *b = &r->blocks[i];
            for (size_t o = 0; rc == CUDA_SUCCESS && o < b->size; o += pieces[k++]->size)
                rc = DRV(cuMemcpyDtoDAsync_v2, pieces[k]->staging, (CUdeviceptr)(r->base + b->off + o),
                         pieces[k]->size, s);
        }
        gvm_topo_pop();
    }
    return rc;
}

/* Waits for the copies on the streams of `streams` in direction dir. */
static CUresult wait_streams(uint32_t streams, int dir)
{
    CUresult rc = CUDA_SUCCESS;
    for (int dev = 0; streams; dev++, streams >>= 1) {
        if (!(streams & 1)) continue;
        CUstream s = NULL;
        CUresult done = gvm_topo_push(dev);
        if (done == CUDA_SUCCESS) {
            if ((done = gvm_topo_stream(dev, dir, &s)) == CUDA_SUCCESS) done = DRV(cuStreamSynchronize, s);
            gvm_topo_pop();
        }
        if (rc == CUDA_SUCCESS) rc = done;
    }
    return rc;
}

/* Unmaps every block, keeping its piece in old[i]; a failure maps back
 * those already unmapped. */
static CUresult unmap_blocks(struct gvm_region *r, struct gvm_phys **old)
{
    for (int i = 0; i < r->nblocks; i++) {
        CUresult rc = gvm_region_unmap_block(r, i, &old[i]);
        if (rc == CUDA_SUCCESS) continue;
        while (i-- > 0)
            if (gvm_region_map_block(r, i, old[i]) != CUDA_SUCCESS) {
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
    free(op->sizes);
    free(op->pieces);
    free(op->old);
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

void gvm_shelf_put_begin(struct gvm_shelf_op *op, struct gvm_region *r, bool quiesced, bool spill, const char *why)
{
    *op = (struct gvm_shelf_op){
        .r = r, .why = why, .spill = spill, .t0 = gvm_trace_now(), .from = gvm_region_location(r)};
    size_t cap = piece_cap();
    op->n = cut_blocks(r, cap, NULL);
    op->sizes = calloc((size_t)op->n + 1, sizeof *op->sizes);
    op->pieces = calloc((size_t)op->n + 1, sizeof *op->pieces);
    op->old = calloc((size_t)r->nblocks + 1, sizeof *op->old);
    CUresult rc = op->sizes && op->pieces && op->old ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        cut_blocks(r, cap, op->sizes);
        /* A kernel still writing the region would write after the copy. */
        if (!quiesced) rc = gvm_topo_quiesce();
    }
    if (rc == CUDA_SUCCESS) rc = get_pieces(GVM_LOC_HOST, op->sizes, op->n, op->pieces);
    if (rc == CUDA_SUCCESS) op->got = true;
    if (rc == CUDA_SUCCESS) rc = copy_out(r, op->pieces, &op->streams);
    op->rc = rc;
}

CUresult gvm_shelf_put_end(struct gvm_shelf_op *op)
{
    struct gvm_region *r = op->r;
    CUresult done = wait_streams(op->streams, GVM_OUT_OF);
    if (op->rc == CUDA_SUCCESS) op->rc = done;
    if (op->rc == CUDA_SUCCESS) op->rc = unmap_blocks(r, op->old);
    if (op->rc == CUDA_SUCCESS) {
        for (int i = 0; i < r->nblocks; i++) gvm_phys_put(op->old[i]);
        gvm_region_set_shelf(r, op->pieces, op->n, op->spill);
        op->pieces = NULL;
    } else if (op->got) {
        for (int k = 0; k < op->n; k++) gvm_phys_put(op->pieces[k]);
    }
    trace_op(op, GVM_LOC_HOST);
    op_free(op);
    return op->rc;
}

CUresult gvm_shelf_put(struct gvm_region *r, bool quiesced, bool spill, const char *why)
{
    struct gvm_shelf_op op;
    gvm_shelf_put_begin(&op, r, quiesced, spill, why);
    return gvm_shelf_put_end(&op);
}

/* Fresh memory for block i, filled from the shelf pieces from *k on and
 * mapped at the region's addresses (the copy may still run: nothing reads
 * the region before the take returns). A block still mapped (a rollback
 * that could not unmap it) keeps its piece. */
static CUresult take_block(struct gvm_region *r, int i, int dev, CUstream s, int *k)
{
    struct gvm_block *b = &r->blocks[i];
    struct gvm_phys *p = NULL;
    CUresult rc = b->phys ? CUDA_SUCCESS : get_pieces(dev, &b->size, 1, &p);
    for (size_t o = 0; o < b->size && *k < r->nshelf; o += r->shelf[(*k)++]->size)
        if (rc == CUDA_SUCCESS && p)
            rc = DRV(cuMemcpyDtoDAsync_v2, p->staging + o, r->shelf[*k]->staging, r->shelf[*k]->size, s);
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
        else
            gvm_warn("cannot unmap %#lx after a failed resume; the next resume keeps what it holds",
                     (unsigned long)(r->base + r->blocks[i].off));
    }
}

void gvm_shelf_take_begin(struct gvm_shelf_op *op, struct gvm_region *r, int dev, const char *why)
{
    *op = (struct gvm_shelf_op){.r = r, .why = why, .t0 = gvm_trace_now(), .from = GVM_LOC_HOST, .dev = dev};
    CUstream s = NULL;
    CUresult rc = gvm_topo_push(dev);
    if (rc == CUDA_SUCCESS) {
        if ((rc = gvm_topo_stream(dev, GVM_INTO, &s)) == CUDA_SUCCESS) op->streams = 1u << dev;
        int k = 0;
        for (; rc == CUDA_SUCCESS && op->mapped < r->nblocks; op->mapped++)
            if ((rc = take_block(r, op->mapped, dev, s, &k)) != CUDA_SUCCESS) break;
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
    gvm_shelf_take_begin(&op, r, dev, why);
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
        if (placed[i] && gvm_region_unmap_block(r, i, &old) != CUDA_SUCCESS)
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

CUresult gvm_shelf_map_in_place(struct gvm_region *r)
{
    CUresult rc = split_by_pieces(r);
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
