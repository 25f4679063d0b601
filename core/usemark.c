#include "core/usemark.h"

#include "core/driver.h"
#include "core/log.h"
#include "core/region.h"
#include "core/stats.h"
#include "core/topo.h"

#include <sched.h>

bool gvm_usemark_recording;

/* gvm_topo_quiesce_epoch() + 1 at the last work of unknown reach (and at
 * the start of recording: launches before it recorded nothing). */
static uint64_t untracked;
static const char *untracked_why = "the start of recording";

/* Resets so far (gvm_usemark_forget). */
static unsigned era;

void gvm_usemark_forget(void) { __atomic_add_fetch(&era, 1, __ATOMIC_ACQ_REL); }

static uint64_t stamp_now(void);

static void lock(struct gvm_usemark *m)
{
    while (__atomic_test_and_set(&m->busy, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&m->busy, __ATOMIC_RELAXED)) sched_yield();
    unsigned now = __atomic_load_n(&era, __ATOMIC_ACQUIRE);
    if (m->era == now) return;
    /* Made before a reset: dropped unused; a whole wait covers their work. */
    for (int i = 0; i < GVM_USEMARK_STREAMS; i++) {
        m->ev[i] = NULL;
        m->used[i] = false;
    }
    m->unknown = stamp_now();
    m->era = now;
}

static void unlock(struct gvm_usemark *m) { __atomic_clear(&m->busy, __ATOMIC_RELEASE); }

static uint64_t stamp_now(void) { return gvm_topo_quiesce_epoch() + 1; }

/* Whether the work stamped `stamp` is known finished. */
static bool settled(uint64_t stamp) { return !stamp || gvm_topo_quiesced(stamp - 1); }

static void mark_unknown(struct gvm_usemark *m) { __atomic_store_n(&m->unknown, stamp_now(), __ATOMIC_RELEASE); }

/* The slot for (stream, owner): its own, a free one, or one whose last
 * work finished. -1 when all are busy on other streams. Under the lock. */
static int slot_for(struct gvm_usemark *m, CUstream stream, uintptr_t owner)
{
    for (int i = 0; i < GVM_USEMARK_STREAMS; i++)
        if (m->used[i] && m->stream[i] == stream && m->owner[i] == owner) return i;
    for (int i = 0; i < GVM_USEMARK_STREAMS; i++)
        if (!m->used[i]) return i;
    for (int i = 0; i < GVM_USEMARK_STREAMS; i++)
        if (DRV(cuEventQuery, m->ev[i]) == CUDA_SUCCESS) return i;
    return -1;
}

static void record(struct gvm_usemark *m, CUstream stream, uintptr_t owner)
{
    lock(m);
    int i = slot_for(m, stream, owner);
    bool ok = i >= 0 && (m->ev[i] || DRV(cuEventCreate, &m->ev[i], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
    if (ok && DRV(cuEventRecord, m->ev[i], stream) == CUDA_SUCCESS) {
        m->stream[i] = stream;
        m->owner[i] = owner;
        m->used[i] = true;
    } else {
        /* The slot's earlier record, if any, still stands for its stream. */
        mark_unknown(m);
    }
    unlock(m);
}

/* A number per thread, never reused (pthread_self is: a thread started
 * after another ended may get its id while the ended one's work still
 * runs on its own default stream). */
static uintptr_t thread_number(void)
{
    static uintptr_t threads;
    static __thread uintptr_t mine __attribute__((tls_model("initial-exec")));
    if (!mine) mine = __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED);
    return mine;
}

void gvm_usemark_launch(struct gvm_region *const *r, int n, CUstream stream, bool per_thread)
{
    uintptr_t owner = 0;
    if (per_thread && !stream) stream = CU_STREAM_PER_THREAD;
    /* One handle, a stream per thread: the thread tells them apart. */
    if (stream == CU_STREAM_PER_THREAD) owner = thread_number();
    for (int i = 0; i < n; i++) record(&r[i]->usemark, stream, owner);
}

void gvm_usemark_unknown(struct gvm_region *r)
{
    if (r && gvm_usemark_on()) mark_unknown(&r->usemark);
}

void gvm_usemark_untracked(const char *why)
{
    if (!gvm_usemark_on()) return;
    __atomic_store_n(&untracked_why, why, __ATOMIC_RELAXED);
    __atomic_store_n(&untracked, stamp_now(), __ATOMIC_RELEASE);
}

void gvm_usemark_reset(struct gvm_region *r)
{
    struct gvm_usemark *m = &r->usemark;
    lock(m);
    for (int i = 0; i < GVM_USEMARK_STREAMS; i++) m->used[i] = false;
    m->unknown = 0;
    unlock(m);
}

/* Copies r's events out, or says that one of its uses is unknown. */
static bool events_of(struct gvm_region *r, CUevent *ev, int *nev)
{
    struct gvm_usemark *m = &r->usemark;
    lock(m);
    bool known = settled(__atomic_load_n(&m->unknown, __ATOMIC_ACQUIRE));
    for (int i = 0; known && i < GVM_USEMARK_STREAMS; i++)
        if (m->used[i]) ev[(*nev)++] = m->ev[i];
    unlock(m);
    return known;
}

CUresult gvm_usemark_wait(struct gvm_region *const *r, int n)
{
    if (!gvm_usemark_on()) {
        /* From now on launches record; the whole wait covers those before. */
        __atomic_store_n(&untracked, stamp_now(), __ATOMIC_SEQ_CST);
        __atomic_store_n(&gvm_usemark_recording, true, __ATOMIC_SEQ_CST);
        return gvm_topo_quiesce();
    }
    if (!settled(__atomic_load_n(&untracked, __ATOMIC_ACQUIRE))) {
        gvm_debug("use wait: whole: work of unknown reach (%s) since the last whole wait",
                  __atomic_load_n(&untracked_why, __ATOMIC_RELAXED));
        return gvm_topo_quiesce();
    }
    CUevent ev[n * GVM_USEMARK_STREAMS + 1];
    int nev = 0;
    for (int i = 0; i < n; i++)
        if (r[i] && !events_of(r[i], ev, &nev)) {
            gvm_debug("use wait: whole: a use of %#lx not recorded", (unsigned long)r[i]->base);
            return gvm_topo_quiesce();
        }
    /* The events are the records' own: a launch re-recording one meanwhile
     * named a region the caller holds (it waits for the move), or one it
     * does not (later work, waited for too). */
    for (int i = 0; i < nev; i++)
        if (DRV(cuEventSynchronize, ev[i]) != CUDA_SUCCESS) return gvm_topo_quiesce();
    gvm_stat_inc(use_waits);
    return CUDA_SUCCESS;
}
