#include "core/capture.h"

#include "core/driver.h"
#include "core/location.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

struct capture {
    CUstream stream;
    int dev;
    CUstreamCaptureMode mode;
    pthread_t thread;
};

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct capture *captures;
static size_t ncaptures, cap_captures;

/* Open captures per device, on a device not known (every device), in all;
 * waits running per device and on every device. */
static unsigned open_on[GVM_MAX_DEVICES], open_unknown, open_total;
static unsigned waits_on[GVM_MAX_DEVICES], waits_all;

static unsigned *open_counter(int dev) { return dev >= 0 && dev < GVM_MAX_DEVICES ? &open_on[dev] : &open_unknown; }

static bool waits_running(int dev)
{
    if (__atomic_load_n(&waits_all, __ATOMIC_SEQ_CST)) return true;
    if (dev >= 0 && dev < GVM_MAX_DEVICES) return __atomic_load_n(&waits_on[dev], __ATOMIC_SEQ_CST) != 0;
    for (int d = 0; d < GVM_MAX_DEVICES; d++)
        if (__atomic_load_n(&waits_on[d], __ATOMIC_SEQ_CST)) return true;
    return false;
}

static bool same(const struct capture *c, CUstream s)
{
    /* The per-thread default stream is one handle naming each thread's own. */
    return c->stream == s && (s != CU_STREAM_PER_THREAD || pthread_equal(c->thread, pthread_self()));
}

void gvm_capture_begin(int dev, CUstream stream, CUstreamCaptureMode mode)
{
    pthread_mutex_lock(&capture_lock);
    if (ncaptures == cap_captures) {
        size_t cap = cap_captures ? cap_captures * 2 : 16;
        struct capture *nc = realloc(captures, cap * sizeof *nc);
        if (nc) {
            captures = nc;
            cap_captures = cap;
        }
    }
    /* Without room for the record the capture still blocks waits, on every
     * device, until the process ends: safe, if slower. */
    if (ncaptures < cap_captures)
        captures[ncaptures++] = (struct capture){stream, dev, mode, pthread_self()};
    else
        dev = -1;
    __atomic_fetch_add(open_counter(dev), 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&open_total, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&capture_lock);
    while (waits_running(dev)) sched_yield();
}

/* The newest record of stream first: a begin refused because the stream
 * already captures is undone without touching the capture under way. */
static int forget(CUstream stream)
{
    int dev = -2;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = ncaptures; i-- > 0;) {
        if (!same(&captures[i], stream)) continue;
        dev = captures[i].dev;
        captures[i] = captures[--ncaptures];
        __atomic_fetch_sub(open_counter(dev), 1, __ATOMIC_SEQ_CST);
        __atomic_fetch_sub(&open_total, 1, __ATOMIC_SEQ_CST);
        break;
    }
    pthread_mutex_unlock(&capture_lock);
    return dev;
}

void gvm_capture_forget_device(int dev)
{
    pthread_mutex_lock(&capture_lock);
    for (size_t i = ncaptures; i-- > 0;) {
        if (captures[i].dev != dev) continue;
        captures[i] = captures[--ncaptures];
        __atomic_fetch_sub(open_counter(dev), 1, __ATOMIC_SEQ_CST);
        __atomic_fetch_sub(&open_total, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&capture_lock);
}

void gvm_capture_abort(CUstream stream) { forget(stream); }

int gvm_capture_end(CUstream stream) { return forget(stream); }

bool gvm_capture_open(int dev)
{
    if (!__atomic_load_n(&open_total, __ATOMIC_SEQ_CST)) return false;
    if (dev < 0 || dev >= GVM_MAX_DEVICES) return true;
    return __atomic_load_n(&open_on[dev], __ATOMIC_SEQ_CST) || __atomic_load_n(&open_unknown, __ATOMIC_SEQ_CST);
}

static unsigned *wait_counter(int dev) { return dev >= 0 && dev < GVM_MAX_DEVICES ? &waits_on[dev] : &waits_all; }

bool gvm_capture_wait_begin(int dev)
{
    __atomic_fetch_add(wait_counter(dev), 1, __ATOMIC_SEQ_CST);
    if (!gvm_capture_open(dev)) return true;
    __atomic_fetch_sub(wait_counter(dev), 1, __ATOMIC_SEQ_CST);
    return false;
}

void gvm_capture_wait_end(int dev) { __atomic_fetch_sub(wait_counter(dev), 1, __ATOMIC_SEQ_CST); }

bool gvm_capture_forbids_unsafe(CUstreamCaptureMode thread_mode)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED || !gvm_capture_open(-1)) return false;
    bool forbidden = false;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < ncaptures && !forbidden; i++) {
        const struct capture *c = &captures[i];
        bool mine = pthread_equal(c->thread, pthread_self());
        if (mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) forbidden = true;
        if (!mine && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
            forbidden = true;
    }
    pthread_mutex_unlock(&capture_lock);
    return forbidden;
}

CUstreamCaptureMode gvm_capture_relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (gvm_drv.cuThreadExchangeStreamCaptureMode) DRV(cuThreadExchangeStreamCaptureMode, &m);
    return m;
}

void gvm_capture_restore(CUstreamCaptureMode m)
{
    if (gvm_drv.cuThreadExchangeStreamCaptureMode) DRV(cuThreadExchangeStreamCaptureMode, &m);
}
