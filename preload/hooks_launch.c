/* Kernel launches, interposed unless track_launches is off, and scanned
 * while the configuration in force needs recency (spill on): the
 * launch's arguments are scanned for addresses inside gvmshim regions,
 * which are marked used and announced for the launch call (so a region
 * being moved makes the launch wait, and a move waits for the launch to be
 * queued). The layout of each kernel's parameters comes from
 * cuFuncGetParamInfo (or cuKernelGetParamInfo) once, then from a cache. */
#include "preload/shim.h"

#include "core/capture.h"
#include "core/relocate.h"
#include "core/usemark.h"
#include "core/vamap.h"
#include "policy/policy.h"
#include "policy/prefetch.h"
#include "policy/spill.h"
#include "policy/tags.h"
#include "preload/launchlog.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 256
#define MAX_USED 32
#define SEEN_PAGES 64
#define SEEN_AFTER 8      /* words looked up directly before the page cache */
#define SCAN_LIMIT 4096   /* bytes of arguments looked at per launch */
#define LAYOUT_BUCKETS 1024

struct layout {
    void *fn;
    int nparams;          /* -1: unknown, launches of it are not scanned */
    uint32_t *size;       /* bytes of each parameter */
    struct layout *next;
};

static struct layout *buckets[LAYOUT_BUCKETS];
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket_of(void *fn) { return (unsigned)(((uintptr_t)fn >> 4) % LAYOUT_BUCKETS); }

static int query_params(void *fn, uint32_t *sizes)
{
    int n = 0;
    for (; n < MAX_PARAMS; n++) {
        size_t off, sz;
        CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
        if (gvm_drv.cuFuncGetParamInfo) rc = gvm_drv.cuFuncGetParamInfo((CUfunction)fn, (size_t)n, &off, &sz);
        if (rc != CUDA_SUCCESS && gvm_drv.cuKernelGetParamInfo)
            rc = gvm_drv.cuKernelGetParamInfo((CUkernel)fn, (size_t)n, &off, &sz);
        if (rc != CUDA_SUCCESS) break;
        sizes[n] = (uint32_t)sz;
    }
    return n ? n : -1;
}

static const struct layout *layout_of(void *fn)
{
    unsigned b = bucket_of(fn);
    for (struct layout *l = __atomic_load_n(&buckets[b], __ATOMIC_ACQUIRE); l; l = l->next)
        if (l->fn == fn) return l;
    uint32_t sizes[MAX_PARAMS];
    int n = query_params(fn, sizes);
    struct layout *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->fn = fn;
    l->nparams = n;
    if (n > 0 && !(l->size = malloc((size_t)n * sizeof *l->size))) {
        free(l);
        return NULL;
    }
    if (n > 0) memcpy(l->size, sizes, (size_t)n * sizeof *sizes);
    pthread_mutex_lock(&layout_lock);
    l->next = buckets[b];
    __atomic_store_n(&buckets[b], l, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&layout_lock);
    return l;
}

struct used {
    struct gvm_region *r[MAX_USED];
    int n;
    /* The launch may reach regions not found (arguments not all scanned):
     * from scan to release it holds the move gate, everything mapped. */
    bool partial;
    bool unscanned;       /* not scanned (tracking not wanted now): reach unknown to usemark */
    bool gated;           /* holds the move gate for its call */
    int words;            /* argument words looked at */
    /* From the 9th word on: address-map pages (2 MiB; page + 1, 0: empty)
     * looked up for this launch, direct-mapped. A struct of pointers
     * reaches a few allocations many times (PyTorch's tensor lists), and a
     * page holds one record, so a word whose page is here costs one
     * compare. */
    uintptr_t seen[SEEN_PAGES];
};

static void note(struct used *u, uint64_t word)
{
    if (++u->words > SEEN_AFTER) {
        if (u->words == SEEN_AFTER + 1) memset(u->seen, 0, sizeof u->seen);
        uintptr_t page = (uintptr_t)word >> GVM_VAMAP_SHIFT;
        uintptr_t *seen = &u->seen[page % SEEN_PAGES];
        if (*seen == page + 1) return;   /* its region is noted already, or it has none */
        *seen = page + 1;
    }
    struct gvm_region *r = gvm_heap_region((uintptr_t)word);
    if (!r) return;
    for (int i = 0; i < u->n; i++)
        if (u->r[i] == r) return;
    if (u->n == MAX_USED) {
        u->partial = true;
        return;
    }
    u->r[u->n++] = r;
}

/* Every 8-byte word of the argument bytes may be a pointer (structs of
 * pointers included, as PyTorch passes them). */
static void scan_bytes(struct used *u, const unsigned char *p, size_t len)
{
    for (size_t o = 0; o + sizeof(uint64_t) <= len; o += sizeof(uint64_t)) {
        uint64_t w;
        memcpy(&w, p + o, sizeof w);
        if (w >> 12) note(u, w);
    }
}

static void collect(struct used *u, void *fn, void **params, void **extra);

