/* Shared by the benchmark programs: checked CUDA calls (a failure ends the
 * program with a message), clocks, statistics, a watchdog, and the one
 * machine-readable line each program prints for scripts/bench:
 *
 *     BENCH_JSON {"bench": "alloc", "device": "...", ...}
 *
 * Every program exits 77 when there is no usable GPU. */
#ifndef GVM_BENCH_H
#define GVM_BENCH_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

static constexpr size_t KiB = size_t(1) << 10;
static constexpr size_t MiB = size_t(1) << 20;
static constexpr size_t GiB = size_t(1) << 30;

[[noreturn]] static inline void die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    exit(1);
}

} // namespace bench

#define CK(call)                                                               \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess)                                                 \
            bench::die(__FILE__, __LINE__, "%s -> %s (%s)", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
    } while (0)

#define CKD(call)                                                              \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) bench::die(__FILE__, __LINE__, "%s -> CUresult %d", #call, (int)r_); \
    } while (0)

namespace bench {

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

static inline void on_alarm(int)
{
    static const char msg[] = "\nbenchmark watchdog: ran past its time limit\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(124);
}

static inline void watchdog(unsigned seconds)
{
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

static inline int device_count_or_skip(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        printf("no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        exit(77);
    }
    return n;
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

static inline const char *size_name(size_t n, char *buf, size_t len)
{
    if (n >= GiB && n % GiB == 0) snprintf(buf, len, "%zu GiB", n / GiB);
    else if (n >= MiB && n % MiB == 0) snprintf(buf, len, "%zu MiB", n / MiB);
    else if (n >= KiB && n % KiB == 0) snprintf(buf, len, "%zu KiB", n / KiB);
    else snprintf(buf, len, "%zu B", n);
    return buf;
}

} // namespace bench

#endif
