/* Global state of the simulated driver: configuration, the entry-point
 * gate (counting, fault injection, tracing, locking) and the test-control
 * API that is not about a specific kind of object. */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct sim_state sim = {.lock = PTHREAD_RWLOCK_INITIALIZER};

#define SIM_NAME(name) #name,
const char *const sim_fn_names[SIM_FN_COUNT] = {SIM_EXPORTS(SIM_NAME)};
#undef SIM_NAME

/* Counters and armed faults are atomics outside the lock: under TSan a
 * relaxed atomic creates no happens-before edge, so the sim does not hide
 * races between the caller's threads. */
static unsigned long sim_calls_total;
static unsigned long sim_calls[SIM_FN_COUNT];
static unsigned long sim_fail_any_left;
static CUresult sim_fail_any_err;
static unsigned long sim_fail_fn_left[SIM_FN_COUNT];
static CUresult sim_fail_fn_err[SIM_FN_COUNT];
static unsigned long sim_fail_fn_more[SIM_FN_COUNT]; /* failures after the armed one */
/* The calling thread's own count and fault: a sweep over an operation that
 * makes pieces on worker threads fails each of its own calls once, the
 * same ones every run, whatever the workers do meanwhile. */
static __thread unsigned long sim_calls_here;
static __thread unsigned long sim_fail_here_left;
static __thread CUresult sim_fail_here_err;
static int sim_shut_down; /* simcuda_shut_down: every call answers DEINITIALIZED */

void sim_die(const char *what)
{
    fprintf(stderr, "simcuda: fatal: %s\n", what);
    abort();
}

unsigned long long sim_new_id(void)
{
    return ++sim.next_id; /* write lock held */
}

/* ---- configuration ---------------------------------------------------- */

/* "256M", "1G", "4096": bytes, or 0 when malformed. */
static size_t sim_parse_size(const char *s, const char **end)
{
    char *e;
    unsigned long long v = strtoull(s, &e, 10);
    int shift = 0;
    switch (toupper((unsigned char)*e)) {
    case 'K': shift = 10; e++; break;
    case 'M': shift = 20; e++; break;
    case 'G': shift = 30; e++; break;
    case 'T': shift = 40; e++; break;
    default: break;
    }
    if (e == s)
        return 0;
    *end = e;
    return (size_t)(v << shift);
}

/* SIMCUDA_MEM: one size for every device, or "0:64M,1:128M". */
static void sim_parse_mem(const char *s)
{
    const char *end = s;
    if (!strchr(s, ':')) {
        size_t v = sim_parse_size(s, &end);
        for (int i = 0; i < SIM_MAX_DEVICES && v; i++)
            sim.dev[i].capacity = v;
        if (!v || *end)
            fprintf(stderr, "simcuda: ignoring malformed SIMCUDA_MEM '%s'\n", s);
        return;
    }
    while (*s) {
        char *e;
        long dev = strtol(s, &e, 10);
        if (*e != ':' || dev < 0 || dev >= SIM_MAX_DEVICES)
            break;
        size_t v = sim_parse_size(e + 1, &end);
        if (!v)
            break;
        sim.dev[dev].capacity = v;
        s = *end == ',' ? end + 1 : end;
    }
    if (*s)
        fprintf(stderr, "simcuda: ignoring malformed SIMCUDA_MEM tail '%s'\n", s);
}

