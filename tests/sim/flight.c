/* Work in flight (SIMCUDA_KERNELS_IN_FLIGHT=1, or =fatal: the cpu suite's
 * setting, which aborts at the first hazard). A fake kernel's body, an
 * asynchronous copy or memset, or a replayed graph's node runs when it is
 * queued, but here it also counts as running until a wait covers it: a
 * synchronize of its stream or its context, or of an event recorded after
 * it on its stream. On a GPU, cuMemUnmap does not wait for kernels: one
 * still running on the memory dies with an illegal address. The sim counts
 * each unmap of memory that work in flight reaches (a kernel: through a
 * pointer argument; a copy or memset: its bytes), in
 * simcuda_unmapped_in_flight, and names it on stderr, so a test finds a
 * move that unmaps before its wait. Waits are credited generously (a wait
 * on a special stream covers every blocking stream of its context): the
 * model may miss a hazard, never invent one. */
#include "sim.h"

#include <stdio.h>
#include <string.h>

#define FLIGHT_MAX 1024   /* the oldest drop off: fewer hazards seen, none invented */
#define FLIGHT_PTRS 8

struct flight {
    struct CUctx_st *ctx;
    CUstream stream;
    unsigned long long seq;
    uintptr_t ptr[FLIGHT_PTRS];
    size_t len[FLIGHT_PTRS];   /* 1 for a kernel's pointer argument */
    int nptr;
};

static pthread_mutex_t flight_lock = PTHREAD_MUTEX_INITIALIZER;
static struct flight flights[FLIGHT_MAX];
static int nflights;
static unsigned long long flight_seq;
static unsigned long unmapped_in_flight;
static int flight_on = -1;   /* -1: not read from the environment yet; 0 off, 1 count, 2 fatal */

