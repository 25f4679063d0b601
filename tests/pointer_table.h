/* The pointer-answer table (docs/how-it-works.md), shared by the cpu suite (C,
 * against the simulated driver) and the gpu suite (CUDA C++): every query
 * gvmshim answers — cuMemGetAddressRange, cuPointerGetAttribute for every
 * attribute, cuPointerGetAttributes one attribute at a time and all at
 * once, cuMemGetInfo — at the edges of the program's allocations: inside,
 * one byte before, past the end, in a slot's padding, in the rounding and
 * headroom, after moves, grows, shrinks, through an alias and after frees.
 *
 * A program built on this runs itself twice, natively and with
 * LD_PRELOAD=$GVM_TEST_LIB, and compares the two tables line by line.
 * Values that legitimately differ between runs (addresses, ids, contexts)
 * are printed as their relation to the allocation the case is about:
 * "base", "p" (the queried address), "in", "0", "ctx", "id", "size",
 * "unwritten" (the output was not touched). Everything else is printed raw
 * (8 bytes of the output buffer, prefilled), so a value written with a
 * width other than the driver's shows too. Where the native answer depends
 * on what the driver happens to have placed next to an allocation (one byte
 * before it, deep in its rounding), only whether the answer claims the
 * allocation is compared ("loose" rows).
 *
 * Natively gvm_migrate/gvm_alias/gvm_realloc are absent: a move and an
 * alias leave the allocation as it is, a realloc is a free and a new
 * allocation, so both runs print the same rows. */
#ifndef GVM_POINTER_TABLE_H
#define GVM_POINTER_TABLE_H

#include "gvmshim.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PT_MIB ((size_t)1 << 20)
#define PT_FILL 0xa5

typedef CUresult (*pt_alloc_fn)(CUdeviceptr *p, size_t n);
typedef CUresult (*pt_free_fn)(CUdeviceptr p);

struct pt_env {
    pt_alloc_fn alloc;
    pt_free_fn release;
    CUcontext ctx;                   /* current at every allocation */
    int ndev;
    gvm_status (*migrate)(const void *, int);
    gvm_status (*alias)(const void *, void **);
    gvm_status (*unalias)(void *);
    gvm_status (*resize)(const void *, size_t);
    int failures;                    /* setup calls that failed */
};

/* The allocation a case is about. */
struct pt_subject {
    uintptr_t base;
    size_t size;
    CUcontext ctx;
};

enum pt_kind { PT_RAW, PT_ADDR, PT_SIZE, PT_CTX, PT_ID, PT_TOKENS };

struct pt_attr {
    CUpointer_attribute attr;
    const char *name;
    int kind;
    int batch;                       /* listed by cuPointerGetAttributes' documentation */
};

