#include "policy/derive.h"

struct gvm_config gvm_cfg;

/* Whether the configuration itself sends memory to host, or sizes the
 * host pool (its user plans moves there): then the pool is worth filling
 * from the start. */
static bool uses_host(const struct gvm_config *cfg)
{
    if (cfg->origin[GVM_OPT_host_pool] != GVM_ORIGIN_DEFAULT && cfg->host_pool) return true;
    if (gvm_spill_list_has(&cfg->spill, GVM_SPILL_HOST)) return true;
    for (int i = 0; i < cfg->nrules; i++)
        if (cfg->rules[i].place == GVM_RULE_PLACE_HOST) return true;
    return false;
}

void gvm_policy_settings(const struct gvm_config *cfg, const struct gvm_topo *topo,
                         struct gvm_settings *out)
{
    gvm_settings_defaults(out);
    out->small_max = cfg->small_max;
    out->block_size = cfg->block_size;
    out->headroom = cfg->headroom;
    out->host_pool = cfg->host_pool;
    /* Spilled memory moves all the time: its pieces stay the unit moves
     * pipeline. */
    out->grow_block = cfg->spill.n ? cfg->block_size : cfg->grow_block;
    out->host_prefill = (int)cfg->host_prefill;
    if (cfg->host_prefill == GVM_CFG_PREFILL_AUTO && uses_host(cfg)) out->host_prefill = GVM_HOST_PREFILL_ON;
    out->host_access = (int)cfg->host_access;
    out->host_register = cfg->host_register;
    for (int d = 0; d < topo->ndev; d++) {
        size_t total = topo->dev[d].total;
        out->cache_limit[d] = gvm_cfg_device_value(&cfg->cache_limit, d, total);
        out->pool_limit[d] = gvm_cfg_device_value(&cfg->pool_limit, d, total);
    }
    /* The limits are caps core enforces on every piece of memory it holds. */
    for (int d = 0; d < GVM_MAX_DEVICES; d++)
        out->hold_limit[d] = gvm_cfg_device_value(&cfg->device_limit, d, d < topo->ndev ? topo->dev[d].total : 0);
    out->hold_limit[gvm_loc_slot(GVM_LOC_HOST)] = cfg->host_limit;
}

bool gvm_policy_tracks_launches(const struct gvm_config *cfg)
{
    return cfg->track_launches == GVM_CFG_TRACK_ON ||
           (cfg->track_launches == GVM_CFG_TRACK_AUTO && cfg->spill.n > 0);
}
