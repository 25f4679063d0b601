/* pause: gvm_pause(tag, GVM_PAUSE_KEEP) and gvm_resume(tag) of a tagged
 * allocation next to the link they cross, measured in the same process.
 * Runs only under gvmshim.
 *
 * One size per process (--size, default 1 GiB), so the first cycle is the
 * first move to host in a fresh process ("cold"): the tag is pushed, the
 * allocation made and filled by a kernel, and after --settle-ms (default 0:
 * at once; a program loading a model has seconds here, in which gvmshim
 * readies host memory in the background) it is paused and resumed
 * --cycles times (default 3). Each call is timed wall to wall after a
 * device sync; a kernel sums the data before the first pause and after
 * every resume, and the sums must agree. The link is measured last (its
 * cudaMallocHost buffer must not warm anything up): pinned cudaMemcpy D2H
 * and H2D of min(size, 1 GiB), best of 8 (a slow stretch of the host must not
 * lower the link and flatter the ratio).
 *
 * --unmapped: gvm_pause(tag, GVM_PAUSE_UNMAPPED), the copy kept in host
 * memory that is not mapped at the allocation's address.
 *
 * --create-probe: at the end, the rate of creating pinned host memory
 * natively (1, 4, 8 threads), what bounds a move to host without ready
 * memory.
 *
 * --whole SIZE: the whole process (gvm_pause_report(NULL, GVM_PAUSE_KEEP),
 * gvm_resume_report(NULL)) holding SIZE of untagged memory in 256 MiB
 * pieces, default settings: a cold cycle (the process's first move to
 * host) and a warm one, each call's bytes and seconds as gvmshim reports
 * them, then the link.
 *
 * --shrink SIZE: holds SIZE untagged, prints "SHRINK_READY <pid>" and waits
 * for a line on stdin (scripts/bench lowers device_limit meanwhile with
 * gvmctl set, the process started with GVM_CONTROL=1 and spill=host), then
 * reports the bytes left on the device, checks the data and measures the link.
 *
 * --checkpoint SIZE: no shim. A child holds SIZE natively (cudaMalloc,
 * 256 MiB pieces) and measures the link; the parent times the driver's
 * cuCheckpointProcessLock / Checkpoint / Restore / Unlock on it (CUDA 12.8+
 * drivers; looked up at run time), then the child checks its data. Any
 * failure is reported as a reason, not as a failed run.
 *
 *     bench-pause [--size 1G] [--cycles 3] [--settle-ms 0] [--unmapped] [--create-probe]
 *     bench-pause --whole SIZE | --shrink SIZE | --checkpoint SIZE */
#define GT_FAIL_EXITS
#include "gpu_test.h"
#include "gvmshim.h"

#include <cuda.h>
#include <dlfcn.h>
#include <thread>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace gt;

static unsigned long long *g_sum;   /* pinned, mapped */

__device__ __host__ static inline uint32_t pattern(uint64_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u;
    return h ^ (h >> 15);
}

__global__ void k_fill(uint32_t *p, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i);
}

/* A position-weighted sum: a word moved to the wrong place changes it. */
__global__ void k_sum(const uint32_t *p, size_t n, unsigned long long *sum)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mine += (unsigned long long)p[i] * (i % 65521 + 1);
    atomicAdd(sum, mine);
}

static unsigned long long checksum(const uint32_t *p, size_t n)
{
    *g_sum = 0;
    k_sum<<<2048, 256>>>(p, n, g_sum);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return *g_sum;
}

static size_t parse_size(const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    size_t m = 1;
    if (end && (*end == 'M' || *end == 'm')) m = MiB;
    if (end && (*end == 'G' || *end == 'g')) m = GiB;
    return (size_t)(v * (double)m);
}

static size_t host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * KiB;
}

/* GB/s of creating (and releasing, untimed) 1 GiB of pinned host memory
 * in 64 MiB pieces on `threads` threads: the rate that bounds a move to
 * host without ready memory, and the background fill's. */