static int sim_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static void sim_config_from_env(void)
{
    const char *v;
    sim.ndev = 2;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        sim.dev[i].capacity = (size_t)256 << 20;
        sim.dev[i].ctx.dev = i;
    }
    sim.host_capacity = (size_t)1 << 30;
    if ((v = getenv("SIMCUDA_DEVICES")) && *v) {
        long n = strtol(v, NULL, 10);
        sim.ndev = n < 0 ? 0 : n > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : (int)n;
    }
    if ((v = getenv("SIMCUDA_MEM")) && *v)
        sim_parse_mem(v);
    if ((v = getenv("SIMCUDA_HOST_MEM")) && *v) {
        const char *end;
        size_t n = sim_parse_size(v, &end);
        if (n && !*end)
            sim.host_capacity = n;
        else
            fprintf(stderr, "simcuda: ignoring malformed SIMCUDA_HOST_MEM '%s'\n", v);
    }
    sim.no_vmm = sim_env_flag("SIMCUDA_NO_VMM");
    sim.no_peer = sim_env_flag("SIMCUDA_NO_PEER");
    sim.pcie_peer = sim_env_flag("SIMCUDA_PEER_PCIE");
    sim.tracing = sim_env_flag("SIMCUDA_TRACE");
    sim.cpu_faults = sim_env_flag("SIMCUDA_CPU_FAULTS");
    if ((v = getenv("SIMCUDA_HOST_CREATE_US")) && *v)
        sim.host_create_us = (unsigned)strtoul(v, NULL, 10);
}

void sim_config_load(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sim_config_from_env);
}

/* ---- the entry-point gate --------------------------------------------- */

/* Counts down an armed one-shot fault; true on the call where it fires. */
static int sim_fault_fires(unsigned long *left)
{
    unsigned long n = __atomic_load_n(left, __ATOMIC_RELAXED);
    while (n) {
        if (__atomic_compare_exchange_n(left, &n, n - 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return n == 1;
    }
    return 0;
}

static void sim_lock(int mode)
{
    if (mode & SIM_WRITE)
        pthread_rwlock_wrlock(&sim.lock);
    else if (mode & SIM_READ)
        pthread_rwlock_rdlock(&sim.lock);
}

void sim_unlock(int mode)
{
    if (mode & (SIM_WRITE | SIM_READ))
        pthread_rwlock_unlock(&sim.lock);
}

/* Returns 1 with the lock held when the call may proceed, else 0 with the
 * result in *rc. */
int sim_enter(enum sim_fn fn, int mode, CUresult *rc)
{
    sim_config_load();
    __atomic_fetch_add(&sim_calls_total, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&sim_calls[fn], 1, __ATOMIC_RELAXED);
    sim_calls_here++;
    int here = sim_fail_here_left && --sim_fail_here_left == 0;
    int any = sim_fault_fires(&sim_fail_any_left);
    int mine = sim_fault_fires(&sim_fail_fn_left[fn]);
    if (mine && __atomic_load_n(&sim_fail_fn_more[fn], __ATOMIC_RELAXED)) {
        __atomic_fetch_sub(&sim_fail_fn_more[fn], 1, __ATOMIC_RELAXED);
        __atomic_store_n(&sim_fail_fn_left[fn], 1, __ATOMIC_RELEASE); /* the next call too */
    }
    if (here) {
        *rc = sim_fail_here_err;
        return 0;
    }
    /* Naming an error and looking an entry point up need no driver. */
    if (__atomic_load_n(&sim_shut_down, __ATOMIC_ACQUIRE) && (!(mode & SIM_ANYTIME) || fn == SIM_FN_cuInit)) {
        *rc = CUDA_ERROR_DEINITIALIZED;
        return 0;
    }
    if (any || mine) {
        *rc = __atomic_load_n(any ? &sim_fail_any_err : &sim_fail_fn_err[fn],
                              __ATOMIC_RELAXED);
        return 0;
    }
    if (!(mode & SIM_ANYTIME) && !__atomic_load_n(&sim.initialized, __ATOMIC_ACQUIRE)) {
        *rc = CUDA_ERROR_NOT_INITIALIZED;
        return 0;
    }
    sim_lock(mode);
    return 1;
}

CUresult sim_leave(enum sim_fn fn, CUresult rc)
{
    sim_flight_result(fn, rc);
    if (__atomic_load_n(&sim.tracing, __ATOMIC_RELAXED)) {
        const char *name = sim_error_name(rc);
        fprintf(stderr, "simcuda: %s -> %s (%d)\n", sim_fn_names[fn],
                name ? name : "?", (int)rc);
    }
    return rc;
}

/* Like a driver that survives fork: no other thread of the parent is
 * inside the sim when the child starts, so the child's calls cannot block
 * on a lock that nobody in the child will ever release. */
static void sim_fork_prepare(void) { pthread_rwlock_wrlock(&sim.lock); }
static void sim_fork_parent(void) { pthread_rwlock_unlock(&sim.lock); }
/* The lock still names the parent's waiters (threads the child does not
 * have) and a writer id that is not the child's thread's: unlock it, so
 * ThreadSanitizer sees it released, then start it over for glibc. */
static void sim_fork_child(void)
{
    sim.lock.__data.__cur_writer = (int)syscall(SYS_gettid);
    pthread_rwlock_unlock(&sim.lock);
    pthread_rwlock_init(&sim.lock, NULL);
}

__attribute__((constructor)) static void sim_fork_safe(void)
{
    pthread_atfork(sim_fork_prepare, sim_fork_parent, sim_fork_child);
}

/* ---- small helpers ---------------------------------------------------- */

int sim_vec_push(struct sim_vec *v, void *p)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        void **item = realloc(v->item, cap * sizeof *item);
        if (!item)
            return -1;
        v->item = item;
        v->cap = cap;
    }
    v->item[v->len++] = p;
    return 0;
}

