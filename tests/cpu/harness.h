/* A tiny test harness: each case runs in its own forked process, so the
 * core's global state and the simulated driver start fresh every time and a
 * crash fails one case, not the suite. `prog CASE` runs one case in-process
 * (for a debugger); `prog --shard K/N` runs every N-th case from the K-th
 * (1-based), so a long suite can run as N tests side by side. The run ends
 * with "N passed, N failed". */
#ifndef GVM_TEST_HARNESS_H
#define GVM_TEST_HARNESS_H

#include "../check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct test_case {
    const char *name;
    void (*fn)(void);
};

#define TEST_ENTRY(name) {#name, name},

/* "--shard K/N": *k (0-based) and *of; false, with a message, when it is
 * malformed. */
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
    int passed = 0, failed = 0;
    for (size_t i = shard; i < n; i += shards) {
        fflush(stdout);
        fflush(stderr);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            cases[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        /* Each case's time, so a slow one shows in the test log. */
        printf("%s %s (%ld ms)\n", ok ? "PASS" : "FAIL", cases[i].name, ms);
        if (!ok && WIFSIGNALED(status)) printf("     (killed by signal %d)\n", WTERMSIG(status));
        ok ? passed++ : failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
