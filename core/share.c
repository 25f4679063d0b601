#include "core/share.h"

#include "core/relocate.h"

#include "core/driver.h"
#include "core/heap.h"
#include "core/slab.h"
#include "core/topo.h"

#include <stdlib.h>
#include <unistd.h>

CUresult gvm_share_lock(uintptr_t p, struct gvm_share *s)
{
    for (int tries = 0; tries < 4; tries++) {
        struct gvm_ref ref, again;
        if (!gvm_heap_find(p, &ref)) return CUDA_ERROR_NOT_FOUND;
        pthread_mutex_lock(&ref.region->op);
        if (gvm_heap_find(p, &again) && again.region == ref.region && again.off == ref.off) {
            *s = (struct gvm_share){.region = ref.region, .slot = ref.slot,
                                    .buffer_id = gvm_heap_buffer_id(&ref), .offset = ref.off,
                                    .size = ref.size};
            return CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&ref.region->op);   /* freed or reused meanwhile */
    }
    return CUDA_ERROR_NOT_FOUND;
}

void gvm_share_unlock(struct gvm_share *s) { pthread_mutex_unlock(&s->region->op); }

/* Host pieces cannot be exported (HOST handles refuse every handle type),
 * so host-resident memory comes home first: an importer then reads device
 * memory, as natively. */
static CUresult bring_home(struct gvm_region *r)
{
    bool on_host = false;
    for (int i = 0; i < r->nblocks; i++) {
        const struct gvm_phys *p = r->blocks[i].phys;
        if (!p) return CUDA_ERROR_INVALID_VALUE;
        if (p->loc == GVM_LOC_HOST) on_host = true;
    }
    if (!on_host) return CUDA_SUCCESS;
    int to = GVM_LOAD(r->home) >= 0 ? r->home : r->device;
    if (!gvm_topo.dev[to].vmm) to = r->device;
    CUresult rc = gvm_relocate_locked(r, to, GVM_RELOC_EXPLICIT);   /* its home becomes `to` */
    if (rc != CUDA_SUCCESS) return rc;
    GVM_STORE(r->spilled_at, 0);
    return CUDA_SUCCESS;
}

void gvm_share_drop_fds(struct gvm_share *s)
{
    for (int i = 0; s->fds && i < s->npieces; i++)
        if (s->fds[i] >= 0) close(s->fds[i]);
    free(s->fds);
    free(s->sizes);
    s->fds = NULL;
    s->sizes = NULL;
    s->npieces = 0;
}

CUresult gvm_share_export(struct gvm_share *s)
{
    struct gvm_region *r = s->region;
    if (GVM_LOAD(r->flags) & GVM_RF_PAUSED) return CUDA_ERROR_INVALID_VALUE;
    if (!gvm_drv.cuMemExportToShareableHandle) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = bring_home(r);
    if (rc != CUDA_SUCCESS) return rc;
    for (int i = 0; i < r->nblocks; i++)
        if (!gvm_topo.dev[r->blocks[i].phys->loc].posix_fd) return CUDA_ERROR_NOT_SUPPORTED;
    s->fds = malloc((size_t)r->nblocks * sizeof *s->fds);
    s->sizes = malloc((size_t)r->nblocks * sizeof *s->sizes);
    if (!s->fds || !s->sizes) {
        gvm_share_drop_fds(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < r->nblocks; i++) {
        int fd = -1;
        rc = DRV(cuMemExportToShareableHandle, &fd, r->blocks[i].phys->handle,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (rc != CUDA_SUCCESS) break;
        s->fds[i] = fd;
        s->sizes[i] = r->blocks[i].size;
        s->npieces = i + 1;
    }
    if (rc != CUDA_SUCCESS) {
        gvm_share_drop_fds(s);
        return rc;
    }
    s->extent = r->mapped;
    GVM_STORE(r->flags, r->flags | GVM_RF_SHARED | GVM_RF_PINNED);
    if (s->slot >= 0) gvm_slab_alias_ref(r, s->slot, +1);
    return CUDA_SUCCESS;
}

void gvm_share_unexport(struct gvm_share *s)
{
    gvm_share_drop_fds(s);
    if (s->slot >= 0) gvm_slab_alias_ref(s->region, s->slot, -1);
}
