/* Internal interface of the preload layer: the interposed entry points
 * (hooks) reach the real driver through gvm_drv and the core through these
 * helpers. */
#ifndef GVM_SHIM_H
#define GVM_SHIM_H

#include "core/core.h"
#include "core/driver.h"
#include "core/export.h"
#include "core/heap.h"
#include "core/hostaccess.h"
#include "core/move.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/usemark.h"
#include "policy/spill.h"

#include <stdbool.h>

/* Sanitizer runtimes resolve their interceptors with dlsym while they
 * start, before their shadow memory exists: code on that path must not be
 * instrumented. */
#define GVM_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* Fills the driver table from the real libcuda once; false if it cannot be
 * loaded (hooks are only handed out after a successful load). */
bool gvm_shim_driver(void);

/* The real entry point fn. A program linked with -lcuda may call any hook
 * before anything loaded the driver table: load it then. */
void *gvm_shim_real_slow(enum gvm_driver_fn fn);
#define GVM_REAL(fn)                                                           \
    (__builtin_expect(gvm_drv.fn != NULL, 1) ? gvm_drv.fn                      \
                                             : (__typeof__(gvm_drv.fn))gvm_shim_real_slow(GVM_FN_##fn))

/* The real entry point fn, or NULL when the driver lacks it: for hooks of
 * entry points newer than some drivers (a program that finds gvmshim's
 * export of one, dlsym(RTLD_DEFAULT, ...), is answered
 * CUDA_ERROR_NOT_SUPPORTED, not ended as GVM_REAL would). */
void *gvm_shim_real_opt(enum gvm_driver_fn fn);
#define GVM_REAL_OPT(fn)                                                       \
    (__builtin_expect(gvm_drv.fn != NULL, 1) ? gvm_drv.fn                      \
                                             : (__typeof__(gvm_drv.fn))gvm_shim_real_opt(GVM_FN_##fn))

/* True when gvmshim serves allocations: not disabled, driver loaded, core
 * started (starting it on first use, which needs cuInit done). */
bool gvm_shim_serving(void);

/* True when pointer lookups are worth doing (the core is active). */
static inline bool gvm_shim_active(void) { return gvm_core_active(); }

/* Launch hooks are handed out unless track_launches is off: decided at
 * load, since programs resolve cuLaunchKernel before their first
 * allocation. Whether a hooked launch is scanned is the configuration in
 * force's (gvm_policy_scans_launches), which gvmctl set may change. */
bool gvm_shim_hooks_launches(void);

/* GVM_DISABLE: hand out nothing, serve nothing. */
bool gvm_cfg_disabled(void);

/* The hook that replaces a real entry point, or NULL. */
void *gvm_shim_hook_for(void *real);

/* The real dlsym, reached through dlvsym (the public one is ours). */
void *gvm_real_dlsym(void *handle, const char *name);

/* The sigaction after the one preload/signals.c interposes: what core's
 * fault handler changes goes to the kernel (gvm_hostaccess_use_sigaction). */
int gvm_shim_next_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* Is this thread inside gvmshim's own driver loading (dlopen of libcuda)? */
bool gvm_shim_loading(void);

/* Counts a call the program made to an intercepted entry point. */
static inline void gvm_hook_count(enum gvm_driver_fn fn)
{
    gvm_stat_local_inc(calls[fn]);
}

/* Announces use of memory at p for the duration of a call; NULL if p is not
 * gvmshim's. Host-side arguments [p, p+n) also get CPU access where they
 * are host-resident. */
static inline struct gvm_region *gvm_shim_use(uintptr_t p)
{
    return gvm_shim_active() ? gvm_use_begin(p) : (struct gvm_region *)0;
}
struct gvm_region *gvm_shim_use_host(const void *p, size_t n);

/* gvm_shim_use for a call touching [p, p+n): sets *bad (and announces
 * nothing) when p is gvmshim's and the span leaves the live allocation
 * containing p, or p is in no live allocation. *tick is the call's use
 * clock (gvm_use_region_in). A region the call announced already (`held`,
 * the other side of a copy inside the same allocation or chunk) is not
 * announced twice: NULL, nothing to end. */
static inline struct gvm_region *gvm_shim_use_span(uintptr_t p, size_t n, bool *bad, uint64_t *tick,
                                                   const struct gvm_region *held)
{
    if (!gvm_shim_active()) return NULL;
    size_t room;
    struct gvm_region *r = gvm_heap_span(p, &room);
    if (n > room) {
        *bad = true;
        return NULL;
    }
    if (!r || r == held) return NULL;
    gvm_use_region_in(r, tick);
    return gvm_policy_unmapped(r) ? gvm_policy_use_mapped(r, tick) : r;
}

/* The end of a call's use of r (announced; NULL: nothing): a copy's,
 * set's or memory operation's completion is not recorded
 * (core/usemark.h), so a lazy swap of r waits for the devices. */
static inline void gvm_shim_used_end(struct gvm_region *r)
{
    gvm_usemark_unknown(r);
    gvm_use_end(r);
}

/* The regions one call of many pointers (a batch) announced, ended
 * together after it (preload/uses.c). */
#define GVM_SHIM_USES_STACK 64
struct gvm_shim_uses {
    struct gvm_region **r;
    size_t n;
    uint64_t tick;   /* the call's use clock */
    bool bad;        /* a span left its allocation: the call must fail */
    struct gvm_region *stack[GVM_SHIM_USES_STACK];
};
/* Room for `want` announcements; false when there is none to be had. */
bool gvm_shim_uses_open(struct gvm_shim_uses *u, size_t want);
/* Announces [p, p+n) as gvm_shim_use_span does; `pair`: the previous
 * announcement is the other side of the same copy. */
void gvm_shim_uses_add(struct gvm_shim_uses *u, uintptr_t p, size_t n, bool pair);
/* Whether any announcement was gvmshim's (else the call passes through). */
bool gvm_shim_uses_ours(const struct gvm_shim_uses *u);
void gvm_shim_uses_close(struct gvm_shim_uses *u);

/* Bytes of one element of a CUDA array; 0 when not known
 * (preload/element.c). */
size_t gvm_shim_array_element_bytes(CUarray array);

/* Whether the program enabled peer access from context `from` to `to`
 * (preload/hooks_peer.c); gvm_shim_peer_unknown: more pairs than recorded. */
bool gvm_shim_peer_enabled(CUcontext from, CUcontext to);
bool gvm_shim_peer_unknown(void);

/* A reset destroyed ctx: the peer access enabled from or to it is gone
 * (preload/hooks_peer.c), and so are the stream-ordered allocations of
 * its device's default pool (preload/hooks_mem.c). */
void gvm_shim_peer_forget(CUcontext ctx);
void gvm_shim_ordered_forget(int dev);

/* A synchronize the program made on dev (-1: any device) returned: the
 * default pools settle their frees (preload/hooks_mem.c). */
void gvm_shim_pools_synchronized(int dev);

/* The default pool whose stream-ordered allocation gvmshim served at base,
 * or NULL when base is not one; whether such a pool grants dev access
 * (false for NULL) (preload/hooks_mem.c). */
CUmemoryPool gvm_shim_ordered_pool(uintptr_t base);
bool gvm_shim_pool_grants(CUmemoryPool pool, int dev);

/* The device of ctx, or -1 when it cannot be told (preload/hooks_peer.c). */
int gvm_shim_device_of(CUcontext ctx);

/* Hooks exported under libcuda's names, in the order of GVM_DRIVER_ALL. */
extern void *const gvm_hook_table[GVM_FN_COUNT];

/* Whether the allocation ref may be exported through legacy CUDA IPC
 * (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE; preload/ipc_export.c). */
bool gvm_ipc_capable(const struct gvm_ref *ref);

/* Served calls made while a stream capture is open. CUDA forbids
 * "potentially unsafe" calls (cudaMalloc, cudaFree) on a thread whose own
 * capture or, in global mode, another thread's global capture forbids them:
 * then enter returns false and the hook lets the driver answer (its native
 * error, and the capture invalidated as natively). Otherwise the call is
 * served with the thread in relaxed mode, so that gvmshim's own driver
 * calls are legal; leave restores the thread's mode. */
struct gvm_capture_guard {
    bool relaxed;
    CUstreamCaptureMode mode;
};
bool gvm_shim_capture_enter(struct gvm_capture_guard *g);
void gvm_shim_capture_leave(struct gvm_capture_guard *g);
/* Relaxed mode for gvmshim's own driver calls on the program's thread,
 * without the check (undone by gvm_shim_capture_leave). */
void gvm_shim_relax(struct gvm_capture_guard *g);

/* The current thread's tag (policy), 0 if none. */
int gvm_shim_tag(void);

#endif
