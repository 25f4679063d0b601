/* Internal interface of the simulated driver, shared by its files.
 *
 * Every exported cu* function is a thin wrapper (SIM_API) around an
 * internal sim_* function; wrappers never call each other, so each
 * application call is counted, traced and fault-checked exactly once. */
#ifndef SIMCUDA_SIM_H
#define SIMCUDA_SIM_H

#include "../../core/cuda_api.h"
#include "../../core/driver_list.h"
#include "simcuda.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* cuda.h maps cuMemAlloc to cuMemAlloc_v2; the sim also exports the
 * 32-bit CUDA 3.1 symbol so tests can check a legacy lookup is left alone. */
#undef cuMemAlloc
CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);

/* Every function the sim exports: the driver list plus what tests and
 * cuGetProcAddress need beyond it. */
#define SIM_EXTRA_EXPORTS(X)                                                   \
    X(cuMemAlloc) X(cuDeviceGetName) X(cuMemGetAccess) X(cuStreamQuery)       \
    X(cuStreamQuery_ptsz) X(cuEventRecord_ptsz)                               \
    X(cuStreamIsCapturing_ptsz)                                                \
    X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy) X(cuGraphDestroy)   \
    X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle) X(cuTexObjectDestroy)
#define SIM_EXPORTS(X) GVM_DRIVER_ALL(X, X) SIM_EXTRA_EXPORTS(X)

#define SIM_ENUM(name) SIM_FN_##name,
enum sim_fn { SIM_EXPORTS(SIM_ENUM) SIM_FN_COUNT };
#undef SIM_ENUM

#define SIM_MAX_DEVICES 16
#define SIM_GRANULE ((size_t)2 << 20) /* VMM granularity, as on real GPUs */
#define SIM_CTX_DEPTH 32

/* Opaque driver handles, given a body here (cuda.h only names them). */
struct CUctx_st {
    int dev;
    unsigned refs;  /* primary-context retain count */
    unsigned peers; /* bit d: cuCtxEnablePeerAccess gave it device d's memory */
    int destroyed;  /* reset (cuDevicePrimaryCtxReset) and not retained since */
    int user;       /* made by cuCtxCreate (not a primary context) */
};
struct sim_capture;
struct CUstream_st {
    int dev;        /* its context's device */
    struct CUctx_st *ctx;
    unsigned flags;
    unsigned long long id;   /* unique for the process's life, as cuStreamGetId's */
    struct sim_capture *cap; /* the capture it records into, or NULL */
};
struct CUevent_st {
    int dev;
    struct CUctx_st *ctx;
    unsigned flags;
    unsigned long long captured; /* id of the capture it was last recorded in, 0: none */
    struct CUctx_st *flight_ctx; /* where it was last recorded, for flight.c */
    CUstream flight_stream;
    unsigned long long flight_seq; /* the last launch before it there (0: none) */
};
struct CUfunc_st {
    void (*body)(void **params);
    unsigned nparams;
    size_t *size;
    size_t *offset;
    size_t total; /* bytes of the packed parameter buffer */
};

/* An unordered set of pointers; lookups are linear, tests hold few. */
struct sim_vec {
    void **item;
    size_t len, cap;
};

struct sim_native { /* cuMemAlloc* memory */
    uintptr_t base;
    size_t size, maplen;
    int dev;
    struct CUctx_st *ctx; /* the context it was made in: it goes with it */
    unsigned long long id;
    int pooled; /* from dev's default pool: reached where the pool grants access */
    CUmemoryPool pool; /* the pool it came from (its figures: pool.c), or NULL */
};
struct sim_resv { /* cuMemAddressReserve range */
    uintptr_t base;
    size_t size;
    uintptr_t dev_view; /* the same range as devices see it (sim_dev_view) */
};
struct sim_handle { /* cuMemCreate physical memory */
    unsigned long long id;
    size_t size;
    int loc; /* device ordinal or SIMCUDA_LOC_HOST */
    int fd;
    CUmemAllocationProp prop;
    unsigned refs; /* create/retain minus release */
    unsigned maps; /* live mappings */
    int imported;  /* from another process's fd: not charged here */
};
struct sim_map { /* cuMemMap range */
    uintptr_t base;
    size_t size;
    struct sim_handle *h;
    struct sim_resv *resv; /* NULL once its reservation was freed under it */
    unsigned mask, rwmask; /* device bits and SIMCUDA_CPU_BIT */
    unsigned long long id;
};

struct sim_device {
    size_t capacity, used; /* used: native + device-located physical */
    struct CUctx_st ctx;
};

