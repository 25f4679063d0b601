/* Trial: steps with and without the prefetch, timed, and the faster kept. */
#include "policy/trial.h"

#include "core/log.h"

#include <stdlib.h>
#include <string.h>

/* The schedule: steps with, then without, then the verdict held. The
 * first step of each side runs after a switch and is not timed (it holds
 * the other side's swaps still in flight). */
enum { WITH, WITHOUT, HOLD };

void gvm_trial_reset(struct gvm_trial *t)
{
    memset(t, 0, sizeof *t);
    t->phase = WITH;
    t->on = true;
}

void gvm_trial_lost(struct gvm_trial *t) { t->last = 0; }

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median, against an outlier step (a collection, a checkpoint). */
static uint64_t median(const uint64_t *v)
{
    uint64_t s[GVM_TRIAL_STEPS];
    memcpy(s, v, sizeof s);
    qsort(s, GVM_TRIAL_STEPS, sizeof *s, by_value);
    return s[GVM_TRIAL_STEPS / 2];
}

static void verdict(struct gvm_trial *t)
{
    uint64_t with = median(t->with), without = median(t->without);
    /* A tie keeps it off: the prefetch's swaps also take copy engines
     * and memory another process might want. */
    t->on = with < without;
    gvm_debug("prefetch: a step takes %.2f ms with it, %.2f ms without: %s for the next %d steps", (double)with / 1e6,
              (double)without / 1e6, t->on ? "on" : "off", GVM_TRIAL_HOLD);
}

static void enter(struct gvm_trial *t, int phase, bool on)
{
    t->phase = phase;
    t->steps = 0;
    t->on = on;
}

bool gvm_trial_step(struct gvm_trial *t, uint64_t now)
{
    uint64_t took = now - t->last;
    bool first = !t->last;   /* the first end seen: no step to time yet */
    t->last = now;
    if (t->phase == HOLD) {
        if (++t->steps >= GVM_TRIAL_HOLD) enter(t, WITH, true);
        return t->on;
    }
    if (first) return t->on;
    uint64_t *times = t->phase == WITH ? t->with : t->without;
    if (t->steps > 0) times[t->steps - 1] = took;
    if (++t->steps <= GVM_TRIAL_STEPS) return t->on;
    if (t->phase == WITH) {
        enter(t, WITHOUT, false);
    } else {
        verdict(t);
        enter(t, HOLD, t->on);
    }
    return t->on;
}
