/* gvm_pause / gvm_resume: release a tag's device memory, or the whole
 * process's, with every pointer kept reserved (parity with
 * torch_memory_saver and vLLM sleep mode, for programs that were not
 * written against them). Keeping a copy moves the memory to host, where it
 * stays readable; discarding releases it. Each call answers in bytes
 * (gvm_pause_result). The mechanics are core's (core/relocate.h); this
 * file chooses the regions and counts what moved. */
#include "gvmshim.h"

#include "core/capture.h"
#include "core/core.h"
#include "core/export.h"
#include "core/heap.h"
#include "core/held.h"
#include "core/live.h"
#include "core/phys.h"
#include "core/phys_batch.h"
#include "core/relocate.h"
#include "core/settings.h"
#include "core/slab.h"
#include "core/topo.h"
#include "core/trace.h"
#include "policy/policy.h"
#include "policy/spill.h"
#include "policy/tags.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum what { PAUSE, RESUME, MIGRATE };

struct list {
    int tag;          /* -1: every allocation */
    bool paused;      /* collect paused (resume) or live (pause, migrate) ones */
    bool skip_host;   /* leave out regions that belong on host (pause) */
    int other;        /* regions named but in the other state */
    struct gvm_region **r;
    size_t n, cap;
};

static void pick(struct gvm_region *r, void *arg)
{
    struct list *l = arg;
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return;
    if (l->tag >= 0 && GVM_LOAD(r->tag) != l->tag) return;
    /* Placed in host memory (a rule, gvm_migrate): it holds no device
     * memory to release, and a resume would send it to its device. */
    if (l->skip_host && GVM_LOAD(r->home) == GVM_LOC_HOST) return;
    if (((GVM_LOAD(r->flags) & GVM_RF_PAUSED) != 0) != l->paused) {
        l->other++;
        return;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        struct gvm_region **nr = realloc(l->r, cap * sizeof *nr);
        if (!nr) return;
        l->r = nr;
        l->cap = cap;
    }
    l->r[l->n++] = r;
}

static void say(gvm_pause_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(gvm_pause_result *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    va_end(ap);
}

static int ndev(void) { return gvm_topo.ndev < GVM_REPORT_DEVICES ? gvm_topo.ndev : GVM_REPORT_DEVICES; }

/* Creating pinned host memory costs ~250 ms/GiB: memory a resume gives
 * back stays pooled for the next pause rather than being released and
 * created again (pause_pool). */
static void keep_room(const struct list *l)
{
    size_t bytes = 0;
    for (size_t i = 0; i < l->n; i++) bytes += GVM_LOAD(l->r[i]->mapped);
    gvm_phys_raise_limit(GVM_LOC_HOST, bytes);
}

/* The host pieces a move of r to host takes, as core/move.c cuts them:
 * runs of adjacent device pieces of one device up to the block size, each
 * cut in power-of-two multiples of the granularity. Appended to *sizes
 * (grown as needed); false when memory for the list ran out. */
static bool host_pieces(struct gvm_region *r, size_t **sizes, size_t *n, size_t *cap)
{
    size_t gran = gvm_topo.gran, most = gvm_settings.block_size < gran ? gran : gvm_settings.block_size;
    bool ok = true;
    pthread_mutex_lock(&r->op);
    bool skip = !gvm_region_live(r) || (r->flags & GVM_RF_PAUSED) || r->shelf || r->aliases;
    for (int i = 0; !skip && ok && i < r->nblocks;) {
        const struct gvm_block *b = &r->blocks[i];
        if (!b->phys || b->phys->loc < 0) {
            i++;
            continue;
        }
        int from = b->phys->loc;
        size_t off = b->off, len = 0;
        do len += r->blocks[i++].size;
        while (i < r->nblocks && r->blocks[i].phys && r->blocks[i].phys->loc == from &&
               r->blocks[i].off == off + len && len + r->blocks[i].size <= most);
        while (len && ok) {
            size_t p = gran;
            while (p * 2 <= len && p * 2 <= most) p *= 2;
            if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 64;
                size_t *ns = realloc(*sizes, c * sizeof *ns);
                if (!(ok = ns != NULL)) break;
                *sizes = ns;
                *cap = c;
            }
            (*sizes)[(*n)++] = p;
            len -= p;
        }
    }
    pthread_mutex_unlock(&r->op);
    return ok;
}

