#include "core/move.h"

#include "core/driver.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/slab.h"
#include "core/stats.h"
#include "core/topo.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

uint64_t gvm_clock;

struct gvm_region *gvm_use_begin(uintptr_t p)
{
    struct gvm_region *r = gvm_heap_region(p);
    if (r) gvm_use_region(r);
    return r;
}

void gvm_use_region(struct gvm_region *r)
{
    for (;;) {
        __atomic_fetch_add(&r->users, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&r->moving, __ATOMIC_SEQ_CST)) break;
        __atomic_fetch_sub(&r->users, 1, __ATOMIC_SEQ_CST);
        /* The mover holds r->op for the whole move: wait on it. */
        pthread_mutex_lock(&r->op);
        pthread_mutex_unlock(&r->op);
    }
    __atomic_store_n(&r->last_use, gvm_clock_tick(), __ATOMIC_RELAXED);
}

static unsigned moves_active, gate_users;

void gvm_move_gate_enter(void)
{
    for (;;) {
        __atomic_fetch_add(&gate_users, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&moves_active, __ATOMIC_SEQ_CST)) return;
        __atomic_fetch_sub(&gate_users, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&moves_active, __ATOMIC_SEQ_CST)) sched_yield();
    }
}

void gvm_move_gate_leave(void) { __atomic_fetch_sub(&gate_users, 1, __ATOMIC_SEQ_CST); }

void gvm_move_enter(struct gvm_region *r)
{
    __atomic_fetch_add(&moves_active, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&gate_users, __ATOMIC_SEQ_CST)) sched_yield();
    __atomic_store_n(&r->moving, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&r->users, __ATOMIC_SEQ_CST)) sched_yield();
}

void gvm_move_leave(struct gvm_region *r)
{
    __atomic_store_n(&r->moving, 0, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&moves_active, 1, __ATOMIC_SEQ_CST);
}

struct plan {
    int n;
    int *idx;                 /* blocks to move */
    struct gvm_phys **dst;    /* their new memory */
    struct gvm_phys **old;    /* their old memory, once remapped */
    int remapped;
};

static void plan_free(struct plan *p)
{
    free(p->idx);
    free(p->dst);
    free(p->old);
}

static CUresult plan_build(struct gvm_region *r, int loc, struct plan *p)
{
    p->n = p->remapped = 0;
    p->idx = calloc((size_t)r->nblocks + 1, sizeof *p->idx);
    p->dst = calloc((size_t)r->nblocks + 1, sizeof *p->dst);
    p->old = calloc((size_t)r->nblocks + 1, sizeof *p->old);
    if (!p->idx || !p->dst || !p->old) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < r->nblocks; i++)
        if (r->blocks[i].phys && r->blocks[i].phys->loc != loc) p->idx[p->n++] = i;
    if (!p->n) return CUDA_SUCCESS;
    /* All destinations before touching anything: failing here is free. */
    size_t *sizes = calloc((size_t)p->n, sizeof *sizes);
    if (!sizes) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int k = 0; k < p->n; k++) sizes[k] = r->blocks[p->idx[k]].size;
    CUresult rc = gvm_phys_get_many(loc, sizes, p->n, true, p->dst);
    free(sizes);
    return rc;
}

/* The device whose copy engine moves a block from src to dst. */
static int copy_device(int src, int dst)
{
    if (dst >= 0 && gvm_topo_reaches(dst, src)) return dst;
    if (src >= 0 && gvm_topo_reaches(src, dst)) return src;
    return -1;
}

static CUresult copy_block(struct gvm_region *r, struct plan *p, int k, CUevent *ev)
{
    struct gvm_block *b = &r->blocks[p->idx[k]];
    int dev = copy_device(b->phys->loc, p->dst[k]->loc);
    if (dev < 0) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    int dir = p->dst[k]->loc == dev ? GVM_INTO : GVM_OUT_OF;
    CUstream s;
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    rc = gvm_topo_stream(dev, dir, &s);
    if (rc == CUDA_SUCCESS)
        rc = DRV(cuMemcpyDtoDAsync_v2, p->dst[k]->staging, (CUdeviceptr)(r->base + b->off), b->size, s);
    if (rc == CUDA_SUCCESS) {
        *ev = gvm_topo.dev[dev].events[dir][k & 1];
        rc = DRV(cuEventRecord, *ev, s);
    }
    gvm_topo_pop();
    return rc;
}

static CUresult remap_done(struct gvm_region *r, struct plan *p, int k, CUevent ev)
{
    CUresult rc = DRV(cuEventSynchronize, ev);
    if (rc != CUDA_SUCCESS) return rc;
    rc = gvm_region_remap(r, p->idx[k], p->dst[k], &p->old[k]);
    if (rc == CUDA_SUCCESS) p->remapped = k + 1;
    return rc;
}

