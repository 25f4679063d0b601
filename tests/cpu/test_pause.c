/* Pausing a whole process (gvm_pause(NULL), gvmctl pause PID) on the
 * simulated driver: every allocation leaves its device and keeps working
 * from host memory, the answer counts the bytes, and what cannot be done
 * (a capture open, memory shared with other processes, discarding without
 * a tag, a tag nothing carries) is refused with its reason. */
#include "simcore.h"
#include "core/capture.h"
#include "core/held.h"
#include "core/move.h"
#include "core/phys.h"
#include "core/settings.h"
#include "core/share.h"
#include "policy/config.h"
#include "policy/set.h"
#include "policy/place.h"
#include "policy/policy.h"
#include "policy/derive.h"
#include "reach.h"
#include "policy/tags.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct gvm_config cfg;

static void no_idle_memory(struct gvm_settings *s)
{
    for (int d = 0; d < GVM_MAX_DEVICES; d++) s->cache_limit[d] = s->pool_limit[d] = 0;
    s->host_pool = 0;
}

/* Idle memory kept as by default, so that the pause's release shows. */
static void keep_idle_memory(struct gvm_settings *s) { s->host_pool = 0; }

/* The suite runs twice (tests/cpu/meson.build): with the default, and
 * with the copies mapped only once reached (pause_host_map=lazy). */
static bool lazy_run(void)
{
    const char *lazy = getenv("GVM_TEST_PAUSE_LAZY");
    return lazy && !strcmp(lazy, "1");
}

static void start(void (*tune)(struct gvm_settings *))
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;
    if (lazy_run()) cfg.pause_host_map = GVM_CFG_SPILL_HOST_MAP_LAZY;
    sim_start(2, 512 * MiB, tune);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
}

static uintptr_t palloc_on(int dev, size_t n)
{
    uintptr_t p = 0;
    CUcontext ctx = NULL;
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ(gvm_policy_alloc(n, dev, ctx, gvm_policy_current_tag(), &p), CUDA_SUCCESS);
    CUcontext ctx0 = NULL;
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx0, 0), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    return p;
}

static uintptr_t palloc(size_t n) { return palloc_on(0, n); }

static int where(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.location;
}

static bool paused(uintptr_t p)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    return info.paused;
}

/* The contents read back with a copy, as a program would, in the context
 * of the allocation's device (the one its memory is granted to). */
static bool intact_by_copy(uintptr_t p, size_t n, uint32_t seed)
{
    gvm_info info;
    CHECK_EQ(gvm_query((void *)p, &info), GVM_OK);
    CUcontext ctx = NULL, ctx0 = NULL;
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx, info.device), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx0, 0), CUDA_SUCCESS);
    uint32_t *buf = malloc(n);
    CHECK(buf != NULL);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuMemcpyDtoH_v2(buf, (CUdeviceptr)reach(p), n), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    bool ok = true;
    for (size_t i = 0; i < n / 4 && ok; i++) ok = buf[i] == (seed ^ (uint32_t)(i * 2654435761u));
    free(buf);
    return ok;
}

/* A kernel adding `add` to every word of its buffer. */
static void add_body(void **params)
{
    uint32_t *w = *(uint32_t **)params[0];
    size_t n = *(size_t *)params[1];
    uint32_t add = *(uint32_t *)params[2];
    for (size_t i = 0; i < n / 4; i++) w[i] += add;
}

static void launch_add(uintptr_t p, size_t n, uint32_t add)
{
    static const size_t sizes[] = {sizeof(void *), sizeof(size_t), sizeof(uint32_t)};
    CUfunction f = simcuda_function(add_body, 3, sizes);
    reach(p);
    void *params[] = {&p, &n, &add};
    CHECK_EQ(gvm_drv.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSynchronize(), CUDA_SUCCESS);
}

static bool added(uintptr_t p, size_t n, uint32_t seed, uint32_t add)
{
    const uint32_t *w = (const uint32_t *)p;
    for (size_t i = 0; i < n / 4; i++)
        if (w[i] != (seed ^ (uint32_t)(i * 2654435761u)) + add) return false;
    return true;
}

/* Untagged memory of both devices, small and large, and a tagged
 * allocation: a pause without a tag takes all of it to host, frees every
 * device byte, keeps the contents readable by copies and writable by
 * kernels, and the resume brings each back to its device. */
