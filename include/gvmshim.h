/* gvmshim public API.
 *
 * libgvmshim.so exports these functions. A program may link against it, or
 * look them up at run time when it was started under the shim:
 *
 *     gvm_status (*migrate)(const void *, int) = dlsym(RTLD_DEFAULT, "gvm_migrate");
 *     if (migrate) migrate(ptr, GVM_HOST);
 *
 * Every function takes any address inside an allocation the program got from
 * cudaMalloc, cuMemAlloc or a framework pool while gvmshim served it. Sizes
 * always come from gvmshim's own records, never from the caller.
 *
 * Statuses are 0 (GVM_OK) or negative; gvm_strerror() names them. When a
 * driver call failed, GVM_ERR_DRIVER is returned and the CUresult is kept:
 * gvm_query() reports it in `last_driver_error`, and GVM_LOG=warn logs it.
 */
#ifndef GVMSHIM_H
#define GVMSHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int gvm_status;

#define GVM_OK 0
#define GVM_ERR_UNKNOWN_POINTER (-1) /* not inside an allocation gvmshim serves */
#define GVM_ERR_NO_MEMORY (-2)       /* the destination has no room */
#define GVM_ERR_NO_HEADROOM (-3)     /* the reservation cannot hold the new size */
#define GVM_ERR_UNSUPPORTED (-4)     /* the device or link cannot do it (e.g. no peer access) */
#define GVM_ERR_DRIVER (-5)          /* a driver call failed; the allocation is unchanged */
#define GVM_ERR_INVALID (-6)         /* a bad argument (location, size, flags) */
#define GVM_ERR_BUSY (-7)            /* the allocation is paused or shared with another process (CUDA IPC), or the call came during stream capture */
#define GVM_ERR_INACTIVE (-8)        /* gvmshim is disabled (GVM_DISABLE) or could not start */

/* Locations: a device ordinal (>= 0) or host memory. */
#define GVM_HOST (-1)
#define GVM_MIXED (-2) /* gvm_info.location: pieces live in several places */
#define GVM_NOWHERE (-3) /* gvm_info.location: paused without a copy */

typedef struct gvm_info {
    void *base;                 /* the allocation's address, as the program got it */
    size_t size;                /* the size the program asked for (after gvm_realloc: the new one) */
    int device;                 /* the device it was allocated on; pointer queries report this */
    int location;               /* where its memory is now: device, GVM_HOST, GVM_MIXED, GVM_NOWHERE */
    int packed;                 /* 1: a small allocation sharing a chunk, which moves as a whole */
    void *chunk_base;           /* the region that moves with it (== base when not packed) */
    size_t chunk_size;          /* bytes of that region's physical memory */
    size_t reserved;            /* virtual bytes reserved there (size + growth headroom) */
    int pieces;                 /* physical pieces (cuMemCreate handles) behind it */
    int aliases;                /* live aliases of its region */
    int paused;                 /* 1 while paused by gvm_pause */
    size_t bytes_on_device;     /* bytes resident on its own device */
    size_t bytes_on_host;       /* bytes resident in host memory */
    int last_driver_error;      /* CUresult of the last failed operation on it, 0 if none */
    unsigned long long buffer_id; /* what CU_POINTER_ATTRIBUTE_BUFFER_ID reports; changes when it moves */
} gvm_info;

/* Moves the allocation's memory to `location` under the same pointer. The
 * move waits for work already queued on every active device, copies on the
 * copy engines, and only then unmaps the old memory: on any failure the
 * allocation is exactly as it was. Packed small allocations move their whole
 * chunk (see gvm_info.packed). */
gvm_status gvm_migrate(const void *ptr, int location);

/* Maps the allocation's memory at a second address; *alias_out is the
 * second address of ptr itself (for an interior ptr, an interior address).
 * A packed small allocation is aliased with its whole chunk. Writes through one
 * address are visible through the other once the writing operation (kernel,
 * copy, memset) has completed; within one kernel the two are not coherent.
 * The memory lives until the allocation and all its aliases are gone. */
gvm_status gvm_alias(const void *ptr, void **alias_out);
gvm_status gvm_unalias(void *alias);

