#define _GNU_SOURCE
#include "core/trace.h"

#include "core/log.h"
#include "core/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Moves are rare next to the 100 ms the writer sleeps; a thread that makes
 * more than this many in one interval loses the rest (counted). */
#define RING_EVENTS 256
#define INTERVAL_MS 100
#define OUT_BUF 65536
/* Room kept below the bound for the closing events. */
#define TAIL_RESERVE 512

struct slice {
    const char *what;
    uintptr_t base;
    size_t bytes;
    int from, to;
    uint64_t t0, t1;
    bool ok;
    int64_t res_from, res_to;   /* resident bytes there right after the move */
};

/* One producer (its thread), one consumer (the writer). */
struct ring {
    struct slice ev[RING_EVENTS];
    uint32_t head, tail;
    int tid;
    int gone;                  /* its thread exited: the ring may be reused */
    struct ring *next;
};

bool gvm_trace_enabled;

static struct {
    int fd, ndev;
    size_t max, written;
    bool truncated, first, stopping;
    uint64_t start_ns, dropped;
    uint64_t last_allocs, last_frees;
    int64_t last_resident[GVM_LOC_SLOTS], last_live[GVM_MAX_DEVICES];
    bool sampled;
    char buf[OUT_BUF];
    size_t len;
    pthread_t writer;
    pthread_mutex_t lock;      /* rings list, stop flag */
    pthread_cond_t wake;
    struct ring *rings;
    pthread_key_t key;
} T = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static __thread struct ring *mine;

uint64_t gvm_trace_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t gvm_trace_dropped(void) { return __atomic_load_n(&T.dropped, __ATOMIC_RELAXED); }

bool gvm_trace_truncated(void) { return __atomic_load_n(&T.truncated, __ATOMIC_RELAXED); }

/* ---- producers ---------------------------------------------------------- */

static void thread_gone(void *r) { __atomic_store_n(&((struct ring *)r)->gone, 1, __ATOMIC_RELEASE); }

static struct ring *my_ring(void)
{
    if (mine) return mine;
    pthread_mutex_lock(&T.lock);
    struct ring *r = T.rings;
    /* A ring its thread left behind, emptied by the writer, is reused. */
    while (r && !(__atomic_load_n(&r->gone, __ATOMIC_ACQUIRE) &&
                  __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) == r->head))
        r = r->next;
    if (r) {
        r->gone = 0;
    } else if ((r = calloc(1, sizeof *r))) {
        r->next = T.rings;
        __atomic_store_n(&T.rings, r, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&T.lock);
    if (!r) return NULL;
    r->tid = (int)syscall(SYS_gettid);
    pthread_setspecific(T.key, r);
    return mine = r;
}

