#include "core/move.h"

#include "core/capture.h"
#include "core/driver.h"
#include "core/heap.h"
#include "core/held.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/perthread.h"
#include "core/phys_batch.h"
#include "core/settings.h"
#include "core/slab.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/trace.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

struct gvm_region *gvm_use_begin(uintptr_t p)
{
    struct gvm_region *r = gvm_heap_region(p);
    if (r) gvm_use_region(r);
    return r;
}

/* Ticks other threads may take while a region this thread stamped last
 * keeps its stamp (see mark_used). */
#define CLOCK_SLACK 64

/* A region needs no new stamp when it holds the newest tick, or the newest
 * this thread took while other threads took at most CLOCK_SLACK since (so
 * threads working on regions of their own do not take turns writing the
 * clock's line: their order among those few ticks is a race anyway), and
 * not since a spill of it (a use after a spill must be seen as one). */
static void mark_used(struct gvm_region *r, uint64_t *tick)
{
    uint64_t last = __atomic_load_n(&r->last_use, __ATOMIC_RELAXED);
    if (!*tick) {
        uint64_t now = __atomic_load_n(&gvm_clock, __ATOMIC_RELAXED);
        if (last == now || (last == gvm_clock_mine && now - last <= CLOCK_SLACK &&
                            last > __atomic_load_n(&r->spilled_at, __ATOMIC_RELAXED))) {
            *tick = last;   /* the call's other regions join it */
            return;
        }
        *tick = gvm_clock_tick();
    }
    /* Never back: another thread may have stamped it later than *tick. */
    if (last < *tick) __atomic_store_n(&r->last_use, *tick, __ATOMIC_RELAXED);
}

/* ---- announcements -------------------------------------------------------
 *
 * A thread announces the regions its calls use in a block of its own: a
 * store into a slot, then a load of `moving` (no read-modify-write on a
 * line other threads write, where r->users took two per region and call,
 * its line passed back and forth between threads using the same region).
 * A mover raises `moving`, then waits while any slot of any thread holds
 * the region. All four are seq_cst, so neither store passes the load
 * after it: Dekker's handshake, one side always sees the other. A thread
 * holding more regions at once than it has slots (a launch reaching many
 * allocations, a kernel body calling the driver) counts the rest in
 * r->users, the same handshake with read-modify-writes. An announcement
 * ends on the thread that made it. */

#define USE_SLOTS 16

struct use_block {
    struct gvm_perthread head;
    struct gvm_region *slot[USE_SLOTS];   /* written by the owner only */
};

static __thread struct gvm_perthread *my_uses __attribute__((tls_model("initial-exec")));
static struct gvm_perthread_list use_blocks = GVM_PERTHREAD_LIST(struct use_block);

/* A free slot of this thread's block, or NULL (none left, no memory). */
static struct gvm_region **free_slot(void)
{
    struct use_block *b = (struct use_block *)my_uses;
    if (__builtin_expect(!b, 0)) b = (struct use_block *)gvm_perthread_attach(&use_blocks, &my_uses);
    if (!b) return NULL;
    for (int i = 0; i < USE_SLOTS; i++)
        if (!b->slot[i]) return &b->slot[i];
    return NULL;
}

/* Announces r; false (announcing nothing) while it moves. */
static bool announce(struct gvm_region *r)
{
    struct gvm_region **slot = free_slot();
    if (!slot) {
        __atomic_fetch_add(&r->users, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&r->moving, __ATOMIC_SEQ_CST)) return true;
        __atomic_fetch_sub(&r->users, 1, __ATOMIC_SEQ_CST);
        return false;
    }
    /* Both seq_cst: the store may not pass the load (on x86 the store is
     * the one locked instruction, on this thread's own line). */
    __atomic_store_n(slot, r, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&r->moving, __ATOMIC_SEQ_CST)) return true;
    __atomic_store_n(slot, NULL, __ATOMIC_RELEASE);
    return false;
}

void gvm_use_end(struct gvm_region *r)
{
    if (!r) return;
    struct use_block *b = (struct use_block *)my_uses;
    /* Slots fill from the first: a call's are found early. Which of two
     * slots holding r (a nested call) is cleared makes no difference. */
    for (int i = 0; b && i < USE_SLOTS; i++) {
        if (b->slot[i] == r) {
            /* Release: what the call did happens before the mover's look. */
            __atomic_store_n(&b->slot[i], NULL, __ATOMIC_RELEASE);
            return;
        }
    }
    __atomic_fetch_sub(&r->users, 1, __ATOMIC_SEQ_CST);
}

