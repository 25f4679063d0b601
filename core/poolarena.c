#include "core/poolarena.h"

#include <stdlib.h>
#include <string.h>

static uint64_t align_up(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

static bool reserve_blocks(struct gvm_pool_arena *a)
{
    if (a->n < a->cap) return true;
    size_t cap = a->cap ? a->cap * 2 : 64;
    struct gvm_arena_block *b = realloc(a->block, cap * sizeof *b);
    if (!b) return false;
    a->block = b;
    a->cap = cap;
    return true;
}

static bool reserve_chunks(struct gvm_pool_arena *a, size_t need)
{
    if (need <= a->nchunks) return true;
    size_t n = a->nchunks ? a->nchunks : 16;
    while (n < need) n *= 2;
    bool *m = realloc(a->mapped, n * sizeof *m);
    if (!m) return false;
    memset(m + a->nchunks, 0, (n - a->nchunks) * sizeof *m);
    a->mapped = m;
    a->nchunks = n;
    return true;
}

/* The first gap between live blocks that holds size bytes (freed blocks
 * are reusable at once); the end of the last live block when none does. */
static uint64_t first_fit(const struct gvm_pool_arena *a, uint64_t size)
{
    uint64_t at = 0;
    for (size_t i = 0; i < a->n; i++) {
        const struct gvm_arena_block *b = &a->block[i];
        if (b->freed) continue;
        if (b->off >= at && b->off - at >= size) return at;
        if (b->off + b->size > at) at = b->off + b->size;
    }
    return at;
}

/* Drops the freed blocks [off, off + size) reuses: their bytes are live
 * again, and covered by the new block. */
static void drop_reused(struct gvm_pool_arena *a, uint64_t off, uint64_t size)
{
    if (!a->nfreed) return;   /* a program that synchronizes often: most allocations */
    size_t k = 0;
    for (size_t i = 0; i < a->n; i++) {
        struct gvm_arena_block *b = &a->block[i];
        bool overlap = b->off < off + size && off < b->off + b->size;
        if (b->freed && overlap) {
            a->nfreed--;
            continue;
        }
        a->block[k++] = *b;
    }
    a->n = k;
}

static void insert_block(struct gvm_pool_arena *a, struct gvm_arena_block nb)
{
    size_t i = a->n;
    while (i > 0 && a->block[i - 1].off > nb.off) i--;
    memmove(&a->block[i + 1], &a->block[i], (a->n - i) * sizeof *a->block);
    a->block[i] = nb;
    a->n++;
}

static void map_range(struct gvm_pool_arena *a, uint64_t off, uint64_t size)
{
    for (uint64_t c = off / GVM_POOLARENA_CHUNK; c <= (off + size - 1) / GVM_POOLARENA_CHUNK; c++)
        if (!a->mapped[c]) {
            a->mapped[c] = true;
            a->nmapped++;
        }
}

void gvm_arena_alloc(struct gvm_pool_arena *a, uint64_t key, uint64_t size)
{
    uint64_t r = align_up(size ? size : 1, GVM_POOLARENA_ALIGN);
    uint64_t off = first_fit(a, r);
    drop_reused(a, off, r);
    if (!reserve_blocks(a) || !reserve_chunks(a, (size_t)((off + r - 1) / GVM_POOLARENA_CHUNK) + 1)) {
        a->lost = true;
        return;
    }
    insert_block(a, (struct gvm_arena_block){.off = off, .size = r, .key = key});
    map_range(a, off, r);
}

bool gvm_arena_free(struct gvm_pool_arena *a, uint64_t key)
{
    for (size_t i = 0; i < a->n; i++) {
        struct gvm_arena_block *b = &a->block[i];
        if (b->key == key && !b->freed) {
            b->freed = true;
            a->nfreed++;
            return true;
        }
    }
    return false;
}

/* Chunks some block covers (freed ones too when with_freed) marked in
 * covered, which has nchunks entries. */
static void mark_covered(const struct gvm_pool_arena *a, bool with_freed, bool *covered)
{
    memset(covered, 0, a->nchunks * sizeof *covered);
    for (size_t i = 0; i < a->n; i++) {
        const struct gvm_arena_block *b = &a->block[i];
        if (b->freed && !with_freed) continue;
        for (uint64_t c = b->off / GVM_POOLARENA_CHUNK; c <= (b->off + b->size - 1) / GVM_POOLARENA_CHUNK; c++)
            covered[c] = true;
    }
}

/* Releases uncovered chunks from the highest while more than floor would
 * stay (at_least: while what stays after one more is at least floor). */
static void release(struct gvm_pool_arena *a, bool with_freed, uint64_t floor, bool at_least)
{
    if (!a->nchunks) return;
    bool *covered = malloc(a->nchunks * sizeof *covered);
    if (!covered) return;
    mark_covered(a, with_freed, covered);
    for (size_t c = a->nchunks; c-- > 0;) {
        uint64_t have = a->nmapped * GVM_POOLARENA_CHUNK;
        if (at_least ? have < floor + GVM_POOLARENA_CHUNK : have <= floor) break;
        if (a->mapped[c] && !covered[c]) {
            a->mapped[c] = false;
            a->nmapped--;
        }
    }
    free(covered);
}

void gvm_arena_sync(struct gvm_pool_arena *a, uint64_t threshold)
{
    if (a->nfreed) {
        size_t k = 0;
        for (size_t i = 0; i < a->n; i++)
            if (!a->block[i].freed) a->block[k++] = a->block[i];
        a->n = k;
        a->nfreed = 0;
    }
    release(a, false, threshold, false);
}

void gvm_arena_trim(struct gvm_pool_arena *a, uint64_t keep) { release(a, true, keep, true); }

uint64_t gvm_arena_reserved(const struct gvm_pool_arena *a) { return a->nmapped * GVM_POOLARENA_CHUNK; }

bool gvm_arena_releasable(const struct gvm_pool_arena *a, uint64_t used)
{
    return a->nfreed || gvm_arena_reserved(a) >= align_up(used, GVM_POOLARENA_CHUNK) + GVM_POOLARENA_CHUNK;
}

void gvm_arena_clear(struct gvm_pool_arena *a)
{
    free(a->block);
    free(a->mapped);
    *a = (struct gvm_pool_arena)GVM_POOL_ARENA_INIT;
}
