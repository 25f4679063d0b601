/* gvmctl set: options changed while the process runs.
 *
 * The configuration in force is immutable (policy/policy.h): a change
 * copies it, parses the new values into the copy with the config file's
 * parser, checks the whole request, and publishes the copy at once, so a
 * reader sees the old configuration or the new one, never a mix. The
 * limits are core's caps (core/held.h), set before the copy is published;
 * a lowered device limit then evicts down to it, and when that fails the
 * old configuration and limits come back; a raised one brings spilled
 * memory home in the background (policy/promote.h). Whatever follows
 * from the configuration is as if it had been set at start: launches are
 * scanned once spill is on (policy/policy.h), so the promoter, the demand
 * swaps, the learned loop and the prefetch see what the program uses.
 * One change at a time. */
#include "policy/set.h"

#include "core/direct.h"
#include "core/heap.h"
#include "core/held.h"
#include "core/log.h"
#include "core/topo.h"
#include "core/trace.h"
#include "gvmshim.h"
#include "policy/policy.h"
#include "policy/promote.h"
#include "policy/spill.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A replaced configuration may still be read by a thread that loaded it
 * just before, and nothing says when the last one lets go: it is kept,
 * reachable from here, until the process exits. That is 32 KiB a change;
 * a process takes at most SETS_MAX of them (changes are rare: a person or
 * a scheduler resizing a job). */
#define SETS_MAX 1024

static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gvm_config *published[SETS_MAX];
static int npublished;

struct item {
    int id;
    const char *text;   /* "key=value" as given, for messages */
};

/* A size as people read it: 3.1 GiB. */
static void human(size_t b, char *buf, size_t n)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    if (b == SIZE_MAX) {
        snprintf(buf, n, "none");
        return;
    }
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static char *trimmed_copy(const char *s, size_t len)
{
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    return strndup(s, len);
}

/* Parses one "key=value" into next. 0, or -1 after saying why. */
static int parse_item(struct gvm_config *next, const char *kv, const bool *seen, int *id, FILE *out)
{
    const char *eq = strchr(kv, '=');
    if (!eq) {
        fprintf(out, "'%s': expected KEY=VALUE", kv);
        return -1;
    }
    char *key = trimmed_copy(kv, (size_t)(eq - kv)), *value = trimmed_copy(eq + 1, strlen(eq + 1));
    int rc = -1;
    char err[GVM_CFG_ERR_MAX];
    if (!key || !value) {
        fprintf(out, "out of memory");
        goto done;
    }
    *id = gvm_option_find(key);
    if (*id >= 0 && !gvm_options[*id].live) {
        fprintf(out, "%s cannot change while the process runs: set it at start", key);
    } else if (*id >= 0 && seen[*id]) {
        fprintf(out, "%s is given twice", key);
    } else if (gvm_config_set(next, key, value, err, sizeof err)) {
        fputs(err, out);   /* unknown option, or the parser's own line */
    } else {
        next->origin[*id] = GVM_ORIGIN_CONTROL;
        rc = 0;
    }
done:
    free(key);
    free(value);
    return rc;
}

static int parse_items(struct gvm_config *next, char *const *kv, int n, struct item *items, FILE *out)
{
    bool seen[GVM_OPT_COUNT] = {false};
    for (int i = 0; i < n; i++) {
        if (parse_item(next, kv[i], seen, &items[i].id, out)) return -1;
        seen[items[i].id] = true;
        items[i].text = kv[i];
    }
    return 0;
}

/* ---- the limits --------------------------------------------------------- */

struct limits {
    size_t dev[GVM_MAX_DEVICES];   /* core's caps: SIZE_MAX for none */
    size_t host;
};

static void limits_now(struct limits *l)
{
    for (int d = 0; d < gvm_topo.ndev; d++) l->dev[d] = gvm_held_cap(d);
    l->host = gvm_held_cap(GVM_LOC_HOST);
}

/* What cfg asks for, resolved on this machine as at the start
 * (policy/derive.c). */
static void limits_of(const struct gvm_config *cfg, struct limits *l)
{
    for (int d = 0; d < gvm_topo.ndev; d++)
        l->dev[d] = gvm_cfg_device_value(&cfg->device_limit, d, gvm_topo.dev[d].total);
    l->host = cfg->host_limit;
}

