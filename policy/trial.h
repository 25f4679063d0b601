/* Trial: whether the prefetch pays depends on the program. It overlaps
 * swaps with kernels, but each wrong prediction costs a demand swap, and
 * which weighs more is the program's to say: on an H100 (2026-11-27, lazy
 * spills at 1.5x a 4 GiB limit) it took 9 % off a training step with
 * fused Adam and 2-6 % off a read loop, and added 5-8 % to the step with
 * the default Adam and 7-9 % to a read loop whose second stream was busy.
 * So the program's own steps decide (option prefetch_trial): once its
 * loop is learned, a few steps run with the prefetch and a few without,
 * the faster median wins, and the verdict holds for a while before the
 * next trial (a program's phases change). */
#ifndef GVM_POLICY_TRIAL_H
#define GVM_POLICY_TRIAL_H

#include <stdbool.h>
#include <stdint.h>

#define GVM_TRIAL_STEPS 5   /* timed steps a side, after one that settles */
#define GVM_TRIAL_HOLD 100  /* steps a verdict holds */

struct gvm_trial {
    uint64_t last;                   /* the clock (ns) at the last step's end; 0: none seen yet */
    int phase, steps;                /* where in the schedule, and steps taken in it */
    uint64_t with[GVM_TRIAL_STEPS], without[GVM_TRIAL_STEPS];
    bool on;                         /* whether the step now running prefetches */
};

/* A fresh trial: the next steps prefetch. */
void gvm_trial_reset(struct gvm_trial *t);

/* Steps went by untimed (the prefetch had nothing to do): the next step
 * end only starts the clock again. */
void gvm_trial_lost(struct gvm_trial *t);

/* A step ended at `now` (ns): its time counts for the side it ran with.
 * Returns whether the next step prefetches. */
bool gvm_trial_step(struct gvm_trial *t, uint64_t now);

#endif
