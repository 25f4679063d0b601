/* Sharing a device's memory between processes (option share): together
 * they hold at most share_budget on each device; each process's own cap
 * is what the budget leaves after the others, at least its share_min.
 * An allocation that needs more than its cap asks the others for room,
 * and they give back their least recently used memory (spilled to host
 * or a peer, like any eviction), idle ones first, then busy ones above
 * their weighted fair share; after share_wait it makes room from its own
 * memory instead. The state they share is policy/share_table.h. */
#ifndef GVM_POLICY_SHARE_H
#define GVM_POLICY_SHARE_H

#include "policy/config.h"

#include <stdbool.h>
#include <stddef.h>

/* Joins the tables of the devices and starts the round thread; a table
 * that cannot be used leaves this process on its own limit, with one
 * warning. */
void gvm_share_start(const struct gvm_config *cfg);

/* Whether device d's memory is shared now (one load). */
bool gvm_share_active(int d);

/* An allocation of `need` bytes on d does not fit under this process's
 * cap: asks the others for room and waits for it (at most share_wait),
 * leaving the cap at what the budget then leaves this process. */
void gvm_share_make_room(int d, size_t need);

#endif