static void a_whole_process_pause_takes_every_allocation(void)
{
    start(no_idle_memory);
    uintptr_t big = palloc(40 * MiB), small = palloc(3000), other = palloc_on(1, 8 * MiB);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t tagged = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    fill(big, 40 * MiB, 1);
    fill(small, 3000 & ~3u, 2);
    fill(other, 8 * MiB, 3);
    fill(tagged, 8 * MiB, 4);
    size_t on0 = simcuda_phys_bytes(0), on1 = simcuda_phys_bytes(1);
    CHECK(on0 >= 48 * MiB && on1 == 8 * MiB);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, GVM_PAUSE_KEEP, &res), GVM_OK);
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(simcuda_phys_bytes(1), 0);
    CHECK_EQ(res.matched, 4);
    CHECK_EQ(res.done, 4);
    CHECK_EQ(res.already, 0);
    CHECK_EQ(res.device_bytes[0], on0);
    CHECK_EQ(res.device_bytes[1], on1);
    CHECK_EQ(res.bytes, on0 + on1);
    CHECK_EQ(res.released, on0 + on1);
    CHECK_EQ(res.stayed, 0);
    CHECK_EQ(res.to, GVM_HOST);
    CHECK(res.seconds > 0 && res.gbps > 0);
    CHECK_EQ(res.reason[0], 0);
    CHECK(where(big) == GVM_HOST && where(small) == GVM_HOST && where(other) == GVM_HOST &&
          where(tagged) == GVM_HOST);
    /* The program keeps running: copies read it, kernels write it. */
    CHECK(intact_by_copy(big, 40 * MiB, 1) && intact_by_copy(other, 8 * MiB, 3));
    CHECK(intact_by_copy(small, 3000 & ~3u, 2) && intact_by_copy(tagged, 8 * MiB, 4));
    launch_add(big, 40 * MiB, 7);
    CHECK(added(reach(big), 40 * MiB, 1, 7));
    CHECK_EQ(simcuda_unmapped_in_flight(), 0);
    CHECK_EQ(gvm_resume_report(NULL, &res), GVM_OK);
    CHECK_EQ(res.done, 4);
    CHECK_EQ(res.device_bytes[0], on0);
    CHECK_EQ(res.device_bytes[1], on1);
    CHECK_EQ(res.to, GVM_MIXED);
    CHECK(where(big) == 0 && where(small) == 0 && where(other) == 1 && where(tagged) == 0);
    CHECK(!paused(big) && !paused(other));
    CHECK(added(reach(big), 40 * MiB, 1, 7) && intact(reach(small), 3000 & ~3u, 2) && intact(reach(other), 8 * MiB, 3) &&
          intact(reach(tagged), 8 * MiB, 4));
    launch_add(big, 40 * MiB, 1);
    CHECK(added(reach(big), 40 * MiB, 1, 8));
    /* Paused again, then freed while paused (its copy not reached): no
     * copy is left counted as waiting unmapped. */
    CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_SEQ_CST) > 0, lazy_run());
    CHECK_EQ(gvm_policy_free(other), CUDA_SUCCESS);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_pauses, __ATOMIC_SEQ_CST), 0u);
    CHECK_EQ(__atomic_load_n(&gvm_region_shelf_spills, __ATOMIC_SEQ_CST), 0u);
    CHECK(added(reach(big), 40 * MiB, 1, 8) && intact(reach(tagged), 8 * MiB, 4));
}

/* Every pause gives gvmshim's idle device memory back: freed allocations
 * kept for reuse, empty chunks, pooled pieces. */
static void a_pause_releases_the_caches_and_pools(void)
{
    start(keep_idle_memory);
    uintptr_t a = palloc(32 * MiB), freed = palloc(16 * MiB), s[8];
    for (int i = 0; i < 8; i++) s[i] = palloc(100000);
    fill(a, 32 * MiB, 5);
    CHECK_EQ(gvm_policy_free(freed), CUDA_SUCCESS);   /* cached for reuse */
    for (int i = 0; i < 8; i++) CHECK_EQ(gvm_policy_free(s[i]), CUDA_SUCCESS);   /* empty chunk kept */
    size_t idle = gvm_heap_idle_bytes(0);
    CHECK(idle >= 16 * MiB);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(gvm_held_bytes(0), 0);
    CHECK_EQ(res.bytes, 32 * MiB);
    CHECK(res.released >= 32 * MiB + idle);
    /* A repeated pause: nothing to pause, says so; still releases. */
    uintptr_t b = palloc(4 * MiB);
    CHECK_EQ(gvm_policy_free(b), CUDA_SUCCESS);
    CHECK(simcuda_phys_bytes(0) > 0);
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(res.done, 0);
    CHECK_EQ(res.already, 1);
    CHECK_STR(res.reason, "every allocation is paused already");
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(intact(reach(a), 32 * MiB, 5));
}

