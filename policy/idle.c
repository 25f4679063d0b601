/* The giver-back: a thread that hands the device the freed allocations the
 * heap cached (core/heap.h), and the pieces pooled for moves, once they
 * have gone unused for cache_idle. A
 * program that frees and allocates in a loop reuses them long before
 * that; one that frees and moves on (torch.cuda.empty_cache, the end of a
 * phase) sees its memory go, as natively, within cache_idle. Giving back
 * waits for the device once when the memory's users may still run, which
 * is why a thread of its own does it. */
#include "policy/idle.h"

#include "core/heap.h"
#include "core/log.h"
#include "core/topo.h"
#include "policy/policy.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* A round runs under round_lock; the exit handler takes it to wait for a
 * round under way (the driver's own exit handlers run after ours) and
 * stops the thread. */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
static bool stopped;

static void stop_at_exit(void)
{
    pthread_mutex_lock(&round_lock);
    __atomic_store_n(&stopped, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&round_lock);
}

/* A forked child has no giver-back, and must not wait at its exit on a
 * lock the parent's held at the fork. */
static void after_fork_child(void)
{
    pthread_mutex_init(&round_lock, NULL);
    __atomic_store_n(&stopped, true, __ATOMIC_RELEASE);
}

static void nap(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *give_back_rounds(void *arg)
{
    (void)arg;
    for (;;) {
        /* Read each round: gvmctl set may change it. */
        uint64_t idle = gvm_policy_cfg()->cache_idle;
        nap(idle ? (idle / 4 > 10 ? idle / 4 : 10) : 1000);
        if (!idle) continue;
        pthread_mutex_lock(&round_lock);
        if (__atomic_load_n(&stopped, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&round_lock);
            return NULL;
        }
        for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim_idle(d, idle * 1000000u);
        pthread_mutex_unlock(&round_lock);
    }
}

void gvm_idle_give_back(int device)
{
    if (device < 0 || device >= gvm_topo.ndev) return;
    pthread_mutex_lock(&round_lock);
    if (!__atomic_load_n(&stopped, __ATOMIC_ACQUIRE)) gvm_heap_trim(device);
    pthread_mutex_unlock(&round_lock);
}

void gvm_idle_hold(bool on)
{
    if (on)
        pthread_mutex_lock(&round_lock);
    else
        pthread_mutex_unlock(&round_lock);
}

void gvm_idle_start(void)
{
    static bool started;
    if (__atomic_load_n(&started, __ATOMIC_ACQUIRE) || __atomic_exchange_n(&started, true, __ATOMIC_ACQ_REL)) return;
    if (atexit(stop_at_exit) || pthread_atfork(NULL, NULL, after_fork_child)) return;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, give_back_rounds, NULL))
        gvm_warn("cannot start the thread that gives idle cached memory back; it is kept until needed");
    pthread_attr_destroy(&attr);
}
