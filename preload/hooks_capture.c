/* Stream capture. Every begin and end of a capture is reported to the core
 * (core/capture.h), which then refuses device-wide waits on the capturing
 * device, so nothing gvmshim does for one thread breaks another thread's
 * (or the same thread's) capture. The work those waits were for is done
 * without them or after the capture: see docs/capture.md. */
#include "preload/shim.h"

#include "core/capture.h"

/* The device whose work stream s queues: its context's, or the current
 * context's for the special handles. -1 when it cannot be told (then the
 * capture counts as being on every device). */
static int stream_device(CUstream s)
{
    CUcontext ctx = NULL, cur = NULL;
    if (GVM_REAL(cuCtxGetCurrent)(&cur) != CUDA_SUCCESS) return -1;   /* loads the table too */
    bool special = s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
    if (!special && gvm_drv.cuStreamGetCtx && gvm_drv.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS) return -1;
    if (!ctx) ctx = cur;
    if (!ctx) return -1;
    CUdevice d = -1;
    if (ctx == cur) return GVM_REAL(cuCtxGetDevice)(&d) == CUDA_SUCCESS ? d : -1;
    if (GVM_REAL(cuCtxPushCurrent_v2)(ctx) != CUDA_SUCCESS) return -1;
    CUresult rc = GVM_REAL(cuCtxGetDevice)(&d);
    CUcontext popped;
    GVM_REAL(cuCtxPopCurrent_v2)(&popped);
    return rc == CUDA_SUCCESS ? d : -1;
}

/* The begin is announced before the real call, so that no wait of the core
 * can start between the two (core/capture.h). */
#define BEGIN_HOOK(fn, sig, args, mode)                                        \
    GVM_EXPORT CUresult CUDAAPI fn sig                                         \
    {                                                                          \
        gvm_hook_count(GVM_FN_##fn);                                           \
        gvm_capture_begin(stream_device(hStream), hStream, (mode));            \
        CUresult rc_ = GVM_REAL(fn) args;                                      \
        if (rc_ != CUDA_SUCCESS) gvm_capture_abort(hStream);                   \
        return rc_;                                                            \
    }

/* The one-argument begin of CUDA 10.0 captures in global mode. */
BEGIN_HOOK(cuStreamBeginCapture, (CUstream hStream), (hStream), CU_STREAM_CAPTURE_MODE_GLOBAL)
BEGIN_HOOK(cuStreamBeginCapture_ptsz, (CUstream hStream), (hStream), CU_STREAM_CAPTURE_MODE_GLOBAL)
BEGIN_HOOK(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), mode)
BEGIN_HOOK(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), mode)
BEGIN_HOOK(cuStreamBeginCaptureToGraph,
           (CUstream hStream, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
            CUstreamCaptureMode mode),
           (hStream, g, deps, data, n, mode), mode)
BEGIN_HOOK(cuStreamBeginCaptureToGraph_ptsz,
           (CUstream hStream, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
            CUstreamCaptureMode mode),
           (hStream, g, deps, data, n, mode), mode)

/* An end that failed may leave the stream capturing (wrong thread): the
 * stream's own status says whether the capture is over. When the last one
 * is, the frees deferred during captures are done now, outside them. */
static CUresult after_end(CUstream s, CUresult rc)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (GVM_REAL(cuStreamIsCapturing)(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE) return rc;
    if (gvm_capture_end(s) == -2) return rc;
    if (gvm_shim_active() && !gvm_capture_open(-1)) gvm_heap_settle_deferred();
    return rc;
}

GVM_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    gvm_hook_count(GVM_FN_cuStreamEndCapture);
    return after_end(hStream, GVM_REAL(cuStreamEndCapture)(hStream, phGraph));
}

GVM_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    gvm_hook_count(GVM_FN_cuStreamEndCapture_ptsz);
    return after_end(hStream, GVM_REAL(cuStreamEndCapture_ptsz)(hStream, phGraph));
}

void gvm_shim_relax(struct gvm_capture_guard *g)
{
    g->relaxed = false;
    if (!gvm_capture_open(-1) || !gvm_drv.cuThreadExchangeStreamCaptureMode) return;
    g->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    g->relaxed = GVM_REAL(cuThreadExchangeStreamCaptureMode)(&g->mode) == CUDA_SUCCESS;
}

bool gvm_shim_capture_enter(struct gvm_capture_guard *g)
{
    gvm_shim_relax(g);
    if (!g->relaxed || !gvm_capture_forbids_unsafe(g->mode)) return true;
    gvm_shim_capture_leave(g);
    return false;
}

void gvm_shim_capture_leave(struct gvm_capture_guard *g)
{
    if (g->relaxed) GVM_REAL(cuThreadExchangeStreamCaptureMode)(&g->mode);
    g->relaxed = false;
}
