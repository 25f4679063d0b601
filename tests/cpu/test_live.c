/* Live option changes (gvm_policy_set, what gvmctl set calls) against the
 * simulated driver: a lowered device limit evicts down to it with the data
 * intact, a raised one lets promotion bring it back; refusals change
 * nothing; messages are the config parser's; failures injected while
 * evicting leave data and configuration as they were. */
#include "simcore.h"

#include "core/direct.h"
#include "core/held.h"
#include "core/heap.h"
#include "core/move.h"
#include "core/log.h"
#include "policy/config.h"
#include "policy/derive.h"
#include "policy/place.h"
#include "policy/recur.h"
#include "policy/spill.h"
#include "policy/policy.h"
#include "policy/set.h"
#include "policy/tags.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

#define NONE SIZE_MAX

static struct gvm_config cfg;
static char reply[8192];

static void cfg_set(const char *name, const char *value)
{
    char err[GVM_CFG_ERR_MAX];
    if (gvm_config_set(&cfg, name, value, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

static size_t cache_bytes;   /* per device; 0: freed memory goes straight back */

static void tune(struct gvm_settings *s)
{
    for (int d = 0; d < GVM_MAX_DEVICES; d++) {
        s->cache_limit[d] = cache_bytes;
        s->pool_limit[d] = 0;
    }
    s->host_pool = 0;
    struct gvm_settings p;
    gvm_policy_settings(&cfg, &gvm_topo, &p);
    memcpy(s->hold_limit, p.hold_limit, sizeof s->hold_limit);
}

/* kv: name, value pairs, NULL-ended. */
static void start_policy(const char *const *kv)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;   /* frees cache as they did, however slowly a sanitizer runs */
    for (; kv && kv[0]; kv += 2) cfg_set(kv[0], kv[1]);
    sim_start(2, 512 * MiB, tune);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
}

/* gvm_policy_set of the items, NULL-ended; the reply lands in `reply`. */
static int live_set(const char *first, ...)
{
    char *items[16];
    int n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s && n < 16; s = va_arg(ap, const char *)) items[n++] = (char *)s;
    va_end(ap);
    FILE *f = fmemopen(reply, sizeof reply, "w");
    CHECK(f != NULL);
    int st = gvm_policy_set(items, n, f);
    fclose(f);
    return st;
}

static uintptr_t palloc_on(int dev, size_t n)
{
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(current_ctx()), CUDA_SUCCESS);
    uintptr_t p = 0;
    CHECK_EQ(gvm_policy_alloc(n, dev, current_ctx(), gvm_policy_current_tag(), &p), CUDA_SUCCESS);
    return p;
}

static uintptr_t palloc(size_t n) { return palloc_on(0, n); }

static int where(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.location;
}

static void touch(uintptr_t p) { gvm_use_end(gvm_use_begin(p)); }

