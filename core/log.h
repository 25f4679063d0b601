/* stderr logging, every line prefixed "gvmshim: ". Formats into a stack
 * buffer and writes once, so it never allocates and lines from threads do
 * not interleave. */
#ifndef GVM_LOG_H
#define GVM_LOG_H

enum gvm_log_level { GVM_LOG_ERROR, GVM_LOG_WARN, GVM_LOG_INFO, GVM_LOG_DEBUG };

/* Read and written atomically: gvmctl set changes it while threads log. */
extern int gvm_log_level;

static inline int gvm_log_get_level(void) { return __atomic_load_n(&gvm_log_level, __ATOMIC_RELAXED); }
static inline void gvm_log_set_level(int level) { __atomic_store_n(&gvm_log_level, level, __ATOMIC_RELAXED); }

void gvm_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define gvm_log(level, ...)                                                    \
    do {                                                                       \
        if ((level) <= gvm_log_get_level()) gvm_log_write((level), __VA_ARGS__); \
    } while (0)
#define gvm_error(...) gvm_log(GVM_LOG_ERROR, __VA_ARGS__)
#define gvm_warn(...) gvm_log(GVM_LOG_WARN, __VA_ARGS__)
#define gvm_info(...) gvm_log(GVM_LOG_INFO, __VA_ARGS__)
#define gvm_debug(...) gvm_log(GVM_LOG_DEBUG, __VA_ARGS__)

#endif
