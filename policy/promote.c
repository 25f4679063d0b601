/* Promotion: a background thread brings spilled allocations that were used
 * since they left back to their device while it has room, hottest first,
 * at most promote_rate bytes per second; and, once a device's limit rose
 * (gvmctl set), every spilled allocation of it that fits, at once. A move waits for the program's
 * announced calls and launches on the region (core/move.h) and for queued
 * work, so the program stalls only for as long as the copy takes. */
#include "policy/promote.h"

#include "core/capture.h"
#include "core/log.h"
#include "core/relocate.h"
#include "core/topo.h"
#include "policy/policy.h"
#include "policy/victims.h"

#include <pthread.h>
#include <time.h>

/* Room is kept for a margin, so promotion does not push the device straight
 * back over its limit at the next allocation. */
static size_t margin(int device) { return gvm_policy_limit(device) / 16; }

/* Moves while budget lasts; the last move may pass it (the caller carries
 * the excess over as debt), so an allocation larger than one round's
 * budget comes back too. */
static size_t promote_device(int device, size_t budget)
{
    struct gvm_victims c = {0};
    gvm_victims_spilled(device, &c);
    size_t moved = 0;
    for (size_t i = 0; i < c.n; i++) {
        size_t bytes = GVM_LOAD(c.v[i].r->mapped);
        if (moved >= budget) break;
        if (!gvm_policy_fits(device, bytes + margin(device))) break;
        if (gvm_relocate(c.v[i].r, device, GVM_RELOC_PROMOTE) == CUDA_SUCCESS) moved += bytes;
    }
    gvm_victims_free(&c);
    return moved;
}

/* Devices whose spilled memory comes home whole (bit d: device d), at
 * the link's speed rather than promote_rate: their limit rose
 * (gvm_promoter_bring_home). */
static uint64_t homing;
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;

/* Every spilled region of `device` that fits under its limit (with the
 * margin) comes back, used since it left or not, most wanted first: a
 * program whose limit was raised or removed runs as fast as before once
 * its memory is home, and waiting for each region's next use would make
 * its next steps pay a demand swap per region. */
static void bring_home(int device)
{
    struct gvm_victims c = {0};
    gvm_victims_spilled_all(device, &c);
    size_t moved = 0, left = 0;
    for (size_t i = 0; i < c.n; i++) {
        size_t bytes = GVM_LOAD(c.v[i].r->mapped);
        if (gvm_policy_fits(device, bytes + margin(device)) &&
            gvm_relocate(c.v[i].r, device, GVM_RELOC_PROMOTE) == CUDA_SUCCESS)
            moved += bytes;
        else
            left++;
    }
    gvm_victims_free(&c);
    gvm_debug("promote: device %d's limit rose: %zu bytes brought home, %zu region(s) left out", device, moved,
              left);
}

/* The round's deadline is on the monotonic clock: a change of the
 * wall clock must not stall promotion. */
static void init_wake(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &a);
    pthread_condattr_destroy(&a);
}

/* Sleeps ms, or less when a device's memory is to come home (unless
 * that request waits already: a capture was open). */
static void wait_round(uint64_t ms, bool early)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&wake_lock);
    while (!early || !__atomic_load_n(&homing, __ATOMIC_ACQUIRE))
        if (pthread_cond_timedwait(&wake, &wake_lock, &until)) break;   /* timed out */
    pthread_mutex_unlock(&wake_lock);
}

/* The configuration is read each round: gvmctl set may change the
 * interval and the rate, or turn promotion (or spilling) off and on. */
static void *promoter(void *arg)
{
    (void)arg;
    /* Bytes that may move now: each round adds its share of promote_rate,
     * unused credit is not saved up past one round, and a move larger than
     * the credit leaves it negative, a debt later rounds pay back. */
    double credit = 0;
    bool deferred = false;   /* a request to bring memory home waits for a capture to close */
    for (;;) {
        uint64_t ms = gvm_policy_cfg()->promote_interval;
        wait_round(ms, !deferred);
        const struct gvm_config *cfg = gvm_policy_cfg();
        double want = (double)cfg->promote_rate * (double)ms / 1000.0;
        credit = credit + want < want ? credit + want : want;
        if (!cfg->promote) {
            __atomic_store_n(&homing, 0, __ATOMIC_RELEASE);   /* promotion off: nothing comes home */
            continue;
        }
        deferred = gvm_capture_open(-1);
        if (deferred) continue;   /* a move would wait for the devices */
        uint64_t home = __atomic_exchange_n(&homing, 0, __ATOMIC_ACQ_REL);
        for (int d = 0; d < gvm_topo.ndev && home; d++)
            if ((home >> d & 1) && gvm_topo.dev[d].vmm) bring_home(d);
        if (credit <= 0) continue;
        /* A rate near SIZE_MAX times the interval is past what size_t holds
         * (and converting such a double is undefined): saturate. */
        size_t budget = credit < (double)SIZE_MAX ? (size_t)credit : SIZE_MAX;
        for (int d = 0; d < gvm_topo.ndev && credit > 0; d++) {
            if (!gvm_topo.dev[d].vmm) continue;
            size_t moved = promote_device(d, budget);
            credit -= (double)moved;
            budget = moved < budget ? budget - moved : 0;
        }
    }
    return NULL;
}

void gvm_promoter_bring_home(int device)
{
    if (device < 0 || device >= gvm_topo.ndev) return;
    pthread_once(&wake_once, init_wake);
    __atomic_or_fetch(&homing, 1ull << device, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&wake_lock);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&wake_lock);
}

void gvm_promoter_start(void)
{
    static bool started;
    if (__atomic_exchange_n(&started, true, __ATOMIC_ACQ_REL)) return;
    pthread_once(&wake_once, init_wake);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, promoter, NULL)) {
        gvm_warn("cannot start the promoter thread; spilled allocations stay where they are");
        __atomic_store_n(&started, false, __ATOMIC_RELEASE);   /* a later start tries again */
    }
    pthread_attr_destroy(&attr);
}
