/* Start-up of the preload layer.
 *
 * At library load only the configuration is read (no CUDA call: programs
 * fork before using CUDA, and a bad configuration must stop the job before
 * it runs). The driver library is opened on the first interposed call, and
 * the core starts on the first allocation, when the program has a context. */
#define _GNU_SOURCE
#include "preload/shim.h"

#include "core/log.h"
#include "core/topo.h"
#include "core/trace.h"
#include "preload/control.h"
#include "preload/launchlog.h"
#include "policy/config.h"
#include "policy/derive.h"
#include "policy/place.h"
#include "policy/tags.h"
#include "preload/outfile.h"
#include "preload/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
/* Both are read without start_lock: every access is atomic. */
static int driver_state;      /* 0 not tried, 1 loaded, -1 failed */
static int core_state;        /* 0 not started, 1 serving, -1 failed */
static int core_starting;     /* the core's start has reached the driver */
static bool forked;           /* this process is a forked child */
static __thread bool loading; /* this thread is inside the driver's dlopen */
static bool hooks_launches;   /* decided at load, from the configuration */

typedef void *(*dlsym_fn)(void *, const char *);
extern void *gvm_real_dlsym_ptr;   /* preload/dlsym.c's entry stub reads it */

/* The real dlsym, never through the public symbol (which is ours). */
GVM_NO_SANITIZE void *gvm_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = (dlsym_fn)__atomic_load_n(&gvm_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (!f) {
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
        for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (!f) return NULL;
        __atomic_store_n(&gvm_real_dlsym_ptr, (void *)f, __ATOMIC_RELEASE);
    }
    return f(handle, name);
}

bool gvm_shim_loading(void) { return loading; }

static void configured_now(void);

bool gvm_cfg_disabled(void)
{
    configured_now();
    return gvm_cfg.disable;
}

void *gvm_shim_real_slow(enum gvm_driver_fn fn)
{
    void **slots = (void **)&gvm_drv;
    if (gvm_shim_driver() && slots[fn]) return slots[fn];
    /* No driver table (its library could not be loaded as configured):
     * the next definition after gvmshim is the one the program linked. */
    void *f = gvm_real_dlsym(RTLD_NEXT, gvm_driver_names[fn]);
    if (!f) {
        gvm_error("%s is not available; cannot forward the call", gvm_driver_names[fn]);
        abort();
    }
    return f;
}

void *gvm_shim_real_opt(enum gvm_driver_fn fn)
{
    void **slots = (void **)&gvm_drv;
    if (gvm_shim_driver()) return slots[fn];
    return gvm_real_dlsym(RTLD_NEXT, gvm_driver_names[fn]);
}

/* Read after the configuration without asking for it: the resolvers ask
 * gvm_cfg_disabled first, and a launch hook scans only once the core runs
 * (every launch pays nothing more). */
bool gvm_shim_hooks_launches(void) { return hooks_launches; }

bool gvm_shim_driver(void)
{
    int st = __atomic_load_n(&driver_state, __ATOMIC_ACQUIRE);
    if (st) return st > 0;
    if (loading) return false;          /* libcuda's own start-up calling back */
    configured_now();                   /* the driver's path is configuration */
    pthread_mutex_lock(&start_lock);
    if (!__atomic_load_n(&driver_state, __ATOMIC_RELAXED)) {
        char err[256];
        loading = true;
        int rc = gvm_driver_load(gvm_cfg.libcuda, gvm_real_dlsym, err, sizeof err);
        loading = false;
        if (rc) gvm_warn("%s; passing everything through", err);
        __atomic_store_n(&driver_state, rc ? -1 : 1, __ATOMIC_RELEASE);
    }
    st = __atomic_load_n(&driver_state, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&start_lock);
    return st > 0;
}

static void start_trace(void)
{
    if (!gvm_cfg.trace[0]) return;
    char path[GVM_CFG_PATH_MAX + 32];
    gvm_outfile_name(gvm_cfg.trace, path, sizeof path);
    if (gvm_trace_start(path, gvm_cfg.trace_max, gvm_topo.ndev))
        gvm_warn("cannot write the trace to %s: %s", path, strerror(errno));
}

/* Only launches the scanner reads can be logged (those while spill is on,
 * with track_launches=auto): with launches not even hooked the log would
 * be empty, which is said rather than written. */
static void start_launch_log(void)
{
    if (!gvm_cfg.launch_log[0]) return;
    if (!hooks_launches) {
        gvm_warn("launch_log: kernel launches are not scanned (track_launches=off); nothing is logged");
        return;
    }
    if (gvm_launch_log_start()) gvm_warn("launch_log: cannot reserve its buffer: %s", strerror(errno));
}

static void write_launch_log(void)
{
    if (!__atomic_load_n(&gvm_launch_log_on, __ATOMIC_ACQUIRE)) return;
    char path[GVM_CFG_PATH_MAX + 32];
    if (gvm_launch_log_write(gvm_cfg.launch_log, path, sizeof path))
        gvm_warn("cannot write the launch log to %s: %s", path, gvm_outfile_why(errno));
}

