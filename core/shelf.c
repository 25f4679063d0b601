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

/* Copies every block through the region's own addresses into the pieces'
 * staging mappings, and waits for the copies (also those issued before a
 * failure: the pieces go back to the pool afterwards). */
static CUresult copy_out(struct gvm_region *r, struct gvm_phys *const *pieces)
{
    CUresult rc = CUDA_SUCCESS;
    int k = 0;
    for (int i = 0; i < r->nblocks && rc == CUDA_SUCCESS;) {
        int dev = copier_of(r, &r->blocks[i]);
        CUstream s = NULL;
        if ((rc = gvm_topo_push(dev)) != CUDA_SUCCESS) break;
        rc = gvm_topo_stream(dev, GVM_OUT_OF, &s);
        for (; rc == CUDA_SUCCESS && i < r->nblocks && copier_of(r, &r->blocks[i]) == dev; i++) {
            const struct gvm_block *b = &r->blocks[i];
            for (size_t o = 0; rc == CUDA_SUCCESS && o < b->size; o += pieces[k++]->size)
                rc = DRV(cuMemcpyDtoDAsync_v2, pieces[k]->staging, (CUdeviceptr)(r->base + b->off + o),
                         pieces[k]->size, s);
        }
        CUresult done = s ? DRV(cuStreamSynchronize, s) : CUDA_SUCCESS;
        if (rc == CUDA_SUCCESS) rc = done;
        gvm_topo_pop();
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

CUresult gvm_shelf_put(struct gvm_region *r, bool quiesced)
{
    uint64_t t0 = gvm_trace_now();
    int from = gvm_region_location(r);
    size_t cap = piece_cap();
    int n = cut_blocks(r, cap, NULL);
    size_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    struct gvm_phys **pieces = calloc((size_t)n + 1, sizeof *pieces);
    struct gvm_phys **old = calloc((size_t)r->nblocks + 1, sizeof *old);
    CUresult rc = sizes && pieces && old ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        cut_blocks(r, cap, sizes);
        /* A kernel still writing the region would write after the copy. */
        if (!quiesced) rc = gvm_topo_quiesce();
    }
    if (rc == CUDA_SUCCESS) rc = get_pieces(GVM_LOC_HOST, sizes, n, pieces);
    if (rc == CUDA_SUCCESS) rc = copy_out(r, pieces);
    if (rc == CUDA_SUCCESS) rc = unmap_blocks(r, old);
    if (rc == CUDA_SUCCESS) {
        for (int i = 0; i < r->nblocks; i++) gvm_phys_put(old[i]);
        r->shelf = pieces;
        r->nshelf = n;
        pieces = NULL;
        gvm_stats_resident(GVM_LOC_HOST, (int64_t)gvm_region_shelf_bytes(r));
    } else if (pieces) {
        for (int k = 0; k < n; k++) gvm_phys_put(pieces[k]);
    }
    if (__atomic_load_n(&gvm_trace_enabled, __ATOMIC_RELAXED))
        gvm_trace_move("pause", r->base, r->mapped, from, GVM_LOC_HOST, t0, gvm_trace_now(), rc == CUDA_SUCCESS);
    free(sizes);
    free(pieces);
    free(old);
    return rc;
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

CUresult gvm_shelf_take(struct gvm_region *r, int dev)
{
    uint64_t t0 = gvm_trace_now();
    CUstream s = NULL;
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    rc = gvm_topo_stream(dev, GVM_INTO, &s);
    int i = 0, k = 0;
    for (; rc == CUDA_SUCCESS && i < r->nblocks; i++)
        if ((rc = take_block(r, i, dev, s, &k)) != CUDA_SUCCESS) break;
    CUresult done = s ? DRV(cuStreamSynchronize, s) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) rc = done;
    gvm_topo_pop();
    if (__atomic_load_n(&gvm_trace_enabled, __ATOMIC_RELAXED))
        gvm_trace_move("resume", r->base, r->mapped, GVM_LOC_HOST, dev, t0, gvm_trace_now(), rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) {
        untake(r, i);
        return rc;
    }
    gvm_region_drop_shelf(r);
    return CUDA_SUCCESS;
}
