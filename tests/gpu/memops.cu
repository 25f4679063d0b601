/* Stream memory operations, batch copies and contexts the program makes,
 * on memory that gvmshim spilled to host lazily (unmapped until used):
 * the entry points the hooks reach besides plain copies. The program runs
 * natively and under the shim (gpu-memops, gpu-memops-native; the shim's
 * run holds device 0 to 512 MiB with spill_host_map=lazy, so allocating
 * the whole limit spills every earlier buffer). Every entry point is
 * resolved through cuGetProcAddress at the version and stream mode that
 * picks each ABI: the unsuffixed CUDA 11 symbol, the _v2 one, and their
 * per-thread twins; the CUDA 12.8 batch copies, which report the failing
 * copy, and the CUDA 13 ones, which do not.
 *
 *   writes of 32 and 64-bit values land and change nothing else; waits on
 *   values present are met; a batch of waits, writes and a barrier; batch
 *   and 3D batch copies from and into spilled memory; a copy queued in a
 *   context the program made (cuCtxCreate) and never allocated in, while
 *   the primary context's allocation spills the buffer it writes; a
 *   texture object made on spilled memory reads it, then, once the
 *   program moved it back (gvm_migrate) and after the next spill; one
 *   value past the end of a buffer: invalid value in both runs, and a
 *   texture 4 KiB past it: made in both. On driver
 *   580 the CUDA 11 memory operations answer CUDA_ERROR_NOT_SUPPORTED in
 *   both runs (printed; the cpu suite covers their hooks). */
#include "linked_cu.h"
#include "../memop_params.h"

using namespace gt;

static constexpr size_t LIMIT = 512 * MiB;   /* GVM_DEVICE_LIMIT of the shim's run */
static constexpr size_t BUF = 64 * MiB;

static Gvm gvm;
static CUcontext primary;
static CUdevice dev0;

typedef CUresult (*value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*value64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
typedef CUresult (*batch_memop_fn)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);
typedef CUresult (*batch_v1_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *,
                                size_t, size_t *, CUstream);
typedef CUresult (*batch_v2_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *,
                                size_t, CUstream);
typedef CUresult (*batch3d_v1_fn)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream);
typedef CUresult (*batch3d_v2_fn)(size_t, CUDA_MEMCPY3D_BATCH_OP *, unsigned long long, CUstream);
typedef CUresult (*ctx_create_v2_fn)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*ctx_create_v4_fn)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);

/* The four ABIs of a stream memory operation: version, per-thread flag. */
struct Abi {
    const char *name;
    int version;
    cuuint64_t flags;
};
static const Abi abis[4] = {{"CUDA 11.0", 11000, CU_GET_PROC_ADDRESS_LEGACY_STREAM},
                            {"CUDA 11.0 per-thread", 11000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
                            {"CUDA 12.0", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM},
                            {"CUDA 12.0 per-thread", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}};

/* A driver built without stream memory operations for an ABI (the CUDA
 * 11 ones needed a kernel-module option) answers CUDA_ERROR_NOT_SUPPORTED
 * to its first call: both runs print it and go on to the next ABI. */
static bool supported(CUresult rc, const Abi &abi, const char *what)
{
    if (rc != CUDA_ERROR_NOT_SUPPORTED) return true;
    printf("     %s, %s: not supported by this driver\n", what, abi.name);
    return false;
}

template <typename T> static T entry(const char *name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT)
{
    void *fn = nullptr;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = cuGetProcAddress(name, &fn, version, flags, &q);
    if (rc != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
        skip("%s at version %d is not in this driver (%d, status %d)", name, version, (int)rc, (int)q);
    return reinterpret_cast<T>(fn);
}

/* Whole limit allocated and freed: under the shim every earlier buffer
 * leaves the device (lazily: unmapped); natively nothing happens. */
static void spill_all()
{
    CUdeviceptr f;
    CU(cuMemAlloc(&f, LIMIT));
    CU(cuMemFree(f));
}

static void require_spilled(CUdeviceptr p)
{
    if (!gvm.present) return;
    gvm_info info;
    CKG(gvm, gvm.query((void *)p, &info));
    EXPECT(info.location == GVM_HOST, "the buffer is at location %d, not spilled to host", info.location);
}

static CUdeviceptr filled(uint8_t byte)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, BUF));
    CU(cuMemsetD8(p, byte, BUF));
    CU(cuCtxSynchronize());
    return p;
}