/* A first pause finds no pinned host memory ready, and each move creates
 * its own (~250 ms/GiB, in parallel over that move's pieces only: a
 * process of many small allocations got almost none of it). The whole
 * set is created at once, in parallel, into the host pool (keep_room made
 * room for it), where the moves find it. Pooled pieces count. */
static CUresult create_host_memory(const struct list *l, gvm_pause_result *out)
{
    size_t *sizes = NULL, n = 0, cap = 0, total = 0;
    bool ok = true;
    for (size_t i = 0; i < l->n && ok; i++) ok = host_pieces(l->r[i], &sizes, &n, &cap);
    for (size_t i = 0; ok && i < n; i++) total += sizes[i];
    struct gvm_phys **made = ok && n && n <= INT32_MAX ? calloc(n, sizeof *made) : NULL;
    CUresult rc = made ? gvm_phys_get_many(GVM_LOC_HOST, sizes, (int)n, true, made) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        for (size_t i = 0; made && i < n; i++) gvm_phys_put(made[i]);
    } else {
        /* The moves would fail the same way: nothing moves, nothing
         * changed (get_many kept nothing). */
        out->stayed = total;
        say(out, "creating %zu bytes of host memory for the pause failed (driver error %d); nothing moved", total,
            (int)rc);
    }
    free(made);
    free(sizes);
    return rc;
}

/* A resume whose device is at its limit or full, spill on: as for an
 * allocation, what the device holds leaves for it, least recently used first (the
 * memory resumed before it too: the tag comes back with its overflow
 * spilled, as it was before the pause, where failing would leave it half
 * paused). The promoter brings what left back when room returns. */
static CUresult make_room_for(struct gvm_region *r)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    int dev = gvm_relocate_resume_device(r);
    if (!cfg || cfg->spill.n == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    /* At its limit: down to the limit less the region. Without one, the
     * GPU itself is full: as much of gvmshim's memory as the region needs
     * leaves (other processes' memory gvmshim cannot move). */
    size_t need = gvm_policy_charge(GVM_LOAD(r->size)), moved;
    size_t ceiling = gvm_policy_limited(dev) ? gvm_policy_limit(dev) : gvm_policy_usage(dev);
    if (need > ceiling) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Out of memory when nothing more can leave; a failed move's own error. */
    return gvm_spill_down_to(dev, ceiling - need, &moved);
}

/* r's bytes on each device, read under its lock. */
static void device_bytes(const struct gvm_region *r, size_t *at)
{
    for (int d = 0; d < ndev(); d++) at[d] = gvm_region_bytes_at(r, d);
}

/* One region moved as `how` says, what left or reached each device added
 * to out. Sets *shared when its state refused the move because other
 * processes map it. */
static CUresult move_one(struct gvm_region *r, int loc, unsigned how, gvm_pause_result *out, bool *shared)
{
    size_t before[GVM_REPORT_DEVICES], after[GVM_REPORT_DEVICES];
    pthread_mutex_lock(&r->op);
    device_bytes(r, before);
    CUresult rc = gvm_relocate_locked(r, loc, how);
    device_bytes(r, after);
    *shared = rc == CUDA_ERROR_NOT_PERMITTED && (r->flags & GVM_RF_SHARED);
    pthread_mutex_unlock(&r->op);
    gvm_slab_reap_skipped();
    /* Counted where the bytes arrive for a resume or a move to a device,
     * else where they leave. */
    bool in = (how & GVM_RELOC_RESUME) || ((how & GVM_RELOC_EXPLICIT) && loc >= 0);
    for (int d = 0; d < ndev(); d++) {
        size_t moved = in ? (after[d] > before[d] ? after[d] - before[d] : 0)
                          : (before[d] > after[d] ? before[d] - after[d] : 0);
        out->device_bytes[d] += moved;
        out->bytes += moved;
        /* What a refusal or a failure left on the devices stays there. */
        if (!(how & GVM_RELOC_RESUME) && rc != CUDA_SUCCESS) out->stayed += after[d];
        if (*shared) out->stayed_shared += after[d];
    }
    return rc;
}

