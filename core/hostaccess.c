/* Granting the CPU access to host-resident memory costs about twice the
 * device mapping itself (19.8 ms vs 9.3 ms per GiB, H100, 2026-11-22): more
 * than the copy of a move. Most host-resident data is only ever read by
 * kernels, so by default the CPU side is mapped on its first touch, here.
 *
 * Two paths grant it:
 * - the copy hooks, before the driver's own CPU side copies through a
 *   host-side argument: gvm_hostaccess_grant_range, in normal context, for
 *   every block the copy reaches (a fault inside the driver would run the
 *   handler inside a driver call);
 * - the SIGSEGV/SIGBUS handler, for the program's own CPU touches.
 *
 * The handler stays first in line: it keeps the kernel's disposition for
 * both signals, and what the program installs later (the preload layer
 * interposes sigaction and signal) is recorded as the program's action, to
 * which every signal that is not a lazy-access fault goes, as the kernel
 * would have delivered it. */
#include "core/hostaccess.h"

#include "core/core_state.h"

#include "core/capture.h"
#include "core/driver.h"
#include "core/heap.h"
#include "core/log.h"
#include "core/relocate.h"
#include "core/stats.h"
#include "core/vamap.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int sig_slot(int sig) { return sig == SIGBUS; }

/* The sigaction that reaches the kernel (gvm_hostaccess_use_sigaction). */
static gvm_sigaction_fn kernel_sigaction;

void gvm_hostaccess_use_sigaction(gvm_sigaction_fn fn) { __atomic_store_n(&kernel_sigaction, fn, __ATOMIC_RELEASE); }

/* ---- the program's dispositions ------------------------------------------
 *
 * Read from the handler, written by the program's sigaction (which may be
 * called from a signal handler itself): no lock. Each change fills a fresh
 * slot and publishes it; a slot is reused only after ACTION_SLOTS more
 * changes of the same signal. */
#define ACTION_SLOTS 64

struct actions {
    struct sigaction slot[ACTION_SLOTS];
    unsigned next;
    struct sigaction *current;
    int owned;   /* gvmshim's handler holds the kernel's disposition */
};

static struct actions actions[2];

static void action_set(int sig, const struct sigaction *act)
{
    struct actions *a = &actions[sig_slot(sig)];
    unsigned i = __atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED) % ACTION_SLOTS;
    a->slot[i] = *act;
    __atomic_store_n(&a->current, &a->slot[i], __ATOMIC_RELEASE);
}

static void action_get(int sig, struct sigaction *out)
{
    struct sigaction *cur = __atomic_load_n(&actions[sig_slot(sig)].current, __ATOMIC_ACQUIRE);
    if (cur) {
        *out = *cur;
        return;
    }
    memset(out, 0, sizeof *out);
    out->sa_handler = SIG_DFL;
}

static bool owned(int sig) { return __atomic_load_n(&actions[sig_slot(sig)].owned, __ATOMIC_ACQUIRE); }

bool gvm_hostaccess_program_action(int sig, const struct sigaction *act, struct sigaction *old)
{
    if ((sig != SIGSEGV && sig != SIGBUS) || !owned(sig)) return false;
    struct sigaction prev;
    action_get(sig, &prev);
    if (act) action_set(sig, act);
    if (old) *old = prev;
    return true;
}

/* ---- granting ------------------------------------------------------------ */

/* Host-resident blocks without CPU access that overlap [off, end) of r's
 * view, granted one by one. Caller holds r->op. */
static CUresult grant_blocks(struct gvm_region *r, size_t off, size_t end, bool *any)
{
    for (int i = gvm_region_block_at(r, off); i >= 0 && i < r->nblocks && r->blocks[i].off < end; i++) {
        struct gvm_block *b = &r->blocks[i];
        if (!b->phys || b->phys->loc != GVM_LOC_HOST || b->cpu) continue;
        CUresult rc = gvm_region_grant_cpu(r, i);
        if (rc != CUDA_SUCCESS) return rc;
        *any = true;
    }
    return CUDA_SUCCESS;
}

/* r's host copy not mapped at its addresses yet (a lazy spill, a pause
 * that maps once reached, core/relocate.h): mapped where it is, as any
 * other call reaching it would, before the CPU is granted access. */
static void map_shelved(struct gvm_region *r)
{
    if (GVM_LOAD(r->shelf_spill)) gvm_relocate(r, GVM_LOC_HOST, GVM_RELOC_MAPPED);
}