/* [p+from, p+to) holds `byte` everywhere. */
static void expect_bytes(CUdeviceptr p, size_t from, size_t to, uint8_t byte, const char *what)
{
    std::vector<uint8_t> back(to - from);
    CU(cuMemcpyDtoH(back.data(), p + from, to - from));
    for (size_t i = 0; i < back.size(); i++)
        EXPECT(back[i] == byte, "%s: byte %zu is %#x, want %#x", what, from + i, back[i], byte);
}

static void write_values_land()
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (const Abi &abi : abis) {
        CUdeviceptr p = filled(0x5a);
        spill_all();
        require_spilled(p);
        auto w32 = entry<value32_fn>("cuStreamWriteValue32", abi.version, abi.flags);
        auto w64 = entry<value64_fn>("cuStreamWriteValue64", abi.version, abi.flags);
        CUresult first = w32(s, p + 3 * MiB, 0xa1b2c3d4u, 0);
        if (!supported(first, abi, "cuStreamWriteValue32")) {
            CU(cuMemFree(p));
            continue;
        }
        CU(first);
        CU(w64(s, p + BUF - 8, 0x0102030405060708ull, 0));
        CU(cuStreamSynchronize(s));
        uint32_t w = 0;
        uint64_t q = 0;
        CU(cuMemcpyDtoH(&w, p + 3 * MiB, 4));
        CU(cuMemcpyDtoH(&q, p + BUF - 8, 8));
        EXPECT(w == 0xa1b2c3d4u, "%s: 32-bit value %#x", abi.name, w);
        EXPECT(q == 0x0102030405060708ull, "%s: 64-bit value %#llx", abi.name, (unsigned long long)q);
        expect_bytes(p, 0, 3 * MiB, 0x5a, "before the 32-bit value");
        expect_bytes(p, 3 * MiB + 4, BUF - 8, 0x5a, "between the values");
        CU(cuMemFree(p));
    }
    CU(cuStreamDestroy(s));
}

static void waits_on_present_values_are_met()
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (const Abi &abi : abis) {
        CUdeviceptr p = filled(0x6b), q = filled(0x7c);
        spill_all();
        require_spilled(p);
        auto wait32 = entry<value32_fn>("cuStreamWaitValue32", abi.version, abi.flags);
        auto wait64 = entry<value64_fn>("cuStreamWaitValue64", abi.version, abi.flags);
        CUresult first = wait32(s, p + MiB, 0x6b6b6b6bu, CU_STREAM_WAIT_VALUE_EQ);
        if (!supported(first, abi, "cuStreamWaitValue32")) {
            CU(cuMemFree(p));
            CU(cuMemFree(q));
            continue;
        }
        CU(first);
        CU(wait64(s, q + 2 * MiB, 0x7c7c7c7c7c7c7c7cull, CU_STREAM_WAIT_VALUE_EQ));
        CU(cuMemsetD8Async(p, 0x11, 4096, s));   /* runs once the waits are met */
        CU(cuStreamSynchronize(s));
        expect_bytes(p, 0, 4096, 0x11, "set after the waits");
        expect_bytes(p, 4096, BUF, 0x6b, "waited on");
        expect_bytes(q, 0, BUF, 0x7c, "waited on");
        CU(cuMemFree(p));
        CU(cuMemFree(q));
    }
    CU(cuStreamDestroy(s));
}

