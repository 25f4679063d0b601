/* The whole interception path, as an unmodified program sees it: this
 * program is run with LD_PRELOAD=libgvmshim.so and the simulated driver
 * first on LD_LIBRARY_PATH. Like cudart, it dlopen()s libcuda.so.1, takes
 * cuGetProcAddress_v2 with dlsym, asks it for cuGetProcAddress itself and
 * resolves everything else through that. It links neither gvmshim nor the
 * simulated driver. */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"
#include "harness.h"
#include "simcuda.h"   /* its constants; its functions are reached through sim_fn */

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>

#define MiB ((size_t)1 << 20)

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);

static void *lib;
static gpa2_fn gpa;

static const char *object_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname) return "?";
    return strstr(info.dli_fname, "libgvmshim") ? "shim" : strstr(info.dli_fname, "libcuda") ? "sim" : "other";
}

static const char *symbol_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_sname) return "?";
    return info.dli_sname;
}

static void *resolve(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(name, &fn, version, flags, &st), CUDA_SUCCESS);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    return fn;
}

/* The cudart way in. */
static void open_driver(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    gpa2_fn first = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    CHECK(!strcmp(object_of((void *)first), "shim"));
    gpa = first;
    gpa = (gpa2_fn)resolve("cuGetProcAddress", 12000, 0);
    CHECK(!strcmp(object_of((void *)gpa), "shim"));
}

static void *sim_fn(const char *name)
{
    void *f = dlsym(lib, name);
    CHECK(f != NULL);
    return f;
}

#define D(name, ...) ((__typeof__(name) *)resolve(#name, 12000, 0))(__VA_ARGS__)
#define RES(fn, name, ver, fl) __typeof__(fn) *fn##_p = (__typeof__(fn) *)resolve(name, ver, fl)

static CUcontext ctx0;

/* The driver opened as cudart does, device dev's primary context current. */
static CUcontext start_on(int dev)
{
    CUcontext c = NULL;
    open_driver();
    RES(cuInit, "cuInit", 2000, 0);
    CHECK_EQ(cuInit_p(0), CUDA_SUCCESS);
    RES(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0);
    RES(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    CHECK_EQ(cuDevicePrimaryCtxRetain_p(&c, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent_p(c), CUDA_SUCCESS);
    return c;
}

static void start(void) { ctx0 = start_on(0); }

static void resolver_hands_out_the_abi_asked_for(void)
{
    open_driver();
    void *legacy = resolve("cuGetProcAddress", 11030, 0);
    CHECK(!strcmp(object_of(legacy), "shim"));
    CHECK(!strcmp(symbol_of(legacy), "cuGetProcAddress"));
    CHECK(!strcmp(symbol_of(resolve("cuMemAlloc", 3020, 0)), "cuMemAlloc_v2"));
    CHECK(!strcmp(object_of(resolve("cuMemAlloc", 3020, 0)), "shim"));
    /* The 32-bit legacy ABI is left alone. */
    CHECK(!strcmp(object_of(resolve("cuMemAlloc", 2000, 0)), "sim"));
    CHECK(!strcmp(symbol_of(resolve("cuMemcpy", 4000, 0)), "cuMemcpy"));
    CHECK(!strcmp(symbol_of(resolve("cuMemcpy", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)),
                  "cuMemcpy_ptds"));
    CHECK(!strcmp(object_of(resolve("cuMemcpyAsync", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)),
                  "shim"));
    CHECK(!strcmp(symbol_of(resolve("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)),
                  "cuMemAllocAsync_ptsz"));
    CHECK(!strcmp(symbol_of(resolve("cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)),
                  "cuMemcpyHtoD_v2_ptds"));
    /* Not interposed: the driver's own function. */
    CHECK(!strcmp(object_of(resolve("cuInit", 2000, 0)), "sim"));
    /* Launches are hooked whatever the spill (gvmctl set may turn it on),
     * scanned only while it is on; track_launches=off: the driver's own
     * (case untracked). */
    CHECK(!strcmp(object_of(resolve("cuLaunchKernel", 4000, 0)), "shim"));
    void *none = (void *)1;
    CUdriverProcAddressQueryResult st;
    gpa("cuNoSuchEntryPoint", &none, 12000, 0, &st);
    CHECK(none == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* dlsym on libcuda for a hooked name, and the old 4-argument resolver. */
    CHECK(!strcmp(object_of(dlsym(lib, "cuMemFree_v2")), "shim"));
    CHECK(!strcmp(object_of(dlsym(lib, "cuDeviceGet")), "sim"));
    gpa1_fn old = (gpa1_fn)dlsym(lib, "cuGetProcAddress");
    CHECK(!strcmp(object_of((void *)old), "shim"));
    void *f = NULL;
    CHECK_EQ(old("cuMemFree", &f, 3020, 0), CUDA_SUCCESS);
    CHECK(!strcmp(object_of(f), "shim"));
    /* Names of other libraries that start with "cu" are never touched. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(dlsym(RTLD_DEFAULT, "cuserid") == dlsym(libc, "cuserid"));
}

static void alloc_copy_query_free(void)
{
    start();
    CUdeviceptr small = 0, big = 0;
    CHECK_EQ(D(cuMemAlloc_v2, &small, 1000), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &big, 10 * MiB), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    CHECK(query != NULL);
    gvm_info info;
    CHECK_EQ(query((void *)big, &info), GVM_OK);
    CHECK_EQ(info.size, 10 * MiB);
    CHECK_EQ(query((void *)small, &info), GVM_OK);
    CHECK(info.packed);
    /* Copies and sets through every form. */
    static unsigned char in[MiB], out[MiB];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (unsigned char)(i * 31);
    CHECK_EQ(D(cuMemcpyHtoD_v2, big, in, sizeof in), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyDtoD_v2, big + 4 * MiB, big, sizeof in), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, big + 4 * MiB, sizeof out), CUDA_SUCCESS);
    CHECK(!memcmp(in, out, sizeof in));
    CHECK_EQ(D(cuMemsetD32_v2, small, 0x01020304u, 250), CUDA_SUCCESS);
    unsigned w = 0;
    CHECK_EQ(D(cuMemcpy, (CUdeviceptr)&w, small + 996, 4), CUDA_SUCCESS);
    CHECK_EQ(w, 0x01020304u);
    /* Pointer queries answer with the program's allocation. */
    CUdeviceptr base = 0;
    size_t size = 0;
    CHECK_EQ(D(cuMemGetAddressRange_v2, &base, &size, big + 5 * MiB), CUDA_SUCCESS);
    CHECK_EQ(base, big);
    CHECK_EQ(size, 10 * MiB);
    CHECK_EQ(D(cuMemGetAddressRange_v2, &base, &size, small + 10), CUDA_SUCCESS);
    CHECK_EQ(base, small);
    CHECK_EQ(size, 1000);
    unsigned type = 0;
    int ordinal = -1;
    unsigned long long id1 = 0, id2 = 0;
    CHECK_EQ(D(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, big), CUDA_SUCCESS);
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(D(cuPointerGetAttribute, &id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, big), CUDA_SUCCESS);
    /* After a move to host the program still sees device memory of device 0. */
    gvm_status (*migrate)(const void *, int) = dlsym(RTLD_DEFAULT, "gvm_migrate");
    CHECK_EQ(migrate((void *)big, GVM_HOST), GVM_OK);
    CHECK_EQ(D(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, big), CUDA_SUCCESS);
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(D(cuPointerGetAttribute, &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, big), CUDA_SUCCESS);
    CHECK_EQ(ordinal, 0);
    CHECK_EQ(D(cuPointerGetAttribute, &id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, big), CUDA_SUCCESS);
    CHECK(id1 != id2);
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    size_t range = 0;
    ordinal = -1;
    void *data[3] = {&type, &range, &ordinal};
    CHECK_EQ(D(cuPointerGetAttributes, 3, attrs, data, big + 1), CUDA_SUCCESS);
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(range, 10 * MiB);
    CHECK_EQ(ordinal, 0);
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, big + 4 * MiB, sizeof out), CUDA_SUCCESS);
    CHECK(!memcmp(in, out, sizeof in));
    /* Frees: interior is refused as natively, 0 is a no-op, twice fails. */
    CHECK_EQ(D(cuMemFree_v2, big + 8), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemFree_v2, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, big), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, small), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, big), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(query((void *)big, &info), GVM_ERR_UNKNOWN_POINTER);
    CUdeviceptr z;
    CHECK_EQ(D(cuMemAlloc_v2, &z, 0), CUDA_ERROR_INVALID_VALUE);
}

static void per_thread_stream_variants_work(void)
{
    start();
    CUdeviceptr p = 0;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 3 * MiB), CUDA_SUCCESS);
    cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    RES(cuMemsetD8Async, "cuMemsetD8Async", 7000, pt);
    RES(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 7000, pt);
    RES(cuMemcpyAsync, "cuMemcpyAsync", 7000, pt);
    CHECK(!strcmp(symbol_of((void *)cuMemsetD8Async_p), "cuMemsetD8Async_ptsz"));
    CHECK_EQ(cuMemsetD8Async_p(p, 0x5a, 3 * MiB, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    unsigned char b[16];
    CHECK_EQ(cuMemcpyAsync_p(p + MiB, p + 2 * MiB, 16, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoHAsync_v2_p(b, p + MiB, 16, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(b[15], 0x5a);
    CUDA_MEMCPY2D m = {0};
    unsigned char host[64 * 4];
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = p;
    m.srcPitch = 512;
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = host;
    m.dstPitch = 64;
    m.WidthInBytes = 64;
    m.Height = 4;
    CHECK_EQ(((__typeof__(cuMemcpy2D_v2) *)resolve("cuMemcpy2D", 7000, pt))(&m), CUDA_SUCCESS);
    CHECK_EQ(host[255], 0x5a);
}

/* A stream-ordered allocation from a pool the program made current is
 * the driver's (the pool may be exportable, or on host). */
static void foreign_pointers_pass_through(void)
{
    start();
    CUdeviceptr p = 0;
    CUmemoryPool def;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceSetMemPool, 0, (CUmemoryPool)0x77), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &p, 4 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceSetMemPool, 0, def), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    CHECK_EQ(query((void *)p, &info), GVM_ERR_UNKNOWN_POINTER);
    CHECK_EQ(D(cuMemsetD8_v2, p, 1, 4 * MiB), CUDA_SUCCESS);
    CUdeviceptr base;
    size_t size;
    CHECK_EQ(D(cuMemGetAddressRange_v2, &base, &size, p + 10), CUDA_SUCCESS);
    CHECK_EQ(base, p);
    CHECK_EQ(size, 4 * MiB);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, 0xdead0000), CUDA_ERROR_INVALID_VALUE);
}

/* cudaMallocAsync and its kin from the device's default pool are served
 * by gvmshim on any stream of the current context, the per-thread one
 * too; freed in stream order and allocated again without waiting for the
 * device: memory freed on the same stream is reused at once (no new
 * physical memory), as the driver's pool does; on another stream, fresh
 * memory until a device-wide wait settles it. A stream of another
 * device's context, or a zero size, gets the driver's own answer. */
static void stream_ordered_allocations_are_served(void)
{
    start();
    unsigned long (*calls_of)(const char *) = sim_fn("simcuda_calls_of");
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0, c = 0, t = 0;
    CHECK_EQ(D(cuMemAllocAsync, &a, 8 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ(query((void *)a, &info), GVM_OK);
    CHECK_EQ(info.size, 8 * MiB);
    CHECK_EQ(D(cuMemAllocAsync, &b, 1000, NULL), CUDA_SUCCESS);
    CHECK_EQ(query((void *)b, &info), GVM_OK);
    RES(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    RES(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CHECK_EQ(cuMemAllocAsync_ptsz_p(&t, 3 * MiB, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(query((void *)t, &info), GVM_OK);
    CHECK_EQ(D(cuMemsetD8Async, a, 0x3c, 8 * MiB, s), CUDA_SUCCESS);
    unsigned char x = 0;
    CHECK_EQ(D(cuMemcpyDtoHAsync_v2, &x, a + 5 * MiB, 1, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    CHECK_EQ(x, 0x3c);
    unsigned long waits = calls_of("cuCtxSynchronize") + calls_of("cuStreamSynchronize");
    CUstream s2;
    CHECK_EQ(D(cuStreamCreate, &s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, a, s), CUDA_SUCCESS);
    CHECK_EQ(query((void *)a, &info), GVM_ERR_UNKNOWN_POINTER);
    unsigned long creates = calls_of("cuMemCreate");
    CHECK_EQ(D(cuMemAllocAsync, &c, 8 * MiB, s2), CUDA_SUCCESS);
    CHECK(c != a);   /* a has not settled: fresh memory rather than a wait */
    CHECK(calls_of("cuMemCreate") > creates);
    creates = calls_of("cuMemCreate");
    CUdeviceptr again = 0;
    CHECK_EQ(D(cuMemAllocAsync, &again, 8 * MiB, s), CUDA_SUCCESS);
    CHECK_EQ(again, a);   /* freed on s, allocated on s: reused at once */
    CHECK_EQ(D(cuMemFreeAsync, c, s2), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, again, s), CUDA_SUCCESS);
    CUdeviceptr small_before = b;
    CHECK_EQ(D(cuMemFreeAsync, b, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &b, 1000, NULL), CUDA_SUCCESS);
    CHECK_EQ(b, small_before);   /* a small one too */
    CHECK_EQ(calls_of("cuMemCreate"), creates);
    CHECK_EQ(cuMemFreeAsync_ptsz_p(t, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(calls_of("cuCtxSynchronize") + calls_of("cuStreamSynchronize"), waits);
    CHECK_EQ(D(cuMemFreeAsync, b, NULL), CUDA_SUCCESS);
    /* The driver cannot name the stream at the free: served all the same,
     * but not taken back on that stream before it settles. */
    void (*fail)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
    CHECK_EQ(D(cuMemAllocAsync, &a, 6 * MiB, s), CUDA_SUCCESS);
    fail("cuStreamGetId", 1, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemFreeAsync, a, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &c, 6 * MiB, s), CUDA_SUCCESS);
    CHECK(c != a);
    CHECK_EQ(D(cuMemFreeAsync, c, s), CUDA_SUCCESS);
    CHECK_EQ(calls_of("cuCtxSynchronize") + calls_of("cuStreamSynchronize"), waits);
    /* Zero bytes: whatever the driver says, nothing of gvmshim's. */
    CUdeviceptr z = 0;
    if (D(cuMemAllocAsync, &z, 0, s) == CUDA_SUCCESS) CHECK_EQ(query((void *)z, &info), GVM_ERR_UNKNOWN_POINTER);
    /* Another device's stream: its own pool's memory, the driver's. */
    CUcontext ctx1, popped;
    CUstream s1;
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx1, 1), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxPushCurrent_v2, ctx1), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamCreate, &s1, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxPopCurrent_v2, &popped), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &z, 4 * MiB, s1), CUDA_SUCCESS);
    CHECK_EQ(query((void *)z, &info), GVM_ERR_UNKNOWN_POINTER);
    CHECK_EQ(D(cuMemFreeAsync, z, s1), CUDA_SUCCESS);
}

static int run_self(const char *mode, const char *env1, const char *env2, char *out, size_t outlen);

/* cuMemAllocFromPoolAsync naming the device's default pool is served as
 * cuMemAllocAsync is (cuda.core's default resource names it); a pool of
 * the program's own is the driver's. Access to the default pool granted
 * to another device grants it gvmshim's allocations of the owner, as
 * enabling peer access does. */
static void default_pool_allocations_and_access_are_served(void)
{
    start();
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    int (*access_mask)(CUdeviceptr) = sim_fn("simcuda_access_mask");
    gvm_info info;
    CUmemoryPool def;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def, 0), CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0, c = 0;
    CHECK_EQ(D(cuMemAllocFromPoolAsync, &a, 4 * MiB, def, NULL), CUDA_SUCCESS);
    CHECK_EQ(query((void *)a, &info), GVM_OK);
    RES(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CHECK(!strcmp(symbol_of((void *)cuMemAllocFromPoolAsync_ptsz_p), "cuMemAllocFromPoolAsync_ptsz"));
    CHECK_EQ(cuMemAllocFromPoolAsync_ptsz_p(&b, 1000, def, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    CHECK_EQ(query((void *)b, &info), GVM_OK);
    CHECK_EQ(D(cuMemAllocFromPoolAsync, &c, 4 * MiB, (CUmemoryPool)0x77, NULL), CUDA_SUCCESS);
    CHECK_EQ(query((void *)c, &info), GVM_ERR_UNKNOWN_POINTER);
    CHECK_EQ(D(cuMemFreeAsync, c, NULL), CUDA_SUCCESS);
    CHECK_EQ(access_mask(a) & 2, 0);
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(D(cuMemPoolSetAccess, def, &rw, 1), CUDA_SUCCESS);
    CHECK(access_mask(a) & 2);
    CHECK(access_mask(b) & 2);
    /* A refused call grants nothing. */
    CUmemoryPool def1;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def1, 1), CUDA_SUCCESS);
    CUmemAccessDesc bad = {.location = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(D(cuMemPoolSetAccess, def1, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, b, NULL), CUDA_SUCCESS);
    CHECK_EQ(run_self("pool-access-first", NULL, NULL, NULL, 0), 0);
}

/* What the default pool reports of its use counts the stream-ordered
 * memory gvmshim serves for it (PyTorch's cudaMallocAsync backend and
 * CuPy's async pool read these): live bytes now (each at its requested
 * size, as the driver's pool counts them: core/pooluse.h), the
 * high-water mark until it is reset to 0, and frees by either call. */
static void default_pool_use_counts_what_gvmshim_serves(void)
{
    start();
    CUmemoryPool def, def1;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def1, 1), CUDA_SUCCESS);
    cuuint64_t used = 0, reserved = 0, high = 0, zero = 0, other = 0;
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
    cuuint64_t base = used;
    CUdeviceptr a = 0, b = 0, c = 0;
    CHECK_EQ(D(cuMemAllocAsync, &a, 4 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &b, 1000, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &c, 2 * MiB), CUDA_SUCCESS);   /* not stream-ordered: not the pool's */
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
    CHECK_EQ(used, base + 4 * MiB + 1000);
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
    CHECK(reserved >= used);
    CHECK_EQ(D(cuMemPoolGetAttribute, def1, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &other), CUDA_SUCCESS);
    CHECK_EQ(other, 0);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, b), CUDA_SUCCESS);   /* a plain free of stream-ordered memory */
    CHECK_EQ(D(cuMemFree_v2, c), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
    CHECK_EQ(used, base);
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), CUDA_SUCCESS);
    CHECK(high >= base + 4 * MiB + 1000);
    CHECK_EQ(D(cuMemPoolSetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolGetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), CUDA_SUCCESS);
    CHECK_EQ(high, base);
    cuuint64_t bad = 5;   /* the driver's answer stands */
    CHECK_EQ(D(cuMemPoolSetAttribute, def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &bad), CUDA_ERROR_INVALID_VALUE);
}

