/* CUDA IPC between two processes that both run under the shim, against the
 * simulated driver (whose handles are memfds, so sharing is real). Each
 * case is one process (the harness forks it); the other is this program
 * re-executed as a helper (`test-ipc --peer`) that runs commands read from
 * its stdin and answers one line each. The case runs the same commands
 * locally, so a scenario reads as a script over the two processes.
 *
 * Commands (ADDR, N in hex or decimal; HANDLE is 128 hex digits):
 *   alloc N            -> ok ADDR          free ADDR     -> rc
 *   fill ADDR N SEED   -> rc               check ADDR N SEED -> ok | bad
 *   export ADDR        -> ok HANDLE | rc   open HANDLE   -> ok ADDR | rc
 *   close ADDR         -> rc               dev D         -> rc (current device)
 *   migrate ADDR LOC   -> status           where ADDR    -> location
 *   counts             -> handles mappings reservations
 *   leases             -> exported leases  calls NAME    -> sim calls of NAME
 *   fail NAME NTH      -> ok (the NTH next call fails with OUT_OF_MEMORY)
 *   peer 0|1           -> ok (the simulated devices reach each other or not)
 *   forkhold           -> ok PID (a forked child that sleeps; not exec'd)
 *   uid                -> ok UID (the peer's effective user)
 *   exit / die         (die: _exit without any cleanup) */
#define _GNU_SOURCE
#include "core/cuda_api.h"
#include "gvmshim.h"
#include "harness.h"
#include "ctl/proto.h"
#include "preload/ipc.h"

#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lib;
static gpa2_fn gpa;

static void *resolve(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(gpa(name, &fn, version, 0, &st), CUDA_SUCCESS);
    return fn;
}

#define D(name, ...) ((__typeof__(name) *)resolve(#name, 12000))(__VA_ARGS__)
/* gvmshim's API, from the preloaded library. */
#define API(name) ((__typeof__(name) *)dlsym(RTLD_DEFAULT, #name))

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

static CUcontext ctx[2];

/* The cudart way in, as in test_preload.c. */
static void start(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    gpa = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    gpa = (gpa2_fn)resolve("cuGetProcAddress", 12000);
    CHECK_EQ(D(cuInit, 0), CUDA_SUCCESS);
    for (int d = 0; d < 2; d++) CHECK_EQ(D(cuDevicePrimaryCtxRetain, &ctx[d], d), CUDA_SUCCESS);
    CHECK_EQ(D(cuCtxSetCurrent, ctx[0]), CUDA_SUCCESS);
}

static void *sim_fn(const char *name)
{
    void *f = dlsym(lib, name);
    CHECK(f != NULL);
    return f;
}

/* ---- the command interpreter ------------------------------------------- */

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int from_hex(const char *s, uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        b[i] = (uint8_t)v;
    }
    return 0;
}

static uint8_t pattern(size_t i, unsigned seed) { return (uint8_t)(seed * 37 + i * 7 + (i >> 12)); }

static void command(const char *line, char *out, size_t len);

/* hammer: threads opening, reading and closing one handle at once. */
struct hammer {
    const char *hex;
    unsigned rounds, seed, errors;
    size_t bytes;
};