struct sim_state {
    pthread_rwlock_t lock;
    int initialized;
    unsigned generation; /* bumped by simcuda_reset to drop TLS stacks */
    int ndev, no_vmm, no_peer, pcie_peer, tracing, cpu_faults;
    unsigned host_create_us;  /* SIMCUDA_HOST_CREATE_US: per host cuMemCreate, lock held */
    unsigned host_release_us; /* per host cuMemRelease, after the lock (simcuda_set_host_pin_us) */
    struct sim_device dev[SIM_MAX_DEVICES];
    size_t host_capacity, host_used;
    struct sim_vec natives, resvs, maps, handles, streams, events, funcs, hostregs, ctxs;
    unsigned long long next_id;
};

#pragma GCC visibility push(hidden)

extern struct sim_state sim;
extern const char *const sim_fn_names[SIM_FN_COUNT];

/* Lock modes of an entry point; SIM_ANYTIME skips the cuInit check. */
enum { SIM_NOLOCK = 0, SIM_READ = 1, SIM_WRITE = 2, SIM_ANYTIME = 4 };

int sim_enter(enum sim_fn fn, int mode, CUresult *rc);
void sim_unlock(int mode);
CUresult sim_leave(enum sim_fn fn, CUresult rc);

#define SIM_API(name, mode, expr)                                              \
    do {                                                                       \
        CUresult sim_rc_;                                                      \
        if (sim_enter(SIM_FN_##name, (mode), &sim_rc_)) {                      \
            sim_rc_ = (expr);                                                  \
            sim_unlock(mode);                                                  \
        }                                                                      \
        return sim_leave(SIM_FN_##name, sim_rc_);                              \
    } while (0)

/* Defines an entry point and its per-thread-stream twin with one body. */
#define SIM_API2(name, twin, mode, params, expr)                               \
    CUresult CUDAAPI name params { SIM_API(name, mode, expr); }                \
    CUresult CUDAAPI twin params { SIM_API(twin, mode, expr); }

void sim_config_load(void);
const char *sim_error_name(CUresult rc); /* NULL when unknown */
void sim_die(const char *what) __attribute__((noreturn));
unsigned long long sim_new_id(void);

int sim_vec_push(struct sim_vec *v, void *p);
void sim_vec_remove(struct sim_vec *v, void *p);
int sim_vec_has(const struct sim_vec *v, const void *p);

/* Capacity of a location (ordinal or SIMCUDA_LOC_HOST). */
CUresult sim_charge(int loc, size_t bytes);
void sim_uncharge(int loc, size_t bytes);

/* Contexts and streams (lock held). */
int sim_dev_valid(int dev);
int sim_peer_ok(int dev, int peer);
struct CUctx_st *sim_ctx_current(void);
int sim_ctx_valid(CUcontext c);
CUresult sim_need_ctx(int *dev);
/* Whether the current context reaches cuMemAlloc memory of device dev
 * (its own, or a peer's once peer access is enabled). */
int sim_ctx_reaches(int dev);
CUresult sim_stream_dev(CUstream s, int *dev);
void sim_ctx_reset_all(void);
void sim_streams_reset(void);

/* Memory objects (lock held). */
#define SIM_MEMFD_PREFIX "simcuda:" /* memfd name: prefix and location */
struct sim_handle *sim_handle_find(CUmemGenericAllocationHandle id);
struct sim_native *sim_native_at(uintptr_t p);
/* Whether a context on dev reaches owner's default pool (its access grants). */
int sim_pool_reaches(int owner, int dev);
CUmemoryPool sim_pool_default_of(int dev);
/* The pools' figures as the driver reports them (pool.c): an allocation
 * from pool and its free, a synchronize (it settles every free), a trim,
 * an attribute read (set 0) or written (set 1), a reset of the sim. */
void sim_pool_note_alloc(CUmemoryPool pool, uintptr_t p, size_t size);
void sim_pool_note_free(CUmemoryPool pool, uintptr_t p, size_t size);
void sim_pool_settle(void);
CUresult sim_pool_trim_to(CUmemoryPool pool, size_t keep);
CUresult sim_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, void *value, int set);
void sim_pool_uses_reset(void);
void sim_pool_forget(CUmemoryPool pool); /* its figures back to nothing, settings kept */
CUmemoryPool sim_pool_current_of(int dev);
/* Whether the current context reaches native memory n: its device, peer
 * access, or (pool memory) the pool's grants. */
int sim_native_reached(const struct sim_native *n);
struct sim_map *sim_map_at(uintptr_t p);
struct sim_resv *sim_resv_at(uintptr_t p);
void sim_native_reset(void);
void sim_hostreg_reset(void);
/* What a context's end (a primary one's reset, cuCtxDestroy) takes with it. */
void sim_native_drop_ctx(struct CUctx_st *c);
void sim_hostreg_drop_ctx(struct CUctx_st *c);
void sim_streams_drop_ctx(struct CUctx_st *c);

/* Kernels in flight (flight.c): no-ops unless SIMCUDA_KERNELS_IN_FLIGHT. */
void sim_flight_launch(CUstream s, const struct CUfunc_st *f, void **params);
/* An asynchronous copy or memset reaching [a, a+alen) and [b, b+blen) (b 0: none). */
void sim_flight_op(CUstream s, uintptr_t a, size_t alen, uintptr_t b, size_t blen);
void sim_flight_ctx_sync(void);
void sim_flight_drop_ctx(struct CUctx_st *c);
void sim_flight_stream_sync(CUstream s);
void sim_flight_event_record(CUevent e, CUstream s);
void sim_flight_event_sync(CUevent e);
void sim_flight_unmap(uintptr_t base, size_t size);
void sim_flight_reset(void);
/* Every call's result: an error that kills the context (injected, here)
 * ends its work in flight, as nothing queued runs after it. */
void sim_flight_result(enum sim_fn fn, CUresult rc); /* simcuda_reset: no kernel in flight, none counted */
void sim_vmm_reset(void);

/* True when [p, p+n) is memory a kernel may touch: one native allocation,
 * or adjacent mappings that each grant access to some device. */
int sim_dev_span_ok(uintptr_t p, size_t n);
/* The same for a copy device dev issues (-1: any device will do). */
int sim_dev_span_ok_for(uintptr_t p, size_t n, int dev);
/* True when p lies in memory the driver owns (native or reserved VA). */
int sim_is_dev_addr(uintptr_t p);
/* Where the sim's "device" reads and writes [p, p+n): a second mapping of
 * the same memory that ignores the CPU's access, so host-located memory
 * without CPU access faults only for CPU touches (SIMCUDA_CPU_FAULTS). */
char *sim_dev_view(uintptr_t p, size_t n);

/* Stream capture (graph.c; lock held). A stream that captures records
 * copies, sets and launches into its graph instead of running them. */
struct sim_node { /* one recorded operation */
    enum { SIM_NODE_COPY, SIM_NODE_FILL, SIM_NODE_KERNEL } kind;
    uintptr_t dst, src;
    int dkind, skind;
    size_t n, pitch, width, height; /* copy: n; fill: pitch, width, height */
    unsigned value, elem;
    CUfunction f;
    unsigned char *args; /* kernel: the packed parameters (owned) */
};
/* True (with the call's result in *rc) when s captures: node was recorded. */
int sim_capture_add(CUstream s, const struct sim_node *node, CUresult *rc);
/* True when s captures, after invalidating its capture (for calls that
 * cannot be captured). */
int sim_capture_break(CUstream s);
/* A "potentially unsafe" call (allocation, free, synchronous copy or set,
 * VMM): CUDA_SUCCESS when the calling thread's capture mode allows it, else
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED with the forbidding captures
 * invalidated. */
CUresult sim_capture_unsafe(void);
/* Waits on the current context's device, on a stream, on an event: they
 * conflict with an open capture there (which they invalidate). */
CUresult sim_capture_ctx_sync(void);
CUresult sim_capture_stream_sync(CUstream s);
CUresult sim_capture_event_sync(CUevent e);
/* Event record and wait: a record on a capturing stream marks the event;
 * a stream waiting on such an event joins that capture. */
CUresult sim_capture_event_record(CUevent e, CUstream s);
CUresult sim_capture_stream_wait(CUstream s, CUevent e);
void sim_captures_reset(void);

/* Copies and sets (lock held). */
enum sim_side_kind { SIM_HOSTMEM, SIM_DEVMEM, SIM_UNIFIED };
CUresult sim_copy_1d(uintptr_t dst, int dkind, uintptr_t src, int skind, size_t n);
/* The data of a copy or memset (tests/sim/bulk.c): memmove and memset
 * without the sanitizers' per-byte bookkeeping. */
void sim_bulk_move(void *dst, const void *src, size_t n);
void sim_bulk_set(void *dst, int value, size_t n);
CUresult sim_fill(uintptr_t dst, size_t pitch, unsigned value, unsigned elem, size_t width,
                  size_t height);

#pragma GCC visibility pop

#endif