/* Waits (5 s at most) until p lives at loc. */
static bool comes_to(uintptr_t p, int loc)
{
    for (int i = 0; i < 500 && where(p) != loc; i++) {
        touch(p);
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    return where(p) == loc;
}

/* ---- lowering and raising ------------------------------------------------ */

/* The set's line for device 0: what moved, in how long at what rate
 * (a time and GB/s: numbers of this run), then what the device holds. */
static bool said_moved(const char *bytes, const char *holds)
{
    char head[64];
    snprintf(head, sizeof head, "device 0: moved %s out in ", bytes);
    const char *line = strstr(reply, head);
    if (!line) return false;
    double secs = -1, gbps = -1;
    int used = 0;
    if (sscanf(line + strlen(head), "%lf s (%lf GB/s); %n", &secs, &gbps, &used) != 2 || !used) return false;
    return secs >= 0 && gbps > 0 && !strncmp(line + strlen(head) + used, holds, strlen(holds));
}

/* Three 24 MiB allocations filled, the first the least recently used. */
static void three_filled(const char **kv, uintptr_t *a, uintptr_t *b, uintptr_t *c)
{
    start_policy(kv);
    *a = palloc(24 * MiB), *b = palloc(24 * MiB), *c = palloc(24 * MiB);
    fill(*a, 24 * MiB, 1);
    fill(*b, 24 * MiB, 2);
    fill(*c, 24 * MiB, 3);
    touch(*b);
    touch(*c);
}

static void lowering_evicts_the_coldest_down_to_the_limit(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", NULL};
    uintptr_t a, b, c;
    three_filled(kv, &a, &b, &c);
    const struct gvm_config *before = gvm_policy_cfg();
    CHECK_EQ(live_set("device_limit=0:56M", NULL), GVM_OK);
    printf("%s", reply);
    CHECK(strstr(reply, "device_limit: none -> 0:56M\n") != NULL);
    CHECK(said_moved("24.0 MiB", "holds 48.0 MiB, limit 56.0 MiB\n"));
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(where(b), 0);
    CHECK_EQ(where(c), 0);
    CHECK(gvm_policy_usage(0) <= 56 * MiB);
    CHECK_EQ(gvm_held_cap(0), 56 * MiB);
    CHECK_EQ(gvm_held_cap(1), NONE);
    CHECK_EQ(gvm_policy_limit(0), 56 * MiB);
    CHECK(gvm_policy_limited(0) && !gvm_policy_limited(1));
    CHECK(gvm_policy_cfg() != before);
    CHECK_EQ(gvm_policy_cfg()->origin[GVM_OPT_device_limit], GVM_ORIGIN_CONTROL);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2) && intact(c, 24 * MiB, 3));
    /* A new allocation now spills, as under a limit set at start. */
    uintptr_t d = palloc(24 * MiB);
    CHECK(gvm_policy_usage(0) <= 56 * MiB);
    CHECK_EQ(gvm_policy_free(d), CUDA_SUCCESS);
}

/* With pause_host_map=lazy a lowered limit releases the device memory
 * into the process's own pages and leaves the copies to be mapped once
 * reached (policy/spill.h, gvm_spill_release): the next launch would map
 * them all first; a copy reaching one maps it; the data stays. */
static void lowering_with_lazy_maps_leaves_copies_mapped_once_reached(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", "pause_host_map", "lazy", NULL};
    uintptr_t a, b, c;
    three_filled(kv, &a, &b, &c);
    CHECK_EQ(live_set("device_limit=0:32M", NULL), GVM_OK);
    CHECK(said_moved("48.0 MiB", "holds 24.0 MiB, limit 32.0 MiB\n"));
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(where(b), GVM_HOST);
    CHECK_EQ(where(c), 0);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_SEQ_CST), 2u);
    gvm_policy_map_spilled();   /* what a launch does first */
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_SEQ_CST), 0u);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_SEQ_CST), 0u);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2) && intact(c, 24 * MiB, 3));
    CHECK(gvm_policy_usage(0) <= 32 * MiB);
}

static void raising_lets_promotion_bring_it_back(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", "device_limit", "0:32M", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    CHECK_EQ(where(a), GVM_HOST);   /* evicted to make room for b */
    /* promote was off at the start: turning it on starts the promoter. At
     * 1 ms a round allows 8 MiB, less than a: it comes back all the same. */
    CHECK_EQ(live_set("device_limit=none", "promote=on", "promote_interval=1ms", NULL), GVM_OK);
    CHECK(strstr(reply, "device_limit: 0:32M -> none\npromote: 0 -> 1\npromote_interval: 50ms -> 1ms\n") != NULL);
    CHECK_EQ(gvm_held_cap(0), NONE);
    CHECK(!gvm_policy_limited(0));
    CHECK(comes_to(a, 0));
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
    /* The promoter reads its settings each round: off again, it stops. */
    CHECK_EQ(live_set("device_limit=0:32M", NULL), GVM_OK);
    CHECK(strstr(reply, "moved 24.0 MiB out") != NULL);
    CHECK_EQ(live_set("promote=0", "device_limit=1G", NULL), GVM_OK);
    int out = where(a) == GVM_HOST ? 0 : 1;
    uintptr_t gone = out ? b : a;
    touch(gone);
    nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
    CHECK_EQ(where(gone), GVM_HOST);
}

/* A launch as the launch hook makes it (preload/hooks_launch.c's scan):
 * scanned only while the configuration in force asks for it, the spilled
 * regions it reaches brought back before they are announced. */
