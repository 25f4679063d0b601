/* The driver table: the only way core reaches libcuda. The preload layer
 * fills it from the real libcuda.so.1, tests from the simulated driver;
 * core cannot tell them apart. */
#ifndef GVM_DRIVER_H
#define GVM_DRIVER_H

#include "core/cuda_api.h"
#include "core/driver_list.h"

#include <stdbool.h>
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

/* Whether the driver has shut down, noting rc (the answer of a call just
 * made; CUDA_SUCCESS only asks). At exit the driver's own handlers tear it
 * down before what runs after them (the program's static destructors
 * freeing memory, gvmshim's threads and destructors); from then on every
 * call answers CUDA_ERROR_DEINITIALIZED and all the process's device
 * memory, mappings and registrations went with the driver. Latched: a
 * driver never comes back from it. Once true, gvmshim calls nothing to
 * release memory and reports no failure to: nothing leaks. */
extern bool gvm_driver_deinitialized;
static inline bool gvm_driver_gone(CUresult rc)
{
    if (__builtin_expect(rc == CUDA_ERROR_DEINITIALIZED, 0))
        __atomic_store_n(&gvm_driver_deinitialized, true, __ATOMIC_RELAXED);
    return __atomic_load_n(&gvm_driver_deinitialized, __ATOMIC_RELAXED);
}

/* A call's answer, noted (gvm_driver_gone) and passed on. */
static inline CUresult gvm_driver_answer(CUresult rc)
{
    if (__builtin_expect(rc == CUDA_ERROR_DEINITIALIZED, 0)) gvm_driver_gone(rc);
    return rc;
}

/* Calls a table entry and counts it: DRV(cuMemMap, va, size, 0, h, 0). */
#define DRV(name, ...) (gvm_driver_count(GVM_FN_##name), gvm_driver_answer(gvm_drv.name(__VA_ARGS__)))

#endif
