#include "core/where.h"

#include "core/live.h"

#include <stdlib.h>
#include <string.h>

struct gather {
    struct gvm_region **r;
    size_t n, cap;
};

static void gather_one(struct gvm_region *r, void *arg)
{
    struct gather *g = arg;
    if (GVM_LOAD(r->kind) == GVM_REGION_ALIAS) return;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct gvm_region **nr = realloc(g->r, cap * sizeof *nr);
        if (!nr) return;
        g->r = nr;
        g->cap = cap;
    }
    g->r[g->n++] = r;
}

void gvm_heap_where(struct gvm_where *out, int ndev)
{
    memset(out, 0, (size_t)ndev * sizeof *out);
    struct gather g = {0};
    gvm_live_for_each(gather_one, &g);
    /* Each region under its own lock (a move changes its blocks); records
     * are type-stable, so one freed meanwhile is seen as not live. */
    for (size_t i = 0; i < g.n; i++) {
        struct gvm_region *r = g.r[i];
        pthread_mutex_lock(&r->op);
        int d = r->device;
        if (gvm_region_live(r) && d >= 0 && d < ndev) {
            out[d].host += gvm_region_shelf_bytes(r);   /* paused unmapped: held on host all the same */
            for (int b = 0; b < r->nblocks; b++) {
                const struct gvm_block *k = &r->blocks[b];
                if (!k->phys) continue;
                int loc = k->phys->loc;
                size_t *to = loc == d ? &out[d].home : loc == GVM_LOC_HOST ? &out[d].host : &out[d].peer;
                *to += k->size;
            }
        }
        pthread_mutex_unlock(&r->op);
    }
    free(g.r);
}