static void launch(uintptr_t p)
{
    if (!gvm_policy_scans_launches()) return;
    struct gvm_region *r = gvm_heap_region(p);
    CHECK(r != NULL);
    gvm_policy_before_launch(&r, 1);
    gvm_use_regions(&r, 1);
    gvm_use_end(r);
}

/* Waits (5 s at most) until p lives at loc, without using it. */
static bool comes_untouched_to(uintptr_t p, int loc)
{
    for (int i = 0; i < 500 && where(p) != loc; i++) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    return where(p) == loc;
}

/* Spill turned on in a running process works as if set at start: its
 * launches are scanned from then on, so they bring what they need back
 * (demand swaps) and the loop is learned; and once the limit is removed,
 * everything spilled comes home at once, used or not, with the
 * promoter's rounds an hour apart. */
static void spill_turned_on_live_acts_as_if_set_at_start(void)
{
    start_policy((const char *const[]){"promote_interval", "3600s", NULL});
    uintptr_t p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = palloc(24 * MiB);
        fill(p[i], 24 * MiB, i + 1);
    }
    CHECK(!gvm_policy_scans_launches());   /* auto, spill off */
    CHECK_EQ(live_set("spill=host", "device_limit=0:56M", NULL), GVM_OK);
    CHECK(strstr(reply, "device 0: moved 48.0 MiB out") != NULL);
    CHECK(gvm_policy_scans_launches());
    uint32_t launches = gvm_recur_launches();
    for (int step = 0; step < 40; step++)
        for (int i = 0; i < 4; i++) {
            launch(p[i]);
            CHECK_EQ(where(p[i]), 0);   /* swapped in for its launch */
            CHECK(gvm_policy_usage(0) <= 56 * MiB);
        }
    CHECK(gvm_recur_launches() - launches >= 160);   /* the loop is being learned */
    CHECK_EQ(gvm_recur_period(), 4);
    int away = 0;
    for (int i = 0; i < 4; i++) away += where(p[i]) == GVM_HOST;
    CHECK(away >= 2);   /* the swaps keep room for the next one (policy/spill.c) */
    CHECK_EQ(live_set("device_limit=none", NULL), GVM_OK);
    for (int i = 0; i < 4; i++) CHECK(comes_untouched_to(p[i], 0));
    for (int i = 0; i < 4; i++) CHECK(intact(p[i], 24 * MiB, i + 1));
    /* Spill off again: launches pass unscanned. */
    CHECK_EQ(live_set("spill=off", NULL), GVM_OK);
    CHECK(!gvm_policy_scans_launches());
}

/* A limit raised only part of the way brings back what fits under it
 * (less the promoter's margin, a sixteenth of the limit), no more. */
static void a_raise_brings_back_what_fits(void)
{
    start_policy((const char *const[]){"spill", "host", "device_limit", "0:24M", "promote_interval", "3600s", NULL});
    uintptr_t p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = palloc(16 * MiB);
        fill(p[i], 16 * MiB, i + 1);
    }
    int home = 0;
    for (int i = 0; i < 4; i++) home += where(p[i]) == 0;
    CHECK_EQ(home, 1);
    CHECK_EQ(live_set("device_limit=0:60M", NULL), GVM_OK);   /* room for two more, with the margin */
    for (int i = 0; i < 500 && home < 3; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
        home = 0;
        for (int j = 0; j < 4; j++) home += where(p[j]) == 0;
    }
    CHECK_EQ(home, 3);
    nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    home = 0;
    for (int j = 0; j < 4; j++) home += where(p[j]) == 0;
    CHECK_EQ(home, 3);
    CHECK(gvm_policy_usage(0) <= 60 * MiB);
    for (int i = 0; i < 4; i++) CHECK(intact(p[i], 16 * MiB, i + 1));
}

/* An allocation spilled, then migrated home by the program (or gvmctl
 * migrate), is resident like any other: a later lowering evicts it. */
static void spilled_then_migrated_home_is_evicted_again(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    touch(b);
    CHECK_EQ(live_set("device_limit=0:24M", NULL), GVM_OK);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(live_set("device_limit=none", NULL), GVM_OK);
    CHECK_EQ(gvm_migrate((void *)a, 0), GVM_OK);
    touch(b);
    CHECK_EQ(live_set("device_limit=0:24M", NULL), GVM_OK);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK_EQ(where(b), 0);
    CHECK(intact(a, 24 * MiB, 1));
}

