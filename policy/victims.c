#include "policy/victims.h"

#include "core/live.h"
#include "policy/policy.h"
#include "policy/recur.h"

#include <stdbool.h>
#include <stdlib.h>

enum which { RESIDENT, SPILLED, SPILLED_ANY, UNMAPPED };

struct gather {
    enum which which;
    int device;
    struct gvm_victims *out;
};

static bool qualifies(const struct gvm_region *r, const struct gather *g)
{
    if (GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return false;
    unsigned flags = GVM_LOAD(r->flags);
    if (g->which == UNMAPPED) return GVM_LOAD(r->shelf_spill);
    if (GVM_LOAD(r->home) != g->device) return false;
    /* Where its memory is gets checked under its lock, by the move; a
     * spilled region is no victim: counting it would make room on paper
     * only, and the swap would then find the device still full. */
    uint64_t spilled = GVM_LOAD(r->spilled_at);
    if (g->which == RESIDENT) return !spilled && !(flags & (GVM_RF_PAUSED | GVM_RF_PINNED));
    if (g->which == SPILLED_ANY) return spilled && !(flags & GVM_RF_PAUSED);
    return spilled && !(flags & GVM_RF_PAUSED) && GVM_LOAD(r->last_use) > spilled;
}

static void gather_one(struct gvm_region *r, void *arg)
{
    struct gather *g = arg;
    if (!qualifies(r, g)) return;
    struct gvm_victims *v = g->out;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        struct gvm_victim *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = (struct gvm_victim){r, GVM_LOAD(r->last_use), 0};
}

static int oldest_first(const void *a, const void *b)
{
    uint64_t x = ((const struct gvm_victim *)a)->last_use, y = ((const struct gvm_victim *)b)->last_use;
    return x < y ? -1 : x > y;
}

static void reverse(struct gvm_victim *v, size_t n)
{
    for (size_t i = 0, j = n; i + 1 < j; i++, j--) {
        struct gvm_victim t = v[i];
        v[i] = v[j - 1];
        v[j - 1] = t;
    }
}

static void gather(enum which which, int device, struct gvm_victims *out)
{
    struct gather g = {which, device, out};
    out->n = 0;
    gvm_live_for_each(gather_one, &g);
    if (out->n) qsort(out->v, out->n, sizeof *out->v, oldest_first);
}

/* Needed furthest ahead first; among those not expected within a period,
 * the least recently used first (the order gather left; qsort is not
 * stable, so last_use decides ties). */
static int furthest_first(const void *a, const void *b)
{
    const struct gvm_victim *x = a, *y = b;
    if (x->next_use != y->next_use) return x->next_use > y->next_use ? -1 : 1;
    return x->last_use < y->last_use ? -1 : x->last_use > y->last_use;
}

/* Orders by predicted next use when a period is known; false when not. */
static bool by_next_use(struct gvm_victims *v, bool furthest)
{
    const struct gvm_config *cfg = gvm_policy_cfg();
    uint32_t period = cfg && cfg->learn_loop ? gvm_recur_period() : 0;
    if (!period) return false;
    for (size_t i = 0; i < v->n; i++) v->v[i].next_use = gvm_recur_next_use(v->v[i].r, period);
    if (v->n) qsort(v->v, v->n, sizeof *v->v, furthest_first);   /* none: v->v may be NULL */
    if (!furthest) reverse(v->v, v->n);
    return true;
}

static bool resident(int device, struct gvm_victims *out)
{
    gather(RESIDENT, device, out);
    return by_next_use(out, true);
}

void gvm_victims_resident(int device, struct gvm_victims *out) { resident(device, out); }

void gvm_victims_spilled(int device, struct gvm_victims *out)
{
    gather(SPILLED, device, out);
    if (!by_next_use(out, false)) reverse(out->v, out->n);
}

void gvm_victims_spilled_all(int device, struct gvm_victims *out)
{
    gather(SPILLED_ANY, device, out);
    if (!by_next_use(out, false)) reverse(out->v, out->n);
}

void gvm_victims_unmapped(struct gvm_victims *out) { gather(UNMAPPED, 0, out); }

static bool kept(const struct gvm_region *r, struct gvm_region *const *keep, int n)
{
    for (int i = 0; i < n; i++)
        if (keep[i] == r) return true;
    return false;
}

size_t gvm_victims_for_swap(int device, size_t need, uint64_t since, struct gvm_region *const *keep, int nkeep,
                            struct gvm_victims *out)
{
    if (!resident(device, out)) {
        size_t cold = 0;
        while (cold < out->n && out->v[cold].last_use < since) cold++;
        reverse(out->v + cold, out->n - cold);   /* the warm tail, most recent first */
    }
    size_t k = 0, got = 0;
    for (size_t i = 0; i < out->n && got < need; i++) {
        if (kept(out->v[i].r, keep, nkeep)) continue;
        got += GVM_LOAD(out->v[i].r->mapped);
        out->v[k++] = out->v[i];
    }
    out->n = got >= need ? k : 0;
    return out->n;
}

struct spilled_probe {
    int device;
    const struct gvm_region *except;
    bool found;
};

static void probe_one(struct gvm_region *r, void *arg)
{
    struct spilled_probe *q = arg;
    if (q->found || r == q->except || GVM_LOAD(r->state) != GVM_REGION_LIVE || r->kind == GVM_REGION_ALIAS) return;
    q->found = GVM_LOAD(r->home) == q->device && GVM_LOAD(r->spilled_at) && !(GVM_LOAD(r->flags) & GVM_RF_PAUSED);
}

bool gvm_victims_more_spilled(int device, const struct gvm_region *except)
{
    struct spilled_probe q = {device, except, false};
    gvm_live_for_each(probe_one, &q);
    return q.found;
}

void gvm_victims_free(struct gvm_victims *v)
{
    free(v->v);
    *v = (struct gvm_victims){0};
}