static const struct pt_attr pt_attrs[] = {
    {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT", PT_CTX, 1},
    {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, "DEVICE_POINTER", PT_ADDR, 1},
    {CU_POINTER_ATTRIBUTE_HOST_POINTER, "HOST_POINTER", PT_ADDR, 1},
    {CU_POINTER_ATTRIBUTE_P2P_TOKENS, "P2P_TOKENS", PT_TOKENS, 0},
    {CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, "SYNC_MEMOPS", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_BUFFER_ID, "BUFFER_ID", PT_ID, 1},
    {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "IS_LEGACY_CUDA_IPC_CAPABLE", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR", PT_ADDR, 1},
    {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE", PT_SIZE, 1},
    {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, "ALLOWED_HANDLE_TYPES", PT_RAW, 1},
    {CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, "IS_GPU_DIRECT_RDMA_CAPABLE", PT_RAW, 0},
    {CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, "ACCESS_FLAGS", PT_RAW, 0},
    {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, "MEMPOOL_HANDLE", PT_ADDR, 1},
    {CU_POINTER_ATTRIBUTE_MAPPING_SIZE, "MAPPING_SIZE", PT_SIZE, 0},
    {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, "MAPPING_BASE_ADDR", PT_ADDR, 0},
    {CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, "MEMORY_BLOCK_ID", PT_ID, 0},
#if CUDA_VERSION >= 12080
    {CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, "IS_HW_DECOMPRESS_CAPABLE", PT_RAW, 1},
#endif
};
#define PT_NATTRS (sizeof pt_attrs / sizeof pt_attrs[0])

/* Answers that differ for a documented reason, reported but not failed
 * (case prefix, attribute): gvmshim's VMM memory has no nv-p2p tokens; the
 * MAPPING_* attributes name the driver's own block of cuMemAlloc memory
 * (on an H100, driver 580: the 2 MiB block holding a small allocation,
 * the allocation rounded to 2 MiB for a large one), which gvmshim follows
 * (its chunk, its rounded allocation) but whose placement it cannot copy;
 * for a default pool's allocation they name the pool's 32 MiB chunk
 * holding it (an H200, driver 580.159: 33554432 for the pool.large case),
 * a chunk gvmshim does not map (it serves each pool allocation on its own
 * mapping: core/pooluse.h models the pool's figures only). */
static const char *const pt_known_differences[][2] = {
    {"", "P2P_TOKENS"},
    {"", "MAPPING_BASE_ADDR"},
    {"", "MAPPING_SIZE"},
};

/* Whether a row (case|call|attr|status|value) is a known difference. */
static inline int pt_known(const char *line)
{
    for (size_t i = 0; i < sizeof pt_known_differences / sizeof *pt_known_differences; i++) {
        const char *prefix = pt_known_differences[i][0], *attr = pt_known_differences[i][1];
        const char *call = strchr(line, '|'), *at = call ? strchr(call + 1, '|') : NULL;
        size_t n = strlen(attr);
        if (at && !strncmp(line, prefix, strlen(prefix)) && !strncmp(at + 1, attr, n) && at[1 + n] == '|')
            return 1;
    }
    return 0;
}

/* Attributes left out of the batch row: known to differ somewhere. */
static inline int pt_known_attr(const char *name)
{
    for (size_t i = 0; i < sizeof pt_known_differences / sizeof *pt_known_differences; i++)
        if (!strcmp(pt_known_differences[i][1], name)) return 1;
    return 0;
}

/* ---- normalisation ------------------------------------------------------ */

static inline uint64_t pt_fill64(void)
{
    uint64_t v;
    memset(&v, PT_FILL, sizeof v);
    return v;
}

static inline void pt_norm(char *out, size_t len, int kind, const unsigned char *buf,
                           const struct pt_subject *s, uintptr_t p)
{
    uint64_t v;
    memcpy(&v, buf, sizeof v);
    if (kind == PT_RAW || kind == PT_TOKENS) {
        if (kind == PT_TOKENS) {
            snprintf(out, len, "%s", v == pt_fill64() ? "unwritten" : v ? "tokens" : "0");
            return;
        }
        snprintf(out, len, "%016llx", (unsigned long long)v);
        return;
    }
    const char *word = NULL;
    if (v == pt_fill64()) word = "unwritten";
    else if (v == 0) word = "0";
    else if (kind == PT_ADDR && v == p) word = "p";
    else if (kind == PT_ADDR && v == s->base) word = "base";
    else if (kind == PT_ADDR && v > s->base && v - s->base < s->size) word = "in";
    else if (kind == PT_SIZE && v == s->size) word = "size";
    else if (kind == PT_CTX && v == (uintptr_t)s->ctx) word = "ctx";
    else if (kind == PT_ID) word = "id";
    if (word) snprintf(out, len, "%s", word);
    else if (kind == PT_SIZE) snprintf(out, len, "%llu", (unsigned long long)v);
    else snprintf(out, len, "other");
}

static inline void pt_row(const char *cas, const char *call, const char *attr, CUresult rc, const char *val)
{
    printf("%s|%s|%s|%d|%s\n", cas, call, attr, (int)rc, val);
}

/* ---- the queries at one address ---------------------------------------- */

static inline void pt_address_range(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    unsigned char b[8], z[8];
    memset(b, PT_FILL, sizeof b);
    memset(z, PT_FILL, sizeof z);
    CUresult rc = cuMemGetAddressRange((CUdeviceptr *)(void *)b, (size_t *)(void *)z, (CUdeviceptr)p);
    char vb[32], vz[32], val[80];
    pt_norm(vb, sizeof vb, PT_ADDR, b, s, p);
    pt_norm(vz, sizeof vz, PT_SIZE, z, s, p);
    snprintf(val, sizeof val, "%s,%s", vb, vz);
    pt_row(cas, "cuMemGetAddressRange", "-", rc, val);
}

static inline void pt_attribute(const char *cas, const struct pt_subject *s, uintptr_t p, const struct pt_attr *a)
{
    unsigned long long buf[2];
    memset(buf, PT_FILL, sizeof buf);
    CUresult rc = cuPointerGetAttribute(buf, a->attr, (CUdeviceptr)p);
    char val[64];
    pt_norm(val, sizeof val, a->kind, (const unsigned char *)buf, s, p);
    pt_row(cas, "cuPointerGetAttribute", a->name, rc, val);
}

static inline void pt_attributes_one(const char *cas, const struct pt_subject *s, uintptr_t p,
                                     const struct pt_attr *a)
{
    unsigned long long buf[2];
    memset(buf, PT_FILL, sizeof buf);
    CUpointer_attribute attrs[1] = {a->attr};
    void *data[1] = {buf};
    CUresult rc = cuPointerGetAttributes(1, attrs, data, (CUdeviceptr)p);
    char val[64];
    pt_norm(val, sizeof val, a->kind, (const unsigned char *)buf, s, p);
    pt_row(cas, "cuPointerGetAttributes", a->name, rc, val);
}

/* The documented batch in one call, as cudart and libraries use it. */
static inline void pt_attributes_all(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    CUpointer_attribute attrs[PT_NATTRS];
    unsigned long long buf[PT_NATTRS][2];
    void *data[PT_NATTRS];
    const struct pt_attr *which[PT_NATTRS];
    unsigned n = 0;
    for (size_t i = 0; i < PT_NATTRS; i++) {
        if (!pt_attrs[i].batch || pt_known_attr(pt_attrs[i].name)) continue;
        memset(buf[n], PT_FILL, sizeof buf[n]);
        attrs[n] = pt_attrs[i].attr;
        data[n] = buf[n];
        which[n++] = &pt_attrs[i];
    }
    CUresult rc = cuPointerGetAttributes(n, attrs, data, (CUdeviceptr)p);
    char val[64 * PT_NATTRS] = "";
    for (unsigned i = 0; i < n; i++) {
        char one[64];
        pt_norm(one, sizeof one, which[i]->kind, (const unsigned char *)buf[i], s, p);
        strcat(val, i ? "," : "");
        strcat(val, one);
    }
    pt_row(cas, "cuPointerGetAttributes", "documented-batch", rc, val);
}

/* Whether the address has an allocation handle to retain, as NCCL's
 * user-buffer registration asks (cuMemAlloc memory has none). A handle
 * retained is released at once. */
static inline void pt_retain(const char *cas, uintptr_t p)
{
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = cuMemRetainAllocationHandle(&h, (void *)p);
    if (rc == CUDA_SUCCESS) cuMemRelease(h);
    pt_row(cas, "cuMemRetainAllocationHandle", "-", rc, "-");
}

/* More queries at every point (the gpu program adds the runtime's). */
static void (*pt_extra)(const char *cas, const struct pt_subject *s, uintptr_t p);

/* Every query at p, about subject s. */
static inline void pt_point(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    pt_address_range(cas, s, p);
    for (size_t i = 0; i < PT_NATTRS; i++) pt_attribute(cas, s, p, &pt_attrs[i]);
    for (size_t i = 0; i < PT_NATTRS; i++) pt_attributes_one(cas, s, p, &pt_attrs[i]);
    pt_attributes_all(cas, s, p);
    pt_retain(cas, p);
    if (pt_extra) pt_extra(cas, s, p);   /* last: the runtime makes a context current */
}

struct pt_thread_arg {
    const char *cas;
    const struct pt_subject *s;
    uintptr_t p;
};

static void *pt_thread_body(void *arg)
{
    const struct pt_thread_arg *a = (const struct pt_thread_arg *)arg;
    pt_point(a->cas, a->s, a->p);
    fflush(stdout);
    return NULL;
}

/* The same queries from a new thread, where no context is current. */
static inline void pt_no_context(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    struct pt_thread_arg a = {cas, s, p};
    pthread_t t;
    fflush(stdout);
    if (pthread_create(&t, NULL, pt_thread_body, &a) == 0) pthread_join(t, NULL);
    else printf("%s|pthread_create failed\n", cas);
}

/* Whether the answers at p claim s: where the native answer depends on the
 * driver's placement of other allocations. */
static inline void pt_loose(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult rc = cuMemGetAddressRange(&base, &size, (CUdeviceptr)p);
    int range = rc == CUDA_SUCCESS && base == s->base;
    CUdeviceptr start = 0;
    unsigned type = 0;
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    void *data[2] = {&start, &type};
    rc = cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)p);
    int batch = rc == CUDA_SUCCESS && start == s->base;
    rc = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p);
    int single = rc == CUDA_SUCCESS && start == s->base;
    char val[64];
    snprintf(val, sizeof val, "claims=%d,%d,%d", range, batch, single);
    pt_row(cas, "loose", "-", CUDA_SUCCESS, val);
}

