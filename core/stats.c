#include "core/stats.h"

#include "core/direct.h"
#include "core/held.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

struct gvm_stats gvm_stats;

/* ---- per-thread counters ------------------------------------------------ */

__thread struct gvm_perthread *gvm_stats_mine __attribute__((tls_model("initial-exec")));
static struct gvm_perthread_list locals = GVM_PERTHREAD_LIST(struct gvm_stats_local);

struct gvm_stats_local *gvm_stats_local_attach(void)
{
    return (struct gvm_stats_local *)gvm_perthread_attach(&locals, &gvm_stats_mine);
}

static uint64_t load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

/* Sets snap's per-thread counters: gvm_stats' own with every block added. */
static void sum_locals(struct gvm_stats *snap)
{
#define GVM_STAT_SUM(name) snap->name = load(&gvm_stats.name);
    GVM_STAT_LOCAL_COUNTERS(GVM_STAT_SUM)
#undef GVM_STAT_SUM
    for (int i = 0; i < GVM_FN_COUNT; i++) snap->calls[i] = load(&gvm_stats.calls[i]);
    for (struct gvm_perthread *b = gvm_perthread_first(&locals); b; b = b->next) {
        const struct gvm_stats_local *l = (const struct gvm_stats_local *)b;
#define GVM_STAT_SUM(name) snap->name += load(&l->name);
        GVM_STAT_LOCAL_COUNTERS(GVM_STAT_SUM)
#undef GVM_STAT_SUM
        for (int i = 0; i < GVM_FN_COUNT; i++) snap->calls[i] += load(&l->calls[i]);
    }
}

static void zero_local(struct gvm_stats_local *l)
{
#define GVM_STAT_ZERO(name) __atomic_store_n(&l->name, 0, __ATOMIC_RELAXED);
    GVM_STAT_LOCAL_COUNTERS(GVM_STAT_ZERO)
#undef GVM_STAT_ZERO
    for (int i = 0; i < GVM_FN_COUNT; i++) __atomic_store_n(&l->calls[i], 0, __ATOMIC_RELAXED);
}

void gvm_stats_after_fork(void)
{
    memset(&gvm_stats, 0, sizeof gvm_stats);
    gvm_perthread_after_fork(&locals, gvm_stats_mine);
    for (struct gvm_perthread *b = gvm_perthread_first(&locals); b; b = b->next)
        zero_local((struct gvm_stats_local *)b);
}