bool gvm_hostaccess_grant(uintptr_t addr) { return gvm_hostaccess_grant_range(addr, 1); }

bool gvm_hostaccess_grant_range(uintptr_t addr, size_t len)
{
    bool any = false;
    uintptr_t end = len > UINTPTR_MAX - addr ? UINTPTR_MAX : addr + len;
    /* A range may run over adjacent reservations; it ends where gvmshim's
     * address space does. */
    while (addr < end) {
        struct gvm_region *view = gvm_vamap_get(addr);
        if (!view) break;
        struct gvm_region *r = gvm_heap_region(addr);
        if (!r) break;
        map_shelved(r);
        pthread_mutex_lock(&r->op);
        uintptr_t vend = view->base + view->reserved;
        /* Both records may have been retired and reused since the lookup. */
        bool same = gvm_vamap_get(addr) == view && gvm_region_live(view) &&
                    (view == r || __atomic_load_n(&view->target, __ATOMIC_ACQUIRE) == r);
        if (same && addr < view->base + GVM_LOAD(view->mapped)) {
            size_t off = addr - view->base;
            size_t stop = (end < vend ? end : vend) - view->base;
            CUresult rc = grant_blocks(r, off, stop, &any);
            if (rc != CUDA_SUCCESS)
                gvm_warn("cannot give the CPU access to %#lx (driver error %d)", (unsigned long)addr, rc);
        }
        pthread_mutex_unlock(&r->op);
        addr = vend;
    }
    if (any) gvm_stat_inc(cpu_access_faults);
    return any;
}

/* ---- the fault handler ----------------------------------------------------
 *
 * Nothing here allocates, logs through stdio or blocks on a lock (but for
 * a copy not mapped yet: resolve_fault). The fault
 * is synchronous: the faulting thread runs the program's code (gvmshim's own
 * code never touches host-resident memory through the CPU, and the copy
 * hooks grant before the driver copies), so it holds no gvmshim lock. The
 * region's lock is taken with trylock, waiting out an operation another
 * thread runs on the region (a move holds it for the whole move). The grant
 * itself is one cuMemSetAccess per view: not async-signal-safe by POSIX, but
 * the driver is not inside a call on this thread. */

static __thread int in_handler;

enum fault_outcome { NOT_OURS, GRANTED, GRANT_FAILED };

#define GRANT_TRIES 5
#define LOCK_WAIT_MS 60000

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static bool lock_region(struct gvm_region *r)
{
    for (long waited = 0; pthread_mutex_trylock(&r->op); waited++) {
        if (waited >= LOCK_WAIT_MS) return false;
        sleep_ms(1);
    }
    return true;
}

/* A driver call that fails now may succeed a moment later (transient
 * resource shortage): a few tries, backing off. The faulting thread may be
 * capturing in global mode: the grant is gvmshim's own call, made in
 * relaxed mode as the copy hooks make theirs. */
static CUresult grant_with_retries(struct gvm_region *r, int i)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool relaxed = gvm_capture_open(-1) && gvm_drv.cuThreadExchangeStreamCaptureMode &&
                   DRV(cuThreadExchangeStreamCaptureMode, &mode) == CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    for (int t = 0; t < GRANT_TRIES; t++) {
        if ((rc = gvm_region_grant_cpu(r, i)) == CUDA_SUCCESS) break;
        sleep_ms(1L << t);
    }
    if (relaxed) DRV(cuThreadExchangeStreamCaptureMode, &mode);
    return rc;
}

