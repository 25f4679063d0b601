/* gvm_pause / gvm_resume: release a tag's device memory with every pointer
 * kept reserved (parity with torch_memory_saver and vLLM sleep mode, for
 * programs that were not written against them). Keeping a copy moves the
 * memory to host, where it stays readable; discarding releases it. The
 * mechanics are core's (core/relocate.h); this file chooses the regions. */
#include "gvmshim.h"

#include "core/capture.h"
#include "core/core.h"
#include "core/export.h"
#include "core/heap.h"
#include "core/live.h"
#include "core/phys.h"
#include "core/relocate.h"
#include "core/topo.h"
#include "policy/policy.h"
#include "policy/spill.h"
#include "policy/tags.h"

#include <stdlib.h>

struct list {
    int tag;          /* -1: every tagged allocation */
    bool any;         /* untagged ones too (tag -1 only) */
    bool paused;      /* collect paused (resume) or live (pause) ones */
    struct gvm_region **r;
    size_t n, cap;
};

static void pick(struct gvm_region *r, void *arg)
{
    struct list *l = arg;
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return;
    if (!GVM_LOAD(r->tag) && !l->any) return;
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

/* Creating pinned host memory costs ~250 ms/GiB: memory a resume gives
 * back stays pooled for the next pause rather than being released and
 * created again (pause_pool). */
static void keep_room(const struct list *l)
{
    size_t bytes = 0;
    for (size_t i = 0; i < l->n; i++) bytes += GVM_LOAD(l->r[i]->mapped);
    gvm_phys_raise_limit(GVM_LOC_HOST, bytes);
}

/* A resume whose device is at its limit or full, spill on: as for an
 * allocation, what the device holds leaves for it, least recently used first (the
 * memory resumed before it too: the tag comes back with its overflow
 * spilled, as it was before the pause, where failing would leave it half
 * paused). The promoter brings what left back when room returns. */
static CUresult resume_with_room(struct gvm_region *r, unsigned how)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    int dev = gvm_relocate_resume_device(r);
    if (!cfg || cfg->spill.n == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    /* At its limit: down to the limit less the region. Without one, the
     * GPU itself is full: as much of gvmshim's memory as the region needs
     * leaves (other processes' memory gvmshim cannot move). */
    size_t need = gvm_policy_charge(GVM_LOAD(r->size)), moved;
    size_t ceiling = gvm_policy_limited(dev) ? gvm_policy_limit(dev) : gvm_policy_usage(dev);
    if (need > ceiling) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Out of memory when nothing more can leave; a failed move's own error. */
    CUresult rc = gvm_spill_down_to(dev, ceiling - need, &moved);
    return rc == CUDA_SUCCESS ? gvm_relocate(r, GVM_LOC_NONE, how) : rc;
}

static gvm_status run(const char *tag, bool resume, int flags)
{
    if (!gvm_core_active()) return GVM_ERR_INACTIVE;
    if ((flags & ~(GVM_PAUSE_DISCARD | GVM_PAUSE_UNMAPPED)) ||
        (flags & (GVM_PAUSE_DISCARD | GVM_PAUSE_UNMAPPED)) == (GVM_PAUSE_DISCARD | GVM_PAUSE_UNMAPPED))
        return GVM_ERR_INVALID;
    if (gvm_capture_open(-1)) return GVM_ERR_BUSY;   /* moves wait for the devices */
    struct list l = {.tag = -1, .paused = resume};
    if (tag) {
        l.tag = gvm_tag_id(tag, false);
        if (l.tag <= 0) return GVM_OK;   /* nothing was ever tagged so */
    }
    gvm_live_for_each(pick, &l);
    unsigned how = resume ? GVM_RELOC_RESUME : GVM_RELOC_PAUSE;
    if (flags & GVM_PAUSE_UNMAPPED) how |= GVM_RELOC_SHELVE;
    int loc = !resume && !(flags & GVM_PAUSE_DISCARD) ? GVM_LOC_HOST : GVM_LOC_NONE;
    const struct gvm_config *cfg = gvm_policy_cfg();
    if (loc == GVM_LOC_HOST && cfg && cfg->pause_pool) keep_room(&l);
    CUresult rc = CUDA_SUCCESS;
    bool pinned = false;
    for (size_t i = 0; i < l.n && rc == CUDA_SUCCESS; i++) {
        rc = gvm_relocate(l.r[i], loc, how);
        if (resume && rc == CUDA_ERROR_OUT_OF_MEMORY) rc = resume_with_room(l.r[i], how);
        /* Refused: freed, paused or resumed meanwhile, or pinned (e.g.
         * mapped by another process, core/share.h), which stays in place. */
        if (rc == CUDA_ERROR_NOT_PERMITTED && !resume) pinned = true;
        if (gvm_relocate_refused(rc)) rc = CUDA_SUCCESS;
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

static bool location_usable(int loc)
{
    if (loc == GVM_LOC_HOST) return gvm_topo.host_vmm;
    return loc >= 0 && loc < gvm_topo.ndev && gvm_topo.dev[loc].vmm;
}

gvm_status gvm_policy_migrate_tag(const char *tag, int loc)
{
    if (!gvm_core_active()) return GVM_ERR_INACTIVE;
    if (!location_usable(loc)) return GVM_ERR_INVALID;
    if (gvm_capture_open(-1)) return GVM_ERR_BUSY;   /* moves wait for the devices */
    struct list l = {.tag = -1, .any = !tag};
    if (tag) {
        l.tag = gvm_tag_id(tag, false);
        if (l.tag <= 0) return GVM_OK;   /* nothing was ever tagged so */
    }
    gvm_live_for_each(pick, &l);
    CUresult rc = CUDA_SUCCESS;
    gvm_status st = GVM_OK;
    for (size_t i = 0; i < l.n && rc == CUDA_SUCCESS; i++) {
        /* Kernels on the allocating device must still reach the memory. */
        if (loc >= 0 && !gvm_topo_reaches(GVM_LOAD(l.r[i]->device), loc)) {
            st = GVM_ERR_UNSUPPORTED;
            continue;
        }
        rc = gvm_relocate(l.r[i], loc, GVM_RELOC_EXPLICIT);
        if (rc == CUDA_ERROR_NOT_PERMITTED) st = GVM_ERR_BUSY;   /* paused, or shared with other processes */
        if (gvm_relocate_refused(rc)) rc = CUDA_SUCCESS;
    }
    free(l.r);
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim(d);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return GVM_ERR_NO_MEMORY;
    return rc == CUDA_SUCCESS ? st : GVM_ERR_DRIVER;
}
