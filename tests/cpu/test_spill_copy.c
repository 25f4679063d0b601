/* Copies and sets on memory spilled to host, as a program linked with
 * libcuda makes them: this program links the simulated driver and runs
 * with LD_PRELOAD=libgvmshim.so under a device limit small enough that
 * its buffers spill (the test's env: GVM_DEVICE_LIMIT=0:64M,
 * GVM_SPILL=host; run once with the spilled memory mapped on host and once
 * lazily, GVM_SPILL_HOST_MAP=lazy, its addresses unmapped). Every variant
 * the hooks intercept must move exactly the bytes it moves natively,
 * answer a bad span as natively, and never let a move unmap memory that
 * queued work still reaches (SIMCUDA_KERNELS_IN_FLIGHT=fatal). */
#define _GNU_SOURCE
#include "gvmshim.h"
#include "linked.h"
#include "../memop_params.h"
#include "simcuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define LIMIT (64 * MiB)   /* GVM_DEVICE_LIMIT of the test's env */
#define BUF (8 * MiB)      /* several blocks (GVM_BLOCK_SIZE=2M) */

static bool lazy(void)
{
    const char *m = getenv("GVM_SPILL_HOST_MAP");
    return m && !strcmp(m, "lazy");
}

/* Where spilled memory is, as the sim sees it. */
static int spilled_loc(void) { return lazy() ? SIMCUDA_LOC_UNMAPPED : SIMCUDA_LOC_HOST; }

static uint8_t byte_at(size_t i, unsigned seed) { return (uint8_t)((i * 2654435761u) >> 9 ^ seed); }

static uint8_t pattern_buf[BUF];

/* The pattern loops below touch only the test's own buffers, a byte at a
 * time: instrumented, they were most of a sanitizer run's time, and there
 * is nothing for ASan or TSan to find in them (the driver's side of every
 * copy stays instrumented). */
#define UNCHECKED __attribute__((no_sanitize("address", "thread")))

UNCHECKED static void fill(CUdeviceptr p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) pattern_buf[i] = byte_at(i, seed);
    CHECK_EQ(cuMemcpyHtoD(p, pattern_buf, n), CUDA_SUCCESS);
}

/* Everything resident leaves: an allocation of the whole limit evicts the
 * least recently used first, so all of it. */
static void spill_all(void)
{
    CUdeviceptr f;
    CHECK_EQ(cuMemAlloc(&f, LIMIT), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(f), CUDA_SUCCESS);
}

/* n bytes of pattern `seed`, spilled to host. */
static CUdeviceptr spilled(size_t n, unsigned seed)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, n), CUDA_SUCCESS);
    fill(p, n, seed);
    spill_all();
    CHECK_EQ(simcuda_location_of(p), spilled_loc());
    return p;
}

static CUdeviceptr resident(size_t n, unsigned seed)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, n), CUDA_SUCCESS);
    fill(p, n, seed);
    CHECK_EQ(simcuda_location_of(p), 0);
    return p;
}

static uint8_t out_buf[BUF];

/* [p, p+n) holds pattern `seed` shifted by `from`: byte i is byte_at(from + i). */
UNCHECKED static void expect(CUdeviceptr p, size_t n, size_t from, unsigned seed, const char *what)
{
    CHECK_EQ(cuMemcpyDtoH(out_buf, p, n), CUDA_SUCCESS);
    for (size_t i = 0; i < n; i++)
        if (out_buf[i] != byte_at(from + i, seed)) {
            fprintf(stderr, "%s: byte %zu is %#x, want %#x\n", what, i, out_buf[i], byte_at(from + i, seed));
            exit(1);
        }
}

/* ---- every copy variant ---- */

enum { V_MEMCPY, V_MEMCPY_PTDS, V_ASYNC, V_ASYNC_PTSZ, V_DTOD, V_DTOD_ASYNC, V_PEER, V_PEER_ASYNC, V_2D, V_2D_UNALIGNED,
       V_2D_ASYNC, V_3D, V_3D_ASYNC, V_3D_PEER, V_3D_PEER_ASYNC, V_BATCH, V_BATCH_V1, V_BATCH_V1_PTSZ, V_3D_BATCH,
       V_3D_BATCH_PTSZ, V_3D_BATCH_V1, V_DTOH, V_DTOH_ASYNC, V_HTOD, V_HTOD_ASYNC, NVARIANTS };

static const char *const variant_name[NVARIANTS] = {
    "cuMemcpy",      "cuMemcpy_ptds",     "cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuMemcpyDtoD",
    "cuMemcpyDtoDAsync", "cuMemcpyPeer",  "cuMemcpyPeerAsync", "cuMemcpy2D",   "cuMemcpy2DUnaligned",
    "cuMemcpy2DAsync", "cuMemcpy3D",      "cuMemcpy3DAsync", "cuMemcpy3DPeer",  "cuMemcpy3DPeerAsync",
    "cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz", "cuMemcpy3DBatchAsync_v2",
    "cuMemcpy3DBatchAsync_v2_ptsz", "cuMemcpy3DBatchAsync", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuMemcpyHtoD",
    "cuMemcpyHtoDAsync"};

static bool device_to_device(int v) { return v < V_DTOH; }

/* The per-thread-stream variants, from the preloaded library. */
#define HOOK(fn, name) ((__typeof__(&fn))dlsym(RTLD_DEFAULT, name))

static CUDA_MEMCPY2D desc_2d(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    CUDA_MEMCPY2D m = {0};
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = src;
    m.srcPitch = n / 4;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = dst;
    m.dstPitch = n / 4;
    m.WidthInBytes = n / 4;
    m.Height = 4;
    return m;
}

