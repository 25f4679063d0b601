/* Stream capture under way. While a program captures work into a CUDA
 * graph, a device-wide wait (cuCtxSynchronize) on the capturing device
 * invalidates the capture, from any thread and in every capture mode. The
 * preload layer reports each capture's begin and end here; the core's
 * waits ask first and answer "not now" (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
 * while one is open, and their callers fall back to work that needs no
 * wait (fresh memory, deferred frees, place instead of evict).
 *
 * A wait announces itself before it asks (gvm_capture_wait_begin) and a
 * begin waits for announced waits to finish before the capture starts, so
 * no wait can start before a begin and run into its capture. */
#ifndef GVM_CAPTURE_H
#define GVM_CAPTURE_H

#include "core/cuda_api.h"

#include <stdbool.h>

/* Before the real begin on `stream` of device dev (-1: unknown, counts as
 * every device): refuses new waits there and waits out the ones running. */
void gvm_capture_begin(int dev, CUstream stream, CUstreamCaptureMode mode);

/* The real begin failed: undoes gvm_capture_begin. */
void gvm_capture_abort(CUstream stream);

/* The capture on stream is over (ended, or never began). Returns the
 * device it was on, or -2 when stream had none. */
int gvm_capture_end(CUstream stream);

/* dev's primary context was reset: the captures open there are gone. */
void gvm_capture_forget_device(int dev);

/* True while a capture is open on dev (dev < 0: on any device). */
bool gvm_capture_open(int dev);

/* A device-wide wait on dev (-1: every device) may run: true with the wait
 * announced (pair with gvm_capture_wait_end), false while a capture is
 * open there. */
bool gvm_capture_wait_begin(int dev);
void gvm_capture_wait_end(int dev);

/* True when CUDA forbids "potentially unsafe" calls (cudaMalloc, cudaFree,
 * synchronous copies) on this thread now, given its capture mode: its own
 * capture not begun relaxed, or, in global mode, another thread's capture
 * begun in global mode. */
bool gvm_capture_forbids_unsafe(CUstreamCaptureMode thread_mode);

/* gvmshim's own driver calls (pieces created and mapped, copies and waits
 * on its streams) must not break a capture another thread runs in global
 * mode, nor be refused because of it: relax puts this thread in relaxed
 * mode and returns the mode to restore. Device-wide waits are another
 * matter: no mode makes them legal while a capture is open. */
CUstreamCaptureMode gvm_capture_relax(void);
void gvm_capture_restore(CUstreamCaptureMode m);

#endif
