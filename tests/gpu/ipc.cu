/* Legacy CUDA IPC between two processes (this program and a copy of itself
 * started with --child), the handle passed through a pipe, kernels writing
 * in one and reading in the other. Runs natively and under gvmshim: the
 * cases are what a program relies on, so both must pass.
 *
 * Child roles (argv), answering one line on stdout:
 *   import HANDLE WORDS SEED NEWSEED DEVICE  open on DEVICE, verify SEED, write
 *       NEWSEED, open again (same address), close twice -> "ok" | "fail ..."
 *   export WORDS SEED  allocate and fill, print "handle HEX", wait for a line
 *       on stdin, free, print "freed", exit */
#include "gpu_test.h"

#include <sys/wait.h>

#include <vector>

using namespace gt;

static Gvm gvm;
static int ndev;
static Counter *cnt;
static const char *self_path;

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

/* ---- the child ------------------------------------------------------------ */

static int child_import(char **argv)
{
    cudaIpcMemHandle_t h = from_hex(argv[0]);
    size_t words = strtoull(argv[1], nullptr, 0);
    uint32_t seed = (uint32_t)atoi(argv[2]), next = (uint32_t)atoi(argv[3]);
    int dev = atoi(argv[4]);
    try {
        CK(cudaSetDevice(dev));
        Counter c;
        void *p = nullptr, *again = nullptr;
        CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
        verify_words(c, (uint32_t *)p, words, 0, seed, "importer reads the exporter's data");
        fill_words((uint32_t *)p, words, 0, next);
        CK(cudaDeviceSynchronize());
        CK(cudaIpcOpenMemHandle(&again, h, cudaIpcMemLazyEnablePeerAccess));
        EXPECT(again == p, "second open at %p, first at %p", again, p);
        CK(cudaIpcCloseMemHandle(again));
        verify_words(c, (uint32_t *)p, words, 0, next, "still mapped after one of two closes");
        CK(cudaIpcCloseMemHandle(p));
        printf("ok\n");
    } catch (const std::exception &e) {
        printf("fail %s\n", e.what());
    }
    fflush(stdout);
    return 0;
}

static int child_export(char **argv)
{
    size_t words = strtoull(argv[0], nullptr, 0);
    uint32_t seed = (uint32_t)atoi(argv[1]);
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
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 1;
        CK(cudaFree(p));
        printf("freed\n");
    } catch (const std::exception &e) {
        printf("fail %s\n", e.what());
    }
    fflush(stdout);
    return 0;
}

/* ---- the parent's side ------------------------------------------------------- */

struct Child {
    pid_t pid = -1;
    FILE *to = nullptr, *from = nullptr;
};

static Child spawn(const std::vector<std::string> &args)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out)) fail_at(__FILE__, __LINE__, "pipe failed");
    Child c;
    c.pid = fork();
    if (c.pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        std::vector<char *> av{(char *)self_path, (char *)"--child"};
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

/* Exports a fresh allocation of `words` words, has a child import it on
 * device `dev`, then checks the child's writes here. */
static void share_with_child(size_t words, int dev, uint32_t seed)
{
    uint32_t *p = nullptr;
    CK(cudaMalloc((void **)&p, words * 4));
    fill_words(p, words, 0, seed);
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, p));
    Child c = spawn({"import", to_hex(h), format("%zu", words), format("%u", seed), format("%u", seed + 1),
                     format("%d", dev)});
    std::string r = hear(c);
    int st = reap(c);
    EXPECT(r == "ok" && st == 0, "importer: %s (exit %d)", r.c_str(), st);
    verify_words(*cnt, p, words, 0, seed + 1, "exporter reads the importer's writes");
    if (gvm.present) {
        /* Shared memory stays where it is. */
        EXPECT(gvm.migrate(p, GVM_HOST) == GVM_ERR_BUSY, "gvm_migrate of exported memory did not answer BUSY");
    }
    CK(cudaFree(p));
}

static void large_allocation(void) { share_with_child(64 * MiB / 4, 0, 10); }

static void small_allocation(void) { share_with_child(250, 0, 20); }

static void second_gpu_imports(void)
{
    if (ndev < 2) skip("needs 2 GPUs (have %d)", ndev);
    int a = 0;
    CK(cudaDeviceCanAccessPeer(&a, 1, 0));
    if (!a) skip("device 1 cannot access device 0");
    share_with_child(32 * MiB / 4, 1, 30);
}

/* cuda.h calls freeing exported memory before the importer closes it
 * undefined; gvmshim keeps it for the importer, so this runs under the
 * shim only. */
static void exporter_frees_and_exits_first(void)
{
    if (!gvm.present) skip("undefined natively (cuda.h: cuIpcOpenMemHandle)");
    size_t words = 16 * MiB / 4;
    Child c = spawn({"export", format("%zu", words), "40"});
    std::string r = hear(c);
    EXPECT(r.rfind("handle ", 0) == 0, "exporter: %s", r.c_str());
    cudaIpcMemHandle_t h = from_hex(r.c_str() + 7);
    void *p = nullptr;
    CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    say(c, "free");
    r = hear(c);
    int st = reap(c);
    EXPECT(r == "freed" && st == 0, "exporter: %s (exit %d)", r.c_str(), st);
    verify_words(*cnt, (uint32_t *)p, words, 0, 40, "importer after the exporter freed and exited");
    fill_words((uint32_t *)p, words, 0, 41);
    verify_words(*cnt, (uint32_t *)p, words, 0, 41, "importer writes after the exporter exited");
    CK(cudaIpcCloseMemHandle(p));
}

int main(int argc, char **argv)
{
    self_path = "/proc/self/exe";
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        watchdog(120);
        if (!strcmp(argv[2], "import") && argc == 8) return child_import(argv + 3);
        if (!strcmp(argv[2], "export") && argc == 5) return child_export(argv + 3);
        return 2;
    }
    watchdog(240);
    ndev = device_count_or_skip();
    gvm = load_gvm();
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("SKIP: cannot create a context on device 0\n0 passed, 0 failed\n");
        return 77;
    }
    printf("%d device(s); %s\n", ndev, gvm.present ? "under gvmshim" : "native");
    Counter c;
    cnt = &c;
    Runner run;
    run.run("large_allocation", large_allocation);
    run.run("small_allocation", small_allocation);
    run.run("second_gpu_imports", second_gpu_imports);
    run.run("exporter_frees_and_exits_first", exporter_frees_and_exits_first);
    return run.finish();
}
