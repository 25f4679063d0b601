/* cudaDeviceReset (cuDevicePrimaryCtxReset) destroys the device's primary
 * context and with it the program's cuMemAlloc memory there, its streams,
 * events and host registrations. VMM memory belongs to the process and
 * outlives the context (one H100, driver 580, 2026-11-27: a mapping made
 * before the reset still held its bytes after it, and cuMemUnmap and
 * cuMemRelease worked with no context at all; scripts/probe/ctxreset.c).
 * So the memory gvmshim serves those allocations from would stay held,
 * counted under device_limit and shown by NVML, unless gvmshim frees it:
 * after the reset it frees what the program allocated in that context and
 * gives back what it kept for reuse there. The program's own cuMemCreate
 * memory stays, as natively. */
#include "core/reset.h"

#include "core/capture.h"
#include "core/heap.h"
#include "core/hostpin.h"
#include "core/live.h"
#include "core/log.h"
#include "core/phys.h"
#include "core/slab.h"
#include "core/topo.h"
#include "core/usemark.h"

#include <stdlib.h>

/* A growing list of what the reset took. */
struct list {
    void **item;
    unsigned *gen;
    size_t n, cap;
    bool short_of_memory;   /* some could not be listed: freed by a second pass */
};

static void push(struct list *l, void *item, unsigned gen)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        void **ni = realloc(l->item, cap * sizeof *ni);
        if (ni) l->item = ni;
        unsigned *ng = ni ? realloc(l->gen, cap * sizeof *ng) : NULL;
        if (ng) l->gen = ng;
        if (!ni || !ng) {
            l->short_of_memory = true;
            return;
        }
        l->cap = cap;
    }
    l->item[l->n] = item;
    l->gen[l->n++] = gen;
}

struct walk {
    int dev;
    CUcontext ctx;
    struct list regions;
};

/* Under the live list's lock: no region lock, no heap call. A chunk holds
 * small allocations of one context (core/slab.c). */
static void take(struct gvm_region *r, void *arg)
{
    struct walk *w = arg;
    if (GVM_LOAD(r->device) != w->dev || r->ctx != w->ctx || !gvm_region_live(r)) return;
    push(&w->regions, r, gvm_region_gen(r));
}

/* The program's addresses in region r, when r is still the region listed. */
static void addresses_of(struct gvm_region *r, unsigned gen, struct list *out)
{
    if (GVM_LOAD(r->kind) == GVM_REGION_LARGE) {
        uintptr_t base = GVM_LOAD(r->base);
        if (gvm_region_stable(r, gen)) push(out, (void *)base, 0);
        return;
    }
    size_t n = gvm_slab_live_bases(r, NULL, 0);
    uintptr_t *bases = n ? malloc(n * sizeof *bases) : NULL;
    if (n && !bases) {
        out->short_of_memory = true;
        return;
    }
    n = gvm_slab_live_bases(r, bases, n);
    for (size_t i = 0; gvm_region_stable(r, gen) && i < n; i++) push(out, (void *)bases[i], 0);
    free(bases);
}

/* Frees the program's allocations in ctx; returns how many. */
static size_t free_program_memory(int dev, CUcontext ctx)
{
    struct walk w = {.dev = dev, .ctx = ctx};
    gvm_live_for_each(take, &w);
    struct list addrs = {0};
    for (size_t i = 0; i < w.regions.n; i++) addresses_of(w.regions.item[i], w.regions.gen[i], &addrs);
    size_t freed = 0;
    for (size_t i = 0; i < addrs.n; i++) freed += gvm_heap_free((uintptr_t)addrs.item[i]) == CUDA_SUCCESS;
    bool again = w.regions.short_of_memory || addrs.short_of_memory;
    free(w.regions.item);
    free(w.regions.gen);
    free(addrs.item);
    free(addrs.gen);
    /* Lists cut short by a failed allocation: what was freed made room. */
    if (again && freed) freed += free_program_memory(dev, ctx);
    else if (again) gvm_warn("device %d was reset, but some of its memory could not be listed and stays held", dev);
    return freed;
}

/* What the frees left idle: the device's cache and pools, and the other
 * devices' pools, where the pieces of memory spilled to a peer went:
 * natively a reset frees nothing another device shows as used. The other
 * devices' cached allocations stay: they are the program's there. */
static size_t give_back_idle(int dev)
{
    size_t idle = gvm_heap_trim(dev);
    for (int d = 0; d < gvm_topo.ndev; d++)
        if (d != dev) idle += gvm_phys_trim(d, SIZE_MAX);
    return idle;
}

void gvm_reset_context(int dev, CUcontext ctx)
{
    /* Launches on its streams recorded events there. */
    gvm_usemark_forget();
    gvm_topo_forget_program_context(ctx);
    size_t n = free_program_memory(dev, ctx);
    /* What the frees left cached goes back too, as natively (with the
     * device's other idle memory: a context's end is rare). */
    size_t idle = give_back_idle(dev);
    gvm_debug("a context of device %d was destroyed: %zu allocations freed, %zu idle bytes given back", dev, n,
              idle);
}

void gvm_reset_device(int dev, CUcontext ctx)
{
    gvm_topo_resetting(dev);
    /* First what died with the context, so that nothing below uses it. */
    gvm_capture_forget_device(dev);
    gvm_hostpin_forget(dev);
    gvm_usemark_forget();
    gvm_topo_forget_context(dev);
    gvm_topo_forget_program_context(ctx);   /* noted before gvmshim retained it */
    size_t n = ctx ? free_program_memory(dev, ctx) : 0;
    /* And the host pool's pieces registered in the primary context: their
     * registration died with it. The created ones (the host_pool prefill
     * among them) outlive it, as VMM memory does, and stay pooled. */
    size_t idle = give_back_idle(dev) + gvm_phys_trim_registered(dev);
    gvm_topo_resetting(-1);
    gvm_debug("device %d reset: %zu allocations freed, %zu idle bytes given back", dev, n, idle);
}
