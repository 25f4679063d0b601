/* What the machine offers: devices, their VMM abilities, who can reach
 * whose memory, and one primary context and copy stream per device for
 * gvmshim's own work. Read once at the first allocation (after the program
 * initialised CUDA), never in a constructor. */
#ifndef GVM_TOPO_H
#define GVM_TOPO_H

#include "core/cuda_api.h"
#include "core/stats.h"

#include <stdbool.h>
#include <stdint.h>

struct gvm_device {
    bool vmm;             /* can be served; otherwise its allocations pass through */
    bool posix_fd;        /* handles may request POSIX_FD export (NCCL, IPC) */
    bool rdma;            /* handles may be gpuDirectRDMACapable */
    size_t total;         /* bytes of memory */
    size_t gran;          /* allocation granularity */
    int pci[3];           /* PCI domain, bus, device: one name in every process */
    CUcontext ctx;        /* primary context, retained on first use */
    /* gvmshim's copy streams in ctx, one per direction (GVM_INTO/GVM_OUT_OF
     * the device), so a move in and a move out run on both copy engines at
     * once; each with a double buffer of events for pipelined moves. */
    CUstream stream[2];
    CUevent events[2][2];
    uint64_t syncs_started;   /* device-wide waits begun ... */
    uint64_t syncs_done;      /* ... and the highest of them finished */
};

struct gvm_topo {
    int ndev;
    bool host_vmm;        /* HOST_NUMA (or HOST) handles can be created */
    int host_numa_id;
    CUmemLocationType host_type;
    size_t gran;          /* the largest granularity of all locations */
    unsigned char peer[GVM_MAX_DEVICES][GVM_MAX_DEVICES]; /* peer[a][b]: a reaches b's memory */
    /* nvlink[a][b]: a reaches b's memory over NVLink (or a chip-to-chip
     * link), told by native atomics between them, which PCIe lacks:
     * kernels read over it in place near the copy engines' speed. */
    unsigned char nvlink[GVM_MAX_DEVICES][GVM_MAX_DEVICES];
    /* reach[o]: the devices (bit per ordinal) granted access to the memory
     * of allocations made on device o, wherever it lives: o itself, and
     * every device the program enabled peer access for to o's memory
     * (core/reach.c). Read without a lock; bits are only ever added. */
    uint32_t reach[GVM_MAX_DEVICES];
    struct gvm_device dev[GVM_MAX_DEVICES];
};

extern struct gvm_topo gvm_topo;

/* Reads the topology. Returns CUDA_SUCCESS or the failing call's error. */
CUresult gvm_topo_init(void);

/* True when a kernel on device `dev` can read memory at location `loc`. */
bool gvm_topo_reaches(int dev, int loc);

/* True when `loc` is another device that `dev` reaches over NVLink. */
bool gvm_topo_nvlinked(int dev, int loc);

/* Fills descs with access for the devices in mask (bit per ordinal) that
 * are served and reach memory at loc, plus the CPU when cpu is set (host
 * locations only). Returns the count. */
int gvm_topo_access_mask(int loc, uint32_t devices, bool cpu, CUmemAccessDesc *descs);

/* The primary context of dev, retained on first use (creating it). */
CUresult gvm_topo_ctx(int dev, CUcontext *ctx);

/* dev's primary context while it is active (or retained by gvmshim), else
 * NULL: the context whose allocations a reset of it frees. */
CUcontext gvm_topo_primary(int dev);

/* After a reset of dev's primary context: gvmshim's streams and events
 * there are gone and its retain is given back (the next use retains the
 * context again). No thread may be using them. */
void gvm_topo_forget_context(int dev);

/* While this thread cleans up after a reset of dev's primary context
 * (dev; -1 ends it): waits on dev return at once, there is nothing left
 * there to wait for (and its context cannot be synchronized). */
void gvm_topo_resetting(int dev);

/* Makes dev's primary context current on this thread; gvm_topo_pop undoes. */
CUresult gvm_topo_push(int dev);
void gvm_topo_pop(void);

/* Bytes of dev's memory in use by every process, as the device reports
 * them (SIZE_MAX: unknown). */
size_t gvm_topo_used(int dev);

enum { GVM_INTO = 0, GVM_OUT_OF = 1 };

/* dev's copy stream for direction dir, created on first use (dev's ctx
 * current). */
CUresult gvm_topo_stream(int dev, int dir, CUstream *stream);

/* That stream if it was made already, else NULL; makes nothing, so it
 * needs no context current (a wait on it needs none either). */
CUstream gvm_topo_stream_made(int dev, int dir);

/* Memory freed by the program may still be read by work queued before the
 * free. Instead of waiting at every free, freed memory is stamped with
 * gvm_topo_epoch() and kept from reuse or unmapping until a device-wide
 * wait that began after the free has finished (gvm_topo_settled). */
uint64_t gvm_topo_epoch(int dev);
bool gvm_topo_settled(int dev, uint64_t stamp);

/* A stream-ordered allocation (cuMemAllocAsync) must not wait for the
 * device only to reuse freed memory: its program overlaps CPU and GPU
 * work, and natively the pool reuses without a wait. While this thread
 * serves one (on, with the stream's cuStreamGetId, 0 when it has none to
 * trust: a per-thread stream), freed memory is reused once settled, or at
 * once when it was freed in order on that same stream (the stream runs
 * the new work after everything the free was ordered after, as the
 * driver's pool relies on), fresh memory is taken otherwise; a device at
 * its limit still waits to make room. A stream-ordered free is marked
 * with its stream the same way. */
void gvm_topo_stream_order(bool on, uint64_t stream);
bool gvm_topo_reuse_waits(void);
uint64_t gvm_topo_ordered_stream(void);   /* 0: none */

/* A context the program made (cuCtxCreate) that it allocates in on dev
 * (the primary context and NULL are ignored): cuCtxSynchronize waits for
 * one context's work only, so the waits below synchronize these too
 * (gvm_heap_alloc notes them). Forgotten once the program destroyed it. */
void gvm_topo_note_context(int dev, CUcontext ctx);
void gvm_topo_forget_program_context(CUcontext ctx);

/* Waits for all work queued on device dev (the calling thread's context if
 * it is on dev, dev's primary context and the program's own contexts on
 * dev). While a stream capture is open
 * on dev, waits nothing and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * (core/capture.h): the caller must do without. */
CUresult gvm_topo_sync_device(int dev);

/* Waits, unless a wait begun after `stamp` already finished. */
CUresult gvm_topo_settle(int dev, uint64_t stamp);

/* Waits for all work queued on every device whose primary context is
 * active (and on the calling thread's current context and the program's
 * own contexts gvm_topo_note_context was told of): after it returns,
 * no earlier kernel or copy can touch memory gvmshim is about to remap.
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while any capture is open. */
CUresult gvm_topo_quiesce(void);

/* The same stamps for whole waits: gvm_topo_quiesced(stamp) is true once a
 * gvm_topo_quiesce begun after gvm_topo_quiesce_epoch() returned stamp has
 * finished (work queued before then, on any device, is done). */
uint64_t gvm_topo_quiesce_epoch(void);
bool gvm_topo_quiesced(uint64_t stamp);

#endif