void sim_vec_remove(struct sim_vec *v, void *p)
{
    for (size_t i = 0; i < v->len; i++) {
        if (v->item[i] == p) {
            v->item[i] = v->item[--v->len];
            return;
        }
    }
}

int sim_vec_has(const struct sim_vec *v, const void *p)
{
    for (size_t i = 0; i < v->len; i++)
        if (v->item[i] == p)
            return 1;
    return 0;
}

static size_t *sim_used_of(int loc, size_t *cap)
{
    if (loc == SIMCUDA_LOC_HOST) {
        *cap = sim.host_capacity;
        return &sim.host_used;
    }
    *cap = sim.dev[loc].capacity;
    return &sim.dev[loc].used;
}

CUresult sim_charge(int loc, size_t bytes)
{
    size_t cap, *used = sim_used_of(loc, &cap);
    if (bytes > cap || *used > cap - bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *used += bytes;
    return CUDA_SUCCESS;
}

void sim_uncharge(int loc, size_t bytes)
{
    size_t cap, *used = sim_used_of(loc, &cap);
    *used -= bytes;
}

/* ---- test-control API ------------------------------------------------- */

static int sim_fn_lookup(const char *name)
{
    for (int i = 0; name && i < SIM_FN_COUNT; i++)
        if (strcmp(sim_fn_names[i], name) == 0)
            return i;
    return -1;
}

void simcuda_fail_nth(unsigned long n, CUresult err)
{
    __atomic_store_n(&sim_fail_any_err, err, __ATOMIC_RELAXED);
    __atomic_store_n(&sim_fail_any_left, n, __ATOMIC_RELEASE);
}

void simcuda_fail_nth_here(unsigned long n, CUresult err)
{
    sim_fail_here_err = err;
    sim_fail_here_left = n;
}

void simcuda_fail_call(const char *name, unsigned long nth, CUresult err)
{
    int i = sim_fn_lookup(name);
    if (i < 0) {
        fprintf(stderr, "simcuda_fail_call: the sim has no entry point '%s'\n",
                name ? name : "(null)");
        abort();
    }
    __atomic_store_n(&sim_fail_fn_err[i], err, __ATOMIC_RELAXED);
    __atomic_store_n(&sim_fail_fn_more[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&sim_fail_fn_left[i], nth, __ATOMIC_RELEASE);
}

void simcuda_fail_calls(const char *name, unsigned long nth, unsigned long times, CUresult err)
{
    simcuda_fail_call(name, times ? nth : 0, err);
    if (times && nth)
        __atomic_store_n(&sim_fail_fn_more[sim_fn_lookup(name)], times - 1, __ATOMIC_RELAXED);
}

unsigned long simcuda_call_count(void)
{
    return __atomic_load_n(&sim_calls_total, __ATOMIC_RELAXED);
}

unsigned long simcuda_calls_of(const char *name)
{
    int i = sim_fn_lookup(name);
    return i < 0 ? 0 : __atomic_load_n(&sim_calls[i], __ATOMIC_RELAXED);
}

unsigned long simcuda_call_count_here(void)
{
    return sim_calls_here;
}

void simcuda_reset_counts(void)
{
    sim_calls_here = 0;
    __atomic_store_n(&sim_calls_total, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < SIM_FN_COUNT; i++)
        __atomic_store_n(&sim_calls[i], 0, __ATOMIC_RELAXED);
}

void simcuda_shut_down(void)
{
    __atomic_store_n(&sim_shut_down, 1, __ATOMIC_RELEASE);
}

static void sim_disarm_faults(void)
{
    __atomic_store_n(&sim_fail_any_left, 0, __ATOMIC_RELAXED);
    sim_fail_here_left = 0;
    for (int i = 0; i < SIM_FN_COUNT; i++) {
        __atomic_store_n(&sim_fail_fn_left[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sim_fail_fn_more[i], 0, __ATOMIC_RELAXED);
    }
}

void simcuda_set_capacity(int location, size_t bytes)
{
    sim_config_load();
    pthread_rwlock_wrlock(&sim.lock);
    if (location == SIMCUDA_LOC_HOST)
        sim.host_capacity = bytes;
    else if (location >= 0 && location < SIM_MAX_DEVICES)
        sim.dev[location].capacity = bytes;
    pthread_rwlock_unlock(&sim.lock);
}

void simcuda_set_devices(int n)
{
    sim_config_load();
    pthread_rwlock_wrlock(&sim.lock);
    if (sim.initialized)
        fprintf(stderr, "simcuda_set_devices: ignored after cuInit (call simcuda_reset)\n");
    else
        sim.ndev = n < 0 ? 0 : n > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : n;
    pthread_rwlock_unlock(&sim.lock);
}

void simcuda_set_vmm(int supported)
{
    sim_config_load();
    __atomic_store_n(&sim.no_vmm, !supported, __ATOMIC_RELAXED);
}

void simcuda_set_cpu_faults(int on)
{
    sim_config_load();
    __atomic_store_n(&sim.cpu_faults, on, __ATOMIC_RELAXED);
}

void simcuda_set_host_pin_us(unsigned create_us, unsigned release_us)
{
    sim_config_load();
    __atomic_store_n(&sim.host_create_us, create_us, __ATOMIC_RELAXED);
    __atomic_store_n(&sim.host_release_us, release_us, __ATOMIC_RELAXED);
}

void simcuda_set_peer(int supported)
{
    sim_config_load();
    __atomic_store_n(&sim.no_peer, !supported, __ATOMIC_RELAXED);
}

void simcuda_set_peer_pcie(int pcie)
{
    sim_config_load();
    __atomic_store_n(&sim.pcie_peer, pcie, __ATOMIC_RELAXED);
}

void simcuda_trace(int on)
{
    sim_config_load();
    __atomic_store_n(&sim.tracing, on, __ATOMIC_RELAXED);
}

void simcuda_reset(void)
{
    sim_config_load();
    pthread_rwlock_wrlock(&sim.lock);
    sim_vmm_reset();
    sim_native_reset();
    sim_pool_uses_reset();
    sim_hostreg_reset();
    sim_captures_reset();
    sim_streams_reset();
    sim_flight_reset();
    sim_ctx_reset_all();
    __atomic_store_n(&sim.initialized, 0, __ATOMIC_RELEASE);
    __atomic_fetch_add(&sim.generation, 1, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&sim.lock);
    sim_disarm_faults();
    __atomic_store_n(&sim_shut_down, 0, __ATOMIC_RELEASE);
    simcuda_reset_counts();
}