/* Whether any thread has r announced. Called after raising r->moving
 * (seq_cst, like every load here). */
static bool announced(struct gvm_region *r)
{
    if (__atomic_load_n(&r->users, __ATOMIC_SEQ_CST)) return true;
    for (struct gvm_perthread *h = gvm_perthread_first(&use_blocks); h; h = h->next) {
        struct use_block *b = (struct use_block *)h;
        for (int i = 0; i < USE_SLOTS; i++)
            if (__atomic_load_n(&b->slot[i], __ATOMIC_SEQ_CST) == r) return true;
    }
    return false;
}

void gvm_use_region_in(struct gvm_region *r, uint64_t *tick)
{
    while (!announce(r)) {
        /* The mover holds r->op for the whole move: wait on it. */
        pthread_mutex_lock(&r->op);
        pthread_mutex_unlock(&r->op);
    }
    mark_used(r, tick);
}

void gvm_use_region(struct gvm_region *r)
{
    uint64_t tick = 0;
    gvm_use_region_in(r, &tick);
}

/* The fence that orders a batch of slot stores before the loads of
 * `moving` after it. ThreadSanitizer knows no fences: there every store is
 * seq_cst instead (the order gvm_use_region_in gives one region). */
#if defined(__SANITIZE_THREAD__)
#define BATCH_STORE __ATOMIC_SEQ_CST
#define batch_fence() ((void)0)
#else
#define BATCH_STORE __ATOMIC_RELAXED
#define batch_fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

void gvm_use_regions(struct gvm_region *const *r, int n)
{
    uint64_t tick = 0;
    struct use_block *b = (struct use_block *)my_uses;
    if (__builtin_expect(!b, 0)) b = (struct use_block *)gvm_perthread_attach(&use_blocks, &my_uses);
    struct gvm_region **slot[USE_SLOTS];
    int k = 0;
    for (int i = 0; b && i < USE_SLOTS && k < n; i++)
        if (!b->slot[i]) slot[k++] = &b->slot[i];
    if (k < n) {
        for (int i = 0; i < n; i++) gvm_use_region_in(r[i], &tick);
        return;
    }
    /* One fence for the batch: each store still precedes each load. */
    for (int i = 0; i < n; i++) __atomic_store_n(slot[i], r[i], BATCH_STORE);
    batch_fence();
    for (int i = 0; i < n; i++) {
        if (__atomic_load_n(&r[i]->moving, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(slot[i], NULL, __ATOMIC_RELEASE);
            gvm_use_region_in(r[i], &tick);   /* waits for the move, announces again */
        } else {
            mark_used(r[i], &tick);
        }
    }
}

static unsigned moves_active;

/* The gate's holders, counted on stripes of their own cache line: every
 * launch not scanned enters it, and threads launching at once would
 * otherwise contend for one counter. A thread keeps its stripe, so it
 * leaves where it entered; a move waits for every stripe to empty. */
#define GATE_STRIPES 16
static struct {
    unsigned users;
    char pad[64 - sizeof(unsigned)];
} gate[GATE_STRIPES] __attribute__((aligned(64)));
static unsigned gate_next;
static __thread int gate_stripe = -1;

static unsigned *my_stripe(void)
{
    if (gate_stripe < 0)
        gate_stripe = (int)(__atomic_fetch_add(&gate_next, 1, __ATOMIC_RELAXED) % GATE_STRIPES);
    return &gate[gate_stripe].users;
}

static bool gate_held(void)
{
    for (int i = 0; i < GATE_STRIPES; i++)
        if (__atomic_load_n(&gate[i].users, __ATOMIC_SEQ_CST)) return true;
    return false;
}

void gvm_move_gate_enter(void)
{
    unsigned *users = my_stripe();
    for (;;) {
        __atomic_fetch_add(users, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&moves_active, __ATOMIC_SEQ_CST)) return;
        __atomic_fetch_sub(users, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&moves_active, __ATOMIC_SEQ_CST)) sched_yield();
    }
}

void gvm_move_gate_leave(void) { __atomic_fetch_sub(my_stripe(), 1, __ATOMIC_SEQ_CST); }

void gvm_move_enter(struct gvm_region *r)
{
    gvm_phys_moves(1);
    __atomic_fetch_add(&moves_active, 1, __ATOMIC_SEQ_CST);
    while (gate_held()) sched_yield();
    __atomic_store_n(&r->moving, 1, __ATOMIC_SEQ_CST);
    while (announced(r)) sched_yield();
}

