/* Lazy CPU access to host-resident memory: a SIGSEGV/SIGBUS handler that
 * grants the CPU access on the first touch and lets the access retry.
 * Every other signal goes to the program's disposition (the one there
 * before, or one the program installed later), as the kernel would deliver
 * it. A failed grant is retried a few times, then the access faults (one
 * line on stderr). */
#ifndef GVM_HOSTACCESS_H
#define GVM_HOSTACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sigaction;

/* How the handler's own changes of a disposition reach the kernel. In
 * libgvmshim, sigaction is the preload layer's (preload/signals.c), which
 * records a change of a signal this handler holds as the program's: whoever
 * starts the core hands it the definition after that one, before the
 * start (preload/init.c; tests that link the core alone hand it the C
 * library's). */
typedef int (*gvm_sigaction_fn)(int sig, const struct sigaction *act, struct sigaction *old);
void gvm_hostaccess_use_sigaction(gvm_sigaction_fn fn);

/* Installs the handler; nonzero when it cannot be (also when no sigaction
 * was handed over). */
int gvm_hostaccess_install(void);

/* For the interposed sigaction: when gvmshim's handler holds sig (SIGSEGV
 * or SIGBUS, lazy access on), records act as the program's disposition,
 * stores the previous one in old (both may be NULL) and returns true; else
 * false (the call goes to the kernel). Async-signal-safe. */
bool gvm_hostaccess_program_action(int sig, const struct sigaction *act, struct sigaction *old);

/* Grants the CPU access to every host-resident block of gvmshim memory
 * without it in [addr, addr+len) (before the driver's CPU side copies
 * through it); true if anything was granted. */
bool gvm_hostaccess_grant_range(uintptr_t addr, size_t len);
bool gvm_hostaccess_grant(uintptr_t addr);

#endif