/* The same queries with device 1's primary context current (peer access
 * not enabled), where there is a device 1. */
static inline void pt_other_device(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    CUdevice d1;
    CUcontext c1 = NULL, before = NULL;
    if (cuDeviceGet(&d1, 1) != CUDA_SUCCESS || cuCtxGetCurrent(&before) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c1, d1) != CUDA_SUCCESS)
        return;
    if (cuCtxSetCurrent(c1) == CUDA_SUCCESS) pt_point(cas, s, p);
    cuCtxSetCurrent(before);
    cuDevicePrimaryCtxRelease(d1);
}

/* The same with peer access from device 1's context to the current one
 * enabled (where the devices allow it), then disabled again: natively a
 * context reaches another device's cuMemAlloc memory only then. */
static inline void pt_peer_enabled(const char *cas, const struct pt_subject *s, uintptr_t p)
{
    CUdevice d1;
    CUcontext c1 = NULL, before = NULL;
    int can = 0;
    if (cuDeviceGet(&d1, 1) != CUDA_SUCCESS || cuDeviceCanAccessPeer(&can, d1, 0) != CUDA_SUCCESS || !can ||
        cuCtxGetCurrent(&before) != CUDA_SUCCESS || !before || cuDevicePrimaryCtxRetain(&c1, d1) != CUDA_SUCCESS)
        return;
    if (cuCtxSetCurrent(c1) == CUDA_SUCCESS) {
        CUresult rc = cuCtxEnablePeerAccess(before, 0);
        if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) pt_point(cas, s, p);
        if (rc == CUDA_SUCCESS) cuCtxDisablePeerAccess(before);
    }
    cuCtxSetCurrent(before);
    cuDevicePrimaryCtxRelease(d1);
}

