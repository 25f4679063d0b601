/* Shared by the gpu suite's CUDA programs and the benchmarks (bench/):
 * checked CUDA calls, a tiny runner (each case a function; a failed check
 * throws, the case fails and the next one runs unless the CUDA context is
 * broken), a watchdog, the gvmshim API looked up at run time, pattern
 * fill/verify kernels, and for the benchmarks clocks, statistics and the
 * one machine-readable line each prints for scripts/bench:
 *
 *     BENCH_JSON {"bench": "alloc", "device": "...", ...}
 *
 * A test program exits 77 when there is no usable GPU, prints one line
 * "PASS|FAIL|SKIP name" per case and ends with "N passed, N failed". A
 * benchmark defines GT_FAIL_EXITS before including this: a failed check
 * then ends it at once with the message and status 1 (it has no runner). */
#ifndef GVM_GPU_TEST_H
#define GVM_GPU_TEST_H

#include "gvmshim.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gt {

static constexpr size_t KiB = size_t(1) << 10;
static constexpr size_t MiB = size_t(1) << 20;
static constexpr size_t GiB = size_t(1) << 30;

struct Failure : std::runtime_error {
    explicit Failure(const std::string &s) : std::runtime_error(s) {}
};
struct Skip : std::runtime_error {
    explicit Skip(const std::string &s) : std::runtime_error(s) {}
};

static inline std::string vformat(const char *fmt, va_list ap)
{
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

static inline std::string format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

[[noreturn]] static inline void fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
#ifdef GT_FAIL_EXITS
    fprintf(stderr, "%s:%d: %s\n", base ? base + 1 : file, line, s.c_str());
    fflush(stderr);
    exit(1);
#else
    throw Failure(format("%s:%d: %s", base ? base + 1 : file, line, s.c_str()));
#endif
}

[[noreturn]] static inline void skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Skip(s);
}

static inline const char *human(size_t n, char *buf, size_t len)
{
    if (n >= GiB && n % GiB == 0) snprintf(buf, len, "%zu GiB", n / GiB);
    else if (n >= MiB && n % MiB == 0) snprintf(buf, len, "%zu MiB", n / MiB);
    else if (n >= KiB && n % KiB == 0) snprintf(buf, len, "%zu KiB", n / KiB);
    else snprintf(buf, len, "%zu B", n);
    return buf;
}

} // namespace gt

/* A CUDA runtime call that must succeed. */
#define CK(call)                                                               \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess)                                                 \
            gt::fail_at(__FILE__, __LINE__, "%s -> %s (%s)", #call, cudaGetErrorName(e_), \
                        cudaGetErrorString(e_));                               \
    } while (0)

/* A driver call (through an entry point) that must succeed. */
#define CKD(call)                                                              \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) gt::fail_at(__FILE__, __LINE__, "%s -> CUresult %d", #call, (int)r_); \
    } while (0)

/* A gvmshim API call that must return GVM_OK. */
#define CKG(api, call)                                                         \
    do {                                                                       \
        gvm_status s_ = (call);                                                \
        if (s_ != GVM_OK)                                                      \
            gt::fail_at(__FILE__, __LINE__, "%s -> %d (%s)", #call, s_,        \
                        (api).strerror ? (api).strerror(s_) : "?");            \
    } while (0)

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond))                                                           \
            gt::fail_at(__FILE__, __LINE__, "EXPECT(%s) failed: %s", #cond,    \
                        gt::format(__VA_ARGS__).c_str());                      \
    } while (0)

namespace gt {

/* ---- the runner ---------------------------------------------------------- */

struct Runner {
    int passed = 0, failed = 0, skipped = 0;
    bool broken = false;

    /* After a failure: a sticky error (illegal address, launch failure)
     * poisons the context, and every later case would fail for it. */
    void check_context(void)
    {
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess) return;
        (void)cudaGetLastError();
        cudaError_t again = cudaDeviceSynchronize();
        if (again != cudaSuccess) {
            printf("     the CUDA context is broken (%s): the remaining cases cannot run\n",
                   cudaGetErrorName(again));
            broken = true;
        }
    }

    /* check_ctx false: the case did not use CUDA in this process (after a
     * failure there is no context to check). */
    void run(const char *name, const std::function<void()> &fn, bool check_ctx = true)
    {
        fflush(stdout);
        if (broken) {
            printf("FAIL %s (not run: the CUDA context is broken)\n", name);
            failed++;
            return;
        }
        try {
            fn();
            printf("PASS %s\n", name);
            passed++;
        } catch (const Skip &s) {
            printf("SKIP %s: %s\n", name, s.what());
            skipped++;
        } catch (const Failure &f) {
            printf("FAIL %s: %s\n", name, f.what());
            failed++;
            if (check_ctx) check_context();
        } catch (const std::exception &e) {
            printf("FAIL %s: exception: %s\n", name, e.what());
            failed++;
            if (check_ctx) check_context();
        }
        fflush(stdout);
    }

