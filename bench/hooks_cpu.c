/* hooks: the CPU time gvmshim adds to an intercepted call, measured
 * against the simulated driver (tests/sim), where a GPU benchmark cannot
 * resolve it (a 4-5 µs driver call varies by more than the shim adds).
 *
 * Run with LD_PRELOAD=libgvmshim.so and the simulated libcuda.so.1 first on
 * LD_LIBRARY_PATH (scripts/bench hooks does both). Each operation calls
 * the entry point the program gets (dlsym on libcuda: gvmshim's hook) and
 * the simulated driver's own function (the real dlsym, past the shim's),
 * in alternating batches, so the difference is what the hook adds and the
 * drift of a busy machine cancels out. Without the shim both are the
 * driver's function (added ~0).
 *
 *     bench-hooks [--threads 1,2] [--rounds N] [--batch-us US] [--ops LIST] [--smoke]
 *
 * Operations: copy (cuMemcpyDtoDAsync_v2, 256 B between two small
 * allocations, which share a chunk), copy-regions (the same between two
 * allocations of 2 MiB: two regions), memset (cuMemsetD8Async, 256 B),
 * launch4 (cuLaunchKernel of a fake kernel with 4 pointer arguments into
 * 4 allocations of 2 MiB, as bench/launch.cu), launch-struct (one
 * 512-byte argument of 64 pointers into 8 allocations of 2 MiB),
 * alloc:SIZE (a cuMemAlloc_v2 + cuMemFree_v2 pair; the hook's pair is
 * served from gvmshim's cache after the first), async:SIZE (a
 * cuMemAllocAsync + cuMemFreeAsync pair on the thread's stream; gvmshim's
 * reuses on that stream). With --threads 2 every
 * thread runs the same operation on its own buffers and stream, at the
 * same time; "copy-shared" has both threads copy between the same two
 * allocations (bytes of their own). Prints, per operation and thread
 * count, each side's best round (ns per call) and the medians, and one
 * line "BENCH_JSON {...}". --smoke: a few calls of each, checking that
 * copies and sets reach the memory (for the cpu suite; sizes up to
 * 64 MiB); exit 1 on a wrong result. */
#define _GNU_SOURCE
#include "core/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 8
#define MAX_ROUNDS 400
#define SPAN 256
/* launch-struct: one 512-byte argument of 64 pointers into 8 allocations
 * of 2 MiB, as bench/launch.cu passes them (PyTorch passes tensors so). */
#define STRUCT_PTRS 64
#define STRUCT_BUFS 8

enum { NATIVE, SHIM };

typedef void *(*dlsym_fn)(void *, const char *);

/* Each entry point twice: [NATIVE] the driver's, [SHIM] what the program gets. */
static struct {
    __typeof__(cuMemcpyDtoDAsync_v2) *copy[2];
    __typeof__(cuMemsetD8Async) *set[2];
    __typeof__(cuLaunchKernel) *launch[2];
    __typeof__(cuMemAlloc_v2) *alloc[2];
    __typeof__(cuMemAllocAsync) *alloc_async[2];
    __typeof__(cuMemFreeAsync) *free_async[2];
    __typeof__(cuMemFree_v2) *free_[2];
} ep;

static __typeof__(cuCtxSetCurrent) *ctx_set;
static __typeof__(cuStreamCreate) *stream_create;
static __typeof__(cuStreamSynchronize) *stream_sync;
static __typeof__(cuMemcpyHtoD_v2) *htod;
static __typeof__(cuMemcpyDtoH_v2) *dtoh;
static CUcontext ctx;
static CUfunction kernel4, kernel_struct;
static bool smoke, shim_loaded;

static void die(const char *what, CUresult rc)
{
    fprintf(stderr, "bench-hooks: %s failed (%d)\n", what, (int)rc);
    exit(1);
}

#define CK(what, call)                                                         \
    do {                                                                       \
        CUresult rc_ = (call);                                                 \
        if (rc_ != CUDA_SUCCESS) die(what, rc_);                               \
    } while (0)

static void *need(void *lib, dlsym_fn look, const char *name)
{
    void *f = look(lib, name);
    if (!f) {
        fprintf(stderr, "bench-hooks: %s not found\n", name);
        exit(1);
    }
    return f;
}

/* The real dlsym: the public one is gvmshim's under LD_PRELOAD. */
static dlsym_fn real_dlsym(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        dlsym_fn f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (f) return f;
    }
    return dlsym;
}

