/* Making several pieces at once: pooled ones first, the rest created on
 * threads, each usable as soon as it exists (core/phys_batch.c, over the
 * single pieces of core/phys.h). */
#ifndef GVM_PHYS_BATCH_H
#define GVM_PHYS_BATCH_H

#include "core/piece.h"

#include <stdbool.h>
#include <stddef.h>

/* n handles at loc of the given sizes, as gvm_phys_get would give them,
 * for the entries of out that are NULL (the others are the caller's),
 * pooled ones first; the missing ones are created by several threads at
 * once (pinning host memory is the slow part of a first move, and the
 * kernel does it in parallel). On failure nothing is kept: every entry,
 * the caller's too, is given back and NULL. */
CUresult gvm_phys_get_many(int loc, const size_t *sizes, int n, bool staging, struct gvm_phys **out);

/* gvm_phys_get_many in the background, for a caller that uses each piece
 * as soon as it is ready (a move's copies start while the rest are being
 * made): the NULL entries of out are filled from loc's pool at once
 * (staged), the others by threads started here. `copy_only`: nothing
 * will map these pieces at an allocation's addresses, so host pieces may
 * be registered pages (core/hostpin.h), in dev's context. The caller owns every non-NULL
 * entry of out whatever happens, and calls gvm_phys_batch_end after a
 * start that succeeded; CUDA_ERROR_OUT_OF_MEMORY (*b NULL) when the
 * missing pieces would pass loc's cap. */
struct gvm_phys_batch;
CUresult gvm_phys_batch_start(int loc, const size_t *sizes, int n, bool copy_only, int dev, struct gvm_phys **out,
                              struct gvm_phys_batch **b);
/* Waits until out[k] is ready: CUDA_SUCCESS, or the creation failure
 * that stopped the batch (out[k] may then be NULL). */
CUresult gvm_phys_batch_wait(struct gvm_phys_batch *b, int k);
/* Joins the batch's threads (with `stop`, once their creations under way
 * end; later entries stay NULL) and frees it; returns its first failure
 * (without `stop`, also when an entry is still NULL). */
CUresult gvm_phys_batch_end(struct gvm_phys_batch *b, bool stop);

/* The NULL entries of out that loc's pool can fill now (as gvm_phys_get
 * would, without creating anything); returns the bytes of those it could
 * not. */
size_t gvm_phys_take_pooled(int loc, const size_t *sizes, int n, bool staging, struct gvm_phys **out);

#endif