    int finish(void)
    {
        if (skipped) printf("(%d skipped)\n", skipped);
        printf("%d passed, %d failed\n", passed, failed);
        fflush(stdout);
        if (failed) return 1;
        return passed ? 0 : 77;
    }
};

/* Kills the program with a message when it runs too long (a hung kernel
 * or a deadlock must fail the test, not stall the suite). */
static inline void on_alarm(int)
{
    static const char msg[] = "\nFAIL watchdog: the program ran past its time limit\n0 passed, 1 failed\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static inline void watchdog(unsigned seconds)
{
    const char *env = getenv("GVM_TEST_TIMEOUT");
    if (env && atoi(env) > 0) seconds = (unsigned)atoi(env);
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

/* Exit 77 (meson: skipped) when there is no usable GPU. */
static inline int device_count_or_skip(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        printf("0 passed, 0 failed\n");
        fflush(stdout);
        exit(77);
    }
    return n;
}

/* ---- gvmshim's API, present only under the shim --------------------------- */

struct Gvm {
    bool present = false;
    decltype(&gvm_migrate) migrate = nullptr;
    decltype(&gvm_alias) alias = nullptr;
    decltype(&gvm_unalias) unalias = nullptr;
    decltype(&gvm_realloc) realloc = nullptr;
    decltype(&gvm_query) query = nullptr;
    decltype(&gvm_strerror) strerror = nullptr;
    decltype(&gvm_tag_push) tag_push = nullptr;
    decltype(&gvm_tag_pop) tag_pop = nullptr;
    decltype(&gvm_pause) pause = nullptr;
    decltype(&gvm_resume) resume = nullptr;
};

template <typename T> static inline void lookup(T &slot, const char *name)
{
    slot = reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}

static inline Gvm load_gvm(void)
{
    Gvm g;
    lookup(g.migrate, "gvm_migrate");
    lookup(g.alias, "gvm_alias");
    lookup(g.unalias, "gvm_unalias");
    lookup(g.realloc, "gvm_realloc");
    lookup(g.query, "gvm_query");
    lookup(g.strerror, "gvm_strerror");
    lookup(g.tag_push, "gvm_tag_push");
    lookup(g.tag_pop, "gvm_tag_pop");
    lookup(g.pause, "gvm_pause");
    lookup(g.resume, "gvm_resume");
    g.present = g.migrate && g.alias && g.unalias && g.realloc && g.query && g.strerror;
    return g;
}

static inline const char *loc_name(int loc, char *buf, size_t len)
{
    switch (loc) {
    case GVM_HOST: return "host";
    case GVM_MIXED: return "mixed";
    case GVM_NOWHERE: return "nowhere";
    default: snprintf(buf, len, "device %d", loc); return buf;
    }
}

/* ---- driver entry points without linking libcuda --------------------------- */

template <typename T> static inline T driver_fn(const char *name, int version = 12000)
{
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, (unsigned)version, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
        throw Failure(format("cudaGetDriverEntryPointByVersion(%s) -> %s, status %d", name,
                             cudaGetErrorName(e), (int)q));
    return reinterpret_cast<T>(fn);
}

typedef CUresult (*mem_get_address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

/* ---- NVML: the GPU's used memory, as nvidia-smi shows it ------------------ */

struct NvmlMemory {
    unsigned long long total, free, used;
};

/* Bytes in use on device dev (all processes: the machine is ours), or 0
 * when NVML cannot say. */
static inline size_t nvml_used(int dev)
{
    static void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    typedef int (*init_fn)(void);
    typedef int (*by_bus_fn)(const char *, void **);
    typedef int (*mem_fn)(void *, NvmlMemory *);
    static init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    static by_bus_fn by_bus = (by_bus_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    static mem_fn mem = (mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    static bool up = init && by_bus && mem && init() == 0;
    char bus[32];
    void *h = nullptr;
    NvmlMemory m;
    if (!up || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess || by_bus(bus, &h) || mem(h, &m)) return 0;
    return m.used;
}

/* ---- programs that compare themselves with a native run ------------------- */

/* Runs this program again as "--child name", with LD_PRELOAD set to preload
 * (nullptr: unset) and the scenario's variables set by env (may be
 * nullptr); its stdout (and its stderr too, with merge_stderr) into out.
 * Returns its exit status (128 + the signal that ended it). */
static inline int run_self_child(const std::string &name, const char *preload, void (*env)(const std::string &),
                                 std::string &out, bool merge_stderr)
{
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        if (merge_stderr) dup2(fds[1], 2);
        close(fds[0]);
        if (preload) setenv("LD_PRELOAD", preload, 1);
        else unsetenv("LD_PRELOAD");
        if (env) env(name);
        execl("/proc/self/exe", "child", "--child", name.c_str(), (char *)nullptr);
        _exit(127);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t n;
    out.clear();
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, (size_t)n);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* What a child printed but the runner's own lines (PASS/FAIL, the count):
 * the part a native and a shim run must agree on. */
static inline std::string calls_of(const std::string &out)
{
    std::string r;
    size_t pos = 0;
    while (pos < out.size()) {
        size_t end = out.find('\n', pos);
        if (end == std::string::npos) end = out.size();
        std::string line = out.substr(pos, end - pos);
        if (line.rfind("PASS", 0) && line.rfind("FAIL", 0) && line.find(" passed, ") == std::string::npos)
            r += line + "\n";
        pos = end + 1;
    }
    return r;
}

/* The parent of such a program: every scenario natively, then under the
 * shim (GVM_TEST_LIB, else the LD_PRELOAD it was started with); a scenario
 * passes when both runs exit 0 and print the same. Returns the program's
 * exit status (77: no shim to compare with, or no GPU). */
static inline int compare_with_native(const std::vector<const char *> &names, void (*env)(const std::string &),
                                      bool merge_stderr)
{
    const char *lib = getenv("GVM_TEST_LIB");
    if (!lib || !*lib) lib = getenv("LD_PRELOAD");
    if (!lib || !*lib) {
        printf("SKIP: no shim to compare with (set GVM_TEST_LIB or LD_PRELOAD)\n0 passed, 0 failed\n");
        return 77;
    }
    std::string preload = lib;
    int passed = 0, failed = 0;
    for (const char *name : names) {
        std::string native, shim;
        auto t0 = std::chrono::steady_clock::now();
        int rn = run_self_child(name, nullptr, env, native, merge_stderr);
        if (rn == 77) {
            printf("%s", native.c_str());
            return 77;
        }
        auto t1 = std::chrono::steady_clock::now();
        int rs = run_self_child(name, preload.c_str(), env, shim, merge_stderr);
        auto t2 = std::chrono::steady_clock::now();
        bool ok = rn == 0 && rs == 0 && calls_of(native) == calls_of(shim);
        /* The times: a scenario far slower under the shim is a defect too. */
        printf("%s %s (native %.2f s, shim %.2f s)\n", ok ? "PASS" : "FAIL", name,
               std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
        if (!ok) printf("  native (exit %d):\n%s  under the shim (exit %d):\n%s", rn, native.c_str(), rs, shim.c_str());
        ok ? passed++ : failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* ---- patterns ------------------------------------------------------------ */

__host__ __device__ static inline uint8_t byte_pattern(uint64_t i, uint32_t seed)
{
    uint32_t h = (uint32_t)(i ^ (i >> 29)) * 2654435761u + seed * 40503u;
    h ^= h >> 15;
    return (uint8_t)(h >> 7);
}

__host__ __device__ static inline uint32_t word_pattern(uint64_t i, uint32_t seed)
{
    uint32_t h = (uint32_t)i * 2246822519u ^ (uint32_t)(i >> 32) * 3266489917u;
    h += seed * 668265263u;
    h ^= h >> 13;
    h *= 374761393u;
    return h ^ (h >> 16);
}

/* result[0]: mismatches; result[1]: first mismatching index (or ~0). */
__device__ static inline void report_bad(unsigned long long *result, uint64_t i)
{
    atomicAdd(&result[0], 1ull);
    atomicMin(&result[1], (unsigned long long)i);
}

__global__ static void k_fill_bytes(uint8_t *p, size_t n, uint32_t seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = byte_pattern(i, seed);
}

/* constant >= 0: every byte must equal it; otherwise the pattern of seed. */
__global__ static void k_verify_bytes(const uint8_t *p, size_t n, uint32_t seed, int constant,
                                      unsigned long long *result)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint8_t want = constant >= 0 ? (uint8_t)constant : byte_pattern(i, seed);
        if (p[i] != want) report_bad(result, i);
    }
}

/* Element i of the allocation holds word_pattern(first + i, seed). */
__global__ static void k_fill_words(uint32_t *p, size_t n, uint64_t first, uint32_t seed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = word_pattern(first + i, seed);
}

/* mode 0: pattern of seed (index first + i); mode 1: every word == value. */
__global__ static void k_verify_words(const uint32_t *p, size_t n, uint64_t first, uint32_t seed, int mode,
                                      uint32_t value, unsigned long long *result)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t want = mode ? value : word_pattern(first + i, seed);
        if (p[i] != want) report_bad(result, i);
    }
}

static inline unsigned grid_for(size_t n, unsigned threads = 256)
{
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 4096) blocks = 4096;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

/* Mismatch counters in pinned, mapped, portable host memory: every device
 * can write them, and they are not gvmshim's. */
struct Counter {
    unsigned long long *h = nullptr;
    Counter()
    {
        CK(cudaHostAlloc((void **)&h, 2 * sizeof *h, cudaHostAllocMapped | cudaHostAllocPortable));
        reset();
    }
    ~Counter()
    {
        if (h) cudaFreeHost(h);
    }
    Counter(const Counter &) = delete;
    Counter &operator=(const Counter &) = delete;
    void reset(void)
    {
        h[0] = 0;
        h[1] = ~0ull;
    }
};

/* Fills n words at p (element i: pattern of first + i) on the current device. */
static inline void fill_words(uint32_t *p, size_t n, uint64_t first, uint32_t seed, cudaStream_t s = 0)
{
    k_fill_words<<<grid_for(n), 256, 0, s>>>(p, n, first, seed);
    CK(cudaGetLastError());
}

/* Verifies n words on the current device; throws with the first bad index. */
static inline void verify_words(Counter &c, const uint32_t *p, size_t n, uint64_t first, uint32_t seed,
                                const char *what, int mode = 0, uint32_t value = 0)
{
    c.reset();
    k_verify_words<<<grid_for(n), 256>>>(p, n, first, seed, mode, value, c.h);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (c.h[0]) {
        uint64_t i = c.h[1];
        uint32_t want = mode ? value : word_pattern(first + i, seed);
        throw Failure(format("%s: %llu of %zu words wrong, first at index %llu (want %#x)", what, c.h[0], n,
                             (unsigned long long)i, want));
    }
}

} // namespace gt

/* ---- benchmarks: clocks, statistics, the BENCH_JSON line ------------------- */

namespace gt {

static inline double now_us(void)
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static inline double median(std::vector<double> v)
{
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A link's GB/s moving n bytes with copy: the best of 8 timed copies
 * after an untimed one. Goals are fractions of the link and bounds the
 * least time work could take, so a slow stretch of the host must not
 * lower the figure. */
template <typename F> static double link_gbps(size_t n, F copy)
{
    copy();
    CK(cudaDeviceSynchronize());
    double best = 0;
    for (int i = 0; i < 8; i++) {
        double t0 = now_us();
        copy();
        CK(cudaDeviceSynchronize());
        best = std::max(best, (double)n / ((now_us() - t0) * 1e3));
    }
    return best;
}

static inline double percentile(std::vector<double> v, double p)
{
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t i = (size_t)(p * (double)(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

static inline double mean(const std::vector<double> &v)
{
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / (double)v.size();
}

/* Minimal JSON building: values are numbers or already-quoted strings. */
static inline std::string q(const std::string &s)
{
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if ((unsigned char)c < 0x20) continue;
        o += c;
    }
    return o + "\"";
}

static inline std::string num(double v)
{
    char b[64];
    /* Whole numbers (sizes, counts) exactly: %.6g made 1 GiB 1073740000. */
    if (v == (double)(long long)v && v > -9007199254740992.0 && v < 9007199254740992.0)
        snprintf(b, sizeof b, "%lld", (long long)v);
    else
        snprintf(b, sizeof b, "%.6g", v);
    return b;
}

struct Obj {
    std::string s;
    Obj &add(const char *k, const std::string &raw)
    {
        s += (s.empty() ? "" : ", ") + q(k) + ": " + raw;
        return *this;
    }
    Obj &str(const char *k, const std::string &v) { return add(k, q(v)); }
    Obj &n(const char *k, double v) { return add(k, num(v)); }
    std::string done() const { return "{" + s + "}"; }
};

static inline std::string list(const std::vector<std::string> &items)
{
    std::string o = "[";
    for (size_t i = 0; i < items.size(); i++) o += (i ? ", " : "") + items[i];
    return o + "]";
}

static inline std::string nums(const std::vector<double> &v)
{
    std::vector<std::string> s;
    for (double x : v) s.push_back(num(x));
    return list(s);
}

/* Device name, driver and runtime versions, and whether the shim's API is
 * in the process (the caller tells). */
static inline Obj header(const char *name, bool shim)
{
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    CK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0, ndev = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cudaGetDeviceCount(&ndev);
    Obj o;
    o.str("bench", name).str("device", p.name).n("devices", ndev).n("cuda_driver", drv).n("cuda_runtime", rt);
    o.n("shim", shim ? 1 : 0);
    return o;
}

static inline void emit(const Obj &o)
{
    printf("BENCH_JSON %s\n", o.done().c_str());
    fflush(stdout);
}

} // namespace gt

#endif
