/* A tiny test harness: each case runs in its own forked process, so the
 * core's global state and the simulated driver start fresh every time and a
 * crash fails one case, not the suite. `prog CASE` runs one case in-process
 * (for a debugger). The run ends with "N passed, N failed". */
#ifndef GVM_TEST_HARNESS_H
#define GVM_TEST_HARNESS_H

#include "../check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
