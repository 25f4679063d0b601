/* Bytes kept by key (a handle, an address), each with the device it is
 * on: per-device totals and high-water marks for memory gvmshim counts but
 * does not hold itself (core/direct.h: the program's own cuMemCreate
 * handles; preload: the stream-ordered allocations served for default
 * pools). Entries come and go at allocation rate at most: one lock. */
#ifndef GVM_TALLY_H
#define GVM_TALLY_H

#include "core/location.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GVM_TALLY_BUCKETS 4096

struct gvm_tally_entry;

struct gvm_tally {
    pthread_mutex_t lock;
    struct gvm_tally_entry *table[GVM_TALLY_BUCKETS];
    size_t live;                          /* entries; read without the lock */
    uint64_t bytes[GVM_MAX_DEVICES], high[GVM_MAX_DEVICES];
};

#define GVM_TALLY_INIT {.lock = PTHREAD_MUTEX_INITIALIZER}

/* Records key: bytes on dev. False when it cannot (no memory, a device out
 * of range): nothing is counted. */
bool gvm_tally_add(struct gvm_tally *t, uint64_t key, int dev, size_t bytes);

/* Removes key, telling its device and bytes; false when it is not there.
 * One load while the tally is empty. */
bool gvm_tally_take(struct gvm_tally *t, uint64_t key, int *dev, size_t *bytes);

/* Whether key is recorded, and on which device. One load while the tally
 * is empty. */
bool gvm_tally_find(struct gvm_tally *t, uint64_t key, int *dev);

/* On dev (0 for any other location): bytes now, the most at once since
 * the start or the last reset, and the reset (the mark becomes now). */
uint64_t gvm_tally_bytes(struct gvm_tally *t, int dev);
uint64_t gvm_tally_high(struct gvm_tally *t, int dev);
void gvm_tally_reset_high(struct gvm_tally *t, int dev);

/* Forgets every entry on dev, its total and its mark (a reset of the
 * device's context took what they counted). */
void gvm_tally_drop_device(struct gvm_tally *t, int dev);

#endif