/* Grows or shrinks the allocation in place: growth maps new memory after the
 * existing pieces inside the reserved headroom (no copy); shrinking unmaps
 * whole pieces past the new end. Aliases keep the length they had. */
gvm_status gvm_realloc(const void *ptr, size_t new_size);

gvm_status gvm_query(const void *ptr, gvm_info *info);

const char *gvm_strerror(gvm_status status);

/* ---- policy API ---------------------------------------------------------- */

/* Tags the allocations this thread makes until the matching pop (a stack;
 * names up to 63 bytes). The empty name "" makes them untagged until its
 * pop, inside a tagged block too. */
gvm_status gvm_tag_push(const char *tag);
gvm_status gvm_tag_pop(void);

#define GVM_PAUSE_KEEP 0    /* keep the contents in host memory */
#define GVM_PAUSE_DISCARD 1 /* drop the contents; resume gives zeroed memory */
/* Keep the contents in host memory without mapping it at the allocations'
 * addresses: touching paused memory faults (as with GVM_PAUSE_DISCARD), and
 * the pause and the resume skip the driver's page-table work for host
 * memory, so they run at the link's speed. */
#define GVM_PAUSE_UNMAPPED 2

/* Releases the device memory of every allocation tagged `tag`, keeping
 * every pointer reserved. NULL pauses the whole process: every allocation
 * gvmshim serves on every device (tagged or not, small ones' chunks,
 * stream-ordered ones), except those placed in host memory already. With
 * GVM_PAUSE_KEEP the contents wait in host memory, mapped at the same
 * addresses: kernels and copies keep reading and writing them there (at
 * the link's speed) until the resume, so a running program keeps working.
 * With GVM_PAUSE_UNMAPPED they wait in host memory and touching the memory
 * faults; with GVM_PAUSE_DISCARD nothing is kept and touching the memory
 * faults (refused without a tag: GVM_ERR_INVALID). Every pause also gives
 * gvmshim's idle device memory (freed allocations kept for reuse, empty
 * chunks, pooled pieces) back to the driver.
 *
 * Lenient, as vLLM's sleep mode: pausing what is paused, resuming what is
 * not, or naming a tag nothing carries does nothing and returns GVM_OK.
 * Allocations made while paused are ordinary ones; a resume leaves them
 * alone. GVM_ERR_BUSY: a stream capture is open (nothing was done), or
 * some of the memory is shared with other processes (CUDA IPC), which
 * stays on its device while the rest is paused. */
gvm_status gvm_pause(const char *tag, int flags);

/* Brings paused allocations back onto their devices, in place (NULL:
 * every paused allocation). */
gvm_status gvm_resume(const char *tag);

/* What a pause, resume or gvmctl migrate did, in bytes. */
#define GVM_REPORT_DEVICES 64
typedef struct gvm_pause_result {
    int matched;                 /* live allocations' regions the request named (a chunk of small ones counts once) */
    int done;                    /* of those, moved (paused, resumed, migrated) by this call */
    int already;                 /* of those, in the asked-for state already (paused for a pause...) */
    size_t bytes;                /* bytes moved (discarded, for GVM_PAUSE_DISCARD) */
    size_t device_bytes[GVM_REPORT_DEVICES]; /* of those, per device: leaving it (pause, migrate) or arriving (resume) */
    size_t released;             /* device bytes gvmshim gave back to the driver (moved memory, caches, pools) */
    size_t stayed;               /* bytes of named allocations left on a device (shared, or a failure) */
    size_t stayed_shared;        /* of those, shared with other processes (CUDA IPC) */
    double seconds;              /* time the call took */
    double gbps;                 /* bytes / seconds, in 10^9 bytes per second */
    int to;                      /* pause: GVM_HOST or GVM_NOWHERE (discarded); resume: GVM_MIXED (each to its device); migrate: the destination */
    char reason[224];            /* why nothing or not everything was done ("" when all went), one line */
} gvm_pause_result;

/* gvm_pause / gvm_resume, filling *out (never NULL) with what they did. */
gvm_status gvm_pause_report(const char *tag, int flags, gvm_pause_result *out);
gvm_status gvm_resume_report(const char *tag, gvm_pause_result *out);

#ifdef __cplusplus
}
#endif

#endif
