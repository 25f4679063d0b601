#include "core/settings.h"

#include <stdint.h>

struct gvm_settings gvm_settings;

void gvm_settings_defaults(struct gvm_settings *s)
{
    s->small_max = (size_t)1 << 20;
    s->block_size = (size_t)64 << 20;
    s->grow_block = s->block_size;   /* the configuration's default is larger (policy/options.h) */
    s->headroom = 1.0;
    for (int d = 0; d < GVM_MAX_DEVICES; d++) {
        s->cache_limit[d] = (size_t)1 << 30;
        s->pool_limit[d] = (size_t)1 << 30;
    }
    s->host_pool = (size_t)4 << 30;
    s->host_prefill = GVM_HOST_PREFILL_OFF;   /* tests ask for it */
    s->host_access = GVM_HOST_ACCESS_LAZY;
    s->host_register = 1;
    for (int i = 0; i < GVM_LOC_SLOTS; i++) s->hold_limit[i] = SIZE_MAX;
}
