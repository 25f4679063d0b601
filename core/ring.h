/* Rings of regions through their lru links, with a head record: the live
 * list (live.c) and each device's cache of freed regions (heap.c). A region
 * is on one ring at most. The caller holds the ring's lock. */
#ifndef GVM_RING_H
#define GVM_RING_H

#include "core/region.h"

static inline void gvm_ring_insert_tail(struct gvm_region *head, struct gvm_region *r)
{
    if (!head->lru_next) head->lru_next = head->lru_prev = head;
    r->lru_prev = head->lru_prev;
    r->lru_next = head;
    head->lru_prev->lru_next = r;
    head->lru_prev = r;
}

static inline void gvm_ring_remove(struct gvm_region *r)
{
    if (!r->lru_next) return;
    r->lru_prev->lru_next = r->lru_next;
    r->lru_next->lru_prev = r->lru_prev;
    r->lru_next = r->lru_prev = NULL;
}

#endif