bool gvm_move_try_enter(struct gvm_region *r)
{
    gvm_phys_moves(1);
    __atomic_fetch_add(&moves_active, 1, __ATOMIC_SEQ_CST);
    if (!gate_held()) {
        __atomic_store_n(&r->moving, 1, __ATOMIC_SEQ_CST);
        if (!announced(r)) return true;
        __atomic_store_n(&r->moving, 0, __ATOMIC_SEQ_CST);
    }
    __atomic_fetch_sub(&moves_active, 1, __ATOMIC_SEQ_CST);
    gvm_phys_moves(-1);
    return false;
}

void gvm_move_leave(struct gvm_region *r)
{
    __atomic_store_n(&r->moving, 0, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&moves_active, 1, __ATOMIC_SEQ_CST);
    gvm_phys_moves(-1);
}

/* A move copies and remaps in groups: a run of adjacent pieces at one
 * location, unmapped with one call, replaced by destination pieces cut to
 * suit the move (an unmap may span several mappings, and a handle is
 * mapped whole, so only the group's edges must match). Over NVLink a 64 MiB
 * piece copies in 0.17 ms, about what remapping it costs, so moves between
 * devices take pieces of up to GROUP_DEVICE. Each group costs a fixed
 * ~0.1 ms however large it is: with 256 MiB groups peer moves of 1 and
 * 8 GiB reached 0.84-0.89 of the link, with 1 GiB groups 0.99-1.00, and
 * 2 GiB groups were no better (two H100s, 2026-11-26, alternating runs on
 * one host). Moves to or from host memory
 * keep the block size: remapping host memory is slow, the last group's
 * remap cannot overlap a copy, and a source piece is unmapped whole, so
 * big pieces would make every later host move coarser (H100 and H200
 * measurements, 2026-11-22). */
#define GROUP_DEVICE ((size_t)1 << 30)

struct group {
    int b0, b1;                 /* source blocks [b0, b1) */
    size_t off, len;
    int d0, nd;                 /* destination pieces dst[d0 .. d0+nd) */
    bool cpu;                   /* the CPU had access to the source */
    bool early;                 /* copied from the sources' staging mappings: remapped while it copies */
};

struct plan {
    int loc;                    /* the destination */
    size_t reserved;            /* bytes held for destinations still to create (make_group) */
    int ng, ndst, remapped;
    struct group *g;
    struct gvm_phys **dst;
    size_t *sizes;
    struct gvm_phys **staged;   /* sources this move gave a staging mapping */
    int nstaged;
};

static void plan_free(struct plan *p)
{
    if (p->reserved) gvm_held_release(p->loc, p->reserved);
    p->reserved = 0;
    free(p->g);
    free(p->dst);
    free(p->sizes);
    free(p->staged);
}

/* Sources keep what they had before a move that did not happen. */
static void unstage_sources(struct plan *p)
{
    for (int i = 0; i < p->nstaged; i++) gvm_phys_unstage(p->staged[i]);
    p->nstaged = 0;
}

static int copy_device(int src, int dst);

/* Gives the sources of group k a second (staging) mapping, so that the
 * copy reads through it while the region's own addresses are remapped:
 * the remap, CPU work in the driver (mapping host memory costs about as
 * much as copying it), then overlaps the group's copy instead of following
 * it. Mapping device memory costs tens of microseconds; a host source
 * without a staging mapping (placed on host at allocation) would cost what
 * the overlap saves, so its group keeps the order copy, wait, remap, as
 * long as the copying device is the region's own. Staging mappings are
 * granted to the device whose copy engine uses them. The first group is
 * staged before anything changes (plan_build), each next one while the
 * group before it copies (mover_issue). Staged all at once, an 8 GiB
 * peer move with the default pool spent 5-6 ms granting its sources to
 * the peer before its first copy (0.71 of the link, now 0.86-0.90), and
 * an 8 GiB move to host mapped its 128 device pieces a second time first
 * (two H100s, 2026-11-26). */
