/* The policy's decisions, as the preload layer asks for them: where a new
 * allocation goes, what to do when a device is full, what the program is
 * told about free memory, and whether launches are worth watching. */
#ifndef GVM_POLICY_PLACE_H
#define GVM_POLICY_PLACE_H

#include "core/cuda_api.h"
#include "policy/config.h"

#include <stdbool.h>
#include <stdint.h>

/* After the core started: applies limits, starts the promoter. */
CUresult gvm_policy_start(const struct gvm_config *cfg);

/* Serves an allocation for the program: rules, device limit, spill. The
 * error is what the native call would return when nothing fits. */
CUresult gvm_policy_alloc(size_t size, int device, CUcontext ctx, int tag, uintptr_t *out);

/* Frees a gvmshim allocation (CUDA_ERROR_NOT_FOUND: not ours). */
CUresult gvm_policy_free(uintptr_t p);

/* Adjusts cuMemGetInfo's answer for device. */
void gvm_policy_meminfo(int device, size_t *free_bytes, size_t *total_bytes);

/* Tags: names to small ids (0 = untagged); the calling thread's tag. */
int gvm_policy_current_tag(void);
int gvm_tag_id(const char *name, bool create);
const char *gvm_tag_name(int id);
/* In a forked child: the tag lock may have been held by a thread that did
 * not follow; start it over. */
void gvm_tags_after_fork(void);

#endif