/* A trim of the default pool to nothing (torch.cuda.empty_cache() with the
 * cudaMallocAsync backend, CuPy's free_all_blocks()) gives back what
 * gvmshim keeps of the device's freed memory, as the pool gives its own
 * back natively; a trim that keeps bytes and another device's pool leave
 * it, and the driver's answer stands. */
static void pool_trim_gives_back_freed_memory(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    CUmemoryPool def0, def1;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def0, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def1, 1), CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0;
    CHECK_EQ(D(cuMemAllocAsync, &a, 24 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &b, 12 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, b), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamSynchronize, NULL), CUDA_SUCCESS);
    size_t cached = phys_bytes(0);   /* the suite keeps freed memory (GVM_CACHE_IDLE=0) */
    CHECK(cached >= 36 * MiB);
    CHECK_EQ(D(cuMemPoolTrimTo, def0, MiB), CUDA_SUCCESS);
    CHECK_EQ(phys_bytes(0), cached);
    CHECK_EQ(D(cuMemPoolTrimTo, def1, 0), CUDA_SUCCESS);
    CHECK_EQ(phys_bytes(0), cached);
    CHECK_EQ(D(cuMemPoolTrimTo, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(phys_bytes(0), cached);
    /* Not while a capture is open: giving back may wait for the device. */
    CUstream s;
    CUgraph g = NULL;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolTrimTo, def0, 0), CUDA_SUCCESS);
    CHECK_EQ(phys_bytes(0), cached);
    CHECK_EQ(D(cuStreamEndCapture, s, &g), CUDA_SUCCESS);
    if (g) CHECK_EQ(D(cuGraphDestroy, g), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemPoolTrimTo, def0, 0), CUDA_SUCCESS);
    CHECK(phys_bytes(0) + 36 * MiB <= cached);
    /* Served again afterwards, from fresh memory. */
    CHECK_EQ(D(cuMemAllocAsync, &a, 24 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8Async, a, 0x3c, 24 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamSynchronize, NULL), CUDA_SUCCESS);
}

/* Access to the default pool granted before gvmshim served anything (a
 * fresh process: no allocation yet) holds for what it serves later. */
static int pool_access_first_workload(void)
{
    start();
    int (*access_mask)(CUdeviceptr) = sim_fn("simcuda_access_mask");
    CUmemoryPool def;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def, 0), CUDA_SUCCESS);
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(D(cuMemPoolSetAccess, def, &rw, 1), CUDA_SUCCESS);
    CUdeviceptr a = 0;
    CHECK_EQ(D(cuMemAllocAsync, &a, 4 * MiB, NULL), CUDA_SUCCESS);
    CHECK(access_mask(a) & 2);
    return 0;
}

static void failed_driver_call_returns_its_error_and_leaks_nothing(void)
{
    start();
    void (*fail)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
    long (*handles)(void) = sim_fn("simcuda_live_handles");
    long (*reservations)(void) = sim_fn("simcuda_live_reservations");
    CUdeviceptr warm;
    CHECK_EQ(D(cuMemAlloc_v2, &warm, 4096), CUDA_SUCCESS);   /* starts the core */
    long h = handles(), r = reservations();
    const char *calls[] = {"cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess"};
    for (int i = 0; i < 4; i++) {
        CUdeviceptr p = 0;
        /* Not OOM: an OOM is answered by trimming caches and retrying. The
         * driver's answer to gvmshim's call is no answer a native cuMemAlloc
         * gives for a valid request: the program sees out of memory. */
        fail(calls[i], 1, CUDA_ERROR_INVALID_VALUE);
        p = 0xdead0000;
        CHECK_EQ(D(cuMemAlloc_v2, &p, 100 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_EQ(p, 0);   /* as the driver leaves it */
        CHECK_EQ(handles(), h);
        CHECK_EQ(reservations(), r);
    }
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 100 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
    /* Really out of memory: the native error, after the caches were given back. */
    CHECK_EQ(D(cuMemAlloc_v2, &p, 600 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(p, 0);
    CHECK_EQ(handles(), h);
}

/* A program linked with libcuda may call any exported hook first, before
 * anything loaded gvmshim's driver table. */
static void linked_program_first_call_is_not_an_allocation(void)
{
    __typeof__(cuMemGetInfo_v2) *info = (__typeof__(cuMemGetInfo_v2) *)dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
    CHECK(!strcmp(object_of((void *)info), "shim"));
    size_t f = 1, t = 1;
    CHECK_EQ(info(&f, &t), CUDA_ERROR_NOT_INITIALIZED);   /* the driver's own answer */
    __typeof__(cuMemsetD8_v2) *set = (__typeof__(cuMemsetD8_v2) *)dlsym(RTLD_DEFAULT, "cuMemsetD8_v2");
    CHECK_EQ(set(0x1000, 0, 16), CUDA_ERROR_NOT_INITIALIZED);
}

static void no_context_is_the_native_error(void)
{
    open_driver();
    RES(cuInit, "cuInit", 2000, 0);
    CHECK_EQ(cuInit_p(0), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 4096), CUDA_ERROR_INVALID_CONTEXT);
}

static void cached_memory_counts_as_free(void)
{
    start();
    size_t f0, t0, f1, t1;
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 4096), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemGetInfo_v2, &f0, &t0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &p, 64 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemGetInfo_v2, &f1, &t1), CUDA_SUCCESS);
    CHECK_EQ(t1, t0);
    CHECK_EQ(f1, f0);
}

/* Allocates `chunk` bytes at a time until the device refuses; returns how
 * many it got (their pointers in out, at most cap). */
static size_t fill(size_t chunk, CUdeviceptr *out, size_t cap, bool ordered)
{
    size_t n = 0;
    while (n < cap) {
        CUdeviceptr p = 0xdead0000;
        CUresult rc = ordered ? D(cuMemAllocAsync, &p, chunk, NULL) : D(cuMemAlloc_v2, &p, chunk);
        if (rc != CUDA_SUCCESS) {
            CHECK_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY);
            CHECK_EQ(p, 0);
            break;
        }
        out[n++] = p;
    }
    return n;
}

/* A program that fills the device (a job sizing itself to the GPU, a
 * test of how much fits) gets as much under the shim as the device has
 * free, in large pieces and then in small ones, and gets it again after
 * freeing it all, in stream order too: nothing gvmshim keeps for reuse
 * stands in the way. */
static void filling_the_device_gets_what_it_has_free(void)
{
    start();
    enum { CAP = 4096 };
    static CUdeviceptr big[CAP], small[CAP];
    CUdeviceptr warm;
    CHECK_EQ(D(cuMemAlloc_v2, &warm, 4096), CUDA_SUCCESS);   /* the core's own start-up */
    size_t free0, total;
    CHECK_EQ(D(cuMemGetInfo_v2, &free0, &total), CUDA_SUCCESS);
    /* Plain, plain again, then stream-ordered (cudaMallocAsync). */
    for (int round = 0; round < 3; round++) {
        bool ordered = round == 2;
        size_t nb = fill(32 * MiB, big, CAP, ordered);
        size_t ns = fill(2 * MiB, small, CAP, ordered);
        /* The rest is less than one 2 MiB piece (4096 B in use, rounded). */
        CHECK_EQ(nb * 32 * MiB + ns * 2 * MiB, free0 / (2 * MiB) * (2 * MiB));
        size_t f, t;
        CHECK_EQ(D(cuMemGetInfo_v2, &f, &t), CUDA_SUCCESS);
        CHECK(f < 2 * MiB);
        for (size_t i = 0; i < nb; i++)
            CHECK_EQ(ordered ? D(cuMemFreeAsync, big[i], NULL) : D(cuMemFree_v2, big[i]), CUDA_SUCCESS);
        for (size_t i = 0; i < ns; i++)
            CHECK_EQ(ordered ? D(cuMemFreeAsync, small[i], NULL) : D(cuMemFree_v2, small[i]), CUDA_SUCCESS);
        CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemGetInfo_v2, &f, &t), CUDA_SUCCESS);
        CHECK_EQ(f, free0);
    }
    CHECK_EQ(D(cuMemFree_v2, warm), CUDA_SUCCESS);
}

/* A copy issued from another device's context, without peer access: the
 * driver serves it for cudaMalloc memory, but refuses one on VMM memory
 * that device was not granted; gvmshim grants it on the copy. */
static void copies_from_another_devices_context_are_served(void)
{
    start();
    CUdeviceptr p;
    char in[64] = "from device 0", out[64] = {0};
    CHECK_EQ(D(cuMemAlloc_v2, &p, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyHtoD_v2, p + 4 * MiB, in, sizeof in), CUDA_SUCCESS);
    CUcontext ctx1;
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx1, 1), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSetCurrent, ctx1), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, p + 4 * MiB, sizeof out), CUDA_SUCCESS);
    CHECK(!strcmp(out, in));
    gvm_status (*migrate)(const void *, int) = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    CHECK(migrate != NULL);
    CHECK_EQ(migrate((void *)p, GVM_HOST), GVM_OK);   /* and on host */
    memset(out, 0, sizeof out);
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, p + 4 * MiB, sizeof out), CUDA_SUCCESS);
    CHECK(!strcmp(out, in));
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
}

struct copier {
    CUdeviceptr p;
    int id, errors;
};

static void *copy_loop(void *arg)
{
    struct copier *c = arg;
    RES(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    cuCtxSetCurrent_p(ctx0);
    uint32_t buf[2048];
    CUdeviceptr slice = c->p + (size_t)c->id * sizeof buf;
    for (uint32_t round = 0; round < test_scaled(200); round++) {
        for (int i = 0; i < 2048; i++) buf[i] = round ^ (uint32_t)(i * 977 + c->id);
        CHECK_EQ(D(cuMemcpyHtoD_v2, slice, buf, sizeof buf), CUDA_SUCCESS);
        memset(buf, 0, sizeof buf);
        CHECK_EQ(D(cuMemcpyDtoH_v2, buf, slice, sizeof buf), CUDA_SUCCESS);
        for (int i = 0; i < 2048; i++)
            if (buf[i] != (round ^ (uint32_t)(i * 977 + c->id))) c->errors++;
    }
    return NULL;
}

static void copies_during_migrations_lose_nothing(void)
{
    start();
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 200 * MiB), CUDA_SUCCESS);
    gvm_status (*migrate)(const void *, int) = dlsym(RTLD_DEFAULT, "gvm_migrate");
    pthread_t t[4];
    struct copier c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (struct copier){.p = p, .id = i};
        pthread_create(&t[i], NULL, copy_loop, &c[i]);
    }
    int where[] = {1, GVM_HOST, 0};
    for (int i = 0; i < test_scaled(24); i++) CHECK_EQ(migrate((void *)p, where[i % 3]), GVM_OK);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(c[i].errors, 0);
    }
}

/* The core starts at the first allocation: several threads making their
 * first one at once start it once, and each sees it serving (under TSan:
 * the state is published without a data race). */
static pthread_barrier_t first_barrier;

static void *first_alloc(void *arg)
{
    (void)arg;
    RES(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    CHECK_EQ(cuCtxSetCurrent_p(ctx0), CUDA_SUCCESS);
    pthread_barrier_wait(&first_barrier);
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 4096), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    CHECK_EQ(query((void *)p, &info), GVM_OK);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
    return NULL;
}