static CUresult stage_group(struct gvm_region *r, struct plan *p, int k)
{
    struct group *g = &p->g[k];
    int dev = copy_device(r->blocks[g->b0].phys->loc, p->loc);
    if (dev < 0) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    CUresult rc = CUDA_SUCCESS;
    for (int j = 0; j < g->nd && rc == CUDA_SUCCESS; j++)   /* one still to create: make_group */
        if (p->dst[g->d0 + j]) rc = gvm_phys_stage_for(p->dst[g->d0 + j], dev);
    g->early = true;
    for (int i = g->b0; i < g->b1 && g->early && rc == CUDA_SUCCESS; i++) {
        struct gvm_phys *s = r->blocks[i].phys;
        bool had = s->staging != 0;
        /* Every mapping of r is granted to its own device; others may
         * have been granted since the host memory was mapped. */
        if (!had && s->loc == GVM_LOC_HOST && dev == r->device) {
            g->early = false;
            continue;
        }
        rc = gvm_phys_stage_for(s, dev);
        if (!had && s->staging) p->staged[p->nstaged++] = s;
    }
    return rc;
}

static bool movable(const struct gvm_block *b, int loc) { return b->phys && b->phys->loc != loc; }

/* Cuts len into power-of-two multiples of the granularity of at most cap. */
static int cut(size_t len, size_t cap, size_t *out)
{
    int n = 0;
    while (len) {
        size_t p = gvm_topo.gran;
        while (p * 2 <= len && p * 2 <= cap) p *= 2;
        out[n++] = p;
        len -= p;
    }
    return n;
}

/* Gives idle memory at loc (cached regions, empty chunks, pooled pieces
 * of other sizes) back to the driver for a move's destinations; the bytes
 * freed. The trim must not wait for a chunk a move holds: it may be the
 * region moving, or one the thread this one works for holds (core/slab.c). */
size_t gvm_move_make_room(int loc)
{
    gvm_slab_set_making_room(true);
    size_t freed = gvm_heap_trim(loc);
    gvm_slab_set_making_room(false);
    return freed;
}

/* Whether an alias of r ends at offset `at`. An alias made before r grew
 * shows only r's first pieces, and a remap switches a view only when the
 * whole group lies in it (region.c, gvm_region_respan): a group must not
 * reach across an alias's end, or the alias would keep showing the old
 * memory. The caller holds r->op, which guards the alias list. */
static bool alias_ends_at(const struct gvm_region *r, size_t at)
{
    for (const struct gvm_region *a = r->aliases; a; a = a->aliases)
        if (a->mapped == at) return true;
    return false;
}

/* A move's destinations: the pool's now. What must be created is, for a
 * move to a device in several groups, only held under the device's cap
 * now and created a group ahead of the copies (make_group), while the
 * group before copies: creating device memory costs ~155 us per 64 MiB
 * piece (H100), about 13 % of copying it from host, and a resume, whose
 * memory the pause gave back to the driver, paid all of it before its
 * first copy (warm resume 0.84-0.87 of the link, 2026-11-26). Pinned host
 * memory is created slower than it is copied: all of it now, in parallel. */
static CUresult take_destinations(struct plan *p, int loc)
{
    if (loc >= 0 && p->ng > 1) {
        size_t missing = gvm_phys_take_pooled(loc, p->sizes, p->ndst, true, p->dst);
        if (!missing || gvm_held_reserve(loc, missing)) {
            p->reserved = missing;
            return CUDA_SUCCESS;
        }
    }
    return gvm_phys_get_many(loc, p->sizes, p->ndst, true, p->dst);
}