/* *err: the driver's error, or CUDA_SUCCESS when the region stayed busy. */
static enum fault_outcome resolve_fault(uintptr_t addr, CUresult *err)
{
    struct gvm_region *view = gvm_vamap_get(addr);
    struct gvm_region *r = view ? gvm_heap_region(addr) : NULL;
    if (!r) return NOT_OURS;
    /* The one place the handler allocates and waits on a lock: the fault
     * is the program's own touch of the memory, so this thread is in no
     * allocator and holds no lock of gvmshim's. */
    map_shelved(r);
    if (!lock_region(r)) return GRANT_FAILED;
    enum fault_outcome out = NOT_OURS;
    /* Both records may have been retired and reused since the lookup. */
    bool same = gvm_vamap_get(addr) == view && gvm_region_live(view) &&
                (view == r || __atomic_load_n(&view->target, __ATOMIC_ACQUIRE) == r);
    if (same && addr < view->base + GVM_LOAD(view->mapped)) {
        int i = gvm_region_block_at(r, addr - view->base);
        struct gvm_block *b = i >= 0 ? &r->blocks[i] : NULL;
        if (b && b->phys && b->phys->loc == GVM_LOC_HOST) {
            /* Granted by another thread meanwhile: the access will work. */
            *err = b->cpu ? CUDA_SUCCESS : grant_with_retries(r, i);
            out = *err == CUDA_SUCCESS ? GRANTED : GRANT_FAILED;
        }
    }
    pthread_mutex_unlock(&r->op);
    if (out == GRANTED) gvm_stat_inc(cpu_access_faults);
    return out;
}

static size_t put_str(char *at, const char *s)
{
    size_t n = strlen(s);
    memcpy(at, s, n);
    return n;
}

static size_t put_num(char *at, unsigned long v, unsigned base)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    for (size_t i = 0; i < n; i++) at[i] = tmp[n - 1 - i];
    return n;
}

/* One line on stderr, written without stdio. */
static void report_failure(uintptr_t addr, CUresult err)
{
    char line[192];
    size_t n = put_str(line, "gvmshim: error: cannot give the CPU access to host-resident memory at 0x");
    n += put_num(line + n, addr, 16);
    if (err) {
        n += put_str(line + n, " (driver error ");
        n += put_num(line + n, (unsigned long)err, 10);
        n += put_str(line + n, ")");
    } else {
        n += put_str(line + n, " (an operation on it did not end)");
    }
    n += put_str(line + n, "; the access faults\n");
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* The default action, as the kernel would take it: for a fault, and for a
 * signal sent by another process, the process ends with that signal. */
static void die_by(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    __atomic_store_n(&actions[sig_slot(sig)].owned, 0, __ATOMIC_RELEASE);
    action_set(sig, &dfl);
    __atomic_load_n(&kernel_sigaction, __ATOMIC_ACQUIRE)(sig, &dfl, NULL);   /* not owned any more */
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
}

/* Delivers sig to the program's own disposition, with its flags and mask. */
static void forward(int sig, siginfo_t *si, void *uc)
{
    struct sigaction prev;
    action_get(sig, &prev);
    bool fault = si && si->si_code > 0;
    /* As the kernel does, by the value, whatever the flags say. */
    if (prev.sa_handler == SIG_IGN) {
        /* A sent signal is ignored; a fault cannot be (the kernel kills). */
        if (!fault) return;
        die_by(sig);
        return;
    }
    if (prev.sa_handler == SIG_DFL) {
        die_by(sig);
        return;
    }
    if (prev.sa_flags & SA_RESETHAND) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        action_set(sig, &dfl);
    }
    sigset_t mask = prev.sa_mask, old;
    if (!(prev.sa_flags & SA_NODEFER)) sigaddset(&mask, sig);
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    if (prev.sa_flags & SA_SIGINFO)
        prev.sa_sigaction(sig, si, uc);
    else
        prev.sa_handler(sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    int saved_errno = errno;
    /* si_code > 0: raised by the kernel for an access; <= 0: sent
     * (kill, tgkill, sigqueue, raise), never ours. */
    if (!in_handler && si && si->si_code > 0 && gvm_core_active()) {
        in_handler = 1;
        CUresult err = CUDA_SUCCESS;   /* stays so when the region stayed busy */
        enum fault_outcome o = resolve_fault((uintptr_t)si->si_addr, &err);
        in_handler = 0;
        if (o == GRANTED) {
            errno = saved_errno;
            return;
        }
        if (o == GRANT_FAILED) report_failure((uintptr_t)si->si_addr, err);
    }
    forward(sig, si, uc);
    errno = saved_errno;
}

static int install(int sig)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (owned(sig)) return 0;
    gvm_sigaction_fn set = __atomic_load_n(&kernel_sigaction, __ATOMIC_ACQUIRE);
    if (!set || set(sig, &sa, &old)) return -1;
    action_set(sig, &old);
    __atomic_store_n(&actions[sig_slot(sig)].owned, 1, __ATOMIC_RELEASE);
    return 0;
}

int gvm_hostaccess_install(void) { return install(SIGSEGV) || install(SIGBUS) ? -1 : 0; }
