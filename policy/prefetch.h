/* Prefetch (option prefetch, with spill_host_map=lazy): a background
 * thread swaps in the spilled allocation the program needs next while the
 * kernels before it run, so the copies overlap the program's work instead
 * of stalling the launch that needs it. */
#ifndef GVM_POLICY_PREFETCH_H
#define GVM_POLICY_PREFETCH_H

#include "core/region.h"

/* Called once a launch is queued, with the regions it reached: when
 * the thread is idle and a lazily spilled region of their device will be
 * needed before a resident one (the learned loop's prediction, else the
 * older use), hands that swap to the thread. One load when off. */
void gvm_prefetch_after(struct gvm_region *const *used, int n);

/* Waits while the thread's swap moves one of used[0..n): a launch reaching
 * it then finds it where the swap left it. One load while the thread is
 * idle. */
void gvm_prefetch_wait(struct gvm_region *const *used, int n);

/* Waits until the thread is idle (tests). */
void gvm_prefetch_drain(void);

#endif
