/* CUDA IPC, the heap's side: what the program's free of an exported
 * allocation does. Its pieces are not the heap's to reuse (core/share.h):
 * the IPC layer is told, and a chunk slot stays taken while an importer
 * has it open, so a new allocation never lands in memory another process
 * still reads. Below the heap, which calls it; the export itself sits
 * above (core/share.c). */
#ifndef GVM_SHARE_HOLD_H
#define GVM_SHARE_HOLD_H

#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

/* Set by the IPC layer. Called, region locked, when the program has freed
 * an allocation of a shared region: GVM_SHARE_NONE when it was not
 * exported, GVM_SHARE_RELEASE when no importer has it open (the slot's hold
 * goes now), GVM_SHARE_KEEP when one has (gvm_share_release later). */
enum { GVM_SHARE_NONE, GVM_SHARE_RELEASE, GVM_SHARE_KEEP };
extern int (*gvm_share_freed_hook)(struct gvm_region *r, int slot, uint64_t buffer_id);

/* For the heap: the slot and buffer id of the allocation at base p of a
 * shared region (false when there is none), and the call after it freed it. */
bool gvm_share_key(struct gvm_region *r, uintptr_t p, int *slot, uint64_t *buffer_id);
void gvm_share_freed(struct gvm_region *r, int slot, uint64_t buffer_id);

/* Drops the hold of a freed exported chunk slot (locks the region). */
void gvm_share_release(struct gvm_region *r, int slot);

#endif