/* A pause to host that keeps its copy readable, or a resume: the regions
 * gvm_relocate_batch could take move as one batch (one wait for the
 * devices); the rest stay in l for move_all, in order, with those a
 * resume found no room for (room is made for each there). The first
 * failure, CUDA_SUCCESS if none. */
static CUresult move_batch(struct list *l, unsigned how, gvm_pause_result *out)
{
    int n = l->n < INT32_MAX ? (int)l->n : INT32_MAX, nd = ndev();
    CUresult *rcs = calloc((size_t)n + 1, sizeof *rcs), first = CUDA_SUCCESS;
    size_t *before = calloc((size_t)n * (size_t)nd + 1, sizeof *before);
    size_t *after = calloc((size_t)n * (size_t)nd + 1, sizeof *after);
    if (!rcs || !before || !after || !n) {
        free(rcs), free(before), free(after);
        return CUDA_SUCCESS;   /* one at a time, then */
    }
    gvm_relocate_batch(l->r, n, how, rcs, before, after, nd);
    bool in = how & GVM_RELOC_RESUME;
    size_t keep = 0;
    for (int i = 0; i < n; i++) {
        CUresult rc = rcs[i];
        if (rc == GVM_RELOCATE_SKIPPED || (in && rc == CUDA_ERROR_OUT_OF_MEMORY)) {
            l->r[keep++] = l->r[i];
            continue;
        }
        const size_t *b = before + (size_t)i * (size_t)nd, *a = after + (size_t)i * (size_t)nd;
        for (int d = 0; d < nd; d++) {
            size_t moved = in ? (a[d] > b[d] ? a[d] - b[d] : 0) : (b[d] > a[d] ? b[d] - a[d] : 0);
            out->device_bytes[d] += moved;
            out->bytes += moved;
            if (!in && rc != CUDA_SUCCESS) out->stayed += a[d];
        }
        if (rc == CUDA_SUCCESS) {
            out->done++;
        } else if (!gvm_relocate_refused(rc) && first == CUDA_SUCCESS) {
            first = rc;
            say(out, "moving the allocation at %#lx failed (driver error %d)", (unsigned long)GVM_LOAD(l->r[i]->base),
                (int)rc);
        }
    }
    for (size_t i = (size_t)n; i < l->n; i++) l->r[keep++] = l->r[i];
    l->n = keep;
    free(rcs), free(before), free(after);
    return first;
}

/* Runs the moves of l, each as its own relocation; stops at the first
 * failure (every region is then as it was, or done: core/relocate.h). */
static CUresult move_all(struct list *l, int loc, unsigned how, gvm_pause_result *out, bool *shared)
{
    CUresult rc = CUDA_SUCCESS;
    bool to_host = loc == GVM_LOC_HOST && (how == GVM_RELOC_PAUSE || (how & GVM_RELOC_MAP_LATER));
    if (to_host || how == GVM_RELOC_RESUME) rc = move_batch(l, how, out);
    size_t i = 0;
    for (; i < l->n && rc == CUDA_SUCCESS; i++) {
        bool sh = false;
        rc = move_one(l->r[i], loc, how, out, &sh);
        if ((how & GVM_RELOC_RESUME) && rc == CUDA_ERROR_OUT_OF_MEMORY) {
            rc = make_room_for(l->r[i]);
            if (rc == CUDA_SUCCESS) rc = move_one(l->r[i], loc, how, out, &sh);
        }
        *shared |= sh;
        if (rc == CUDA_SUCCESS) out->done++;
        /* Refused: freed, paused or resumed meanwhile, or pinned (e.g.
         * mapped by another process, core/share.h), which stays in place. */
        if (gvm_relocate_refused(rc)) rc = CUDA_SUCCESS;
        else if (rc != CUDA_SUCCESS) say(out, "moving the allocation at %#lx failed (driver error %d)",
                                         (unsigned long)GVM_LOAD(l->r[i]->base), (int)rc);
    }
    /* Those never tried stay where they are. */
    for (; i < l->n && !(how & GVM_RELOC_RESUME); i++) {
        struct gvm_region *r = l->r[i];
        pthread_mutex_lock(&r->op);
        if (gvm_region_live(r))
            for (int d = 0; d < ndev(); d++) out->stayed += gvm_region_bytes_at(r, d);
        pthread_mutex_unlock(&r->op);
    }
    return rc;
}

