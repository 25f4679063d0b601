/* The CUDA driver API as gvmshim sees it: cuda.h built for the legacy
 * default stream, plus prototypes of the per-thread-stream (_ptds/_ptsz)
 * ELF symbols that cuda.h only declares under CUDA_API_PER_THREAD_DEFAULT_STREAM.
 * Every file that names a driver entry point includes this, never cuda.h. */
#ifndef GVM_CUDA_API_H
#define GVM_CUDA_API_H

#undef CUDA_API_PER_THREAD_DEFAULT_STREAM
#include <cuda.h>

/* cuda.h renames cuGetProcAddress to the 5-argument _v2; the 4-argument
 * symbol still exists in libcuda for old runtimes. */
#undef cuGetProcAddress
typedef CUresult (*gvm_pfn_getproc_v1)(const char *, void **, int, cuuint64_t);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags);

/* cuda.h renames cuStreamBeginCapture to the _v2 that takes a mode; the
 * one-argument symbol (CUDA 10.0) and its per-thread twin still exist. */
#undef cuStreamBeginCapture
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream);

/* cuda.h renames cuIpcOpenMemHandle to _v2; libcuda also exports the
 * unsuffixed symbol (CUDA 4.1), with the same ABI. */
#undef cuIpcOpenMemHandle
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);

/* cuda.h renames cuDevicePrimaryCtxReset to _v2 (CUDA 11); libcuda still
 * exports the unsuffixed symbol for older runtimes. */
#undef cuDevicePrimaryCtxReset
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);

/* cuCtxSynchronize_v2 (a context to wait for; NULL: the current one) is
 * exported by drivers of CUDA 13 and asked for by CUDA 13's runtime for
 * cudaDeviceSynchronize; cuda.h of 13.0 does not declare it yet. */
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx);

/* The same for cuCtxDestroy (_v2 since CUDA 4.0). */
#undef cuCtxDestroy
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);

/* cuda.h renames cuCtxCreate to _v4 (CUDA 12.5); libcuda still exports
 * the three-argument unsuffixed and _v2 symbols and the affinity _v3. */
#undef cuCtxCreate
CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev);

/* Stream memory operations: cuda.h renames them to _v2 (CUDA 11.7); the
 * unsuffixed symbols and their per-thread twins, same ABI, remain for
 * older runtimes. */
#undef cuStreamWriteValue32
#undef cuStreamWaitValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
CUresult CUDAAPI cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult CUDAAPI cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult CUDAAPI cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
                                    unsigned int flags);

/* The CUDA 12.8 batch copies, which report the failing copy in *failIdx;
 * cuda.h renames both to the CUDA 13 _v2 without it. */
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                    size_t *failIdx, CUstream hStream);
CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                                      unsigned long long flags, CUstream hStream);

/* The per-thread default-stream variants have the base ABI. */
#define GVM_PT_VARIANTS(X)                                                     \
    X(cuMemcpy, _ptds) X(cuMemcpyAsync, _ptsz) X(cuMemcpyPeer, _ptds)          \
    X(cuMemcpyPeerAsync, _ptsz) X(cuMemcpyHtoD_v2, _ptds)                      \
    X(cuMemcpyDtoH_v2, _ptds) X(cuMemcpyDtoD_v2, _ptds)                        \
    X(cuMemcpyDtoA_v2, _ptds) X(cuMemcpyAtoD_v2, _ptds)                        \
    X(cuMemcpyHtoDAsync_v2, _ptsz) X(cuMemcpyDtoHAsync_v2, _ptsz)              \
    X(cuMemcpyDtoDAsync_v2, _ptsz) X(cuMemcpy2D_v2, _ptds)                     \
    X(cuMemcpy2DUnaligned_v2, _ptds) X(cuMemcpy2DAsync_v2, _ptsz)              \
    X(cuMemcpy3D_v2, _ptds) X(cuMemcpy3DAsync_v2, _ptsz)                       \
    X(cuMemcpy3DPeer, _ptds) X(cuMemcpy3DPeerAsync, _ptsz)                     \
    X(cuMemcpyBatchAsync_v2, _ptsz) X(cuMemcpyBatchAsync, _ptsz)               \
    X(cuMemcpy3DBatchAsync_v2, _ptsz) X(cuMemcpy3DBatchAsync, _ptsz)           \
    X(cuStreamWriteValue32, _ptsz) X(cuStreamWaitValue32, _ptsz)               \
    X(cuStreamWriteValue64, _ptsz) X(cuStreamWaitValue64, _ptsz)               \
    X(cuStreamBatchMemOp, _ptsz) X(cuStreamWriteValue32_v2, _ptsz)             \
    X(cuStreamWaitValue32_v2, _ptsz) X(cuStreamWriteValue64_v2, _ptsz)         \
    X(cuStreamWaitValue64_v2, _ptsz) X(cuStreamBatchMemOp_v2, _ptsz)           \
    X(cuMemsetD8_v2, _ptds) X(cuMemsetD16_v2, _ptds) X(cuMemsetD32_v2, _ptds)  \
    X(cuMemsetD2D8_v2, _ptds) X(cuMemsetD2D16_v2, _ptds)                       \
    X(cuMemsetD2D32_v2, _ptds) X(cuMemsetD8Async, _ptsz)                       \
    X(cuMemsetD16Async, _ptsz) X(cuMemsetD32Async, _ptsz)                      \
    X(cuMemsetD2D8Async, _ptsz) X(cuMemsetD2D16Async, _ptsz)                   \
    X(cuMemsetD2D32Async, _ptsz) X(cuMemAllocAsync, _ptsz)                     \
    X(cuMemFreeAsync, _ptsz) X(cuMemAllocFromPoolAsync, _ptsz)                 \
    X(cuLaunchKernel, _ptsz)                                                   \
    X(cuLaunchKernelEx, _ptsz) X(cuLaunchCooperativeKernel, _ptsz)             \
    X(cuGraphLaunch, _ptsz) X(cuStreamSynchronize, _ptsz)                      \
    X(cuStreamQuery, _ptsz) X(cuEventRecord, _ptsz)                            \
    X(cuStreamBeginCapture, _ptsz) X(cuStreamBeginCapture_v2, _ptsz)          \
    X(cuStreamBeginCaptureToGraph, _ptsz)                                      \
    X(cuStreamEndCapture, _ptsz) X(cuStreamIsCapturing, _ptsz)

#define GVM_DECLARE_PT(base, sfx) extern __typeof__(base) base##sfx;
GVM_PT_VARIANTS(GVM_DECLARE_PT)
#undef GVM_DECLARE_PT

#endif