static void limits_set(const struct limits *l)
{
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_policy_set_limit(d, l->dev[d]);
    gvm_policy_set_limit(GVM_LOC_HOST, l->host);
}

static bool lowered(const struct limits *to, const struct limits *from, int d)
{
    return gvm_topo.dev[d].vmm && to->dev[d] < from->dev[d] && gvm_policy_usage(d) > to->dev[d];
}

static const char *item_text(const struct item *items, int n, int id)
{
    for (int i = 0; i < n; i++)
        if (items[i].id == id) return items[i].text;
    return gvm_options[id].name;
}

/* Refuses, before anything changes, what cannot work: lowering a device
 * limit below what its allocations hold with spill off, or below the
 * program's own memory (core/direct.h), which nothing can move; a host
 * limit below what the host holds. */
static int refuse(const struct gvm_config *next, const struct limits *to, const struct limits *from,
                  const struct item *items, int n, FILE *out)
{
    char held[32];
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!lowered(to, from, d)) continue;
        size_t usage = gvm_policy_usage(d), idle = gvm_heap_idle_bytes(d);
        size_t busy = usage > idle ? usage - idle : 0;
        human(usage, held, sizeof held);
        size_t own = gvm_direct_bytes(d);
        if (own > to->dev[d]) {
            char text[32];
            human(own, text, sizeof text);
            fprintf(out, "%s: device %d holds %s the program created itself (cuMemCreate), which cannot move; "
                         "nothing changed",
                    item_text(items, n, GVM_OPT_device_limit), d, text);
            return GVM_ERR_NO_MEMORY;
        }
        if (!next->spill.n && busy > to->dev[d]) {
            fprintf(out, "%s: device %d holds %s and spill is off; nothing changed",
                    item_text(items, n, GVM_OPT_device_limit), d, held);
            return GVM_ERR_NO_MEMORY;
        }
    }
    size_t host = gvm_policy_usage(GVM_LOC_HOST);
    if (to->host < from->host && host > to->host) {
        human(host, held, sizeof held);
        fprintf(out, "%s: the host holds %s of moved memory; nothing changed",
                item_text(items, n, GVM_OPT_host_limit), held);
        return GVM_ERR_NO_MEMORY;
    }
    return GVM_OK;
}

/* Evicts every lowered device down to its new limit. GVM_OK with the
 * bytes moved and the seconds taken per device, or why not. */
static int evict_down(const struct limits *to, const struct limits *from, size_t *moved, double *secs,
                      const struct item *items, int n, FILE *out)
{
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!lowered(to, from, d)) continue;
        uint64_t t0 = gvm_trace_now();
        CUresult rc = gvm_spill_release(d, to->dev[d], &moved[d]);
        secs[d] = (double)(gvm_trace_now() - t0) / 1e9;
        if (rc == CUDA_SUCCESS) continue;
        char held[32], gone[32];
        human(gvm_policy_usage(d), held, sizeof held);
        human(moved[d], gone, sizeof gone);
        const char *what = item_text(items, n, GVM_OPT_device_limit);
        if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
            fprintf(out, "%s: a stream capture is open and moving memory would wait for it; nothing changed",
                    what);
            return GVM_ERR_BUSY;
        }
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            fprintf(out, "%s: device %d still holds %s after %s moved out, and nothing more can leave (the "
                         "spill targets are full, or the rest is paused or shared); the configuration is "
                         "unchanged",
                    what, d, held, gone);
            return GVM_ERR_NO_MEMORY;
        }
        fprintf(out, "%s: moving memory off device %d failed (driver error %d) after %s moved out; that "
                     "allocation stays where it was, the configuration is unchanged",
                what, d, (int)rc, gone);
        return GVM_ERR_DRIVER;
    }
    return GVM_OK;
}

/* A device whose limit rose gets its spilled memory back at once, in the
 * background, as far as the new limit allows: the program's next steps
 * run as before the limit, rather than each spilled region waiting for a
 * launch to swap it in (or for promote_rate). Spill off by now or not:
 * what is away comes home all the same. */
static void bring_home_raised(const struct gvm_config *next, const struct limits *to, const struct limits *from)
{
    if (!next->promote) return;
    for (int d = 0; d < gvm_topo.ndev; d++) {
        if (!gvm_topo.dev[d].vmm || to->dev[d] <= from->dev[d]) continue;
        gvm_promoter_start();
        gvm_promoter_bring_home(d);
    }
}