/* 2 layers of 2 rows of n/4 bytes: contiguous, n bytes in all. */
#define DESC_3D(m, dst, src, n)                                                \
    do {                                                                       \
        memset(&(m), 0, sizeof(m));                                            \
        (m).srcMemoryType = CU_MEMORYTYPE_DEVICE;                              \
        (m).srcDevice = (src);                                                 \
        (m).srcPitch = (n) / 4;                                                \
        (m).srcHeight = 2;                                                     \
        (m).dstMemoryType = CU_MEMORYTYPE_DEVICE;                              \
        (m).dstDevice = (dst);                                                 \
        (m).dstPitch = (n) / 4;                                                \
        (m).dstHeight = 2;                                                     \
        (m).WidthInBytes = (n) / 4;                                            \
        (m).Height = 2;                                                        \
        (m).Depth = 2;                                                         \
    } while (0)

/* The same 2 x 2 x n/4 copy as one operation of a 3D batch. */
static CUDA_MEMCPY3D_BATCH_OP batch_op_3d(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    CUDA_MEMCPY3D_BATCH_OP op;
    memset(&op, 0, sizeof op);
    op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.src.op.ptr.ptr = src;
    op.src.op.ptr.rowLength = n / 4;
    op.src.op.ptr.layerHeight = 2;
    op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.dst.op.ptr.ptr = dst;
    op.extent.width = n / 4;
    op.extent.height = 2;
    op.extent.depth = 2;
    op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    return op;
}

/* Copies n bytes (a multiple of 4) from src to dst with variant v; for
 * the host variants one side goes through host memory (`host`, n bytes),
 * the device side being dst (HtoD) or src (DtoH). Asynchronous ones are
 * waited for on their stream. */
static CUresult copy_with(int v, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, void *host)
{
    CUresult rc;
    CUDA_MEMCPY2D m2 = desc_2d(dst, src, n);
    CUDA_MEMCPY3D m3;
    CUDA_MEMCPY3D_PEER mp;
    DESC_3D(m3, dst, src, n);
    DESC_3D(mp, dst, src, n);
    mp.srcContext = ctx;
    mp.dstContext = ctx;
    CUdeviceptr d[1] = {dst}, sr[1] = {src};
    size_t z[1] = {n}, idx = 0;
    CUmemcpyAttributes attr = {0};
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    CUDA_MEMCPY3D_BATCH_OP op = batch_op_3d(dst, src, n);
    size_t fail = 12345;
    switch (v) {
    case V_MEMCPY: rc = cuMemcpy(dst, src, n); break;
    case V_MEMCPY_PTDS: rc = HOOK(cuMemcpy, "cuMemcpy_ptds")(dst, src, n); break;
    case V_ASYNC: rc = cuMemcpyAsync(dst, src, n, s); break;
    case V_ASYNC_PTSZ: rc = HOOK(cuMemcpyAsync, "cuMemcpyAsync_ptsz")(dst, src, n, s); break;
    case V_DTOD: rc = cuMemcpyDtoD(dst, src, n); break;
    case V_DTOD_ASYNC: rc = cuMemcpyDtoDAsync(dst, src, n, s); break;
    case V_PEER: rc = cuMemcpyPeer(dst, ctx, src, ctx, n); break;
    case V_PEER_ASYNC: rc = cuMemcpyPeerAsync(dst, ctx, src, ctx, n, s); break;
    case V_2D: rc = cuMemcpy2D(&m2); break;
    case V_2D_UNALIGNED: rc = cuMemcpy2DUnaligned(&m2); break;
    case V_2D_ASYNC: rc = cuMemcpy2DAsync(&m2, s); break;
    case V_3D: rc = cuMemcpy3D(&m3); break;
    case V_3D_ASYNC: rc = cuMemcpy3DAsync(&m3, s); break;
    case V_3D_PEER: rc = cuMemcpy3DPeer(&mp); break;
    case V_3D_PEER_ASYNC: rc = cuMemcpy3DPeerAsync(&mp, s); break;
    case V_BATCH: rc = cuMemcpyBatchAsync_v2(d, sr, z, 1, &attr, &idx, 1, s); break;
    case V_BATCH_V1: rc = cuMemcpyBatchAsync(d, sr, z, 1, &attr, &idx, 1, &fail, s); break;
    case V_BATCH_V1_PTSZ:
        rc = HOOK(cuMemcpyBatchAsync, "cuMemcpyBatchAsync_ptsz")(d, sr, z, 1, &attr, &idx, 1, &fail, s);
        break;
    case V_3D_BATCH: rc = cuMemcpy3DBatchAsync_v2(1, &op, 0, s); break;
    case V_3D_BATCH_PTSZ:
        rc = HOOK(cuMemcpy3DBatchAsync_v2, "cuMemcpy3DBatchAsync_v2_ptsz")(1, &op, 0, s);
        break;
    case V_3D_BATCH_V1: rc = cuMemcpy3DBatchAsync(1, &op, &fail, 0, s); break;
    case V_DTOH: rc = cuMemcpyDtoH(host, src, n); break;
    case V_DTOH_ASYNC: rc = cuMemcpyDtoHAsync(host, src, n, s); break;
    case V_HTOD: rc = cuMemcpyHtoD(dst, host, n); break;
    default: rc = cuMemcpyHtoDAsync(dst, host, n, s); break;
    }
    if (rc == CUDA_SUCCESS) CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    /* CUDA 12.8's batches name the one bad copy of the one. */
    if (rc != CUDA_SUCCESS && (v == V_BATCH_V1 || v == V_BATCH_V1_PTSZ || v == V_3D_BATCH_V1)) CHECK_EQ(fail, 0);
    return rc;
}