static void per_device_lists_and_percentages(void)
{
    start_policy(NULL);
    CHECK_EQ(live_set("device_limit=1:50%", NULL), GVM_OK);
    CHECK_EQ(gvm_held_cap(0), NONE);
    CHECK_EQ(gvm_held_cap(1), 256 * MiB);
    CHECK(!gvm_policy_limited(0) && gvm_policy_limited(1));
    CHECK_EQ(live_set("device_limit=25%", NULL), GVM_OK);
    CHECK_EQ(gvm_held_cap(0), 128 * MiB);
    CHECK_EQ(gvm_held_cap(1), 128 * MiB);
    CHECK(strstr(reply, "device_limit: 1:50% -> 25%\n") != NULL);
    /* A device the list leaves out gets the default: none. */
    CHECK_EQ(live_set("device_limit=0:64M", "host_limit=1G", NULL), GVM_OK);
    CHECK_EQ(gvm_held_cap(0), 64 * MiB);
    CHECK_EQ(gvm_held_cap(1), NONE);
    CHECK_EQ(gvm_held_cap(GVM_LOC_HOST), 1024 * MiB);
    CHECK_EQ(gvm_policy_limit(GVM_LOC_HOST), 1024 * MiB);
}

/* Idle memory (a cache of freed allocations) counts as held, and goes
 * first: a limit that only idle bytes pass is reached without spilling. */
static void idle_memory_is_trimmed_first(void)
{
    cache_bytes = 64 * MiB;
    start_policy(NULL);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK(gvm_policy_usage(0) >= 48 * MiB);   /* b's memory is cached */
    CHECK_EQ(live_set("device_limit=0:32M", NULL), GVM_OK);   /* spill is off */
    CHECK(gvm_policy_usage(0) <= 32 * MiB);
    CHECK_EQ(where(a), 0);
    CHECK(intact(a, 24 * MiB, 1));
    CHECK(strstr(reply, "moved") == NULL);
}

/* ---- refusals: one line, nothing changed -------------------------------- */

/* The configuration, the caps and where the data is, as before. */
struct snapshot {
    const struct gvm_config *cfg;
    size_t cap[3];
};

static struct snapshot snap(void)
{
    return (struct snapshot){gvm_policy_cfg(), {gvm_held_cap(0), gvm_held_cap(1), gvm_held_cap(GVM_LOC_HOST)}};
}

static void unchanged(struct snapshot s)
{
    CHECK(gvm_policy_cfg() == s.cfg);
    CHECK_EQ(gvm_held_cap(0), s.cap[0]);
    CHECK_EQ(gvm_held_cap(1), s.cap[1]);
    CHECK_EQ(gvm_held_cap(GVM_LOC_HOST), s.cap[2]);
    CHECK(strchr(reply, '\n') == NULL);   /* one line */
}

static void spill_off_refuses_a_limit_below_what_is_held(void)
{
    start_policy(NULL);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    struct snapshot s = snap();
    CHECK_EQ(live_set("device_limit=0:32M", NULL), GVM_ERR_NO_MEMORY);
    CHECK_STR(reply, "device_limit=0:32M: device 0 holds 48.0 MiB and spill is off; nothing changed");
    unchanged(s);
    CHECK(where(a) == 0 && where(b) == 0);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
    /* Spill turned on in the same request makes it possible. */
    CHECK_EQ(live_set("device_limit=0:32M", "spill=host", NULL), GVM_OK);
    CHECK(gvm_policy_usage(0) <= 32 * MiB);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
    /* Turning spill off with the limit where it is needs no move. */
    CHECK_EQ(live_set("spill=off", NULL), GVM_OK);
    CHECK(strstr(reply, "spill: host -> off\n") != NULL);
}

/* The program's own device memory (cuMemCreate) counts under the limit
 * but cannot move: a limit below it is refused even with spill on, and
 * above it the rest leaves as usual. */