/* Copy block k while block k-1, already copied, is remapped. */
static CUresult pipeline(struct gvm_region *r, struct plan *p)
{
    CUevent prev = NULL, cur = NULL;
    for (int k = 0; k < p->n; k++) {
        CUresult rc = copy_block(r, p, k, &cur);
        if (rc == CUDA_SUCCESS && k > 0) rc = remap_done(r, p, k - 1, prev);
        if (rc != CUDA_SUCCESS) {
            if (k > 0 && p->remapped < k) DRV(cuEventSynchronize, prev);
            return rc;
        }
        prev = cur;
    }
    return p->n ? remap_done(r, p, p->n - 1, prev) : CUDA_SUCCESS;
}

/* Puts remapped blocks back on their old memory, which still holds the
 * data: nothing wrote to the region while it was moving. */
static void rollback(struct gvm_region *r, struct plan *p)
{
    /* A copy may still be writing a destination that goes back to the pool. */
    gvm_topo_quiesce();
    for (int k = p->remapped - 1; k >= 0; k--) {
        struct gvm_phys *back = NULL;
        if (gvm_region_remap(r, p->idx[k], p->old[k], &back) == CUDA_SUCCESS) {
            p->dst[k] = back;
            p->old[k] = NULL;
        } else {
            gvm_error("rollback of block %d at %#lx failed: it stays at location %d", p->idx[k],
                      (unsigned long)r->base, p->dst[k]->loc);
            p->dst[k] = NULL;
        }
    }
    for (int k = 0; k < p->n; k++)
        if (p->dst[k]) gvm_phys_put(p->dst[k]);
}

static void count_move(struct gvm_region *r, struct plan *p, int loc)
{
    for (int k = 0; k < p->n; k++) gvm_stat_add(bytes_migrated, r->blocks[p->idx[k]].size);
    int from = p->old[0]->loc;
    if (loc == GVM_LOC_HOST)
        gvm_stat_inc(migrations_d2h);
    else if (from == GVM_LOC_HOST)
        gvm_stat_inc(migrations_h2d);
    else
        gvm_stat_inc(migrations_d2d);
}

/* Our own synchronizations must not break a capture another thread runs
 * in global mode, nor be refused because of it. */
static CUstreamCaptureMode relax_capture(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (gvm_drv.cuThreadExchangeStreamCaptureMode) DRV(cuThreadExchangeStreamCaptureMode, &m);
    return m;
}

static void restore_capture(CUstreamCaptureMode m)
{
    if (gvm_drv.cuThreadExchangeStreamCaptureMode) DRV(cuThreadExchangeStreamCaptureMode, &m);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static CUresult move_blocks(struct gvm_region *r, int loc, bool quiesce);

CUresult gvm_move_blocks(struct gvm_region *r, int loc) { return move_blocks(r, loc, true); }

CUresult gvm_move_blocks_quiesced(struct gvm_region *r, int loc) { return move_blocks(r, loc, false); }

static CUresult move_blocks(struct gvm_region *r, int loc, bool quiesce)
{
    struct plan p = {0};
    double t0 = now_ms();
    CUresult rc = plan_build(r, loc, &p);
    if (rc != CUDA_SUCCESS || !p.n) {
        plan_free(&p);
        return rc;
    }
    double t1 = now_ms();
    CUstreamCaptureMode mode = relax_capture();
    rc = quiesce ? gvm_topo_quiesce() : CUDA_SUCCESS;
    double t2 = now_ms();
    if (rc == CUDA_SUCCESS) rc = pipeline(r, &p);
    restore_capture(mode);
    gvm_debug("move of %#lx to %d: destinations %.2f ms, quiesce %.2f ms, copy+remap %.2f ms",
              (unsigned long)r->base, loc, t1 - t0, t2 - t1, now_ms() - t2);
    if (rc != CUDA_SUCCESS) {
        rollback(r, &p);
        r->last_error = rc;
        gvm_stat_inc(migrations_failed);
        gvm_warn("moving %#lx to location %d failed (driver error %d); it is unchanged",
                 (unsigned long)r->base, loc, rc);
    } else {
        count_move(r, &p, loc);
        for (int k = 0; k < p.n; k++) gvm_phys_put(p.old[k]);
        r->buffer_id = gvm_next_buffer_id();
        if (r->kind == GVM_REGION_CHUNK) gvm_slab_renew_ids(r);
        gvm_debug("moved %#lx (%d pieces) to location %d", (unsigned long)r->base, p.n, loc);
    }
    plan_free(&p);
    return rc;
}

CUresult gvm_move_region(struct gvm_region *r, int loc)
{
    pthread_mutex_lock(&r->op);
    gvm_move_enter(r);
    CUresult rc = gvm_move_blocks(r, loc);
    gvm_move_leave(r);
    pthread_mutex_unlock(&r->op);
    return rc;
}
