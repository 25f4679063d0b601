/* Processes sharing a device's memory (option share, policy/share.c), on the
 * simulated driver: each participant is this program run again with the
 * shim preloaded (its own simulated device; the budget is what they hold
 * together, read from the table they share). The coordinator (a test
 * case's process) makes no CUDA call: it starts participants, tells them
 * what to do through a pipe, and reads the table as gvmctl would.
 *
 *   idle_process_gives_way     A holds 192 MiB and goes idle, B allocates
 *                              192 MiB of a 256 MiB budget: A gives back
 *                              (to host), B's memory is on its device,
 *                              together they hold at most the budget, and
 *                              A's data reads back intact
 *   killed_process_frees_share A holds 192 MiB and is killed (SIGKILL, not
 *                              yet reaped by its parent): B allocates 192
 *                              MiB at once, without waiting
 *   hung_process_keeps_share   A holds 192 MiB and is stopped (SIGSTOP): B
 *                              waits at most share_wait, then spills its
 *                              own memory; nobody sees out-of-memory
 *   corrupt_table_own_limit    a table of another size, a symlink in its
 *                              place, a table of another owner: the process
 *                              warns once and keeps to its own limit
 *   table_is_private           the table is made 0600 and a stranger's
 *                              slot values are bounded when read */
#define _GNU_SOURCE
#include "gvmshim.h"
#include "harness.h"
#include "../../policy/share_table.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define BUDGET (256 * MiB)
#define GVM(fn) ((__typeof__(&fn))dlsym(RTLD_DEFAULT, #fn))

static char share_dir[512];
static char self_path[512];

/* ---- a participant ------------------------------------------------------------ */

struct report {
    int ok;                  /* data read back as written */
    size_t on_device, on_host;
    double alloc_seconds;
    int alloc_rc;
};

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#define PIECES 4

static int participant(int cmd, int ack, size_t bytes, unsigned char fill)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 3;
    struct report r = {0};
    CUdeviceptr p[PIECES] = {0};
    double t0 = seconds();
    for (int i = 0; i < PIECES && !r.alloc_rc; i++) {
        r.alloc_rc = cuMemAlloc(&p[i], bytes / PIECES);
        if (!r.alloc_rc) r.alloc_rc = cuMemsetD8(p[i], (unsigned char)(fill + i), bytes / PIECES);
    }
    r.alloc_seconds = seconds() - t0;
    if (write(ack, &r, sizeof r) != sizeof r) return 4;
    char c;
    while (read(cmd, &c, 1) == 1) {
        if (c == 'q') break;
        /* 'c': check every piece's data and say where it is. */
        r.ok = !r.alloc_rc;
        r.on_device = r.on_host = 0;
        for (int i = 0; i < PIECES && r.ok; i++) {
            unsigned char got[4096];
            size_t n = bytes / PIECES;
            if (cuMemcpyDtoH(got, p[i] + n - sizeof got, sizeof got)) r.ok = 0;
            for (size_t k = 0; k < sizeof got && r.ok; k++) r.ok = got[k] == (unsigned char)(fill + i);
            gvm_info info;
            if (GVM(gvm_query)((void *)p[i], &info) == GVM_OK) {
                r.on_device += info.bytes_on_device;
                r.on_host += info.bytes_on_host;
            }
        }
        if (write(ack, &r, sizeof r) != sizeof r) return 4;
    }
    return 0;
}

/* ---- the coordinator's side ------------------------------------------------------ */

struct proc {
    pid_t pid;
    int cmd, ack;
};

/* Runs this program as a participant holding `bytes`, with the extra
 * environment entries given (NAME=VALUE, NULL-ended). */
static struct proc spawn(size_t bytes, unsigned char fill, const char *const *extra)
{
    int c[2], a[2];
    CHECK(pipe(c) == 0 && pipe(a) == 0);
    struct proc pr = {fork(), c[1], a[0]};
    CHECK(pr.pid >= 0);
    if (pr.pid == 0) {
        for (const char *const *e = extra; e && *e; e++) putenv((char *)*e);
        char cfd[16], afd[16], sz[32], fl[8];
        snprintf(cfd, sizeof cfd, "%d", c[0]);
        snprintf(afd, sizeof afd, "%d", a[1]);
        snprintf(sz, sizeof sz, "%zu", bytes);
        snprintf(fl, sizeof fl, "%u", fill);
        close(c[1]);
        close(a[0]);
        execl(self_path, self_path, "--participant", cfd, afd, sz, fl, (char *)NULL);
        _exit(127);
    }
    close(c[0]);
    close(a[1]);
    return pr;
}