static void open_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "bench-hooks: %s\n", dlerror());
        exit(1);
    }
    shim_loaded = dlsym(RTLD_DEFAULT, "gvm_query") != NULL;
    dlsym_fn looks[2] = {real_dlsym(), dlsym};
    for (int w = NATIVE; w <= SHIM; w++) {
        ep.copy[w] = need(lib, looks[w], "cuMemcpyDtoDAsync_v2");
        ep.set[w] = need(lib, looks[w], "cuMemsetD8Async");
        ep.launch[w] = need(lib, looks[w], "cuLaunchKernel");
        ep.alloc[w] = need(lib, looks[w], "cuMemAlloc_v2");
        ep.free_[w] = need(lib, looks[w], "cuMemFree_v2");
        ep.alloc_async[w] = need(lib, looks[w], "cuMemAllocAsync");
        ep.free_async[w] = need(lib, looks[w], "cuMemFreeAsync");
    }
    __typeof__(cuInit) *init = need(lib, dlsym, "cuInit");
    __typeof__(cuDevicePrimaryCtxRetain) *retain = need(lib, dlsym, "cuDevicePrimaryCtxRetain");
    ctx_set = need(lib, dlsym, "cuCtxSetCurrent");
    stream_create = need(lib, dlsym, "cuStreamCreate");
    stream_sync = need(lib, dlsym, "cuStreamSynchronize");
    htod = need(lib, dlsym, "cuMemcpyHtoD_v2");
    dtoh = need(lib, dlsym, "cuMemcpyDtoH_v2");
    CK("cuInit", init(0));
    CK("cuDevicePrimaryCtxRetain", retain(&ctx, 0));
    CK("cuCtxSetCurrent", ctx_set(ctx));
    /* A fake kernel of four pointer parameters, its layout reported by the
     * simulated cuFuncGetParamInfo (what gvmshim's launch scanner asks). */
    CUfunction (*make)(void (*)(void **), unsigned, const size_t *) =
        need(lib, looks[NATIVE], "simcuda_function");
    static const size_t sizes[4] = {8, 8, 8, 8};
    kernel4 = make(NULL, 4, sizes);
    static const size_t one_struct[1] = {STRUCT_PTRS * sizeof(CUdeviceptr)};
    kernel_struct = make(NULL, 1, one_struct);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ---- operations ---------------------------------------------------------- */

/* One thread's buffers: four allocations made through the hook (gvmshim's
 * when it is loaded, which is what the copies and launches must touch). */
struct bufs {
    CUdeviceptr a, b, c, d;
    CUdeviceptr big[STRUCT_BUFS];              /* 2 MiB each: a region each */
    CUdeviceptr ptrs[STRUCT_PTRS];             /* the struct argument */
    CUdeviceptr four[4];                       /* launch4's arguments: 4 of the 2 MiB ones */
    CUstream s;
};

struct op {
    const char *name;
    size_t size;          /* alloc: bytes per allocation */
    bool shared;          /* every thread uses thread 0's buffers */
};

/* off: where in the buffers this thread copies (threads sharing them write
 * bytes of their own). */
static void run_op(const struct op *op, struct bufs *m, int which, long n, size_t off)
{
    if (!strcmp(op->name, "copy") || !strcmp(op->name, "copy-shared")) {
        __typeof__(cuMemcpyDtoDAsync_v2) *f = ep.copy[which];
        for (long i = 0; i < n; i++) CK("cuMemcpyDtoDAsync_v2", f(m->b + off, m->a + off, SPAN, m->s));
    } else if (!strcmp(op->name, "copy-regions")) {
        __typeof__(cuMemcpyDtoDAsync_v2) *f = ep.copy[which];
        for (long i = 0; i < n; i++) CK("cuMemcpyDtoDAsync_v2", f(m->big[1], m->big[0], SPAN, m->s));
    } else if (!strcmp(op->name, "memset")) {
        __typeof__(cuMemsetD8Async) *f = ep.set[which];
        for (long i = 0; i < n; i++) CK("cuMemsetD8Async", f(m->c, (unsigned char)i, SPAN, m->s));
    } else if (!strcmp(op->name, "launch4")) {
        __typeof__(cuLaunchKernel) *f = ep.launch[which];
        void *params[4] = {&m->four[0], &m->four[1], &m->four[2], &m->four[3]};
        for (long i = 0; i < n; i++) CK("cuLaunchKernel", f(kernel4, 1, 1, 1, 32, 1, 1, 0, m->s, params, NULL));
    } else if (!strcmp(op->name, "launch-struct")) {
        __typeof__(cuLaunchKernel) *f = ep.launch[which];
        void *params[1] = {m->ptrs};
        for (long i = 0; i < n; i++)
            CK("cuLaunchKernel", f(kernel_struct, 1, 1, 1, 32, 1, 1, 0, m->s, params, NULL));
    } else if (!strncmp(op->name, "async:", 6)) {
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            CK("cuMemAllocAsync", ep.alloc_async[which](&p, op->size, m->s));
            CK("cuMemFreeAsync", ep.free_async[which](p, m->s));
        }
    } else {   /* alloc */
        __typeof__(cuMemAlloc_v2) *a = ep.alloc[which];
        __typeof__(cuMemFree_v2) *fr = ep.free_[which];
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            CK("cuMemAlloc_v2", a(&p, op->size));
            CK("cuMemFree_v2", fr(p));
        }
    }
}