void gvm_stats_live(int device, int64_t delta)
{
    if (device < 0 || device >= GVM_MAX_DEVICES) return;
    int64_t now = __atomic_add_fetch(&gvm_stats.bytes_live[device], delta, __ATOMIC_RELAXED);
    int64_t peak = __atomic_load_n(&gvm_stats.peak_bytes[device], __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&gvm_stats.peak_bytes[device], &peak, now, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void gvm_stats_resident(int loc, int64_t delta)
{
    __atomic_fetch_add(&gvm_stats.resident[gvm_loc_slot(loc)], delta, __ATOMIC_RELAXED);
}

static int64_t loadi(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

static void write_device_array(FILE *out, const char *name, const int64_t *v, int n, int json)
{
    if (json) {
        fprintf(out, "  \"%s\": {", name);
        for (int d = 0; d < n; d++)
            fprintf(out, "%s\"%d\": %" PRId64, d ? ", " : "", d, loadi(&v[d]));
        fprintf(out, "},\n");
        return;
    }
    fprintf(out, "gvmshim: stats: %-20s", name);
    for (int d = 0; d < n; d++) fprintf(out, " dev%d=%" PRId64, d, loadi(&v[d]));
    fprintf(out, "\n");
}

static void write_calls(FILE *out, const char *name, const uint64_t *calls, int json)
{
    int first = 1;
    if (json)
        fprintf(out, "  \"%s\": {", name);
    else
        fprintf(out, "gvmshim: stats: %s:", name);
    for (int i = 0; i < GVM_FN_COUNT; i++) {
        uint64_t c = load(&calls[i]);
        if (!c) continue;
        if (json)
            fprintf(out, "%s\"%s\": %" PRIu64, first ? "" : ", ", gvm_driver_names[i], c);
        else
            fprintf(out, " %s=%" PRIu64, gvm_driver_names[i], c);
        first = 0;
    }
    fprintf(out, json ? "}" : "\n");
}

typedef size_t (*per_location)(int loc);

/* One figure per device and host; SIZE_MAX prints as none (null). */
static void write_held(FILE *out, const char *name, per_location f, int n, int json)
{
    if (json)
        fprintf(out, "  \"%s\": {", name);
    else
        fprintf(out, "gvmshim: stats: %-20s", name);
    for (int i = 0; i <= n; i++) {
        int loc = i < n ? i : GVM_LOC_HOST;
        size_t v = f(loc);
        char key[16] = "host";
        if (i < n) snprintf(key, sizeof key, json ? "%d" : "dev%d", i);
        if (json && v == SIZE_MAX)
            fprintf(out, "%s\"%s\": null", i ? ", " : "", key);
        else if (json)
            fprintf(out, "%s\"%s\": %zu", i ? ", " : "", key, v);
        else if (v == SIZE_MAX)
            fprintf(out, " %s=none", key);
        else
            fprintf(out, " %s=%zu", key, v);
    }
    fprintf(out, json ? "},\n" : "\n");
}

/* What the device's own count says the process uses, beside what
 * gvmshim holds: the rest is memory gvmshim does not control. */
static void write_outside(FILE *out, const int64_t *used, int ndev, int json)
{
    int64_t outside[GVM_MAX_DEVICES];
    for (int d = 0; d < ndev; d++) outside[d] = used[d] < 0 ? -1 : used[d] - (int64_t)gvm_held_bytes(d);
    write_device_array(out, "nvml_used_bytes", used, ndev, json);
    write_device_array(out, "outside_bytes", outside, ndev, json);
}

void gvm_stats_write(FILE *out, int json, int ndev, const int64_t *device_used)
{
    if (ndev < 1) ndev = 1;
    if (ndev > GVM_MAX_DEVICES) ndev = GVM_MAX_DEVICES;
    uint64_t live = load(&gvm_stats.allocations_total) - load(&gvm_stats.frees_total);
    /* The figures written: gvm_stats, the per-thread counters summed in. */
    static struct gvm_stats snap;
    static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&snap_lock);
#define GVM_STAT_COPY(name, doc) snap.name = load(&gvm_stats.name);
    GVM_STAT_COUNTERS(GVM_STAT_COPY)
#undef GVM_STAT_COPY
    sum_locals(&snap);
    if (json) fprintf(out, "{\n");
#define GVM_STAT_WRITE(name, doc)                                              \
    if (json)                                                                  \
        fprintf(out, "  \"%s\": %" PRIu64 ",\n", #name, snap.name);            \
    else                                                                       \
        fprintf(out, "gvmshim: stats: %-20s %" PRIu64 "  (%s)\n", #name,        \
                snap.name, doc);
    GVM_STAT_COUNTERS(GVM_STAT_WRITE)
#undef GVM_STAT_WRITE
    if (json)
        fprintf(out, "  \"allocations_live\": %" PRIu64 ",\n", live);
    else
        fprintf(out, "gvmshim: stats: %-20s %" PRIu64 "\n", "allocations_live", live);
    write_device_array(out, "bytes_live", gvm_stats.bytes_live, ndev, json);
    write_device_array(out, "peak_bytes", gvm_stats.peak_bytes, ndev, json);
    if (json) {
        fprintf(out, "  \"resident_bytes\": {");
        for (int d = 0; d < ndev; d++)
            fprintf(out, "\"%d\": %" PRId64 ", ", d, loadi(&gvm_stats.resident[d]));
        fprintf(out, "\"host\": %" PRId64 "},\n", loadi(&gvm_stats.resident[GVM_MAX_DEVICES]));
    } else {
        fprintf(out, "gvmshim: stats: %-20s", "resident_bytes");
        for (int d = 0; d < ndev; d++)
            fprintf(out, " dev%d=%" PRId64, d, loadi(&gvm_stats.resident[d]));
        fprintf(out, " host=%" PRId64 "\n", loadi(&gvm_stats.resident[GVM_MAX_DEVICES]));
    }
    write_held(out, "held_bytes", gvm_held_bytes, ndev, json);
    write_held(out, "held_peak", gvm_held_peak, ndev, json);
    write_held(out, "limit", gvm_held_cap, ndev, json);
    write_held(out, "program_vmm_bytes", gvm_direct_bytes, ndev, json);
    write_held(out, "program_vmm_peak", gvm_direct_peak, ndev, json);
    if (device_used) write_outside(out, device_used, ndev, json);
    write_calls(out, "driver_calls", snap.calls, json);
    pthread_mutex_unlock(&snap_lock);
    if (json) fprintf(out, ",\n");
    write_calls(out, "gvmshim_driver_calls", gvm_driver_calls, json);
    if (json) fprintf(out, "\n}\n");
}
