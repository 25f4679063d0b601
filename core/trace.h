/* A timeline of what gvmshim did, in the Chrome trace-event format that
 * Perfetto and chrome://tracing open (GVM_TRACE=path).
 *
 * Moves are recorded as slices (what, bytes, from, to, GB/s) into a small
 * buffer of the thread that made them, never blocking it (a full buffer
 * drops the event and counts it); a background thread drains the buffers,
 * samples the memory counters (per device and host) and the allocation
 * activity of the last interval, and writes. Allocations are never traced
 * one by one, and the file stops growing at a bound (GVM_TRACE_MAX): a long
 * job writes a bounded file. */
#ifndef GVM_TRACE_H
#define GVM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern bool gvm_trace_enabled;

/* Opens path (created 0600, never following a symlink) and starts the
 * writer; max_bytes bounds the file. Returns 0, or -1 (errno set). */
int gvm_trace_start(const char *path, size_t max_bytes, int ndev);

/* Drains what is left, writes the last counters and closes the file. */
void gvm_trace_stop(void);

/* Monotonic nanoseconds, the clock of every event. */
uint64_t gvm_trace_now(void);

/* One move of `bytes` from location `from` to `to` (device ordinal or
 * GVM_LOC_HOST) that took [t0, t1); `what` names why (a string literal:
 * "migrate", "spill", "promote", "pause", "resume"...). */
void gvm_trace_move(const char *what, uintptr_t base, size_t bytes, int from, int to, uint64_t t0, uint64_t t1,
                    bool ok);

/* Events dropped because a thread's buffer was full, and whether the
 * size bound stopped the trace (for tests and the stats). */
uint64_t gvm_trace_dropped(void);
bool gvm_trace_truncated(void);

#endif