static void first_allocations_from_many_threads(void)
{
    start();
    pthread_t t[4];
    pthread_barrier_init(&first_barrier, NULL, 4);
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, first_alloc, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}

/* ---- whole-process behaviour: this program re-executed with an env ---- */

/* envs: NULL-terminated VAR=value settings. */
static int run_self_envs(const char *mode, const char *const *envs, char *out, size_t outlen)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (out) dup2(fds[1], 2);
        close(fds[0]);
        for (; *envs; envs++) putenv((char *)*envs);
        execl("/proc/self/exe", "test-preload", "--mode", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    return test_child_output(pid, fds[0], out, outlen);
}

static int run_self(const char *mode, const char *env1, const char *env2, char *out, size_t outlen)
{
    const char *envs[3] = {env1, env1 ? env2 : NULL, NULL};
    return run_self_envs(mode, envs, out, outlen);
}

static int workload(void)
{
    start();
    CUdeviceptr p[3];
    CHECK_EQ(D(cuMemAlloc_v2, &p[0], 1000), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &p[1], 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &p[2], 30 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p[2]), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, p[1], 0, 8 * MiB), CUDA_SUCCESS);
    return 0;
}

static int disabled_workload(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    void *g = dlsym(lib, "cuGetProcAddress_v2");
    CHECK(!strcmp(object_of(g), "sim"));
    gpa = (gpa2_fn)g;
    CHECK(!strcmp(object_of(resolve("cuMemAlloc", 3020, 0)), "sim"));
    return 0;
}

/* With spilling on, launches are interposed and their arguments scanned:
 * an allocation a kernel used is not the one evicted. */
static int tracking_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    size_t sizes[2] = {8, 4};
    CUfunction k = (CUfunction)make(NULL, 2, sizes);
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CHECK(!strcmp(object_of((void *)cuLaunchKernel_p), "shim"));
    CUdeviceptr a, b, c;
    CHECK_EQ(D(cuMemAlloc_v2, &a, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &b, 24 * MiB), CUDA_SUCCESS);
    CUdeviceptr arg = a + 4096;
    int n = 1;
    void *params[] = {&arg, &n};
    CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &c, 24 * MiB), CUDA_SUCCESS);   /* over the 64M limit */
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info ia, ib;
    CHECK_EQ(query((void *)a, &ia), GVM_OK);
    CHECK_EQ(query((void *)b, &ib), GVM_OK);
    CHECK_EQ(ia.location, 0);
    CHECK_EQ(ib.location, GVM_HOST);
    return 0;
}

/* One 512-byte struct argument (the way PyTorch passes tensor lists):
 * every allocation a word of it points into is marked used, whether it
 * appears once or many times, early or as the last word, at its base or
 * inside, between words that are not pointers. So the allocations the
 * launch did not reach are the ones evicted. */
#define STRUCT_WORDS 64
#define REACHED 6
#define UNREACHED 6

static int struct_scan_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    size_t size = STRUCT_WORDS * sizeof(uint64_t);
    CUfunction k = (CUfunction)make(NULL, 1, &size);
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CUdeviceptr used[REACHED], idle[UNREACHED], more[REACHED];
    for (int i = 0; i < REACHED; i++) CHECK_EQ(D(cuMemAlloc_v2, &used[i], 4 * MiB), CUDA_SUCCESS);
    for (int i = 0; i < UNREACHED; i++) CHECK_EQ(D(cuMemAlloc_v2, &idle[i], 4 * MiB), CUDA_SUCCESS);
    uint64_t words[STRUCT_WORDS];
    for (int i = 0; i < STRUCT_WORDS; i++)
        words[i] = i % 3 == 2 ? (uint64_t)i : used[i % (REACHED - 1)] + (uint64_t)(i % 5) * 4096;
    words[STRUCT_WORDS - 1] = used[REACHED - 1] + 3 * MiB;   /* only here, inside, last */
    words[10] = (uint64_t)(uintptr_t)&words[0];              /* a host pointer */
    void *params[] = {words};
    CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    /* 48 MiB held: 24 more go over the 64M limit, and the oldest leave. */
    for (int i = 0; i < REACHED; i++) CHECK_EQ(D(cuMemAlloc_v2, &more[i], 4 * MiB), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    for (int i = 0; i < REACHED; i++) {
        CHECK_EQ(query((void *)used[i], &info), GVM_OK);
        CHECK_EQ(info.location, 0);
    }
    CHECK_EQ(query((void *)idle[0], &info), GVM_OK);
    CHECK_EQ(info.location, GVM_HOST);
    return 0;
}

/* GVM_SPILL_HOST_MAP=lazy through the hooks: spilled memory is unmapped
 * (a "kernel" reading it would fault), and whatever reaches it finds it
 * mapped: a launch naming it brings it back, a copy maps it in place, a
 * launch whose arguments cannot be scanned maps every lazy spill first. */
static unsigned first_word;

static void read_first(void **params) { first_word = *(const unsigned *)(uintptr_t)*(CUdeviceptr *)params[0]; }

/* A kernel adding one to every word of an 8 MiB buffer. */
static void add_one(void **params)
{
    unsigned *w = (unsigned *)(uintptr_t)*(CUdeviceptr *)params[0];
    for (size_t i = 0; i < 8 * MiB / sizeof *w; i++) w[i] += 1;
}

static unsigned word_at(CUdeviceptr p)
{
    unsigned w = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &w, p, sizeof w), CUDA_SUCCESS);
    return w;
}

/* A kernel reaching memory only through an address stored in device
 * memory (its argument points at the address): counts the reach if that
 * memory is not mapped (a GPU's would fault), else adds one to its first
 * word. */
static int (*follow_location_of)(CUdeviceptr);
static int follow_unmapped;

static void follow_stored(void **params)
{
    CUdeviceptr target = *(const CUdeviceptr *)(uintptr_t)*(CUdeviceptr *)params[0];
    if (follow_location_of(target) == SIMCUDA_LOC_UNMAPPED) {
        follow_unmapped++;
        return;
    }
    *(unsigned *)(uintptr_t)target += 1;
}

/* A whole-process pause while the program runs on: the paused copies wait
 * unmapped (pause_host_map=lazy; PAUSE_MAPPED_AT_ONCE=1: mapped by the
 * pause, by default or with launches not hooked), and a kernel reaching
 * one through an address stored in device memory (spill on too, launches
 * scanned), a kernel, a copy and a set reaching them work on them in
 * host memory; the resume brings back what they wrote, and a second cycle
 * that nothing touches brings the contents back as they were. */
static int pause_running_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    int (*location_of)(CUdeviceptr) = (int (*)(CUdeviceptr))sim_fn("simcuda_location_of");
    gvm_status (*pause)(const char *, int) = dlsym(RTLD_DEFAULT, "gvm_pause");
    gvm_status (*resume)(const char *) = dlsym(RTLD_DEFAULT, "gvm_resume");
    CHECK(pause && resume);
    const char *at_once = getenv("PAUSE_MAPPED_AT_ONCE");
    int paused_at = at_once && !strcmp(at_once, "1") ? SIMCUDA_LOC_HOST : SIMCUDA_LOC_UNMAPPED;
    size_t size = 8;
    CUfunction add = (CUfunction)make(add_one, 1, &size);
    CUfunction follow = (CUfunction)make(follow_stored, 1, &size);
    follow_location_of = location_of;
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CUdeviceptr p[3], stored;
    const unsigned pattern[3] = {0x10101010u, 0x20202020u, 0x30303030u};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 8 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD32_v2, p[i], pattern[i], 2 * MiB), CUDA_SUCCESS);
    }
    CHECK_EQ(D(cuMemAlloc_v2, &stored, 4096), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyHtoD_v2, stored, &p[1], sizeof p[1]), CUDA_SUCCESS);   /* p[1]'s address, in device memory */
    CHECK_EQ(pause(NULL, GVM_PAUSE_KEEP), GVM_OK);
    for (int i = 0; i < 3; i++) CHECK_EQ(location_of(p[i]), paused_at);
    void *follow_params[] = {&stored};
    CHECK_EQ(cuLaunchKernel_p(follow, 1, 1, 1, 1, 1, 1, 0, NULL, follow_params, NULL), CUDA_SUCCESS);
    CHECK_EQ(follow_unmapped, 0);
    void *params[] = {&p[0]};
    CHECK_EQ(cuLaunchKernel_p(add, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(location_of(p[0]), SIMCUDA_LOC_HOST);
    CHECK_EQ(word_at(p[1] + 8 * MiB - 4), pattern[1]);
    CHECK_EQ(D(cuMemsetD32_v2, p[2], 0x77777777u, 2 * MiB), CUDA_SUCCESS);
    CHECK_EQ(resume(NULL), GVM_OK);
    for (int i = 0; i < 3; i++) CHECK_EQ(location_of(p[i]), 0);
    const unsigned now[3] = {pattern[0] + 1, pattern[1], 0x77777777u};
    CHECK_EQ(word_at(p[1]), pattern[1] + 1);   /* the stored address's kernel wrote it */
    for (int i = 0; i < 3; i++) CHECK(word_at(p[i] + 8 * MiB - 4) == now[i]);
    CHECK(word_at(p[0]) == now[0] && word_at(p[2]) == now[2]);
    CHECK_EQ(pause(NULL, GVM_PAUSE_KEEP), GVM_OK);
    CHECK_EQ(resume(NULL), GVM_OK);
    for (int i = 0; i < 3; i++) CHECK(word_at(p[i] + 4 * MiB) == now[i] && location_of(p[i]) == 0);
    for (int i = 0; i < 3; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, stored), CUDA_SUCCESS);
    return 0;
}

/* A training loop's launches through whole-process pauses and resumes
 * made by another thread (gvmctl's control worker): launches not scanned
 * (spill off) that waited at the move gate while a pause ran must find
 * the copies it left unmapped mapped before they go (a kernel reaching
 * one would fault). Each launch adds one to a word of each page of a buffer;
 * the counts add up at the end. */
#define RACE_BUFS 4
#define RACE_BYTES (16 * MiB)   /* copies long enough for launches to queue at the gate */
#define RACE_WORDS (RACE_BYTES / sizeof(unsigned))

struct race {
    CUdeviceptr p[RACE_BUFS];
    CUfunction add;
    int launches;
    int done;   /* atomic */
};

/* Simulated kernels run inside the launch call: one reaching memory not
 * mapped counts it (a GPU's would fault) instead of touching it. */
static int (*race_location_of)(CUdeviceptr);
static int race_unmapped;   /* atomic */

static void add_one_page(void **params)
{
    CUdeviceptr p = *(CUdeviceptr *)params[0];
    if (race_location_of(p) == SIMCUDA_LOC_UNMAPPED) {
        __atomic_add_fetch(&race_unmapped, 1, __ATOMIC_RELAXED);
        return;
    }
    unsigned *w = (unsigned *)(uintptr_t)p;
    for (size_t i = 0; i < RACE_WORDS; i += 4096 / sizeof *w) w[i] += 1;
}

static void *race_launcher(void *arg)
{
    struct race *r = arg;
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    for (int i = 0; i < r->launches; i++) {
        void *params[] = {&r->p[i % RACE_BUFS]};
        CHECK_EQ(cuLaunchKernel_p(r->add, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    }
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int pause_racing_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    gvm_status (*pause)(const char *, int) = dlsym(RTLD_DEFAULT, "gvm_pause");
    gvm_status (*resume)(const char *) = dlsym(RTLD_DEFAULT, "gvm_resume");
    CHECK(pause && resume);
    size_t size = 8;
    race_location_of = (int (*)(CUdeviceptr))sim_fn("simcuda_location_of");
    struct race r = {.add = (CUfunction)make(add_one_page, 1, &size), .launches = (int)test_scaled(100)};
    for (int i = 0; i < RACE_BUFS; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &r.p[i], RACE_BYTES), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD32_v2, r.p[i], 0, RACE_WORDS), CUDA_SUCCESS);
    }
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, race_launcher, &r), 0);
    int cycles = 0;
    while (!__atomic_load_n(&r.done, __ATOMIC_ACQUIRE) || cycles < 4) {
        gvm_status st = pause(NULL, GVM_PAUSE_KEEP);
        CHECK(st == GVM_OK || st == GVM_ERR_BUSY);
        CHECK_EQ(resume(NULL), GVM_OK);
        cycles++;
    }
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(__atomic_load_n(&race_unmapped, __ATOMIC_RELAXED), 0);
    for (int i = 0; i < RACE_BUFS; i++) {
        unsigned want = (unsigned)(r.launches / RACE_BUFS + (i < r.launches % RACE_BUFS));
        CHECK_EQ(word_at(r.p[i]), want);
        CHECK_EQ(word_at(r.p[i] + RACE_BYTES - 4096), want);
        CHECK_EQ(D(cuMemFree_v2, r.p[i]), CUDA_SUCCESS);
    }
    return 0;
}

