/* sigaction and signal, interposed so that gvmshim's lazy host-access
 * handler stays first in line for SIGSEGV and SIGBUS: a handler the program
 * installs later (Python's faulthandler, a JVM) becomes the program's
 * disposition, which gets every signal that is not a lazy-access fault
 * (core/hostaccess.c). Every other call goes to the next definition
 * unchanged. A program that installs a handler by a raw system call
 * bypasses this. */
#define _GNU_SOURCE
#include "preload/shim.h"

#include <dlfcn.h>
#include <signal.h>
#include <string.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t (*signal_fn)(int, sighandler_t);

static sigaction_fn next_sigaction;
static signal_fn next_signal;

/* Resolved at load: the handler path must not call dlsym. */
__attribute__((constructor)) static void resolve_next(void)
{
    __atomic_store_n(&next_sigaction, (sigaction_fn)gvm_real_dlsym(RTLD_NEXT, "sigaction"), __ATOMIC_RELEASE);
    __atomic_store_n(&next_signal, (signal_fn)gvm_real_dlsym(RTLD_NEXT, "signal"), __ATOMIC_RELEASE);
}

static sigaction_fn real_sigaction(void)
{
    sigaction_fn f = __atomic_load_n(&next_sigaction, __ATOMIC_ACQUIRE);
    if (!f) {   /* a call from another library's constructor, before ours */
        resolve_next();
        f = __atomic_load_n(&next_sigaction, __ATOMIC_ACQUIRE);
    }
    return f;
}

int gvm_shim_next_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return real_sigaction()(sig, act, old);
}

GVM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (gvm_hostaccess_program_action(sig, act, old)) return 0;
    return real_sigaction()(sig, act, old);
}

GVM_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    if (sig != SIGSEGV && sig != SIGBUS) {
        signal_fn f = __atomic_load_n(&next_signal, __ATOMIC_ACQUIRE);
        if (!f) {
            resolve_next();
            f = __atomic_load_n(&next_signal, __ATOMIC_ACQUIRE);
        }
        return f(sig, handler);
    }
    /* glibc's signal: BSD semantics, the signal blocked in its handler. */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, sig);
    if (sigaction(sig, &sa, &old)) return SIG_ERR;
    return old.sa_handler;
}