/* vLLM's leniency: a repeated pause or resume does nothing and says so;
 * an allocation made while paused is an ordinary one, which a resume
 * leaves alone and a second pause takes. */
static void repeats_are_no_ops_and_new_allocations_are_ordinary(void)
{
    start(no_idle_memory);
    uintptr_t a = palloc(16 * MiB);
    fill(a, 16 * MiB, 6);
    gvm_pause_result res;
    CHECK_EQ(gvm_resume_report(NULL, &res), GVM_OK);
    CHECK_EQ(res.done, 0);
    CHECK_STR(res.reason, "no allocation is paused");
    CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
    uintptr_t fresh = palloc(8 * MiB), tiny = palloc(512);
    fill(fresh, 8 * MiB, 7);
    fill(tiny, 512, 8);
    CHECK(where(fresh) == 0 && where(tiny) == 0 && !paused(fresh) && !paused(tiny));
    CHECK_EQ(gvm_resume_report(NULL, &res), GVM_OK);
    CHECK_EQ(res.done, 1);
    CHECK_EQ(res.already, 2);
    CHECK(where(a) == 0 && intact(reach(a), 16 * MiB, 6) && intact(reach(fresh), 8 * MiB, 7) && intact(reach(tiny), 512, 8));
    CHECK_EQ(gvm_resume_report(NULL, &res), GVM_OK);
    CHECK_EQ(res.done, 0);
    /* The fresh ones pause with the rest next time. */
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(res.done, 3);
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(res.done, 0);
    CHECK_EQ(res.already, 3);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(intact(reach(fresh), 8 * MiB, 7) && intact(reach(tiny), 512, 8));
}

/* Memory placed in host memory by the program stays out of a pause: it
 * holds no device memory, and a resume must not send it to a device. */
static void memory_placed_on_host_is_left_alone(void)
{
    start(no_idle_memory);
    uintptr_t h = palloc(8 * MiB), d = palloc(8 * MiB);
    CHECK_EQ(gvm_migrate((void *)h, GVM_HOST), GVM_OK);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(res.matched, 1);
    CHECK(!paused(h) && paused(d));
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(where(h) == GVM_HOST && where(d) == 0);
}

/* What cannot be done is refused with its reason, and nothing moves. */
static void refusals_name_their_reason(void)
{
    start(no_idle_memory);
    CHECK_EQ(gvm_tag_push("kv"), GVM_OK);
    uintptr_t k = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    uintptr_t a = palloc(8 * MiB);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, GVM_PAUSE_DISCARD, &res), GVM_ERR_INVALID);
    CHECK(strstr(res.reason, "discarding needs a tag") != NULL);
    CHECK_EQ(gvm_pause(NULL, GVM_PAUSE_DISCARD), GVM_ERR_INVALID);
    CHECK(!paused(a) && !paused(k));
    /* A tag nothing carries: nothing to do, and the answer says so. */
    CHECK_EQ(gvm_pause_report("nosuchtag", 0, &res), GVM_OK);
    CHECK_EQ(res.matched, 0);
    CHECK_STR(res.reason, "no allocation is tagged nosuchtag");
    CHECK_EQ(gvm_resume_report("nosuchtag", &res), GVM_OK);
    CHECK_STR(res.reason, "no allocation is tagged nosuchtag");
    CHECK_EQ(gvm_pause_report(NULL, 9, &res), GVM_ERR_INVALID);
    CHECK(strstr(res.reason, "unknown pause flags") != NULL);
    /* A tag discards; the untagged one stays. */
    CHECK_EQ(gvm_pause_report("kv", GVM_PAUSE_DISCARD, &res), GVM_OK);
    CHECK_EQ(res.to, GVM_NOWHERE);
    CHECK_EQ(res.bytes, 8 * MiB);
    CHECK(paused(k) && !paused(a));
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
}

/* A capture open anywhere: the pause would wait for the devices, which
 * breaks a capture; refused at once, naming the device. */
