/* A tiny test harness: each case runs in its own forked process, so the
 * core's global state and the simulated driver start fresh every time and a
 * crash fails one case, not the suite. `prog CASE` runs one case in-process
 * (for a debugger). The run ends with "N passed, N failed". */
#ifndef GVM_TEST_HARNESS_H
#define GVM_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
                    #a, #b, a_, b_);                                           \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

struct test_case {
    const char *name;
    void (*fn)(void);
};

#define TEST_ENTRY(name) {#name, name},

static inline int run_cases(const struct test_case *cases, size_t n, int argc, char **argv)
{
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
    for (size_t i = 0; i < n; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            cases[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("%s %s\n", ok ? "PASS" : "FAIL", cases[i].name);
        if (!ok && WIFSIGNALED(status)) printf("     (killed by signal %d)\n", WTERMSIG(status));
        ok ? passed++ : failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
