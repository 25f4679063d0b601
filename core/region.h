/* A region is one reserved virtual range and the physical pieces ("blocks")
 * mapped into it. It is the unit gvmshim moves: a large allocation is one
 * region; small allocations share a 2 MiB chunk region; an alias is a
 * region that maps another region's blocks at a second address.
 *
 * Records are recycled, never freed, so a pointer read from the lock-free
 * address map is always safe to dereference (state tells if it is live).
 * A lock-free reader validates what it read with the record's generation,
 * which changes whenever the record is retired (gvm_region_stable). The
 * fields such readers look at (kind, state, base, reserved, mapped, size,
 * target, slab, gen) are written with atomic stores. */
#ifndef GVM_REGION_H
#define GVM_REGION_H

#include "core/location.h"
#include "core/phys.h"
#include "core/usemark.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct gvm_slab;

struct gvm_block {
    struct gvm_phys *phys;   /* NULL while paused without a copy */
    size_t off, size;
    bool cpu;                /* host-resident and readable by the CPU */
};

enum gvm_region_kind { GVM_REGION_LARGE, GVM_REGION_CHUNK, GVM_REGION_ALIAS };
enum gvm_region_state { GVM_REGION_FREE, GVM_REGION_LIVE, GVM_REGION_CACHED };

enum gvm_region_flags {
    GVM_RF_PAUSED = 1,       /* memory released or parked on host by gvm_pause */
    GVM_RF_DISCARDED = 2,    /* paused without a copy: contents are gone */
    GVM_RF_PINNED = 4,       /* never moved by the policy */
    GVM_RF_ORPHAN = 8,       /* freed by the program, kept alive by its aliases */
    GVM_RF_LEAKED = 16,      /* a mapping in its range could not be removed: never free the range */
    /* CUDA IPC (core/share.h): its pieces were exported to other processes,
     * which map them. Set with GVM_RF_PINNED; never moved (gvm_migrate
     * answers GVM_ERR_BUSY), its pieces are never pooled or cached for
     * reuse, until the region is destroyed. */
    GVM_RF_SHARED = 32,
    /* Freed long after it was served (core/heap.c): its device pieces go
     * back to the driver, not to the pool, as a native free gives memory
     * back. */
    GVM_RF_GIVE_BACK = 64,
};

/* Runs of launches a region remembers (policy/recur.c: uses close
 * together make one run): more than a training step's uses of one tensor
 * (forward, backward, each optimizer pass). */
#define GVM_REGION_LAUNCHES 16

struct gvm_region {
    uintptr_t base;
    size_t reserved;         /* virtual bytes reserved at base */
    size_t mapped;           /* bytes covered by blocks, from base */
    size_t size;             /* bytes the program asked for (large regions) */
    int kind, state;
    int device;              /* the device the program allocated on */
    int home;                /* where the policy wants it (device, or host) */
    uint32_t held_on;        /* devices the program put its memory on (bit per ordinal: a
                                gvm_migrate there, interleaving): they keep reaching it */
    uint32_t copied_from;    /* devices whose contexts copied it (gvm_region_grant_copier) */
    CUcontext ctx;           /* the context current at allocation */
    struct gvm_block *blocks;
    int nblocks, cap_blocks;
    struct gvm_region *aliases;  /* on a region: its aliases; on an alias: next alias */
    struct gvm_region *target;   /* on an alias: the region it shows */
    struct gvm_slab *slab;       /* on a chunk: its slots */
    unsigned users;              /* copies in flight through hooks (move.h); kept across reuse */
    int moving;                  /* a migration is remapping it */
    pthread_mutex_t op;          /* serializes operations on this region; never copied */
    unsigned gen;                /* bumped when the record is retired */
    uint64_t buffer_id;
    uint64_t last_use;           /* gvm_clock_tick() at the last use seen */
    int tag;                     /* policy tag id, 0 = none */
    int alias_slot;              /* on an alias of a chunk: the slot it was made for */
    unsigned flags;
    int paused_loc;              /* where its data waits while paused */
    struct gvm_phys **shelf;     /* paused unmapped or spilled lazily (core/shelf.h): the host pieces
                                    holding its contents, in order, its blocks' phys NULL as when
                                    discarded; NULL otherwise */
    int nshelf;
    bool shelf_spill;            /* its shelf holds a lazy spill (spill_host_map=lazy), not a paused copy */
    bool shelf_pause;            /* with shelf_spill: a copy mapped once reached (a pause's, or memory released for another party) */
    bool read_by_handle;         /* a texture or tensor map reads it (gvm_region_note_handle_read) */
    uint64_t spilled_at;         /* use clock when the policy moved it off its device, 0 if not */
    uint32_t launches[GVM_REGION_LAUNCHES];   /* the launch numbers starting its last runs of uses (policy/recur.c) */
    uint32_t launch_ends[GVM_REGION_LAUNCHES]; /* and of each run's last use */
    uint32_t nlaunches;          /* runs recorded; the newest is launches[(nlaunches - 1) % GVM_REGION_LAUNCHES] */
    uint64_t freed_at;           /* gvm_topo_epoch of its device when the program freed it */
    uint64_t freed_on;           /* the stream it was freed in order on (topo.h), 0: none */
    uint64_t cached_at;          /* gvm_trace_now() when it entered the cache */
    uint64_t served_at;          /* gvm_trace_now() when its allocation was served */
    CUresult last_error;         /* driver error of the last failed operation */
    struct gvm_usemark usemark;  /* its last uses (core/usemark.h); events kept across reuse */
    struct gvm_region *next;     /* free list / cache list */
    struct gvm_region *lru_prev, *lru_next;
};