static int lazy_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    int (*location_of)(CUdeviceptr) = (int (*)(CUdeviceptr))sim_fn("simcuda_location_of");
    size_t size = 8;
    CUfunction k = (CUfunction)make(read_first, 1, &size);
    CUfunction blind = (CUfunction)make(read_first, 0, NULL);   /* no layout: its reach is unknown */
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CUdeviceptr p[4];
    const unsigned pattern[4] = {0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u};
    void *params[] = {&p[0]};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 24 * MiB), CUDA_SUCCESS);   /* the third and fourth go over 64M */
        CHECK_EQ(D(cuMemsetD32_v2, p[i], pattern[i], 6 * MiB), CUDA_SUCCESS);
        params[0] = &p[i];
        CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
        CHECK_EQ(first_word, pattern[i]);
    }
    CHECK_EQ(location_of(p[0]), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(location_of(p[1]), SIMCUDA_LOC_UNMAPPED);
    /* A kernel naming it: it comes back (another leaves, unmapped too). */
    params[0] = &p[0];
    CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(first_word, pattern[0]);
    CHECK_EQ(location_of(p[0]), 0);
    /* A copy from it: mapped in place, on host. */
    unsigned w = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &w, p[1] + 24 * MiB - 4, 4), CUDA_SUCCESS);
    CHECK_EQ(w, pattern[1]);
    CHECK_EQ(location_of(p[1]), SIMCUDA_LOC_HOST);
    int unmapped = 0;
    for (int i = 0; i < 4; i++) unmapped += location_of(p[i]) == SIMCUDA_LOC_UNMAPPED;
    CHECK(unmapped >= 1);
    /* A launch whose arguments cannot be scanned: every lazy spill mapped. */
    params[0] = &p[0];
    CHECK_EQ(cuLaunchKernel_p(blind, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++) {
        CHECK(location_of(p[i]) != SIMCUDA_LOC_UNMAPPED);
        CHECK_EQ(*(const unsigned *)(uintptr_t)(p[i] + 12 * MiB), pattern[i]);
    }
    /* Per-region completion (core/usemark.h): the launches record their
     * uses; once a wait for the devices has covered the copy and the blind
     * launch above, the swaps of a sweep wait for those events alone. */
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    unsigned long whole = 0, records = 0;
    for (int sweep = 0; sweep < 3; sweep++) {
        if (sweep == 2) {
            whole = calls_of("cuCtxSynchronize");
            records = calls_of("cuEventRecord");
        }
        for (int i = 0; i < 4; i++) {
            params[0] = &p[i];
            CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
            CHECK_EQ(first_word, pattern[i]);
            CHECK_EQ(location_of(p[i]), 0);
        }
    }
    CHECK(calls_of("cuEventRecord") >= records + 4);
    CHECK_EQ(calls_of("cuCtxSynchronize"), whole);
    for (int i = 0; i < 4; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
    return 0;
}

/* A launch whose arguments were not all scanned (here a struct past the
 * 4 KiB scanned) may reach any allocation: every lazy spill is mapped
 * for it, and none of what it may reach is sent away for it. Its first
 * word names a lazily spilled allocation (it comes back, or stays mapped
 * on host), the word past 4 KiB a resident one, the one the swap-in
 * would pick as its victim (the most recently used): unmapped under the
 * kernel, it would fault. */
#define PARTIAL_WORDS (4096 / 8 + 1)

static unsigned partial_seen[2];

static void read_partial(void **params)
{
    const uint64_t *w = params[0];
    partial_seen[0] = *(const unsigned *)(uintptr_t)w[0];
    partial_seen[1] = *(const unsigned *)(uintptr_t)w[PARTIAL_WORDS - 1];
}

static int partial_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    int (*location_of)(CUdeviceptr) = (int (*)(CUdeviceptr))sim_fn("simcuda_location_of");
    size_t size = PARTIAL_WORDS * sizeof(uint64_t);
    CUfunction k = (CUfunction)make(read_partial, 1, &size);
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CUdeviceptr s, v, x;
    CHECK_EQ(D(cuMemAlloc_v2, &s, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD32_v2, s, 0x5u, 6 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &v, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &x, 24 * MiB), CUDA_SUCCESS);   /* over 64M: s leaves, unmapped */
    CHECK_EQ(location_of(s), SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(D(cuMemsetD32_v2, v, 0x7u, 6 * MiB), CUDA_SUCCESS);   /* the most recent */
    static uint64_t words[PARTIAL_WORDS];
    words[0] = s;
    words[PARTIAL_WORDS - 1] = v;
    void *params[] = {words};
    CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(partial_seen[0], 0x5u);
    CHECK_EQ(partial_seen[1], 0x7u);
    CHECK(location_of(v) != SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, v), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, x), CUDA_SUCCESS);
    return 0;
}

/* ---- moves beside other threads' kernels ---- */

/* Two threads, each on its own stream, keep launching kernels on their
 * own memory while over the limit, so every launch swaps in what the
 * other thread's launch sent out (GVM_SPILL=host, mapped: the victims
 * leave before the swap). The sim counts kernels in flight
 * (SIMCUDA_KERNELS_IN_FLIGHT): a move that unmaps memory a kernel queued
 * on another stream still reads would kill that kernel on a GPU. The
 * waits must come after the move holds its regions (gpu-threads, spill,
 * two H100s, 2026-11-27: an illegal address when it waited before). */
static unsigned swap_bad;

static void check_words(void **params)
{
    unsigned n = *(unsigned *)params[2];
    for (int i = 0; i < 2; i++) {
        CUdeviceptr p = *(CUdeviceptr *)params[i];
        if (p && *(const unsigned *)(uintptr_t)(p + 4 * MiB) != n) __atomic_add_fetch(&swap_bad, 1, __ATOMIC_RELAXED);
    }
}

struct swap_side {
    CUfunction k;
    CUdeviceptr a, b;   /* b may be 0 */
    unsigned word;
    int launches;
};

static void *swap_side_run(void *arg)
{
    struct swap_side *w = arg;
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    void *params[] = {&w->a, &w->b, &w->word};
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    /* Until the threads have taken turns often enough (how many launches
     * that takes depends on the machine and the sanitizer). */
    for (int i = 0; i < test_scaled(400) || (calls_of("cuMemUnmap") < 60 && i < 4000); i++) {
        CHECK_EQ(cuLaunchKernel_p(w->k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
        w->launches++;
        if (i % 16 == 15) CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
        /* The sim's lock prefers readers: a launch loop that never pauses
         * would starve the other thread's remaps (writers). */
        usleep(20);
    }
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    return NULL;
}

static int swap_threads_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    unsigned long (*in_flight)(void) = (unsigned long (*)(void))sim_fn("simcuda_unmapped_in_flight");
    size_t sizes[3] = {8, 8, 4};
    CUfunction k = (CUfunction)make(check_words, 3, sizes);
    /* 8 MiB each, 20 MiB allowed: two stay, the third is spilled. */
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 8 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD32_v2, p[i], i == 0 ? 0x5eedu : 0xfaceu, 2 * MiB), CUDA_SUCCESS);
    }
    struct swap_side side[2] = {{k, p[0], 0, 0x5eedu, 0}, {k, p[1], p[2], 0xfaceu, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&t[i], NULL, swap_side_run, &side[i]), 0);
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    unsigned long unmaps = calls_of("cuMemUnmap");
    fprintf(stderr, "launches %d and %d, unmaps %lu, of them under kernels in flight %lu\n", side[0].launches,
            side[1].launches, unmaps, in_flight());
    CHECK(unmaps >= 40);   /* the threads took turns: the race had its chances */
    CHECK_EQ(swap_bad, 0u);
    CHECK_EQ(in_flight(), 0ul);
    for (int i = 0; i < 3; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
    return 0;
}

/* A graph's replay beside another thread's swaps (lazy spills): its
 * reach is unknown, so every lazy spill is mapped for it, and no move may
 * send anything away unmapped between that and the replay. One thread
 * sweeps a kernel over four 8 MiB buffers past a 24 MiB limit, each
 * launch swapping one in and another out; the other replays a graph
 * whose kernel reads all four. A region unmapped under the replay faults
 * (the kernel runs on the CPU here), or the unmap under it aborts
 * (SIMCUDA_KERNELS_IN_FLIGHT=fatal). */
#define GRAPH_BUFS 4

static unsigned graph_bad;

static void read_all(void **params)
{
    for (int i = 0; i < GRAPH_BUFS; i++) {
        CUdeviceptr p = *(CUdeviceptr *)params[i];
        if (*(const unsigned *)(uintptr_t)(p + 4 * MiB) != 0x6a000000u + (unsigned)i)
            __atomic_add_fetch(&graph_bad, 1, __ATOMIC_RELAXED);
    }
}

/* The four buffers of 8 MiB, every word of buffer i 0x6a000000 + i (what
 * read_all and read_one check). */
static void graph_bufs_alloc(CUdeviceptr *p)
{
    for (int i = 0; i < GRAPH_BUFS; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 8 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD32_v2, p[i], 0x6a000000u + (unsigned)i, 2 * MiB), CUDA_SUCCESS);
    }
}