static inline char *pt_name(char *buf, size_t len, const char *prefix, const char *what)
{
    snprintf(buf, len, "%s.%s", prefix, what);
    return buf;
}


/* The edges of a live allocation. */
static inline void pt_edges(const char *prefix, const struct pt_subject *s)
{
    char n[96];
    pt_point(pt_name(n, sizeof n, prefix, "base"), s, s->base);
    pt_point(pt_name(n, sizeof n, prefix, "interior"), s, s->base + s->size / 2);
    pt_point(pt_name(n, sizeof n, prefix, "last"), s, s->base + s->size - 1);
    pt_point(pt_name(n, sizeof n, prefix, "end"), s, s->base + s->size);
    pt_point(pt_name(n, sizeof n, prefix, "end+16"), s, s->base + s->size + 16);
    pt_loose(pt_name(n, sizeof n, prefix, "before"), s, s->base - 1);
    if (s->size > PT_MIB) {
        size_t rounded = (s->size + 2 * PT_MIB - 1) / (2 * PT_MIB) * (2 * PT_MIB);
        pt_loose(pt_name(n, sizeof n, prefix, "rounding"), s, s->base + rounded - 4096);
        pt_loose(pt_name(n, sizeof n, prefix, "headroom"), s, s->base + rounded + 100);
    }
}

/* A freed allocation: no answer may name it. */
static inline void pt_freed(const char *prefix, const struct pt_subject *s)
{
    char n[96];
    pt_point(pt_name(n, sizeof n, prefix, "base"), s, s->base);
    pt_point(pt_name(n, sizeof n, prefix, "interior"), s, s->base + s->size / 2);
}

/* Stream-ordered allocations of the current device's default pool, asked
 * about from their own context, then from device 1's (where there is one
 * that reaches device 0): before the pool grants device 1 access, while it
 * does (natively the pool's memory is then reached from there, peer access
 * or not), and after the grant is taken back (what CUDA's
 * streamOrderedAllocationP2P sample does). */