static void a_limit_below_the_programs_own_memory_is_refused(void)
{
    start_policy((const char *const[]){"spill", "host", NULL});
    uintptr_t a = palloc(24 * MiB);
    fill(a, 24 * MiB, 3);
    CHECK(gvm_held_reserve(0, 40 * MiB));   /* as the cuMemCreate hook does */
    CHECK(gvm_direct_remember((CUmemGenericAllocationHandle)0x4242, 0, 40 * MiB));
    struct snapshot s = snap();
    CHECK_EQ(live_set("device_limit=0:32M", NULL), GVM_ERR_NO_MEMORY);
    CHECK_STR(reply, "device_limit=0:32M: device 0 holds 40.0 MiB the program created itself (cuMemCreate), which "
                     "cannot move; nothing changed");
    unchanged(s);
    CHECK_EQ(where(a), 0);
    CHECK_EQ(live_set("device_limit=0:48M", NULL), GVM_OK);
    CHECK_EQ(where(a), GVM_HOST);
    CHECK(intact(a, 24 * MiB, 3));
    CHECK(gvm_policy_usage(0) <= 48 * MiB);
    int dev;
    size_t bytes;
    CHECK(gvm_direct_forget((CUmemGenericAllocationHandle)0x4242, &dev, &bytes));
    gvm_held_release(dev, bytes);
}

static void host_limit_below_what_the_host_holds_is_refused(void)
{
    const char *kv[] = {"spill", "host", "device_limit", "0:32M", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    struct snapshot s = snap();
    CHECK_EQ(live_set("host_limit=16M", NULL), GVM_ERR_NO_MEMORY);
    CHECK_STR(reply, "host_limit=16M: the host holds 24.0 MiB of moved memory; nothing changed");
    unchanged(s);
    CHECK_EQ(live_set("host_limit=1G", NULL), GVM_OK);
    CHECK(strstr(reply, "host_limit: none -> 1G\n") != NULL);
}

static void options_that_hold_from_the_start_are_refused(void)
{
    start_policy(NULL);
    struct snapshot s = snap();
    CHECK_EQ(live_set("block_size=4M", NULL), GVM_ERR_INVALID);
    CHECK_STR(reply, "block_size cannot change while the process runs: set it at start");
    unchanged(s);
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        if (gvm_options[i].live) continue;
        char item[128];
        snprintf(item, sizeof item, "%s=%s", gvm_options[i].name, gvm_options[i].def);
        CHECK_EQ(live_set(item, NULL), GVM_ERR_INVALID);
        CHECK(strstr(reply, "cannot change while the process runs: set it at start") != NULL);
        unchanged(s);
    }
}

/* The message a config file's value gets, without the file and line. */
static void parser_says(const char *name, const char *value, char *out, size_t n)
{
    static struct gvm_config fresh;
    gvm_config_defaults(&fresh);
    CHECK(gvm_config_set(&fresh, name, value, out, n) != 0);
}

