/* Starting the core and asking whether it serves. */
#ifndef GVM_CORE_H
#define GVM_CORE_H

#include "core/settings.h"

#include <stdbool.h>
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

/* True once gvm_core_start succeeded. */
bool gvm_core_active(void);

/* True when the core will not serve: disabled, or its start failed
 * (rather than not started yet). */
bool gvm_core_off(void);

/* Marks the core serving, or off (disabled, or start failed). */
void gvm_core_set_active(bool on);

/* Lazy CPU access to host-resident memory: a SIGSEGV/SIGBUS handler that
 * grants the CPU access on the first touch and lets the access retry.
 * Faults that are not ours go to the handler that was there before. */
int gvm_hostaccess_install(void);

/* Grants the CPU access to addr when it is host-resident gvmshim memory
 * without it (before the driver's CPU side copies through it). */
bool gvm_hostaccess_grant(uintptr_t addr);

#endif
