/* CUDA calls programs commonly make that the other gpu tests leave out,
 * compared with the native run: every call's answer (its error name, and
 * where data comes back a checksum of it) must be the same under the shim.
 * Memory that is not gvmshim's (managed, pinned, registered, module
 * globals, a pool the program made) must pass through untouched; calls the
 * driver refuses on cudaMalloc memory must be refused with the same code
 * on gvmshim's. On two GPUs, "two-devices" does what CUDA's P2P samples do:
 * device 0's default pool granted to device 1 (cudaMemPoolSetAccess), peer
 * access enabled and disabled, kernels reading and writing the other
 * device's memory, peer copies. Nothing that differs between two runs (addresses, timings,
 * free memory) is printed: pointers are printed as their relation to the
 * allocation asked about.
 *
 *   api-compare                 parent: every scenario, native vs shim
 *   api-compare --child NAME    one scenario, in this process (its transcript)
 *
 * Each scenario's transcript ends with "done". Linked against libcuda for
 * the driver calls. Exit 77 without a GPU. */
#include "gpu_test.h"

#include <string>
#include <vector>

using namespace gt;

/* ---- the transcript ---------------------------------------------------------- */

static cudaError_t rec(const char *what, cudaError_t e)
{
    printf("%-58s %s\n", what, cudaGetErrorName(e));
    fflush(stdout);
    return e;
}

/* A call the scenario needs to go on: recorded, and fatal when it fails. */
static void must(const char *what, cudaError_t e)
{
    if (rec(what, e) != cudaSuccess) throw Failure(format("%s -> %s", what, cudaGetErrorName(e)));
}

static CUresult rec_drv(const char *what, CUresult r)
{
    const char *name = nullptr;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "(unknown CUresult)";
    printf("%-58s %s\n", what, name);
    fflush(stdout);
    return r;
}

static void must_drv(const char *what, CUresult r)
{
    if (rec_drv(what, r) != CUDA_SUCCESS) throw Failure(format("%s -> CUresult %d", what, (int)r));
}

/* The runtime's last error after a refused call: recorded and cleared,
 * so it is part of the transcript too. */
static void last_error(void)
{
    rec("  cudaGetLastError", cudaGetLastError());
}