static void bad_values_read_as_the_config_parser_says(void)
{
    start_policy(NULL);
    struct snapshot s = snap();
    static const char *const bad[][2] = {
        {"device_limit", "2X"}, {"device_limit", "0:4G,0:8G"}, {"device_limit", "101%"},
        {"promote_rate", "0"},  {"promote_interval", "0ms"},   {"spill", "moon"},
        {"spill_mode", "later"}, {"promote", "maybe"},         {"log", "loud"},
        {"host_limit", "-1G"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char item[128], want[GVM_CFG_ERR_MAX];
        snprintf(item, sizeof item, "%s=%s", bad[i][0], bad[i][1]);
        parser_says(bad[i][0], bad[i][1], want, sizeof want);
        CHECK_EQ(live_set(item, NULL), GVM_ERR_INVALID);
        CHECK_STR(reply, want);
        CHECK(strstr(reply, bad[i][0]) && strstr(reply, bad[i][1]));   /* names option and value */
        unchanged(s);
    }
    CHECK_EQ(live_set("device_limt=1G", NULL), GVM_ERR_INVALID);
    CHECK_STR(reply, "unknown option 'device_limt' (did you mean 'device_limit'?)");
    CHECK_EQ(live_set("spill", NULL), GVM_ERR_INVALID);
    CHECK_STR(reply, "'spill': expected KEY=VALUE");
    CHECK_EQ(live_set("spill=host", "spill=peer", NULL), GVM_ERR_INVALID);
    CHECK_STR(reply, "spill is given twice");
    CHECK_EQ(live_set(NULL), GVM_ERR_INVALID);
    unchanged(s);
}

static void one_bad_item_and_none_applies(void)
{
    start_policy(NULL);
    uintptr_t a = palloc(48 * MiB);
    fill(a, 48 * MiB, 1);
    struct snapshot s = snap();
    CHECK_EQ(live_set("spill=host", "device_limit=0:16M", "log=debug", "promote_rate=bogus", NULL), GVM_ERR_INVALID);
    CHECK(strncmp(reply, "promote_rate = bogus: ", 22) == 0);
    unchanged(s);
    CHECK_EQ(gvm_policy_cfg()->spill.n, 0);
    CHECK_EQ(gvm_log_get_level(), GVM_LOG_WARN);
    CHECK_EQ(where(a), 0);
    CHECK(intact(a, 48 * MiB, 1));
    /* A refused item after good ones: the same. */
    CHECK_EQ(live_set("spill=host", "device_limit=0:16M", "small_max=0", NULL), GVM_ERR_INVALID);
    unchanged(s);
    CHECK_EQ(where(a), 0);
}

static void the_same_values_change_nothing(void)
{
    start_policy(NULL);
    const struct gvm_config *before = gvm_policy_cfg();
    CHECK_EQ(live_set("spill=off", "promote_rate=8G", NULL), GVM_OK);
    CHECK_STR(reply, "spill: off (unchanged)\npromote_rate: 8G (unchanged)\n");
    CHECK(gvm_policy_cfg() == before);
}

static void the_log_level_changes_live(void)
{
    start_policy(NULL);
    CHECK_EQ(live_set("log=error", NULL), GVM_OK);
    CHECK_EQ(gvm_log_get_level(), GVM_LOG_ERROR);
    CHECK_STR(reply, "log: warn -> error\n");
    CHECK_EQ(live_set("log=debug", NULL), GVM_OK);
    CHECK_EQ(gvm_log_get_level(), GVM_LOG_DEBUG);
    gvm_log_set_level(GVM_LOG_ERROR);
}

static void before_the_start_nothing_to_change(void)
{
    CHECK_EQ(live_set("spill=host", NULL), GVM_ERR_INACTIVE);
    CHECK_STR(reply, "gvmshim has not started serving allocations");
}

/* Replaced configurations are kept until exit (a reader may hold one), so
 * the number of changes is bounded. */
static void changes_are_bounded(void)
{
    start_policy(NULL);
    int i = 0;
    for (; i < 5000; i++)
        if (live_set(i % 2 ? "promote_rate=8G" : "promote_rate=4G", NULL) != GVM_OK) break;
    CHECK_EQ(i, 1024);
    CHECK(strstr(reply, "restart it to change more") != NULL);
    CHECK(strchr(reply, '\n') == NULL);
}

/* ---- failures while evicting --------------------------------------------- */

/* Every driver call of the eviction fails in turn: the data stays intact,
 * the set says it failed, and the configuration and the caps are the old
 * ones, which still bound what is held. */
static void evict_with_failures(const char **kv)
{
    gvm_log_set_level(GVM_LOG_ERROR);   /* each round logs its failure */
    start_policy(kv);
    uintptr_t a = palloc(6 * MiB), b = palloc(6 * MiB);
    fill(a, 6 * MiB, 1);
    fill(b, 6 * MiB, 2);
    bool failed_after_a_move = false;
    for (unsigned long k = 1;; k++) {
        struct leaks base = leaks_now();
        struct snapshot s = snap();
        simcuda_reset_counts();
        simcuda_fail_nth(k, CUDA_ERROR_ILLEGAL_STATE);
        int st = live_set("device_limit=0:2M", NULL);
        unsigned long calls = simcuda_call_count();
        simcuda_fail_nth(0, CUDA_SUCCESS);
        gvm_policy_map_spilled();   /* what a launch or a CPU touch does first */
        CHECK(intact(a, 6 * MiB, 1) && intact(b, 6 * MiB, 2));
        if (st == GVM_OK) {
            CHECK(gvm_policy_usage(0) <= 2 * MiB);
            if (k > calls) break;   /* the failure was never reached */
        } else {
            if (st != GVM_ERR_DRIVER) fprintf(stderr, "k=%lu: %s\n", k, reply);
            CHECK_EQ(st, GVM_ERR_DRIVER);
            CHECK(strstr(reply, "device_limit=0:2M: moving memory off device 0 failed (driver error") == reply);
            if (!strstr(reply, "after 0 bytes moved out")) failed_after_a_move = true;
            unchanged(s);
            CHECK(gvm_policy_usage(0) <= 12 * MiB);
            CHECK_NO_LEAK(base);
        }
        /* Home again, no limit, for the next round. */
        CHECK_EQ(live_set("device_limit=none", NULL), GVM_OK);
        CHECK_EQ(gvm_migrate((void *)a, 0), GVM_OK);
        CHECK_EQ(gvm_migrate((void *)b, 0), GVM_OK);
        CHECK(k < 500);
    }
    CHECK(failed_after_a_move);
    CHECK(intact(a, 6 * MiB, 1) && intact(b, 6 * MiB, 2));
}

static void a_driver_failure_while_evicting_keeps_data_and_configuration(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", NULL};
    evict_with_failures(kv);
}

/* The same where the copies go to shelves mapped once reached. */
static void a_driver_failure_while_releasing_into_shelves_keeps_data(void)
{
    const char *kv[] = {"spill", "host", "promote", "0", "pause_host_map", "lazy", NULL};
    evict_with_failures(kv);
    gvm_policy_map_spilled();
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_SEQ_CST), 0u);
}

