/* Two counters every part of core stamps things with: the use clock, which
 * orders regions for least-recently-used decisions, and buffer ids, which
 * change whenever memory behind a pointer changes (registration caches of
 * the program compare them). */
#ifndef GVM_IDS_H
#define GVM_IDS_H

#include <stdint.h>

extern uint64_t gvm_clock;

/* The last tick this thread took. */
extern __thread uint64_t gvm_clock_mine __attribute__((tls_model("initial-exec")));

/* A tick of the use clock. */
static inline uint64_t gvm_clock_tick(void)
{
    uint64_t t = __atomic_add_fetch(&gvm_clock, 1, __ATOMIC_RELAXED);
    gvm_clock_mine = t;
    return t;
}

/* A buffer id never handed out before. */
uint64_t gvm_next_buffer_id(void);

#endif
