/* gvm_pause / gvm_resume: release a tag's device memory with every pointer
 * kept reserved (parity with torch_memory_saver and vLLM sleep mode, for
 * programs that were not written against them). Keeping a copy moves the
 * memory to host, where it stays readable; discarding unmaps it. */
#include "gvmshim.h"

#include "core/capture.h"
#include "core/core.h"
#include "core/driver.h"
#include "core/export.h"
#include "core/log.h"
#include "core/move.h"
#include "core/topo.h"
#include "policy/spill.h"

#include <stdlib.h>

struct list {
    int tag;          /* -1: every tagged allocation */
    bool paused;      /* collect paused (resume) or live (pause) ones */
    struct gvm_region **r;
    size_t n, cap;
};

static void pick(struct gvm_region *r, void *arg)
{
    struct list *l = arg;
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS || !GVM_LOAD(r->tag)) return;
    if (l->tag >= 0 && GVM_LOAD(r->tag) != l->tag) return;
    if (((GVM_LOAD(r->flags) & GVM_RF_PAUSED) != 0) != l->paused) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        struct gvm_region **nr = realloc(l->r, cap * sizeof *nr);
        if (!nr) return;
        l->r = nr;
        l->cap = cap;
    }
    l->r[l->n++] = r;
}

static CUresult discard(struct gvm_region *r)
{
    for (int i = 0; i < r->nblocks; i++) {
        struct gvm_phys *old = NULL;
        if (!r->blocks[i].phys) continue;
        CUresult rc = gvm_region_unmap_block(r, i, &old);
        if (rc != CUDA_SUCCESS) return rc;
        gvm_phys_destroy(old);
    }
    return CUDA_SUCCESS;
}

static CUresult pause_one(struct gvm_region *r, int flags)
{
    int where = gvm_region_location(r);
    CUresult rc;
    gvm_move_enter(r);
    if (flags & GVM_PAUSE_DISCARD) {
        rc = gvm_topo_quiesce();
        if (rc == CUDA_SUCCESS) rc = discard(r);
        if (rc == CUDA_SUCCESS) r->flags |= GVM_RF_DISCARDED;
    } else {
        rc = gvm_move_blocks(r, GVM_LOC_HOST);
    }
    gvm_move_leave(r);
    if (rc == CUDA_SUCCESS) {
        GVM_STORE(r->flags, r->flags | GVM_RF_PAUSED);
        r->paused_loc = where >= 0 ? where : r->home;
        gvm_stat_inc(pauses);
    }
    return rc;
}

/* Fresh zeroed memory for the blocks a discarding pause unmapped. */
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

static CUresult resume_one(struct gvm_region *r)
{
    int dev = r->paused_loc >= 0 ? r->paused_loc : r->device;
    gvm_move_enter(r);
    CUresult rc = (r->flags & GVM_RF_DISCARDED) ? refill(r, dev) : gvm_move_blocks(r, dev);
    gvm_move_leave(r);
    if (rc == CUDA_SUCCESS) {
        GVM_STORE(r->flags, r->flags & ~(unsigned)(GVM_RF_PAUSED | GVM_RF_DISCARDED));
        gvm_stat_inc(resumes);
    }
    return rc;
}

static gvm_status run(const char *tag, bool resume, int flags)
{
    if (!gvm_core_active()) return GVM_ERR_INACTIVE;
    if (flags & ~GVM_PAUSE_DISCARD) return GVM_ERR_INVALID;
    if (gvm_capture_open(-1)) return GVM_ERR_BUSY;   /* moves wait for the devices */
    struct list l = {.tag = -1, .paused = resume};
    if (tag) {
        l.tag = gvm_tag_id(tag, false);
        if (l.tag <= 0) return GVM_OK;   /* nothing was ever tagged so */
    }
    gvm_heap_for_each(pick, &l);
    CUresult rc = CUDA_SUCCESS;
    bool pinned = false;
    for (size_t i = 0; i < l.n && rc == CUDA_SUCCESS; i++) {
        struct gvm_region *r = l.r[i];
        pthread_mutex_lock(&r->op);
        if (!resume && (r->flags & GVM_RF_PINNED))
            pinned = true;   /* e.g. mapped by another process (core/share.h): left in place */
        else if (r->state == GVM_REGION_LIVE && ((r->flags & GVM_RF_PAUSED) != 0) == resume)
            rc = resume ? resume_one(r) : pause_one(r, flags);
        pthread_mutex_unlock(&r->op);
    }
    free(l.r);
    /* What the moves freed went to the pools: give it back to the driver. */
    if (!resume)
        for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim(d);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return GVM_ERR_NO_MEMORY;
    if (rc == CUDA_SUCCESS && pinned) return GVM_ERR_BUSY;
    return rc == CUDA_SUCCESS ? GVM_OK : GVM_ERR_DRIVER;
}

GVM_EXPORT gvm_status gvm_pause(const char *tag, int flags) { return run(tag, false, flags); }

GVM_EXPORT gvm_status gvm_resume(const char *tag) { return run(tag, true, 0); }
