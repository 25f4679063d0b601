/* Lazy CPU access to host-resident memory: a SIGSEGV/SIGBUS handler that
 * grants the CPU access on the first touch and lets the access retry.
 * Faults that are not ours go to the handler that was there before. */
#ifndef GVM_HOSTACCESS_H
#define GVM_HOSTACCESS_H

#include <stdbool.h>
#include <stdint.h>

/* Installs the handler; nonzero when it cannot be. */
int gvm_hostaccess_install(void);

/* Grants the CPU access to addr when it is host-resident gvmshim memory
 * without it (before the driver's CPU side copies through it). */
bool gvm_hostaccess_grant(uintptr_t addr);

#endif