/* A window across a block boundary, in the middle of the buffer. */
#define OFF (3 * MiB - 4096)
#define LEN (2 * MiB + 8192)

static uint8_t host_buf[BUF];

/* From the middle of a spilled buffer into a resident one. */
static void copies_from_spilled_memory_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int v = 0; v < NVARIANTS; v++) {
        CUdeviceptr src = spilled(BUF, 1), dst = resident(BUF, 2);
        if (device_to_device(v)) {
            CHECK_EQ(copy_with(v, dst + MiB, src + OFF, LEN, s, NULL), CUDA_SUCCESS);
            expect(dst, MiB, 0, 2, variant_name[v]);
            expect(dst + MiB, LEN, OFF, 1, variant_name[v]);
            expect(dst + MiB + LEN, BUF - MiB - LEN, MiB + LEN, 2, variant_name[v]);
        } else if (v == V_DTOH || v == V_DTOH_ASYNC) {
            memset(host_buf, 0, LEN);
            CHECK_EQ(copy_with(v, 0, src + OFF, LEN, s, host_buf), CUDA_SUCCESS);
            for (size_t i = 0; i < LEN; i++) CHECK_EQ(host_buf[i], byte_at(OFF + i, 1));
        }
        expect(src, BUF, 0, 1, variant_name[v]);   /* the source unchanged */
        CHECK_EQ(cuMemFree(src), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(dst), CUDA_SUCCESS);
    }
}

/* Into the middle of a spilled buffer: the window changes, nothing else. */
static void copies_into_spilled_memory_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int v = 0; v < NVARIANTS; v++) {
        if (v == V_DTOH || v == V_DTOH_ASYNC) continue;
        CUdeviceptr src = resident(BUF, 3), dst = spilled(BUF, 4);
        for (size_t i = 0; i < LEN; i++) host_buf[i] = byte_at(MiB + i, 3);
        CHECK_EQ(copy_with(v, dst + OFF, src + MiB, LEN, s, host_buf), CUDA_SUCCESS);
        expect(dst, OFF, 0, 4, variant_name[v]);
        expect(dst + OFF, LEN, MiB, 3, variant_name[v]);
        expect(dst + OFF + LEN, BUF - OFF - LEN, OFF + LEN, 4, variant_name[v]);
        CHECK_EQ(cuMemFree(src), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(dst), CUDA_SUCCESS);
    }
}

/* Source and destination both spilled: two allocations, then two windows
 * of one. */
static void copies_between_spilled_buffers_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int v = 0; v < V_DTOH; v++) {
        CUdeviceptr src, dst;
        CHECK_EQ(cuMemAlloc(&src, BUF), CUDA_SUCCESS);
        CHECK_EQ(cuMemAlloc(&dst, BUF), CUDA_SUCCESS);
        fill(src, BUF, 5);
        fill(dst, BUF, 6);
        spill_all();
        CHECK_EQ(simcuda_location_of(src), spilled_loc());
        CHECK_EQ(simcuda_location_of(dst), spilled_loc());
        CHECK_EQ(copy_with(v, dst + OFF, src + MiB, LEN, s, NULL), CUDA_SUCCESS);
        expect(dst, OFF, 0, 6, variant_name[v]);
        expect(dst + OFF, LEN, MiB, 5, variant_name[v]);
        expect(dst + OFF + LEN, BUF - OFF - LEN, OFF + LEN, 6, variant_name[v]);
        expect(src, BUF, 0, 5, variant_name[v]);
        CHECK_EQ(cuMemFree(src), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(dst), CUDA_SUCCESS);
        /* Within one spilled buffer: its first half to its second. */
        CUdeviceptr one = spilled(BUF, 7);
        CHECK_EQ(copy_with(v, one + BUF / 2, one, LEN, s, NULL), CUDA_SUCCESS);
        expect(one, BUF / 2, 0, 7, variant_name[v]);
        expect(one + BUF / 2, LEN, 0, 7, variant_name[v]);
        expect(one + BUF / 2 + LEN, BUF / 2 - LEN, BUF / 2 + LEN, 7, variant_name[v]);
        CHECK_EQ(cuMemFree(one), CUDA_SUCCESS);
    }
}

/* ---- sets ---- */

enum { S_D8, S_D16, S_D32, S_D8_ASYNC, S_D16_ASYNC, S_D32_ASYNC, S_2D8, S_2D16, S_2D32, S_2D8_ASYNC, S_2D16_ASYNC,
       S_2D32_ASYNC, NSETS };

/* Sets n bytes (a multiple of 4096) at p to 0xab with variant v; the 2D
 * ones as rows of 1024 bytes, 1024 apart (contiguous). */
static CUresult set_with(int v, CUdeviceptr p, size_t n, CUstream s)
{
    CUresult rc;
    size_t w = 1024, h = n / 1024;
    switch (v) {
    case S_D8: rc = cuMemsetD8(p, 0xab, n); break;
    case S_D16: rc = cuMemsetD16(p, 0xabab, n / 2); break;
    case S_D32: rc = cuMemsetD32(p, 0xabababab, n / 4); break;
    case S_D8_ASYNC: rc = cuMemsetD8Async(p, 0xab, n, s); break;
    case S_D16_ASYNC: rc = cuMemsetD16Async(p, 0xabab, n / 2, s); break;
    case S_D32_ASYNC: rc = cuMemsetD32Async(p, 0xabababab, n / 4, s); break;
    case S_2D8: rc = cuMemsetD2D8(p, w, 0xab, w, h); break;
    case S_2D16: rc = cuMemsetD2D16(p, w, 0xabab, w / 2, h); break;
    case S_2D32: rc = cuMemsetD2D32(p, w, 0xabababab, w / 4, h); break;
    case S_2D8_ASYNC: rc = cuMemsetD2D8Async(p, w, 0xab, w, h, s); break;
    case S_2D16_ASYNC: rc = cuMemsetD2D16Async(p, w, 0xabab, w / 2, h, s); break;
    default: rc = cuMemsetD2D32Async(p, w, 0xabababab, w / 4, h, s); break;
    }
    if (rc == CUDA_SUCCESS) CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    return rc;
}