static CUresult plan_build(struct gvm_region *r, int loc, struct plan *p)
{
    bool device_to_device = loc >= 0;
    for (int i = 0; i < r->nblocks; i++)
        if (movable(&r->blocks[i], loc) && r->blocks[i].phys->loc < 0) device_to_device = false;
    size_t cap = device_to_device ? GROUP_DEVICE : gvm_settings.block_size;
    if (cap < gvm_topo.gran) cap = gvm_topo.gran;
    size_t total = 0;
    for (int i = 0; i < r->nblocks; i++)
        if (movable(&r->blocks[i], loc)) total += r->blocks[i].size;
    size_t maxdst = total / gvm_topo.gran + 1;
    p->g = calloc((size_t)r->nblocks + 1, sizeof *p->g);
    p->dst = calloc(maxdst, sizeof *p->dst);
    p->sizes = calloc(maxdst, sizeof *p->sizes);
    if (!p->g || !p->dst || !p->sizes) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < r->nblocks;) {
        struct gvm_block *b = &r->blocks[i];
        if (!movable(b, loc)) { i++; continue; }
        struct group *g = &p->g[p->ng++];
        *g = (struct group){.b0 = i, .off = b->off, .d0 = p->ndst};
        int from = b->phys->loc;
        do {
            g->len += r->blocks[i].size;
            g->cpu |= r->blocks[i].cpu;
            i++;
        } while (i < r->nblocks && movable(&r->blocks[i], loc) && r->blocks[i].phys->loc == from &&
                 !alias_ends_at(r, g->off + g->len) &&
                 r->blocks[i].off == g->off + g->len && g->len + r->blocks[i].size <= cap);
        g->b1 = i;
        g->nd = cut(g->len, cap, p->sizes + p->ndst);
        p->ndst += g->nd;
    }
    if (!p->ng) return CUDA_SUCCESS;
    p->loc = loc;
    /* The next move to host takes ready memory. */
    if (loc == GVM_LOC_HOST) gvm_phys_prefill_hint(loc);
    /* All destinations before touching anything (taken or held under
     * loc's cap): failing here is free. Idle memory at loc (cached
     * regions, empty chunks) may be what stands in the way of its limit:
     * give it back and try once more. */
    CUresult rc = take_destinations(p, loc);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_move_make_room(loc)) rc = take_destinations(p, loc);
    if (rc != CUDA_SUCCESS) return rc;
    p->staged = calloc((size_t)r->nblocks, sizeof *p->staged);
    rc = p->staged ? stage_group(r, p, 0) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        unstage_sources(p);
        for (int j = 0; j < p->ndst; j++) gvm_phys_put(p->dst[j]);
    }
    return rc;
}

/* The device whose copy engine moves data from src to dst. */
static int copy_device(int src, int dst)
{
    if (dst >= 0 && gvm_topo_reaches(dst, src)) return dst;
    if (src >= 0 && gvm_topo_reaches(src, dst)) return src;
    return -1;
}

/* Copies group g into its destinations' staging mappings: from the
 * sources' staging mappings when the group is remapped early (source and
 * destination pieces may be cut differently: one copy per overlap), else
 * from the region's own addresses. */
static CUresult issue_copies(struct gvm_region *r, const struct plan *p, const struct group *g, CUstream s)
{
    CUresult rc = CUDA_SUCCESS;
    if (!g->early) {
        size_t o = g->off;
        for (int j = 0; j < g->nd && rc == CUDA_SUCCESS; j++) {
            struct gvm_phys *d = p->dst[g->d0 + j];
            rc = DRV(cuMemcpyDtoDAsync_v2, d->staging, (CUdeviceptr)(r->base + o), d->size, s);
            o += d->size;
        }
        return rc;
    }
    int i = g->b0, j = g->d0;
    size_t io = 0, jo = 0, left = g->len;
    while (left && rc == CUDA_SUCCESS) {
        size_t ssz = r->blocks[i].size, dsz = p->dst[j]->size;
        size_t n = ssz - io < dsz - jo ? ssz - io : dsz - jo;
        rc = DRV(cuMemcpyDtoDAsync_v2, p->dst[j]->staging + jo, r->blocks[i].phys->staging + io, n, s);
        left -= n;
        if ((io += n) == ssz) i++, io = 0;
        if ((jo += n) == dsz) j++, jo = 0;
    }
    return rc;
}

/* Creates group k's destinations that take_destinations left to create,
 * on the bytes it held (the driver may still refuse: another process's
 * memory is under no cap of ours). One that fails stays unmade: the move
 * rolls back, and plan_free gives the rest of the hold back. */