/* No spill target has room: what could move stays moved, the limit and
 * the configuration are the old ones. */
static void no_room_to_evict_to_is_refused(void)
{
    const char *kv[] = {"spill", "host", "host_limit", "24M", NULL};
    start_policy(kv);
    uintptr_t a = palloc(24 * MiB), b = palloc(24 * MiB);
    fill(a, 24 * MiB, 1);
    fill(b, 24 * MiB, 2);
    struct snapshot s = snap();
    CHECK_EQ(live_set("device_limit=0:8M", NULL), GVM_ERR_NO_MEMORY);
    CHECK_STR(reply, "device_limit=0:8M: device 0 still holds 24.0 MiB after 24.0 MiB moved out, and nothing "
                     "more can leave (the spill targets are full, or the rest is paused or shared); the "
                     "configuration is unchanged");
    unchanged(s);
    CHECK(intact(a, 24 * MiB, 1) && intact(b, 24 * MiB, 2));
}

static const struct test_case cases[] = {
    TEST_ENTRY(lowering_evicts_the_coldest_down_to_the_limit)
    TEST_ENTRY(lowering_with_lazy_maps_leaves_copies_mapped_once_reached)
    TEST_ENTRY(raising_lets_promotion_bring_it_back)
    TEST_ENTRY(spill_turned_on_live_acts_as_if_set_at_start)
    TEST_ENTRY(a_raise_brings_back_what_fits)
    TEST_ENTRY(spilled_then_migrated_home_is_evicted_again)
    TEST_ENTRY(per_device_lists_and_percentages)
    TEST_ENTRY(idle_memory_is_trimmed_first)
    TEST_ENTRY(spill_off_refuses_a_limit_below_what_is_held)
    TEST_ENTRY(a_limit_below_the_programs_own_memory_is_refused)
    TEST_ENTRY(host_limit_below_what_the_host_holds_is_refused)
    TEST_ENTRY(options_that_hold_from_the_start_are_refused)
    TEST_ENTRY(bad_values_read_as_the_config_parser_says)
    TEST_ENTRY(one_bad_item_and_none_applies)
    TEST_ENTRY(the_same_values_change_nothing)
    TEST_ENTRY(the_log_level_changes_live)
    TEST_ENTRY(before_the_start_nothing_to_change)
    TEST_ENTRY(changes_are_bounded)
    TEST_ENTRY(a_driver_failure_while_evicting_keeps_data_and_configuration)
    TEST_ENTRY(a_driver_failure_while_releasing_into_shelves_keeps_data)
    TEST_ENTRY(no_room_to_evict_to_is_refused)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