/* Fields that the policy reads while walking regions under the heap lock,
 * and that operations write under the region's lock. */
#define GVM_LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define GVM_STORE(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

/* A new record, state FREE, zeroed but for its lock, its announced users
 * (a stale announcement still ends on it) and its block array. Waits for
 * whoever still holds the record's lock. Call it holding no region lock. */
struct gvm_region *gvm_region_new(void);
/* Returns a record for reuse; it must be unmapped and unreserved, and its
 * lock not held by the caller. */
void gvm_region_recycle(struct gvm_region *r);

/* Whether r is live; what was written before it became live is visible
 * (a record seen through a stale pointer may have been reused since). */
static inline bool gvm_region_live(const struct gvm_region *r)
{
    return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == GVM_REGION_LIVE;
}

/* For lock-free readers: the generation to compare with gvm_region_stable
 * after reading the record's fields. */
static inline unsigned gvm_region_gen(const struct gvm_region *r)
{
    return __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);
}

/* True when r was not retired since gvm_region_gen returned gen: what was
 * read from it in between belongs to one live record. */
static inline bool gvm_region_stable(struct gvm_region *r, unsigned gen)
{
#if defined(__SANITIZE_THREAD__)
    /* TSan knows no fences; an RMW orders the reads before it as well. */
    return __atomic_fetch_add(&r->gen, 0, __ATOMIC_ACQ_REL) == gen;
#else
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&r->gen, __ATOMIC_RELAXED) == gen;
#endif
}

/* Reserves `reserved` bytes of address space for r. */
CUresult gvm_region_reserve(struct gvm_region *r, size_t reserved);

/* Backs [mapped, mapped+len) with new blocks at loc (pieces of at most the
 * block size), maps them in r and its aliases' range and grants access.
 * On failure nothing changes. */
CUresult gvm_region_grow(struct gvm_region *r, size_t len, int loc);

/* The same with pieces of up to `cap` bytes. Each piece costs a create and
 * a map (~40 µs for 64 MiB on an H100/H200, the access is one call for the
 * whole span), so few large pieces grow fastest; but a move unmaps a
 * source piece whole, so the first move of a large piece to host cannot
 * overlap its remap with the next copy (core/move.c). */
CUresult gvm_region_grow_by(struct gvm_region *r, size_t len, int loc, size_t cap);

/* The largest piece for memory of r created at loc: grow_block for memory
 * nothing is expected to move (on its own device, untagged, not spilled),
 * else the block size. */
size_t gvm_region_piece_cap(const struct gvm_region *r, int loc);

/* Like gvm_region_grow, in granularity-sized pieces striped round-robin
 * over the devices in `devices` (a bit mask), so one allocation can be
 * larger than any single device's memory. */
CUresult gvm_region_grow_striped(struct gvm_region *r, size_t len, uint64_t devices);

/* Unmaps the blocks from index `first` on (all views) and gives their
 * memory back to the pools; r->mapped shrinks accordingly. A piece that
 * cannot be unmapped is leaked and the view's region marked GVM_RF_LEAKED. */
void gvm_region_shrink(struct gvm_region *r, int first);

/* Replaces the memory behind [off, off+len) in every view: the pieces
 * `from` (the mappings there now, in order) by the pieces `to` (holding the
 * same bytes, in order, possibly cut differently), with one unmap and one
 * access grant per view. The block list is not touched (a move splices it
 * when it is done). On failure `from` is mapped back everywhere. */
CUresult gvm_region_respan(struct gvm_region *r, size_t off, size_t len, struct gvm_phys *const *from, int nfrom,
                           bool from_cpu, struct gvm_phys *const *to, int nto);

/* Replaces blocks [b0, b1) of the list by blocks made of pieces[0..n),
 * laid out from blocks[b0].off. Returns -1 when memory for the list is
 * short (nothing changed). */
int gvm_region_splice(struct gvm_region *r, int b0, int b1, struct gvm_phys *const *pieces, int n);

/* Unmaps block i in every view and returns its memory (for pause). */
CUresult gvm_region_unmap_block(struct gvm_region *r, int i, struct gvm_phys **old);

/* Maps np as block i (currently without memory) in every view. */
CUresult gvm_region_map_block(struct gvm_region *r, int i, struct gvm_phys *np);

/* Grants (or keeps) CPU access to block i if it is host-resident. */
CUresult gvm_region_grant_cpu(struct gvm_region *r, int i);

