/* The bytes a simulated copy or memset moves. Under TSan they are moved by
 * the C library's own memmove and memset, past its interceptors: those
 * record every 8 bytes of a range in shadow memory, and the sim's copies of
 * whole device allocations were most of the TSan cpu suite's time (its
 * page faults included). What the GPU's engines touch is outside the
 * host's memory model anyway: the ordering of device work against frees
 * and moves is tests/sim/flight.c's to check. The first and last byte of
 * each range are still accessed as the host would, so a host thread racing
 * on a buffer a copy reads or writes is still reported. Elsewhere (ASan
 * checks the host buffers' bounds) these are plain memmove and memset. */
#include "sim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#if defined(__SANITIZE_THREAD__)
#define SIM_BULK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIM_BULK_TSAN 1
#endif
#endif

typedef void *(*move_fn)(void *, const void *, size_t);
typedef void *(*set_fn)(void *, int, size_t);

static move_fn libc_move = memmove;
static set_fn libc_set = memset;
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve(void)
{
#if !defined(SIM_BULK_TSAN)
    return;
#endif
    /* The library's own definitions, not the first ones in scope (the
     * sanitizer runtime's). */
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc)
        return;
    move_fn m = (move_fn)dlsym(libc, "memmove");
    set_fn s = (set_fn)dlsym(libc, "memset");
    if (m && s) {
        libc_move = m;
        libc_set = s;
    }
    dlclose(libc);
}

static void touch_edges(unsigned char *p, size_t n, int write)
{
#if defined(SIM_BULK_TSAN)
    volatile unsigned char *v = p;
    if (write) {
        v[0] = v[0];
        v[n - 1] = v[n - 1];
    } else {
        (void)v[0];
        (void)v[n - 1];
    }
#else
    (void)p;
    (void)n;
    (void)write;
#endif
}

void sim_bulk_move(void *dst, const void *src, size_t n)
{
    if (n == 0)
        return;
    pthread_once(&resolved, resolve);
    touch_edges((unsigned char *)src, n, 0);
    libc_move(dst, src, n);
    touch_edges(dst, n, 1);
}

void sim_bulk_set(void *dst, int value, size_t n)
{
    if (n == 0)
        return;
    pthread_once(&resolved, resolve);
    libc_set(dst, value, n);
    touch_edges(dst, n, 1);
}