static void a_pause_during_a_capture_is_refused(void)
{
    start(no_idle_memory);
    uintptr_t a = palloc(8 * MiB);
    CUstream s;
    CHECK_EQ(gvm_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    gvm_capture_begin(0, s, CU_STREAM_CAPTURE_MODE_RELAXED);   /* as the capture hook does */
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_ERR_BUSY);
    CHECK_STR(res.reason, "a stream capture is open on device 0");
    CHECK_EQ(res.bytes, 0);
    CHECK(!paused(a) && where(a) == 0);
    CHECK_EQ(gvm_resume_report(NULL, &res), GVM_ERR_BUSY);
    CUgraph g = NULL;
    CHECK_EQ(gvm_drv.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    CHECK_EQ(gvm_capture_end(s), 0);
    CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
    CHECK(paused(a));
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    /* One begun while the pause runs: the waits are refused from then on,
     * and what was not moved yet stays. */
    simcuda_fail_calls("cuCtxSynchronize", 1, 100, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    gvm_status st = gvm_pause_report(NULL, 0, &res);
    simcuda_fail_calls("cuCtxSynchronize", 0, 0, CUDA_SUCCESS);
    CHECK_EQ(st, GVM_ERR_BUSY);
    CHECK_STR(res.reason, "a stream capture began: 8388608 bytes stay");
    CHECK(!paused(a) && where(a) == 0);
}

/* Memory exported to other processes (CUDA IPC) stays where they map it;
 * the rest pauses, and the answer says how much stayed and why. */
static void shared_memory_stays_and_the_rest_pauses(void)
{
    start(no_idle_memory);
    uintptr_t shared = palloc(16 * MiB), a = palloc(8 * MiB);
    fill(a, 8 * MiB, 9);
    struct gvm_share s;
    CHECK_EQ(gvm_share_lock(shared, &s), CUDA_SUCCESS);
    CHECK_EQ(gvm_share_export(&s), CUDA_SUCCESS);
    gvm_share_unlock(&s);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_ERR_BUSY);
    CHECK_EQ(res.stayed, 16 * MiB);
    CHECK_EQ(res.stayed_shared, 16 * MiB);
    CHECK_EQ(res.bytes, 8 * MiB);
    CHECK_STR(res.reason, "16777216 bytes are shared with other processes and stay");
    CHECK(where(shared) == 0 && !paused(shared) && paused(a));
    CHECK_EQ(simcuda_phys_bytes(0), 16 * MiB);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(where(a) == 0 && intact(reach(a), 8 * MiB, 9));
    gvm_share_drop_fds(&s);
}

static void small_blocks(struct gvm_settings *s)
{
    no_idle_memory(s);
    s->block_size = 8 * MiB;
}

/* A driver call failing anywhere in a whole-process pause or resume:
 * every allocation stays valid with its contents, wherever it is, and a
 * later resume brings everything back. */
static void a_failure_anywhere_keeps_every_allocation(void)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;
    sim_start(2, 512 * MiB, small_blocks);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    uintptr_t p[4] = {palloc(20 * MiB), palloc(3000), palloc(8 * MiB), palloc_on(1, 8 * MiB)};
    size_t n[4] = {20 * MiB, 3000 & ~3u, 8 * MiB, 8 * MiB};
    for (int i = 0; i < 4; i++) fill(p[i], n[i], 20 + (uint32_t)i);
    simcuda_reset_counts();
    CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
    unsigned long npause = simcuda_call_count_here();
    simcuda_reset_counts();
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    unsigned long nresume = simcuda_call_count_here();
    CHECK(npause > 10 && nresume > 10);
    int failed = 0;
    unsigned long step = lazy_run() ? test_repeat_sweep_step() : test_sweep_step();
    for (unsigned long k = 1; k <= npause + nresume; k += step) {
        bool in_resume = k > npause;
        if (in_resume) CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
        simcuda_fail_nth_here(in_resume ? k - npause : k, CUDA_ERROR_ILLEGAL_STATE);
        gvm_pause_result res;
        gvm_status st = in_resume ? gvm_resume_report(NULL, &res) : gvm_pause_report(NULL, 0, &res);
        simcuda_fail_nth_here(0, CUDA_SUCCESS);
        if (st != GVM_OK) {
            failed++;
            CHECK_EQ(st, GVM_ERR_DRIVER);
            CHECK(strstr(res.reason, "failed (driver error") != NULL);
        }
        for (int i = 0; i < 4; i++) CHECK(intact_by_copy(p[i], n[i], 20 + (uint32_t)i));
        CHECK_EQ(gvm_resume(NULL), GVM_OK);
        for (int i = 0; i < 4; i++) CHECK(where(p[i]) == (i == 3 ? 1 : 0) && intact(reach(p[i]), n[i], 20 + (uint32_t)i));
    }
    CHECK(failed > 10 / (int)step);
}