static void sets_into_spilled_memory_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int v = 0; v < NSETS; v++) {
        CUdeviceptr p = spilled(BUF, 8);
        CHECK_EQ(set_with(v, p + OFF, LEN, s), CUDA_SUCCESS);
        expect(p, OFF, 0, 8, "set: before");
        CHECK_EQ(cuMemcpyDtoH(out_buf, p + OFF, LEN), CUDA_SUCCESS);
        for (size_t i = 0; i < LEN; i++) CHECK_EQ(out_buf[i], 0xab);
        expect(p + OFF + LEN, BUF - OFF - LEN, OFF + LEN, 8, "set: after");
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    }
}

/* ---- bad spans ---- */


/* One byte past the end of a spilled buffer, from it and into it, with
 * every variant: the native answer, and nothing written. */
static void past_the_end_of_spilled_memory_is_invalid_as_natively(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr nat = driver_alloc(BUF), other = driver_alloc(BUF);
    for (int v = 0; v < NVARIANTS; v++) {
        bool into = v == V_HTOD || v == V_HTOD_ASYNC;
        CUresult want = into ? copy_with(v, nat + BUF / 2, 0, BUF / 2 + 4, s, host_buf)
                             : copy_with(v, other, nat + BUF / 2, BUF / 2 + 4, s, host_buf);
        CHECK_EQ(want, CUDA_ERROR_INVALID_VALUE);
        CUdeviceptr p = spilled(BUF, 9), dst = resident(BUF, 10);
        CUresult got = into ? copy_with(v, p + BUF / 2, 0, BUF / 2 + 4, s, host_buf)
                            : copy_with(v, dst, p + BUF / 2, BUF / 2 + 4, s, host_buf);
        if (got != want) fprintf(stderr, "%s from spilled memory: %d, natively %d\n", variant_name[v], got, want);
        CHECK_EQ(got, want);
        if (device_to_device(v)) {
            got = copy_with(v, p + BUF / 2, dst, BUF / 2 + 4, s, NULL);
            if (got != want) fprintf(stderr, "%s into spilled memory: %d, natively %d\n", variant_name[v], got, want);
            CHECK_EQ(got, want);
        }
        expect(p, BUF, 0, 9, variant_name[v]);
        expect(dst, BUF, 0, 10, variant_name[v]);
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(dst), CUDA_SUCCESS);
    }
    for (int v = 0; v < NSETS; v++) {
        CUresult want = set_with(v, nat + BUF / 2, BUF / 2 + 4096, s);
        CHECK_EQ(want, CUDA_ERROR_INVALID_VALUE);
        CUdeviceptr p = spilled(BUF, 11);
        CHECK_EQ(set_with(v, p + BUF / 2, BUF / 2 + 4096, s), want);
        expect(p, BUF, 0, 11, "a refused set");
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    }
}

/* A copy running from one spilled allocation into the next one, adjacent
 * in the address space or not: natively two allocations are two, and the
 * copy fails (nothing written on either). */
static void a_copy_spanning_two_spilled_allocations_is_invalid(void)
{
    start();
    CUdeviceptr a, b, dst = 0;
    CHECK_EQ(cuMemAlloc(&a, BUF), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc(&b, BUF), CUDA_SUCCESS);
    fill(a, BUF, 12);
    fill(b, BUF, 13);
    spill_all();
    CHECK_EQ(cuMemAlloc(&dst, 2 * BUF), CUDA_SUCCESS);
    fill(dst, BUF, 14);
    fill(dst + BUF, BUF, 14);
    CUdeviceptr lo = a < b ? a : b;
    CHECK_EQ(cuMemcpyDtoD(dst, lo + BUF / 2, BUF), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemcpyDtoD(lo + BUF / 2, dst, BUF), CUDA_ERROR_INVALID_VALUE);
    /* Every device-to-device variant, from and into: the batches and the
     * pitched ones compute their spans their own way. */
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int v = 0; v < V_DTOH; v++) {
        CUresult from = copy_with(v, dst, lo + BUF / 2, BUF, s, NULL);
        CUresult into = copy_with(v, lo + BUF / 2, dst, BUF, s, NULL);
        if (from != CUDA_ERROR_INVALID_VALUE || into != CUDA_ERROR_INVALID_VALUE)
            fprintf(stderr, "%s across two allocations: from %d, into %d\n", variant_name[v], from, into);
        CHECK_EQ(from, CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(into, CUDA_ERROR_INVALID_VALUE);
    }
    CHECK_EQ(cuMemsetD8(lo + BUF / 2, 0, BUF), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemcpyDtoH(host_buf, lo + BUF / 2, BUF), CUDA_ERROR_INVALID_VALUE);
    expect(a, BUF, 0, 12, "first");
    expect(b, BUF, 0, 13, "second");
    expect(dst, BUF, 0, 14, "destination");
}

/* Small allocations share a chunk (small_max): the memory past one's end
 * is its neighbour's, mapped, so only gvmshim's bound refuses a call that
 * runs over, never the driver's view of the mapping. Every device-to-
 * device copy variant, and memory operations on the slot once the
 * neighbour is freed. */
#define SMALL (64 * 1024)