static void graph_bufs_free(CUdeviceptr *p)
{
    for (int i = 0; i < GRAPH_BUFS; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
}

static void read_one(void **params)
{
    CUdeviceptr p = *(CUdeviceptr *)params[0];
    unsigned i = *(unsigned *)params[1];
    if (*(const unsigned *)(uintptr_t)(p + 4 * MiB) != 0x6a000000u + i) __atomic_add_fetch(&graph_bad, 1, __ATOMIC_RELAXED);
}

struct graph_sweep {
    CUfunction k;
    CUdeviceptr *p;
    int stop;   /* atomic */
};

static void *graph_sweeper(void *arg)
{
    struct graph_sweep *w = arg;
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (unsigned i = 0; !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); i++) {
        unsigned b = i % GRAPH_BUFS;
        void *params[] = {&w->p[b], &b};
        CHECK_EQ(cuLaunchKernel_p(w->k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
        usleep(20);   /* the sim's lock prefers readers (see swap_side_run) */
    }
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    return NULL;
}

static int graph_threads_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    unsigned long (*in_flight)(void) = (unsigned long (*)(void))sim_fn("simcuda_unmapped_in_flight");
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    size_t all_sizes[GRAPH_BUFS] = {8, 8, 8, 8}, one_sizes[2] = {8, 4};
    CUfunction all = (CUfunction)make(read_all, GRAPH_BUFS, all_sizes);
    CUfunction one = (CUfunction)make(read_one, 2, one_sizes);
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CUdeviceptr p[GRAPH_BUFS];
    graph_bufs_alloc(p);
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    void *params[] = {&p[0], &p[1], &p[2], &p[3]};
    CHECK_EQ(cuLaunchKernel_p(all, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    CUgraph g = NULL;
    CUgraphExec ge;
    CHECK_EQ(D(cuStreamEndCapture, s, &g), CUDA_SUCCESS);
    CHECK_EQ(D(cuGraphInstantiateWithFlags, &ge, g, 0), CUDA_SUCCESS);
    struct graph_sweep w = {one, p, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, graph_sweeper, &w), 0);
    for (int i = 0; i < test_scaled(300) || (calls_of("cuMemUnmap") < 60 && i < 3000); i++) {
        CHECK_EQ(D(cuGraphLaunch, ge, s), CUDA_SUCCESS);
        if (i % 8 == 7) CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
        usleep(20);
    }
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    fprintf(stderr, "unmaps %lu, of them under work in flight %lu, bad reads %u\n", calls_of("cuMemUnmap"),
            in_flight(), graph_bad);
    CHECK(calls_of("cuMemUnmap") >= 40);
    CHECK_EQ(graph_bad, 0u);
    CHECK_EQ(in_flight(), 0ul);
    CHECK_EQ(D(cuGraphExecDestroy, ge), CUDA_SUCCESS);
    CHECK_EQ(D(cuGraphDestroy, g), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    graph_bufs_free(p);
    return 0;
}

/* Lazy swaps waiting for their regions' last uses (core/usemark.h) while
 * each launch goes another way: the legacy and per-thread default
 * streams, a blocking and a non-blocking stream, cuLaunchKernelEx and a
 * cooperative launch, never synchronized; now and then an event record
 * fails (injected). Four 8 MiB buffers past a 24 MiB limit: every launch
 * swaps one in and another out. No unmap may come under a launch still
 * in flight (SIMCUDA_KERNELS_IN_FLIGHT=fatal), no byte may change. */
static int usemark_streams_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    unsigned long (*in_flight)(void) = (unsigned long (*)(void))sim_fn("simcuda_unmapped_in_flight");
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    void (*fail_call)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
    size_t sizes[2] = {8, 4};
    CUfunction k = (CUfunction)make(read_one, 2, sizes);
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    RES(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0);
    RES(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0);
    CUdeviceptr p[GRAPH_BUFS];
    graph_bufs_alloc(p);
    CUstream blocking, nonblocking;
    CHECK_EQ(D(cuStreamCreate, &blocking, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamCreate, &nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUstream streams[] = {NULL, CU_STREAM_PER_THREAD, blocking, nonblocking, CU_STREAM_LEGACY};
    for (unsigned i = 0; i < 240; i++) {
        unsigned b = (i * 3 + i / 7) % GRAPH_BUFS;
        CUstream s = streams[i % 5];
        void *params[] = {&p[b], &b};
        if (i % 11 == 5) fail_call("cuEventRecord", 1, CUDA_ERROR_UNKNOWN);
        if (i % 3 == 1) {
            CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                                  .blockDimZ = 1, .hStream = s};
            CHECK_EQ(cuLaunchKernelEx_p(&cfg, k, params, NULL), CUDA_SUCCESS);
        } else if (i % 3 == 2) {
            CHECK_EQ(cuLaunchCooperativeKernel_p(k, 1, 1, 1, 1, 1, 1, 0, s, params), CUDA_SUCCESS);
        } else {
            CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
        }
    }
    fail_call("cuEventRecord", 0, CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    fprintf(stderr, "unmaps %lu, records %lu, under work in flight %lu, bad reads %u\n", calls_of("cuMemUnmap"),
            calls_of("cuEventRecord"), in_flight(), graph_bad);
    CHECK(calls_of("cuMemUnmap") >= 100);
    CHECK_EQ(graph_bad, 0u);
    CHECK_EQ(in_flight(), 0ul);
    CHECK_EQ(D(cuStreamDestroy_v2, blocking), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, nonblocking), CUDA_SUCCESS);
    graph_bufs_free(p);
    return 0;
}

/* One launch of k per buffer on stream s, in order: past the limit, each
 * brings its buffer back and sends another away (lazily). */
static void sweep_buffers(CUfunction k, CUdeviceptr *p, CUstream s)
{
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    for (unsigned b = 0; b < GRAPH_BUFS; b++) {
        void *params[] = {&p[b], &b};
        CHECK_EQ(cuLaunchKernel_p(k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    }
}

/* A stream destroyed with work queued: a new stream may get its handle,
 * and the events a lazy swap waits for (one per region and stream handle)
 * would stop covering the old stream's work. The next swaps wait for the
 * devices instead (preload/hooks_stream.c). The sim matches work to
 * streams by handle too, so it cannot show the lost wait itself; the case
 * checks that the swaps after a destruction wait whole, and the ones
 * before it do not. */
static int destroyed_stream_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    unsigned long (*calls_of)(const char *) = (unsigned long (*)(const char *))sim_fn("simcuda_calls_of");
    size_t sizes[2] = {8, 4};
    CUfunction k = (CUfunction)make(read_one, 2, sizes);
    CUdeviceptr p[GRAPH_BUFS];
    graph_bufs_alloc(p);
    CUstream s, t;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int round = 0; round < 2; round++) sweep_buffers(k, p, s);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    unsigned long unmaps = calls_of("cuMemUnmap"), syncs = calls_of("cuCtxSynchronize");
    sweep_buffers(k, p, s);
    unsigned long before = calls_of("cuCtxSynchronize") - syncs;
    CHECK(calls_of("cuMemUnmap") > unmaps);   /* the sweep swapped */
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamCreate, &t, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    syncs = calls_of("cuCtxSynchronize");
    sweep_buffers(k, p, t);
    unsigned long after = calls_of("cuCtxSynchronize") - syncs;
    fprintf(stderr, "device waits in a sweep: %lu before the destruction, %lu after; bad reads %u\n", before,
            after, graph_bad);
    CHECK_EQ(before, 0ul);
    CHECK(after > 0);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(graph_bad, 0u);
    CHECK_EQ(D(cuStreamDestroy_v2, t), CUDA_SUCCESS);
    graph_bufs_free(p);
    return 0;
}

/* gpu-threads on the simulated driver: threads allocating (plain and
 * stream-ordered), filling by kernel, setting by memset, checking by
 * kernel and by copy, freeing, and handing buffers to each other, past a
 * device limit with spill (the case runs it with host spill mapped, host
 * spill lazy, and peer spill). Every unmap is checked against the work still in flight
 * (SIMCUDA_KERNELS_IN_FLIGHT=fatal), every byte against its pattern. */
#define CHURN_THREADS 4
#define CHURN_RING 4

static unsigned churn_bad;

static uint8_t churn_byte(size_t i, unsigned seed) { return (uint8_t)((i * 2654435761u) >> 7 ^ seed); }

static void churn_fill(void **params)
{
    uint8_t *p = (uint8_t *)(uintptr_t)*(CUdeviceptr *)params[0];
    size_t n = *(size_t *)params[1];
    unsigned seed = *(unsigned *)params[2];
    for (size_t i = 0; i < n; i++) p[i] = churn_byte(i, seed);
}

struct churn_buf {
    CUdeviceptr p;
    size_t n, set_at, set_len;
    unsigned seed;
    int ordered;
};

static bool churn_want(const struct churn_buf *b, size_t i, uint8_t got)
{
    uint8_t want = i >= b->set_at && i < b->set_at + b->set_len ? 0xA5 : churn_byte(i, b->seed);
    return got == want;
}

/* Given the buffer's address itself (a lazy spill is brought back only
 * for the addresses a launch names), its size, seed and memset stretch. */
static void churn_check(void **params)
{
    struct churn_buf b = {.p = *(CUdeviceptr *)params[0], .n = *(size_t *)params[1], .seed = *(unsigned *)params[2],
                          .set_at = *(size_t *)params[3], .set_len = *(size_t *)params[4]};
    const uint8_t *p = (const uint8_t *)(uintptr_t)b.p;
    for (size_t i = 0; i < b.n; i++)
        if (!churn_want(&b, i, p[i])) {
            __atomic_add_fetch(&churn_bad, 1, __ATOMIC_RELAXED);
            return;
        }
}

static pthread_mutex_t churn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct churn_buf churn_handed[64];
static int churn_nhanded, churn_running = CHURN_THREADS;
static CUfunction churn_k_fill, churn_k_check;

static void churn_release(const struct churn_buf *b, CUstream s)
{
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    struct churn_buf c = *b;
    void *params[] = {&c.p, &c.n, &c.seed, &c.set_at, &c.set_len};
    CHECK_EQ(cuLaunchKernel_p(churn_k_check, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    size_t from = b->set_at >= 32 ? b->set_at - 32 : 0, len = b->n - from < b->set_len + 64 ? b->n - from : b->set_len + 64;
    uint8_t host[4200];
    CHECK_EQ(D(cuMemcpyDtoHAsync_v2, host, b->p + from, len, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    for (size_t i = 0; i < len; i++)
        if (!churn_want(b, from + i, host[i])) {
            __atomic_add_fetch(&churn_bad, 1, __ATOMIC_RELAXED);
            break;
        }
    CHECK_EQ(b->ordered ? D(cuMemFreeAsync, b->p, s) : D(cuMemFree_v2, b->p), CUDA_SUCCESS);
}

static bool churn_take(CUstream s)
{
    struct churn_buf b;
    pthread_mutex_lock(&churn_lock);
    bool got = churn_nhanded > 0;
    if (got) b = churn_handed[--churn_nhanded];
    pthread_mutex_unlock(&churn_lock);
    if (got) churn_release(&b, s);
    return got;
}

static void *churn_thread(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    static const size_t sizes[] = {256, 4000, 65536, 1000000, 2 * MiB, 3 * MiB + 5, 6 * MiB};
    RES(cuLaunchKernel, "cuLaunchKernel", 4000, 0);
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    struct churn_buf ring[CHURN_RING + 1];
    int nring = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
    for (int it = 0; it < test_scaled(80); it++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        struct churn_buf b = {.n = sizes[rng % 7], .ordered = (int)((rng >> 20) & 1), .seed = id * 1000 + (unsigned)it};
        CHECK_EQ(b.ordered ? D(cuMemAllocAsync, &b.p, b.n, s) : D(cuMemAlloc_v2, &b.p, b.n), CUDA_SUCCESS);
        void *fill[] = {&b.p, &b.n, &b.seed};
        CHECK_EQ(cuLaunchKernel_p(churn_k_fill, 1, 1, 1, 1, 1, 1, 0, s, fill, NULL), CUDA_SUCCESS);
        b.set_len = b.n / 2 < 4096 ? b.n / 2 : 4096;
        b.set_at = (size_t)(rng >> 32) % (b.n - b.set_len + 1);
        CHECK_EQ(D(cuMemsetD8Async, b.p + b.set_at, 0xA5, b.set_len, s), CUDA_SUCCESS);
        ring[nring++] = b;
        if (nring > CHURN_RING) {
            struct churn_buf old = ring[0];
            memmove(ring, ring + 1, --nring * sizeof *ring);
            pthread_mutex_lock(&churn_lock);
            bool hand = (rng >> 40) % 4 == 0 && churn_nhanded < 64;
            pthread_mutex_unlock(&churn_lock);
            if (hand) {
                CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);   /* its work done, as CUDA requires */
                pthread_mutex_lock(&churn_lock);
                churn_handed[churn_nhanded++] = old;
                pthread_mutex_unlock(&churn_lock);
            } else {
                churn_release(&old, s);
            }
        }
        if (it % 3 == 0) churn_take(s);
    }
    for (int i = 0; i < nring; i++) churn_release(&ring[i], s);
    __atomic_sub_fetch(&churn_running, 1, __ATOMIC_ACQ_REL);
    while (churn_take(s) || __atomic_load_n(&churn_running, __ATOMIC_ACQUIRE) > 0) sched_yield();
    CHECK_EQ(D(cuStreamSynchronize, s), CUDA_SUCCESS);
    CHECK_EQ(D(cuStreamDestroy_v2, s), CUDA_SUCCESS);
    return NULL;
}

static int threads_workload(void)
{
    start();
    void *(*make)(void (*)(void **), unsigned, const size_t *) = sim_fn("simcuda_function");
    size_t fill_sizes[3] = {8, sizeof(size_t), 4}, check_sizes[5] = {8, sizeof(size_t), 4, sizeof(size_t), sizeof(size_t)};
    churn_k_fill = (CUfunction)make(churn_fill, 3, fill_sizes);
    churn_k_check = (CUfunction)make(churn_check, 5, check_sizes);
    pthread_t t[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, churn_thread, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < CHURN_THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    CHECK_EQ(churn_bad, 0u);
    return 0;
}

static int untracked_workload(void)
{
    open_driver();
    CHECK(!strcmp(object_of(resolve("cuLaunchKernel", 4000, 0)), "sim"));
    return 0;
}

/* ---- device memory the program creates itself (cuMemCreate) ---- */

static CUresult create_at(CUmemLocationType type, int id, size_t size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {.type = type, .id = id}};
    return D(cuMemCreate, h, size, &prop, 0);
}

static size_t free_now(void)
{
    size_t f = 0, t = 0;
    CHECK_EQ(D(cuMemGetInfo_v2, &f, &t), CUDA_SUCCESS);
    CHECK_EQ(t, 64 * MiB);
    return f;
}

/* Under GVM_DEVICE_LIMIT=0:64M, without spill: the program's own device
 * memory and gvmshim's share the limit, as nvidia-smi would count them. A
 * creation past it fails as on a full device; the program's memory info
 * says so beforehand; a release makes room again; host memory, failed
 * creations and handles released twice count nothing. The program's own
 * mapping of its handle works as natively (its pointer is not gvmshim's). */
static int own_vmm_workload(void)
{
    start();
    void (*fail)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
    CUmemGenericAllocationHandle big, more, host;
    CUdeviceptr p;
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, 40 * MiB, &big), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &p, 20 * MiB), CUDA_SUCCESS);
    size_t room = free_now();
    CHECK(room <= 4 * MiB);
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, room + 2 * MiB, &more), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_HOST, 0, 16 * MiB, &host), CUDA_SUCCESS);
    CHECK_EQ(free_now(), room);
    fail("cuMemCreate", 1, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, 2 * MiB, &more), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(free_now(), room);
    /* Mapped and used by the program: gvmshim's hooks pass it by. */
    CUdeviceptr va = 0;
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(D(cuMemAddressReserve, &va, 40 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemMap, va, 40 * MiB, 0, big, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemSetAccess, va, 40 * MiB, &rw, 1), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD32_v2, va + 8 * MiB, 0x600dcafe, 1024), CUDA_SUCCESS);
    unsigned w = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &w, va + 8 * MiB + 4092, 4), CUDA_SUCCESS);
    CHECK_EQ(w, 0x600dcafeu);
    CHECK_EQ(D(cuMemUnmap, va, 40 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAddressFree, va, 40 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemRelease, big), CUDA_SUCCESS);
    CHECK_EQ(free_now(), room + 40 * MiB);
    CHECK_EQ(D(cuMemRelease, big), CUDA_ERROR_INVALID_VALUE);   /* the driver's answer */
    CHECK_EQ(free_now(), room + 40 * MiB);
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, room + 40 * MiB, &more), CUDA_SUCCESS);
    CHECK_EQ(free_now(), 0);
    CHECK_EQ(D(cuMemRelease, more), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemRelease, host), CUDA_SUCCESS);
    return 0;
}

/* With spill on, gvmshim's own allocations leave the device to make room
 * for the program's (which cannot move), their data intact. */
static int own_vmm_spill_workload(void)
{
    start();
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    static unsigned char in[MiB], out[MiB];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, 30 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyHtoD_v2, p + 7 * MiB, in, sizeof in), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h;
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, 48 * MiB, &h), CUDA_SUCCESS);
    gvm_info info;
    CHECK_EQ(query((void *)p, &info), GVM_OK);
    CHECK_EQ(info.location, GVM_HOST);
    CHECK(free_now() <= 16 * MiB);
    CHECK_EQ(D(cuMemcpyDtoH_v2, out, p + 7 * MiB, sizeof out), CUDA_SUCCESS);
    CHECK(!memcmp(in, out, sizeof in));
    /* Past what spilling can make room for: refused as natively. */
    CUmemGenericAllocationHandle h2;
    CHECK_EQ(create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, 32 * MiB, &h2), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(D(cuMemRelease, h), CUDA_SUCCESS);
    return 0;
}

/* Under GVM_DEVICE_LIMIT=0:64M: stream-ordered memory shares the limit;
 * memory freed in stream order is waited for when the device is full. */
static int async_limit_workload(void)
{
    start();
    CUdeviceptr a, b;
    CHECK_EQ(D(cuMemAllocAsync, &a, 40 * MiB, NULL), CUDA_SUCCESS);
    b = a;
    CHECK_EQ(D(cuMemAlloc_v2, &b, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(b, 0);
    b = a;
    CHECK_EQ(D(cuMemAllocAsync, &b, 40 * MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(b, 0);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &b, 40 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, b, NULL), CUDA_SUCCESS);
    return 0;
}

/* With spill on, stream-ordered memory moves to host to make room like
 * any other, its data intact. */
static int async_spill_workload(void)
{
    start();
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    CUdeviceptr a, b;
    CHECK_EQ(D(cuMemAllocAsync, &a, 40 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD32Async, a, 0xfeedf00d, 10 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAllocAsync, &b, 40 * MiB, NULL), CUDA_SUCCESS);
    gvm_info info;
    CHECK_EQ(query((void *)a, &info), GVM_OK);
    CHECK_EQ(info.location, GVM_HOST);
    unsigned w = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &w, a + 40 * MiB - 4, 4), CUDA_SUCCESS);
    CHECK_EQ(w, 0xfeedf00du);
    CHECK_EQ(D(cuMemFreeAsync, a, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFreeAsync, b, NULL), CUDA_SUCCESS);
    return 0;
}

static void stream_ordered_memory_counts_and_spills(void)
{
    CHECK_EQ(run_self("async-limit", "GVM_DEVICE_LIMIT=0:64M", NULL, NULL, 0), 0);
    CHECK_EQ(run_self("async-spill", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL, 0), 0);
}

/* Threads creating and releasing their own device memory beside
 * gvmshim's allocations, under the limit: whatever each creation was
 * answered, the limit is never passed and nothing stays counted after
 * the releases. */
static void *own_vmm_churn(void *arg)
{
    (void)arg;
    CHECK_EQ(D(cuCtxSetCurrent, ctx0), CUDA_SUCCESS);
    for (int i = 0; i < 200; i++) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr p = 0;
        CUresult rc = create_at(CU_MEM_LOCATION_TYPE_DEVICE, 0, (size_t)(2 + i % 3 * 2) * MiB, &h);
        CHECK(rc == CUDA_SUCCESS || rc == CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(free_now() <= 64 * MiB);
        if (i % 5 == 0 && D(cuMemAlloc_v2, &p, 6 * MiB) == CUDA_SUCCESS) CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);
        if (rc == CUDA_SUCCESS) CHECK_EQ(D(cuMemRelease, h), CUDA_SUCCESS);
    }
    return NULL;
}

static int own_vmm_threads_workload(void)
{
    start();
    CUdeviceptr warm;
    CHECK_EQ(D(cuMemAlloc_v2, &warm, 4096), CUDA_SUCCESS);
    size_t before = free_now();
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, own_vmm_churn, NULL), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK(free_now() >= before);   /* idle memory gvmshim caches counts as free */
    return 0;
}

static void programs_own_device_memory_counts_under_the_limit(void)
{
    CHECK_EQ(run_self("own-vmm", "GVM_DEVICE_LIMIT=0:64M", NULL, NULL, 0), 0);
    CHECK_EQ(run_self("own-vmm-spill", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL, 0), 0);
    CHECK_EQ(run_self("own-vmm-threads", "GVM_DEVICE_LIMIT=0:64M", NULL, NULL, 0), 0);
}

static void launches_are_scanned_when_spilling(void)
{
    CHECK_EQ(run_self("tracking", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL, 0), 0);
    CHECK_EQ(run_self("untracked", "GVM_TRACK_LAUNCHES=off", "GVM_SPILL=host", NULL, 0), 0);
    CHECK_EQ(run_self("struct-scan", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL, 0), 0);
}

/* pause_host_map=lazy with launches not scanned (spill off, the default),
 * scanned (spill on), and not even hooked (track_launches=off: the pause
 * maps its copies itself, as it does by default). */
static void a_paused_copy_is_mapped_for_what_reaches_it(void)
{
    const char *unscanned[] = {"GVM_PAUSE_HOST_MAP=lazy", NULL};
    const char *scanned[] = {"GVM_PAUSE_HOST_MAP=lazy", "GVM_SPILL=host", NULL};
    const char *unhooked[] = {"GVM_PAUSE_HOST_MAP=lazy", "GVM_TRACK_LAUNCHES=off", "PAUSE_MAPPED_AT_ONCE=1", NULL};
    CHECK_EQ(run_self_envs("pause-running", unscanned, NULL, 0), 0);
    CHECK_EQ(run_self_envs("pause-running", scanned, NULL, 0), 0);
    CHECK_EQ(run_self_envs("pause-running", unhooked, NULL, 0), 0);
    CHECK_EQ(run_self("pause-running", "PAUSE_MAPPED_AT_ONCE=1", NULL, NULL, 0), 0);
}

/* The simulated kernels run on the CPU: with CPU faults on, a kernel
 * touching a copy just mapped on host would wait in the CPU-access handler
 * for the region a resume holds while the resume waits for the launch, a
 * wait a GPU's kernel never makes. The launches go from a second thread,
 * while the main one pauses and resumes. */
static void launches_racing_pauses_never_reach_unmapped_copies(void)
{
    CHECK_EQ(run_self("pause-racing", "SIMCUDA_CPU_FAULTS=0", "GVM_PAUSE_HOST_MAP=lazy", NULL, 0), 0);
}

