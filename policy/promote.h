/* Promotion: bringing spilled allocations back to their device. */
#ifndef GVM_POLICY_PROMOTE_H
#define GVM_POLICY_PROMOTE_H

/* Starts the background thread that does it (policy/promote.c), once:
 * later calls do nothing. Without it, spilled allocations stay where they
 * are (one warning). */
void gvm_promoter_start(void);

#endif
