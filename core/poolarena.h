/* The address space of one stream-ordered pool as the driver lays it out,
 * for the reserve it reports (core/pooluse.h). Measured on an H200, driver
 * 580.159 (scripts/probe/poolplace.c logged every allocation's address in
 * a PyTorch cudaMallocAsync run; tests/cpu/data/pool-torch-h200.txt):
 *   - the pool is one range of addresses; each allocation takes the first
 *     gap, from the start, that holds its size rounded up to 512 bytes,
 *     and may span chunk boundaries;
 *   - the pool maps that range in 32 MiB chunks: an allocation maps the
 *     chunks it covers that are not mapped yet (the reserve);
 *   - a freed allocation's bytes are reusable at once; until a synchronize
 *     settles its free, queued work may still use them, so a trim keeps
 *     its chunks;
 *   - a synchronize releases chunks no allocation covers, from the highest,
 *     while the reserve is above the release threshold; a trim releases
 *     them while what stays is at least what it is asked to keep.
 * Which of the gaps an allocation takes does not change the reserve in
 * that run (first, best or last freed fit give the same figures); first
 * fit is the driver's most often. Pure bookkeeping, no driver calls. */
#ifndef GVM_POOLARENA_H
#define GVM_POOLARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GVM_POOLARENA_CHUNK ((uint64_t)32 << 20)
#define GVM_POOLARENA_ALIGN ((uint64_t)512)

struct gvm_arena_block {
    uint64_t off, size, key;
    bool freed; /* freed, not settled by a synchronize yet */
};

struct gvm_pool_arena {
    struct gvm_arena_block *block; /* by offset */
    size_t n, cap, nfreed;
    bool *mapped; /* per chunk */
    size_t nchunks;
    uint64_t nmapped;
    bool lost; /* bookkeeping ran out of memory: the reserve is approximate */
};

#define GVM_POOL_ARENA_INIT {0}

/* An allocation of size bytes, known by key (its address) until freed. */
void gvm_arena_alloc(struct gvm_pool_arena *a, uint64_t key, uint64_t size);

/* Its free; false when key is no live allocation of a. */
bool gvm_arena_free(struct gvm_pool_arena *a, uint64_t key);

/* A synchronize: every free settled, then chunks released while the
 * reserve is above threshold. */
void gvm_arena_sync(struct gvm_pool_arena *a, uint64_t threshold);

/* A trim: chunks neither live nor unsettled allocations cover released
 * while at least keep bytes stay. */
void gvm_arena_trim(struct gvm_pool_arena *a, uint64_t keep);

/* The bytes mapped. */
uint64_t gvm_arena_reserved(const struct gvm_pool_arena *a);

/* Whether a synchronize could change a: unsettled frees, or a mapped
 * chunk possibly free (cheap: more mapped than live blocks could fill). */
bool gvm_arena_releasable(const struct gvm_pool_arena *a, uint64_t used);

/* Forgets everything (the pool's allocations are gone). */
void gvm_arena_clear(struct gvm_pool_arena *a);

#endif