static void no_prefill(struct gvm_settings *s)
{
    no_idle_memory(s);
    s->host_prefill = GVM_HOST_PREFILL_OFF;
    s->block_size = 8 * MiB;
}

/* A first pause finds no host memory ready: it creates all of it at once
 * (in parallel) before the moves, piece for piece what the moves take,
 * none left over; the resume keeps it pooled for the next pause. */
static void a_cold_pause_creates_its_host_memory_at_once(void)
{
    gvm_config_defaults(&cfg);
    cfg.cache_idle = 0;
    sim_start(2, 512 * MiB, no_prefill);
    CHECK_EQ(gvm_policy_start(&cfg), CUDA_SUCCESS);
    size_t sizes[] = {20 * MiB, 3000, 6 * MiB, 2 * MiB, 24 * MiB, 100000};
    uintptr_t p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = palloc(sizes[i]);
        fill(p[i], sizes[i] & ~(size_t)3, 30 + (uint32_t)i);
    }
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);
    CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), 0);
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), 0);              /* every piece made was taken */
    CHECK_EQ(gvm_held_bytes(GVM_LOC_HOST), res.bytes);       /* and nothing else made */
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK_EQ(gvm_phys_pooled(GVM_LOC_HOST), res.bytes);      /* kept for the next pause */
    for (int i = 0; i < 6; i++) CHECK(intact(reach(p[i]), sizes[i] & ~(size_t)3, 30 + (uint32_t)i));
}

/* Many regions: one wait for the devices for the whole pause or resume,
 * not one per region (core/relocate.h, gvm_relocate_batch). */
static void a_pause_waits_for_the_devices_once(void)
{
    start(no_idle_memory);
    uintptr_t p[24];
    for (int i = 0; i < 24; i++) {
        p[i] = palloc(4 * MiB);
        fill(p[i], 4 * MiB, 40 + (uint32_t)i);
    }
    simcuda_reset_counts();
    CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
    CHECK(simcuda_calls_of("cuCtxSynchronize") <= 2 * 2);   /* two devices, a wait each, and a trim's */
    for (int i = 0; i < 24; i++) CHECK(paused(p[i]) && intact(reach(p[i]), 4 * MiB, 40 + (uint32_t)i));
    simcuda_reset_counts();
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
    CHECK(simcuda_calls_of("cuCtxSynchronize") <= 2);
    for (int i = 0; i < 24; i++) CHECK(where(p[i]) == 0 && intact(reach(p[i]), 4 * MiB, 40 + (uint32_t)i));
}

struct holder {
    struct gvm_region *r;
    int held;   /* atomic: the test thread waits on it */
};

static void *hold_a_while(void *arg)
{
    struct holder *h = arg;
    pthread_mutex_lock(&h->r->op);
    __atomic_store_n(&h->held, 1, __ATOMIC_RELEASE);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&h->r->op);
    return NULL;
}

/* A region another thread holds while the batch takes its regions is
 * left out of the batch and paused on its own once free. */
static void a_busy_region_pauses_after_the_batch(void)
{
    start(no_idle_memory);
    uintptr_t p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = palloc(4 * MiB);
        fill(p[i], 4 * MiB, 50 + (uint32_t)i);
    }
    struct holder h = {.r = gvm_heap_region(p[2])};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, hold_a_while, &h), 0);
    while (!__atomic_load_n(&h.held, __ATOMIC_ACQUIRE)) sched_yield();
    gvm_pause_result res;
    CHECK_EQ(gvm_pause_report(NULL, 0, &res), GVM_OK);
    pthread_join(t, NULL);
    CHECK_EQ(res.done, 4);
    CHECK_EQ(res.bytes, 16 * MiB);
    for (int i = 0; i < 4; i++) CHECK(paused(p[i]) && intact(reach(p[i]), 4 * MiB, 50 + (uint32_t)i));
    CHECK_EQ(simcuda_phys_bytes(0), 0);
    CHECK_EQ(gvm_resume(NULL), GVM_OK);
}

struct worker {
    uintptr_t buf[6];
    int stop;   /* atomic: the main thread tells the program to stop */
    uint32_t last[6];
    int rounds;
};

/* The program's side: copies into its buffers (announced, as the hooks
 * do), allocations and frees, without pause. */