/* ---- the change --------------------------------------------------------- */

static bool changes(const struct gvm_config *cur, const struct gvm_config *next)
{
    for (int i = 0; i < GVM_OPT_COUNT; i++)
        if (memcmp((const char *)cur + gvm_options[i].offset, (const char *)next + gvm_options[i].offset,
                   gvm_options[i].size))
            return true;
    return false;
}

static void report(const struct gvm_config *cur, const struct gvm_config *next, const struct item *items, int n,
                   const size_t *moved, const double *secs, FILE *out)
{
    char was[GVM_CFG_PATH_MAX], now[GVM_CFG_PATH_MAX];
    for (int i = 0; i < n; i++) {
        int id = items[i].id;
        gvm_config_format(cur, id, was, sizeof was);
        gvm_config_format(next, id, now, sizeof now);
        if (strcmp(was, now)) fprintf(out, "%s: %s -> %s\n", gvm_options[id].name, was, now);
        else fprintf(out, "%s: %s (unchanged)\n", gvm_options[id].name, now);
    }
    for (int d = 0; moved && d < gvm_topo.ndev; d++) {
        if (!moved[d]) continue;
        char gone[32], held[32], lim[32];
        human(moved[d], gone, sizeof gone);
        human(gvm_policy_usage(d), held, sizeof held);
        human(gvm_policy_limit(d), lim, sizeof lim);
        double s = secs[d] > 1e-9 ? secs[d] : 1e-9;
        fprintf(out, "device %d: moved %s out in %.3f s (%.1f GB/s); holds %s, limit %s\n", d, gone, secs[d],
                (double)moved[d] / s / 1e9, held, lim);
    }
}

/* Publishes next (and its limits); on a failed eviction, puts cur back.
 * *kept: next was published, so it must outlive every reader. */
static int apply(const struct gvm_config *cur, struct gvm_config *next, const struct item *items, int n,
                 bool *kept, FILE *out)
{
    struct limits from, to;
    limits_now(&from);
    limits_of(next, &to);
    int st = refuse(next, &to, &from, items, n, out);
    if (st) return st;
    if (npublished == SETS_MAX) {
        fprintf(out, "this process has taken %d live changes, the most it keeps; restart it to change more",
                SETS_MAX);
        return GVM_ERR_BUSY;
    }
    published[npublished++] = next;
    *kept = true;
    limits_set(&to);
    gvm_policy_publish(next);
    size_t moved[GVM_MAX_DEVICES] = {0};
    double secs[GVM_MAX_DEVICES] = {0};
    st = evict_down(&to, &from, moved, secs, items, n, out);
    if (st) {
        limits_set(&from);
        gvm_policy_publish(cur);
        return st;
    }
    if (next->log != cur->log) gvm_log_set_level((int)next->log);
    gvm_heap_set_cache_idle(next->cache_idle * 1000000u);
    if (next->spill.n && next->promote) gvm_promoter_start();
    bring_home_raised(next, &to, &from);
    report(cur, next, items, n, moved, secs, out);
    return GVM_OK;
}

int gvm_policy_set(char *const *kv, int n, FILE *out)
{
    if (n <= 0) {
        fprintf(out, "nothing to set: give KEY=VALUE");
        return GVM_ERR_INVALID;
    }
    struct gvm_config *next = malloc(sizeof *next);
    struct item *items = calloc((size_t)n, sizeof *items);
    int st = GVM_ERR_NO_MEMORY;
    if (!next || !items) {
        fprintf(out, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&set_lock);
    const struct gvm_config *cur = gvm_policy_cfg();
    if (!cur) {
        fprintf(out, "gvmshim has not started serving allocations");
        st = GVM_ERR_INACTIVE;
    } else {
        memcpy(next, cur, sizeof *next);
        st = parse_items(next, kv, n, items, out) ? GVM_ERR_INVALID : GVM_OK;
        if (!st && !changes(cur, next)) {
            report(cur, next, items, n, NULL, NULL, out);
        } else if (!st) {
            bool kept = false;
            st = apply(cur, next, items, n, &kept, out);
            if (kept) next = NULL;
        }
    }
    pthread_mutex_unlock(&set_lock);
done:
    free(next);
    free(items);
    return st;
}
