#include "core/share_hold.h"

#include "core/slab.h"

int (*gvm_share_freed_hook)(struct gvm_region *r, int slot, uint64_t buffer_id);

bool gvm_share_key(struct gvm_region *r, uintptr_t p, int *slot, uint64_t *buffer_id)
{
    if (!(GVM_LOAD(r->flags) & GVM_RF_SHARED)) return false;
    if (r->kind != GVM_REGION_CHUNK) {
        *slot = -1;
        *buffer_id = r->buffer_id;
        return true;
    }
    uintptr_t base;
    size_t size;
    if (!gvm_slab_find(r, p, &base, &size, slot) || base != p) return false;
    *buffer_id = r->slab->ids[*slot];
    return true;
}

void gvm_share_freed(struct gvm_region *r, int slot, uint64_t buffer_id)
{
    int what = gvm_share_freed_hook ? gvm_share_freed_hook(r, slot, buffer_id) : GVM_SHARE_NONE;
    if (slot >= 0 && what == GVM_SHARE_RELEASE) gvm_slab_alias_ref(r, slot, -1);
}

void gvm_share_release(struct gvm_region *r, int slot)
{
    pthread_mutex_lock(&r->op);
    gvm_slab_alias_ref(r, slot, -1);
    pthread_mutex_unlock(&r->op);
}
