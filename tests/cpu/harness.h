/* A tiny test harness: each case runs in its own forked process, so the
 * core's global state and the simulated driver start fresh every time and a
 * crash fails one case, not the suite. `prog CASE` runs one case in-process
 * (for a debugger); `prog --shard K/N` runs every N-th case from the K-th
 * (1-based), so a long suite can run as N tests side by side. Each case's
 * line gives its time; the run ends with "N passed, N failed".
 *
 * test_scratch_dir() is a private directory for what cases write to the
 * file system (control sockets, stats files); the harness removes it with
 * all it holds when the run ends, passed, failed or interrupted.
 * test_scaled(n) is an iteration count for long loops: n times a factor,
 * below 1 under the sanitizers, GVM_TEST_SCALE where that is set
 * (`scripts/test --long` sets it above 1 for a soak); test_sweep_step()
 * the step of a sweep that fails each driver call in turn. */
#ifndef GVM_TEST_HARNESS_H
#define GVM_TEST_HARNESS_H

#include "../check.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct test_case {
    const char *name;
    void (*fn)(void);
};

#define TEST_ENTRY(name) {#name, name},

/* The sanitizers multiply the cost of every access (TSan of every lock
 * too): long loops run fewer rounds there, the same cases all the same.
 * Sweeps that fail each driver call in turn keep every call under ASan
 * (a leak on one error path is what it finds), every 4th under TSan. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GVM_TEST_TSAN 1
#elif __has_feature(address_sanitizer)
#define GVM_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(GVM_TEST_TSAN)
#define GVM_TEST_TSAN 1
#elif defined(__SANITIZE_ADDRESS__) && !defined(GVM_TEST_ASAN)
#define GVM_TEST_ASAN 1
#endif
#if defined(GVM_TEST_TSAN)
#define GVM_TEST_SANITIZER_SCALE 0.25
#define GVM_TEST_SANITIZER_SWEEP_STEP 4
#elif defined(GVM_TEST_ASAN)
#define GVM_TEST_SANITIZER_SCALE 0.5
#define GVM_TEST_SANITIZER_SWEEP_STEP 1
#else
#define GVM_TEST_SANITIZER_SCALE 1.0
#define GVM_TEST_SANITIZER_SWEEP_STEP 1
#endif

/* GVM_TEST_SCALE where it is set (scripts/test --long sets it above 1),
 * else the sanitizer's factor (1 in a plain build). */
static inline double test_scale(void)
{
    const char *e = getenv("GVM_TEST_SCALE");
    double f = e && *e ? strtod(e, NULL) : 0;
    return f > 0 ? f : GVM_TEST_SANITIZER_SCALE;
}

/* n rounds of a long loop, scaled; at least 1. */
static inline long test_scaled(long n)
{
    long v = (long)(n * test_scale() + 0.5);
    return v < 1 ? 1 : v;
}

/* The step of a sweep that fails each driver call in turn (k = 1, 1 +
 * step, ...): 1 but under TSan, 1 wherever GVM_TEST_SCALE is set. */
static inline unsigned long test_sweep_step(void)
{
    const char *e = getenv("GVM_TEST_SCALE");
    return e && *e ? 1 : GVM_TEST_SANITIZER_SWEEP_STEP;
}

/* The step of a sweep that repeats in another mode what a sweep of its
 * own suite covers call by call (the pause suite's second run, a variant
 * of a case): every fourth of test_sweep_step()'s calls under the
 * sanitizers, where the suite's time is short; the plain build still
 * fails each call. */
static inline unsigned long test_repeat_sweep_step(void)
{
    return test_sweep_step() * (test_scale() < 1 ? 4 : 1);
}

static char harness_scratch[512];
static pid_t harness_scratch_owner;   /* the process that removes it */

/* rm -r, not following links. */
static void harness_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[sizeof harness_scratch + 256];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            harness_remove_tree(sub);
        }
        if (d) closedir(d);
    }
    remove(path);
}

static void harness_scratch_remove(void)
{
    if (!harness_scratch[0] || getpid() != harness_scratch_owner) return;
    harness_remove_tree(harness_scratch);
    harness_scratch[0] = 0;
}

