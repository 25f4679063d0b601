/* The check helpers of every C test program (the cpu suite's harness, the
 * config tests, the simulated driver's self-test).
 *
 * A failed check prints FILE:LINE and what failed. Then, by default, the
 * process ends with status 1: the cpu suite runs each case in its own
 * process, so one failure fails one case. A program that counts failures
 * and goes on (the config tests: hundreds of independent checks in one
 * process) defines CHECK_CONTINUE before including this header and reports
 * checks_passed and checks_failed at its end. */
#ifndef GVM_TESTS_CHECK_H
#define GVM_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Updated atomically: tests check from several threads. */
__attribute__((unused)) static int checks_passed, checks_failed;

static inline void check_result(int ok)
{
    if (ok) {
        __atomic_fetch_add(&checks_passed, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&checks_failed, 1, __ATOMIC_RELAXED);
#ifndef CHECK_CONTINUE
    fflush(stdout);
    exit(1);
#endif
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        int ok_ = !!(cond);                                                    \
        if (!ok_) fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
        check_result(ok_);                                                     \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
                    #a, #b, a_, b_);                                           \
        check_result(a_ == b_);                                                \
    } while (0)

#define CHECK_STR(got, want)                                                   \
    do {                                                                       \
        const char *g_ = (got), *w_ = (want);                                  \
        int ok_ = g_ && w_ && strcmp(g_, w_) == 0;                             \
        if (!ok_)                                                              \
            fprintf(stderr, "%s:%d: CHECK_STR(%s) failed\n  got:  '%s'\n  want: '%s'\n", \
                    __FILE__, __LINE__, #got, g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
        check_result(ok_);                                                     \
    } while (0)

#endif
