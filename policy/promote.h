/* Promotion: bringing spilled allocations back to their device. */
#ifndef GVM_POLICY_PROMOTE_H
#define GVM_POLICY_PROMOTE_H

/* Starts the background thread that does it (policy/promote.c), once:
 * later calls do nothing. Without it, spilled allocations stay where they
 * are (one warning). */
void gvm_promoter_start(void);

/* Asks the promoter (started or not: it looks when it runs) to bring
 * every spilled allocation of `device` home that fits under its limit,
 * at once and without promote_rate's pacing: after the limit rose. */
void gvm_promoter_bring_home(int device);

#endif