static void batched_operations_land()
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (const Abi &abi : abis) {
        CUdeviceptr a = filled(0x21), b = filled(0x32);
        spill_all();
        require_spilled(a);
        CUstreamBatchMemOpParams ops[4] = {
            test_value_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, b + MiB, 0x32323232u),
            test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, a + 5 * MiB, 0xcafef00du),
            test_value_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, a + BUF - 8, 0x1122334455667788ull),
            {},
        };
        ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        ops[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
        auto batch = entry<batch_memop_fn>("cuStreamBatchMemOp", abi.version, abi.flags);
        /* The unsuffixed (v1) entry point takes no barrier. */
        CUresult first = batch(s, abi.version >= 11070 ? 4 : 3, ops, 0);
        if (!supported(first, abi, "cuStreamBatchMemOp")) {
            CU(cuMemFree(a));
            CU(cuMemFree(b));
            continue;
        }
        CU(first);
        CU(cuStreamSynchronize(s));
        uint32_t w = 0;
        uint64_t q = 0;
        CU(cuMemcpyDtoH(&w, a + 5 * MiB, 4));
        CU(cuMemcpyDtoH(&q, a + BUF - 8, 8));
        EXPECT(w == 0xcafef00du, "%s: 32-bit value %#x", abi.name, w);
        EXPECT(q == 0x1122334455667788ull, "%s: 64-bit value %#llx", abi.name, (unsigned long long)q);
        expect_bytes(a, 0, 5 * MiB, 0x21, "before the writes");
        expect_bytes(a, 5 * MiB + 4, BUF - 8, 0x21, "between the writes");
        expect_bytes(b, 0, BUF, 0x32, "waited on");
        CU(cuMemFree(a));
        CU(cuMemFree(b));
    }
    CU(cuStreamDestroy(s));
}

/* 2 layers of 4 rows of n/8 bytes, contiguous: n bytes. */
static CUDA_MEMCPY3D_BATCH_OP op_3d(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    CUDA_MEMCPY3D_BATCH_OP op;
    memset(&op, 0, sizeof op);
    op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.src.op.ptr.ptr = src;
    op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.dst.op.ptr.ptr = dst;
    op.src.op.ptr.locHint.type = op.dst.op.ptr.locHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    op.extent.width = n / 8;
    op.extent.height = 4;
    op.extent.depth = 2;
    op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    return op;
}

/* From a spilled buffer into a resident one and back into the spilled
 * one, with each batch entry point. */
static void batch_copies_move_spilled_memory()
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int kind = 0; kind < 4; kind++) {
        CUdeviceptr sp = filled(0x43);
        spill_all();
        require_spilled(sp);
        CUdeviceptr res = filled(0x54);
        size_t n = 8 * MiB, fail = 12345, idx = 0;
        CUdeviceptr d1[1] = {res + MiB}, s1[1] = {sp + 2 * MiB}, d2[1] = {sp + 20 * MiB}, s2[1] = {res + 30 * MiB};
        size_t sizes[1] = {n};
        CUmemcpyAttributes attr;
        memset(&attr, 0, sizeof attr);
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        attr.srcLocHint.type = attr.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CUDA_MEMCPY3D_BATCH_OP o1 = op_3d(res + MiB, sp + 2 * MiB, n), o2 = op_3d(sp + 20 * MiB, res + 30 * MiB, n);
        const char *name = "";
        switch (kind) {
        case 0: {
            name = "cuMemcpyBatchAsync (CUDA 12.8)";
            auto f = entry<batch_v1_fn>("cuMemcpyBatchAsync", 12080);
            CU(f(d1, s1, sizes, 1, &attr, &idx, 1, &fail, s));
            CU(f(d2, s2, sizes, 1, &attr, &idx, 1, &fail, s));
            break;
        }
        case 1: {
            name = "cuMemcpyBatchAsync (CUDA 13)";
            auto f = entry<batch_v2_fn>("cuMemcpyBatchAsync", 13000);
            CU(f(d1, s1, sizes, 1, &attr, &idx, 1, s));
            CU(f(d2, s2, sizes, 1, &attr, &idx, 1, s));
            break;
        }
        case 2: {
            name = "cuMemcpy3DBatchAsync (CUDA 12.8)";
            auto f = entry<batch3d_v1_fn>("cuMemcpy3DBatchAsync", 12080);
            CU(f(1, &o1, &fail, 0, s));
            CU(f(1, &o2, &fail, 0, s));
            break;
        }
        default: {
            name = "cuMemcpy3DBatchAsync (CUDA 13)";
            auto f = entry<batch3d_v2_fn>("cuMemcpy3DBatchAsync", 13000);
            CU(f(1, &o1, 0, s));
            CU(f(1, &o2, 0, s));
            break;
        }
        }
        CU(cuStreamSynchronize(s));
        printf("     %s: from and into spilled memory\n", name);
        expect_bytes(res, 0, MiB, 0x54, name);
        expect_bytes(res, MiB, MiB + n, 0x43, name);
        expect_bytes(res, MiB + n, BUF, 0x54, name);
        expect_bytes(sp, 0, 20 * MiB, 0x43, name);
        expect_bytes(sp, 20 * MiB, 20 * MiB + n, 0x54, name);
        expect_bytes(sp, 20 * MiB + n, BUF, 0x43, name);
        CU(cuMemFree(sp));
        CU(cuMemFree(res));
    }
    CU(cuStreamDestroy(s));
}