/* ---- threads ------------------------------------------------------------- */

struct job {
    const struct op *op;
    int nthreads, rounds;
    long n;                               /* calls per batch */
    unsigned arrived, gen;                   /* the spinning barrier between batches */
    struct bufs bufs[MAX_THREADS];
    double t[MAX_THREADS][MAX_ROUNDS][2][2]; /* start, end of each thread's batch, by round, which */
};

struct worker {
    struct job *job;
    int id;
};

/* Spins rather than sleeps: a thread woken by the kernel would start its
 * batch tens of microseconds after the other. */
static void barrier(struct job *j)
{
    unsigned gen = __atomic_load_n(&j->gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&j->arrived, 1, __ATOMIC_ACQ_REL) == (unsigned)j->nthreads) {
        __atomic_store_n(&j->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&j->gen, gen + 1, __ATOMIC_RELEASE);
        return;
    }
    for (unsigned spins = 0; __atomic_load_n(&j->gen, __ATOMIC_ACQUIRE) == gen; spins++)
        if (spins > 10000) sched_yield();
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct job *j = w->job;
    CK("cuCtxSetCurrent", ctx_set(ctx));
    struct bufs *m = &j->bufs[j->op->shared ? 0 : w->id];
    for (int r = 0; r < j->rounds; r++) {
        /* Alternate which goes first: neither always follows the other. */
        for (int k = 0; k < 2; k++) {
            int which = (r + k) & 1;
            barrier(j);
            j->t[w->id][r][which][0] = now_ns();
            run_op(j->op, m, which, j->n, j->op->shared ? (size_t)w->id * SPAN : 0);
            j->t[w->id][r][which][1] = now_ns();
        }
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct result {
    double native, shim, added;   /* ns per call, best round of each */
    double native_med, shim_med;  /* the median round */
    int rounds;                   /* rounds counted */
};

/* The mean ns per call of round r's batches of `which`, or -1 when the
 * threads' batches did not run at the same time (on a busy machine one may
 * wait for a core): at least 80% of each batch overlapping the others. */
static double round_ns(const struct job *j, int r, int which)
{
    double start = 0, end = 1e300, longest = 0, sum = 0;
    for (int i = 0; i < j->nthreads; i++) {
        const double *t = j->t[i][r][which];
        start = t[0] > start ? t[0] : start;
        end = t[1] < end ? t[1] : end;
        longest = t[1] - t[0] > longest ? t[1] - t[0] : longest;
        sum += t[1] - t[0];
    }
    if (j->nthreads > 1 && end - start < 0.8 * longest) return -1;
    return sum / j->nthreads / (double)j->n;
}

/* Each side's best round is what the call costs when nothing else runs on
 * the core (other processes only ever add); the medians are kept too. */
static struct result measure(struct job *j)
{
    j->arrived = j->gen = 0;
    pthread_t t[MAX_THREADS];
    struct worker w[MAX_THREADS];
    for (int i = 0; i < j->nthreads; i++) {
        w[i] = (struct worker){j, i};
        if (pthread_create(&t[i], NULL, work, &w[i])) die("pthread_create", CUDA_ERROR_UNKNOWN);
    }
    for (int i = 0; i < j->nthreads; i++) pthread_join(t[i], NULL);
    static double nat[MAX_ROUNDS], shim[MAX_ROUNDS];
    int n = 0;
    for (int r = 0; r < j->rounds; r++) {
        double a = round_ns(j, r, NATIVE), b = round_ns(j, r, SHIM);
        if (a < 0 || b < 0) continue;
        nat[n] = a;
        shim[n++] = b;
    }
    struct result res = {-1, -1, 0, -1, -1, n};
    if (!n) return res;
    res.native_med = median(nat, n);   /* sorts: the best is first */
    res.shim_med = median(shim, n);
    res.native = nat[0];
    res.shim = shim[0];
    res.added = res.shim - res.native;
    return res;
}

/* ---- set-up and checks --------------------------------------------------- */

static void make_bufs(struct bufs *m)
{
    CK("cuStreamCreate", stream_create(&m->s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr *p[4] = {&m->a, &m->b, &m->c, &m->d};
    for (int i = 0; i < 4; i++) CK("cuMemAlloc_v2", ep.alloc[SHIM](p[i], 4096));
    for (int i = 0; i < STRUCT_BUFS; i++) CK("cuMemAlloc_v2", ep.alloc[SHIM](&m->big[i], 2 << 20));
    for (int i = 0; i < STRUCT_PTRS; i++)
        m->ptrs[i] = m->big[i % STRUCT_BUFS] + (CUdeviceptr)(i / STRUCT_BUFS) * 4096;
    /* Base and interior pointers, as bench/launch.cu passes them. */
    CUdeviceptr four[4] = {m->big[0], m->big[1] + 28, m->big[2] + 16384, m->big[3]};
    memcpy(m->four, four, sizeof four);
}

static void free_bufs(struct bufs *m)
{
    CUdeviceptr p[4] = {m->a, m->b, m->c, m->d};
    for (int i = 0; i < 4; i++) CK("cuMemFree_v2", ep.free_[SHIM](p[i]));
    for (int i = 0; i < STRUCT_BUFS; i++) CK("cuMemFree_v2", ep.free_[SHIM](m->big[i]));
}

/* The hooked copy and set did what the driver's do. */
static bool check_data(struct bufs *m)
{
    unsigned char in[SPAN], out[SPAN];
    for (int i = 0; i < SPAN; i++) in[i] = (unsigned char)(i * 7 + 1);
    CK("cuMemcpyHtoD_v2", htod(m->a, in, SPAN));
    CK("cuMemcpyDtoDAsync_v2", ep.copy[SHIM](m->b, m->a, SPAN, m->s));
    CK("cuMemsetD8Async", ep.set[SHIM](m->c, 0x5a, SPAN, m->s));
    CK("cuStreamSynchronize", stream_sync(m->s));
    CK("cuMemcpyDtoH_v2", dtoh(out, m->b, SPAN));
    bool ok = !memcmp(in, out, SPAN);
    CK("cuMemcpyDtoH_v2", dtoh(out, m->c, SPAN));
    for (int i = 0; i < SPAN; i++) ok &= out[i] == 0x5a;
    if (!ok) fprintf(stderr, "bench-hooks: a hooked copy or set wrote the wrong bytes\n");
    return ok;
}

/* ---- main ---------------------------------------------------------------- */

static size_t parse_size(const char *s)
{
    char *end;
    size_t n = strtoull(s, &end, 0);
    switch (*end) {
    case 'K': case 'k': return n << 10;
    case 'M': case 'm': return n << 20;
    case 'G': case 'g': return n << 30;
    default: return n;
    }
}

/* Calls per batch so that one batch takes about batch_ns. The first
 * calls of an op are its cold ones (a kernel's parameter layout queried,
 * a size's first allocation): timed, they made one call a batch when the
 * op came first (--ops launch4: 93 us a "call"). */
static long calibrate(const struct op *op, struct bufs *m, double batch_ns)
{
    run_op(op, m, NATIVE, 4, 0);
    run_op(op, m, SHIM, 4, 0);
    for (long n = 1;; n *= 2) {
        double t0 = now_ns();
        run_op(op, m, NATIVE, n, 0);
        run_op(op, m, SHIM, n, 0);
        double per = (now_ns() - t0) / (2.0 * (double)n);
        if (per * (double)n >= batch_ns / 8 || n >= (1L << 20)) {
            long k = (long)(batch_ns / (per > 1 ? per : 1));
            return k < 1 ? 1 : k;
        }
    }
}

int main(int argc, char **argv)
{
    int threads[MAX_THREADS], nthreads_list = 0, rounds = 41;
    double batch_us = 300;
    bool ops_given = false;
    const char *ops_arg = "copy,copy-regions,copy-shared,memset,launch4,launch-struct,"
                          "alloc:256,alloc:64K,alloc:2M,alloc:64M,alloc:1G,async:256,async:2M,async:64M";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t && nthreads_list < MAX_THREADS; t = strtok(NULL, ","))
                threads[nthreads_list++] = atoi(t);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--batch-us") && i + 1 < argc) {
            batch_us = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
            ops_arg = argv[++i];
            ops_given = true;
        } else if (!strcmp(argv[i], "--smoke")) {
            smoke = true;
        } else {
            fprintf(stderr, "usage: %s [--threads 1,2] [--rounds N] [--batch-us US] [--ops LIST] [--smoke]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!nthreads_list) threads[nthreads_list++] = 1, threads[nthreads_list++] = 2;
    if (smoke) {
        rounds = 3;
        batch_us = 20;
        if (!ops_given)
            ops_arg = "copy,copy-regions,copy-shared,memset,launch4,launch-struct,alloc:256,alloc:2M,alloc:64M";
    }
    if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 41;
    for (int i = 0; i < nthreads_list; i++)
        if (threads[i] < 1 || threads[i] > MAX_THREADS) threads[i] = 1;

    open_driver();
    static struct job job;
    int nbufs = 0;
    for (int i = 0; i < nthreads_list; i++) nbufs = threads[i] > nbufs ? threads[i] : nbufs;
    for (int i = 0; i < nbufs; i++) make_bufs(&job.bufs[i]);
    bool ok = true;
    for (int i = 0; i < nbufs; i++) ok &= check_data(&job.bufs[i]);

    printf("%-14s %7s %12s %12s %12s %12s %12s %6s\n", "op", "threads", "native ns", "shim ns", "added ns",
           "native med", "shim med", "rounds");
    char json[16384];
    size_t jl = (size_t)snprintf(json, sizeof json, "{\"bench\": \"hooks\", \"shim\": %d, \"rows\": [",
                                 shim_loaded ? 1 : 0);
    int rows = 0;
    char *ops = strdup(ops_arg), *save = NULL;
    for (char *name = strtok_r(ops, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        struct op op = {.name = name};
        if (!strncmp(name, "alloc:", 6) || !strncmp(name, "async:", 6)) {
            op.size = parse_size(name + 6);
        } else if (!strcmp(name, "copy-shared")) {
            op.shared = true;
        } else if (strcmp(name, "copy") && strcmp(name, "copy-regions") && strcmp(name, "memset") &&
                   strcmp(name, "launch4") && strcmp(name, "launch-struct")) {
            fprintf(stderr, "bench-hooks: unknown operation %s\n", name);
            return 2;
        }
        for (int t = 0; t < nthreads_list; t++) {
            if (op.shared && threads[t] < 2) continue;
            job.op = &op;
            job.nthreads = threads[t];
            job.rounds = rounds;
            job.n = calibrate(&op, &job.bufs[0], batch_us * 1e3);
            struct result r = measure(&job);
            printf("%-14s %7d %12.1f %12.1f %+12.1f %12.1f %12.1f %6d\n", name, threads[t], r.native, r.shim,
                   r.added, r.native_med, r.shim_med, r.rounds);
            fflush(stdout);
            if (jl < sizeof json)
                jl += (size_t)snprintf(json + jl, sizeof json - jl,
                                       "%s{\"op\": \"%s\", \"threads\": %d, \"native_ns\": %.1f, \"shim_ns\": %.1f, "
                                       "\"added_ns\": %.1f, \"native_median_ns\": %.1f, \"shim_median_ns\": %.1f, "
                                       "\"rounds\": %d, \"calls_per_batch\": %ld}",
                                       rows++ ? ", " : "", name, threads[t], r.native, r.shim, r.added,
                                       r.native_med, r.shim_med, r.rounds, job.n);
        }
    }
    free(ops);
    for (int i = 0; i < nbufs; i++) ok &= check_data(&job.bufs[i]);
    for (int i = 0; i < nbufs; i++) free_bufs(&job.bufs[i]);
    if (jl < sizeof json) printf("BENCH_JSON %s]}\n", json);
    return ok ? 0 : 1;
}