static void *program_thread(void *arg)
{
    struct worker *w = arg;
    CUcontext ctx = NULL;
    CHECK_EQ(gvm_drv.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(gvm_drv.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    uint32_t *host = malloc(MiB);
    CHECK(host != NULL);
    for (uint32_t k = 1; !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); k++) {
        int i = (int)(k % 6);
        for (size_t j = 0; j < MiB / 4; j++) host[j] = k * 7919u + (uint32_t)j;
        uint64_t tick = 0;
        struct gvm_region *r = gvm_use_begin(w->buf[i]);
        if (r && gvm_policy_unmapped(r)) r = gvm_policy_use_mapped(r, &tick);
        CHECK_EQ(gvm_drv.cuMemcpyHtoD_v2((CUdeviceptr)w->buf[i], host, MiB), CUDA_SUCCESS);
        gvm_use_end(r);
        w->last[i] = k;
        uintptr_t t = 0;
        CHECK_EQ(gvm_policy_alloc(k % 2 ? 3 * MiB : 5000, 0, ctx, 0, &t), CUDA_SUCCESS);
        CHECK_EQ(gvm_policy_free(t), CUDA_SUCCESS);
        w->rounds++;
    }
    free(host);
    return NULL;
}

/* Pauses and resumes while the program copies, allocates and frees on
 * another thread: none waits for the other for ever, and every byte the
 * program wrote is there. */
static void pause_and_resume_while_the_program_runs(void)
{
    start(no_idle_memory);
    struct worker w = {0};
    for (int i = 0; i < 6; i++) w.buf[i] = palloc(i % 2 ? MiB : 2 * MiB);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, program_thread, &w), 0);
    for (long round = 0; round < test_scaled(8); round++) {
        CHECK_EQ(gvm_pause(NULL, 0), GVM_OK);
        CHECK_EQ(gvm_resume(NULL), GVM_OK);
    }
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(w.rounds > 0);
    for (int i = 0; i < 6; i++) {
        if (!w.last[i]) continue;
        const uint32_t *p = (const uint32_t *)w.buf[i];
        for (size_t j = 0; j < MiB / 4; j++) CHECK_EQ(p[j], w.last[i] * 7919u + (uint32_t)j);
        CHECK(!paused(w.buf[i]));
    }
}

/* gvmctl migrate's answer in bytes. */
static void migrate_answers_in_bytes(void)
{
    start(no_idle_memory);
    CHECK_EQ(gvm_tag_push("w"), GVM_OK);
    uintptr_t w = palloc(8 * MiB);
    CHECK_EQ(gvm_tag_pop(), GVM_OK);
    uintptr_t a = palloc(4 * MiB);
    gvm_pause_result res;
    CHECK_EQ(gvm_policy_migrate_report("w", GVM_HOST, &res), GVM_OK);
    CHECK_EQ(res.bytes, 8 * MiB);
    CHECK_EQ(res.device_bytes[0], 8 * MiB);
    CHECK_EQ(where(w), GVM_HOST);
    CHECK_EQ(gvm_policy_migrate_report(NULL, 1, &res), GVM_OK);
    CHECK_EQ(res.bytes, 12 * MiB);
    CHECK_EQ(res.device_bytes[1], 12 * MiB);
    CHECK(where(w) == 1 && where(a) == 1);
    CHECK_EQ(gvm_policy_migrate_report("nosuchtag", 0, &res), GVM_OK);
    CHECK_STR(res.reason, "no allocation is tagged nosuchtag");
}

static const struct test_case cases[] = {
    TEST_ENTRY(a_whole_process_pause_takes_every_allocation)
    TEST_ENTRY(a_pause_releases_the_caches_and_pools)
    TEST_ENTRY(repeats_are_no_ops_and_new_allocations_are_ordinary)
    TEST_ENTRY(memory_placed_on_host_is_left_alone)
    TEST_ENTRY(refusals_name_their_reason)
    TEST_ENTRY(a_pause_during_a_capture_is_refused)
    TEST_ENTRY(shared_memory_stays_and_the_rest_pauses)
    TEST_ENTRY(a_failure_anywhere_keeps_every_allocation)
    TEST_ENTRY(a_cold_pause_creates_its_host_memory_at_once)
    TEST_ENTRY(a_pause_waits_for_the_devices_once)
    TEST_ENTRY(a_busy_region_pauses_after_the_batch)
    TEST_ENTRY(pause_and_resume_while_the_program_runs)
    TEST_ENTRY(migrate_answers_in_bytes)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