/* The first device with a stream capture open, -1 for one of unknown
 * device, -2 when none is open. Moves wait for the devices, which no open
 * capture allows (core/capture.h). */
static int capturing_device(void)
{
    if (!gvm_capture_open(-1)) return -2;
    for (int d = 0; d < gvm_topo.ndev; d++)
        if (gvm_capture_open(d)) return d;
    return -1;
}

static gvm_status refuse_capture(gvm_pause_result *out)
{
    int d = capturing_device();
    if (d == -2) return GVM_OK;
    if (d >= 0) say(out, "a stream capture is open on device %d", d);
    else say(out, "a stream capture is open");
    return GVM_ERR_BUSY;
}

/* The regions the request names: every allocation (tag NULL) or one
 * tag's. False, with the reason said, when the tag names nothing. */
static bool collect(const char *tag, struct list *l, gvm_pause_result *out)
{
    if (tag) {
        l->tag = gvm_tag_id(tag, false);
        if (l->tag <= 0) {
            say(out, "no allocation is tagged %s", tag);
            return false;
        }
    }
    gvm_live_for_each(pick, l);
    out->matched = (int)l->n + l->other;
    out->already = l->other;
    if (out->matched == 0) {
        if (tag) say(out, "no allocation is tagged %s", tag);
        else say(out, "the process has no allocation on a device");
        return false;
    }
    return true;
}

/* What the devices hold, gvmshim's memory at the driver, per device. */
static void held_now(size_t *at)
{
    for (int d = 0; d < ndev(); d++) at[d] = gvm_held_bytes(d);
}

/* The pause's end: every device's idle memory (cached allocations, empty
 * chunks, pooled pieces, what the moves freed) goes back to the driver,
 * and out says how much gvmshim holds less than before. */
static void release_idle(const size_t *held0, gvm_pause_result *out)
{
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim(d);
    size_t held1[GVM_REPORT_DEVICES];
    held_now(held1);
    for (int d = 0; d < ndev(); d++)
        if (held0[d] > held1[d]) out->released += held0[d] - held1[d];
}

static gvm_status check_flags(const char *tag, int flags, gvm_pause_result *out)
{
    const int both = GVM_PAUSE_DISCARD | GVM_PAUSE_UNMAPPED;
    if (flags & ~both) {
        say(out, "unknown pause flags %#x", (unsigned)flags);
        return GVM_ERR_INVALID;
    }
    if ((flags & both) == both) {
        say(out, "discarding and keeping an unmapped copy exclude each other");
        return GVM_ERR_INVALID;
    }
    /* The program's own memory, untagged, would come back zeroed under a
     * program that never asked for it. */
    if ((flags & GVM_PAUSE_DISCARD) && !tag) {
        say(out, "discarding needs a tag: the whole process's memory would come back zeroed (pause without "
                 "discard keeps a copy)");
        return GVM_ERR_INVALID;
    }
    return GVM_OK;
}

/* Why nothing was done for a request whose regions are all in the asked
 * state already. */
