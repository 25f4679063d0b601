/* The device memory limit a Kubernetes GPU-sharing layer hands a container.
 * HAMi's device plugin and KAI's hamicore plugin set CUDA_DEVICE_MEMORY_LIMIT
 * (every device) and CUDA_DEVICE_MEMORY_LIMIT_<i> (device i), in bytes or
 * with a k, m or g suffix ("8192m" is 8 GiB), 0 meaning no limit. gvmshim
 * takes them as device_limit unless device_limit was set explicitly
 * (GVM_DEVICE_LIMIT, the config file), so a container the layer limits
 * stays within its share under gvmshim too, and spills past it where spill
 * is on instead of failing. */
#include "policy/config_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define CLUSTER_VAR "CUDA_DEVICE_MEMORY_LIMIT"

/* "8192m" -> bytes; -1 when it is no such value. */
static int scan_cluster_size(const char *s, size_t *out)
{
    if (!isdigit((unsigned char)*s)) return -1;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end || v > (SIZE_MAX >> shift)) return -1;
    *out = (size_t)v << shift;
    return 0;
}

static void set_device(struct gvm_size_pct *v, size_t bytes)
{
    v->kind = bytes ? GVM_SIZE_BYTES : GVM_SIZE_NONE;
    v->bytes = bytes;
    v->ppm = 0;
}

/* The ordinal of CUDA_DEVICE_MEMORY_LIMIT_<i>, -1 for another name. */
static int cluster_ordinal(const char *var, size_t len)
{
    size_t n = strlen(CLUSTER_VAR);
    if (len <= n + 1 || strncmp(var, CLUSTER_VAR "_", n + 1) != 0) return -1;
    int d = 0;
    for (size_t i = n + 1; i < len; i++) {
        if (!isdigit((unsigned char)var[i]) || d >= GVM_CFG_MAX_DEVICES) return -1;
        d = d * 10 + (var[i] - '0');
    }
    return d < GVM_CFG_MAX_DEVICES ? d : -1;
}

/* One variable: 1 applied, 0 not one of them, -1 a bad value (err says). */
static int apply_one(struct gvm_size_pct_dev *lim, const char *var, char *err, size_t errlen)
{
    const char *eq = strchr(var, '=');
    if (!eq) return 0;
    size_t len = (size_t)(eq - var), bytes;
    bool all = len == strlen(CLUSTER_VAR) && !strncmp(var, CLUSTER_VAR, len);
    int d = all ? -1 : cluster_ordinal(var, len);
    if (!all && d < 0) return 0;
    if (scan_cluster_size(eq + 1, &bytes)) {
        gvm_cfg_bprintf(err, errlen, "%.*s='%.32s': expected a size in bytes or with a k, m or g suffix "
                        "(e.g. 8192m)", (int)len, var, eq + 1);
        return -1;
    }
    if (all) {
        /* The per-device ones win whatever their order in the environment. */
        set_device(&lim->other, bytes);
        for (int i = 0; i < GVM_CFG_MAX_DEVICES; i++)
            if (!(lim->listed & (1ull << i))) lim->dev[i] = lim->other;
    } else {
        set_device(&lim->dev[d], bytes);
        lim->listed |= 1ull << d;
        lim->is_list = true;
    }
    return 1;
}

int gvm_cfg_apply_cluster_limit(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen)
{
    if (cfg->origin[GVM_OPT_device_limit] != GVM_ORIGIN_DEFAULT) return 0;
    struct gvm_size_pct_dev lim = cfg->device_limit;
    bool found = false;
    for (char *const *e = envp; *e; e++) {
        if (strncmp(*e, CLUSTER_VAR, strlen(CLUSTER_VAR)) != 0) continue;
        int rc = apply_one(&lim, *e, err, errlen);
        if (rc < 0) return -1;
        found |= rc > 0;
    }
    if (!found) return 0;
    cfg->device_limit = lim;
    cfg->origin[GVM_OPT_device_limit] = GVM_ORIGIN_CLUSTER;
    return 0;
}