static void lazy_spills_are_mapped_for_what_reaches_them(void)
{
    const char *envs[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy",
                          "GVM_PROMOTE_INTERVAL=3600s", NULL};
    CHECK_EQ(run_self_envs("lazy", envs, NULL, 0), 0);
    CHECK_EQ(run_self_envs("partial", envs, NULL, 0), 0);
}

/* The sim's kernels run on the CPU: with its CPU faults on, a kernel
 * reading spilled memory would go through gvmshim's CPU-access handler,
 * which a GPU's kernel never does (and which, finding the region moved
 * back by another thread meanwhile, rightly calls the fault not its own). */
static void threads_churning_past_the_limit_keep_every_byte(void)
{
    const char *mapped[] = {"GVM_DEVICE_LIMIT=0:24M", "GVM_SPILL=host", "SIMCUDA_CPU_FAULTS=0", NULL};
    const char *lazy[] = {"GVM_DEVICE_LIMIT=0:24M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy", "SIMCUDA_CPU_FAULTS=0",
                          NULL};
    const char *peer[] = {"GVM_DEVICE_LIMIT=0:24M,1:16M", "GVM_SPILL=peer,host", "SIMCUDA_CPU_FAULTS=0", NULL};
    /* Every launch holds the move gate (pause_host_map=lazy): one reaching
     * a lazily spilled region maps it before the gate, never under it,
     * where the map would wait for the gate its own thread holds. */
    const char *gated[] = {"GVM_DEVICE_LIMIT=0:24M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy",
                           "GVM_PAUSE_HOST_MAP=lazy", "SIMCUDA_CPU_FAULTS=0", NULL};
    CHECK_EQ(run_self_envs("threads", mapped, NULL, 0), 0);
    CHECK_EQ(run_self_envs("threads", lazy, NULL, 0), 0);
    CHECK_EQ(run_self_envs("threads", peer, NULL, 0), 0);
    CHECK_EQ(run_self_envs("threads", gated, NULL, 0), 0);
}

/* CPU faults off: see threads_churning_past_the_limit_keep_every_byte. */
static void graph_replays_beside_swaps_find_their_memory_mapped(void)
{
    const char *envs[] = {"GVM_DEVICE_LIMIT=0:24M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy",
                          "GVM_PROMOTE_INTERVAL=3600s", "SIMCUDA_CPU_FAULTS=0", NULL};
    CHECK_EQ(run_self_envs("graph-threads", envs, NULL, 0), 0);
    CHECK_EQ(run_self_envs("usemark-streams", envs, NULL, 0), 0);
    CHECK_EQ(run_self_envs("destroyed-stream", envs, NULL, 0), 0);
}

static void moves_wait_for_kernels_queued_on_other_streams(void)
{
    const char *envs[] = {"GVM_DEVICE_LIMIT=0:20M", "GVM_SPILL=host", "GVM_PROMOTE_INTERVAL=3600s",
                          "SIMCUDA_KERNELS_IN_FLIGHT=1", NULL};
    CHECK_EQ(run_self_envs("swap-threads", envs, NULL, 0), 0);
}

/* A program that uses device 0 alone: allocations, copies, spills past the
 * limit, a pause and a resume of each kind. None of it may retain device
 * 1's context (nvidia-smi would list the process on GPU 1, holding the
 * context's memory there, where the native program never appears). */
static int one_device_workload(void)
{
    /* ONE_DEVICE=1: the program sets device 1 current, as a rank of a job
     * started without CUDA_VISIBLE_DEVICES does; device 0 must stay untouched. */
    const char *which = getenv("ONE_DEVICE");
    int dev = which && !strcmp(which, "1") ? 1 : 0;
    start_on(dev);
    gvm_status (*tag_push)(const char *) = dlsym(RTLD_DEFAULT, "gvm_tag_push");
    gvm_status (*tag_pop)(void) = dlsym(RTLD_DEFAULT, "gvm_tag_pop");
    gvm_status (*pause_tag)(const char *, int) = dlsym(RTLD_DEFAULT, "gvm_pause");
    gvm_status (*resume)(const char *) = dlsym(RTLD_DEFAULT, "gvm_resume");
    CHECK(tag_push && tag_pop && pause_tag && resume);
    CUdeviceptr p[4];
    CHECK_EQ(tag_push("one"), GVM_OK);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 24 * MiB), CUDA_SUCCESS);   /* past 64M with a limit */
        CHECK_EQ(D(cuMemsetD32_v2, p[i], 0x5a5a0000u + (unsigned)i, 6 * MiB), CUDA_SUCCESS);
    }
    CHECK_EQ(tag_pop(), GVM_OK);
    const int kinds[] = {GVM_PAUSE_KEEP, GVM_PAUSE_UNMAPPED};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(pause_tag("one", kinds[k]), GVM_OK);
        CHECK_EQ(resume("one"), GVM_OK);
    }
    for (int i = 0; i < 4; i++) {
        unsigned w = 0;
        CHECK_EQ(D(cuMemcpyDtoH_v2, &w, p[i] + 24 * MiB - 4, 4), CUDA_SUCCESS);
        CHECK_EQ(w, 0x5a5a0000u + (unsigned)i);
    }
    CHECK_EQ(D(cuCtxSynchronize), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
    usleep(50 * 1000);   /* the background threads' first rounds */
    CUresult (*state)(CUdevice, unsigned *, int *) =
        (CUresult(*)(CUdevice, unsigned *, int *))sim_fn("cuDevicePrimaryCtxGetState");
    unsigned flags = 0;
    int active = -1;
    CHECK_EQ(state(1 - dev, &flags, &active), CUDA_SUCCESS);
    CHECK_EQ(active, 0);
    return 0;
}

/* cudaDeviceReset: the program's memory of every kind goes with the
 * context (natively its cuMemAlloc memory does; gvmshim's VMM memory would
 * outlive it), the program's own cuMemCreate memory stays, the context is
 * not made again by gvmshim, and after the program makes it again
 * everything works at the limit as before: allocation, spill (gvmshim's
 * copy streams made anew), pause and resume. Then a reset just before the
 * exit. */
static int reset_workload(void)
{
    start();
    gvm_status (*tag_push)(const char *) = dlsym(RTLD_DEFAULT, "gvm_tag_push");
    gvm_status (*tag_pop)(void) = dlsym(RTLD_DEFAULT, "gvm_tag_pop");
    gvm_status (*pause_tag)(const char *, int) = dlsym(RTLD_DEFAULT, "gvm_pause");
    gvm_status (*resume)(const char *) = dlsym(RTLD_DEFAULT, "gvm_resume");
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    size_t (*registered)(void) = sim_fn("simcuda_registered_bytes");
    void (*fail)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
    CUresult (*state)(CUdevice, unsigned *, int *) =
        (CUresult(*)(CUdevice, unsigned *, int *))sim_fn("cuDevicePrimaryCtxGetState");
    CHECK(tag_push && tag_pop && pause_tag && resume);
    /* The program's own VMM memory: not gvmshim's to free. */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle own;
    CHECK_EQ(D(cuMemCreate, &own, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    for (int round = 0; round < 2; round++) {
        CUdeviceptr big[4], small[8], ordered;
        CUstream s;
        CHECK_EQ(D(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        CHECK_EQ(tag_push("reset"), GVM_OK);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(D(cuMemAlloc_v2, &big[i], 24 * MiB), CUDA_SUCCESS);   /* past 64M with a limit */
            CHECK_EQ(D(cuMemsetD32_v2, big[i], 0x5a5a0000u + (unsigned)i, 6 * MiB), CUDA_SUCCESS);
        }
        CHECK_EQ(tag_pop(), GVM_OK);
        for (int i = 0; i < 8; i++) CHECK_EQ(D(cuMemAlloc_v2, &small[i], 256 + 1000 * (size_t)i), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemAllocAsync, &ordered, 4 * MiB, s), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD8Async, ordered, 7, 4 * MiB, s), CUDA_SUCCESS);
        CHECK_EQ(pause_tag("reset", round ? GVM_PAUSE_UNMAPPED : GVM_PAUSE_KEEP), GVM_OK);
        CHECK_EQ(resume("reset"), GVM_OK);
        for (int i = 0; i < 4; i++) {
            unsigned w = 0;
            CHECK_EQ(D(cuMemcpyDtoH_v2, &w, big[i] + 24 * MiB - 4, 4), CUDA_SUCCESS);
            CHECK_EQ(w, 0x5a5a0000u + (unsigned)i);
        }
        CHECK_EQ(pause_tag("reset", GVM_PAUSE_KEEP), GVM_OK);   /* paused when the reset comes */
        /* A reset the driver refuses takes nothing. */
        fail("cuDevicePrimaryCtxReset_v2", 1, CUDA_ERROR_UNKNOWN);
        CHECK_EQ(D(cuDevicePrimaryCtxReset_v2, 0), CUDA_ERROR_UNKNOWN);
        for (int i = 0; i < 8; i++) {
            unsigned char b = 1;
            CHECK_EQ(D(cuMemcpyDtoH_v2, &b, small[i], 1), CUDA_SUCCESS);
        }
        CHECK_EQ(resume("reset"), GVM_OK);
        unsigned last = 0;
        CHECK_EQ(D(cuMemcpyDtoH_v2, &last, big[3] + 24 * MiB - 4, 4), CUDA_SUCCESS);
        CHECK_EQ(last, 0x5a5a0003u);
        CHECK_EQ(pause_tag("reset", GVM_PAUSE_KEEP), GVM_OK);
        CHECK_EQ(D(cuDevicePrimaryCtxReset_v2, 0), CUDA_SUCCESS);
        /* Everything gvmshim held for the program on device 0 is gone;
         * the program's own 2 MiB stays. */
        CHECK_EQ(phys_bytes(0), 2 * MiB);
        CHECK_EQ(phys_bytes(1), 0);   /* what spilled to the peer went too */
        CHECK_EQ(registered(), 0);
        unsigned flags = 0;
        int active = -1;
        CHECK_EQ(state(0, &flags, &active), CUDA_SUCCESS);
        CHECK_EQ(active, 0);
        /* Its streams went with it; its memory answers as unknown. */
        CHECK_EQ(D(cuCtxSynchronize), CUDA_ERROR_CONTEXT_IS_DESTROYED);
        CHECK_EQ(D(cuMemFree_v2, small[0]), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(D(cuMemFree_v2, big[0]), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(resume("reset"), GVM_OK);   /* nothing left to resume */
        CUcontext c;
        CHECK_EQ(D(cuDevicePrimaryCtxRetain, &c, 0), CUDA_SUCCESS);
        CHECK_EQ(D(cuCtxSetCurrent, c), CUDA_SUCCESS);
        CHECK_EQ(D(cuStreamSynchronize, s), CUDA_ERROR_INVALID_HANDLE);
    }
    /* Made again: the whole limit is the program's. */
    CUdeviceptr p[4];
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 24 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemsetD32_v2, p[i], 0x77000000u + (unsigned)i, 6 * MiB), CUDA_SUCCESS);
    }
    for (int i = 0; i < 4; i++) {
        unsigned w = 0;
        CHECK_EQ(D(cuMemcpyDtoH_v2, &w, p[i], 4), CUDA_SUCCESS);
        CHECK_EQ(w, 0x77000000u + (unsigned)i);
    }
    CHECK_EQ(D(cuMemRelease, own), CUDA_SUCCESS);
    CHECK_EQ(D(cuDevicePrimaryCtxReset_v2, 0), CUDA_SUCCESS);   /* and the exit */
    CHECK_EQ(phys_bytes(0), 0);
    return 0;
}

/* As gpu-reset's peer scenario: memory of device 0 spilled to device 1,
 * freed by device 0's reset a moment after it was made (so kept for reuse,
 * not given back at its free). Device 1 must hold none of it afterwards,
 * with pools on (the cpu suite's default turns them off). */
static int reset_peer_workload(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(D(cuMemAlloc_v2, &p[i], 24 * MiB), CUDA_SUCCESS);   /* past 64M: to the peer */
        CHECK_EQ(D(cuMemsetD32_v2, p[i], 0x5a5a0000u + (unsigned)i, 6 * MiB), CUDA_SUCCESS);
    }
    CHECK(phys_bytes(1) > 0);
    CHECK_EQ(D(cuDevicePrimaryCtxReset_v2, 0), CUDA_SUCCESS);
    CHECK_EQ(phys_bytes(0), 0);
    CHECK_EQ(phys_bytes(1), 0);
    return 0;
}

static void device_reset_frees_the_programs_memory(void)
{
    const char *plain[] = {NULL};
    const char *spill[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL};
    const char *lazy[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy",
                          "GVM_HOST_POOL=64M", NULL};
    const char *pooled[] = {"GVM_POOL_LIMIT=64M", "GVM_STATS=1", NULL};
    const char *tracked[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=peer,host", "GVM_SPILL_HOST_MAP=lazy",
                             "GVM_POOL_LIMIT=64M", NULL};
    const char *peer[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=peer,host", "GVM_POOL_LIMIT=64M",
                          "GVM_CACHE_IDLE=600s", NULL};
    const char *const *runs[] = {plain, spill, lazy, pooled, tracked, peer};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char out[16384];
        int rc = run_self_envs(runs[i] == peer ? "reset-peer" : "reset", runs[i], out, sizeof out);
        if (rc || strstr(out, ": warning: ") || strstr(out, ": error: ")) fprintf(stderr, "run %zu:\n%s", i, out);
        CHECK_EQ(rc, 0);
        CHECK(!strstr(out, ": warning: ") && !strstr(out, ": error: "));
    }
}

/* A reset whose clean-up meets one failed driver call (RESET_FAIL_AT: the
 * nth call of this thread from the reset on; 0: none, the count of calls
 * is printed): the reset still succeeds, nothing of the program's stays
 * held (unmaps, releases and range frees are retried), and the device
 * serves again at the limit. */
static int reset_fault_workload(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    void (*fail_here)(unsigned long, CUresult) = sim_fn("simcuda_fail_nth_here");
    unsigned long (*count_here)(void) = sim_fn("simcuda_call_count_here");
    void (*reset_counts)(void) = sim_fn("simcuda_reset_counts");
    gvm_status (*tag_push)(const char *) = dlsym(RTLD_DEFAULT, "gvm_tag_push");
    gvm_status (*tag_pop)(void) = dlsym(RTLD_DEFAULT, "gvm_tag_pop");
    gvm_status (*pause_tag)(const char *, int) = dlsym(RTLD_DEFAULT, "gvm_pause");
    CHECK(tag_push && tag_pop && pause_tag);
    const char *at = getenv("RESET_FAIL_AT");
    unsigned long nth = at ? strtoul(at, NULL, 10) : 0;
    CUdeviceptr p;
    CHECK_EQ(tag_push("t"), GVM_OK);
    for (int i = 0; i < 3; i++) CHECK_EQ(D(cuMemAlloc_v2, &p, 24 * MiB), CUDA_SUCCESS);   /* spills at 64M */
    CHECK_EQ(tag_pop(), GVM_OK);
    for (int i = 0; i < 4; i++) CHECK_EQ(D(cuMemAlloc_v2, &p, 4096), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &p, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, p), CUDA_SUCCESS);   /* cached */
    CHECK_EQ(pause_tag("t", GVM_PAUSE_UNMAPPED), GVM_OK);
    RES(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 12000, 0);
    reset_counts();
    if (nth) fail_here(nth, CUDA_ERROR_UNKNOWN);
    CHECK_EQ(cuDevicePrimaryCtxReset_v2_p(0), nth == 1 ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    if (!nth) fprintf(stderr, "calls %lu\n", count_here());
    fail_here(0, CUDA_SUCCESS);
    if (nth == 1) return 0;
    CHECK_EQ(phys_bytes(0), 0);
    CHECK_EQ(phys_bytes(1), 0);
    CUcontext c;
    CHECK_EQ(D(cuDevicePrimaryCtxRetain, &c, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSetCurrent, c), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++) CHECK_EQ(D(cuMemAlloc_v2, &p, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, p, 3, 24 * MiB), CUDA_SUCCESS);
    return 0;
}

