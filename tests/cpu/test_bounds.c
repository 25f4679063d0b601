/* Copies and sets at the edges of allocations, as a program linked with
 * libcuda makes them: this program links the simulated driver and runs
 * with LD_PRELOAD=libgvmshim.so, so its cu* calls land on gvmshim's hooks.
 *
 * The simulated driver answers for its own (native) allocations as the
 * real one does: a copy or set running one byte past the end of a
 * cuMemAlloc'd buffer fails with CUDA_ERROR_INVALID_VALUE (measured on an
 * H200 for 1000 and 3,000,000 bytes, H2D, D2H, D2D and memset alike).
 * Every case runs once on a buffer gvmshim serves and once on a native one
 * (cuMemAllocAsync from a pool the program made current stays with the
 * driver), and the answers must agree. */
#define _GNU_SOURCE
#include "gvmshim.h"
#include "linked.h"
#include "simcuda.h"

#include <dlfcn.h>
#include <stdint.h>

/* gvmshim's API, from the preloaded library. */
#define GVM(fn) ((__typeof__(&fn))dlsym(RTLD_DEFAULT, #fn))

static CUdeviceptr shim_alloc(size_t n)
{
    CUdeviceptr p = 0;
    CHECK_EQ(cuMemAlloc(&p, n), CUDA_SUCCESS);
    gvm_info info;
    CHECK_EQ(GVM(gvm_query)((void *)p, &info), GVM_OK);
    return p;
}

static CUdeviceptr native_alloc(size_t n)
{
    CUdeviceptr p = driver_alloc(n);
    gvm_info info;
    CHECK_EQ(GVM(gvm_query)((void *)p, &info), GVM_ERR_UNKNOWN_POINTER);
    return p;
}

static unsigned char host[8 * MiB];

/* Every way to touch [p + off, p + off + len) of device memory; returns
 * each call's answer in rc[] (the same order for every buffer). */
#define NCALLS 16
static void touch(CUdeviceptr p, size_t off, size_t len, CUdeviceptr scratch, CUresult *rc)
{
    CUdeviceptr at = p + off;
    int k = 0;
    rc[k++] = cuMemcpyHtoD(at, host, len);
    rc[k++] = cuMemcpyDtoH(host, at, len);
    rc[k++] = cuMemcpyDtoD(scratch, at, len);
    rc[k++] = cuMemcpyDtoD(at, scratch, len);
    rc[k++] = cuMemcpy(at, scratch, len);
    rc[k++] = cuMemcpyAsync(scratch, at, len, NULL);
    rc[k++] = cuMemcpyHtoDAsync(at, host, len, NULL);
    rc[k++] = cuMemcpyPeer(at, ctx, scratch, ctx, len);
    rc[k++] = cuMemsetD8(at, 0x5a, len);
    rc[k++] = cuMemsetD8Async(at, 0x5a, len, NULL);
    rc[k++] = cuMemsetD16(at, 0x5a5a, (len + 1) / 2);
    rc[k++] = cuMemsetD32(at, 0x5a5a5a5a, (len + 3) / 4);
    /* Rows of 100 bytes: the last row ends at len (rounded up to a row). */
    size_t rows = (len + 99) / 100;
    rc[k++] = cuMemsetD2D8(at, 100, 0x5a, 100, rows);
    CUDA_MEMCPY2D m = {0};
    m.srcMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = host;
    m.srcPitch = 100;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = at;
    m.dstPitch = 100;
    m.WidthInBytes = 100;
    m.Height = rows;
    rc[k++] = cuMemcpy2D(&m);
    CUDA_MEMCPY3D m3 = {0};
    m3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m3.srcDevice = at;
    m3.srcPitch = 100;
    m3.srcHeight = 1;
    m3.dstMemoryType = CU_MEMORYTYPE_HOST;
    m3.dstHost = host;
    m3.dstPitch = 100;
    m3.dstHeight = 1;
    m3.WidthInBytes = 100;
    m3.Height = 1;
    m3.Depth = rows;
    rc[k++] = cuMemcpy3D(&m3);
    CUdeviceptr d[2] = {scratch, at}, s[2] = {at, scratch};
    size_t z[2] = {len, len};
    CUmemcpyAttributes attr = {0};
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t idx = 0;
    rc[k++] = cuMemcpyBatchAsync_v2(d, s, z, 2, &attr, &idx, 1, NULL);
    CHECK_EQ(k, NCALLS);
}

static void expect_all(const CUresult *rc, CUresult want, const char *what, size_t n)
{
    for (int k = 0; k < NCALLS; k++)
        if (rc[k] != want) {
            fprintf(stderr, "%s (%zu bytes): call %d returned %d, want %d\n", what, n, k, rc[k], want);
            exit(1);
        }
}