static int special(CUstream s) { return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

static int enabled(void)
{
    int on = __atomic_load_n(&flight_on, __ATOMIC_ACQUIRE);
    if (on < 0) {
        const char *v = getenv("SIMCUDA_KERNELS_IN_FLIGHT");
        on = !v || !*v || !strcmp(v, "0") ? 0 : !strcmp(v, "fatal") ? 2 : 1;
        __atomic_store_n(&flight_on, on, __ATOMIC_RELEASE);
    }
    return on;
}

void simcuda_set_kernels_in_flight(int on) { __atomic_store_n(&flight_on, on ? 1 : 0, __ATOMIC_RELEASE); }

unsigned long simcuda_unmapped_in_flight(void)
{
    pthread_mutex_lock(&flight_lock);
    unsigned long n = unmapped_in_flight;
    pthread_mutex_unlock(&flight_lock);
    return n;
}

static struct CUctx_st *ctx_of(CUstream s) { return special(s) ? sim_ctx_current() : s->ctx; }

/* Drops the entries `covered` says a wait covers. Lock held. */
static void drop(int (*covered)(const struct flight *, const void *), const void *arg)
{
    int j = 0;
    for (int i = 0; i < nflights; i++)
        if (!covered(&flights[i], arg)) flights[j++] = flights[i];
    nflights = j;
}

static void add(struct flight *e)
{
    pthread_mutex_lock(&flight_lock);
    if (nflights == FLIGHT_MAX) memmove(flights, flights + 1, --nflights * sizeof *flights);
    e->seq = ++flight_seq;
    flights[nflights++] = *e;
    pthread_mutex_unlock(&flight_lock);
}

void sim_flight_launch(CUstream s, const struct CUfunc_st *f, void **params)
{
    if (!enabled() || !params) return;
    struct flight e = {.ctx = ctx_of(s), .stream = s};
    for (unsigned i = 0; i < f->nparams && e.nptr < FLIGHT_PTRS; i++)
        if (f->size[i] == sizeof(uintptr_t)) {
            memcpy(&e.ptr[e.nptr], params[i], sizeof(uintptr_t));
            e.len[e.nptr++] = 1;
        }
    add(&e);
}

void sim_flight_op(CUstream s, uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    if (!enabled()) return;
    struct flight e = {.ctx = ctx_of(s), .stream = s, .ptr = {a, b}, .len = {alen, blen}, .nptr = b ? 2 : 1};
    add(&e);
}

static int in_ctx(const struct flight *e, const void *ctx) { return e->ctx == ctx; }

void sim_flight_ctx_sync(void) { sim_flight_drop_ctx(sim_ctx_current()); }

void sim_flight_drop_ctx(struct CUctx_st *c)
{
    if (!enabled()) return;
    pthread_mutex_lock(&flight_lock);
    drop(in_ctx, c);
    pthread_mutex_unlock(&flight_lock);
}

struct stream_wait {
    struct CUctx_st *ctx;
    CUstream stream;
    unsigned long long upto;   /* launches after it are not covered */
};

static int on_stream(const struct flight *e, const void *arg)
{
    const struct stream_wait *w = arg;
    if (e->seq > w->upto) return 0;
    if (e->stream == w->stream && (!special(w->stream) || e->ctx == w->ctx)) return 1;
    /* A special stream's wait: every blocking stream of its context too. */
    return special(w->stream) && e->ctx == w->ctx && (special(e->stream) || !(e->stream->flags & CU_STREAM_NON_BLOCKING));
}

void sim_flight_stream_sync(CUstream s)
{
    if (!enabled()) return;
    struct stream_wait w = {ctx_of(s), s, ~0ull};
    pthread_mutex_lock(&flight_lock);
    drop(on_stream, &w);
    pthread_mutex_unlock(&flight_lock);
}

void sim_flight_event_record(CUevent e, CUstream s)
{
    if (!enabled()) return;
    pthread_mutex_lock(&flight_lock);
    e->flight_ctx = ctx_of(s);
    e->flight_stream = s;
    e->flight_seq = flight_seq;
    pthread_mutex_unlock(&flight_lock);
}

void sim_flight_event_sync(CUevent e)
{
    if (!enabled()) return;
    pthread_mutex_lock(&flight_lock);
    struct stream_wait w = {e->flight_ctx, e->flight_stream, e->flight_seq};
    drop(on_stream, &w);   /* never recorded: upto 0 covers nothing */
    pthread_mutex_unlock(&flight_lock);
}

/* Whether fn waits for work. */
static int is_wait(enum sim_fn fn)
{
    return fn == SIM_FN_cuCtxSynchronize || fn == SIM_FN_cuCtxSynchronize_v2 || fn == SIM_FN_cuStreamSynchronize || fn == SIM_FN_cuStreamSynchronize_ptsz ||
           fn == SIM_FN_cuEventSynchronize;
}

/* Whether a call answering rc leaves the context dead, its queued work
 * abandoned: a sticky error; or any failure of a wait on a live handle
 * other than a capture's refusal (a real wait fails only so, or when a
 * capture forbids it and the work goes on), which an injected one stands
 * for. */
static int abandons_work(enum sim_fn fn, CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ECC_UNCORRECTABLE: return 1;
    case CUDA_SUCCESS:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_NOT_INITIALIZED: return 0;
    default: return is_wait(fn);
    }
}

void sim_flight_result(enum sim_fn fn, CUresult rc)
{
    if (!abandons_work(fn, rc) || !enabled()) return;
    pthread_mutex_lock(&flight_lock);
    nflights = 0;
    pthread_mutex_unlock(&flight_lock);
}

void sim_flight_reset(void)
{
    pthread_mutex_lock(&flight_lock);
    nflights = 0;
    unmapped_in_flight = 0;
    pthread_mutex_unlock(&flight_lock);
}

void sim_flight_unmap(uintptr_t base, size_t size)
{
    if (!enabled()) return;
    pthread_mutex_lock(&flight_lock);
    for (int i = 0; i < nflights; i++)
        for (int k = 0; k < flights[i].nptr; k++) {
            uintptr_t p = flights[i].ptr[k];
            size_t n = flights[i].len[k];
            if (!n || p >= base + size || p + n <= base) continue;
            unmapped_in_flight++;
            fprintf(stderr, "simcuda: cuMemUnmap(%#lx, %zu) under work in flight on stream %p (reaching %#lx+%zu)\n",
                    (unsigned long)base, size, (void *)flights[i].stream, (unsigned long)p, n);
            /* As a GPU would kill the program at the fault: the test fails. */
            if (__atomic_load_n(&flight_on, __ATOMIC_ACQUIRE) == 2) abort();
            break;   /* one line per piece of work */
        }
    pthread_mutex_unlock(&flight_lock);
}