static inline void pt_pool_phases(CUmemoryPool pool, CUcontext before, const struct pt_subject *l,
                                  const struct pt_subject *m)
{
    CUdevice d1;
    CUcontext c1 = NULL;
    int can = 0;
    if (cuDeviceGet(&d1, 1) != CUDA_SUCCESS || cuDeviceCanAccessPeer(&can, d1, 0) != CUDA_SUCCESS || !can ||
        cuDevicePrimaryCtxRetain(&c1, d1) != CUDA_SUCCESS)
        return;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 1;
    const char *phase[3] = {"ungranted", "granted", "revoked"};
    for (int i = 0; i < 3; i++) {
        d.flags = i == 1 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
        if (i > 0 && cuMemPoolSetAccess(pool, &d, 1) != CUDA_SUCCESS) break;
        if (cuCtxSetCurrent(c1) != CUDA_SUCCESS) break;
        char n[96];
        snprintf(n, sizeof n, "pool-access.%s.large.interior", phase[i]);
        pt_point(n, l, l->base + 10);
        snprintf(n, sizeof n, "pool-access.%s.large.end+16", phase[i]);
        pt_point(n, l, l->base + l->size + 16);
        snprintf(n, sizeof n, "pool-access.%s.small.interior", phase[i]);
        pt_point(n, m, m->base + 10);
        cuCtxSetCurrent(before);
    }
    cuCtxSetCurrent(before);
    cuDevicePrimaryCtxRelease(d1);
}

/* The default pool's use figures, as CuPy and PyTorch read them. */
static inline void pt_pool_figures(const char *cas, CUmemoryPool pool)
{
    static const struct {
        CUmemPool_attribute attr;
        const char *name;
    } figures[] = {{CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "USED_MEM_CURRENT"},
                   {CU_MEMPOOL_ATTR_USED_MEM_HIGH, "USED_MEM_HIGH"},
                   {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, "RESERVED_MEM_CURRENT"},
                   {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, "RESERVED_MEM_HIGH"}};
    for (size_t i = 0; i < sizeof figures / sizeof *figures; i++) {
        cuuint64_t v = 0;
        CUresult rc = cuMemPoolGetAttribute(pool, figures[i].attr, &v);
        char val[32];
        snprintf(val, sizeof val, "%llu", (unsigned long long)v);
        pt_row(cas, "cuMemPoolGetAttribute", figures[i].name, rc, val);
    }
}

/* Argument errors of the pool calls are the driver's, for the default
 * pools gvmshim answers for too. */
static inline void pt_pool_bad_arguments(const char *cas, CUmemoryPool pool, const struct pt_subject *s)
{
    cuuint64_t v = 0, five = 5;
    CUdeviceptr p = 0;
    pt_row(cas, "cuMemPoolGetAttribute", "pool=NULL",
           cuMemPoolGetAttribute(NULL, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), "-");
    pt_row(cas, "cuMemPoolGetAttribute", "value=NULL",
           cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, NULL), "-");
    pt_row(cas, "cuMemPoolGetAttribute", "attr=9999", cuMemPoolGetAttribute(pool, (CUmemPool_attribute)9999, &v),
           "-");
    pt_row(cas, "cuMemPoolSetAttribute", "USED_MEM_HIGH=5",
           cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five), "-");
    pt_row(cas, "cuMemPoolSetAttribute", "RESERVED_MEM_HIGH=5",
           cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &five), "-");
    pt_row(cas, "cuMemPoolTrimTo", "pool=NULL", cuMemPoolTrimTo(NULL, 0), "-");
    pt_row(cas, "cuMemAllocFromPoolAsync", "pool=NULL", cuMemAllocFromPoolAsync(&p, 1000, NULL, NULL), "-");
    pt_row(cas, "cuMemAllocAsync", "dptr=NULL", cuMemAllocAsync(NULL, 1000, NULL), "-");
    p = 0;
    CUresult rc = cuMemAllocAsync(&p, 0, NULL);
    pt_row(cas, "cuMemAllocAsync", "size=0", rc, p ? "set" : "0");
    rc = cuMemFreeAsync((CUdeviceptr)(s->base + 16), NULL);
    pt_row(cas, "cuMemFreeAsync", "interior", rc, "-");
}

