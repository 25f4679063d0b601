/* The launch log (option launch_log): which allocations each scanned
 * kernel launch reached, in launch order, written at exit as a compact
 * binary file for scripts/probe/optimal.py, which computes the fastest a
 * spilling schedule could run that sequence (docs/benchmarks.md). Off,
 * a launch pays one predictable branch.
 *
 * File layout (little-endian, as the host writes it):
 *   header: "GVMLLOG1", u32 record size (48), u32 0, u64 records, u64 dropped
 *   records: u64 launch (from 1), u64 stream, u64 buffer id (0: the launch
 *            reached no allocation), u64 base, u64 bytes (mapped), u32
 *            flags (GVM_LAUNCH_LOG_*), u32 0
 * A launch reaching k allocations writes k records with its number. The
 * buffer id changes when an allocation moves (as CUDA's does); its base
 * does not. */
#ifndef GVM_PRELOAD_LAUNCHLOG_H
#define GVM_PRELOAD_LAUNCHLOG_H

#include "core/cuda_api.h"
#include "core/region.h"

#include <stdbool.h>
#include <stdint.h>

#define GVM_LAUNCH_LOG_MAGIC "GVMLLOG1"
#define GVM_LAUNCH_LOG_RECORDS (1u << 22) /* at most 192 MiB, reserved, touched as filled */

enum {
    GVM_LAUNCH_LOG_PARTIAL = 1,   /* the scan saw only part of the arguments */
    GVM_LAUNCH_LOG_PER_THREAD = 2 /* the _ptsz entry point: a per-thread default stream */
};

struct gvm_launch_rec {
    uint64_t launch, stream, buffer, base, bytes;
    uint32_t flags, zero;
};

extern bool gvm_launch_log_on;

/* Reserves the buffer; the log is on once it returns 0 (-1, errno set:
 * stays off). */
int gvm_launch_log_start(void);

/* One queued launch reaching r[0..n). */
void gvm_launch_log_record(struct gvm_region *const *r, int n, CUstream s, bool per_thread, bool partial);

/* Writes what was recorded to the file pattern names (%p: the process
 * id), private and never through a symlink (preload/outfile.h). Returns 0
 * or -1 with errno set. */
int gvm_launch_log_write(const char *pattern, char *path, size_t pathlen);

#endif
