/* Changing options while the process runs (gvmctl set PID KEY=VALUE...). */
#ifndef GVM_POLICY_SET_H
#define GVM_POLICY_SET_H

#include <stdio.h>

/* Applies the n items "key=value" together, or none of them: each is
 * parsed by the config file's parser (same messages), only options marked
 * live in policy/options.h may change, and a lowered device_limit evicts
 * down to the new limit (refused when spill is off). Returns GVM_OK with
 * one line per item ("key: old -> new") and one per device memory moved
 * off; or a negative gvm_status with one line saying why, and then the
 * configuration in force is the one before the call. */
int gvm_policy_set(char *const *items, int n, FILE *out);

#endif