static inline void pt_pool_memory(void)
{
    CUcontext before = NULL;
    CUmemoryPool pool = NULL;
    CUdevice d0;
    if (cuCtxGetCurrent(&before) != CUDA_SUCCESS || !before || cuCtxGetDevice(&d0) != CUDA_SUCCESS ||
        cuDeviceGetDefaultMemPool(&pool, d0) != CUDA_SUCCESS)
        return;
    /* From a clean pool: the figures are the table's own allocations. */
    if (cuStreamSynchronize(NULL) != CUDA_SUCCESS || cuMemPoolTrimTo(pool, 0) != CUDA_SUCCESS) return;
    cuuint64_t zero = 0;
    cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
    cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
    CUdeviceptr large = 0, small = 0, named = 0;
    if (cuMemAllocAsync(&large, 3 * PT_MIB + 1000, NULL) == CUDA_SUCCESS &&
        cuMemAllocAsync(&small, 1000, NULL) == CUDA_SUCCESS &&
        cuMemAllocFromPoolAsync(&named, 5000, pool, NULL) == CUDA_SUCCESS &&
        cuStreamSynchronize(NULL) == CUDA_SUCCESS) {
        struct pt_subject l = {(uintptr_t)large, 3 * PT_MIB + 1000, before}, m = {(uintptr_t)small, 1000, before},
                          n = {(uintptr_t)named, 5000, before};
        pt_edges("pool.large", &l);
        pt_edges("pool.small", &m);
        pt_edges("pool.named", &n);
        pt_pool_figures("pool.live", pool);
        pt_pool_bad_arguments("pool.large", pool, &l);
        if (d0 == 0) pt_pool_phases(pool, before, &l, &m);
        /* Freed in stream order: gone for the program at once, its bytes
         * still the pool's until a synchronize settles the free. */
        cuMemFreeAsync(small, NULL);
        small = 0;
        pt_freed("pool.small.freed-unsynchronized", &m);
        pt_pool_figures("pool.freed-unsynchronized", pool);
        cuStreamSynchronize(NULL);
        pt_freed("pool.small.freed-synchronized", &m);
        pt_pool_figures("pool.freed-synchronized", pool);
    }
    if (large) cuMemFreeAsync(large, NULL);
    if (small) cuMemFreeAsync(small, NULL);
    if (named) cuMemFreeAsync(named, NULL);
    cuStreamSynchronize(NULL);
    pt_pool_figures("pool.all-freed", pool);
}

/* ---- the table ---------------------------------------------------------- */

static inline struct pt_subject pt_new(struct pt_env *e, size_t size)
{
    CUdeviceptr p = 0;
    if (e->alloc(&p, size) != CUDA_SUCCESS) e->failures++;
    struct pt_subject s = {(uintptr_t)p, size, e->ctx};
    return s;
}

static inline void pt_release(struct pt_env *e, const struct pt_subject *s)
{
    if (e->release((CUdeviceptr)s->base) != CUDA_SUCCESS) e->failures++;
}

/* Moves s under the shim (nothing natively). Failure to reach a peer is
 * not an error: the answers must be the same either way. */
static inline void pt_move(struct pt_env *e, const struct pt_subject *s, int loc)
{
    if (e->migrate) e->migrate((const void *)s->base, loc);
}

/* gvm_realloc under the shim; natively a new allocation of the new size. */
static inline void pt_resize(struct pt_env *e, struct pt_subject *s, size_t size)
{
    if (e->resize && e->resize((const void *)s->base, size) == GVM_OK) {
        s->size = size;
        return;
    }
    pt_release(e, s);
    *s = pt_new(e, size);
}

static inline void pt_meminfo(void)
{
    size_t f = 0, t = 0;
    pt_row("meminfo", "cuMemGetInfo", "null,null", cuMemGetInfo(NULL, NULL), "-");
    pt_row("meminfo", "cuMemGetInfo", "free,null", cuMemGetInfo(&f, NULL), "-");
    pt_row("meminfo", "cuMemGetInfo", "null,total", cuMemGetInfo(NULL, &t), "-");
    CUresult rc = cuMemGetInfo(&f, &t);
    char val[64];
    snprintf(val, sizeof val, "free<=total:%d,total=%zu", f <= t && t > 0, t);
    pt_row("meminfo", "cuMemGetInfo", "free,total", rc, val);
}

/* Argument errors are the driver's, for gvmshim's pointers too. */
static inline void pt_bad_arguments(const char *cas, const struct pt_subject *s)
{
    unsigned long long v = 0;
    CUdeviceptr p = (CUdeviceptr)s->base;
    pt_row(cas, "cuPointerGetAttribute", "attr=9999", cuPointerGetAttribute(&v, (CUpointer_attribute)9999, p), "-");
    pt_row(cas, "cuPointerGetAttribute", "data=NULL",
           cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), "-");
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUpointer_attribute)9999};
    void *data[2] = {&v, &v};
    pt_row(cas, "cuPointerGetAttributes", "n=0", cuPointerGetAttributes(0, attrs, data, p), "-");
    pt_row(cas, "cuPointerGetAttributes", "attr=9999", cuPointerGetAttributes(2, attrs, data, p), "-");
    data[1] = NULL;
    attrs[1] = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    pt_row(cas, "cuPointerGetAttributes", "data[1]=NULL", cuPointerGetAttributes(2, attrs, data, p), "-");
}

