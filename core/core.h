/* Starting the core and asking whether it serves. */
#ifndef GVM_CORE_H
#define GVM_CORE_H

#include "core/cuda_api.h"
#include "core/hostaccess.h"
#include "core/settings.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Starting is two steps, so that whoever starts the core can turn its
 * configuration into settings once the devices are known (percentages of
 * their memory) without the core calling back up:
 *
 * gvm_core_probe reads the topology (gvm_topo) and sets up what pointer
 * queries need before anything is served. The driver table must be
 * filled and cuInit done. gvm_core_start then applies the settings and
 * starts serving. Each returns CUDA_SUCCESS or the error that keeps the
 * core from serving (then everything passes through). */
CUresult gvm_core_probe(void);
CUresult gvm_core_start(const struct gvm_settings *s);

/* 0 not started, 1 serving, -1 off (core.c). */
extern int gvm_core_state;

/* True once gvm_core_start succeeded. Inline: every hooked call asks. */
static inline bool gvm_core_active(void) { return __atomic_load_n(&gvm_core_state, __ATOMIC_ACQUIRE) > 0; }

/* True when the core will not serve: disabled, or its start failed
 * (rather than not started yet). */
bool gvm_core_off(void);

/* Marks the core serving, or off (disabled, or start failed). */
void gvm_core_set_active(bool on);

#endif