static double host_create_gbps(int threads)
{
    auto create = driver_fn<decltype(&cuMemCreate)>("cuMemCreate");
    auto release = driver_fn<decltype(&cuMemRelease)>("cuMemRelease");
    auto attr = driver_fn<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
    int numa = 0, numa_vmm = 0;
    attr(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
    attr(&numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = numa_vmm ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
    prop.location.id = numa_vmm && numa >= 0 ? numa : 0;
    const size_t piece = 64 * MiB, n = GiB / piece;
    std::vector<CUmemGenericAllocationHandle> h(n);
    std::vector<CUresult> rc(n, CUDA_SUCCESS);
    double t0 = now_us();
    std::vector<std::thread> t;
    for (int k = 0; k < threads; k++)
        t.emplace_back([&, k] {
            for (size_t i = (size_t)k; i < n; i += (size_t)threads) rc[i] = create(&h[i], piece, &prop, 0);
        });
    for (auto &x : t) x.join();
    double us = now_us() - t0;
    for (size_t i = 0; i < n; i++) CKD(rc[i]);
    for (size_t i = 0; i < n; i++) CKD(release(h[i]));
    return (double)GiB / (us * 1e3);
}

template <typename F> static double timed_ms(F call)
{
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    call();
    return (now_us() - t0) / 1000;
}

/* ---- untagged working sets: --whole, --shrink, --checkpoint ------------------ */

static const size_t kPiece = 256 * MiB;

struct Pieces {
    std::vector<uint32_t *> p;
    std::vector<unsigned long long> sums;
};

static Pieces fill_pieces(size_t size)
{
    Pieces w;
    for (size_t done = 0; done < size; done += kPiece) {
        uint32_t *p = nullptr;
        CK(cudaMalloc((void **)&p, kPiece));
        k_fill<<<2048, 256>>>(p, kPiece / 4);
        CK(cudaGetLastError());
        w.p.push_back(p);
    }
    for (uint32_t *p : w.p) w.sums.push_back(checksum(p, kPiece / 4));
    return w;
}

static bool pieces_intact(const Pieces &w)
{
    for (size_t i = 0; i < w.p.size(); i++)
        if (checksum(w.p[i], kPiece / 4) != w.sums[i]) return false;
    return true;
}

static void free_pieces(Pieces &w)
{
    for (uint32_t *p : w.p) CK(cudaFree(p));
    w.p.clear();
}

static void measure_link(double *d2h, double *h2d)
{
    void *h = nullptr, *d = nullptr;
    CK(cudaMallocHost(&h, GiB));
    CK(cudaMalloc(&d, GiB));
    memset(h, 0, GiB);
    *h2d = link_gbps(GiB, [&] { CK(cudaMemcpy(d, h, GiB, cudaMemcpyHostToDevice)); });
    *d2h = link_gbps(GiB, [&] { CK(cudaMemcpy(h, d, GiB, cudaMemcpyDeviceToHost)); });
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
}

/* Room for SIZE on the device (and the 1 GiB link buffer) and for the host
 * copy; prints and emits a skip otherwise. */
static bool fits_or_skip(const char *mode, size_t size, size_t host_copies)
{
    size_t dfree = 0, dtotal = 0;
    CK(cudaMemGetInfo(&dfree, &dtotal));
    size_t hfree = host_available(), hneed = host_copies * size + GiB + 4 * GiB;
    if (dfree >= size + 2 * GiB && (!hfree || hfree >= hneed)) return true;
    char nb[32];
    printf("%s %s skipped: needs %zu MiB device (%zu free) and %zu MiB host (%zu available)\n", mode,
           human(size, nb, sizeof nb), (size + 2 * GiB) / MiB, dfree / MiB, hneed / MiB, hfree / MiB);
    Obj o = header("pause", true);
    o.str("mode", mode).n("size", (double)size).str("skipped", "memory");
    emit(o);
    return false;
}

typedef gvm_status (*pause_report_fn)(const char *, int, gvm_pause_result *);
typedef gvm_status (*resume_report_fn)(const char *, gvm_pause_result *);

static int run_whole(Gvm &g, size_t size)
{
    pause_report_fn pause_r = (pause_report_fn)dlsym(RTLD_DEFAULT, "gvm_pause_report");
    resume_report_fn resume_r = (resume_report_fn)dlsym(RTLD_DEFAULT, "gvm_resume_report");
    if (!pause_r || !resume_r) fail_at(__FILE__, __LINE__, "gvm_pause_report / gvm_resume_report not in the process");
    if (!fits_or_skip("whole", size, 1)) return 0;
    Pieces w = fill_pieces(size);
    std::vector<double> pause_s, resume_s, pause_b, resume_b, pause_wall, resume_wall;
    std::string reason;
    for (int c = 0; c < 2; c++) {
        gvm_pause_result r;
        CK(cudaDeviceSynchronize());
        double t0 = now_us();
        CKG(g, pause_r(NULL, GVM_PAUSE_KEEP, &r));
        pause_wall.push_back((now_us() - t0) / 1e6);
        pause_s.push_back(r.seconds);
        pause_b.push_back((double)r.bytes);
        if (r.reason[0]) reason = r.reason;
        t0 = now_us();
        CKG(g, resume_r(NULL, &r));
        resume_wall.push_back((now_us() - t0) / 1e6);
        resume_s.push_back(r.seconds);
        resume_b.push_back((double)r.bytes);
        if (r.reason[0]) reason = r.reason;
        printf("whole %zu MiB cycle %d: pause %.1f MiB in %.3f s (wall %.3f s), resume %.1f MiB in %.3f s (wall %.3f s)\n",
               size / MiB, c + 1, pause_b.back() / MiB, pause_s.back(), pause_wall.back(), resume_b.back() / MiB,
               resume_s.back(), resume_wall.back());
        fflush(stdout);
    }
    bool ok = pieces_intact(w);
    free_pieces(w);
    double d2h = 0, h2d = 0;
    measure_link(&d2h, &h2d);
    printf("link: D2H %.2f GB/s, H2D %.2f GB/s; data %s\n", d2h, h2d, ok ? "ok" : "CHANGED");
    Obj o = header("pause", true);
    o.str("mode", "whole").n("size", (double)size).n("pieces", (double)(size / kPiece));
    o.add("pause_s", nums(pause_s)).add("pause_bytes", nums(pause_b)).add("pause_wall_s", nums(pause_wall));
    o.add("resume_s", nums(resume_s)).add("resume_bytes", nums(resume_b)).add("resume_wall_s", nums(resume_wall));
    o.n("d2h_gbps", d2h).n("h2d_gbps", h2d).str("checksum", ok ? "ok" : "changed").str("reason", reason);
    emit(o);
    return ok ? 0 : 1;
}

static int run_shrink(Gvm &g, size_t size)
{
    if (!fits_or_skip("shrink", size, 1)) return 0;
    Pieces w = fill_pieces(size);
    CK(cudaDeviceSynchronize());
    printf("SHRINK_READY %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) fail_at(__FILE__, __LINE__, "no go-ahead on stdin");
    /* The program's next kernel: what the shrink left it to do (copies to
     * map once reached are mapped before it goes). */
    double t0 = now_us();
    k_fill<<<1, 32>>>(w.p[0], 32);
    CK(cudaDeviceSynchronize());
    double next_launch = (now_us() - t0) / 1e6;
    size_t on_device = 0;
    for (uint32_t *p : w.p) {
        gvm_info info;
        CKG(g, g.query(p, &info));
        on_device += info.bytes_on_device;
    }
    bool ok = pieces_intact(w);
    free_pieces(w);
    double d2h = 0, h2d = 0;
    measure_link(&d2h, &h2d);
    printf("shrink: %zu MiB of %zu MiB left on the device; link D2H %.2f GB/s, H2D %.2f GB/s; data %s\n",
           on_device / MiB, size / MiB, d2h, h2d, ok ? "ok" : "CHANGED");
    Obj o = header("pause", true);
    o.str("mode", "shrink").n("size", (double)size).n("on_device", (double)on_device).n("next_launch_s", next_launch);
    o.n("d2h_gbps", d2h).n("h2d_gbps", h2d).str("checksum", ok ? "ok" : "changed");
    emit(o);
    return ok ? 0 : 1;
}

/* The child of --checkpoint: holds size natively, tells the parent the
 * link, waits, checks its data and says so. */
static void checkpoint_child(size_t size, int to_parent, int from_parent)
{
    double msg[3] = {0, 0, 0};   /* d2h, h2d, ready (1) or no room (-1) */
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CK(cudaHostAlloc((void **)&g_sum, sizeof *g_sum, cudaHostAllocMapped | cudaHostAllocPortable));
    size_t dfree = 0, dtotal = 0;
    CK(cudaMemGetInfo(&dfree, &dtotal));
    if (dfree < size + 2 * GiB) {
        msg[2] = -1;
        if (write(to_parent, msg, sizeof msg) != sizeof msg) _exit(1);
        _exit(0);
    }
    measure_link(&msg[0], &msg[1]);
    Pieces w = fill_pieces(size);
    CK(cudaDeviceSynchronize());
    msg[2] = 1;
    if (write(to_parent, msg, sizeof msg) != sizeof msg) _exit(1);
    char go = 0;
    if (read(from_parent, &go, 1) != 1) _exit(1);
    char ok = pieces_intact(w) ? 1 : 0;
    if (write(to_parent, &ok, 1) != 1) _exit(1);
    _exit(0);
}

typedef CUresult (*ckpt_fn)(int, void *);

static std::string ckpt_step(void *lib, const char *name, int pid, double *seconds)
{
    ckpt_fn fn = (ckpt_fn)dlsym(lib, name);
    if (!fn) return "not offered by this driver (no " + std::string(name) + ")";
    unsigned char args[128];   /* every *Args struct: reserved fields zeroed, no timeout, no GPU remap */
    memset(args, 0, sizeof args);
    double t0 = now_us();
    CUresult rc = fn(pid, args);
    *seconds = (now_us() - t0) / 1e6;
    if (rc == CUDA_SUCCESS) return "";
    char buf[96];
    snprintf(buf, sizeof buf, "%s failed: CUresult %d", name, (int)rc);
    return buf;
}

static int run_checkpoint(size_t size)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down)) fail_at(__FILE__, __LINE__, "pipe: %s", strerror(errno));
    pid_t pid = fork();   /* before any CUDA call here: the child owns the device memory */
    if (pid < 0) fail_at(__FILE__, __LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        checkpoint_child(size, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    double msg[3] = {0, 0, 0};
    std::string reason;
    double lock_s = 0, ckpt_s = 0, restore_s = 0, unlock_s = 0;
    bool child_ready = read(up[0], msg, sizeof msg) == sizeof msg && msg[2] > 0;
    if (!child_ready) reason = msg[2] < 0 ? "skipped: not enough free device memory" : "the child holding the memory failed";
    void *lib = child_ready ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (child_ready && !lib) reason = "libcuda.so.1 not loadable";
    if (lib && !dlsym(lib, "cuCheckpointProcessCheckpoint")) reason = "not offered by this driver";
    if (lib && reason.empty()) {
        auto init = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
        if (!init || init(0) != CUDA_SUCCESS) reason = "cuInit failed in the parent";
    }
    /* frozen: the child is locked (or checkpointed) and stays so; its CUDA
     * calls would wait forever, so it is killed instead of asked to check. */
    bool frozen = false;
    if (reason.empty()) {
        reason = ckpt_step(lib, "cuCheckpointProcessLock", pid, &lock_s);
        frozen = reason.empty();
    }
    if (frozen) {
        reason = ckpt_step(lib, "cuCheckpointProcessCheckpoint", pid, &ckpt_s);
        if (reason.empty()) reason = ckpt_step(lib, "cuCheckpointProcessRestore", pid, &restore_s);
        double ignored = 0;
        std::string unlock = ckpt_step(lib, "cuCheckpointProcessUnlock", pid, reason.empty() ? &unlock_s : &ignored);
        frozen = !unlock.empty();
        if (reason.empty()) reason = unlock;
    }
    char ok = 0;
    bool checked = false;
    if (child_ready && !frozen) {
        char go = 1;
        checked = write(down[1], &go, 1) == 1 && read(up[0], &ok, 1) == 1;
    }
    if (!checked) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    const char *data = !checked ? "unchecked" : ok ? "ok" : "changed";
    printf("checkpoint %zu MiB: lock %.3f s, checkpoint %.3f s, restore %.3f s, unlock %.3f s; link D2H %.2f, H2D %.2f "
           "GB/s; data %s%s%s\n", size / MiB, lock_s, ckpt_s, restore_s, unlock_s, msg[0], msg[1], data,
           reason.empty() ? "" : "; ", reason.c_str());
    Obj o;   /* no header: this process must not make a CUDA context of its own */
    o.str("bench", "pause").str("mode", "checkpoint").n("size", (double)size).n("lock_s", lock_s).n("checkpoint_s", ckpt_s);
    o.n("restore_s", restore_s).n("unlock_s", unlock_s).n("d2h_gbps", msg[0]).n("h2d_gbps", msg[1]);
    o.str("checksum", data).str("reason", reason);
    emit(o);
    return 0;
}

int main(int argc, char **argv)
{
    watchdog(300);
    size_t size = GiB;
    int cycles = 3, settle_ms = 0;
    bool probe = false, unmapped = false;
    const char *mode = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            size = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
            cycles = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--settle-ms") && i + 1 < argc) {
            settle_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--create-probe")) {
            probe = true;
        } else if (!strcmp(argv[i], "--unmapped")) {
            unmapped = true;
        } else if ((!strcmp(argv[i], "--whole") || !strcmp(argv[i], "--shrink") || !strcmp(argv[i], "--checkpoint")) &&
                   i + 1 < argc) {
            mode = argv[i] + 2;
            size = parse_size(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--size 1G] [--cycles N] [--settle-ms MS] [--unmapped] [--create-probe]\n"
                            "       %s --whole SIZE | --shrink SIZE | --checkpoint SIZE\n", argv[0], argv[0]);
            return 2;
        }
    }
    if (cycles < 2) cycles = 2;
    if (mode && (size < kPiece || size % kPiece)) {
        fprintf(stderr, "--%s: SIZE must be a multiple of 256 MiB\n", mode);
        return 2;
    }
    if (mode && !strcmp(mode, "checkpoint")) return run_checkpoint(size);
    device_count_or_skip();
    Gvm g = load_gvm();
    if (!g.present || !g.pause || !g.resume || !g.tag_push) {
        fprintf(stderr, "bench-pause needs gvmshim: run it with LD_PRELOAD=libgvmshim.so\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CK(cudaHostAlloc((void **)&g_sum, sizeof *g_sum, cudaHostAllocMapped | cudaHostAllocPortable));
    if (mode && !strcmp(mode, "whole")) return run_whole(g, size);
    if (mode && !strcmp(mode, "shrink")) return run_shrink(g, size);
    char nb[32];
    size_t link_n = std::min(size, (size_t)GiB);
    size_t dfree = 0, dtotal = 0;
    CK(cudaMemGetInfo(&dfree, &dtotal));
    size_t hfree = host_available();
    if (dfree < size + link_n + GiB || (hfree && hfree < 2 * size + link_n + 4 * GiB)) {
        printf("%s skipped: needs %zu MiB device (%zu free) and %zu MiB host (%zu available)\n",
               human(size, nb, sizeof nb), (size + link_n + GiB) / MiB, dfree / MiB,
               (2 * size + link_n + 4 * GiB) / MiB, hfree / MiB);
        Obj o = header("pause", true);
        o.n("size", (double)size).str("skipped", "memory");
        emit(o);
        return 0;
    }

    CKG(g, g.tag_push("bench-pause"));
    uint32_t *p = nullptr;
    CK(cudaMalloc((void **)&p, size));
    CKG(g, g.tag_pop());
    size_t n = size / 4;
    k_fill<<<2048, 256>>>(p, n);
    CK(cudaGetLastError());
    unsigned long long want = checksum(p, n);
    if (settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));

    std::vector<double> pause_ms, resume_ms;
    for (int c = 0; c < cycles; c++) {
        pause_ms.push_back(timed_ms([&] { CKG(g, g.pause("bench-pause", unmapped ? GVM_PAUSE_UNMAPPED : GVM_PAUSE_KEEP)); }));
        gvm_info info;
        CKG(g, g.query(p, &info));
        if (!info.paused || info.location != GVM_HOST || info.bytes_on_device)
            fail_at(__FILE__, __LINE__, "after gvm_pause: paused %d, location %d, %zu bytes on the device",
                    info.paused, info.location, info.bytes_on_device);
        resume_ms.push_back(timed_ms([&] { CKG(g, g.resume("bench-pause")); }));
        CKG(g, g.query(p, &info));
        if (info.paused || info.location != 0)
            fail_at(__FILE__, __LINE__, "after gvm_resume: paused %d, location %d", info.paused, info.location);
        unsigned long long got = checksum(p, n);
        if (got != want) fail_at(__FILE__, __LINE__, "cycle %d: checksum %llx, want %llx", c + 1, got, want);
        printf("%s cycle %d: pause %8.2f ms (%6.2f GB/s)  resume %8.2f ms (%6.2f GB/s)  checksum ok\n",
               human(size, nb, sizeof nb), c + 1, pause_ms.back(), (double)size / (pause_ms.back() * 1e6),
               resume_ms.back(), (double)size / (resume_ms.back() * 1e6));
        fflush(stdout);
    }
    CK(cudaFree(p));

    void *h = nullptr, *d = nullptr;
    CK(cudaMallocHost(&h, link_n));
    CK(cudaMalloc(&d, link_n));
    memset(h, 0, link_n);
    double h2d = link_gbps(link_n, [&] { CK(cudaMemcpy(d, h, link_n, cudaMemcpyHostToDevice)); });
    double d2h = link_gbps(link_n, [&] { CK(cudaMemcpy(h, d, link_n, cudaMemcpyDeviceToHost)); });
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    printf("link: D2H %.2f GB/s, H2D %.2f GB/s\n", d2h, h2d);
    std::vector<std::string> create_rates;
    if (probe)
        for (int threads : {1, 4, 8}) {
            double r = host_create_gbps(threads);
            printf("creating pinned host memory (64 MiB pieces), %d thread(s): %.2f GB/s\n", threads, r);
            Obj c;
            c.n("threads", threads).n("gbps", r);
            create_rates.push_back(c.done());
        }

    Obj o = header("pause", true);
    o.n("size", (double)size).n("cycles", cycles).n("settle_ms", settle_ms).n("unmapped", unmapped ? 1 : 0);
    o.add("pause_ms", nums(pause_ms)).add("resume_ms", nums(resume_ms));
    o.n("d2h_gbps", d2h).n("h2d_gbps", h2d).n("link_bytes", (double)link_n).str("checksum", "ok");
    o.add("host_create", list(create_rates));
    emit(o);
    return 0;
}
