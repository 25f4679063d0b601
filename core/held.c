#include "core/held.h"

#include "core/location.h"

#include <stdint.h>

static size_t held[GVM_LOC_SLOTS], peak[GVM_LOC_SLOTS];
static size_t cap[GVM_LOC_SLOTS] = {[0 ... GVM_LOC_SLOTS - 1] = SIZE_MAX};

static void raise_peak(int slot, size_t now)
{
    size_t p = __atomic_load_n(&peak[slot], __ATOMIC_RELAXED);
    while (now > p && !__atomic_compare_exchange_n(&peak[slot], &p, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

bool gvm_held_reserve(int loc, size_t bytes)
{
    int s = gvm_loc_slot(loc);
    size_t limit = __atomic_load_n(&cap[s], __ATOMIC_RELAXED);
    size_t now = __atomic_load_n(&held[s], __ATOMIC_RELAXED);
    do {
        if (bytes > limit || now > limit - bytes) return false;
    } while (!__atomic_compare_exchange_n(&held[s], &now, now + bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    raise_peak(s, now + bytes);
    return true;
}

void gvm_held_release(int loc, size_t bytes)
{
    __atomic_fetch_sub(&held[gvm_loc_slot(loc)], bytes, __ATOMIC_RELAXED);
}

size_t gvm_held_bytes(int loc) { return __atomic_load_n(&held[gvm_loc_slot(loc)], __ATOMIC_RELAXED); }

size_t gvm_held_peak(int loc) { return __atomic_load_n(&peak[gvm_loc_slot(loc)], __ATOMIC_RELAXED); }

void gvm_held_set_cap(int loc, size_t bytes) { __atomic_store_n(&cap[gvm_loc_slot(loc)], bytes, __ATOMIC_RELAXED); }

size_t gvm_held_cap(int loc) { return __atomic_load_n(&cap[gvm_loc_slot(loc)], __ATOMIC_RELAXED); }