static void device_reset_survives_a_failure_at_every_call(void)
{
    /* Host spill, lazily mapped; and spill to the peer with pools on, where
     * the reset also empties device 1's pool. The host pool is prefilled,
     * but smaller than the simulated host's 2 GiB: the default 4 GiB took
     * all of it, and a pause that came while the prefill still ran found
     * no host memory (GVM_ERR_NO_MEMORY, once in ~50 runs under ASan). */
    const char *lazy[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy", "GVM_HOST_POOL=256M",
                          NULL, NULL};
    const char *peer[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=peer,host", "GVM_POOL_LIMIT=64M", "GVM_HOST_POOL=256M",
                          NULL, NULL};
    const char **runs[] = {lazy, peer};
    char out[16384];
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        const char **envs = runs[r];
        CHECK_EQ(run_self_envs("reset-fault", envs, out, sizeof out), 0);
        /* The reset and its clean-up make 15 to 23 calls on this thread
         * here (the run without a failure counts them); one past them
         * the armed failure is cancelled unused. */
        const char *counted = strstr(out, "calls ");
        CHECK(counted);
        unsigned long calls = strtoul(counted + 6, NULL, 10);
        CHECK(calls >= 10 && calls <= 64);
        for (unsigned long k = 1; k <= calls + 1; k += test_sweep_step()) {
            char at[32];
            snprintf(at, sizeof at, "RESET_FAIL_AT=%lu", k);
            envs[4] = at;
            int rc = run_self_envs("reset-fault", envs, out, sizeof out);
            if (rc) fprintf(stderr, "run %zu, failure at call %lu:\n%s", r, k, out);
            CHECK_EQ(rc, 0);
        }
        envs[4] = NULL;
    }
}

/* cuCtxDestroy of a context the program made: what it allocated there goes
 * with it (large and small, natively its cuMemAlloc memory does), what it
 * allocated in the primary context stays and works. */
static int ctx_destroy_workload(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    CUresult (*create)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))sim_fn("cuCtxCreate_v2");
    CUdeviceptr keep, keep_small, big, small[3];
    CHECK_EQ(D(cuMemAlloc_v2, &keep, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &keep_small, 512), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, keep, 0x21, 24 * MiB), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, keep_small, 0x22, 512), CUDA_SUCCESS);
    size_t before = phys_bytes(0);
    CUcontext user, cur;
    CHECK_EQ(create(&user, 0, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemAlloc_v2, &big, 24 * MiB), CUDA_SUCCESS);
    for (int i = 0; i < 3; i++) CHECK_EQ(D(cuMemAlloc_v2, &small[i], 512), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, big, 1, 24 * MiB), CUDA_SUCCESS);
    CHECK(phys_bytes(0) > before);
    CHECK_EQ(D(cuCtxDestroy, user), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxGetCurrent, &cur), CUDA_SUCCESS);
    CHECK(cur == ctx0);
    CHECK(phys_bytes(0) <= before);   /* under a limit the kept memory may have left for host */
    CHECK_EQ(D(cuMemFree_v2, big), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(D(cuMemFree_v2, small[0]), CUDA_ERROR_INVALID_VALUE);
    unsigned char b = 0;
    CHECK_EQ(D(cuMemcpyDtoH_v2, &b, keep + 24 * MiB - 1, 1), CUDA_SUCCESS);
    CHECK_EQ(b, 0x21);
    CHECK_EQ(D(cuMemcpyDtoH_v2, &b, keep_small + 511, 1), CUDA_SUCCESS);
    CHECK_EQ(b, 0x22);
    CHECK_EQ(D(cuMemFree_v2, keep), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemFree_v2, keep_small), CUDA_SUCCESS);
    return 0;
}

static void context_destroy_frees_its_memory(void)
{
    const char *plain[] = {NULL};
    const char *spill[] = {"GVM_DEVICE_LIMIT=0:40M", "GVM_SPILL=host", NULL};
    CHECK_EQ(run_self_envs("ctx-destroy", plain, NULL, 0), 0);
    CHECK_EQ(run_self_envs("ctx-destroy", spill, NULL, 0), 0);
}

/* Freed memory kept for reuse: reused by a loop that frees and allocates
 * (no new physical memory), given back once unused for cache_idle, and at
 * its free when it lived longer than that (as a native free gives memory
 * back at once); with cache_idle 0, kept. */
static int idle_workload(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    unsigned long (*calls_of)(const char *) = sim_fn("simcuda_calls_of");
    const char *idle = getenv("GVM_CACHE_IDLE");
    int kept = idle && !strcmp(idle, "0");
    CUdeviceptr p[2];
    /* Memory that lived past cache_idle goes back at its free. */
    CHECK_EQ(D(cuMemAlloc_v2, &p[0], 16 * MiB), CUDA_SUCCESS);
    size_t held = phys_bytes(0);
    usleep(250 * 1000);
    CHECK_EQ(D(cuMemFree_v2, p[0]), CUDA_SUCCESS);
    if (kept || getenv("IDLE_LOOP"))
        CHECK_EQ(phys_bytes(0), held);
    else
        CHECK(phys_bytes(0) <= held - 16 * MiB);
    for (int i = 0; i < 2; i++) CHECK_EQ(D(cuMemAlloc_v2, &p[i], 16 * MiB), CUDA_SUCCESS);
    unsigned long creates = calls_of("cuMemCreate");
    for (int round = 0; round < 200; round++)
        for (int i = 0; i < 2; i++) {
            CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
            CHECK_EQ(D(cuMemAlloc_v2, &p[i], 16 * MiB), CUDA_SUCCESS);
        }
    /* Reused, not made again (IDLE_LOOP: the run's cache_idle is long
     * enough that no pause of a slow, loaded machine reaches it). */
    if (getenv("IDLE_LOOP")) CHECK_EQ(calls_of("cuMemCreate"), creates);
    for (int i = 0; i < 2; i++) CHECK_EQ(D(cuMemFree_v2, p[i]), CUDA_SUCCESS);
    if (kept) CHECK(phys_bytes(0) >= 32 * MiB);   /* cached */
    /* Kept: longer than a give-back round (1 s when idle is 0) gives
     * nothing back. Else until it is given back: however long a loaded
     * machine takes, a minute at most. */
    for (int waited = 0; waited < (kept ? 1500 : 60000) && phys_bytes(0) >= 32 * MiB; waited += 20)
        usleep(20 * 1000);
    if (kept) {
        CHECK(phys_bytes(0) >= 32 * MiB);
    } else {
        CHECK(phys_bytes(0) < 32 * MiB);
        CHECK_EQ(D(cuMemAlloc_v2, &p[0], 16 * MiB), CUDA_SUCCESS);   /* made again */
        CHECK_EQ(D(cuMemsetD8_v2, p[0], 1, 16 * MiB), CUDA_SUCCESS);
        CHECK_EQ(D(cuMemFree_v2, p[0]), CUDA_SUCCESS);
    }
    return 0;
}

/* A spilled allocation freed long after it was made: its host pieces,
 * slow to make and not the GPU's, go back to the host pool; its device
 * pieces to the driver. */
static int idle_spill_workload(void)
{
    start();
    size_t (*phys_bytes)(int) = sim_fn("simcuda_phys_bytes");
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    CHECK(query != NULL);
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) CHECK_EQ(D(cuMemAlloc_v2, &p[i], 24 * MiB), CUDA_SUCCESS);
    gvm_info info;
    CHECK_EQ(query((void *)p[0], &info), GVM_OK);
    CHECK_EQ(info.location, GVM_HOST);   /* the least recently used left */
    usleep(250 * 1000);
    size_t host = phys_bytes(SIMCUDA_LOC_HOST), dev = phys_bytes(0);
    CHECK_EQ(D(cuMemFree_v2, p[0]), CUDA_SUCCESS);
    CHECK_EQ(phys_bytes(SIMCUDA_LOC_HOST), host);   /* pooled, not destroyed */
    CHECK_EQ(D(cuMemFree_v2, p[1]), CUDA_SUCCESS);
    CHECK(phys_bytes(0) <= dev - 24 * MiB);         /* the device's given back at once */
    return 0;
}

static void freed_memory_goes_back_once_idle(void)
{
    const char *defaults[] = {"GVM_CACHE_IDLE=100ms", NULL};   /* the default; the suite runs with 0 */
    const char *kept[] = {"GVM_CACHE_IDLE=0", "IDLE_LOOP=1", NULL};
    const char *quick[] = {"GVM_CACHE_IDLE=20ms", "GVM_DEVICE_LIMIT=0:64M", NULL};
    const char *pooled[] = {"GVM_CACHE_IDLE=100ms", "GVM_POOL_LIMIT=64M", NULL};
    const char *looped[] = {"GVM_CACHE_IDLE=2s", "IDLE_LOOP=1", NULL};
    const char *const *runs[] = {defaults, kept, quick, pooled, looped};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) CHECK_EQ(run_self_envs("idle", runs[i], NULL, 0), 0);
    const char *spilled[] = {"GVM_CACHE_IDLE=100ms", "GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host",
                             "GVM_HOST_POOL=128M", "GVM_HOST_PREFILL=off", "GVM_PROMOTE=0", NULL};
    CHECK_EQ(run_self_envs("idle-spill", spilled, NULL, 0), 0);
}

/* Plain, spilling (eagerly and lazily), with pools; on device 0, and on
 * device 1 alone (a rank that set its device). */
static void one_device_programs_leave_other_devices_alone(void)
{
    const char *plain[] = {NULL};
    const char *spill[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", NULL};
    const char *lazy[] = {"GVM_DEVICE_LIMIT=0:64M", "GVM_SPILL=host", "GVM_SPILL_HOST_MAP=lazy", NULL};
    const char *pooled[] = {"GVM_POOL_LIMIT=64M", "GVM_HOST_POOL=64M", "GVM_STATS=1", NULL};
    const char *second[] = {"ONE_DEVICE=1", "GVM_DEVICE_LIMIT=1:64M", "GVM_SPILL=host", NULL};
    const char *second_lazy[] = {"ONE_DEVICE=1", "GVM_DEVICE_LIMIT=1:64M", "GVM_SPILL=host",
                                 "GVM_SPILL_HOST_MAP=lazy", "GVM_POOL_LIMIT=64M", NULL};
    const char *const *runs[] = {plain, spill, lazy, pooled, second, second_lazy};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) CHECK_EQ(run_self_envs("one-device", runs[i], NULL, 0), 0);
}

static void stats_json_is_written_at_exit(void)
{
    char path[600], env[640];
    snprintf(path, sizeof path, "%s/stats-%d.json", test_scratch_dir(), (int)getpid());
    snprintf(env, sizeof env, "GVM_STATS=%s", path);
    CHECK_EQ(run_self("workload", env, "GVM_DEVICE_LIMIT=0:64M", NULL, 0), 0);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(path);
    CHECK(strstr(text, "\"allocations_total\": 3,"));
    CHECK(strstr(text, "\"allocations_live\": 2,"));
    CHECK(strstr(text, "\"bytes_live\": {\"0\": 8389608"));
    CHECK(strstr(text, "\"peak_bytes\": {\"0\": 39846888"));
    CHECK(strstr(text, "\"cuMemAlloc_v2\": 3"));
    CHECK(strstr(text, "\"passthrough_calls\""));
    /* What the device gave the process through gvmshim, beside the limit:
     * at most a 2 MiB chunk, 8 MiB and 30 MiB at once. */
    CHECK(strstr(text, "\"limit\": {\"0\": 67108864, \"1\": null, \"host\": null}"));
    const char *held = strstr(text, "\"held_bytes\": {\"0\": ");
    const char *peak = strstr(text, "\"held_peak\": {\"0\": ");
    CHECK(held && peak);
    CHECK_EQ(strtoull(peak + strlen("\"held_peak\": {\"0\": "), NULL, 10), 40 * MiB);
    CHECK(strtoull(held + strlen("\"held_bytes\": {\"0\": "), NULL, 10) <= 40 * MiB);
    /* No NVML that knows the simulated devices: its figures are left out. */
    CHECK(!strstr(text, "outside_bytes") && !strstr(text, "nvml_used_bytes"));
}

/* The real library at exit: a symlink planted at the stats path is
 * neither followed nor clobbered, and the warning says why. */
static void stats_file_never_follows_a_symlink(void)
{
    char victim[600], link[600], env[640], out[16384];
    snprintf(victim, sizeof victim, "%s/victim-%d", test_scratch_dir(), (int)getpid());
    snprintf(link, sizeof link, "%s/link-%d.json", test_scratch_dir(), (int)getpid());
    FILE *f = fopen(victim, "w");
    CHECK(f != NULL);
    fputs("precious", f);
    fclose(f);
    unlink(link);
    CHECK(symlink(victim, link) == 0);
    snprintf(env, sizeof env, "GVM_STATS=%s", link);
    int rc = run_self("workload", env, NULL, out, sizeof out);
    char text[64] = "";
    f = fopen(victim, "r");
    CHECK(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(link);
    unlink(victim);
    CHECK_EQ(rc, 0);
    CHECK(!strcmp(text, "precious"));
    CHECK(strstr(out, "cannot write stats to"));
    CHECK(strstr(out, "symbolic link"));
}

static void stats_text_goes_to_stderr(void)
{
    char out[16384];
    CHECK_EQ(run_self("workload", "GVM_STATS=1", NULL, out, sizeof out), 0);
    CHECK(strstr(out, "gvmshim: stats: allocations_total    3"));
    CHECK(strstr(out, "gvmshim: stats: limit                dev0=none dev1=none host=none"));
    CHECK(strstr(out, "gvmshim: stats: held_peak            dev0=41943040 "));
}

static void disable_makes_a_pure_pass_through(void)
{
    CHECK_EQ(run_self("disabled", "GVM_DISABLE=1", NULL, NULL, 0), 0);
}

static void bad_configuration_stops_the_program(void)
{
    char out[4096];
    CHECK_EQ(run_self("workload", "GVM_SPILL=hots", NULL, out, sizeof out), 1);
    CHECK(strstr(out, "gvmshim: GVM_SPILL='hots'"));
    CHECK_EQ(run_self("workload", "GVM_SPIL=host", NULL, out, sizeof out), 1);
    CHECK(strstr(out, "did you mean GVM_SPILL"));
}

static void debug_log_lines_are_prefixed(void)
{
    char out[65536];
    CHECK_EQ(run_self("workload", "GVM_LOG=debug", NULL, out, sizeof out), 0);
    CHECK(strstr(out, "gvmshim: debug: config: "));
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) CHECK(!strncmp(line, "gvmshim: ", 9));
}

