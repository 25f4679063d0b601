/* Starting the core and asking whether it serves. */
#ifndef GVM_CORE_H
#define GVM_CORE_H

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

/* True once gvm_core_start succeeded. */
bool gvm_core_active(void);

/* True when the core will not serve: disabled, or its start failed
 * (rather than not started yet). */
bool gvm_core_off(void);

/* Marks the core serving, or off (disabled, or start failed). */
void gvm_core_set_active(bool on);

/* Lazy CPU access to host-resident memory: a SIGSEGV/SIGBUS handler that
 * grants the CPU access on the first touch and lets the access retry.
 * Every other signal goes to the program's disposition (the one there
 * before, or one the program installed later), as the kernel would deliver
 * it. A failed grant is retried a few times, then the access faults (one
 * line on stderr). */
int gvm_hostaccess_install(void);

/* For the interposed sigaction: when gvmshim's handler holds sig (SIGSEGV
 * or SIGBUS, lazy access on), records act as the program's disposition,
 * stores the previous one in old (both may be NULL) and returns true; else
 * false (the call goes to the kernel). Async-signal-safe. */
struct sigaction;
bool gvm_hostaccess_program_action(int sig, const struct sigaction *act, struct sigaction *old);

/* Grants the CPU access to every host-resident block of gvmshim memory
 * without it in [addr, addr+len) (before the driver's CPU side copies
 * through it); true if anything was granted. */
bool gvm_hostaccess_grant_range(uintptr_t addr, size_t len);
bool gvm_hostaccess_grant(uintptr_t addr);

#endif