/* A context the program made and never allocated in queues a large copy
 * into a buffer of the primary context; the primary context then
 * allocates the whole limit, which spills that buffer: the spill must
 * wait for the copy (else it unmaps memory the copy writes: an illegal
 * address, or bytes lost). */
static void spill_waits_for_a_context_the_program_made()
{
    const size_t n = 256 * MiB;
    void *host = malloc(n);   /* pinned: the copies run while the call returns */
    EXPECT(host, "no host memory");
    CU(cuMemHostRegister(host, n, 0));
    /* cuCtxCreate at 11.0 is the _v2 ABI, at 13.0 the _v4 one. */
    for (int version : {11000, 13000}) {
        memset(host, version == 11000 ? 0x65 : 0x76, n);
        CUdeviceptr p;
        CU(cuMemAlloc(&p, n));
        CU(cuMemsetD8(p, 0, n));
        CU(cuCtxSynchronize());
        CUcontext own = nullptr;
        if (version == 11000) {
            CU(entry<ctx_create_v2_fn>("cuCtxCreate", 11000)(&own, 0, dev0));
        } else {
            CUctxCreateParams params;
            memset(&params, 0, sizeof params);
            CU(entry<ctx_create_v4_fn>("cuCtxCreate", 13000)(&own, &params, 0, dev0));
        }
        CUstream s;
        CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        for (int i = 0; i < 4; i++) CU(cuMemcpyHtoDAsync(p, host, n, s));
        CU(cuCtxSetCurrent(primary));
        spill_all();
        require_spilled(p);
        CU(cuCtxSetCurrent(own));
        CU(cuStreamSynchronize(s));
        CU(cuStreamDestroy(s));
        CU(cuCtxSetCurrent(primary));
        CU(cuCtxDestroy(own));
        CU(cuCtxSetCurrent(primary));
        expect_bytes(p, 0, n, version == 11000 ? 0x65 : 0x76, "copied in the program's context");
        CU(cuMemFree(p));
    }
    CU(cuMemHostUnregister(host));
    free(host);
}

__global__ static void k_sum_texture(cudaTextureObject_t t, size_t n, unsigned long long *sum)
{
    unsigned long long mine = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        mine += tex1Dfetch<unsigned int>(t, (int)i);
    atomicAdd(sum, mine);
}

static unsigned long long texture_sum(cudaTextureObject_t t, size_t n, CUdeviceptr sum)
{
    CU(cuMemsetD8(sum, 0, 8));
    k_sum_texture<<<264, 256>>>(t, n, (unsigned long long *)sum);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    unsigned long long got = 0;
    CU(cuMemcpyDtoH(&got, sum, 8));
    return got;
}

/* Under the shim, the buffer moved back to device 0 by the program
 * (gvm_migrate): device 0 is its home again and it counts as resident, so
 * the next spill_all is the only move it makes before the check. Without
 * it the check races the promoter: the texture's creation used the
 * buffer after it left, so the promoter may bring it back at any moment
 * (GVM_PROMOTE, every 50 ms); a promotion under way while spill_all runs
 * holds room spill_all needs, which then places its allocation on host
 * and leaves the buffer on device 0 (on two GPUs, where every move waits
 * for both devices, the check found it at location 0). A migration waits
 * for a promotion under way, and the promoter leaves alone what the
 * program placed. */
static void back_home(CUdeviceptr p)
{
    if (gvm.present) CKG(gvm, gvm.migrate((void *)p, 0));
}

/* A texture object (cudaCreateTextureObject) made on spilled memory: the
 * kernel reads through its handle, which no launch scan sees; the memory
 * must be there when it reads, then, after the program moves it back to
 * its device, and after the next spill. */
