/* Legacy CUDA IPC between processes of two users: a CUDA IPC handle is a
 * capability, so natively whoever holds its bytes and can use the GPU maps
 * the memory, whatever its user. The exporter runs as root, the importer
 * as nobody (it drops its privileges before its first CUDA call). The
 * scenario runs natively and under the shim (compare_with_native) and both
 * transcripts must be the same: the import and its data, and what a
 * forged handle, a handle whose memory was freed and one whose exporter
 * exited answer.
 *
 * Needs root (to start a process as nobody), /dev/nvidia* usable by nobody
 * and this program and the shim readable by nobody; skipped (77) with the
 * reason otherwise.
 *
 * Roles (argv), each answering lines on stdout:
 *   --nobody import HANDLE WORDS SEED NEWSEED   "open CODE", then (open) "ok" | "fail ..."
 *   --nobody try HANDLE                          "open CODE" (closed again if it opened)
 *   --exporter WORDS SEED    "handle HEX"; a line on stdin: frees, "freed"; another: exits */
#include "gpu_test.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/random.h>

#include <vector>

using namespace gt;

static const uid_t nobody = 65534;
static const char *self_path = "/proc/self/exe";

static std::string to_hex(const cudaIpcMemHandle_t &h)
{
    std::string s;
    for (size_t i = 0; i < sizeof h.reserved; i++) s += format("%02x", (unsigned char)h.reserved[i]);
    return s;
}

static cudaIpcMemHandle_t from_hex(const char *s)
{
    cudaIpcMemHandle_t h;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    return h;
}

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* A handle no exporter gave. Natively: random bytes. gvmshim's (magic
 * "GVMIPC", preload/ipc.h) keeps its shape and endpoint with a random
 * secret (bytes 16-31) and a resealed checksum: a well-formed guess. */
static cudaIpcMemHandle_t forge(const cudaIpcMemHandle_t &real)
{
    cudaIpcMemHandle_t f = real;
    uint8_t *b = (uint8_t *)f.reserved;
    bool gvm = !memcmp(b, "GVMIPC", 6);
    uint8_t *from = gvm ? b + 16 : b;
    size_t n = gvm ? 16 : sizeof f.reserved;
    if (getrandom(from, n, 0) != (ssize_t)n) fail_at(__FILE__, __LINE__, "getrandom failed");
    if (gvm) {
        uint32_t h = fnv1a(b, 60);
        for (int i = 0; i < 4; i++) b[60 + i] = (uint8_t)(h >> 8 * i);
    }
    return f;
}

/* ---- the roles ------------------------------------------------------------- */

static void become_nobody(void)
{
    unsetenv("XDG_RUNTIME_DIR");   /* nobody's own runtime directory */
    if (setgroups(0, nullptr) || setgid(nobody) || setuid(nobody)) {
        printf("fail cannot become user %u\n", (unsigned)nobody);
        exit(1);
    }
}

static int role_import(char **argv)
{
    cudaIpcMemHandle_t h = from_hex(argv[0]);
    size_t words = strtoull(argv[1], nullptr, 0);
    uint32_t seed = (uint32_t)atoi(argv[2]), next = (uint32_t)atoi(argv[3]);
    try {
        CK(cudaSetDevice(0));
        Counter c;
        void *p = nullptr;
        cudaError_t rc = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        printf("open %d\n", (int)rc);
        fflush(stdout);
        if (rc != cudaSuccess) return 0;
        verify_words(c, (uint32_t *)p, words, 0, seed, "another user reads the exporter's data");
        fill_words((uint32_t *)p, words, 0, next);
        CK(cudaDeviceSynchronize());
        CK(cudaIpcCloseMemHandle(p));
        printf("ok\n");
    } catch (const std::exception &e) {
        printf("fail %s\n", e.what());
    }
    fflush(stdout);
    return 0;
}

static int role_try(char **argv)
{
    cudaIpcMemHandle_t h = from_hex(argv[0]);
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("fail no context\n");
        return 0;
    }
    void *p = nullptr;
    cudaError_t rc = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    printf("open %d\n", (int)rc);
    if (rc == cudaSuccess) cudaIpcCloseMemHandle(p);
    fflush(stdout);
    return 0;
}

static int role_export(char **argv)
{
    size_t words = strtoull(argv[0], nullptr, 0);
    uint32_t seed = (uint32_t)atoi(argv[1]);
    char line[16];
    try {
        CK(cudaSetDevice(0));
        uint32_t *p = nullptr;
        CK(cudaMalloc((void **)&p, words * 4));
        fill_words(p, words, 0, seed);
        CK(cudaDeviceSynchronize());
        cudaIpcMemHandle_t h;
        CK(cudaIpcGetMemHandle(&h, p));
        printf("handle %s\n", to_hex(h).c_str());
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
        CK(cudaFree(p));
        CK(cudaDeviceSynchronize());
        printf("freed\n");
    } catch (const std::exception &e) {
        printf("fail %s\n", e.what());
    }
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    return 0;
}