static void calls_running_into_a_packed_neighbour_are_invalid(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b, dst;
    CHECK_EQ(cuMemAlloc(&a, SMALL), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc(&b, SMALL), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc(&dst, 2 * SMALL), CUDA_SUCCESS);
    gvm_status (*query)(const void *, gvm_info *) = (gvm_status(*)(const void *, gvm_info *))dlsym(RTLD_DEFAULT,
                                                                                                  "gvm_query");
    gvm_info ia, ib;
    CHECK_EQ(query((void *)a, &ia), GVM_OK);
    CHECK_EQ(query((void *)b, &ib), GVM_OK);
    CHECK(ia.packed && ib.packed && ia.chunk_base == ib.chunk_base);
    CUdeviceptr lo = a < b ? a : b, hi = a < b ? b : a;
    CHECK_EQ(hi, lo + SMALL);   /* neighbours: the run-over lands in mapped memory */
    fill(lo, SMALL, 70);
    fill(hi, SMALL, 71);
    fill(dst, 2 * SMALL, 72);
    for (int v = 0; v < V_DTOH; v++) {
        CUresult from = copy_with(v, dst, lo + SMALL / 2, SMALL, s, NULL);
        CUresult into = copy_with(v, lo + SMALL / 2, dst, SMALL, s, NULL);
        if (from != CUDA_ERROR_INVALID_VALUE || into != CUDA_ERROR_INVALID_VALUE)
            fprintf(stderr, "%s into the neighbour: from %d, into %d\n", variant_name[v], from, into);
        CHECK_EQ(from, CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(into, CUDA_ERROR_INVALID_VALUE);
    }
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    expect(lo, SMALL, 0, 70, "the first");
    expect(hi, SMALL, 0, 71, "the neighbour");
    expect(dst, 2 * SMALL, 0, 72, "the destination");
    /* The neighbour freed: its slot stays mapped in the chunk, but no
     * allocation is there (natively freed memory is refused). */
    CHECK_EQ(cuMemFree(hi), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWriteValue32_v2(s, hi, 7, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuStreamWriteValue64_v2(s, hi + 8, 7, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuStreamWaitValue32_v2(s, hi, 0, CU_STREAM_WAIT_VALUE_GEQ), CUDA_ERROR_INVALID_VALUE);
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = lo;
    ops[0].writeValue.value = 0x01010101u;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[1].writeValue.address = hi;
    CHECK_EQ(cuStreamBatchMemOp_v2(s, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    expect(lo, SMALL, 0, 70, "the first, after a refused batch");
}

/* ---- another device ---- */

/* Spilled memory of device 0 reached from device 1's context (no peer
 * access: the driver serves that for cudaMalloc memory) and by peer
 * copies from and to device 1's memory. */
static void spilled_memory_is_copied_from_another_devices_context(void)
{
    start();
    CUcontext ctx1;
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx1, 1), CUDA_SUCCESS);
    CUdeviceptr on1;
    CHECK_EQ(cuCtxSetCurrent(ctx1), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc(&on1, BUF), CUDA_SUCCESS);
    fill(on1, BUF, 16);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CUdeviceptr a = spilled(BUF, 17), b = spilled(BUF, 18), c = spilled(BUF, 19);
    CHECK_EQ(cuCtxSetCurrent(ctx1), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoH(host_buf, a + OFF, LEN), CUDA_SUCCESS);
    for (size_t i = 0; i < LEN; i++) CHECK_EQ(host_buf[i], byte_at(OFF + i, 17));
    CHECK_EQ(cuMemsetD8(a + OFF, 0xab, LEN), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoD(on1, b + OFF, LEN), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyPeer(c + OFF, ctx, on1 + OFF, ctx1, LEN), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    expect(a, OFF, 0, 17, "set from device 1: before");
    CHECK_EQ(cuMemcpyDtoH(out_buf, a + OFF, LEN), CUDA_SUCCESS);
    for (size_t i = 0; i < LEN; i++) CHECK_EQ(out_buf[i], 0xab);
    expect(a + OFF + LEN, BUF - OFF - LEN, OFF + LEN, 17, "set from device 1: after");
    expect(on1, LEN, OFF, 18, "copied to device 1");
    expect(on1 + LEN, BUF - LEN, LEN, 16, "copied to device 1: after");
    expect(c, OFF, 0, 19, "peer copy: before");
    expect(c + OFF, LEN, OFF, 16, "peer copy");
    expect(c + OFF + LEN, BUF - OFF - LEN, OFF + LEN, 19, "peer copy: after");
}

/* ---- a context of the program's own ---- */

/* A copy queued on a stream of a context the program made (cuCtxCreate)
 * into its allocation, not yet waited for; then, from the primary
 * context, an allocation past the limit spills it: the spill must wait
 * for that copy before it unmaps the memory (a GPU would fault). */
static void a_spill_waits_for_copies_queued_in_the_programs_own_context(void)
{
    start();
    CUcontext own;
    CUdevice dev;
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxCreate_v2(&own, 0, dev), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc(&p, BUF), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (size_t i = 0; i < BUF; i++) host_buf[i] = byte_at(i, 15);
    CHECK_EQ(cuMemcpyHtoDAsync(p, host_buf, BUF, s), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    spill_all();
    CHECK_EQ(simcuda_location_of(p), spilled_loc());
    CHECK_EQ(simcuda_unmapped_in_flight(), 0);
    CHECK_EQ(cuCtxSetCurrent(own), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    expect(p, BUF, 0, 15, "copied in its own context");
}

/* The same, but the program never allocated in its context: it queues a
 * copy there into memory allocated in the primary context. gvmshim knows
 * the context from its creation (preload/hooks_context.c), every ABI. */
static void a_spill_waits_for_copies_queued_in_a_context_that_never_allocated(void)
{
    start();
    CUdevice dev;
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    for (int abi = 0; abi < 4; abi++) {
        CUdeviceptr p;
        CHECK_EQ(cuMemAlloc(&p, BUF), CUDA_SUCCESS);
        CUcontext own = NULL;
        CUctxCreateParams params = {0};
        switch (abi) {
        case 0: CHECK_EQ(cuCtxCreate(&own, 0, dev), CUDA_SUCCESS); break;
        case 1: CHECK_EQ(cuCtxCreate_v2(&own, 0, dev), CUDA_SUCCESS); break;
        case 2: CHECK_EQ(cuCtxCreate_v3(&own, NULL, 0, 0, dev), CUDA_SUCCESS); break;
        default: CHECK_EQ(cuCtxCreate_v4(&own, &params, 0, dev), CUDA_SUCCESS); break;
        }
        CUstream s;
        CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        for (size_t i = 0; i < BUF; i++) host_buf[i] = byte_at(i, 40 + (unsigned)abi);
        CHECK_EQ(cuMemcpyHtoDAsync(p, host_buf, BUF, s), CUDA_SUCCESS);
        CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        spill_all();
        CHECK_EQ(simcuda_location_of(p), spilled_loc());
        CHECK_EQ(simcuda_unmapped_in_flight(), 0);
        expect(p, BUF, 0, 40 + (unsigned)abi, "copied in a context of the program's");
        CHECK_EQ(cuCtxDestroy(own), CUDA_SUCCESS);
        CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    }
}

/* ---- stream memory operations ---- */

typedef CUresult(CUDAAPI *write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult(CUDAAPI *write64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
typedef CUresult(CUDAAPI *batch_memop_fn)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);

/* Every ABI of one operation, as cudart and old runtimes reach them. */
static const char *const abi_suffix[4] = {"", "_ptsz", "_v2", "_v2_ptsz"};

static void *memop(const char *base, int abi)
{
    char name[64];
    snprintf(name, sizeof name, "%s%s", base, abi_suffix[abi]);
    void *fn = dlsym(RTLD_DEFAULT, name);
    CHECK(fn != NULL);
    return fn;
}

static uint32_t word_at(size_t off, unsigned seed)
{
    uint32_t w = 0;
    for (int k = 3; k >= 0; k--) w = w << 8 | byte_at(off + (size_t)k, seed);
    return w;
}

/* A write lands in spilled memory (lazily spilled: mapped for it first)
 * and nothing else changes; a wait on a value there is met. */
static void memory_operations_on_spilled_memory_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int abi = 0; abi < 4; abi++) {
        CUdeviceptr p = spilled(BUF, 50);
        write32_fn w32 = (write32_fn)memop("cuStreamWriteValue32", abi);
        write64_fn w64 = (write64_fn)memop("cuStreamWriteValue64", abi);
        CHECK_EQ(w32(s, p + OFF, 0xa1b2c3d4u, 0), CUDA_SUCCESS);
        spill_all();
        CHECK_EQ(w64(s, p + OFF + 8, 0x0102030405060708ull, 0), CUDA_SUCCESS);
        CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
        expect(p, OFF, 0, 50, "before the written values");
        uint32_t w[4];
        CHECK_EQ(cuMemcpyDtoH(w, p + OFF, 16), CUDA_SUCCESS);
        CHECK_EQ(w[0], 0xa1b2c3d4u);
        CHECK_EQ(w[1], word_at(OFF + 4, 50));
        CHECK_EQ(w[2], 0x05060708u);
        CHECK_EQ(w[3], 0x01020304u);
        expect(p + OFF + 16, BUF - OFF - 16, OFF + 16, 50, "after the written values");
        CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
        CUdeviceptr q = spilled(BUF, 54), r = spilled(BUF, 55);
        write32_fn wait32 = (write32_fn)memop("cuStreamWaitValue32", abi);
        write64_fn wait64 = (write64_fn)memop("cuStreamWaitValue64", abi);
        CHECK_EQ(wait32(s, q + OFF, word_at(OFF, 54), CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
        uint64_t want = (uint64_t)word_at(OFF + 4, 55) << 32 | word_at(OFF, 55);
        CHECK_EQ(wait64(s, r + OFF, want, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
        CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
        expect(q, BUF, 0, 54, "waited on");
        expect(r, BUF, 0, 55, "waited on");
        CHECK_EQ(cuMemFree(q), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(r), CUDA_SUCCESS);
    }
    CHECK_EQ(simcuda_unmapped_in_flight(), 0);
}

/* A batch over two spilled buffers: writes into one, a wait on the other,
 * a barrier; every ABI. */
static void batched_memory_operations_on_spilled_memory_arrive_intact(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    for (int abi = 0; abi < 4; abi++) {
        CUdeviceptr a, b;
        CHECK_EQ(cuMemAlloc(&a, BUF), CUDA_SUCCESS);
        CHECK_EQ(cuMemAlloc(&b, BUF), CUDA_SUCCESS);
        fill(a, BUF, 51);
        fill(b, BUF, 52);
        spill_all();
        CHECK_EQ(simcuda_location_of(a), spilled_loc());
        CHECK_EQ(simcuda_location_of(b), spilled_loc());
        CUstreamBatchMemOpParams ops[4] = {
            test_value_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, b + MiB, word_at(MiB, 52)),
            test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, a + OFF, 0xcafef00du),
            test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, a + BUF - 8, 0x1122334455667788ull),
        };
        ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        ops[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
        batch_memop_fn batch = (batch_memop_fn)memop("cuStreamBatchMemOp", abi);
        CHECK_EQ(batch(s, 4, ops, 0), CUDA_SUCCESS);
        CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
        uint32_t w;
        uint64_t q;
        CHECK_EQ(cuMemcpyDtoH(&w, a + OFF, 4), CUDA_SUCCESS);
        CHECK_EQ(w, 0xcafef00du);
        CHECK_EQ(cuMemcpyDtoH(&q, a + BUF - 8, 8), CUDA_SUCCESS);
        CHECK_EQ(q, 0x1122334455667788ull);
        expect(a, OFF, 0, 51, "batch: before the first write");
        expect(a + OFF + 4, BUF - OFF - 12, OFF + 4, 51, "batch: between the writes");
        expect(b, BUF, 0, 52, "batch: the waited-on buffer");
        CHECK_EQ(cuMemFree(a), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(b), CUDA_SUCCESS);
    }
    CHECK_EQ(simcuda_unmapped_in_flight(), 0);
}

/* Just past the end of a spilled buffer: the native answer (past a
 * driver allocation), and a batch with that one bad entry writes nothing. */
static void memory_operations_past_the_end_are_invalid_as_natively(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr nat = driver_alloc(BUF);
    CUresult want = cuStreamWriteValue32_v2(s, nat + BUF, 1, 0);
    CHECK_EQ(want, CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr p = spilled(BUF, 53);
    for (int abi = 0; abi < 4; abi++) {
        CHECK_EQ(((write32_fn)memop("cuStreamWriteValue32", abi))(s, p + BUF, 1, 0), want);
        CHECK_EQ(((write64_fn)memop("cuStreamWriteValue64", abi))(s, p + BUF, 1, 0), want);
        CHECK_EQ(((write32_fn)memop("cuStreamWaitValue32", abi))(s, p + BUF, 1, 0), want);
        CUstreamBatchMemOpParams ops[2] = {test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p, 7),
                                           test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, p + BUF, 7)};
        CHECK_EQ(((batch_memop_fn)memop("cuStreamBatchMemOp", abi))(s, 2, ops, 0), want);
    }
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    expect(p, BUF, 0, 53, "after refused memory operations");
}

/* ---- texture objects ---- */

/* A texture object made on spilled memory: kernels read through its
 * handle, which no launch scan sees, so the memory is mapped for it, and
 * later spills keep it mapped (lazily too); a new allocation in the same
 * record spills lazily again. */
static void a_textured_buffer_is_never_left_unmapped(void)
{
    start();
    gvm_status (*migrate)(const void *, int) = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    CUdeviceptr p = spilled(BUF, 60);
    CUDA_RESOURCE_DESC res;
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_LINEAR;
    res.res.linear.devPtr = p;
    res.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT8;
    res.res.linear.numChannels = 1;
    res.res.linear.sizeInBytes = BUF;
    CUDA_TEXTURE_DESC desc;
    memset(&desc, 0, sizeof desc);
    CUtexObject tex = 0;
    CHECK_EQ(cuTexObjectCreate(&tex, &res, &desc, NULL), CUDA_SUCCESS);
    CHECK(simcuda_location_of(p) != SIMCUDA_LOC_UNMAPPED);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(migrate((void *)p, 0), GVM_OK);
        CHECK_EQ(simcuda_location_of(p), 0);
        spill_all();
        CHECK_EQ(simcuda_location_of(p), SIMCUDA_LOC_HOST);
    }
    expect(p, BUF, 0, 60, "read through a texture");
    CHECK_EQ(cuTexObjectDestroy(tex), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    CUdeviceptr q = spilled(BUF, 61);   /* spilled as any buffer is */
    CHECK_EQ(cuMemFree(q), CUDA_SUCCESS);
}

/* A TMA tensor map encoded on spilled memory (and one re-pointed at
 * another buffer): kernels read through the descriptor, so the same. */
static void tensor_mapped_buffers_are_never_left_unmapped(void)
{
    start();
    gvm_status (*migrate)(const void *, int) = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    CUdeviceptr p = spilled(BUF, 62), q = spilled(BUF, 63);
    CUtensorMap map;
    cuuint64_t dim[2] = {BUF / 4096, 1024}, strides[1] = {4096 * 4};
    cuuint32_t box[2] = {64, 64}, estrides[2] = {1, 1};
    CHECK_EQ(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)p, dim, strides, box, estrides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             CUDA_SUCCESS);
    CHECK(simcuda_location_of(p) != SIMCUDA_LOC_UNMAPPED);
    CHECK_EQ(cuTensorMapReplaceAddress(&map, (void *)q), CUDA_SUCCESS);
    CHECK(simcuda_location_of(q) != SIMCUDA_LOC_UNMAPPED);
    for (int round = 0; round < 2; round++) {
        CHECK_EQ(migrate((void *)p, 0), GVM_OK);
        CHECK_EQ(migrate((void *)q, 0), GVM_OK);
        spill_all();
        CHECK_EQ(simcuda_location_of(p), SIMCUDA_LOC_HOST);
        CHECK_EQ(simcuda_location_of(q), SIMCUDA_LOC_HOST);
    }
    expect(p, BUF, 0, 62, "tensor-mapped");
    expect(q, BUF, 0, 63, "tensor-mapped after a replace");
    CHECK_EQ(cuMemFree(p), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree(q), CUDA_SUCCESS);
}

/* ---- two threads ---- */

/* Thread A keeps copying and setting its buffers on its own stream while
 * thread B allocates and frees past the limit, so A's buffers keep being
 * spilled (lazily: unmapped) and mapped again under A's calls. */
#define ROUNDS 60

static volatile int stop_churn;

static void *churner(void *arg)
{
    (void)arg;
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    while (!__atomic_load_n(&stop_churn, __ATOMIC_ACQUIRE)) {
        CUdeviceptr f;
        CHECK_EQ(cuMemAlloc(&f, 56 * MiB), CUDA_SUCCESS);
        CHECK_EQ(cuMemsetD8(f, 0x5c, 56 * MiB), CUDA_SUCCESS);
        CHECK_EQ(cuMemFree(f), CUDA_SUCCESS);
    }
    return NULL;
}

/* Brings the buffers back to the device (gvm_migrate), so that the
 * churner spills them again and again. */
static CUdeviceptr returned[2];

static void *returner(void *arg)
{
    (void)arg;
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    gvm_status (*migrate)(const void *, int) = (gvm_status(*)(const void *, int))dlsym(RTLD_DEFAULT, "gvm_migrate");
    while (!__atomic_load_n(&stop_churn, __ATOMIC_ACQUIRE))
        for (int i = 0; i < 2; i++) {
            gvm_status st = migrate((void *)returned[i], 0);
            CHECK(st == GVM_OK || st == GVM_ERR_NO_MEMORY);
        }
    return NULL;
}

static void copies_beside_another_threads_spills_lose_nothing(void)
{
    start();
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a = resident(BUF, 20), b = resident(BUF, 21);
    returned[0] = a;
    returned[1] = b;
    pthread_t t, back;
    pthread_create(&t, NULL, churner, NULL);
    pthread_create(&back, NULL, returner, NULL);
    static uint8_t mine[BUF];
    for (int round = 0; round < test_scaled(ROUNDS); round++) {
        unsigned seed = 30 + (unsigned)round;
        for (size_t i = 0; i < BUF; i++) mine[i] = byte_at(i, seed);
        CHECK_EQ(cuMemcpyHtoDAsync(a, mine, BUF, s), CUDA_SUCCESS);
        CHECK_EQ(cuMemcpyDtoDAsync(b + OFF, a + MiB, LEN, s), CUDA_SUCCESS);
        CHECK_EQ(cuMemsetD32Async(a + BUF - MiB, 0x01020304, MiB / 4, s), CUDA_SUCCESS);
        /* The other ways in: a value written, a batch and a 3D batch copy. */
        CHECK_EQ(cuStreamWriteValue32_v2(s, a + BUF - 8, (cuuint32_t)round, 0), CUDA_SUCCESS);
        CUdeviceptr bd[1] = {b}, bs[1] = {a + MiB};
        size_t bz[1] = {4096}, idx = 0;
        CUmemcpyAttributes attr = {0};
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        CHECK_EQ(cuMemcpyBatchAsync_v2(bd, bs, bz, 1, &attr, &idx, 1, s), CUDA_SUCCESS);
        CUDA_MEMCPY3D_BATCH_OP op = batch_op_3d(b + 2 * MiB, a + MiB, 8192);
        CHECK_EQ(cuMemcpy3DBatchAsync_v2(1, &op, 0, s), CUDA_SUCCESS);
        CHECK_EQ(cuMemcpyDtoHAsync(out_buf, b + OFF, LEN, s), CUDA_SUCCESS);
        CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
        for (size_t i = 0; i < LEN; i++)
            if (out_buf[i] != byte_at(MiB + i, seed)) {
                fprintf(stderr, "round %d: byte %zu is %#x, want %#x\n", round, i, out_buf[i], byte_at(MiB + i, seed));
                exit(1);
            }
        CHECK_EQ(cuMemcpyDtoH(out_buf, a + BUF - MiB, 4), CUDA_SUCCESS);
        CHECK_EQ(out_buf[0], 0x04);
        uint32_t w = 0;
        CHECK_EQ(cuMemcpyDtoH(&w, a + BUF - 8, 4), CUDA_SUCCESS);
        CHECK_EQ(w, (uint32_t)round);
        CHECK_EQ(cuMemcpyDtoH(out_buf, b, 4096), CUDA_SUCCESS);
        for (size_t i = 0; i < 4096; i++) CHECK_EQ(out_buf[i], byte_at(MiB + i, seed));
        CHECK_EQ(cuMemcpyDtoH(out_buf, b + 2 * MiB, 8192), CUDA_SUCCESS);
        for (size_t i = 0; i < 8192; i++) CHECK_EQ(out_buf[i], byte_at(MiB + i, seed));
    }
    __atomic_store_n(&stop_churn, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    pthread_join(back, NULL);
    CHECK_EQ(simcuda_unmapped_in_flight(), 0);
}

static const struct test_case cases[] = {
    TEST_ENTRY(copies_from_spilled_memory_arrive_intact)
    TEST_ENTRY(copies_into_spilled_memory_arrive_intact)
    TEST_ENTRY(copies_between_spilled_buffers_arrive_intact)
    TEST_ENTRY(sets_into_spilled_memory_arrive_intact)
    TEST_ENTRY(past_the_end_of_spilled_memory_is_invalid_as_natively)
    TEST_ENTRY(a_copy_spanning_two_spilled_allocations_is_invalid)
    TEST_ENTRY(calls_running_into_a_packed_neighbour_are_invalid)
    TEST_ENTRY(spilled_memory_is_copied_from_another_devices_context)
    TEST_ENTRY(copies_beside_another_threads_spills_lose_nothing)
    TEST_ENTRY(a_spill_waits_for_copies_queued_in_the_programs_own_context)
    TEST_ENTRY(a_spill_waits_for_copies_queued_in_a_context_that_never_allocated)
    TEST_ENTRY(memory_operations_on_spilled_memory_arrive_intact)
    TEST_ENTRY(batched_memory_operations_on_spilled_memory_arrive_intact)
    TEST_ENTRY(memory_operations_past_the_end_are_invalid_as_natively)
    TEST_ENTRY(a_textured_buffer_is_never_left_unmapped)
    TEST_ENTRY(tensor_mapped_buffers_are_never_left_unmapped)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