/* ---- lazy CPU access, signals and fork (re-executed with an env) ---- */

#define LAZY_ENV "SIMCUDA_CPU_FAULTS=1", "GVM_BLOCK_SIZE=2M"

static gvm_status (*migrate_p)(const void *, int);

/* A buffer of n bytes moved to host memory, the CPU not yet granted. */
static CUdeviceptr host_resident(size_t n, unsigned char seed)
{
    CUdeviceptr p;
    CHECK_EQ(D(cuMemAlloc_v2, &p, n), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, p, seed, n), CUDA_SUCCESS);
    migrate_p = dlsym(RTLD_DEFAULT, "gvm_migrate");
    CHECK_EQ(migrate_p((void *)p, GVM_HOST), GVM_OK);
    int (*mask)(CUdeviceptr) = sim_fn("simcuda_access_mask");
    CHECK(!(mask(p) & (1u << 31)));
    return p;
}

/* Copies whose host side is host-resident gvmshim memory spanning several
 * blocks: the driver's CPU side must not fault inside the call. */
static int host_side_copies_workload(void)
{
    alarm(60);   /* a deadlock inside the driver ends the run */
    start();
    const size_t n = 8 * MiB;
    CUdeviceptr dev, h1, h2, h3;
    CHECK_EQ(D(cuMemAlloc_v2, &dev, n), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, dev, 0x5a, n), CUDA_SUCCESS);
    h1 = host_resident(n, 1);
    h2 = host_resident(n, 2);
    h3 = host_resident(n, 3);
    CHECK_EQ(D(cuMemcpyDtoH_v2, (void *)h1, dev, n), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemsetD8_v2, dev, 0, n), CUDA_SUCCESS);
    CHECK_EQ(D(cuMemcpyHtoD_v2, dev, (const void *)h1, n), CUDA_SUCCESS);
    /* 2D: 4 rows of 1 MiB, 2 MiB apart, into host-resident memory. */
    CUDA_MEMCPY2D m = {0};
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = dev;
    m.srcPitch = 2 * MiB;
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = (void *)(h2 + 512 * 1024);
    m.dstPitch = 2 * MiB;
    m.WidthInBytes = MiB;
    m.Height = 4;
    CHECK_EQ(D(cuMemcpy2D_v2, &m), CUDA_SUCCESS);
    /* 3D: 2 layers of 2 rows. */
    CUDA_MEMCPY3D m3 = {0};
    m3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m3.srcDevice = dev;
    m3.srcPitch = MiB;
    m3.srcHeight = 2;
    m3.dstMemoryType = CU_MEMORYTYPE_HOST;
    m3.dstHost = (void *)h3;
    m3.dstPitch = MiB;
    m3.dstHeight = 4;
    m3.WidthInBytes = MiB;
    m3.Height = 2;
    m3.Depth = 2;
    CHECK_EQ(D(cuMemcpy3D_v2, &m3), CUDA_SUCCESS);
    const unsigned char *c1 = (const unsigned char *)h1, *c2 = (const unsigned char *)h2,
                        *c3 = (const unsigned char *)h3;
    for (size_t i = 0; i < n; i += 4096) CHECK_EQ(c1[i], 0x5a);
    CHECK_EQ(c2[512 * 1024 + 3 * 2 * MiB + MiB - 1], 0x5a);
    CHECK_EQ(c2[512 * 1024 + 3 * 2 * MiB + MiB], 2);
    CHECK_EQ(c3[4 * MiB + MiB + MiB - 1], 0x5a);   /* layer 1, row 1 */
    CHECK_EQ(c3[2 * MiB], 3);                      /* rows 2-3 of layer 0: untouched */
    return 0;
}

static void host_side_copies_grant_every_block(void)
{
    CHECK_EQ(run_self("host-copies", LAZY_ENV, NULL, 0), 0);
}

static volatile sig_atomic_t program_faults;
static sigjmp_buf program_jump;

static void program_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    program_faults++;
    siglongjmp(program_jump, 1);
}

static void program_segv_plain(int sig)
{
    (void)sig;
    program_faults++;
    siglongjmp(program_jump, 1);
}

static int touches(CUdeviceptr p, size_t n, unsigned char seed)
{
    const volatile unsigned char *c = (const volatile unsigned char *)p;
    for (size_t i = 0; i < n; i += 4096)
        if (c[i] != seed) return 0;
    return 1;
}

/* The program installs its own SIGSEGV handler after gvmshim started
 * (as faulthandler.enable() or a JVM would), then touches host-resident
 * memory: gvmshim's faults stay gvmshim's, the program's are the program's. */
static int late_handler_workload(void)
{
    start();
    CUdeviceptr a = host_resident(4 * MiB, 7), b = host_resident(4 * MiB, 8);
    struct sigaction sa, seen;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = program_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGSEGV, &sa, NULL), 0);
    CHECK_EQ(sigaction(SIGSEGV, NULL, &seen), 0);
    CHECK(seen.sa_sigaction == program_segv);
    CHECK(touches(a, 4 * MiB, 7));
    CHECK_EQ(program_faults, 0);
    volatile char *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!sigsetjmp(program_jump, 1)) {
        (void)bad[0];
        CHECK(!"the program's fault was swallowed");
    }
    CHECK_EQ(program_faults, 1);
    /* signal() too; it hands back what was there. */
    CHECK(signal(SIGSEGV, program_segv_plain) == (sighandler_t)(void *)program_segv);
    CHECK(touches(b, 4 * MiB, 8));
    if (!sigsetjmp(program_jump, 1)) {
        (void)bad[0];
        CHECK(!"the program's fault was swallowed");
    }
    CHECK_EQ(program_faults, 2);
    return 0;
}

static void handler_installed_late_keeps_lazy_access(void)
{
    CHECK_EQ(run_self("late-handler", LAZY_ENV, NULL, 0), 0);
}

/* ---- fork ---- */

static volatile int churn_stop;

static void *churn(void *arg)
{
    (void)arg;
    RES(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    cuCtxSetCurrent_p(ctx0);
    unsigned char buf[4096] = {1};
    for (unsigned i = 0; !__atomic_load_n(&churn_stop, __ATOMIC_RELAXED); i++) {
        CUdeviceptr p[8];
        for (int k = 0; k < 8; k++) {
            /* Large only: small ones meet slab races that are not this test's. */
            size_t n = (k & 1) ? 3 * MiB : 2 * MiB + 100 * (size_t)k;
            CHECK_EQ(D(cuMemAlloc_v2, &p[k], n), CUDA_SUCCESS);
            CHECK_EQ(D(cuMemcpyHtoD_v2, p[k], buf, sizeof buf < n ? sizeof buf : n), CUDA_SUCCESS);
        }
        for (int k = 0; k < 8; k++) CHECK_EQ(D(cuMemFree_v2, p[k]), CUDA_SUCCESS);
    }
    return NULL;
}

#define CHILDREN 200

/* LeakSanitizer, at a forked child's exit, sees the parent's memory that
 * only the parent's threads (not copied into the child) still reach. */
static int forked_child;
int __lsan_is_turned_off(void);
__attribute__((visibility("default"), used)) int __lsan_is_turned_off(void) { return forked_child; }

/* What a forked child does: CUDA calls through the shim, or an exec, or
 * nothing; it must end on its own (the alarm kills a hung one). */
static void child_body(int kind)
{
    forked_child = 1;
    alarm(20);
    if (kind == 1) {
        execl("/proc/self/exe", "test-preload", "--mode", "nothing", (char *)NULL);
        _exit(126);
    }
    if (kind == 2) exit(0);
    CUdeviceptr p = 0;
    CUresult rc = D(cuMemAlloc_v2, &p, kind == 3 ? 1000 : 3 * MiB);
    if (rc == CUDA_SUCCESS) D(cuMemFree_v2, p);
    gvm_status (*query)(const void *, gvm_info *) = dlsym(RTLD_DEFAULT, "gvm_query");
    gvm_info info;
    /* gvmshim serves nothing in the child. */
    if (p && query((void *)p, &info) != GVM_ERR_INACTIVE) exit(3);
    exit(0);
}

static int fork_workload(void)
{
    start();
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, NULL);
    usleep(50000);
    pid_t kids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0) child_body(i % 5);
    }
    int bad = 0;
    for (int i = 0; i < CHILDREN; i++) {
        int status;
        CHECK_EQ(waitpid(kids[i], &status, 0), kids[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "child %d (kind %d): %s %d\n", i, i % 5, WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            bad++;
        }
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    CHECK_EQ(bad, 0);
    return 0;
}

static void forked_children_never_hang_nor_report(void)
{
    static char out[1 << 20];
    /* Races of the parent's churn are the stress test's to find; under
     * ThreadSanitizer each child would inherit their count as its exit
     * status. This test is about hangs and statistics. */
    const char *envs[] = {"GVM_STATS=1", "GVM_SPILL=host", "GVM_DEVICE_LIMIT=0:24M", "GVM_PROMOTE_INTERVAL=1ms",
                          "GVM_CACHE_LIMIT=0", "TSAN_OPTIONS=report_bugs=0:atexit_sleep_ms=0", NULL};
    CHECK_EQ(run_self_envs("fork", envs, out, sizeof out), 0);
    /* One summary: the parent's. */
    char *first = strstr(out, "allocations_total");
    CHECK(first != NULL);
    CHECK(strstr(first + 1, "allocations_total") == NULL);
}

static const struct test_case cases[] = {
    TEST_ENTRY(resolver_hands_out_the_abi_asked_for)
    TEST_ENTRY(alloc_copy_query_free)
    TEST_ENTRY(per_thread_stream_variants_work)
    TEST_ENTRY(foreign_pointers_pass_through)
    TEST_ENTRY(stream_ordered_allocations_are_served)
    TEST_ENTRY(default_pool_allocations_and_access_are_served)
    TEST_ENTRY(default_pool_use_counts_what_gvmshim_serves)
    TEST_ENTRY(pool_trim_gives_back_freed_memory)
    TEST_ENTRY(failed_driver_call_returns_its_error_and_leaks_nothing)
    TEST_ENTRY(linked_program_first_call_is_not_an_allocation)
    TEST_ENTRY(no_context_is_the_native_error)
    TEST_ENTRY(cached_memory_counts_as_free)
    TEST_ENTRY(filling_the_device_gets_what_it_has_free)
    TEST_ENTRY(copies_from_another_devices_context_are_served)
    TEST_ENTRY(copies_during_migrations_lose_nothing)
    TEST_ENTRY(first_allocations_from_many_threads)
    TEST_ENTRY(launches_are_scanned_when_spilling)
    TEST_ENTRY(lazy_spills_are_mapped_for_what_reaches_them)
    TEST_ENTRY(a_paused_copy_is_mapped_for_what_reaches_it)
    TEST_ENTRY(launches_racing_pauses_never_reach_unmapped_copies)
    TEST_ENTRY(moves_wait_for_kernels_queued_on_other_streams)
    TEST_ENTRY(threads_churning_past_the_limit_keep_every_byte)
    TEST_ENTRY(graph_replays_beside_swaps_find_their_memory_mapped)
    TEST_ENTRY(one_device_programs_leave_other_devices_alone)
    TEST_ENTRY(device_reset_frees_the_programs_memory)
    TEST_ENTRY(freed_memory_goes_back_once_idle)
    TEST_ENTRY(device_reset_survives_a_failure_at_every_call)
    TEST_ENTRY(context_destroy_frees_its_memory)
    TEST_ENTRY(programs_own_device_memory_counts_under_the_limit)
    TEST_ENTRY(stream_ordered_memory_counts_and_spills)
    TEST_ENTRY(stats_json_is_written_at_exit)
    TEST_ENTRY(stats_file_never_follows_a_symlink)
    TEST_ENTRY(stats_text_goes_to_stderr)
    TEST_ENTRY(disable_makes_a_pure_pass_through)
    TEST_ENTRY(bad_configuration_stops_the_program)
    TEST_ENTRY(debug_log_lines_are_prefixed)
    TEST_ENTRY(host_side_copies_grant_every_block)
    TEST_ENTRY(handler_installed_late_keeps_lazy_access)
    TEST_ENTRY(forked_children_never_hang_nor_report)
};

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--mode")) {
        if (!strcmp(argv[2], "workload")) exit(workload());
        if (!strcmp(argv[2], "disabled")) exit(disabled_workload());
        if (!strcmp(argv[2], "tracking")) exit(tracking_workload());
        if (!strcmp(argv[2], "untracked")) exit(untracked_workload());
        if (!strcmp(argv[2], "struct-scan")) exit(struct_scan_workload());
        if (!strcmp(argv[2], "lazy")) exit(lazy_workload());
        if (!strcmp(argv[2], "pause-running")) exit(pause_running_workload());
        if (!strcmp(argv[2], "pause-racing")) exit(pause_racing_workload());
        if (!strcmp(argv[2], "partial")) exit(partial_workload());
        if (!strcmp(argv[2], "graph-threads")) exit(graph_threads_workload());
        if (!strcmp(argv[2], "usemark-streams")) exit(usemark_streams_workload());
        if (!strcmp(argv[2], "destroyed-stream")) exit(destroyed_stream_workload());
        if (!strcmp(argv[2], "swap-threads")) exit(swap_threads_workload());
        if (!strcmp(argv[2], "threads")) exit(threads_workload());
        if (!strcmp(argv[2], "one-device")) exit(one_device_workload());
        if (!strcmp(argv[2], "reset")) exit(reset_workload());
        if (!strcmp(argv[2], "reset-peer")) exit(reset_peer_workload());
        if (!strcmp(argv[2], "idle")) exit(idle_workload());
        if (!strcmp(argv[2], "idle-spill")) exit(idle_spill_workload());
        if (!strcmp(argv[2], "ctx-destroy")) exit(ctx_destroy_workload());
        if (!strcmp(argv[2], "reset-fault")) exit(reset_fault_workload());
        if (!strcmp(argv[2], "host-copies")) exit(host_side_copies_workload());
        if (!strcmp(argv[2], "late-handler")) exit(late_handler_workload());
        if (!strcmp(argv[2], "fork")) exit(fork_workload());
        if (!strcmp(argv[2], "own-vmm")) exit(own_vmm_workload());
        if (!strcmp(argv[2], "pool-access-first")) exit(pool_access_first_workload());
        if (!strcmp(argv[2], "async-limit")) exit(async_limit_workload());
        if (!strcmp(argv[2], "async-spill")) exit(async_spill_workload());
        if (!strcmp(argv[2], "own-vmm-spill")) exit(own_vmm_spill_workload());
        if (!strcmp(argv[2], "own-vmm-threads")) exit(own_vmm_threads_workload());
        if (!strcmp(argv[2], "nothing")) exit(0);
        return 2;
    }
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
