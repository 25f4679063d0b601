/* Recurrence: a training or inference loop launches the same kernels on
 * the same allocations every step. Learned from the launches the scanner
 * sees, the step's length (its period, in launches) tells when each
 * resident allocation is needed next: where it was used one period ago.
 * The victims of a spill are then those needed furthest ahead (Belady's
 * choice), not the least recently used: in a loop larger than the device,
 * LRU evicts exactly what comes next. */
#ifndef GVM_POLICY_RECUR_H
#define GVM_POLICY_RECUR_H

#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

/* No use of the region is expected within a period (or none is known). */
#define GVM_RECUR_NEVER UINT32_MAX

/* Learning starts with the first spill: a job that fits never pays for
 * it on its launches. Called when the policy moves or places memory off a
 * device. */
void gvm_recur_start(void);

/* Records a launch reaching used[0..n), once learning started: each
 * region's use, and the launch's recurrence (how many launches ago the
 * same allocations were launched on last). */
void gvm_recur_launch(struct gvm_region *const *used, int n);

/* The number of the latest launch recorded (launches counted since
 * learning started). */
uint32_t gvm_recur_launches(void);

/* The learned period in launches, 0 while none is known. */
uint32_t gvm_recur_period(void);

/* In how many launches r is expected to be used next, given the period
 * (from gvm_recur_period, nonzero): from 1 (the next launch) to the
 * period, or GVM_RECUR_NEVER when it was not used in the last period. */
uint32_t gvm_recur_next_use(const struct gvm_region *r, uint32_t period);

/* Holds the vote's lock (tests: a launch then skips its vote, as one
 * beside another thread's vote does). */
void gvm_recur_hold_votes(bool hold);

/* Forgets what was learned and stops learning until the next spill
 * (tests; a new policy). */
void gvm_recur_reset(void);

#endif
