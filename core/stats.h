/* Counters printed on request at exit (GVM_STATS). Plain relaxed atomics:
 * they are read once at the end, so no ordering is needed. The ones every
 * hooked call bumps are kept per thread (struct gvm_stats_local). */
#ifndef GVM_STATS_H
#define GVM_STATS_H

#include "core/driver.h"
#include "core/location.h"
#include "core/perthread.h"

#include <stdint.h>
#include <stdio.h>

/* Scalar counters: X(name, "what it counts"). */
#define GVM_STAT_COUNTERS(X)                                                   \
    X(allocations_total, "allocations served")                                 \
    X(frees_total, "allocations freed")                                        \
    X(small_allocations, "allocations packed into shared chunks")              \
    X(cache_hits, "allocations served from mapped cache")                      \
    X(cache_misses, "allocations that needed new mappings")                    \
    X(passthrough_calls, "calls forwarded untouched (pointers not ours)")      \
    X(alloc_failures, "allocations that failed")                               \
    X(migrations_d2h, "migrations device to host")                             \
    X(migrations_h2d, "migrations host to device")                             \
    X(migrations_d2d, "migrations device to device")                           \
    X(migrations_failed, "migrations that failed and were rolled back")        \
    X(bytes_migrated, "bytes moved by migrations")                             \
    X(spills, "allocations moved or placed off their device by the policy")    \
    X(spilled_bytes, "bytes moved off their device by the policy")             \
    X(promotions, "spilled allocations brought back")                          \
    X(promoted_bytes, "bytes brought back by promotion")                       \
    X(prefetches, "spilled allocations swapped in ahead of use (prefetch)")    \
    X(loops_learned, "loop periods adopted from the launches (learn_loop)")    \
    X(swap_handoffs, "blocks a lazy swap's outgoing regions handed in")        \
    X(use_waits, "lazy swaps that waited for their regions' last uses, not the devices") \
    X(pauses, "allocations paused")                                            \
    X(resumes, "allocations resumed")                                          \
    X(aliases, "aliases created")                                              \
    X(reallocs, "in-place resizes")                                            \
    X(cpu_access_faults, "first CPU touches of host-resident memory")          \
    X(launches_scanned, "kernel launches scanned for recency")                 \
    X(ipc_exports, "allocations exported with cuIpcGetMemHandle")             \
    X(ipc_imports, "gvmshim IPC handles mapped by cuIpcOpenMemHandle")

struct gvm_stats {
#define GVM_STAT_FIELD(name, doc) uint64_t name;
    GVM_STAT_COUNTERS(GVM_STAT_FIELD)
#undef GVM_STAT_FIELD
    int64_t bytes_live[GVM_MAX_DEVICES];   /* requested bytes, by device allocated on */
    int64_t peak_bytes[GVM_MAX_DEVICES];
    int64_t resident[GVM_LOC_SLOTS];       /* physical bytes of allocations, by location */
    uint64_t calls[GVM_FN_COUNT];          /* calls the program made, by entry point (with the
                                              blocks of struct gvm_stats_local) */
};

extern struct gvm_stats gvm_stats;

#define gvm_stat_add(field, n) __atomic_fetch_add(&gvm_stats.field, (n), __ATOMIC_RELAXED)
#define gvm_stat_inc(field) gvm_stat_add(field, 1)

/* The counters every hooked call (or allocation) bumps, one block per
 * thread, summed when read: a shared counter is a locked instruction on
 * every call, and a cache line that threads calling the driver at once
 * pass back and forth.
 * Only the owning thread writes its block (a plain load and store, atomic
 * for the reader); the summary adds every block to gvm_stats' fields of
 * the same names. Blocks are never freed: a thread that exits leaves its
 * block, counts included, to the next new thread. */
#define GVM_STAT_LOCAL_COUNTERS(X)                                             \
    X(passthrough_calls)                                                       \
    X(launches_scanned)                                                        \
    X(small_allocations)                                                       \
    X(cache_hits)                                                              \
    X(cache_misses)

struct gvm_stats_local {
    struct gvm_perthread head;
#define GVM_STAT_LOCAL_FIELD(name) uint64_t name;
    GVM_STAT_LOCAL_COUNTERS(GVM_STAT_LOCAL_FIELD)
#undef GVM_STAT_LOCAL_FIELD
    uint64_t calls[GVM_FN_COUNT];
};

extern __thread struct gvm_perthread *gvm_stats_mine __attribute__((tls_model("initial-exec")));

/* This thread's block, made or taken over at its first count; NULL only
 * when no memory is left (the count then goes to gvm_stats). */
struct gvm_stats_local *gvm_stats_local_attach(void);

#define gvm_stat_local_add(field, n)                                           \
    do {                                                                       \
        struct gvm_stats_local *l_ = (struct gvm_stats_local *)gvm_stats_mine; \
        if (__builtin_expect(!l_, 0)) l_ = gvm_stats_local_attach();           \
        if (__builtin_expect(l_ != NULL, 1))                                   \
            __atomic_store_n(&l_->field, __atomic_load_n(&l_->field, __ATOMIC_RELAXED) + (n), \
                             __ATOMIC_RELAXED);                                \
        else                                                                   \
            gvm_stat_add(field, n);                                            \
    } while (0)
#define gvm_stat_local_inc(field) gvm_stat_local_add(field, 1)

/* In a forked child: zero every counter; the blocks of the parent's other
 * threads (gone in the child) become free. */
void gvm_stats_after_fork(void);

void gvm_stats_live(int device, int64_t delta);
void gvm_stats_resident(int loc, int64_t delta);

/* Writes the summary: as JSON when json != 0, else as text lines.
 * device_used, when not NULL, is each device's memory in use by the
 * process as the device reports it (-1: unknown), written with the part
 * of it gvmshim does not hold. */
void gvm_stats_write(FILE *out, int json, int ndevices, const int64_t *device_used);

#endif