static void textures_read_spilled_memory()
{
    CUdeviceptr p, sum;
    CU(cuMemAlloc(&p, BUF));
    CU(cuMemsetD32(p, 3, BUF / 4));
    CU(cuMemAlloc(&sum, 8));
    spill_all();
    require_spilled(p);
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = (void *)p;
    res.res.linear.desc = cudaCreateChannelDesc<unsigned int>();
    res.res.linear.sizeInBytes = BUF;
    cudaTextureDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    CK(cudaCreateTextureObject(&t, &res, &desc, nullptr));
    const unsigned long long want = 3ull * (BUF / 4);
    for (int round = 0; round < 3; round++) {
        unsigned long long got = texture_sum(t, BUF / 4, sum);
        EXPECT(got == want, "round %d, spilled: the texture read %llu, want %llu", round, got, want);
        back_home(p);
        got = texture_sum(t, BUF / 4, sum);
        EXPECT(got == want, "round %d, back on device 0: the texture read %llu, want %llu", round, got, want);
        spill_all();   /* the buffer leaves the device again */
        require_spilled(p);
    }
    CK(cudaDestroyTextureObject(t));
    CU(cuMemFree(p));
    CU(cuMemFree(sum));
}

/* A linear texture of 4 KiB more than a 3,000,000-byte buffer holds (the
 * rest of its rounding, natively): the driver makes it (H100, driver 580,
 * 2026-11-28), and so must the shim. */
static void a_texture_past_the_end()
{
    const size_t n = 3000000;
    CUdeviceptr p;
    CU(cuMemAlloc(&p, n));
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = (void *)p;
    res.res.linear.desc = cudaCreateChannelDesc<unsigned char>();
    res.res.linear.sizeInBytes = n + 4096;
    cudaTextureDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    cudaError_t e = cudaCreateTextureObject(&t, &res, &desc, nullptr);
    (void)cudaGetLastError();
    printf("     a texture 4096 bytes past a %zu-byte buffer: %s\n", n, cudaGetErrorName(e));
    if (e == cudaSuccess) CK(cudaDestroyTextureObject(t));
    CU(cuMemFree(p));
    EXPECT(e == cudaSuccess, "%s: %s", gvm.present ? "under the shim" : "natively", cudaGetErrorName(e));
}

/* One 32-bit write just past the end of a 3,000,000-byte buffer, inside
 * the allocation's rounding: natively refused with CUDA_ERROR_INVALID_VALUE
 * (H100, driver 580, 2026-11-28), under the shim too, and the buffer
 * after it (the neighbour, often, under the shim) keeps its bytes. */
static void a_value_past_the_end()
{
    const size_t n = 3000000;
    CUdeviceptr p, next;
    CU(cuMemAlloc(&p, n));
    CU(cuMemAlloc(&next, n));
    CU(cuMemsetD8(next, 0x19, n));
    CU(cuCtxSynchronize());
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    auto w32 = entry<value32_fn>("cuStreamWriteValue32", 12000);
    CUresult rc = w32(s, p + n, 0xdeadbeefu, 0);
    const char *rn = nullptr;
    cuGetErrorName(rc, &rn);
    printf("     cuStreamWriteValue32 one value past a %zu-byte buffer: %s\n", n, rn ? rn : "?");
    CU(cuStreamSynchronize(s));
    EXPECT(rc == CUDA_ERROR_INVALID_VALUE, "%s: %d", gvm.present ? "under the shim" : "natively", (int)rc);
    expect_bytes(next, 0, n, 0x19, "the next buffer");
    CU(cuStreamDestroy(s));
    CU(cuMemFree(p));
    CU(cuMemFree(next));
}

int main()
{
    watchdog(200);
    int n = 0;
    if (int skip = linked_start(&dev0, &primary, &n)) return skip;
    gvm = load_gvm();
    printf("%d device(s); gvmshim API %s\n", n, gvm.present ? "present" : "absent (native run)");
    Runner r;
    r.run("write_values_land", write_values_land);
    r.run("waits_on_present_values_are_met", waits_on_present_values_are_met);
    r.run("batched_operations_land", batched_operations_land);
    r.run("batch_copies_move_spilled_memory", batch_copies_move_spilled_memory);
    r.run("spill_waits_for_a_context_the_program_made", spill_waits_for_a_context_the_program_made);
    r.run("textures_read_spilled_memory", textures_read_spilled_memory);
    r.run("a_texture_past_the_end", a_texture_past_the_end);
    r.run("a_value_past_the_end", a_value_past_the_end);
    int ret = r.finish();
    cuDevicePrimaryCtxRelease(dev0);
    return ret;
}