static struct report wait_report(const struct proc *p)
{
    struct report r;
    memset(&r, 0, sizeof r);
    CHECK_EQ(read(p->ack, &r, sizeof r), (ssize_t)sizeof r);
    return r;
}

static struct report ask(const struct proc *p)
{
    CHECK_EQ(write(p->cmd, "c", 1), 1);
    return wait_report(p);
}

static void finish(struct proc *p)
{
    if (write(p->cmd, "q", 1) != 1) { /* gone already */ }
    int st = 0;
    CHECK_EQ(waitpid(p->pid, &st, 0), p->pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(p->cmd);
    close(p->ack);
}

/* What a participant holds as the table says (pid 0: all of them). */
static size_t table_held_by(pid_t pid)
{
    char path[600];
    snprintf(path, sizeof path, "%s/share-dev0", share_dir);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct gvm_share_table *t = mmap(NULL, sizeof *t, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(t != MAP_FAILED);
    size_t held = 0;
    for (int i = 0; i < GVM_SHARE_SLOTS; i++)
        if (pid ? t->slot[i].pid == pid : t->slot[i].pid > 0 && kill(t->slot[i].pid, 0) == 0) held += t->slot[i].held;
    munmap(t, sizeof *t);
    return held;
}

static void fresh_dir(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/share-dev0", share_dir);
    unlink(path);
    mkdir(share_dir, 0700);
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void idle_process_gives_way(void)
{
    fresh_dir();
    struct proc a = spawn(192 * MiB, 0x10, NULL);
    struct report ra = wait_report(&a);
    CHECK_EQ(ra.alloc_rc, CUDA_SUCCESS);
    nap_ms(1500);   /* A has not used its memory for longer than share's idle time */
    /* A loaded machine may answer late: B waits as long as it takes (the
     * wait ends when the room is there). */
    static const char *const patient[] = {"GVM_SHARE_WAIT=60s", NULL};
    struct proc b = spawn(192 * MiB, 0x40, patient);
    struct report rb = wait_report(&b);
    CHECK_EQ(rb.alloc_rc, CUDA_SUCCESS);
    rb = ask(&b);
    ra = ask(&a);
    CHECK(rb.ok && ra.ok);
    CHECK_EQ(rb.on_device, 192 * MiB);            /* the busy one's memory came to its device */
    CHECK(ra.on_host >= 128 * MiB);              /* the idle one gave way, to host */
    nap_ms(100);                                  /* a round publishes what each holds */
    CHECK(table_held_by(0) <= BUDGET);
    finish(&a);
    finish(&b);
}

static void killed_process_frees_share(void)
{
    fresh_dir();
    static const char *const patient[] = {"GVM_SHARE_WAIT=60s", NULL};
    struct proc a = spawn(192 * MiB, 0x10, NULL);
    CHECK_EQ(wait_report(&a).alloc_rc, CUDA_SUCCESS);
    CHECK_EQ(kill(a.pid, SIGKILL), 0);            /* a zombie until waited for */
    struct proc b = spawn(192 * MiB, 0x40, patient);
    struct report rb = wait_report(&b);
    CHECK_EQ(rb.alloc_rc, CUDA_SUCCESS);
    CHECK(rb.alloc_seconds < 30);                 /* it did not wait out share_wait */
    rb = ask(&b);
    CHECK(rb.ok && rb.on_device == 192 * MiB);
    finish(&b);
    int st;
    CHECK_EQ(waitpid(a.pid, &st, 0), a.pid);
    close(a.cmd);
    close(a.ack);
}

static void hung_process_keeps_share(void)
{
    fresh_dir();
    static const char *const brief[] = {"GVM_SHARE_WAIT=300ms", NULL};
    struct proc a = spawn(192 * MiB, 0x10, NULL);
    CHECK_EQ(wait_report(&a).alloc_rc, CUDA_SUCCESS);
    nap_ms(50);
    CHECK_EQ(kill(a.pid, SIGSTOP), 0);
    struct proc b = spawn(192 * MiB, 0x40, brief);
    struct report rb = wait_report(&b);
    CHECK_EQ(rb.alloc_rc, CUDA_SUCCESS);          /* no out-of-memory: B spilled its own */
    rb = ask(&b);
    CHECK(rb.ok);
    CHECK(rb.on_host > 0);
    CHECK_EQ(table_held_by(a.pid), 192 * MiB);         /* nothing was taken from the stopped one */
    CHECK_EQ(kill(a.pid, SIGCONT), 0);
    struct report ra = ask(&a);
    CHECK(ra.ok);
    finish(&a);
    finish(&b);
}

/* A participant whose table cannot be used runs on its own limit. */
static void corrupt_table_own_limit(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/share-dev0", share_dir);
    for (int how = 0; how < 3; how++) {
        fresh_dir();
        if (how == 0) {
            int fd = open(path, O_CREAT | O_WRONLY, 0600);
            CHECK(fd >= 0 && write(fd, "not a table", 11) == 11);
            close(fd);
        } else if (how == 1) {
            CHECK_EQ(symlink("/etc/passwd", path), 0);
        } else {
            int fd = open(path, O_CREAT | O_WRONLY, 0600);
            CHECK(fd >= 0);
            close(fd);
            if (geteuid() != 0 || chown(path, 65534, 65534) != 0) continue;   /* needs root */
        }
        struct proc a = spawn(64 * MiB, 0x10, NULL);
        struct report ra = wait_report(&a);   /* one warning line, then its own limit */
        CHECK_EQ(ra.alloc_rc, CUDA_SUCCESS);
        ra = ask(&a);
        CHECK(ra.ok);
        finish(&a);
        struct stat st;
        CHECK_EQ(lstat(path, &st), 0);
        if (how == 1) CHECK(S_ISLNK(st.st_mode));           /* never followed nor replaced */
        if (how == 0) CHECK_EQ(st.st_size, 11);             /* left as it was */
        unlink(path);
    }
}

static void table_is_private(void)
{
    fresh_dir();
    struct proc a = spawn(64 * MiB, 0x10, NULL);
    CHECK_EQ(wait_report(&a).alloc_rc, CUDA_SUCCESS);
    char path[600];
    snprintf(path, sizeof path, "%s/share-dev0", share_dir);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    CHECK_EQ(st.st_size, (off_t)sizeof(struct gvm_share_table));
    /* A slot claiming absurd numbers for a live process (ours): bounded
     * when read, and the participant keeps running. */
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    struct gvm_share_table *t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(t != MAP_FAILED);
    int free_slot = -1;
    for (int i = 0; i < GVM_SHARE_SLOTS && free_slot < 0; i++)
        if (!t->slot[i].pid) free_slot = i;
    CHECK(free_slot >= 0);
    t->slot[free_slot].held = UINT64_MAX;
    t->slot[free_slot].want = UINT64_MAX;
    t->slot[free_slot].want_seq = 1;
    t->slot[free_slot].pid = getpid();
    nap_ms(100);
    struct report ra = ask(&a);
    CHECK(ra.ok);
    t->slot[free_slot].pid = 0;
    munmap(t, sizeof *t);
    finish(&a);
}

static const struct test_case cases[] = {
    TEST_ENTRY(idle_process_gives_way) TEST_ENTRY(killed_process_frees_share)
    TEST_ENTRY(hung_process_keeps_share) TEST_ENTRY(corrupt_table_own_limit) TEST_ENTRY(table_is_private)};

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--participant"))
        return participant(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10), (unsigned char)atoi(argv[5]));
    const char *dir = getenv("GVM_SHARE_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "GVM_SHARE_DIR must name the test's directory\n");
        return 2;
    }
    snprintf(share_dir, sizeof share_dir, "%s", dir);
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0) return 2;
    self_path[n] = 0;
    signal(SIGPIPE, SIG_IGN);
    int rc = run_cases(cases, sizeof cases / sizeof *cases, argc, argv);
    char path[600];
    snprintf(path, sizeof path, "%s/share-dev0", share_dir);
    unlink(path);
    rmdir(share_dir);
    return rc;
}
