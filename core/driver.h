/* The driver table: the only way core reaches libcuda. The preload layer
 * fills it from the real libcuda.so.1, tests from the simulated driver;
 * core cannot tell them apart. */
#ifndef GVM_DRIVER_H
#define GVM_DRIVER_H

#include "core/cuda_api.h"
#include "core/driver_list.h"

#include <stdint.h>

#define GVM_DRIVER_FIELD(name) __typeof__(name) *name;
struct gvm_driver {
    GVM_DRIVER_ALL(GVM_DRIVER_FIELD, GVM_DRIVER_FIELD)
};
#undef GVM_DRIVER_FIELD

extern struct gvm_driver gvm_drv;

/* Index of each entry point, for per-entry-point call counters. */
#define GVM_DRIVER_ENUM(name) GVM_FN_##name,
enum gvm_driver_fn { GVM_DRIVER_ALL(GVM_DRIVER_ENUM, GVM_DRIVER_ENUM) GVM_FN_COUNT };
#undef GVM_DRIVER_ENUM

extern const char *const gvm_driver_names[GVM_FN_COUNT];

/* Opens `path` (RTLD_NOW|RTLD_LOCAL; "libcuda.so.1" resolves through the
 * loader path) and fills gvm_drv with `lookup`, which must not be the
 * public dlsym when called from an interposed dlsym. Returns 0, or -1 with
 * a reason in err when the library or a required entry point is missing. */
typedef void *(*gvm_symbol_lookup)(void *handle, const char *name);
int gvm_driver_load(const char *path, gvm_symbol_lookup lookup, char *err, size_t errlen);

/* The handle of the loaded driver library, or NULL. */
void *gvm_driver_handle(void);

/* Counts a call the core makes to the driver, by entry point; the counts
 * (the summary's gvmshim_driver_calls). */
void gvm_driver_count(enum gvm_driver_fn fn);
extern uint64_t gvm_driver_calls[GVM_FN_COUNT];

/* Calls a table entry and counts it: DRV(cuMemMap, va, size, 0, h, 0). */
#define DRV(name, ...) (gvm_driver_count(GVM_FN_##name), gvm_drv.name(__VA_ARGS__))

#endif
