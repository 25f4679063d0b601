/* The policy's shared state: its configuration and the limits it keeps,
 * and how much room each location has under them. Residency is core's
 * count of the memory it holds (core/held.h): what the limits bound is
 * exactly what the device gives the process through gvmshim. */
#ifndef GVM_POLICY_POLICY_H
#define GVM_POLICY_POLICY_H

#include "core/location.h"
#include "policy/config.h"

#include <stdbool.h>
#include <stddef.h>

/* gvmctl set replaces the configuration and the limits while other
 * threads read them (policy/set.c): every field is read and written
 * atomically, through the functions below. */
struct gvm_policy {
    /* Immutable once published: a change publishes a new copy (release),
     * readers load the pointer (acquire) and read a whole configuration,
     * never a half-written one. A replaced one is never freed. */
    const struct gvm_config *cfg;
    size_t limit[GVM_MAX_DEVICES];    /* bytes; the device's size when not limited */
    bool limited[GVM_MAX_DEVICES];
    size_t host_limit;                /* SIZE_MAX: none */
    /* Whether launches are scanned now (gvm_policy_tracks_launches of cfg):
     * spill turned on live scans from then on, as if set at start. */
    bool scans_launches;
};

extern struct gvm_policy gvm_policy;

/* The configuration in force. Load it once per decision. */
static inline const struct gvm_config *gvm_policy_cfg(void)
{
    return __atomic_load_n(&gvm_policy.cfg, __ATOMIC_ACQUIRE);
}

/* Publishes cfg as the configuration in force, with what follows from
 * it for every launch (whether it is scanned). */
void gvm_policy_publish(const struct gvm_config *cfg);

/* Whether launches are scanned for recency now: one load per launch. */
static inline bool gvm_policy_scans_launches(void)
{
    return __atomic_load_n(&gvm_policy.scans_launches, __ATOMIC_RELAXED);
}

/* Is device d's limit below its capacity? */
static inline bool gvm_policy_limited(int d) { return __atomic_load_n(&gvm_policy.limited[d], __ATOMIC_RELAXED); }

/* Sets the limit of loc (a device: capped at its capacity; host: SIZE_MAX
 * for none) in the policy and as core's cap (core/held.h). */
void gvm_policy_set_limit(int loc, size_t bytes);

/* Bytes that count against loc's limit now, and the limit. */
size_t gvm_policy_usage(int loc);
size_t gvm_policy_limit(int loc);

/* Bytes that still fit under loc's limit (SIZE_MAX: no limit). */
size_t gvm_policy_room(int loc);

/* True when `bytes` more fit under loc's limit. */
bool gvm_policy_fits(int loc, size_t bytes);

/* The peer of `device` with the most room under its limit for `bytes`,
 * or -1. */
int gvm_policy_best_peer(int device, size_t bytes);

/* The physical bytes an allocation of `size` takes. */
size_t gvm_policy_charge(size_t size);

#endif