static uint64_t checksum(const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Data read back: its checksum in the transcript, and it must be what was
 * written (a wrong answer natively is the test's own fault). */
static void check_data(const char *what, const void *got, const void *want, size_t n)
{
    printf("%-58s checksum %016llx\n", what, (unsigned long long)checksum(got, n));
    fflush(stdout);
    EXPECT(!memcmp(got, want, n), "%s: the data read back is not what was written", what);
}

/* A pointer an answer gave, as its relation to the one asked about. */
static const char *relation(uintptr_t v, uintptr_t base, uintptr_t p)
{
    if (v == 0) return "0";
    if (v == p) return "p";
    if (v == base) return "base";
    if (v == (uintptr_t)0xa5a5a5a5a5a5a5a5ull) return "unwritten";
    return "other";
}

static const char *yes(bool b) { return b ? "yes" : "no"; }

/* cudaPointerGetAttributes, prefilled so fields it leaves alone print the
 * same in both runs. */
static void pointer_attributes(const char *what, const void *p)
{
    cudaPointerAttributes a;
    memset(&a, 0xa5, sizeof a);
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    (void)cudaGetLastError();
    printf("%-58s %s type=%d device=%d devicePointer=%s hostPointer=%s\n",
           format("cudaPointerGetAttributes(%s)", what).c_str(), cudaGetErrorName(e), (int)a.type, a.device,
           relation((uintptr_t)a.devicePointer, (uintptr_t)p, (uintptr_t)p),
           relation((uintptr_t)a.hostPointer, (uintptr_t)p, (uintptr_t)p));
}

static std::vector<uint32_t> words_of(size_t n, uint32_t seed)
{
    std::vector<uint32_t> w(n);
    for (size_t i = 0; i < n; i++) w[i] = word_pattern(i, seed);
    return w;
}

static cudaStream_t new_stream(void)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

/* ---- managed memory: passed through, advice refused on cudaMalloc's ------------ */

/* CUDA 13 takes a location where 12 took a device number (its _v2 calls). */
static cudaMemLocation location(int dev)
{
    cudaMemLocation l;
    memset(&l, 0, sizeof l);
    l.type = dev == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    l.id = dev == cudaCpuDeviceId ? 0 : dev;
    return l;
}

static cudaError_t prefetch(const void *p, size_t n, int dev, cudaStream_t s)
{
#if CUDART_VERSION >= 13000
    return cudaMemPrefetchAsync(p, n, location(dev), 0, s);
#else
    return cudaMemPrefetchAsync_v2(p, n, location(dev), 0, s);
#endif
}

static cudaError_t advise(const void *p, size_t n, cudaMemoryAdvise advice, int dev)
{
#if CUDART_VERSION >= 13000
    return cudaMemAdvise(p, n, advice, location(dev));
#else
    return cudaMemAdvise_v2(p, n, advice, location(dev));
#endif
}

/* The range's attributes, each into a prefilled int. */
static void range_attributes(const char *what, const void *p, size_t n)
{
    static const struct {
        cudaMemRangeAttribute attr;
        const char *name;
    } attrs[] = {
        {cudaMemRangeAttributeReadMostly, "ReadMostly"},
        {cudaMemRangeAttributePreferredLocation, "PreferredLocation"},
        {cudaMemRangeAttributeAccessedBy, "AccessedBy"},
        {cudaMemRangeAttributeLastPrefetchLocation, "LastPrefetchLocation"},
    };
    for (const auto &a : attrs) {
        int v = (int)0xa5a5a5a5;
        cudaError_t e = cudaMemRangeGetAttribute(&v, sizeof v, a.attr, p, n);
        printf("%-58s %s value %d\n", format("cudaMemRangeGetAttribute(%s, %s)", what, a.name).c_str(),
               cudaGetErrorName(e), v);
        last_error();
    }
}

/* Advice and prefetches on managed memory, then the same calls on cudaMalloc
 * memory, which the driver refuses: gvmshim's must be refused alike. */
static void managed(void)
{
    const size_t n = MiB, words = n / 4;
    cudaStream_t s = new_stream();
    uint32_t *m = nullptr, *d = nullptr;
    must("cudaMallocManaged(1 MiB, AttachGlobal)", cudaMallocManaged((void **)&m, n, cudaMemAttachGlobal));
    CK(cudaMalloc((void **)&d, n));
    pointer_attributes("managed", m);
    fill_words(m, words, 0, 11);
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> want = words_of(words, 11);
    check_data("managed: host read after a kernel wrote it", m, want.data(), n);

    rec("cudaMemAdvise(managed, SetReadMostly, device 0)", advise(m, n, cudaMemAdviseSetReadMostly, 0));
    rec("cudaMemAdvise(managed, SetPreferredLocation, device 0)", advise(m, n, cudaMemAdviseSetPreferredLocation, 0));
    rec("cudaMemAdvise(managed, SetAccessedBy, device 0)", advise(m, n, cudaMemAdviseSetAccessedBy, 0));
    rec("cudaMemPrefetchAsync(managed, device 0)", prefetch(m, n, 0, s));
    CK(cudaStreamSynchronize(s));
    range_attributes("managed", m, n);
    rec("cudaMemPrefetchAsync(managed, host)", prefetch(m, n, cudaCpuDeviceId, s));
    CK(cudaStreamSynchronize(s));
    check_data("managed: host read after a prefetch to the host", m, want.data(), n);
    rec("cudaMemAdvise(managed, UnsetReadMostly, device 0)", advise(m, n, cudaMemAdviseUnsetReadMostly, 0));
    range_attributes("managed, after the host prefetch", m, n);

    rec("cudaMemPrefetchAsync(cudaMalloc, device 0)", prefetch(d, n, 0, s));
    last_error();
    rec("cudaMemPrefetchAsync(cudaMalloc, host)", prefetch(d, n, cudaCpuDeviceId, s));
    last_error();
    rec("cudaMemAdvise(cudaMalloc, SetReadMostly, device 0)", advise(d, n, cudaMemAdviseSetReadMostly, 0));
    last_error();
    rec("cudaMemAdvise(cudaMalloc, SetPreferredLocation, device 0)", advise(d, n, cudaMemAdviseSetPreferredLocation, 0));
    last_error();
    range_attributes("cudaMalloc", d, n);
    CK(cudaStreamSynchronize(s));
    must("cudaFree(managed)", cudaFree(m));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

/* ---- pitched and 3D memory ------------------------------------------------------ */

/* 3D: rows of 100 bytes in a wider pitch, copied in, across and out, then
 * set. The pitch gvmshim gives must be the driver's. */
static void three_d(void)
{
    const size_t w = 100, h = 17, depth = 5, n = w * h * depth;
    cudaExtent ext = make_cudaExtent(w, h, depth);
    cudaPitchedPtr a, b;
    must("cudaMalloc3D(100 x 17 x 5)", cudaMalloc3D(&a, ext));
    printf("  pitch %zu xsize %zu ysize %zu\n", a.pitch, a.xsize, a.ysize);
    must("cudaMalloc3D(100 x 17 x 5), second", cudaMalloc3D(&b, ext));
    std::vector<uint8_t> in(n), out(n, 0), set(n, 0x5a);
    for (size_t i = 0; i < n; i++) in[i] = byte_pattern(i, 21);

    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(in.data(), w, w, h);
    p.dstPtr = a;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    must("cudaMemcpy3D(host to 3D)", cudaMemcpy3D(&p));
    p.srcPtr = a;
    p.dstPtr = b;
    p.kind = cudaMemcpyDeviceToDevice;
    must("cudaMemcpy3D(3D to 3D)", cudaMemcpy3D(&p));
    p.srcPtr = b;
    p.dstPtr = make_cudaPitchedPtr(out.data(), w, w, h);
    p.kind = cudaMemcpyDeviceToHost;
    must("cudaMemcpy3D(3D to host)", cudaMemcpy3D(&p));
    check_data("3D round trip", out.data(), in.data(), n);

    must("cudaMemset3D(0x5a)", cudaMemset3D(a, 0x5a, ext));
    p.srcPtr = a;
    must("cudaMemcpy3D(set 3D to host)", cudaMemcpy3D(&p));
    check_data("3D after cudaMemset3D", out.data(), set.data(), n);
    CK(cudaFree(a.ptr));
    CK(cudaFree(b.ptr));
}

/* cudaMallocPitch and stream-ordered 2D copies and sets. */
static void pitch_2d(void)
{
    const size_t w = 1000, h = 33, n = w * h;
    cudaStream_t s = new_stream();
    void *d = nullptr;
    size_t pitch = 0;
    must("cudaMallocPitch(1000 x 33)", cudaMallocPitch(&d, &pitch, w, h));
    printf("  pitch %zu\n", pitch);
    std::vector<uint8_t> in(n), out(n, 0);
    for (size_t i = 0; i < n; i++) in[i] = byte_pattern(i, 22);
    must("cudaMemcpy2DAsync(host to pitched)", cudaMemcpy2DAsync(d, pitch, in.data(), w, w, h, cudaMemcpyHostToDevice, s));
    must("cudaMemcpy2DAsync(pitched to host)", cudaMemcpy2DAsync(out.data(), w, d, pitch, w, h, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    check_data("2D round trip", out.data(), in.data(), n);

    /* The left half of every row set: the right half keeps its bytes. */
    must("cudaMemset2DAsync(left half of each row, 0x33)", cudaMemset2DAsync(d, pitch, 0x33, w / 2, h, s));
    must("cudaMemcpy2DAsync(pitched to host), after the set",
         cudaMemcpy2DAsync(out.data(), w, d, pitch, w, h, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t r = 0; r < h; r++) memset(&in[r * w], 0x33, w / 2);
    check_data("2D after cudaMemset2DAsync", out.data(), in.data(), n);
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

static void copies(void)
{
    three_d();
    pitch_2d();
}

/* ---- texture objects over cudaMalloc memory --------------------------------------- */

__global__ static void k_fetch_linear(cudaTextureObject_t t, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(t, i);
}

__global__ static void k_fetch_2d(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

/* Values a float holds exactly, so a fetch reads back bit for bit. */
static std::vector<float> texels(size_t n, uint32_t seed)
{
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(word_pattern(i, seed) & 0xffff) - 1000.0f;
    return v;
}

/* Point sampling, element reads, unnormalised coordinates. */
static cudaTextureDesc point_sampling(void)
{
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 0;
    return td;
}

/* cudaMalloc memory must meet the driver's texture alignment under the shim
 * as natively; an address off that alignment is refused in both. */
static void texture_linear(void)
{
    const int n = 4096;
    float *src = nullptr, *out = nullptr;
    CK(cudaMalloc((void **)&src, n * sizeof(float)));
    CK(cudaMalloc((void **)&out, n * sizeof(float)));
    std::vector<float> in = texels(n, 31), got(n);
    CK(cudaMemcpy(src, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    cudaResourceDesc rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = src;
    rd.res.linear.desc = cudaCreateChannelDesc<float>();
    rd.res.linear.sizeInBytes = n * sizeof(float);
    cudaTextureDesc td = point_sampling();
    cudaTextureObject_t t = 0;
    must("cudaCreateTextureObject(linear, cudaMalloc memory)", cudaCreateTextureObject(&t, &rd, &td, nullptr));
    k_fetch_linear<<<n / 256, 256>>>(t, out, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
    check_data("tex1Dfetch over cudaMalloc memory", got.data(), in.data(), n * sizeof(float));

    cudaResourceDesc back;
    memset(&back, 0, sizeof back);
    must("cudaGetTextureObjectResourceDesc(linear)", cudaGetTextureObjectResourceDesc(&back, t));
    printf("  resType %d, same pointer %s, size %zu\n", (int)back.resType, yes(back.res.linear.devPtr == src),
           back.res.linear.sizeInBytes);
    must("cudaDestroyTextureObject(linear)", cudaDestroyTextureObject(t));

    rd.res.linear.devPtr = src + 1;
    rd.res.linear.sizeInBytes = (n - 1) * sizeof(float);
    t = 0;
    rec("cudaCreateTextureObject(linear, 4 bytes into cudaMalloc)", cudaCreateTextureObject(&t, &rd, &td, nullptr));
    last_error();
    if (t) CK(cudaDestroyTextureObject(t));
    CK(cudaFree(src));
    CK(cudaFree(out));
}

static void texture_pitch2d(void)
{
    const int w = 64, h = 32;
    float *src = nullptr, *out = nullptr;
    size_t pitch = 0;
    CK(cudaMallocPitch((void **)&src, &pitch, w * sizeof(float), h));
    CK(cudaMalloc((void **)&out, w * h * sizeof(float)));
    std::vector<float> in = texels(w * h, 32), got(w * h);
    CK(cudaMemcpy2D(src, pitch, in.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));

    cudaResourceDesc rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypePitch2D;
    rd.res.pitch2D.devPtr = src;
    rd.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    rd.res.pitch2D.width = w;
    rd.res.pitch2D.height = h;
    rd.res.pitch2D.pitchInBytes = pitch;
    cudaTextureDesc td = point_sampling();
    cudaTextureObject_t t = 0;
    must("cudaCreateTextureObject(pitch2D, cudaMallocPitch memory)", cudaCreateTextureObject(&t, &rd, &td, nullptr));
    k_fetch_2d<<<dim3(w / 16, h / 16), dim3(16, 16)>>>(t, out, w, h);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got.data(), out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
    check_data("tex2D over cudaMallocPitch memory", got.data(), in.data(), w * h * sizeof(float));
    must("cudaDestroyTextureObject(pitch2D)", cudaDestroyTextureObject(t));
    CK(cudaFree(src));
    CK(cudaFree(out));
}

static void textures(void)
{
    texture_linear();
    texture_pitch2d();
}

/* ---- memory pools ------------------------------------------------------------------ */

static void pool_attribute(const char *what, cudaMemPool_t pool, cudaMemPoolAttr attr)
{
    uint64_t v = 0xa5a5a5a5a5a5a5a5ull;
    cudaError_t e = cudaMemPoolGetAttribute(pool, attr, &v);
    printf("%-58s %s value %llu\n", format("cudaMemPoolGetAttribute(%s)", what).c_str(), cudaGetErrorName(e),
           (unsigned long long)v);
}

/* A stream-ordered round trip through n bytes at d. */
static void round_trip(const char *what, void *d, size_t n, uint32_t seed, cudaStream_t s)
{
    std::vector<uint32_t> in = words_of(n / 4, seed), out(n / 4, 0);
    must(format("cudaMemcpyAsync(host to %s)", what).c_str(),
         cudaMemcpyAsync(d, in.data(), n, cudaMemcpyHostToDevice, s));
    must(format("cudaMemcpyAsync(%s to host)", what).c_str(),
         cudaMemcpyAsync(out.data(), d, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    check_data(format("%s round trip", what).c_str(), out.data(), in.data(), n);
}

/* A pool the program made is its own (gvmshim leaves it to the driver):
 * its attributes, a trim, its memory. */
static void own_pool(cudaStream_t s)
{
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    must("cudaMemPoolCreate(device 0)", cudaMemPoolCreate(&pool, &props));
    uint64_t threshold = 64 * MiB;
    must("cudaMemPoolSetAttribute(ReleaseThreshold, 64 MiB)",
         cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    pool_attribute("own, ReleaseThreshold", pool, cudaMemPoolAttrReleaseThreshold);

    void *p = nullptr;
    must("cudaMallocFromPoolAsync(own, 4 MiB)", cudaMallocFromPoolAsync(&p, 4 * MiB, pool, s));
    round_trip("own pool memory", p, 4 * MiB, 51, s);
    pool_attribute("own, UsedMemCurrent, 4 MiB live", pool, cudaMemPoolAttrUsedMemCurrent);
    pointer_attributes("own pool memory", p);
    must("cudaFreeAsync(own pool memory)", cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    pool_attribute("own, UsedMemCurrent, after the free", pool, cudaMemPoolAttrUsedMemCurrent);
    must("cudaMemPoolTrimTo(own, 0)", cudaMemPoolTrimTo(pool, 0));
    pool_attribute("own, ReservedMemCurrent, after the trim", pool, cudaMemPoolAttrReservedMemCurrent);
    must("cudaMemPoolDestroy(own)", cudaMemPoolDestroy(pool));
}

/* The device's default pool: what cudaMallocAsync draws from (gvmshim
 * serves it, and adds its memory into the pool's use). */
static void default_pool(cudaStream_t s)
{
    cudaMemPool_t def, cur;
    must("cudaDeviceGetDefaultMemPool(device 0)", cudaDeviceGetDefaultMemPool(&def, 0));
    must("cudaDeviceGetMemPool(device 0)", cudaDeviceGetMemPool(&cur, 0));
    printf("  the current pool is the default: %s\n", yes(cur == def));
    void *q = nullptr;
    must("cudaMallocAsync(1 MiB)", cudaMallocAsync(&q, MiB, s));
    round_trip("cudaMallocAsync memory", q, MiB, 52, s);
    must("cudaMemsetAsync(cudaMallocAsync memory, 0x7e)", cudaMemsetAsync(q, 0x7e, MiB, s));
    std::vector<uint8_t> out(MiB, 0), want(MiB, 0x7e);
    must("cudaMemcpyAsync(cudaMallocAsync memory to host), after the set",
         cudaMemcpyAsync(out.data(), q, MiB, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    check_data("cudaMallocAsync memory after the set", out.data(), want.data(), MiB);
    pool_attribute("default, UsedMemCurrent, 1 MiB live", def, cudaMemPoolAttrUsedMemCurrent);
    /* A pool's memory is not legacy IPC's (pools export their own way). */
    cudaIpcMemHandle_t h;
    rec("cudaIpcGetMemHandle(cudaMallocAsync memory)", cudaIpcGetMemHandle(&h, q));
    last_error();
    unsigned long long flag = 7;
    rec_drv("cuPointerGetAttribute(IS_LEGACY_CUDA_IPC_CAPABLE)",
            cuPointerGetAttribute(&flag, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)q));
    printf("  legacy IPC capable: %llu\n", flag);
    must("cudaFreeAsync(cudaMallocAsync memory)", cudaFreeAsync(q, s));
    CK(cudaStreamSynchronize(s));
    pool_attribute("default, UsedMemCurrent, after the free", def, cudaMemPoolAttrUsedMemCurrent);
}

static void pools(void)
{
    cudaStream_t s = new_stream();
    own_pool(s);
    default_pool(s);
    CK(cudaStreamDestroy(s));
}

/* ---- host memory the device reaches ----------------------------------------------- */

/* A kernel writes n bytes of host memory through its device pointer. */
static void write_through(const char *what, void *host, size_t n, uint32_t seed)
{
    uint32_t *dp = nullptr;
    must(format("cudaHostGetDevicePointer(%s)", what).c_str(), cudaHostGetDevicePointer((void **)&dp, host, 0));
    printf("  device pointer is the host pointer: %s\n", yes((void *)dp == host));
    pointer_attributes(what, host);
    fill_words(dp, n / 4, 0, seed);
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> want = words_of(n / 4, seed);
    check_data(format("%s, written by a kernel", what).c_str(), host, want.data(), n);
}

static void registered(void)
{
    const size_t n = MiB;
    void *h = malloc(n);
    EXPECT(h, "malloc(1 MiB) failed");
    memset(h, 0, n);
    must("cudaHostRegister(malloc'd 1 MiB, Mapped)", cudaHostRegister(h, n, cudaHostRegisterMapped));
    rec("cudaHostRegister(the same buffer again)", cudaHostRegister(h, n, cudaHostRegisterMapped));
    last_error();
    write_through("registered", h, n, 41);
    must("cudaHostUnregister", cudaHostUnregister(h));
    rec("cudaHostUnregister(again)", cudaHostUnregister(h));
    last_error();
    pointer_attributes("malloc'd, unregistered", h);
    free(h);
}

static void host_alloc(void)
{
    const size_t n = MiB;
    void *h = nullptr;
    must("cudaHostAlloc(1 MiB, Mapped)", cudaHostAlloc(&h, n, cudaHostAllocMapped));
    write_through("cudaHostAlloc", h, n, 42);
    must("cudaFreeHost", cudaFreeHost(h));
}

static void host(void)
{
    registered();
    host_alloc();
}

/* ---- a __device__ global: module memory, not gvmshim's ---------------------------- */

__device__ uint32_t g_words[256];

__global__ static void k_double_words(int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g_words[i] *= 2;
}

static void symbol(void)
{
    const int n = 256;
    std::vector<uint32_t> in = words_of(n, 61), out(n, 0), want(n);
    for (int i = 0; i < n; i++) want[i] = in[i] * 2;
    must("cudaMemcpyToSymbol(256 words)", cudaMemcpyToSymbol(g_words, in.data(), sizeof g_words));
    k_double_words<<<1, n>>>(n);
    CK(cudaGetLastError());
    must("cudaMemcpyFromSymbol(256 words)", cudaMemcpyFromSymbol(out.data(), g_words, sizeof g_words));
    check_data("symbol doubled by a kernel", out.data(), want.data(), sizeof g_words);
    rec("cudaMemcpyToSymbol(one word at the end's offset)", cudaMemcpyToSymbol(g_words, in.data(), 4, sizeof g_words));
    last_error();
    rec("cudaMemcpyFromSymbol(two words, one past the end)",
        cudaMemcpyFromSymbol(out.data(), g_words, 8, sizeof g_words - 4));
    last_error();

    void *a = nullptr;
    size_t size = 0;
    must("cudaGetSymbolAddress", cudaGetSymbolAddress(&a, g_words));
    must("cudaGetSymbolSize", cudaGetSymbolSize(&size, g_words));
    printf("  size %zu\n", size);
    pointer_attributes("module global", a);
    CUdeviceptr base = 0;
    size_t range = 0;
    rec_drv("cuMemGetAddressRange(module global)", cuMemGetAddressRange(&base, &range, (CUdeviceptr)a));
    printf("  the range holds the symbol: %s\n",
           yes(base <= (CUdeviceptr)a && (CUdeviceptr)a + sizeof g_words <= base + range));
    /* The symbol's address works as any device memory. */
    must("cudaMemcpy(host to the symbol's address)", cudaMemcpy(a, in.data(), sizeof g_words, cudaMemcpyHostToDevice));
    must("cudaMemcpyFromSymbol(256 words), after", cudaMemcpyFromSymbol(out.data(), g_words, sizeof g_words));
    check_data("symbol written through its address", out.data(), in.data(), sizeof g_words);
}

/* ---- the driver API on cudaMalloc memory (linked against libcuda) ------------------ */

enum { RAW, ADDR, CTX };

/* Several attributes in one cuPointerGetAttributes, as libraries ask them.
 * Each slot is 8 prefilled bytes printed raw, so the width the driver
 * writes shows too; addresses and contexts as relations. */
static void driver_attributes(const char *what, uintptr_t base, uintptr_t p)
{
    static const struct {
        CUpointer_attribute attr;
        const char *name;
        int kind;
    } attrs[] = {
        {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE", RAW},
        {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED", RAW},
        {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL", RAW},
        {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED", RAW},
        {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE", RAW},
        {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR", ADDR},
        {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, "DEVICE_POINTER", ADDR},
        {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT", CTX},
    };
    const unsigned count = sizeof attrs / sizeof attrs[0];
    CUpointer_attribute which[count];
    uint64_t slot[count];
    void *data[count];
    for (unsigned i = 0; i < count; i++) {
        which[i] = attrs[i].attr;
        slot[i] = 0xa5a5a5a5a5a5a5a5ull;
        data[i] = &slot[i];
    }
    rec_drv(format("cuPointerGetAttributes(%s)", what).c_str(), cuPointerGetAttributes(count, which, data, p));
    CUcontext ctx = nullptr;
    CKD(cuCtxGetCurrent(&ctx));
    for (unsigned i = 0; i < count; i++) {
        if (attrs[i].kind == RAW) printf("  %-18s %016llx\n", attrs[i].name, (unsigned long long)slot[i]);
        else if (attrs[i].kind == ADDR) printf("  %-18s %s\n", attrs[i].name, relation(slot[i], base, p));
        else printf("  %-18s %s\n", attrs[i].name, slot[i] == (uint64_t)(uintptr_t)ctx ? "ctx" : relation(slot[i], 0, 0));
    }
}

/* cuMemsetD8/D16 and an async device-to-device copy on cudaMalloc memory
 * of an odd size. */
static void driver_sets_and_copies(uint8_t *d, uint8_t *d2, size_t n)
{
    CUstream cs;
    /* A blocking stream: the copy waits for the sets, which run on the
     * legacy default stream (on a non-blocking one it may read before
     * they land, natively too). */
    CKD(cuStreamCreate(&cs, CU_STREAM_DEFAULT));
    must_drv("cuMemsetD8(whole, 0xab)", cuMemsetD8((CUdeviceptr)d, 0xab, n));
    must_drv("cuMemsetD16(second half, 0x1234)", cuMemsetD16((CUdeviceptr)(d + n / 2), 0x1234, n / 4));
    must_drv("cuMemcpyDtoDAsync(whole)", cuMemcpyDtoDAsync((CUdeviceptr)d2, (CUdeviceptr)d, n, cs));
    CKD(cuStreamSynchronize(cs));
    std::vector<uint8_t> out(n, 0), want(n, 0xab);
    for (size_t i = n / 2; i < n; i += 2) {
        want[i] = 0x34;   /* little-endian 0x1234 */
        want[i + 1] = 0x12;
    }
    CK(cudaMemcpy(out.data(), d2, n, cudaMemcpyDeviceToHost));
    check_data("cuMemsetD8 + cuMemsetD16, copied by cuMemcpyDtoDAsync", out.data(), want.data(), n);

    rec_drv("cuMemsetD16(odd address)", cuMemsetD16((CUdeviceptr)(d + 1), 0x1234, 16));
    rec_drv("cuMemcpyDtoDAsync(one byte past the end)", cuMemcpyDtoDAsync((CUdeviceptr)d2, (CUdeviceptr)d, n + 1, cs));
    CKD(cuStreamSynchronize(cs));
    CKD(cuStreamDestroy(cs));
}

static void driver(void)
{
    const size_t n = 3000000;
    uint8_t *d = nullptr, *d2 = nullptr, *m = nullptr;
    CK(cudaMalloc((void **)&d, n));
    CK(cudaMalloc((void **)&d2, n));
    driver_sets_and_copies(d, d2, n);

    CK(cudaMallocManaged((void **)&m, MiB, cudaMemAttachGlobal));
    std::vector<uint8_t> host(4096);
    driver_attributes("cudaMalloc base", (uintptr_t)d, (uintptr_t)d);
    driver_attributes("cudaMalloc + 4219", (uintptr_t)d, (uintptr_t)d + 4219);
    driver_attributes("pageable host", (uintptr_t)host.data(), (uintptr_t)host.data());
    driver_attributes("managed", (uintptr_t)m, (uintptr_t)m);
    CK(cudaFree(m));
    CK(cudaFree(d));
    CK(cudaFree(d2));
}

/* ---- calls the driver refuses ------------------------------------------------------- */

/* Frees the driver refuses: none of them frees anything. */
static void bad_frees(void)
{
    char *d = nullptr;
    CK(cudaMalloc((void **)&d, MiB));
    rec("cudaFree(1 MiB allocation + 4096)", cudaFree(d + 4096));
    last_error();
    std::vector<uint8_t> host(4096);
    rec("cudaFree(pageable host pointer)", cudaFree(host.data()));
    last_error();
    must("cudaFree(the allocation)", cudaFree(d));
    rec("cudaFree(the allocation again)", cudaFree(d));
    last_error();
    rec("cudaFree(nullptr)", cudaFree(nullptr));
}

/* Copies running far past the end of an allocation of one 2 MiB granule:
 * refused before they start (not sticky: the context goes on). */
static void past_the_end(void)
{
    const size_t n = 2 * MiB, over = n + MiB;
    void *d = nullptr, *d2 = nullptr;
    CK(cudaMalloc(&d, n));
    CK(cudaMalloc(&d2, over));
    std::vector<uint8_t> host(over, 0x42), out(n, 0);
    rec("cudaMemcpy(host to 2 MiB, 3 MiB)", cudaMemcpy(d, host.data(), over, cudaMemcpyHostToDevice));
    last_error();
    rec("cudaMemcpy(2 MiB to host, 3 MiB)", cudaMemcpy(host.data(), d, over, cudaMemcpyDeviceToHost));
    last_error();
    rec("cudaMemcpy(2 MiB to 3 MiB, 3 MiB)", cudaMemcpy(d2, d, over, cudaMemcpyDeviceToDevice));
    last_error();
    must("cudaMemset(2 MiB, 0x24)", cudaMemset(d, 0x24, n));
    must("cudaMemcpy(2 MiB to host), after", cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost));
    std::vector<uint8_t> want(n, 0x24);
    check_data("2 MiB after the refused copies", out.data(), want.data(), n);
    CK(cudaFree(d));
    CK(cudaFree(d2));
}

/* An allocation no device holds (natively refused, the pointer set to
 * NULL: programs test it), and one of no bytes (success, NULL). */
static void bad_sizes(void)
{
    void *p = (void *)0x1000;
    rec("cudaMalloc(1 << 50)", cudaMalloc(&p, (size_t)1 << 50));
    printf("  pointer %s\n", p == nullptr ? "NULL" : p == (void *)0x1000 ? "untouched" : "set");
    rec("  cudaGetLastError", cudaGetLastError());
    rec("  cudaGetLastError, again", cudaGetLastError());
    p = (void *)0x1000;
    rec("cudaMalloc(0)", cudaMalloc(&p, 0));
    printf("  pointer %s\n", p == nullptr ? "NULL" : p == (void *)0x1000 ? "untouched" : "set");
    last_error();
    if (p && p != (void *)0x1000) CK(cudaFree(p));
    void *q = nullptr;
    must("cudaMalloc(1 MiB), after", cudaMalloc(&q, MiB));
    CK(cudaFree(q));
}

/* Memory used after its free: the driver no longer knows the address
 * (gvmshim may keep it cached, but must answer as the driver does). */
static void after_free(void)
{
    void *d = nullptr;
    CK(cudaMalloc(&d, MiB));
    CK(cudaMemset(d, 0, MiB));
    CK(cudaFree(d));
    std::vector<uint8_t> host(MiB);
    rec("cudaMemset(freed 1 MiB)", cudaMemset(d, 0x11, MiB));
    last_error();
    rec("cudaMemcpy(freed 1 MiB to host)", cudaMemcpy(host.data(), d, MiB, cudaMemcpyDeviceToHost));
    last_error();
}

static void errors(void)
{
    bad_frees();
    past_the_end();
    bad_sizes();
    after_free();
}

/* ---- cudaMemGetInfo ------------------------------------------------------------------ */

static void meminfo(void)
{
    size_t free_b = 0, total = 0;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    CK(cudaGetDeviceProperties(&prop, 0));
    must("cudaMemGetInfo", cudaMemGetInfo(&free_b, &total));
    printf("  free <= total: %s\n", yes(free_b <= total));
    printf("  total == totalGlobalMem: %s\n", yes(total == prop.totalGlobalMem));
}

/* ---- two devices: pool access and peer access ------------------------------------- */

/* dst[i] = src[i] + add, run on whichever device is current. */
__global__ static void k_copy_add(uint32_t *dst, const uint32_t *src, size_t n, uint32_t add)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i] + add;
}

static void pool_access(const char *what, cudaMemPool_t pool, int dev)
{
    cudaMemAccessFlags f = (cudaMemAccessFlags)0xa5;
    cudaMemLocation l = location(dev);
    cudaError_t e = cudaMemPoolGetAccess(&f, pool, &l);
    printf("%-58s %s flags %d\n", format("cudaMemPoolGetAccess(%s)", what).c_str(), cudaGetErrorName(e), (int)f);
}

/* Reads n words at src on device `on` (into its own memory) and checks
 * them against want + 1 on the host. */
static void read_on(int on, const char *what, const uint32_t *src, size_t n, const std::vector<uint32_t> &want)
{
    CK(cudaSetDevice(on));
    uint32_t *dst = nullptr;
    must(format("cudaMalloc on device %d for %s", on, what).c_str(), cudaMalloc((void **)&dst, n * 4));
    k_copy_add<<<256, 256>>>(dst, src, n, 1);
    rec(format("kernel on device %d reads %s", on, what).c_str(), cudaGetLastError());
    rec("  cudaDeviceSynchronize", cudaDeviceSynchronize());
    std::vector<uint32_t> got(n), plus(want);
    for (auto &w : plus) w += 1;
    must("cudaMemcpy(to host)", cudaMemcpy(got.data(), dst, n * 4, cudaMemcpyDeviceToHost));
    check_data(format("%s, read on device %d", what, on).c_str(), got.data(), plus.data(), n * 4);
    must("cudaFree", cudaFree(dst));
    CK(cudaSetDevice(0));
}

/* What streamOrderedAllocationP2P does: device 0's default pool granted to
 * device 1, whose kernels then read its allocations (made before and after
 * the grant); the grant taken back. */
static void default_pool_shared(cudaStream_t s)
{
    const size_t n = 16 * MiB / 4;
    cudaMemPool_t pool;
    must("cudaDeviceGetDefaultMemPool(device 0)", cudaDeviceGetDefaultMemPool(&pool, 0));
    pool_access("device 1, before the grant", pool, 1);
    uint32_t *before = nullptr, *after = nullptr;
    std::vector<uint32_t> w1 = words_of(n, 61), w2 = words_of(n, 62);
    must("cudaMallocAsync(16 MiB) before the grant", cudaMallocAsync((void **)&before, n * 4, s));
    must("cudaMemcpyAsync(host to it)", cudaMemcpyAsync(before, w1.data(), n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    cudaMemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location = location(1);
    d.flags = cudaMemAccessFlagsProtReadWrite;
    must("cudaMemPoolSetAccess(device 1, read-write)", cudaMemPoolSetAccess(pool, &d, 1));
    pool_access("device 1, after the grant", pool, 1);
    pool_access("device 0, after the grant", pool, 0);
    must("cudaMallocAsync(16 MiB) after the grant", cudaMallocAsync((void **)&after, n * 4, s));
    must("cudaMemcpyAsync(host to it)", cudaMemcpyAsync(after, w2.data(), n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    read_on(1, "pool memory made before the grant", before, n, w1);
    read_on(1, "pool memory made after the grant", after, n, w2);
    CK(cudaSetDevice(1));
    pointer_attributes("pool memory, asked on device 1", after);
    CK(cudaSetDevice(0));
    must("cudaFreeAsync(before)", cudaFreeAsync(before, s));
    must("cudaFreeAsync(after)", cudaFreeAsync(after, s));
    CK(cudaStreamSynchronize(s));
    d.flags = cudaMemAccessFlagsProtNone;
    rec("cudaMemPoolSetAccess(device 1, none)", cudaMemPoolSetAccess(pool, &d, 1));
    last_error();
    pool_access("device 1, after taking it back", pool, 1);
    d.location = location(0);
    rec("cudaMemPoolSetAccess(device 0, none): its own device", cudaMemPoolSetAccess(pool, &d, 1));
    last_error();
}

/* What simpleP2P does: peer access enabled both ways, a kernel on each
 * device reading the other's cudaMalloc memory, peer and default copies,
 * then peer access disabled; the refused enables and disables too. */
static void peer_access(void)
{
    const size_t n = 8 * MiB / 4;
    rec("cudaDeviceDisablePeerAccess(1) before any enable", cudaDeviceDisablePeerAccess(1));
    last_error();
    must("cudaDeviceEnablePeerAccess(1) on device 0", cudaDeviceEnablePeerAccess(1, 0));
    rec("cudaDeviceEnablePeerAccess(1) again", cudaDeviceEnablePeerAccess(1, 0));
    last_error();
    CK(cudaSetDevice(1));
    must("cudaDeviceEnablePeerAccess(0) on device 1", cudaDeviceEnablePeerAccess(0, 0));
    uint32_t *on1 = nullptr;
    must("cudaMalloc on device 1", cudaMalloc((void **)&on1, n * 4));
    CK(cudaSetDevice(0));
    uint32_t *on0 = nullptr;
    must("cudaMalloc on device 0", cudaMalloc((void **)&on0, n * 4));
    std::vector<uint32_t> w0 = words_of(n, 71), w1 = words_of(n, 72), got(n);
    must("cudaMemcpy(host to device 0)", cudaMemcpy(on0, w0.data(), n * 4, cudaMemcpyHostToDevice));
    must("cudaMemcpyPeer(device 0 to device 1)", cudaMemcpyPeer(on1, 1, on0, 0, n * 4));
    must("cudaMemcpy(device 1 to host)", cudaMemcpy(got.data(), on1, n * 4, cudaMemcpyDeviceToHost));
    check_data("device 0's words through device 1", got.data(), w0.data(), n * 4);
    read_on(1, "device 0's cudaMalloc memory", on0, n, w0);
    must("cudaMemcpy(host to device 1)", cudaMemcpy(on1, w1.data(), n * 4, cudaMemcpyHostToDevice));
    read_on(0, "device 1's cudaMalloc memory", on1, n, w1);
    /* A kernel on device 0 writing device 1's memory. */
    k_copy_add<<<256, 256>>>(on1, on0, n, 5);
    rec("kernel on device 0 writes device 1's memory", cudaGetLastError());
    rec("  cudaDeviceSynchronize", cudaDeviceSynchronize());
    std::vector<uint32_t> want(w0);
    for (auto &x : want) x += 5;
    must("cudaMemcpy(device 1 to host, default kind)", cudaMemcpy(got.data(), on1, n * 4, cudaMemcpyDefault));
    check_data("device 1's memory written from device 0", got.data(), want.data(), n * 4);
    cudaStream_t s = new_stream();
    must("cudaMemcpyPeerAsync(device 1 to device 0)", cudaMemcpyPeerAsync(on0, 0, on1, 1, n * 4, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    must("cudaMemcpy(device 0 to host)", cudaMemcpy(got.data(), on0, n * 4, cudaMemcpyDeviceToHost));
    check_data("device 0's memory after the peer copy back", got.data(), want.data(), n * 4);
    pointer_attributes("device 1's memory, asked on device 0", on1);
    must("cudaDeviceDisablePeerAccess(1) on device 0", cudaDeviceDisablePeerAccess(1));
    rec("cudaDeviceDisablePeerAccess(1) again", cudaDeviceDisablePeerAccess(1));
    last_error();
    /* Copies need no peer access. */
    must("cudaMemcpyPeer(device 0 to device 1), access disabled", cudaMemcpyPeer(on1, 1, on0, 0, n * 4));
    must("cudaMemcpy(device 1 to host)", cudaMemcpy(got.data(), on1, n * 4, cudaMemcpyDeviceToHost));
    check_data("device 0's words through device 1, access disabled", got.data(), want.data(), n * 4);
    CK(cudaSetDevice(1));
    must("cudaDeviceDisablePeerAccess(0) on device 1", cudaDeviceDisablePeerAccess(0));
    must("cudaFree(device 1's)", cudaFree(on1));
    CK(cudaSetDevice(0));
    must("cudaFree(device 0's)", cudaFree(on0));
}

static void two_devices(void)
{
    int n = 0, a01 = 0, a10 = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("one device: nothing to compare\n");
        return;
    }
    CK(cudaDeviceCanAccessPeer(&a01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&a10, 1, 0));
    printf("peer access 0->1 %s, 1->0 %s\n", yes(a01), yes(a10));
    if (!a01 || !a10) return;
    cudaStream_t s = new_stream();
    default_pool_shared(s);
    CK(cudaStreamDestroy(s));
    peer_access();
}

/* ---- the scenarios ---------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*fn)(void);
} scenarios[] = {
    {"managed", managed}, {"copies", copies}, {"textures", textures}, {"pools", pools},
    {"host", host},       {"symbol", symbol}, {"driver", driver},     {"errors", errors},
    {"meminfo", meminfo}, {"two-devices", two_devices},
};

static int child(const std::string &name)
{
    watchdog(60);
    device_count_or_skip();
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("SKIP: cannot create a context on device 0\n0 passed, 0 failed\n");
        return 77;
    }
    for (const auto &s : scenarios) {
        if (name != s.name) continue;
        Runner r;
        /* "done" only when every step ran: a transcript cut short differs. */
        r.run(s.name, [&] {
            s.fn();
            printf("done\n");
        });
        return r.finish();
    }
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    std::vector<const char *> names;
    for (const auto &s : scenarios) names.push_back(s.name);
    return compare_with_native(names, nullptr, false);
}