static CUresult make_group(struct gvm_region *r, struct plan *p, int k)
{
    struct group *g = &p->g[k];
    int dev = copy_device(r->blocks[g->b0].phys->loc, p->loc);
    for (int j = g->d0; j < g->d0 + g->nd; j++) {
        if (p->dst[j]) continue;
        CUresult rc = gvm_phys_create_reserved(p->loc, p->sizes[j], &p->dst[j]);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && gvm_move_make_room(p->loc))
            rc = gvm_phys_create_reserved(p->loc, p->sizes[j], &p->dst[j]);
        if (rc != CUDA_SUCCESS) {
            p->dst[j] = NULL;
            return rc;
        }
        p->reserved -= p->sizes[j];
        if ((rc = gvm_phys_stage_for(p->dst[j], dev)) != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
}

static CUresult copy_group(struct gvm_region *r, struct plan *p, int k, CUevent *ev)
{
    struct group *g = &p->g[k];
    int to = p->loc;
    int dev = copy_device(r->blocks[g->b0].phys->loc, to);
    if (dev < 0) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    int dir = to == dev ? GVM_INTO : GVM_OUT_OF;
    CUstream s;
    CUresult rc = gvm_topo_push(dev);
    if (rc != CUDA_SUCCESS) return rc;
    if ((rc = gvm_topo_stream(dev, dir, &s)) == CUDA_SUCCESS) rc = issue_copies(r, p, g, s);
    if (rc == CUDA_SUCCESS) {
        *ev = gvm_topo.dev[dev].events[dir][k & 1];
        rc = DRV(cuEventRecord, *ev, s);
    }
    gvm_topo_pop();
    return rc;
}

/* The memory behind group g now (its source blocks' pieces). */
static int sources(struct gvm_region *r, const struct group *g, struct gvm_phys **out)
{
    for (int i = g->b0; i < g->b1; i++) out[i - g->b0] = r->blocks[i].phys;
    return g->b1 - g->b0;
}

static CUresult remap_group(struct gvm_region *r, struct plan *p, int k)
{
    struct group *g = &p->g[k];
    struct gvm_phys *from[g->b1 - g->b0];
    int nfrom = sources(r, g, from);
    return gvm_region_respan(r, g->off, g->len, from, nfrom, g->cpu, p->dst + g->d0, g->nd);
}

static double now_ms(void);

/* Where a move's time goes (the debug line of mover_finish), ms. */
struct move_clock {
    double begin, copy, wait, remap;
};

static CUresult remap_timed(struct gvm_region *r, struct plan *p, int k, struct move_clock *c)
{
    double t0 = now_ms();
    CUresult rc = remap_group(r, p, k);
    c->remap += now_ms() - t0;
    if (rc == CUDA_SUCCESS) p->remapped = k + 1;
    return rc;
}

/* Waits for group k's copy (ev); a group not remapped early is remapped
 * now. */
static CUresult finish_group(struct gvm_region *r, struct plan *p, int k, CUevent ev, struct move_clock *c)
{
    double t0 = now_ms();
    CUresult rc = DRV(cuEventSynchronize, ev);
    c->wait += now_ms() - t0;
    if (rc != CUDA_SUCCESS || p->g[k].early) return rc;
    return remap_timed(r, p, k, c);
}

/* One region's move as steps, so that moves in opposite directions can
 * run at once (gvm_move_lanes). A step has two halves: issue copies group
 * k; settle finishes group k-1, whose copy was issued one step earlier,
 * and remaps group k while its copy runs when it is early. Groups are
 * remapped in order. */
struct mover {
    struct gvm_region *r;
    int loc;
    const char *why;
    struct plan p;
    int k;                  /* next group to copy; p.ng + 1 when finished */
    CUevent prev, cur;
    CUresult rc;
    uint64_t trace_t0;
    struct move_clock clock;
};

static bool mover_done(const struct mover *m) { return m->k > m->p.ng; }

static void mover_issue(struct mover *m)
{
    m->cur = NULL;
    if (m->k == m->p.ng) return;
    double t0 = now_ms();
    m->rc = make_group(m->r, &m->p, m->k);
    if (m->rc == CUDA_SUCCESS) m->rc = copy_group(m->r, &m->p, m->k, &m->cur);
    /* The next group's memory is made and staged while this one copies. */
    if (m->rc == CUDA_SUCCESS && m->k + 1 < m->p.ng && (m->rc = make_group(m->r, &m->p, m->k + 1)) == CUDA_SUCCESS)
        m->rc = stage_group(m->r, &m->p, m->k + 1);
    m->clock.copy += now_ms() - t0;
}

static void mover_settle(struct mover *m)
{
    int k = m->k++;
    if (k == m->p.ng) {
        if (k > 0) m->rc = finish_group(m->r, &m->p, k - 1, m->prev, &m->clock);
        return;
    }
    if (m->rc == CUDA_SUCCESS && k > 0) m->rc = finish_group(m->r, &m->p, k - 1, m->prev, &m->clock);
    if (m->rc == CUDA_SUCCESS && m->p.g[k].early) m->rc = remap_timed(m->r, &m->p, k, &m->clock);
    if (m->rc != CUDA_SUCCESS) {
        /* Copies still writing destinations that go back to the pool (the
         * rollback's own wait may be refused during a capture). */
        if (k > 0) DRV(cuEventSynchronize, m->prev);
        if (m->cur) DRV(cuEventSynchronize, m->cur);
        m->k = m->p.ng + 1;
        return;
    }
    m->prev = m->cur;
}

static void mover_step(struct mover *m)
{
    mover_issue(m);
    mover_settle(m);
}

static CUresult pipeline(struct mover *m)
{
    while (!mover_done(m)) mover_step(m);
    return m->rc;
}

/* Puts remapped groups back on their old memory, which still holds the
 * data: nothing wrote to the region while it was moving. The block list
 * was not changed yet, so it names the old memory. */
static void rollback(struct gvm_region *r, struct plan *p)
{
    /* A copy may still be writing a destination that goes back to the pool. */
    gvm_topo_quiesce();
    for (int k = p->remapped - 1; k >= 0; k--) {
        struct group *g = &p->g[k];
        struct gvm_phys *old[g->b1 - g->b0];
        int n = sources(r, g, old);
        bool cpu = gvm_settings.host_access == GVM_HOST_ACCESS_EAGER;
        if (gvm_region_respan(r, g->off, g->len, p->dst + g->d0, g->nd, cpu, old, n) != CUDA_SUCCESS) {
            /* The data is safe in the new pieces: keep them mapped there. */
            if (!gvm_driver_gone(CUDA_SUCCESS))
                gvm_error("rollback of %#lx+%zu failed: it stays at location %d", (unsigned long)r->base, g->off,
                          p->loc);
            if (gvm_region_splice(r, g->b0, g->b1, p->dst + g->d0, g->nd) == 0) {
                for (int j = 0; j < n; j++) gvm_phys_put(old[j]);
                for (int j = 0; j < g->nd; j++) p->dst[g->d0 + j] = NULL;
            }
        }
    }
    for (int j = 0; j < p->ndst; j++)
        if (p->dst[j]) gvm_phys_put(p->dst[j]);
    unstage_sources(p);
}

/* Success: the block list takes the new pieces, the old go to the pools. */
static void commit(struct gvm_region *r, struct plan *p)
{
    for (int k = p->ng - 1; k >= 0; k--) {   /* from the end: earlier indices stay valid */
        struct group *g = &p->g[k];
        struct gvm_phys *old[g->b1 - g->b0];
        int n = sources(r, g, old);
        if (gvm_region_splice(r, g->b0, g->b1, p->dst + g->d0, g->nd)) {
            gvm_error("out of memory for the block list of %#lx", (unsigned long)r->base);
            abort();
        }
        for (int j = 0; j < n; j++) gvm_phys_put(old[j]);
    }
}

void gvm_move_count(size_t bytes, int from, int to)
{
    gvm_stat_add(bytes_migrated, bytes);
    if (to == GVM_LOC_HOST)
        gvm_stat_inc(migrations_d2h);
    else if (from == GVM_LOC_HOST)
        gvm_stat_inc(migrations_h2d);
    else
        gvm_stat_inc(migrations_d2d);
}

static void count_move(struct gvm_region *r, struct plan *p, int loc)
{
    size_t bytes = 0;
    for (int k = 0; k < p->ng; k++) bytes += p->g[k].len;
    gvm_move_count(bytes, r->blocks[p->g[0].b0].phys->loc, loc);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void trace_move(struct gvm_region *r, const struct plan *p, int loc, const char *why, uint64_t t0, bool ok)
{
    if (!__atomic_load_n(&gvm_trace_enabled, __ATOMIC_RELAXED)) return;
    size_t bytes = 0;
    for (int k = 0; k < p->ng; k++) bytes += p->g[k].len;
    gvm_trace_move(why, r->base, bytes, r->blocks[p->g[0].b0].phys->loc, loc, t0, gvm_trace_now(), ok);
}

/* Destinations first: failing here changes nothing. Nothing to move is
 * success with no groups. */
static CUresult mover_begin(struct mover *m, struct gvm_region *r, int loc, const char *why)
{
    *m = (struct mover){.r = r, .loc = loc, .why = why, .trace_t0 = gvm_trace_now(), .clock.begin = now_ms()};
    m->rc = plan_build(r, loc, &m->p);
    if (m->rc != CUDA_SUCCESS) {
        plan_free(&m->p);
        m->p = (struct plan){0};
    }
    if (!m->p.ng) m->k = 1;
    return m->rc;
}

static CUresult mover_finish(struct mover *m)
{
    struct gvm_region *r = m->r;
    if (!m->p.ng) {
        plan_free(&m->p);
        return m->rc;
    }
    trace_move(r, &m->p, m->loc, m->why, m->trace_t0, m->rc == CUDA_SUCCESS);
    if (m->rc != CUDA_SUCCESS) {
        rollback(r, &m->p);
        r->last_error = m->rc;
        gvm_stat_inc(migrations_failed);
        if (!gvm_driver_gone(m->rc))   /* a move under way at exit: nothing to say */
            gvm_warn("moving %#lx to location %d failed (driver error %d); it is unchanged",
                     (unsigned long)r->base, m->loc, m->rc);
    } else {
        count_move(r, &m->p, m->loc);
        commit(r, &m->p);
        GVM_STORE(r->buffer_id, gvm_next_buffer_id());
        if (r->kind == GVM_REGION_CHUNK) gvm_slab_renew_ids(r);
        const struct move_clock *c = &m->clock;
        gvm_debug("moved %#lx (%d groups, %d pieces) to location %d: %.2f ms, copies issued %.2f, waited for "
                  "copies %.2f, remapped %.2f", (unsigned long)r->base, m->p.ng, m->p.ndst, m->loc,
                  now_ms() - c->begin, c->copy, c->wait, c->remap);
    }
    plan_free(&m->p);
    return m->rc;
}

CUresult gvm_move_blocks(struct gvm_region *r, int loc, bool quiesce, const char *why)
{
    /* A move waits for the devices, which no open capture allows: it waits
     * for the capture to end, the caller decides how (core/capture.h). */
    if (gvm_capture_open(-1)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct mover m;
    double t0 = now_ms();
    CUstreamCaptureMode mode = gvm_capture_relax();
    if (mover_begin(&m, r, loc, why) != CUDA_SUCCESS || !m.p.ng) {
        gvm_capture_restore(mode);
        return mover_finish(&m);
    }
    double t1 = now_ms();
    m.rc = quiesce ? gvm_topo_quiesce() : CUDA_SUCCESS;
    double t2 = now_ms();
    if (m.rc == CUDA_SUCCESS) pipeline(&m);
    gvm_capture_restore(mode);
    gvm_debug("move of %#lx to %d: destinations %.2f ms, quiesce %.2f ms, copy+remap %.2f ms",
              (unsigned long)r->base, loc, t1 - t0, t2 - t1, now_ms() - t2);
    return mover_finish(&m);
}

/* The next move of a lane that has something to do, begun; NULL when the
 * lane is through. */
static struct mover *lane_next(struct mover *m, struct gvm_move_req *req, int n, int *i)
{
    while (*i < n) {
        struct gvm_move_req *q = &req[(*i)++];
        if (mover_begin(m, q->r, q->loc, q->why) == CUDA_SUCCESS && m->p.ng) {
            m->rc = CUDA_SUCCESS;
            return m;
        }
        q->rc = mover_finish(m);
    }
    return NULL;
}

/* Settles the lane's current step; a finished move is committed (or
 * rolled back) and the lane's next one begun. */
static struct mover *lane_settle(struct mover *m, struct gvm_move_req *req, int n, int *i)
{
    mover_settle(m);
    if (!mover_done(m)) return m;
    req[*i - 1].rc = mover_finish(m);
    return lane_next(m, req, n, i);
}

/* Both lanes on this thread, a step of each at a time: both copies are
 * issued before either remap, so both copy engines run while the remaps
 * (CPU work in the driver) go one after the other. On two threads the
 * remaps took longer than in turn: a 128 MiB host map and a device map
 * took 2.1 ms side by side against 1.1 + 0.06 ms alone, and a host map
 * beside a running copy 1.8 ms (scripts/probe/remapcost.c --lanes, two
 * H200s, 2026-11-23). */
void gvm_move_lanes(struct gvm_move_req *a, int na, struct gvm_move_req *b, int nb)
{
    for (int i = 0; i < na; i++) a[i].rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    for (int i = 0; i < nb; i++) b[i].rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (gvm_capture_open(-1)) return;
    CUstreamCaptureMode mode = gvm_capture_relax();
    struct mover ma, mb;
    int ia = 0, ib = 0;
    struct mover *pa = lane_next(&ma, a, na, &ia), *pb = lane_next(&mb, b, nb, &ib);
    while (pa || pb) {
        if (pa) mover_issue(pa);
        if (pb) mover_issue(pb);
        if (pa) pa = lane_settle(pa, a, na, &ia);
        if (pb) pb = lane_settle(pb, b, nb, &ib);
    }
    gvm_capture_restore(mode);
}