/* ---- the scenario (root) ------------------------------------------------------ */

struct Child {
    pid_t pid = -1;
    FILE *to = nullptr, *from = nullptr;
};

static Child spawn(const std::vector<std::string> &args)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out)) fail_at(__FILE__, __LINE__, "pipe failed");
    Child c;
    fflush(stdout);
    c.pid = fork();
    if (c.pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        std::vector<char *> av{(char *)self_path};
        for (auto &a : args) av.push_back((char *)a.c_str());
        av.push_back(nullptr);
        execv(self_path, av.data());
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c.to = fdopen(in[1], "w");
    c.from = fdopen(out[0], "r");
    return c;
}

static std::string hear(Child &c)
{
    char line[512];
    if (!fgets(line, sizeof line, c.from)) return "(no answer)";
    line[strcspn(line, "\n")] = 0;
    return line;
}

static void say(Child &c, const char *s)
{
    fprintf(c.to, "%s\n", s);
    fflush(c.to);
}

static int reap(Child &c)
{
    fclose(c.to);
    fclose(c.from);
    int st = 0;
    waitpid(c.pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* What nobody's open of a handle answers. */
static std::string try_as_nobody(const cudaIpcMemHandle_t &h)
{
    Child c = spawn({"--nobody", "try", to_hex(h)});
    std::string r = hear(c);
    reap(c);
    return r;
}

static void scenario_users(void)
{
    CK(cudaSetDevice(0));
    Counter cnt;
    size_t words = 64 * MiB / 4;
    uint32_t *p = nullptr;
    CK(cudaMalloc((void **)&p, words * 4));
    fill_words(p, words, 0, 60);
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, p));
    Child c = spawn({"--nobody", "import", to_hex(h), format("%zu", words), "60", "61"});
    std::string opened = hear(c), used = opened == "open 0" ? hear(c) : "-";
    int st = reap(c);
    printf("another user opens the handle: %s\n", opened.c_str());
    printf("another user reads and writes: %s (exit %d)\n", used.c_str(), st);
    verify_words(cnt, p, words, 0, 61, "the exporter reads the other user's writes");
    printf("the exporter reads the other user's writes\n");
    printf("a forged handle: %s\n", try_as_nobody(forge(h)).c_str());
    CK(cudaFree(p));

    /* Stale: the memory freed by its exporter (another process, root),
     * then the exporter gone. */
    Child e = spawn({"--exporter", format("%zu", 16 * MiB / 4), "62"});
    std::string r = hear(e);
    EXPECT(r.rfind("handle ", 0) == 0, "exporter: %s", r.c_str());
    cudaIpcMemHandle_t s = from_hex(r.c_str() + 7);
    say(e, "free");
    r = hear(e);
    EXPECT(r == "freed", "exporter: %s", r.c_str());
    printf("a handle whose memory was freed: %s\n", try_as_nobody(s).c_str());
    say(e, "exit");
    st = reap(e);
    EXPECT(st == 0, "exporter exit %d", st);
    printf("a handle whose exporter exited: %s\n", try_as_nobody(s).c_str());
}

static int child(const std::string &name)
{
    watchdog(200);
    device_count_or_skip();
    Runner run;
    if (name == "users") run.run("users", scenario_users);
    else return 2;
    return run.finish();
}

/* Why nobody cannot take part here, or "" when it can. */
static std::string why_not_nobody(void)
{
    if (geteuid() != 0) return "starting a process as another user needs root";
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return "cannot find this program";
    exe[n] = 0;
    const char *lib = getenv("GVM_TEST_LIB");
    if (!lib || !*lib) lib = getenv("LD_PRELOAD");
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, nullptr) || setgid(nobody) || setuid(nobody)) _exit(1);
        const char *devs[] = {"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"};
        for (const char *d : devs)
            if (access(d, F_OK) == 0 && access(d, R_OK | W_OK)) _exit(2);
        if (access(exe, X_OK)) _exit(3);
        if (lib && *lib && access(lib, R_OK)) _exit(4);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == 0) return "";
    if (code == 2) return format("/dev/nvidia* are not usable by user %u", (unsigned)nobody);
    if (code == 3) return format("user %u cannot run %s", (unsigned)nobody, exe);
    if (code == 4) return format("user %u cannot read %s", (unsigned)nobody, lib);
    return format("cannot become user %u", (unsigned)nobody);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--nobody")) {
        become_nobody();
        watchdog(120);
        if (!strcmp(argv[2], "import") && argc == 7) return role_import(argv + 3);
        if (!strcmp(argv[2], "try") && argc == 4) return role_try(argv + 3);
        return 2;
    }
    if (argc == 4 && !strcmp(argv[1], "--exporter")) {
        watchdog(120);
        return role_export(argv + 2);
    }
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    std::string why = why_not_nobody();
    if (!why.empty()) {
        printf("SKIP: %s\n0 passed, 0 failed\n", why.c_str());
        return 77;
    }
    return compare_with_native({"users"}, nullptr, false);
}