/* touch() on a gvmshim buffer and a native one of n bytes: same answers. */
static void same_answers(size_t n, size_t off, size_t len, CUresult want, const char *what)
{
    CUdeviceptr scratch = shim_alloc(8 * MiB);
    CUdeviceptr s = shim_alloc(n), v = native_alloc(n);
    CUresult rs[NCALLS], rv[NCALLS];
    touch(v, off, len, scratch, rv);
    touch(s, off, len, scratch, rs);
    expect_all(rv, want, what, n);   /* the sim answers as the real driver */
    expect_all(rs, want, what, n);
    CHECK_EQ(cuMemFree(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeAsync(v, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(scratch), CUDA_SUCCESS);
}

static const size_t measured[] = {1000, 3000000};

static void copies_and_sets_within_bounds_work(void)
{
    start();
    for (int i = 0; i < 2; i++) {
        same_answers(measured[i], 0, measured[i], CUDA_SUCCESS, "whole buffer");
        same_answers(measured[i], 100, measured[i] - 100, CUDA_SUCCESS, "up to the end");
    }
}

static void one_byte_past_the_end_is_invalid_as_natively(void)
{
    start();
    for (int i = 0; i < 2; i++) {
        same_answers(measured[i], 0, measured[i] + 1, CUDA_ERROR_INVALID_VALUE, "one byte past");
        same_answers(measured[i], 100, measured[i] - 99, CUDA_ERROR_INVALID_VALUE, "one byte past, offset");
        same_answers(measured[i], measured[i] - 1, 2, CUDA_ERROR_INVALID_VALUE, "last byte and one more");
    }
}

/* The failed calls wrote nothing: the neighbour in the same chunk (a small
 * allocation) or the rounding of a large one keeps its bytes. */
static void a_refused_call_leaves_the_neighbour_intact(void)
{
    start();
    CUdeviceptr a = shim_alloc(1000), b = shim_alloc(1000);
    gvm_info ia, ib;
    CHECK_EQ(GVM(gvm_query)((void *)a, &ia), GVM_OK);
    CHECK_EQ(GVM(gvm_query)((void *)b, &ib), GVM_OK);
    CHECK(ia.chunk_base == ib.chunk_base);           /* neighbours in one chunk */
    CUdeviceptr lo = a < b ? a : b, hi = a < b ? b : a;
    CHECK_EQ(cuMemsetD8(hi, 0x11, 1000), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8(lo, 0x22, (size_t)(hi - lo) + 1), CUDA_ERROR_INVALID_VALUE);
    memset(host, 0x33, 4096);
    CHECK_EQ(cuMemcpyHtoD(lo, host, (size_t)(hi - lo) + 16), CUDA_ERROR_INVALID_VALUE);
    unsigned char out[1000];
    CHECK_EQ(cuMemcpyDtoH(out, hi, 1000), CUDA_SUCCESS);
    for (int i = 0; i < 1000; i++) CHECK_EQ(out[i], 0x11);
}

/* Memory in gvmshim's ranges that is no live allocation: a slot's padding,
 * a large allocation's rounding, a freed allocation. */
static void memory_outside_live_allocations_is_invalid(void)
{
    start();
    CUdeviceptr s = shim_alloc(1000), l = shim_alloc(3000000);
    unsigned char b[16] = {0};
    CHECK_EQ(cuMemcpyHtoD(s + 1000, b, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemsetD8(s + 1010, 0, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemcpyHtoD(l + 3000000, b, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemcpyDtoH(b, l + 4 * MiB - 16, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemFree(l), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyHtoD(l, b, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemsetD8(s, 0, 16), CUDA_ERROR_INVALID_VALUE);
    /* Natively too (the sim answers for a freed native allocation). */
    CUdeviceptr v = native_alloc(1000);
    CHECK_EQ(cuMemFreeAsync(v, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyHtoD(v, b, 16), CUDA_ERROR_INVALID_VALUE);
}

/* An alias shows the allocation at a second address: the same bounds. */
static void an_alias_has_the_allocation_bounds(void)
{
    start();
    CUdeviceptr p = shim_alloc(3000000), s = shim_alloc(1000);
    CUdeviceptr scratch = shim_alloc(8 * MiB);
    void *ap = NULL, *as = NULL;
    CHECK_EQ(GVM(gvm_alias)((void *)p, &ap), GVM_OK);
    CHECK_EQ(GVM(gvm_alias)((void *)s, &as), GVM_OK);
    CUresult rc[NCALLS];
    touch((CUdeviceptr)ap, 0, 3000000, scratch, rc);
    expect_all(rc, CUDA_SUCCESS, "alias, whole", 3000000);
    touch((CUdeviceptr)ap, 0, 3000001, scratch, rc);
    expect_all(rc, CUDA_ERROR_INVALID_VALUE, "alias, one past", 3000000);
    touch((CUdeviceptr)as, 0, 1000, scratch, rc);
    expect_all(rc, CUDA_SUCCESS, "alias of a small one, whole", 1000);
    touch((CUdeviceptr)as, 0, 1001, scratch, rc);
    expect_all(rc, CUDA_ERROR_INVALID_VALUE, "alias of a small one, one past", 1000);
}

/* An alias outlives the allocation the program freed: copies through it
 * keep working, within the freed allocation's bounds. */
static void an_alias_keeps_its_bounds_after_the_free(void)
{
    start();
    CUdeviceptr p = shim_alloc(3000000), s = shim_alloc(1000);
    void *ap = NULL, *as = NULL;
    CHECK_EQ(GVM(gvm_alias)((void *)p, &ap), GVM_OK);
    CHECK_EQ(GVM(gvm_alias)((void *)s, &as), GVM_OK);
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8((CUdeviceptr)ap, 7, 3000000), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8((CUdeviceptr)ap + 2999999, 7, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemsetD8((CUdeviceptr)as, 7, 1000), CUDA_SUCCESS);
    unsigned char b[1000];
    CHECK_EQ(cuMemcpyDtoH(b, (CUdeviceptr)as, 1000), CUDA_SUCCESS);
    CHECK_EQ(b[999], 7);
    CHECK_EQ(cuMemcpyDtoH(b, (CUdeviceptr)ap + 2999000, 1000), CUDA_SUCCESS);
    CHECK_EQ(b[999], 7);
    CHECK_EQ(GVM(gvm_unalias)(ap), GVM_OK);
    CHECK_EQ(cuMemsetD8((CUdeviceptr)ap, 7, 16), CUDA_ERROR_INVALID_VALUE);
}

/* An allocation living in host memory, passed as the host side of a copy:
 * bounded like a device side. */
static void a_host_resident_allocation_as_the_host_side(void)
{
    start();
    CUdeviceptr p = shim_alloc(3000000), scratch = shim_alloc(4 * MiB);
    CHECK_EQ(GVM(gvm_migrate)((void *)p, GVM_HOST), GVM_OK);
    CHECK_EQ(cuMemcpyHtoD(scratch, (void *)p, 3000000), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoH((void *)(p + 1000), scratch, 2999000), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyHtoD(scratch, (void *)p, 3000001), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemcpyDtoH((void *)(p + 1000), scratch, 2999001), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D m = {0};
    m.srcMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = (void *)(p + 1);
    m.srcPitch = 100;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = scratch;
    m.dstPitch = 100;
    m.WidthInBytes = 100;
    m.Height = 30000;
    CHECK_EQ(cuMemcpy2D(&m), CUDA_ERROR_INVALID_VALUE);
    m.srcHost = (void *)p;
    CHECK_EQ(cuMemcpy2D(&m), CUDA_SUCCESS);
}

/* Extents whose products wrap: no allocation is that large. */
static void extents_that_overflow_are_invalid(void)
{
    start();
    CUdeviceptr p = shim_alloc(3000000), v = native_alloc(3000000);
    CUdeviceptr bufs[2] = {p, v};
    for (int i = 0; i < 2; i++) {
        CUdeviceptr at = bufs[i];
        CHECK_EQ(cuMemsetD32(at, 0, SIZE_MAX / 4 + 2), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(cuMemsetD2D8(at, SIZE_MAX / 2, 0, 16, 3), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(cuMemsetD2D32(at, 64, 0, SIZE_MAX / 2, 2), CUDA_ERROR_INVALID_VALUE);
        CUDA_MEMCPY2D m = {0};
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = at;
        m.srcPitch = SIZE_MAX / 2;
        m.srcY = 2;
        m.dstMemoryType = CU_MEMORYTYPE_HOST;
        m.dstHost = host;
        m.dstPitch = 16;
        m.WidthInBytes = 16;
        m.Height = 1;
        CHECK_EQ(cuMemcpy2D(&m), CUDA_ERROR_INVALID_VALUE);
    }
}

/* A batch with one entry past the end copies nothing. */
static void a_batch_with_one_bad_entry_copies_nothing(void)
{
    start();
    CUdeviceptr s = shim_alloc(1000), v = native_alloc(1000);
    CUdeviceptr bufs[2] = {s, v};
    for (int i = 0; i < 2; i++) {
        CUdeviceptr scratch = shim_alloc(4096);
        CHECK_EQ(cuMemsetD8(scratch, 0x77, 4096), CUDA_SUCCESS);
        CHECK_EQ(cuMemsetD8(bufs[i], 0x11, 1000), CUDA_SUCCESS);
        CUdeviceptr d[3] = {bufs[i], bufs[i] + 500, scratch}, src[3] = {scratch, scratch, bufs[i]};
        size_t z[3] = {100, 501, 1000};
        CUmemcpyAttributes attr = {0};
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        size_t idx = 0;
        CHECK_EQ(cuMemcpyBatchAsync_v2(d, src, z, 3, &attr, &idx, 1, NULL), CUDA_ERROR_INVALID_VALUE);
        unsigned char out[1000];
        CHECK_EQ(cuMemcpyDtoH(out, bufs[i], 1000), CUDA_SUCCESS);
        for (int j = 0; j < 1000; j++) CHECK_EQ(out[j], 0x11);
    }
}

/* A count whose arrays could not exist: 2 * count pointers would wrap. */
static void a_batch_count_that_overflows_is_refused(void)
{
    start();
    CUdeviceptr s = shim_alloc(1000), scratch = shim_alloc(4096);
    CUdeviceptr d[4] = {s, s, s, s}, src[4] = {scratch, scratch, scratch, scratch};
    size_t z[4] = {8, 8, 8, 8};
    CUmemcpyAttributes attr = {0};
    size_t idx = 0;
    size_t count = SIZE_MAX / 8 + 2;   /* 16 * count wraps to 16 */
    CHECK_EQ(cuMemcpyBatchAsync_v2(d, src, z, count, &attr, &idx, 1, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* width x height that wraps is no small allocation: the driver answers. */
static void pitched_allocation_that_overflows_is_the_native_error(void)
{
    start();
    long native = simcuda_live_native();
    CUdeviceptr p = 0;
    size_t pitch = 0;
    size_t wide = ((size_t)1 << 63) + ((size_t)1 << 19);   /* x 2 wraps to 1 MiB */
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, wide, 2, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, SIZE_MAX - 10, 1, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, (size_t)1 << 40, (size_t)1 << 10, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(simcuda_live_native(), native);
    /* A pitched allocation that fits is gvmshim's, bounded by pitch x height. */
    CHECK_EQ(cuMemAllocPitch(&p, &pitch, 1000, 3, 4), CUDA_SUCCESS);
    CHECK_EQ(pitch, 1024);
    CHECK_EQ(cuMemsetD2D8(p, pitch, 1, 1000, 3), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD2D8(p, pitch, 1, 1000, 4), CUDA_ERROR_INVALID_VALUE);
}

/* ---- the driver table cannot be loaded: gvmshim must be invisible ------- */

static int run_self(const char *mode, const char *env)
{
    pid_t pid = fork();
    if (pid == 0) {
        putenv((char *)env);
        execl("/proc/self/exe", "test-bounds", "--mode", mode, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return test_exit_code(status);
}

static int linked_program_without_a_driver_table(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn != NULL);
    void *fn1 = NULL;
    CHECK_EQ(cuGetProcAddress("cuMemFree", &fn1, 12000, 0), CUDA_SUCCESS);
    CHECK(fn1 != NULL);
    start();
    CUdeviceptr p = 0;
    CHECK_EQ(((__typeof__(cuMemAlloc_v2) *)fn)(&p, 4096), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD8(p, 1, 4096), CUDA_SUCCESS);
    CHECK_EQ(((__typeof__(cuMemFree_v2) *)fn1)(p), CUDA_SUCCESS);
    gvm_info info;
    CHECK(GVM(gvm_query)((void *)p, &info) != GVM_OK);   /* nothing was served */
    return 0;
}

static void resolvers_pass_through_when_the_driver_cannot_be_loaded(void)
{
    CHECK_EQ(run_self("no-driver", "GVM_LIBCUDA=/nonexistent/libcuda.so.1"), 0);
    /* A library that loads but has none of the entry points. */
    CHECK_EQ(run_self("no-driver", "GVM_LIBCUDA=libm.so.6"), 0);
}

static const struct test_case cases[] = {
    TEST_ENTRY(copies_and_sets_within_bounds_work)
    TEST_ENTRY(one_byte_past_the_end_is_invalid_as_natively)
    TEST_ENTRY(a_refused_call_leaves_the_neighbour_intact)
    TEST_ENTRY(memory_outside_live_allocations_is_invalid)
    TEST_ENTRY(an_alias_has_the_allocation_bounds)
    TEST_ENTRY(an_alias_keeps_its_bounds_after_the_free)
    TEST_ENTRY(a_host_resident_allocation_as_the_host_side)
    TEST_ENTRY(extents_that_overflow_are_invalid)
    TEST_ENTRY(a_batch_with_one_bad_entry_copies_nothing)
    TEST_ENTRY(a_batch_count_that_overflows_is_refused)
    TEST_ENTRY(pitched_allocation_that_overflows_is_the_native_error)
    TEST_ENTRY(resolvers_pass_through_when_the_driver_cannot_be_loaded)
};

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--mode")) {
        if (!strcmp(argv[2], "no-driver")) exit(linked_program_without_a_driver_table());
        return 2;
    }
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