/* The devices (bit per ordinal) its memory is granted to, besides the
 * device holding it: those reaching its device's memory (gvm_topo.reach),
 * the device it belongs on, the devices the program put it on (a program
 * that moved it to a peer uses it there; the policy's spills to a peer
 * add nothing: only the owning device uses that memory), and the devices
 * whose contexts copied it. Of an alias: its target's. */
uint32_t gvm_region_reach(const struct gvm_region *r);

/* dev keeps reaching r wherever its memory goes (gvm_migrate to dev,
 * memory interleaved over dev). Takes effect for mappings made after. */
void gvm_region_keep_reach(struct gvm_region *r, int dev);

/* Grants dev access to r's blocks (those at locations dev reaches), in
 * every view. The caller holds r->op, or has r announced (core/move.h). */
CUresult gvm_region_grant(struct gvm_region *r, int dev);

/* A copy or set the program issues from a context on device dev touches
 * r. Natively the driver serves such a call whatever device owns the
 * memory; with VMM memory it refuses one from a device not granted the
 * mapping (CUDA_ERROR_INVALID_VALUE, H200 pair), so dev is granted r from
 * now on. False when dev reached r already (nothing to grant). The caller
 * has r announced. */
bool gvm_region_grant_copier(struct gvm_region *r, int dev);

/* A texture object or a TMA tensor map was made on r's memory
 * (cuTexObjectCreate, cuTensorMapEncode*): kernels reach it through a
 * handle or descriptor, which no launch scan finds, so r is never again
 * spilled lazily (left unmapped, core/relocate.c) while it holds this
 * allocation; a spill keeps it mapped on host. Made while the caller
 * announces r (core/move.h), so no move is under way. */
static inline void gvm_region_note_handle_read(struct gvm_region *r)
{
    __atomic_store_n(&r->read_by_handle, true, __ATOMIC_SEQ_CST);
}

/* Where r's memory lives: a device, GVM_LOC_HOST (its shelf counts as
 * host memory), GVM_LOC_MIXED, or GVM_LOC_NONE when it holds none. */
int gvm_region_location(const struct gvm_region *r);

/* The bytes of r's copy kept on the shelf (core/shelf.h; 0: none). */
size_t gvm_region_shelf_bytes(const struct gvm_region *r);

/* Regions spilled lazily now (shelf_spill): while 0, no region's
 * contents wait unmapped outside a pause (a cheap test before looking for
 * them). */
extern unsigned gvm_region_shelf_spills;

/* Gives r the shelf pieces[0..n) (an array from malloc, r's now): they
 * count as held on host for r; `spill`: a lazy spill's, not a pause's. */
void gvm_region_set_shelf(struct gvm_region *r, struct gvm_phys **pieces, int n, bool spill);

/* A lazy spill's shelf now holds a paused copy (the region was paused). */
void gvm_region_shelf_paused(struct gvm_region *r);

/* Regions whose lazy shelf holds a copy to be mapped once reached
 * (pause_host_map=lazy, core/relocate.h: a pause's, or a spill made to
 * release memory at once): while any is, a launch maps every lazy shelf
 * first, whatever its scan found, so that no kernel reaches that memory
 * unmapped through an address kept in device memory. */
extern unsigned gvm_region_shelf_pauses;

/* r's lazy shelf (shelf_spill) now holds a copy mapped once reached:
 * counted in gvm_region_shelf_pauses until the shelf goes. */
void gvm_region_shelf_pause_later(struct gvm_region *r);

/* The shelf goes: drop puts its pieces back to the host pool (the region
 * destroyed or its copy taken back); release leaves them to the caller,
 * who mapped them as blocks. */
void gvm_region_drop_shelf(struct gvm_region *r);
void gvm_region_release_shelf(struct gvm_region *r);

/* The same, for a caller that does not hold r->op: a move may be
 * rewriting the block list meanwhile (waits for it); GVM_LOC_NONE when r
 * is no longer (or not yet) a live allocation. */
int gvm_region_location_now(struct gvm_region *r);

/* Physical bytes of r at loc. */
size_t gvm_region_bytes_at(const struct gvm_region *r, int loc);

/* The block containing offset off, or -1. */
int gvm_region_block_at(const struct gvm_region *r, size_t off);

/* Unmaps and releases everything of r (not its aliases, which must be gone)
 * and frees its address range, unless a piece could not be unmapped
 * (then that piece and the range are leaked, never freed under it). */
void gvm_region_destroy(struct gvm_region *r);

/* Maps every block of target into alias (whose reservation is done), with
 * the same access. On failure alias is left unmapped. */
CUresult gvm_region_mirror(struct gvm_region *alias, struct gvm_region *target);

/* Unmaps an alias's view of its target. A piece that cannot be unmapped
 * is marked stuck and the alias GVM_RF_LEAKED: its range must not be
 * freed. */
void gvm_region_unmirror(struct gvm_region *alias);

/* Records that a view of r gained or lost its address-map entry. */
int gvm_region_publish(struct gvm_region *r);
void gvm_region_unpublish(struct gvm_region *r);

#endif