static void say_already(const char *tag, enum what w, gvm_pause_result *out)
{
    if (w == RESUME && tag) say(out, "no allocation tagged %s is paused", tag);
    else if (w == RESUME) say(out, "no allocation is paused");
    else if (tag) say(out, "every allocation tagged %s is paused already", tag);
    else say(out, "every allocation is paused already");
}

/* The status of a run whose moves ended with rc. */
static gvm_status status_of(CUresult rc, bool shared, gvm_pause_result *out)
{
    /* A capture begun while the moves ran: those left stay as they are. */
    if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
        int d = capturing_device();
        if (d >= 0) say(out, "a stream capture began on device %d: %zu bytes stay", d, out->stayed);
        else say(out, "a stream capture began: %zu bytes stay", out->stayed);
        return GVM_ERR_BUSY;
    }
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        if (!out->reason[0]) say(out, "the device has no room (the rest stays paused, with its contents)");
        return GVM_ERR_NO_MEMORY;
    }
    if (rc != CUDA_SUCCESS) return GVM_ERR_DRIVER;
    if (shared) {
        say(out, "%zu bytes are shared with other processes and stay", out->stayed_shared);
        return GVM_ERR_BUSY;
    }
    return GVM_OK;
}

static gvm_status pause_resume(const char *tag, enum what w, int flags, gvm_pause_result *out)
{
    if (!gvm_core_active()) {
        say(out, "gvmshim is not active in this process");
        return GVM_ERR_INACTIVE;
    }
    gvm_status st = w == PAUSE ? check_flags(tag, flags, out) : GVM_OK;
    if (st == GVM_OK) st = refuse_capture(out);
    if (st != GVM_OK) return st;
    out->to = w == RESUME ? GVM_MIXED : (flags & GVM_PAUSE_DISCARD) ? GVM_NOWHERE : GVM_HOST;
    size_t held0[GVM_REPORT_DEVICES];
    held_now(held0);
    /* Idle memory first: an empty chunk or a freed allocation kept for
     * reuse is given back rather than copied (the whole process's). */
    if (w == PAUSE && !tag)
        for (int d = 0; d < gvm_topo.ndev; d++) gvm_heap_trim(d);
    struct list l = {.tag = -1, .paused = w == RESUME, .skip_host = w == PAUSE};
    CUresult rc = CUDA_SUCCESS;
    bool shared = false;
    if (collect(tag, &l, out)) {
        if (!l.n) say_already(tag, w, out);
        unsigned how = w == RESUME ? GVM_RELOC_RESUME : GVM_RELOC_PAUSE;
        int loc = w == PAUSE && !(flags & GVM_PAUSE_DISCARD) ? GVM_LOC_HOST : GVM_LOC_NONE;
        const struct gvm_config *cfg = gvm_policy_cfg();
        if (flags & GVM_PAUSE_UNMAPPED) how |= GVM_RELOC_SHELVE;
        /* A copy kept readable is mapped only once the program reaches it
         * (core/relocate.h, GVM_RELOC_MAP_LATER) where every call that may
         * reach it comes through the hooks (policy/spill.h). */
        else if (loc == GVM_LOC_HOST && gvm_spill_maps_later()) how |= GVM_RELOC_SHELVE | GVM_RELOC_MAP_LATER;
        if (loc == GVM_LOC_HOST && cfg && cfg->pause_pool) {
            keep_room(&l);
            if (!(how & GVM_RELOC_SHELVE)) rc = create_host_memory(&l, out);
        }
        if (rc == CUDA_SUCCESS) rc = move_all(&l, loc, how, out, &shared);
    }
    free(l.r);
    /* What the moves freed went to the pools: give it back to the driver,
     * with every other idle byte (a repeated pause too). */
    if (w == PAUSE) release_idle(held0, out);
    return status_of(rc, shared, out);
}

/* Times a run and works out its rate. */
static gvm_status timed(const char *tag, enum what w, int flags, gvm_pause_result *out)
{
    memset(out, 0, sizeof *out);
    uint64_t t0 = gvm_trace_now();
    gvm_status st = pause_resume(tag, w, flags, out);
    out->seconds = (double)(gvm_trace_now() - t0) / 1e9;
    if (out->seconds > 0) out->gbps = (double)out->bytes / out->seconds / 1e9;
    return st;
}

