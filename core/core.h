/* Starting the core (its state, whether it serves: core/core_state.h). */
#ifndef GVM_CORE_H
#define GVM_CORE_H

#include "core/core_state.h"
#include "core/cuda_api.h"
#include "core/settings.h"

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

#endif