static void *hammer_thread(void *arg)
{
    struct hammer *h = arg;
    D(cuCtxSetCurrent, ctx[0]);
    char out[512];
    for (unsigned i = 0; i < h->rounds; i++) {
        char line[300];
        snprintf(line, sizeof line, "open %s", h->hex);
        command(line, out, sizeof out);
        if (strncmp(out, "ok ", 3)) {
            __atomic_add_fetch(&h->errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        unsigned long long q = strtoull(out + 3, NULL, 0);
        snprintf(line, sizeof line, "check %#llx %zu %u", q, h->bytes, h->seed);
        command(line, out, sizeof out);
        if (strcmp(out, "ok")) __atomic_add_fetch(&h->errors, 1, __ATOMIC_RELAXED);
        snprintf(line, sizeof line, "close %#llx", q);
        command(line, out, sizeof out);
        if (strcmp(out, "0")) __atomic_add_fetch(&h->errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void command(const char *line, char *out, size_t len)
{
    char op[32] = "", a[160] = "";
    unsigned long long x = 0, y = 0, z = 0;
    sscanf(line, "%31s %159s", op, a);
    sscanf(line, "%*s %lli %lli %lli", &x, &y, &z);
    CUdeviceptr p = (CUdeviceptr)x;
    if (!strcmp(op, "alloc")) {
        CUresult rc = D(cuMemAlloc_v2, &p, (size_t)x);
        if (rc) snprintf(out, len, "%d", (int)rc);
        else snprintf(out, len, "ok %#llx", (unsigned long long)p);
    } else if (!strcmp(op, "free")) {
        snprintf(out, len, "%d", (int)D(cuMemFree_v2, p));
    } else if (!strcmp(op, "fill") || !strcmp(op, "check")) {
        uint8_t *buf = malloc(y);
        CHECK(buf);
        bool fill = op[0] == 'f', same = true;
        CUresult rc;
        if (fill) {
            for (size_t i = 0; i < y; i++) buf[i] = pattern(i, (unsigned)z);
            rc = D(cuMemcpyHtoD_v2, p, buf, y);
        } else {
            rc = D(cuMemcpyDtoH_v2, buf, p, y);
            for (size_t i = 0; i < y && !rc; i++) same &= buf[i] == pattern(i, (unsigned)z);
        }
        free(buf);
        if (fill || rc) snprintf(out, len, "%d", (int)rc);
        else snprintf(out, len, same ? "ok" : "bad");
    } else if (!strcmp(op, "export")) {
        CUipcMemHandle h;
        CUresult rc = D(cuIpcGetMemHandle, &h, p);
        char hex[2 * CU_IPC_HANDLE_SIZE + 1];
        to_hex((uint8_t *)h.reserved, sizeof h.reserved, hex);
        if (rc) snprintf(out, len, "%d", (int)rc);
        else snprintf(out, len, "ok %s", hex);
    } else if (!strcmp(op, "open")) {
        CUipcMemHandle h;
        CHECK_EQ(from_hex(a, (uint8_t *)h.reserved, sizeof h.reserved), 0);
        CUdeviceptr q = 0;
        CUresult rc = ((__typeof__(cuIpcOpenMemHandle_v2) *)resolve("cuIpcOpenMemHandle", 11000))(
            &q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (rc) snprintf(out, len, "%d", (int)rc);
        else snprintf(out, len, "ok %#llx", (unsigned long long)q);
    } else if (!strcmp(op, "close")) {
        snprintf(out, len, "%d", (int)D(cuIpcCloseMemHandle, p));
    } else if (!strcmp(op, "dev")) {
        snprintf(out, len, "%d", (int)D(cuCtxSetCurrent, ctx[x]));
    } else if (!strcmp(op, "migrate")) {
        snprintf(out, len, "%d", (int)API(gvm_migrate)((void *)p, (int)(long long)y));
    } else if (!strcmp(op, "where")) {
        gvm_info info;
        int st = API(gvm_query)((void *)p, &info);
        snprintf(out, len, "%d", st ? -100 + st : info.location);
    } else if (!strcmp(op, "counts")) {
        long (*h)(void) = sim_fn("simcuda_live_handles"), (*m)(void) = sim_fn("simcuda_live_mappings"),
             (*r)(void) = sim_fn("simcuda_live_reservations");
        snprintf(out, len, "%ld %ld %ld", h(), m(), r());
    } else if (!strcmp(op, "leases")) {
        void (*counts)(int *, int *) = dlsym(RTLD_DEFAULT, "gvm_ipc_counts");
        int e = -1, l = -1;
        if (counts) counts(&e, &l);
        snprintf(out, len, "%d %d", e, l);
    } else if (!strcmp(op, "calls")) {
        unsigned long (*calls)(const char *) = sim_fn("simcuda_calls_of");
        snprintf(out, len, "%lu", calls(a));
    } else if (!strcmp(op, "fail")) {
        void (*fail)(const char *, unsigned long, CUresult) = sim_fn("simcuda_fail_call");
        sscanf(line, "%*s %*s %lli", &y);
        fail(a, (unsigned long)y, CUDA_ERROR_OUT_OF_MEMORY);
        snprintf(out, len, "ok");
    } else if (!strcmp(op, "hammer")) {
        struct hammer h = {.hex = a, .bytes = 65536};
        sscanf(line, "%*s %*s %u %u", &h.rounds, &h.seed);
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, hammer_thread, &h);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        snprintf(out, len, h.errors ? "bad %u" : "ok", h.errors);
    } else if (!strcmp(op, "peer")) {
        void (*set_peer)(int) = sim_fn("simcuda_set_peer");
        set_peer((int)x);
        snprintf(out, len, "ok");
    } else if (!strcmp(op, "uid")) {
        snprintf(out, len, "ok %u", (unsigned)geteuid());
    } else if (!strcmp(op, "forkhold")) {
        pid_t pid = fork();
        if (pid == 0) {
            sleep(30);
            _exit(0);
        }
        snprintf(out, len, "ok %d", (int)pid);
    } else {
        snprintf(out, len, "unknown command");
    }
}

static int peer_main(void)
{
    start();
    char line[512], out[512];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "exit", 4)) exit(0);
        if (!strncmp(line, "die", 3)) _exit(3);
        command(line, out, sizeof out);
        printf("%s\n", out);
        fflush(stdout);
    }
    return 0;
}

/* ---- the case's side --------------------------------------------------- */

struct peer {
    pid_t pid;
    FILE *to, *from;
};

#define NOBODY 65534

/* Starts the peer; with env, one more variable; with uid (not 0), as that
 * user, which has a runtime directory of its own; with errfile, its stderr
 * goes there. */
static struct peer spawn_full(const char *env, uid_t uid, const char *errfile)
{
    int in[2], out[2];
    CHECK(pipe(in) == 0 && pipe(out) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        if (env) putenv((char *)env);
        if (errfile) {
            int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0 || dup2(fd, 2) < 0) _exit(126);
        }
        if (uid) {
            unsetenv("XDG_RUNTIME_DIR");
            if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) _exit(126);
        }
        execl("/proc/self/exe", "test-ipc", "--peer", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    return (struct peer){pid, fdopen(in[1], "w"), fdopen(out[0], "r")};
}

static struct peer spawn_env(const char *env) { return spawn_full(env, 0, NULL); }

static struct peer spawn(void) { return spawn_env(NULL); }

static char reply[512];

static const char *vrun(struct peer *p, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    if (!p) {
        command(line, reply, sizeof reply);
        return reply;
    }
    fprintf(p->to, "%s\n", line);
    fflush(p->to);
    alarm(20);   /* a hang is a failure, not a stuck suite */
    CHECK(fgets(reply, sizeof reply, p->from));
    alarm(0);
    reply[strcspn(reply, "\n")] = 0;
    return reply;
}

/* Runs a command here (p NULL) or in the peer; returns its answer. */
__attribute__((format(printf, 2, 3))) static const char *run(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vrun(p, fmt, ap);
    va_end(ap);
    return r;
}

/* The same, expecting "ok VALUE": returns VALUE. */
__attribute__((format(printf, 2, 3))) static unsigned long long ok(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vrun(p, fmt, ap);
    va_end(ap);
    if (strncmp(r, "ok", 2)) {
        fprintf(stderr, "'%s' answered '%s'\n", fmt, r);
        exit(1);
    }
    return strtoull(r + 2, NULL, 0);
}

#define EXPECT(p, want, ...)                                                   \
    do {                                                                       \
        const char *got_ = run(p, __VA_ARGS__);                                \
        if (strcmp(got_, want)) {                                              \
            fprintf(stderr, "%s:%d: '%s' answered '%s', want '%s'\n", __FILE__, __LINE__, #__VA_ARGS__, got_, want); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Exports p here and returns the handle's hex. */
static const char *export_here(CUdeviceptr p)
{
    static char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    const char *r = run(NULL, "export %#llx", (unsigned long long)p);
    CHECK(!strncmp(r, "ok ", 3));
    snprintf(hex, sizeof hex, "%s", r + 3);
    return hex;
}

static int finish(struct peer *p, const char *how)
{
    fprintf(p->to, "%s\n", how);
    fflush(p->to);
    int status;
    alarm(20);
    CHECK_EQ(waitpid(p->pid, &status, 0), p->pid);
    alarm(0);
    fclose(p->to);
    fclose(p->from);
    return test_exit_code(status);
}

/* Leases end when the server thread sees EOF: wait for it. */
static void wait_leases(struct peer *p, const char *want)
{
    for (int i = 0; i < 500 && strcmp(run(p, "leases"), want); i++) usleep(10000);
    EXPECT(p, want, "leases");
}

static void large_allocation_shared_both_ways(void)
{
    start();
    CUdeviceptr p = ok(NULL, "alloc %zu", 10 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 1", p, 10 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hex, sizeof hex, "%s", export_here(p));
    /* The same handle every time, and for an address inside. */
    CHECK(!strcmp(export_here(p), hex));
    CHECK(!strcmp(export_here(p + 4096), hex));
    struct peer c = spawn();
    char before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    CUdeviceptr q = ok(&c, "open %s", hex);
    EXPECT(&c, "ok", "check %#llx %zu 1", q, 10 * MiB);
    EXPECT(&c, "0", "fill %#llx %zu 2", q + 4096, (size_t)65536);
    EXPECT(NULL, "ok", "check %#llx %zu 2", p + 4096, (size_t)65536);
    EXPECT(NULL, "1 1", "leases");
    /* Opened twice: the same address; unmapped at the last close only. */
    CHECK_EQ(ok(&c, "open %s", hex), q);
    EXPECT(&c, "0", "close %#llx", q);
    EXPECT(&c, "ok", "check %#llx %zu 2", q + 4096, (size_t)65536);
    EXPECT(&c, "0", "close %#llx", q);
    EXPECT(&c, before, "counts");
    /* Closing again: not open any more, the driver's answer. */
    EXPECT(&c, "1", "close %#llx", q);
    wait_leases(NULL, "1 0");
    CHECK_EQ(finish(&c, "exit"), 0);
    EXPECT(NULL, "0", "free %#llx", p);
    EXPECT(NULL, "0 0", "leases");
    /* An allocation at the same address later is another one. */
    CUdeviceptr p2 = ok(NULL, "alloc %zu", 10 * MiB);
    if (p2 == p) CHECK(strcmp(export_here(p2), hex));
}

static void packed_allocation_exports_its_chunk(void)
{
    start();
    CUdeviceptr a = ok(NULL, "alloc 1000"), b = ok(NULL, "alloc 1000"), c3 = ok(NULL, "alloc 1000");
    EXPECT(NULL, "0", "fill %#llx 1000 3", a);
    EXPECT(NULL, "0", "fill %#llx 1000 4", b);
    EXPECT(NULL, "0", "fill %#llx 1000 5", c3);
    const char *hex = export_here(b);
    struct peer c = spawn();
    CUdeviceptr q = ok(&c, "open %s", hex);
    /* The chunk is mapped whole: b keeps its offset in it. */
    CHECK_EQ((q - b) % (2 * MiB), 0);
    EXPECT(&c, "ok", "check %#llx 1000 4", q);
    EXPECT(&c, "0", "fill %#llx 1000 6", q);
    EXPECT(NULL, "ok", "check %#llx 1000 6", b);
    EXPECT(NULL, "ok", "check %#llx 1000 3", a);
    EXPECT(NULL, "ok", "check %#llx 1000 5", c3);
    /* The exporter frees b while the importer has it: its bytes stay the
     * importer's, no new allocation lands there. */
    EXPECT(NULL, "0", "free %#llx", b);
    for (int i = 0; i < 2100; i++) CHECK(ok(NULL, "alloc 1000") != b);   /* more than the chunk holds */
    EXPECT(&c, "0", "fill %#llx 1000 7", q);
    EXPECT(&c, "ok", "check %#llx 1000 7", q);
    EXPECT(NULL, "ok", "check %#llx 1000 3", a);
    EXPECT(NULL, "1 1", "leases");
    EXPECT(&c, "0", "close %#llx", q);
    wait_leases(NULL, "0 0");
    CHECK_EQ(finish(&c, "exit"), 0);
}

static void moved_allocations_export_from_their_device(void)
{
    start();
    CUdeviceptr p = ok(NULL, "alloc %zu", 6 * MiB), r = ok(NULL, "alloc %zu", 4 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 8", p, 6 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 9", r, 4 * MiB);
    EXPECT(NULL, "0", "migrate %#llx 1", p);
    EXPECT(NULL, "0", "migrate %#llx -1", p);   /* host */
    EXPECT(NULL, "-1", "where %#llx", p);
    EXPECT(NULL, "0", "migrate %#llx 1", r);
    /* Host memory cannot be exported: it comes home first. Memory on
     * another device is exported where it is. */
    char hp[2 * CU_IPC_HANDLE_SIZE + 1], hr[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hp, sizeof hp, "%s", export_here(p));
    snprintf(hr, sizeof hr, "%s", export_here(r));
    EXPECT(NULL, "0", "where %#llx", p);
    EXPECT(NULL, "1", "where %#llx", r);
    /* No move while exported: the importer maps these very pieces. */
    EXPECT(NULL, "-7", "migrate %#llx -1", p);
    EXPECT(NULL, "-7", "migrate %#llx 0", r);
    EXPECT(NULL, "0", "where %#llx", p);
    struct peer c = spawn();
    CUdeviceptr q = ok(&c, "open %s", hp), s = ok(&c, "open %s", hr);
    EXPECT(&c, "ok", "check %#llx %zu 8", q, 6 * MiB);
    EXPECT(&c, "ok", "check %#llx %zu 9", s, 4 * MiB);
    /* Opened from device 1's context: a mapping of its own. */
    EXPECT(&c, "0", "dev 1");
    CUdeviceptr s1 = ok(&c, "open %s", hr);
    CHECK(s1 != s);
    EXPECT(&c, "ok", "check %#llx %zu 9", s1, 4 * MiB);
    EXPECT(&c, "0", "close %#llx", s1);
    /* Device 0's memory opened from device 1's context: over peer access. */
    CUdeviceptr q1 = ok(&c, "open %s", hp);
    CHECK(q1 != q);
    EXPECT(&c, "ok", "check %#llx %zu 8", q1, 6 * MiB);
    EXPECT(&c, "0", "fill %#llx %zu 18", q1, 6 * MiB);
    EXPECT(NULL, "ok", "check %#llx %zu 18", p, 6 * MiB);
    EXPECT(&c, "0", "close %#llx", q1);
    /* Without peer access: the driver's refusal, nothing left mapped. */
    char before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    ok(&c, "peer 0");
    char want[16];
    snprintf(want, sizeof want, "%d", (int)CUDA_ERROR_INVALID_DEVICE);
    EXPECT(&c, want, "open %s", hp);
    EXPECT(&c, before, "counts");
    ok(&c, "peer 1");
    CHECK_EQ(finish(&c, "exit"), 0);
}

static void shared_memory_is_not_moved_by_policy_or_api(void)
{
    start();
    CHECK_EQ(API(gvm_tag_push)("kv"), GVM_OK);
    CUdeviceptr p = ok(NULL, "alloc %zu", 4 * MiB);
    CHECK_EQ(API(gvm_tag_pop)(), GVM_OK);
    EXPECT(NULL, "0", "fill %#llx %zu 10", p, 4 * MiB);
    export_here(p);
    CHECK_EQ(API(gvm_migrate)((void *)p, GVM_HOST), GVM_ERR_BUSY);
    CHECK_EQ(API(gvm_realloc)((void *)p, 8 * MiB), GVM_ERR_BUSY);
    CHECK_EQ(API(gvm_pause)("kv", GVM_PAUSE_KEEP), GVM_ERR_BUSY);
    gvm_info info;
    CHECK_EQ(API(gvm_query)((void *)p, &info), GVM_OK);
    CHECK_EQ(info.location, 0);
    CHECK(!info.paused);
    EXPECT(NULL, "ok", "check %#llx %zu 10", p, 4 * MiB);
    /* Paused memory cannot be exported. */
    CHECK_EQ(API(gvm_tag_push)("cold"), GVM_OK);
    CUdeviceptr c = ok(NULL, "alloc %zu", 4 * MiB);
    CHECK_EQ(API(gvm_tag_pop)(), GVM_OK);
    CHECK_EQ(API(gvm_pause)("cold", GVM_PAUSE_KEEP), GVM_OK);
    EXPECT(NULL, "1", "export %#llx", c);
}

static void exporter_exits_first(void)
{
    start();
    /* With pools and caches on: freed exported memory must not be reused. */
    struct peer c = spawn_env("GVM_POOL_LIMIT=256M");
    CUdeviceptr p = ok(&c, "alloc %zu", 6 * MiB);
    EXPECT(&c, "0", "fill %#llx %zu 11", p, 6 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 16];
    const char *r = run(&c, "export %#llx", p);
    CHECK(!strncmp(r, "ok ", 3));
    snprintf(hex, sizeof hex, "%s", r + 3);
    char before[64];
    snprintf(before, sizeof before, "%s", run(NULL, "counts"));
    CUdeviceptr q = ok(NULL, "open %s", hex);
    /* The exporter frees its allocation and exits: the memory lives on. */
    EXPECT(&c, "0", "free %#llx", p);
    for (int i = 0; i < 4; i++) EXPECT(&c, "0", "fill %#llx %zu 15", ok(&c, "alloc %zu", 6 * MiB), 6 * MiB);
    EXPECT(NULL, "ok", "check %#llx %zu 11", q, 6 * MiB);
    CHECK_EQ(finish(&c, "exit"), 0);
    EXPECT(NULL, "ok", "check %#llx %zu 11", q, 6 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 12", q, 6 * MiB);
    EXPECT(NULL, "ok", "check %#llx %zu 12", q, 6 * MiB);
    EXPECT(NULL, "0", "close %#llx", q);
    EXPECT(NULL, before, "counts");
    /* Nobody serves the handle any more: the error of a stale handle. */
    EXPECT(NULL, "400", "open %s", hex);
    EXPECT(NULL, before, "counts");
}

static void importer_dies_first(void)
{
    start();
    CUdeviceptr warm = ok(NULL, "alloc 1000");
    char before[64];
    snprintf(before, sizeof before, "%s", run(NULL, "counts"));
    CUdeviceptr p = ok(NULL, "alloc %zu", 6 * MiB), s = ok(NULL, "alloc 1000");
    char hp[2 * CU_IPC_HANDLE_SIZE + 1], hs[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hp, sizeof hp, "%s", export_here(p));
    snprintf(hs, sizeof hs, "%s", export_here(s));
    struct peer c = spawn();
    ok(&c, "open %s", hp);
    ok(&c, "open %s", hs);
    EXPECT(NULL, "2 2", "leases");
    CHECK_EQ(finish(&c, "die"), 3);
    wait_leases(NULL, "2 0");
    EXPECT(NULL, "0", "free %#llx", p);
    EXPECT(NULL, "0", "free %#llx", s);
    EXPECT(NULL, "0 0", "leases");
    /* Nothing of the exports is left in the exporter. */
    EXPECT(NULL, before, "counts");
    EXPECT(NULL, "0", "free %#llx", warm);
}

static void forged_and_foreign_handles(void)
{
    start();
    CUdeviceptr p = ok(NULL, "alloc %zu", 4 * MiB);
    uint8_t b[CU_IPC_HANDLE_SIZE];
    CHECK_EQ(from_hex(export_here(p), b, sizeof b), 0);
    struct gvm_ipc_handle h;
    CHECK_EQ(gvm_ipc_decode(b, sizeof b, &h), GVM_IPC_OK);
    struct peer c = spawn();
    char hex[2 * CU_IPC_HANDLE_SIZE + 1], before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    /* A corrupted handle (bad checksum). */
    b[20] ^= 1;
    to_hex(b, sizeof b, hex);
    EXPECT(&c, "1", "open %s", hex);
    /* Well formed, but an allocation the exporter never exported, or an
     * exporter that does not exist. */
    struct gvm_ipc_handle forged = h;
    forged.id[3] ^= 0x40;
    gvm_ipc_encode(&forged, b);
    to_hex(b, sizeof b, hex);
    EXPECT(&c, "1", "open %s", hex);
    forged = h;
    forged.endpoint ^= 0x5a5a;
    gvm_ipc_encode(&forged, b);
    to_hex(b, sizeof b, hex);
    EXPECT(&c, "400", "open %s", hex);
    /* Lies about the allocation's shape. */
    forged = h;
    forged.extent *= 2;
    gvm_ipc_encode(&forged, b);
    to_hex(b, sizeof b, hex);
    EXPECT(&c, "1", "open %s", hex);
    EXPECT(&c, "0", "calls cuIpcOpenMemHandle_v2");
    EXPECT(&c, before, "counts");
    /* Not gvmshim's: the driver's own answer. */
    memset(b, 0, sizeof b);
    to_hex(b, sizeof b, hex);
    EXPECT(&c, "1", "open %s", hex);
    EXPECT(&c, "1", "calls cuIpcOpenMemHandle_v2");
    EXPECT(&c, "1", "close 0x1000");
    EXPECT(&c, "1", "calls cuIpcCloseMemHandle");
    wait_leases(NULL, "1 0");
    CHECK_EQ(finish(&c, "exit"), 0);
    /* Memory the driver serves is exported by the driver. */
    CUdeviceptr n = 0;
    CUmemoryPool def;
    CHECK_EQ(D(cuDeviceGetDefaultMemPool, &def, 0), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceSetMemPool, 0, (CUmemoryPool)0x77), CUDA_SUCCESS);   /* not gvmshim's to serve */
    CHECK_EQ(D(cuMemAllocAsync, &n, MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ(D(cuDeviceSetMemPool, 0, def), CUDA_SUCCESS);
    const char *r = run(NULL, "export %#llx", (unsigned long long)n);
    CHECK(!strncmp(r, "ok 53494d495043", 15));   /* "SIMIPC" */
    EXPECT(NULL, "1", "calls cuIpcGetMemHandle");
    export_here(p);
    EXPECT(NULL, "1", "calls cuIpcGetMemHandle");
    /* The default pool's memory, which gvmshim serves, is not legacy IPC's:
     * refused as the driver refuses it (CUDA_ERROR_INVALID_VALUE), at its
     * base and inside, and the pointer answers say so. */
    CUdeviceptr o = 0;
    CHECK_EQ(D(cuMemAllocAsync, &o, 3 * MiB, NULL), CUDA_SUCCESS);
    EXPECT(NULL, "1", "export %#llx", (unsigned long long)o);
    EXPECT(NULL, "1", "export %#llx", (unsigned long long)o + 4096);
    unsigned capable = 7;
    CHECK_EQ(D(cuPointerGetAttribute, &capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, o), CUDA_SUCCESS);
    CHECK_EQ(capable, 0u);
    CHECK_EQ(D(cuMemFreeAsync, o, NULL), CUDA_SUCCESS);
}

static void every_abi_reaches_the_hooks(void)
{
    start();
    CHECK(!strcmp(object_of(resolve("cuIpcGetMemHandle", 4010)), "shim"));
    CHECK(!strcmp(symbol_of(resolve("cuIpcOpenMemHandle", 11000)), "cuIpcOpenMemHandle_v2"));
    CHECK(!strcmp(object_of(resolve("cuIpcOpenMemHandle", 11000)), "shim"));
    CHECK(!strcmp(symbol_of(resolve("cuIpcOpenMemHandle", 4010)), "cuIpcOpenMemHandle"));
    CHECK(!strcmp(object_of(resolve("cuIpcOpenMemHandle", 4010)), "shim"));
    CHECK(!strcmp(object_of(resolve("cuIpcCloseMemHandle", 4010)), "shim"));
    CHECK(!strcmp(object_of(dlsym(lib, "cuIpcOpenMemHandle_v2")), "shim"));
    /* Event IPC is the driver's. */
    CHECK(!strcmp(object_of(resolve("cuIpcGetEventHandle", 4010)), "sim"));
    CHECK(!strcmp(object_of(resolve("cuIpcOpenEventHandle", 4010)), "sim"));
    /* The legacy symbol opens gvmshim handles too. */
    CUdeviceptr p = ok(NULL, "alloc %zu", 2 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 13", p, 2 * MiB);
    const char *hex = export_here(p);
    CUipcMemHandle h;
    CHECK_EQ(from_hex(hex, (uint8_t *)h.reserved, sizeof h.reserved), 0);
    /* Opening one's own handle works (it maps the same pieces again). */
    CUdeviceptr q = 0;
    CHECK_EQ(((__typeof__(cuIpcOpenMemHandle_v2) *)resolve("cuIpcOpenMemHandle", 4010))(&q, h, 0), CUDA_SUCCESS);
    CHECK(q != p);
    EXPECT(NULL, "ok", "check %#llx %zu 13", q, 2 * MiB);
    CHECK_EQ(D(cuIpcCloseMemHandle, q), CUDA_SUCCESS);
    /* Flags other than lazy peer access are refused, as natively. */
    CHECK_EQ(((__typeof__(cuIpcOpenMemHandle_v2) *)resolve("cuIpcOpenMemHandle", 11000))(&q, h, 2),
             CUDA_ERROR_INVALID_VALUE);
}

static void failed_import_leaves_nothing_mapped(void)
{
    start();
    /* 14 MiB: pieces of 8, 4 and 2 MiB, so a failure can come midway. */
    CUdeviceptr p = ok(NULL, "alloc %zu", 14 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 14", p, 14 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hex, sizeof hex, "%s", export_here(p));
    struct peer c = spawn();
    char before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    const char *calls[][2] = {{"cuMemAddressReserve", "1"}, {"cuMemImportFromShareableHandle", "1"},
                              {"cuMemImportFromShareableHandle", "3"}, {"cuMemMap", "2"},
                              {"cuMemSetAccess", "1"}, {"cuMemSetAccess", "3"}};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        ok(&c, "fail %s %s", calls[i][0], calls[i][1]);
        EXPECT(&c, "2", "open %s", hex);   /* the driver's error, CUDA_ERROR_OUT_OF_MEMORY */
        EXPECT(&c, before, "counts");
        ok(&c, "fail %s 0", calls[i][0]);
    }
    wait_leases(NULL, "1 0");
    CUdeviceptr q = ok(&c, "open %s", hex);
    EXPECT(&c, "ok", "check %#llx %zu 14", q, 14 * MiB);
    EXPECT(&c, "0", "close %#llx", q);
    EXPECT(&c, before, "counts");
    CHECK_EQ(finish(&c, "exit"), 0);
}

static void failed_export_changes_nothing(void)
{
    start();
    CUdeviceptr p = ok(NULL, "alloc %zu", 14 * MiB), s = ok(NULL, "alloc 1000");
    EXPECT(NULL, "0", "fill %#llx %zu 16", p, 14 * MiB);
    char before[64];
    snprintf(before, sizeof before, "%s", run(NULL, "counts"));
    ok(NULL, "fail cuMemExportToShareableHandle 2");
    EXPECT(NULL, "2", "export %#llx", p);
    ok(NULL, "fail cuMemExportToShareableHandle 1");
    EXPECT(NULL, "2", "export %#llx", s);
    EXPECT(NULL, "0 0", "leases");
    EXPECT(NULL, before, "counts");
    /* Not pinned: it still moves, and a later export works. */
    EXPECT(NULL, "0", "migrate %#llx -1", p);
    EXPECT(NULL, "0", "migrate %#llx 0", p);
    export_here(p);
    EXPECT(NULL, "ok", "check %#llx %zu 16", p, 14 * MiB);
    /* The small one was not held: its free makes it reusable. */
    EXPECT(NULL, "0", "free %#llx", s);
    EXPECT(NULL, "1 0", "leases");
}

/* Importer threads open and close a handle while the exporter exports and
 * frees other allocations: the server, the registry and the leases under
 * concurrency (run it under TSan). */
static void concurrent_opens_and_frees(void)
{
    start();
    CUdeviceptr p = ok(NULL, "alloc %zu", 4 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 17", p, (size_t)65536);
    const char *hex = export_here(p);
    struct peer c = spawn();
    fprintf(c.to, "hammer %s 40 17\n", hex);
    fflush(c.to);
    for (int i = 0; i < 40; i++) {
        CUdeviceptr big = ok(NULL, "alloc %zu", 2 * MiB), small = ok(NULL, "alloc 4000");
        export_here(big);
        export_here(small);
        EXPECT(NULL, "0", "free %#llx", big);
        EXPECT(NULL, "0", "free %#llx", small);
    }
    alarm(60);
    CHECK(fgets(reply, sizeof reply, c.from));
    alarm(0);
    CHECK(!strcmp(reply, "ok\n"));
    CHECK_EQ(finish(&c, "exit"), 0);
    wait_leases(NULL, "1 0");
}

/* The exporter is killed (no clean-up, its socket file stays) while a
 * child it forked lives on: the child must not hold the socket, or an
 * importer would wait forever on a backlog nobody accepts. */
static void killed_exporter_with_forked_child(void)
{
    start();
    struct peer c = spawn();
    CUdeviceptr p = ok(&c, "alloc %zu", 2 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 16];
    const char *r = run(&c, "export %#llx", p);
    CHECK(!strncmp(r, "ok ", 3));
    snprintf(hex, sizeof hex, "%s", r + 3);
    pid_t child = (pid_t)ok(&c, "forkhold");
    kill(c.pid, SIGKILL);
    int status;
    CHECK_EQ(waitpid(c.pid, &status, 0), c.pid);
    alarm(20);
    EXPECT(NULL, "400", "open %s", hex);
    alarm(0);
    kill(child, SIGKILL);
    fclose(c.to);
    fclose(c.from);
}

/* ---- across users -----------------------------------------------------------
 * A CUDA IPC handle is a capability: natively any process that holds its
 * bytes and can use the GPU maps the memory, whatever its user. These cases
 * run a peer as nobody, which needs root (the cpu suite runs as root in
 * CI); elsewhere they say so and pass. */

/* Whether a peer can run as nobody here: root, and the program and
 * gvmshim readable by nobody. */
static bool can_switch_users(const char *what)
{
    if (geteuid() != 0) {
        fprintf(stderr, "%s: skipped: starting a peer as another user needs root\n", what);
        return false;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n] = 0;
    const char *preload = getenv("LD_PRELOAD");
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY)) _exit(1);
        _exit(access(exe, X_OK) || (preload && access(preload, R_OK)) ? 2 : 0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "%s: skipped: user %d cannot run %s with %s\n", what, NOBODY, exe, preload ? preload : "(no preload)");
        return false;
    }
    return true;
}

static void drop_to_nobody(void)
{
    if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY)) _exit(120);
}

/* The handle as a peer would write it, with fields changed. */
static void encode_hex(const struct gvm_ipc_handle *h, char hex[2 * CU_IPC_HANDLE_SIZE + 1])
{
    uint8_t b[CU_IPC_HANDLE_SIZE];
    gvm_ipc_encode(h, b);
    to_hex(b, sizeof b, hex);
}

static struct gvm_ipc_handle decode_hex(const char *hex)
{
    uint8_t b[CU_IPC_HANDLE_SIZE];
    struct gvm_ipc_handle h;
    CHECK_EQ(from_hex(hex, b, sizeof b), 0);
    CHECK_EQ(gvm_ipc_decode(b, sizeof b, &h), GVM_IPC_OK);
    return h;
}

static void another_user_imports_and_exports(void)
{
    start();
    if (!can_switch_users(__func__)) return;
    CUdeviceptr p = ok(NULL, "alloc %zu", 10 * MiB), s = ok(NULL, "alloc 1000");
    EXPECT(NULL, "0", "fill %#llx %zu 21", p, 10 * MiB);
    EXPECT(NULL, "0", "fill %#llx 1000 22", s);
    char hp[2 * CU_IPC_HANDLE_SIZE + 1], hs[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hp, sizeof hp, "%s", export_here(p));
    snprintf(hs, sizeof hs, "%s", export_here(s));
    struct peer c = spawn_full(NULL, NOBODY, NULL);
    CHECK_EQ(ok(&c, "uid"), NOBODY);
    char before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    CUdeviceptr q = ok(&c, "open %s", hp);
    EXPECT(&c, "ok", "check %#llx %zu 21", q, 10 * MiB);
    EXPECT(&c, "0", "fill %#llx %zu 23", q + 4096, (size_t)65536);
    EXPECT(NULL, "ok", "check %#llx %zu 23", p + 4096, (size_t)65536);
    CUdeviceptr r = ok(&c, "open %s", hs);
    EXPECT(&c, "ok", "check %#llx 1000 22", r);
    EXPECT(NULL, "2 2", "leases");
    EXPECT(&c, "0", "close %#llx", q);
    EXPECT(&c, "0", "close %#llx", r);
    EXPECT(&c, before, "counts");
    wait_leases(NULL, "2 0");
    /* And the other way: nobody's memory, opened by root. */
    CUdeviceptr o = ok(&c, "alloc %zu", 4 * MiB);
    EXPECT(&c, "0", "fill %#llx %zu 24", o, 4 * MiB);
    char ho[2 * CU_IPC_HANDLE_SIZE + 16];
    const char *a = run(&c, "export %#llx", o);
    CHECK(!strncmp(a, "ok ", 3));
    snprintf(ho, sizeof ho, "%s", a + 3);
    CUdeviceptr m = ok(NULL, "open %s", ho);
    EXPECT(NULL, "ok", "check %#llx %zu 24", m, 4 * MiB);
    EXPECT(NULL, "0", "close %#llx", m);
    wait_leases(&c, "1 0");
    CHECK_EQ(finish(&c, "exit"), 0);
}

static bool file_mentions(const char *path, long from, const char *word)
{
    FILE *f = fopen(path, "r");
    CHECK(f);
    fseek(f, from, SEEK_SET);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strcasestr(line, word) != NULL;
    fclose(f);
    return found;
}

static long file_size(const char *path)
{
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    return (long)st.st_size;
}

static void another_user_with_forged_and_stale_handles(void)
{
    start();
    if (!can_switch_users(__func__)) return;
    char log[] = "/tmp/gvmshim-test-ipc-log-XXXXXX";
    int lfd = mkstemp(log);
    CHECK(lfd >= 0);
    close(lfd);
    /* The exporter (root) logs everything it logs at all. */
    struct peer e = spawn_full("GVM_LOG=debug", 0, log);
    CUdeviceptr p = ok(&e, "alloc %zu", 4 * MiB);
    EXPECT(&e, "0", "fill %#llx %zu 26", p, 4 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 16], forged_hex[2 * CU_IPC_HANDLE_SIZE + 1];
    const char *a = run(&e, "export %#llx", p);
    CHECK(!strncmp(a, "ok ", 3));
    snprintf(hex, sizeof hex, "%s", a + 3);
    struct gvm_ipc_handle h = decode_hex(hex);
    struct peer c = spawn_full(NULL, NOBODY, NULL);
    char before[64];
    snprintf(before, sizeof before, "%s", run(&c, "counts"));
    long logged = file_size(log);
    /* Forged: a random secret, the real one with one bit flipped, another
     * endpoint. Each gets what a stale handle gets. */
    struct gvm_ipc_handle f = h;
    CHECK_EQ(getrandom(f.id, sizeof f.id, 0), (ssize_t)sizeof f.id);
    encode_hex(&f, forged_hex);
    EXPECT(&c, "1", "open %s", forged_hex);
    for (int bit = 0; bit < 128; bit += 37) {
        f = h;
        f.id[bit / 8] ^= (uint8_t)(1u << bit % 8);
        encode_hex(&f, forged_hex);
        EXPECT(&c, "1", "open %s", forged_hex);
    }
    f = h;
    f.endpoint ^= 0x8001;
    encode_hex(&f, forged_hex);
    EXPECT(&c, "400", "open %s", forged_hex);
    EXPECT(&c, before, "counts");
    /* The exporter said nothing about them: no hint for a guesser. */
    CHECK(!file_mentions(log, logged, "ipc"));
    /* The real handle works; freed, it is stale; its exporter gone, too. */
    CUdeviceptr q = ok(&c, "open %s", hex);
    EXPECT(&c, "ok", "check %#llx %zu 26", q, 4 * MiB);
    EXPECT(&c, "0", "close %#llx", q);
    wait_leases(&e, "1 0");
    EXPECT(&e, "0", "free %#llx", p);
    EXPECT(&c, "1", "open %s", hex);
    CUdeviceptr p2 = ok(&e, "alloc %zu", 4 * MiB);
    const char *a2 = run(&e, "export %#llx", p2);
    CHECK(!strncmp(a2, "ok ", 3));
    snprintf(hex, sizeof hex, "%s", a2 + 3);
    CHECK_EQ(finish(&e, "exit"), 0);
    EXPECT(&c, "400", "open %s", hex);
    EXPECT(&c, before, "counts");
    CHECK_EQ(finish(&c, "exit"), 0);
    unlink(log);
}

/* ---- a flood of bad imports -------------------------------------------------- */

static socklen_t import_address(uint64_t endpoint, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gvmshim-ipc-%016llx", (unsigned long long)endpoint);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int connect_import(uint64_t endpoint)
{
    struct sockaddr_un a;
    socklen_t len = import_address(endpoint, &a);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, len)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends a request of type with payload; returns the status of the one
 * reply (-1: none before EOF), and counts the descriptors that came. */
static long request(int fd, uint8_t type, const uint8_t *payload, uint32_t len, int *fds_received)
{
    uint8_t msg[GVM_CTL_HDR + 64] = {GVM_CTL_VERSION, type};
    gvm_put_u32(msg + 4, len);
    memcpy(msg + GVM_CTL_HDR, payload, len);
    if (send(fd, msg, GVM_CTL_HDR + len, MSG_NOSIGNAL) != (ssize_t)(GVM_CTL_HDR + len)) return -1;
    long status = -1;
    for (;;) {
        uint8_t buf[GVM_CTL_MSG_MAX];
        union {
            char b[CMSG_SPACE(sizeof(int) * GVM_CTL_FDS_MAX)];
            struct cmsghdr align;
        } ctrl;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.b, .msg_controllen = sizeof ctrl.b};
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n <= 0) return n == 0 ? status : -2;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int d;
                memcpy(&d, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof d);
                close(d);
                (*fds_received)++;
            }
        }
        if (n >= GVM_CTL_HDR + 4 && status == -1) status = gvm_get_u32(buf + GVM_CTL_HDR);
    }
}

/* 2000 bad attempts of every kind, and connections that never send a
 * thing held through them. Exits 0 when every attempt was refused and no
 * descriptor ever came. */
static int flood(const struct gvm_ipc_handle *h)
{
    int idle[40], bad = 0, fds = 0;
    for (int i = 0; i < 40; i++) idle[i] = connect_import(h->endpoint);
    for (int i = 0; i < 2000; i++) {
        int fd = connect_import(h->endpoint);
        if (fd < 0) {
            bad++;
            continue;
        }
        uint8_t open_req[GVM_IPC_OPEN_LEN];
        gvm_put_u64(open_req, h->endpoint);
        memcpy(open_req + 8, h->id, GVM_IPC_SECRET);
        long st = 0;
        switch (i % 5) {
        case 0:   /* a random secret */
            if (getrandom(open_req + 8, GVM_IPC_SECRET, 0) != GVM_IPC_SECRET) bad++;
            st = request(fd, GVM_CTL_IPC_OPEN, open_req, sizeof open_req, &fds);
            bad += st != CUDA_ERROR_INVALID_VALUE;
            break;
        case 1:   /* the secret, one byte off */
            open_req[8 + i % GVM_IPC_SECRET] ^= (uint8_t)(1 + i % 255);
            st = request(fd, GVM_CTL_IPC_OPEN, open_req, sizeof open_req, &fds);
            bad += st != CUDA_ERROR_INVALID_VALUE;
            break;
        case 2:   /* a request of the wrong length */
            st = request(fd, GVM_CTL_IPC_OPEN, open_req, 9, &fds);
            bad += st != CUDA_ERROR_INVALID_VALUE;
            break;
        case 3:   /* the control socket's requests: not served here, no answer */
            st = request(fd, (uint8_t)(i % 2 ? GVM_CTL_INFO : GVM_CTL_PING), NULL, 0, &fds);
            bad += st != -1;
            break;
        default:  /* gone at once */
            break;
        }
        close(fd);
    }
    for (int i = 0; i < 40; i++)
        if (idle[i] >= 0) close(idle[i]);
    if (bad || fds) fprintf(stderr, "flood: %d attempts not refused, %d descriptors received\n", bad, fds);
    return bad || fds;
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Another user floods the import socket while the program allocates,
 * exports and frees: the program goes on (no lock of its own is held by
 * the socket's thread while it reads a peer), a real importer still gets
 * the memory, and nothing is left of the flood. Without root the flood
 * comes from the same user: the limits are the same. */
static void flood_of_bad_imports(void)
{
    start();
    bool other = can_switch_users(__func__);
    CUdeviceptr p = ok(NULL, "alloc %zu", 2 * MiB);
    EXPECT(NULL, "0", "fill %#llx %zu 27", p, 2 * MiB);
    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    snprintf(hex, sizeof hex, "%s", export_here(p));
    struct gvm_ipc_handle h = decode_hex(hex);
    pid_t attacker = fork();
    if (attacker == 0) {
        if (other) drop_to_nobody();
        _exit(flood(&h));
    }
    double worst = 0;
    for (int i = 0; i < 200; i++) {
        double t0 = seconds();
        CUdeviceptr big = ok(NULL, "alloc %zu", 2 * MiB), small = ok(NULL, "alloc 4000");
        export_here(big);
        export_here(small);
        EXPECT(NULL, "0", "free %#llx", big);
        EXPECT(NULL, "0", "free %#llx", small);
        double t = seconds() - t0;
        if (t > worst) worst = t;
    }
    fprintf(stderr, "flood: the slowest of 200 export rounds took %.1f ms\n", worst * 1e3);
    struct peer c = spawn_full(NULL, other ? NOBODY : 0, NULL);
    CUdeviceptr q = ok(&c, "open %s", hex);
    EXPECT(&c, "ok", "check %#llx %zu 27", q, 2 * MiB);
    EXPECT(&c, "0", "close %#llx", q);
    CHECK_EQ(finish(&c, "exit"), 0);
    int status;
    alarm(120);
    CHECK_EQ(waitpid(attacker, &status, 0), attacker);
    alarm(0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    wait_leases(NULL, "1 0");
    /* Still served after the flood. */
    c = spawn_full(NULL, other ? NOBODY : 0, NULL);
    q = ok(&c, "open %s", hex);
    EXPECT(&c, "ok", "check %#llx %zu 27", q, 2 * MiB);
    CHECK_EQ(finish(&c, "exit"), 0);
    wait_leases(NULL, "1 0");
}

/* The import socket is no way into the control socket: another user
 * cannot reach the control socket (its directory is the user's, 0700),
 * and the import socket answers none of its requests. */
static void another_user_cannot_reach_control(void)
{
    start();
    if (!can_switch_users(__func__)) return;
    CUdeviceptr p = ok(NULL, "alloc %zu", 2 * MiB);
    struct gvm_ipc_handle h = decode_hex(export_here(p));
    char dir[256], paths[8][sizeof ((struct sockaddr_un *)0)->sun_path];
    int n = 0, k = snprintf(dir, sizeof dir, "%s/gvmshim", getenv("XDG_RUNTIME_DIR"));
    CHECK(k > 0 && (size_t)k < sizeof dir);
    DIR *d = opendir(dir);
    CHECK(d);
    for (struct dirent *e; n < 8 && (e = readdir(d));) {
        if (!strstr(e->d_name, ".sock")) continue;
        k = snprintf(paths[n], sizeof paths[n], "%s/%s", dir, e->d_name);
        if (k > 0 && (size_t)k < sizeof paths[n]) n++;
    }
    closedir(d);
    CHECK(n > 0);   /* this process's own, at least */
    pid_t pid = fork();
    if (pid == 0) {
        drop_to_nobody();
        for (int i = 0; i < n; i++) {
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            memcpy(a.sun_path, paths[i], sizeof a.sun_path);
            int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
            if (!connect(fd, (struct sockaddr *)&a, sizeof a) || errno != EACCES) _exit(1);
            close(fd);
        }
        if (opendir(dir)) _exit(2);   /* nor can it list who runs */
        const uint8_t types[] = {GVM_CTL_PING, GVM_CTL_INFO, GVM_CTL_STATS, GVM_CTL_SET, GVM_CTL_PAUSE,
                                 GVM_CTL_RESUME, GVM_CTL_MIGRATE};
        for (size_t i = 0; i < sizeof types; i++) {
            int fd = connect_import(h.endpoint), fds = 0;
            if (fd < 0) _exit(3);
            if (request(fd, types[i], (const uint8_t *)"all", 3, &fds) != -1 || fds) _exit(4);
            close(fd);
        }
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

static const struct test_case cases[] = {
    TEST_ENTRY(large_allocation_shared_both_ways)
    TEST_ENTRY(packed_allocation_exports_its_chunk)
    TEST_ENTRY(moved_allocations_export_from_their_device)
    TEST_ENTRY(shared_memory_is_not_moved_by_policy_or_api)
    TEST_ENTRY(exporter_exits_first)
    TEST_ENTRY(importer_dies_first)
    TEST_ENTRY(forged_and_foreign_handles)
    TEST_ENTRY(every_abi_reaches_the_hooks)
    TEST_ENTRY(failed_import_leaves_nothing_mapped)
    TEST_ENTRY(failed_export_changes_nothing)
    TEST_ENTRY(concurrent_opens_and_frees)
    TEST_ENTRY(killed_exporter_with_forked_child)
    TEST_ENTRY(another_user_imports_and_exports)
    TEST_ENTRY(another_user_with_forged_and_stale_handles)
    TEST_ENTRY(flood_of_bad_imports)
    TEST_ENTRY(another_user_cannot_reach_control)
};

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--peer")) return peer_main();
    return run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
}