/* For a call whose reach is not known (a graph's launch, a launch scanned
 * in part): maps every lazily spilled region, then closes the move gate
 * with none left. Mapping alone is not enough: a move another thread ran
 * meanwhile (the prefetch thread, a demand swap) could send a region the
 * call reaches away unmapped, and the kernel would fault; while the hold
 * is on, moves begun after it leave nothing unmapped, so a second round
 * finds none. A few rounds (a map in place may fail), then the call goes
 * ahead. */
static void map_all_and_close(void)
{
    gvm_relocate_hold_unmapped(true);
    for (int tries = 0;; tries++) {
        gvm_policy_map_spilled();
        gvm_move_gate_enter();
        if (tries == 3 || !__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_SEQ_CST)) break;
        gvm_move_gate_leave();
    }
    gvm_relocate_hold_unmapped(false);   /* the gate holds every move back now */
}

/* Whether moves from outside may leave copies to be mapped once reached
 * (policy/spill.h, gvm_spill_maps_later), or some are left from before the
 * option was turned off: then every launch holds the move gate, so that
 * no such move unmaps memory while a launch whose kernel may reach it
 * through an address kept in device memory is being issued, and maps
 * every such copy before it goes. */
static bool pauses_lazily(void)
{
    return gvm_spill_maps_later() || __atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_RELAXED);
}

/* A launch whose reach is not known whole holds the move gate for its
 * call: one not scanned, or any while pauses map lazily. A move it waited
 * for at the gate may have left copies unmapped (core/relocate.h,
 * GVM_RELOC_MAP_LATER) while the count read before the wait said none:
 * read again once the gate is held (every lazy shelf for a launch not
 * scanned, the paused ones for a scanned one, whose own regions are
 * mapped below), and if there are some, all are mapped first, as for a
 * launch scanned in part. */
static void enter_gate(struct used *u)
{
    u->gated = true;
    gvm_move_gate_enter();
    unsigned *count = u->unscanned ? &gvm_region_shelf_spills : &gvm_region_shelf_pauses;
    if (!__atomic_load_n(count, __ATOMIC_SEQ_CST)) return;
    gvm_move_gate_leave();
    u->partial = true;
    map_all_and_close();
}

/* A launch that holds the move gate for its call cannot map its own
 * lazily spilled regions once it holds it (mapping is a move, and moves
 * wait for the gate): they are mapped first, and if a swap sent one away
 * again before the gate closed, everything is mapped as for a launch
 * scanned in part. */
static void map_own_then_gate(struct used *u)
{
    if (__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED))
        for (int i = 0; i < u->n; i++)
            if (GVM_LOAD(u->r[i]->shelf_spill)) gvm_relocate(u->r[i], GVM_LOC_HOST, GVM_RELOC_MAPPED);
    enter_gate(u);
    if (u->partial) return;
    for (int i = 0; i < u->n; i++) {
        if (!GVM_LOAD(u->r[i]->shelf_spill)) continue;
        gvm_move_gate_leave();
        u->gated = false;
        u->partial = true;
        map_all_and_close();
        return;
    }
}

/* Finds the regions the launch reaches, lets the policy bring spilled ones
 * back (before they are announced: a region in use cannot move), then
 * announces them for the launch call; lazily spilled ones still away get
 * their memory mapped where it is. A launch scanned in part holds the
 * move gate for its call instead, everything mapped. */
static void scan(struct used *u, void *fn, void **params, void **extra)
{
    collect(u, fn, params, extra);
    if (u->n) gvm_policy_before_launch(u->r, u->n);
    if (u->partial) map_all_and_close();   /* its reach is not known whole */
    else if (u->unscanned || pauses_lazily()) map_own_then_gate(u);   /* no move may run beside its call */
    if (!u->n) return;
    gvm_use_regions(u->r, u->n);
    if (u->partial || !__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED)) return;
    for (int i = 0; i < u->n; i++) {
        uint64_t tick = 0;
        if (GVM_LOAD(u->r[i]->shelf_spill)) u->r[i] = gvm_policy_use_mapped(u->r[i], &tick);
    }
}

