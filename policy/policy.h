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

struct gvm_policy {
    const struct gvm_config *cfg;
    size_t limit[GVM_MAX_DEVICES];    /* bytes; the device's size when not limited */
    bool limited[GVM_MAX_DEVICES];
    size_t host_limit;                /* SIZE_MAX: none */
};

extern struct gvm_policy gvm_policy;

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
