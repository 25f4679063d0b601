#include "core/tally.h"

#include <stdlib.h>

struct gvm_tally_entry {
    struct gvm_tally_entry *next;
    uint64_t key;
    int dev;
    size_t bytes;
};

static unsigned bucket_of(uint64_t key) { return (unsigned)((key * 0x9e3779b97f4a7c15u) >> 52) % GVM_TALLY_BUCKETS; }

static bool on_device(int dev) { return dev >= 0 && dev < GVM_MAX_DEVICES; }

/* Where key's entry is linked (*result NULL when absent); lock held. */
static struct gvm_tally_entry **slot_of(struct gvm_tally *t, uint64_t key)
{
    struct gvm_tally_entry **pp = &t->table[bucket_of(key)];
    while (*pp && (*pp)->key != key) pp = &(*pp)->next;
    return pp;
}

bool gvm_tally_add(struct gvm_tally *t, uint64_t key, int dev, size_t bytes)
{
    struct gvm_tally_entry *e = on_device(dev) ? malloc(sizeof *e) : NULL;
    if (!e) return false;
    *e = (struct gvm_tally_entry){.key = key, .dev = dev, .bytes = bytes};
    unsigned b = bucket_of(key);
    pthread_mutex_lock(&t->lock);
    e->next = t->table[b];
    t->table[b] = e;
    __atomic_store_n(&t->live, t->live + 1, __ATOMIC_RELAXED);
    t->bytes[dev] += bytes;
    if (t->bytes[dev] > t->high[dev]) t->high[dev] = t->bytes[dev];
    pthread_mutex_unlock(&t->lock);
    return true;
}

bool gvm_tally_take(struct gvm_tally *t, uint64_t key, int *dev, size_t *bytes)
{
    if (!__atomic_load_n(&t->live, __ATOMIC_RELAXED)) return false;
    pthread_mutex_lock(&t->lock);
    struct gvm_tally_entry **pp = slot_of(t, key);
    struct gvm_tally_entry *e = *pp;
    if (e) {
        *pp = e->next;
        __atomic_store_n(&t->live, t->live - 1, __ATOMIC_RELAXED);
        t->bytes[e->dev] -= e->bytes;
    }
    pthread_mutex_unlock(&t->lock);
    if (!e) return false;
    *dev = e->dev;
    *bytes = e->bytes;
    free(e);
    return true;
}

bool gvm_tally_find(struct gvm_tally *t, uint64_t key, int *dev)
{
    if (!__atomic_load_n(&t->live, __ATOMIC_RELAXED)) return false;
    pthread_mutex_lock(&t->lock);
    struct gvm_tally_entry *e = *slot_of(t, key);
    if (e) *dev = e->dev;
    pthread_mutex_unlock(&t->lock);
    return e != NULL;
}

static uint64_t read_locked(struct gvm_tally *t, const uint64_t *v, int dev)
{
    if (!on_device(dev)) return 0;
    pthread_mutex_lock(&t->lock);
    uint64_t x = v[dev];
    pthread_mutex_unlock(&t->lock);
    return x;
}

uint64_t gvm_tally_bytes(struct gvm_tally *t, int dev) { return read_locked(t, t->bytes, dev); }

uint64_t gvm_tally_high(struct gvm_tally *t, int dev) { return read_locked(t, t->high, dev); }

void gvm_tally_reset_high(struct gvm_tally *t, int dev)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&t->lock);
    t->high[dev] = t->bytes[dev];
    pthread_mutex_unlock(&t->lock);
}

void gvm_tally_drop_device(struct gvm_tally *t, int dev)
{
    if (!on_device(dev)) return;
    pthread_mutex_lock(&t->lock);
    for (unsigned b = 0; b < GVM_TALLY_BUCKETS; b++)
        for (struct gvm_tally_entry **pp = &t->table[b]; *pp;) {
            struct gvm_tally_entry *e = *pp;
            if (e->dev != dev) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            __atomic_store_n(&t->live, t->live - 1, __ATOMIC_RELAXED);
            free(e);
        }
    t->bytes[dev] = t->high[dev] = 0;
    pthread_mutex_unlock(&t->lock);
}