static void start_core(void)
{
    CUcontext ctx = NULL;
    /* Without a current context the program's own call fails natively;
     * try again at the next one. */
    if (gvm_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return;
    /* The core reads the devices, policy turns the configuration into
     * settings for them, the core applies them. */
    __atomic_store_n(&core_starting, 1, __ATOMIC_RELEASE);
    gvm_hostaccess_use_sigaction(gvm_shim_next_sigaction);
    CUresult rc = gvm_core_probe();
    if (rc == CUDA_SUCCESS) {
        struct gvm_settings s;
        gvm_policy_settings(&gvm_cfg, &gvm_topo, &s);
        rc = gvm_core_start(&s);
    }
    if (rc == CUDA_SUCCESS) rc = gvm_policy_start(&gvm_cfg);
    if (rc != CUDA_SUCCESS) {
        gvm_core_set_active(false);
        gvm_warn("cannot start (driver error %d); passing everything through", rc);
        __atomic_store_n(&core_state, -1, __ATOMIC_RELEASE);
        return;
    }
    /* Published last: readers that see it skip start_lock (gvm_shim_serving). */
    __atomic_store_n(&core_state, 1, __ATOMIC_RELEASE);
    gvm_info("serving allocations on %d device(s)", gvm_topo.ndev);
    start_trace();
    start_launch_log();
    if (gvm_cfg.control) gvm_control_start();
}

bool gvm_shim_serving(void)
{
    int st = __atomic_load_n(&core_state, __ATOMIC_ACQUIRE);
    if (st) return st > 0;
    if (gvm_cfg.disable || !gvm_shim_driver()) return false;
    pthread_mutex_lock(&start_lock);
    if (!__atomic_load_n(&core_state, __ATOMIC_RELAXED)) start_core();
    st = __atomic_load_n(&core_state, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&start_lock);
    return st > 0;
}

/* A child forked after the parent started the core (or while it did):
 * CUDA is unusable there, the core's locks may be held by threads that did
 * not follow, and the promoter is gone. gvmshim passes everything through
 * (the driver answers as it does in such a child), starts no thread, takes
 * none of the core's locks, and does not report the parent's statistics.
 * A child of a parent that never started the core is a fresh process: it
 * may start its own, and reports only its own statistics. */
static void after_fork_child(void)
{
    forked = true;
    pthread_mutex_init(&start_lock, NULL);
    gvm_tags_after_fork();
    gvm_stats_after_fork();
    if (__atomic_load_n(&core_state, __ATOMIC_ACQUIRE) || __atomic_load_n(&core_starting, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&core_state, -1, __ATOMIC_RELEASE);
        gvm_core_set_active(false);
    }
}

static void log_line(const char *line, void *arg)
{
    (void)arg;
    gvm_debug("config: %s", line);
}

static void configure(void)
{
    char err[GVM_CFG_ERR_MAX];
    if (gvm_config_load(&gvm_cfg, environ, err, sizeof err)) {
        char line[GVM_CFG_ERR_MAX + 16];
        int n = snprintf(line, sizeof line, "gvmshim: %s\n", err);
        ssize_t w = write(STDERR_FILENO, line, n > 0 ? (size_t)n : 0);
        (void)w;
        _exit(1);
    }
    gvm_log_set_level((int)gvm_cfg.log);
    if (gvm_cfg.env_ignored)
        gvm_warn("privileged process (setuid, setgid or capabilities): GVM_* variables "
                 "ignored, running with the defaults");
    /* Spill may be turned on while the program runs (gvmctl set), and
     * launches resolved before that would never reach a hook: unless
     * tracking is off for good, every launch gets one, which scans only
     * while the configuration in force asks for it. */
    hooks_launches = gvm_cfg.track_launches != GVM_CFG_TRACK_OFF;
    if (gvm_cfg.disable) gvm_core_set_active(false);
    pthread_atfork(NULL, NULL, after_fork_child);
    if (gvm_log_get_level() >= GVM_LOG_DEBUG) gvm_config_dump_lines(&gvm_cfg, log_line, NULL);
}

/* Configured by the constructor, or by the first hook called before it: a
 * library the program needs runs its constructors before a preloaded
 * one's, and one that calls the driver there would find no configuration
 * (an empty libcuda path: dlopen("") is the program, whose lookups find
 * gvmshim's own hooks, and the driver table would call itself). */
static pthread_once_t configured = PTHREAD_ONCE_INIT;

static void configured_now(void) { pthread_once(&configured, configure); }

__attribute__((constructor)) static void gvm_shim_configure(void) { configured_now(); }

__attribute__((destructor)) static void gvm_shim_report(void)
{
    gvm_trace_stop();
    if (!forked) write_launch_log();
    /* A process that never reached the driver has nothing to say, nor a
     * forked child that did not serve allocations itself. */
    if (!gvm_cfg.stats[0] || __atomic_load_n(&driver_state, __ATOMIC_ACQUIRE) <= 0) return;
    if (forked && __atomic_load_n(&core_state, __ATOMIC_ACQUIRE) <= 0) return;
    int ndev = gvm_topo.ndev;
    int64_t nvml_used[GVM_MAX_DEVICES];
    const int64_t *used = gvm_nvml_process_used(ndev, gvm_real_dlsym, nvml_used) ? nvml_used : NULL;
    if (!strcmp(gvm_cfg.stats, "1")) {
        gvm_stats_write(stderr, 0, ndev, used);
        fflush(stderr);
        return;
    }
    char path[GVM_CFG_PATH_MAX + 32];
    int fd = gvm_outfile_open(gvm_cfg.stats, path, sizeof path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        gvm_warn("cannot write stats to %s: %s", path, gvm_outfile_why(errno));
        if (fd >= 0) close(fd);
        return;
    }
    gvm_stats_write(f, 1, ndev, used);
    fclose(f);
}