static void collect(struct used *u, void *fn, void **params, void **extra)
{
    u->n = 0;
    u->words = 0;
    u->partial = false;
    u->unscanned = false;
    u->gated = false;
    if (!gvm_shim_active()) return;
    if (!gvm_policy_scans_launches()) {
        /* With tracking off, only linked programs reach these hooks: their
         * reach is unknown. Not scanning for now (auto, spill off), a
         * launch goes to the driver holding the move gate (two atomic
         * adds): a move begun meanwhile (a pause or a migrate from gvmctl,
         * a spill turned on live) waits for the call, and the call for the
         * move, whose wait for the devices then covers the launch. The hook
         * is there so that spill turned on later scans it; lazily spilled
         * memory left from a spill since turned off is mapped first. */
        if (!gvm_shim_hooks_launches() || __atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_RELAXED))
            u->partial = true;
        u->unscanned = true;
        return;
    }
    gvm_stat_local_inc(launches_scanned);
    size_t budget = SCAN_LIMIT;
    if (params) {
        const struct layout *l = layout_of(fn);
        if (!l || l->nparams < 0) {
            u->partial = true;
            return;
        }
        for (int i = 0; i < l->nparams; i++) {
            size_t len = l->size[i] < budget ? l->size[i] : budget;
            if (len < l->size[i]) u->partial = true;
            if (params[i]) scan_bytes(u, params[i], len);
            budget -= len;
        }
        return;
    }
    /* The packed form: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs. */
    const void *buf = NULL;
    size_t len = 0;
    for (void **e = extra; e && *e != CU_LAUNCH_PARAM_END; e += 2) {
        if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
        if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1]) len = *(size_t *)e[1];
    }
    if (len > budget) u->partial = true;
    if (buf) scan_bytes(u, buf, len < budget ? len : budget);
}

/* Recorded before the announcements end: a move that takes one of the
 * regions next finds this launch's event (core/usemark.h). */
static void note_uses(const struct used *u, CUresult rc, CUstream s, bool per_thread)
{
    if (rc != CUDA_SUCCESS) return;   /* nothing was queued */
    if (u->partial) gvm_usemark_untracked("a launch scanned in part");
    else if (u->unscanned) gvm_usemark_untracked("a launch not scanned");
    if (!u->n) return;
    if (gvm_capture_open(-1)) {
        /* Captured, it runs at the graph's launch; on another stream, now:
         * no event either way. */
        for (int i = 0; i < u->n; i++) gvm_usemark_unknown(u->r[i]);
        return;
    }
    gvm_usemark_launch(u->r, u->n, s, per_thread);
}

static void release(struct used *u, CUresult rc, CUstream s, bool per_thread)
{
    if (__builtin_expect(__atomic_load_n(&gvm_launch_log_on, __ATOMIC_ACQUIRE), 0) && rc == CUDA_SUCCESS)
        gvm_launch_log_record(u->r, u->n, s, per_thread, u->partial);
    if (gvm_usemark_on()) note_uses(u, rc, s, per_thread);
    for (int i = 0; i < u->n; i++) gvm_use_end(u->r[i]);
    if (u->partial || u->gated) gvm_move_gate_leave();   /* after the stamp: a move begun now waits for the launch */
    if (u->n) gvm_prefetch_after(u->r, u->n);   /* queued: the next swap may start beside it */
}

#define LAUNCH_HOOK(fn, pt)                                                    \
    GVM_EXPORT CUresult CUDAAPI fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, \
                                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params, \
                                   void **extra)                              \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct used u;                                                         \
        scan(&u, (void *)f, params, extra);                                    \
        CUresult rc = GVM_REAL(fn)(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); \
        release(&u, rc, s, pt);                                                \
        return rc;                                                             \
    }

LAUNCH_HOOK(cuLaunchKernel, false)
LAUNCH_HOOK(cuLaunchKernel_ptsz, true)

#define LAUNCH_EX_HOOK(fn, pt)                                                 \
    GVM_EXPORT CUresult CUDAAPI fn(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct used u;                                                         \
        scan(&u, (void *)f, params, extra);                                    \
        CUresult rc = GVM_REAL(fn)(cfg, f, params, extra);                       \
        release(&u, rc, cfg ? cfg->hStream : NULL, pt);                        \
        return rc;                                                             \
    }

LAUNCH_EX_HOOK(cuLaunchKernelEx, false)
LAUNCH_EX_HOOK(cuLaunchKernelEx_ptsz, true)

#define COOP_HOOK(fn, pt)                                                      \
    GVM_EXPORT CUresult CUDAAPI fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, \
                                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        struct used u;                                                         \
        scan(&u, (void *)f, params, NULL);                                     \
        CUresult rc = GVM_REAL(fn)(f, gx, gy, gz, bx, by, bz, shmem, s, params); \
        release(&u, rc, s, pt);                                                \
        return rc;                                                             \
    }

COOP_HOOK(cuLaunchCooperativeKernel, false)
COOP_HOOK(cuLaunchCooperativeKernel_ptsz, true)

/* A graph's kernels are not scanned; its launch waits while any region
 * is being moved, so a replay never races a remap, and finds lazily
 * spilled memory mapped; what it reaches is not known (core/usemark.h). */
#define GRAPH_HOOK(fn)                                                         \
    GVM_EXPORT CUresult CUDAAPI fn(CUgraphExec g, CUstream s)                 \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        map_all_and_close();                                                   \
        CUresult rc = GVM_REAL(fn)(g, s);                                        \
        if (rc == CUDA_SUCCESS) gvm_usemark_untracked("a graph");              \
        gvm_move_gate_leave();                                                 \
        return rc;                                                             \
    }

GRAPH_HOOK(cuGraphLaunch)
GRAPH_HOOK(cuGraphLaunch_ptsz)

int gvm_shim_tag(void) { return gvm_policy_current_tag(); }