GVM_EXPORT gvm_status gvm_pause_report(const char *tag, int flags, gvm_pause_result *out)
{
    gvm_pause_result local;
    return timed(tag, PAUSE, flags, out ? out : &local);
}

GVM_EXPORT gvm_status gvm_resume_report(const char *tag, gvm_pause_result *out)
{
    gvm_pause_result local;
    return timed(tag, RESUME, 0, out ? out : &local);
}

GVM_EXPORT gvm_status gvm_pause(const char *tag, int flags) { return gvm_pause_report(tag, flags, NULL); }

GVM_EXPORT gvm_status gvm_resume(const char *tag) { return gvm_resume_report(tag, NULL); }

static bool location_usable(int loc)
{
    if (loc == GVM_LOC_HOST) return gvm_topo.host_vmm;
    return loc >= 0 && loc < gvm_topo.ndev && gvm_topo.dev[loc].vmm;
}

static gvm_status migrate_all(struct list *l, int loc, gvm_pause_result *out)
{
    CUresult rc = CUDA_SUCCESS;
    gvm_status st = GVM_OK;
    int unreachable = 0;
    for (size_t i = 0; i < l->n && rc == CUDA_SUCCESS; i++) {
        /* Kernels on the allocating device must still reach the memory. */
        if (loc >= 0 && !gvm_topo_reaches(GVM_LOAD(l->r[i]->device), loc)) {
            st = GVM_ERR_UNSUPPORTED;
            unreachable++;
            continue;
        }
        bool shared = false;
        rc = move_one(l->r[i], loc, GVM_RELOC_EXPLICIT, out, &shared);
        if (rc == CUDA_SUCCESS) out->done++;
        if (rc == CUDA_ERROR_NOT_PERMITTED) st = GVM_ERR_BUSY;   /* paused, or shared with other processes */
        if (gvm_relocate_refused(rc)) rc = CUDA_SUCCESS;
        else if (rc != CUDA_SUCCESS) say(out, "moving the allocation at %#lx failed (driver error %d)",
                                         (unsigned long)GVM_LOAD(l->r[i]->base), (int)rc);
    }
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return GVM_ERR_NO_MEMORY;
    if (rc != CUDA_SUCCESS) return GVM_ERR_DRIVER;
    if (unreachable) say(out, "%d allocations stay: their devices cannot reach device %d", unreachable, loc);
    else if (st == GVM_ERR_BUSY) say(out, "%zu bytes stay: paused, or shared with other processes", out->stayed);
    return st;
}

gvm_status gvm_policy_migrate_report(const char *tag, int loc, gvm_pause_result *out)
{
    memset(out, 0, sizeof *out);
    out->to = loc;
    uint64_t t0 = gvm_trace_now();
    gvm_status st = GVM_OK;
    if (!gvm_core_active()) {
        say(out, "gvmshim is not active in this process");
        st = GVM_ERR_INACTIVE;
    } else if (!location_usable(loc)) {
        say(out, "location %d cannot hold gvmshim's memory", loc);
        st = GVM_ERR_INVALID;
    } else {
        st = refuse_capture(out);
    }
    if (st != GVM_OK) return st;
    size_t held0[GVM_REPORT_DEVICES];
    held_now(held0);
    struct list l = {.tag = -1};
    if (collect(tag, &l, out)) st = migrate_all(&l, loc, out);
    free(l.r);
    release_idle(held0, out);
    out->seconds = (double)(gvm_trace_now() - t0) / 1e9;
    if (out->seconds > 0) out->gbps = (double)out->bytes / out->seconds / 1e9;
    return st;
}

gvm_status gvm_policy_migrate_tag(const char *tag, int loc)
{
    gvm_pause_result out;
    return gvm_policy_migrate_report(tag, loc, &out);
}