/* Prints the whole table; returns nonzero when a setup call failed. */
static inline int pt_table(struct pt_env *e)
{
    /* First line, not compared: which run this is (pt_main checks it). */
    printf("shim=%d\n", e->migrate != NULL);
    int host_var = 0;
    struct pt_subject host = {(uintptr_t)&host_var, sizeof host_var, e->ctx};
    pt_point("host-stack", &host, host.base);
    struct pt_subject null_s = {0, 1, e->ctx};
    pt_point("null", &null_s, 0);
    pt_meminfo();

    /* Two neighbours in one chunk, and a large allocation. */
    struct pt_subject small = pt_new(e, 1000), neighbour = pt_new(e, 1000);
    struct pt_subject large = pt_new(e, 3 * PT_MIB + 1000);
    pt_edges("small", &small);
    pt_point("small.padding", &small, small.base + 1010);
    pt_edges("neighbour", &neighbour);
    pt_edges("large", &large);
    pt_bad_arguments("large", &large);
    pt_no_context("no-context.small.interior", &small, small.base + 10);
    pt_no_context("no-context.large.interior", &large, large.base + 10);
    pt_no_context("no-context.large.end+16", &large, large.base + large.size + 16);
    pt_other_device("peer-context.small.interior", &small, small.base + 10);
    pt_other_device("peer-context.large.interior", &large, large.base + 10);
    pt_other_device("peer-context.large.end+16", &large, large.base + large.size + 16);
    pt_peer_enabled("peer-context.enabled.small.interior", &small, small.base + 10);
    pt_peer_enabled("peer-context.enabled.large.interior", &large, large.base + 10);
    /* Disabled again: back to the first answers. */
    pt_other_device("peer-context.again.small.interior", &small, small.base + 10);
    pt_pool_memory();

    /* Moves: the program still sees device memory of device 0. */
    pt_move(e, &large, GVM_HOST);
    pt_edges("large@host", &large);
    pt_move(e, &large, 0);
    pt_edges("large@dev0", &large);
    if (e->ndev > 1) {
        pt_move(e, &large, 1);
        pt_edges("large@peer", &large);
        pt_move(e, &large, 0);
    }
    pt_move(e, &small, GVM_HOST);
    pt_edges("small@host", &small);
    pt_edges("neighbour@host", &neighbour);
    pt_move(e, &small, 0);

    /* An alias is a second address of the same allocation. */
    struct pt_subject target = pt_new(e, 3 * PT_MIB + 1000), view = target;
    void *alias = NULL;
    if (e->alias && e->alias((const void *)target.base, &alias) == GVM_OK) view.base = (uintptr_t)alias;
    pt_edges("alias", &view);
    if (alias) {
        e->unalias(alias);
    } else {
        view = pt_new(e, 3 * PT_MIB + 1000);   /* natively: a freed address */
        pt_release(e, &view);
    }
    pt_freed("alias.gone", &view);
    pt_release(e, &target);

    /* Grow and shrink in place: the old tail is past the end. */
    struct pt_subject r = pt_new(e, 6 * PT_MIB + 1000);
    pt_resize(e, &r, 10 * PT_MIB + 1000);
    pt_edges("grown", &r);
    pt_resize(e, &r, 3 * PT_MIB + 1000);
    pt_edges("shrunk", &r);
    pt_loose("shrunk.old-tail", &r, r.base + 5 * PT_MIB);
    pt_release(e, &r);

    /* Frees: a slot in quarantine, a region in the cache, one released. */
    pt_release(e, &small);
    pt_freed("small.freed", &small);
    pt_edges("neighbour.after-free", &neighbour);
    pt_release(e, &neighbour);
    pt_freed("neighbour.freed", &neighbour);
    pt_release(e, &large);
    pt_freed("large.freed", &large);
    pt_point("large.freed.end+16", &large, large.base + large.size + 16);
    pt_no_context("no-context.large.freed", &large, large.base + 10);
    struct pt_subject huge = pt_new(e, 64 * PT_MIB);
    pt_release(e, &huge);
    pt_freed("released", &huge);
    pt_bad_arguments("released", &huge);
    pt_meminfo();
    return e->failures;
}