void gvm_trace_move(const char *what, uintptr_t base, size_t bytes, int from, int to, uint64_t t0, uint64_t t1,
                    bool ok)
{
    if (!__atomic_load_n(&gvm_trace_enabled, __ATOMIC_RELAXED)) return;
    struct ring *r = my_ring();
    uint32_t h = r ? r->head : 0;
    if (!r || h - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) == RING_EVENTS) {
        __atomic_fetch_add(&T.dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    /* The memory counters as the move left them, so the curves step where
     * the moves end rather than at the writer's next sample. */
    int64_t rf = __atomic_load_n(&gvm_stats.resident[gvm_loc_slot(from)], __ATOMIC_RELAXED);
    int64_t rt = __atomic_load_n(&gvm_stats.resident[gvm_loc_slot(to)], __ATOMIC_RELAXED);
    r->ev[h % RING_EVENTS] = (struct slice){what, base, bytes, from, to, t0, t1, ok, rf, rt};
    __atomic_store_n(&r->head, h + 1, __ATOMIC_RELEASE);
}

/* ---- the writer --------------------------------------------------------- */

static void flush_out(void)
{
    size_t off = 0;
    while (off < T.len) {
        ssize_t w = write(T.fd, T.buf + off, T.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;   /* a full disk: the rest is lost, the program goes on */
        off += (size_t)w;
    }
    T.written += T.len;
    T.len = 0;
}

/* Appends one event (a JSON object) unless the bound is reached; `last`
 * events may use the reserve. */
static void emit(bool last, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(bool last, const char *fmt, ...)
{
    char ev[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ev, sizeof ev, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof ev) return;
    size_t need = (size_t)n + 2;
    if (T.truncated && !last) return;
    if (!last && T.written + T.len + need + TAIL_RESERVE > T.max) {
        __atomic_store_n(&T.truncated, true, __ATOMIC_RELAXED);
        return;
    }
    if (T.len + need + 1 > sizeof T.buf) flush_out();
    if (!T.first) T.buf[T.len++] = ',';
    T.buf[T.len++] = '\n';
    memcpy(T.buf + T.len, ev, (size_t)n);
    T.len += (size_t)n;
    T.first = false;
}

static double us(uint64_t ns) { return ns > T.start_ns ? (double)(ns - T.start_ns) / 1e3 : 0.0; }

static const char *loc_name(int loc, char *buf, size_t n)
{
    if (loc == GVM_LOC_HOST) return "host";
    snprintf(buf, n, "dev%d", loc);
    return buf;
}

static void write_slice(int pid, int tid, const struct slice *s)
{
    char from[16], to[16];
    double secs = (double)(s->t1 - s->t0) / 1e9;
    double gbps = secs > 0 ? (double)s->bytes / secs / 1e9 : 0.0;
    emit(false,
         "{\"name\":\"%s\",\"cat\":\"move\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
         "\"args\":{\"bytes\":%zu,\"from\":\"%s\",\"to\":\"%s\",\"GBps\":%.2f,\"ok\":%s,\"base\":\"%#" PRIxPTR "\"}}",
         s->what, us(s->t0), (double)(s->t1 - s->t0) / 1e3, pid, tid, s->bytes,
         loc_name(s->from, from, sizeof from), loc_name(s->to, to, sizeof to), gbps, s->ok ? "true" : "false",
         s->base);
}

static void write_resident(int pid, int loc, uint64_t at, int64_t resident)
{
    char name[16];
    if (loc >= T.ndev && loc != GVM_LOC_HOST) return;
    if (loc == GVM_LOC_HOST)
        emit(false, "{\"name\":\"host\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"resident\":%" PRId64 "}}",
             us(at), pid, resident);
    else
        emit(false, "{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"resident\":%" PRId64
                    ",\"live\":%" PRId64 "}}",
             loc_name(loc, name, sizeof name), us(at), pid, resident, T.last_live[loc]);
}

static void drain(int pid)
{
    for (struct ring *r = __atomic_load_n(&T.rings, __ATOMIC_ACQUIRE); r; r = r->next) {
        uint32_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), t = r->tail;
        for (; t != h; t++) {
            const struct slice *s = &r->ev[t % RING_EVENTS];
            write_slice(pid, r->tid, s);
            write_resident(pid, s->from, s->t1, s->res_from);
            write_resident(pid, s->to, s->t1, s->res_to);
        }
        __atomic_store_n(&r->tail, t, __ATOMIC_RELEASE);
    }
}

static int64_t load64(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

/* Memory per location when it changed, and the allocations and frees of
 * the interval (aggregated: one event per interval, never one per call). */
static void sample(int pid, uint64_t now, bool last)
{
    for (int slot = 0; slot < GVM_LOC_SLOTS; slot++) {
        bool dev = slot < T.ndev, host = slot == GVM_MAX_DEVICES;
        if (!dev && !host) continue;
        int64_t res = load64(&gvm_stats.resident[slot]);
        int64_t live = dev ? load64(&gvm_stats.bytes_live[slot]) : 0;
        if (T.sampled && res == T.last_resident[slot] && (!dev || live == T.last_live[slot]) && !last) continue;
        T.last_resident[slot] = res;
        char name[16];
        if (dev) {
            T.last_live[slot] = live;
            emit(last, "{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"resident\":%" PRId64
                       ",\"live\":%" PRId64 "}}",
                 loc_name(slot, name, sizeof name), us(now), pid, res, live);
        } else {
            emit(last, "{\"name\":\"host\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"resident\":%" PRId64 "}}",
                 us(now), pid, res);
        }
    }
    uint64_t allocs = __atomic_load_n(&gvm_stats.allocations_total, __ATOMIC_RELAXED);
    uint64_t frees = __atomic_load_n(&gvm_stats.frees_total, __ATOMIC_RELAXED);
    if (!T.sampled || allocs != T.last_allocs || frees != T.last_frees || last)
        emit(last, "{\"name\":\"allocations\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"allocs\":%" PRIu64
                   ",\"frees\":%" PRIu64 "}}",
             us(now), pid, allocs - T.last_allocs, frees - T.last_frees);
    T.last_allocs = allocs;
    T.last_frees = frees;
    T.sampled = true;
}

static void *writer(void *arg)
{
    (void)arg;
    int pid = (int)getpid();
    pthread_mutex_lock(&T.lock);
    while (!T.stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += INTERVAL_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&T.wake, &T.lock, &until);
        if (T.stopping) break;
        pthread_mutex_unlock(&T.lock);
        drain(pid);
        sample(pid, gvm_trace_now(), false);
        flush_out();
        pthread_mutex_lock(&T.lock);
    }
    pthread_mutex_unlock(&T.lock);
    return NULL;
}

/* A forked child must not write into its parent's trace. */
static void in_child(void) { __atomic_store_n(&gvm_trace_enabled, false, __ATOMIC_RELAXED); T.fd = -1; }

int gvm_trace_start(const char *path, size_t max_bytes, int ndev)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    T.fd = fd;
    T.ndev = ndev < GVM_MAX_DEVICES ? ndev : GVM_MAX_DEVICES;
    T.max = max_bytes > 4 * TAIL_RESERVE ? max_bytes : 4 * TAIL_RESERVE;
    T.first = true;
    T.start_ns = gvm_trace_now();
    pthread_key_create(&T.key, thread_gone);
    pthread_atfork(NULL, NULL, in_child);
    T.buf[T.len++] = '[';
    int pid = (int)getpid();
    emit(false, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"gvmshim %d\"}}", pid, pid);
    sample(pid, T.start_ns, false);
    flush_out();
    __atomic_store_n(&gvm_trace_enabled, true, __ATOMIC_RELEASE);
    if (pthread_create(&T.writer, NULL, writer, NULL)) {
        __atomic_store_n(&gvm_trace_enabled, false, __ATOMIC_RELEASE);
        close(fd);
        T.fd = -1;
        errno = EAGAIN;
        return -1;
    }
    return 0;
}

void gvm_trace_stop(void)
{
    if (!__atomic_exchange_n(&gvm_trace_enabled, false, __ATOMIC_ACQ_REL) || T.fd < 0) return;
    pthread_mutex_lock(&T.lock);
    T.stopping = true;
    pthread_cond_signal(&T.wake);
    pthread_mutex_unlock(&T.lock);
    pthread_join(T.writer, NULL);
    int pid = (int)getpid();
    drain(pid);
    uint64_t now = gvm_trace_now();
    sample(pid, now, true);
    if (T.truncated)
        emit(true, "{\"name\":\"trace truncated at its size bound\",\"ph\":\"i\",\"s\":\"g\",\"ts\":%.3f,\"pid\":%d}",
             us(now), pid);
    uint64_t dropped = gvm_trace_dropped();
    if (dropped)
        emit(true, "{\"name\":\"dropped\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"events\":%" PRIu64 "}}", pid,
             dropped);
    if (T.len + 3 > sizeof T.buf) flush_out();
    memcpy(T.buf + T.len, "\n]\n", 3);
    T.len += 3;
    flush_out();
    close(T.fd);
    T.fd = -1;
    gvm_debug("trace: %zu bytes written%s", T.written, T.truncated ? " (truncated at its bound)" : "");
}
