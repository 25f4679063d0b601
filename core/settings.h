/* The knobs core obeys, resolved to absolute values by whoever starts the
 * core (policy from the configuration, tests directly). */
#ifndef GVM_SETTINGS_H
#define GVM_SETTINGS_H

#include "core/location.h"

#include <stddef.h>

enum gvm_host_access { GVM_HOST_ACCESS_EAGER, GVM_HOST_ACCESS_LAZY, GVM_HOST_ACCESS_OFF };

/* When the host pool is filled ahead of need (core/phys.h): at the first
 * sign that host memory is in play, at start, or never. */
enum gvm_host_prefill { GVM_HOST_PREFILL_AUTO, GVM_HOST_PREFILL_ON, GVM_HOST_PREFILL_OFF };

struct gvm_settings {
    size_t small_max;                       /* up to this: packed into shared chunks */
    size_t block_size;                      /* largest physical piece of an allocation */
    size_t grow_block;                      /* largest piece of memory nothing is expected to move
                                               (untagged, on its own device): fewer driver calls */
    double headroom;                        /* extra VA after a large allocation, x size */
    size_t cache_limit[GVM_MAX_DEVICES];    /* freed allocations kept mapped, per device */
    size_t pool_limit[GVM_MAX_DEVICES];     /* ready pieces kept per device */
    size_t host_pool;                       /* ready pinned host pieces */
    int host_prefill;                       /* enum gvm_host_prefill */
    int host_access;                        /* enum gvm_host_access */
    int host_register;                      /* shelf pieces may be registered pages (core/hostpin.h) */
    size_t hold_limit[GVM_LOC_SLOTS];       /* most physical bytes held, by location slot; SIZE_MAX: none */
};

/* The settings in force (core/settings.c), set by gvm_core_start. */
extern struct gvm_settings gvm_settings;

/* Defaults for tests and for devices the configuration does not name. */
void gvm_settings_defaults(struct gvm_settings *s);

#endif