static inline void pt_find_gvm_api(struct pt_env *e)
{
    e->migrate = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    e->alias = (gvm_status(*)(const void *, void **))dlsym(RTLD_DEFAULT, "gvm_alias");
    e->unalias = (gvm_status(*)(void *))dlsym(RTLD_DEFAULT, "gvm_unalias");
    e->resize = (gvm_status(*)(const void *, size_t))dlsym(RTLD_DEFAULT, "gvm_realloc");
}

/* ---- running both and comparing ----------------------------------------- */

/* Runs this program with --table, with the shim preloaded or not; returns
 * its output (malloc'd) and its exit status in *status. */
static inline char *pt_run_child(const char *shim, int *status)
{
    int fd[2];
    if (pipe(fd)) return NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (shim) setenv("LD_PRELOAD", shim, 1);
        else unsetenv("LD_PRELOAD");
        execl("/proc/self/exe", "pointer-table", "--table", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 1 << 20, len = 0;
    char *out = (char *)malloc(cap);
    for (;;) {
        if (len + 65536 + 1 > cap) out = (char *)realloc(out, cap *= 2);
        ssize_t n = read(fd[0], out + len, 65536);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    out[len] = 0;
    close(fd[0]);
    waitpid(pid, status, 0);
    return out;
}

/* Compares the tables line by line; returns the number of differences. */
static inline int pt_compare(char *native, char *shim)
{
    int diffs = 0, known = 0, lines = 0;
    char *sn = NULL, *ss = NULL;
    char *a = strtok_r(native, "\n", &sn), *b = strtok_r(shim, "\n", &ss);
    for (; a || b; a = strtok_r(NULL, "\n", &sn), b = strtok_r(NULL, "\n", &ss)) {
        lines++;
        if (a && b && !strcmp(a, b)) continue;
        if (a && b && pt_known(a) && pt_known(b)) {
            if (known++ < 4) fprintf(stderr, "known difference:\n  native %s\n  shim   %s\n", a, b);
            continue;
        }
        if (diffs++ < 200) fprintf(stderr, "DIFF\n  native %s\n  shim   %s\n", a ? a : "(none)", b ? b : "(none)");
    }
    fprintf(stderr, "%d rows, %d differences, %d known differences\n", lines, diffs, known);
    return diffs;
}

/* main() of a table program: `--table` prints the table (table_main);
 * without arguments both runs are compared. Exit 77 passes a skip through. */
static inline int pt_main(int argc, char **argv, int (*table_main)(void))
{
    if (argc > 1 && !strcmp(argv[1], "--table")) return table_main();
    const char *shim = getenv("GVM_TEST_LIB");
    if (!shim || !*shim) {
        fprintf(stderr, "GVM_TEST_LIB must name libgvmshim.so\n");
        return 2;
    }
    /* A small cache, so that a 64 MiB free is released, not kept. */
    setenv("GVM_CACHE_LIMIT", "16M", 1);
    int st_native = 0, st_shim = 0;
    char *native = pt_run_child(NULL, &st_native);
    if (native && WIFEXITED(st_native) && WEXITSTATUS(st_native) == 77) {
        printf("SKIP pointer-answers\n0 passed, 0 failed\n");
        return 77;
    }
    char *shimmed = pt_run_child(shim, &st_shim);
    int ok = native && shimmed;
    if (ok && !(WIFEXITED(st_native) && WEXITSTATUS(st_native) == 0)) {
        fprintf(stderr, "the native run failed (status %d)\n", st_native);
        ok = 0;
    }
    if (ok && !(WIFEXITED(st_shim) && WEXITSTATUS(st_shim) == 0)) {
        fprintf(stderr, "the run under the shim failed (status %d)\n", st_shim);
        ok = 0;
    }
    /* A preload that did not happen would compare the native run with itself. */
    if (ok && (strncmp(native, "shim=0\n", 7) || strncmp(shimmed, "shim=1\n", 7))) {
        fprintf(stderr, "the native run must run without gvmshim and the other with it (is %s loadable?)\n", shim);
        ok = 0;
    }
    if (ok && pt_compare(native + 7, shimmed + 7)) ok = 0;
    free(native);
    free(shimmed);
    printf("%s pointer-answers\n%d passed, %d failed\n", ok ? "PASS" : "FAIL", ok, !ok);
    return ok ? 0 : 1;
}

#endif