static inline void harness_scratch_make(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(harness_scratch, sizeof harness_scratch, "%s/gvmshim-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(harness_scratch)) {
        perror("harness: mkdtemp");
        exit(2);
    }
    harness_scratch_owner = getpid();
    atexit(harness_scratch_remove);   /* a single case's run, or a CHECK in the parent */
}

/* Made on first use where a single case runs in-process; made by the
 * parent before the first fork otherwise, so every case shares it. */
static inline const char *test_scratch_dir(void)
{
    if (!harness_scratch[0]) harness_scratch_make();
    return harness_scratch;
}

/* "--shard K/N": *k (0-based) and *of; false, with a message, when it is
 * malformed. */
/* A child's exit status as a shell gives it (128 + the signal when one
 * killed it). */
static inline int test_exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The parent's side of a child started with its output on pipe fd: reads
 * it into out (NUL-terminated; NULL: left unread), closes fd, waits for
 * the child and returns its exit code. */
static inline int test_child_output(pid_t pid, int fd, char *out, size_t outlen)
{
    size_t n = 0;
    ssize_t r;
    while (out && n + 1 < outlen && (r = read(fd, out + n, outlen - n - 1)) > 0) n += (size_t)r;
    if (out) out[n] = 0;
    close(fd);
    int status = 0;
    waitpid(pid, &status, 0);
    return test_exit_code(status);
}

static inline int parse_shard(const char *arg, size_t *k, size_t *of)
{
    unsigned long kk = 0, nn = 0;
    char tail = 0;
    if (sscanf(arg, "%lu/%lu%c", &kk, &nn, &tail) != 2 || nn == 0 || kk == 0 || kk > nn) {
        fprintf(stderr, "--shard wants K/N with 1 <= K <= N, not '%s'\n", arg);
        return 0;
    }
    *k = kk - 1;
    *of = nn;
    return 1;
}

/* A run stopped from outside (^C, meson test's timeout) still removes the
 * scratch directory: the signal interrupts the wait for the case, which
 * ends the case, cleans up and dies of the same signal. */
static volatile sig_atomic_t harness_stop_signal;

static void harness_on_stop(int sig) { harness_stop_signal = sig; }

static inline void harness_catch_stops(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = harness_on_stop;   /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, NULL);
}

static inline void harness_wait_case(pid_t pid, int *status, struct rusage *ru)
{
    while (wait4(pid, status, 0, ru) < 0 && errno == EINTR) {
        if (!harness_stop_signal) continue;
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
        harness_scratch_remove();
        signal(harness_stop_signal, SIG_DFL);
        raise(harness_stop_signal);
        _exit(128 + harness_stop_signal);
    }
}

static inline int run_cases(const struct test_case *cases, size_t n, int argc, char **argv)
{
    size_t shard = 0, shards = 1;
    if (argc > 2 && !strcmp(argv[1], "--shard")) {
        if (!parse_shard(argv[2], &shard, &shards)) return 2;
        argc = 1;
    }
    if (argc > 1) {
        for (size_t i = 0; i < n; i++)
            if (!strcmp(cases[i].name, argv[1])) {
                cases[i].fn();
                printf("1 passed, 0 failed\n");
                return 0;
            }
        fprintf(stderr, "no test case %s\n", argv[1]);
        return 2;
    }
    harness_scratch_make();
    harness_catch_stops();
    int passed = 0, failed = 0;
    for (size_t i = shard; i < n; i += shards) {
        fflush(stdout);
        fflush(stderr);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            cases[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        harness_wait_case(pid, &status, &ru);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        long cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        /* Each case's time and CPU time (its own and its children's), so a
         * slow one shows in the test log whatever else loads the machine. */
        printf("%s %s (%ld ms, cpu %ld ms)\n", ok ? "PASS" : "FAIL", cases[i].name, ms, cpu_ms);
        if (!ok && WIFSIGNALED(status)) printf("     (killed by signal %d)\n", WTERMSIG(status));
        ok ? passed++ : failed++;
    }
    harness_scratch_remove();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
