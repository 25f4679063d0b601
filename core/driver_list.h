/* Every driver entry point gvmshim uses or interposes, once.
 *   R(name): the core needs it; a driver without it cannot be served.
 *   O(name): optional; a NULL slot means "absent from this driver".
 * The table in driver.h, the real-pointer lookup of the preload layer and
 * the simulated driver used by tests are all generated from this list. */
#ifndef GVM_DRIVER_LIST_H
#define GVM_DRIVER_LIST_H

#define GVM_DRIVER_CORE(R, O)                                                  \
    R(cuInit) R(cuDriverGetVersion) R(cuGetErrorString) R(cuGetErrorName)      \
    R(cuDeviceGetCount) R(cuDeviceGet) R(cuDeviceGetAttribute)                 \
    R(cuDeviceCanAccessPeer) O(cuDeviceGetP2PAttribute) R(cuDeviceTotalMem_v2) \
    R(cuDevicePrimaryCtxRetain) R(cuDevicePrimaryCtxRelease_v2)             \
    O(cuDevicePrimaryCtxGetState)                \
    R(cuCtxGetCurrent) R(cuCtxSetCurrent) R(cuCtxPushCurrent_v2)               \
    R(cuCtxPopCurrent_v2) R(cuCtxGetDevice) R(cuCtxSynchronize)                \
    R(cuStreamCreate) R(cuStreamDestroy_v2) R(cuStreamSynchronize)             \
    R(cuStreamWaitEvent) R(cuStreamIsCapturing) R(cuEventCreate)               \
    R(cuEventDestroy_v2) R(cuEventRecord) R(cuEventSynchronize)                \
    R(cuEventQuery) O(cuThreadExchangeStreamCaptureMode)                       \
    R(cuMemAddressReserve) R(cuMemAddressFree) R(cuMemCreate) R(cuMemRelease)  \
    R(cuMemMap) R(cuMemUnmap) R(cuMemSetAccess) R(cuMemGetAllocationGranularity)\
    O(cuMemRetainAllocationHandle) O(cuMemGetAllocationPropertiesFromHandle)   \
    O(cuFuncGetParamInfo) O(cuKernelGetParamInfo)                              \
    O(cuMemExportToShareableHandle) O(cuMemImportFromShareableHandle)          \
    O(cuGetProcAddress) O(cuGetProcAddress_v2)                                 \
    O(cuDeviceGetMemPool) O(cuDeviceGetDefaultMemPool) O(cuDeviceSetMemPool)    \
    O(cuMemPoolGetAccess)                                                      \
    O(cuStreamGetId) O(cuMemHostRegister_v2) O(cuMemHostUnregister)          \
    O(cuArray3DGetDescriptor_v2)

/* Entry points the preload layer replaces by a hook of the same name
 * (besides the two resolvers above; cuMemCreate and cuMemRelease, which
 * count the device memory a program creates itself: preload/hooks_vmm.c;
 * cuStreamDestroy_v2, whose handle a new stream may reuse:
 * preload/hooks_stream.c; and the synchronize calls, at which the default
 * pools settle their frees: preload/hooks_sync.c):
 * always ... */
#define GVM_DRIVER_SERVED(R, O)                                                \
    O(cuMemAlloc_v2) O(cuMemAllocPitch_v2) O(cuMemFree_v2) O(cuMemGetInfo_v2)  \
    O(cuMemGetAddressRange_v2) O(cuPointerGetAttribute)                        \
    O(cuPointerGetAttributes) O(cuCtxEnablePeerAccess) O(cuCtxDisablePeerAccess) \
    O(cuMemAllocAsync) O(cuMemAllocAsync_ptsz)                                 \
    O(cuDevicePrimaryCtxReset) O(cuDevicePrimaryCtxReset_v2)                   \
    O(cuCtxDestroy) O(cuCtxDestroy_v2)                                         \
    O(cuMemAllocFromPoolAsync) O(cuMemAllocFromPoolAsync_ptsz)                 \
    O(cuMemFreeAsync) O(cuMemFreeAsync_ptsz) O(cuMemPoolSetAccess)             \
    O(cuMemPoolGetAttribute) O(cuMemPoolSetAttribute) O(cuMemPoolTrimTo)      \
    O(cuStreamSynchronize_ptsz) O(cuCtxSynchronize_v2)                         \
    O(cuMemcpy) O(cuMemcpy_ptds) O(cuMemcpyAsync) O(cuMemcpyAsync_ptsz)        \
    O(cuMemcpyPeer) O(cuMemcpyPeer_ptds) O(cuMemcpyPeerAsync)                  \
    O(cuMemcpyPeerAsync_ptsz) O(cuMemcpyHtoD_v2) O(cuMemcpyHtoD_v2_ptds)       \
    O(cuMemcpyDtoH_v2) O(cuMemcpyDtoH_v2_ptds) O(cuMemcpyDtoD_v2)              \
    O(cuMemcpyDtoD_v2_ptds) O(cuMemcpyDtoA_v2) O(cuMemcpyDtoA_v2_ptds)         \
    O(cuMemcpyAtoD_v2) O(cuMemcpyAtoD_v2_ptds) O(cuMemcpyHtoDAsync_v2)         \
    O(cuMemcpyHtoDAsync_v2_ptsz) O(cuMemcpyDtoHAsync_v2)                       \
    O(cuMemcpyDtoHAsync_v2_ptsz) O(cuMemcpyDtoDAsync_v2)                       \
    O(cuMemcpyDtoDAsync_v2_ptsz) O(cuMemcpy2D_v2) O(cuMemcpy2D_v2_ptds)        \
    O(cuMemcpy2DUnaligned_v2) O(cuMemcpy2DUnaligned_v2_ptds)                   \
    O(cuMemcpy2DAsync_v2) O(cuMemcpy2DAsync_v2_ptsz) O(cuMemcpy3D_v2)          \
    O(cuMemcpy3D_v2_ptds) O(cuMemcpy3DAsync_v2) O(cuMemcpy3DAsync_v2_ptsz)     \
    O(cuMemcpy3DPeer) O(cuMemcpy3DPeer_ptds) O(cuMemcpy3DPeerAsync)            \
    O(cuMemcpy3DPeerAsync_ptsz) O(cuMemcpyBatchAsync_v2)                       \
    O(cuMemcpyBatchAsync_v2_ptsz) O(cuMemcpyBatchAsync)                        \
    O(cuMemcpyBatchAsync_ptsz) O(cuMemcpy3DBatchAsync_v2)                      \
    O(cuMemcpy3DBatchAsync_v2_ptsz) O(cuMemcpy3DBatchAsync)                    \
    O(cuMemcpy3DBatchAsync_ptsz)                                               \
    O(cuMemsetD8_v2) O(cuMemsetD8_v2_ptds) O(cuMemsetD16_v2)                   \
    O(cuMemsetD16_v2_ptds) O(cuMemsetD32_v2) O(cuMemsetD32_v2_ptds)            \
    O(cuMemsetD2D8_v2) O(cuMemsetD2D8_v2_ptds) O(cuMemsetD2D16_v2)             \
    O(cuMemsetD2D16_v2_ptds) O(cuMemsetD2D32_v2) O(cuMemsetD2D32_v2_ptds)      \
    O(cuMemsetD8Async) O(cuMemsetD8Async_ptsz) O(cuMemsetD16Async)             \
    O(cuMemsetD16Async_ptsz) O(cuMemsetD32Async) O(cuMemsetD32Async_ptsz)      \
    O(cuMemsetD2D8Async) O(cuMemsetD2D8Async_ptsz) O(cuMemsetD2D16Async)       \
    O(cuMemsetD2D16Async_ptsz) O(cuMemsetD2D32Async)                           \
    O(cuMemsetD2D32Async_ptsz)                                                 \
    GVM_DRIVER_SERVED_MEMOPS(R, O) GVM_DRIVER_SERVED_IPC(R, O)                 \
    O(cuCtxCreate) O(cuCtxCreate_v2) O(cuCtxCreate_v3) O(cuCtxCreate_v4)       \
    O(cuTexObjectCreate) O(cuTensorMapEncodeTiled) O(cuTensorMapEncodeIm2col)  \
    O(cuTensorMapEncodeIm2colWide) O(cuTensorMapReplaceAddress)

/* Stream memory operations (preload/hooks_memop.c): each reaches 4 or 8
 * bytes of device memory, like a tiny copy. */
#define GVM_DRIVER_SERVED_MEMOPS(R, O)                                         \
    O(cuStreamWriteValue32) O(cuStreamWriteValue32_ptsz)                       \
    O(cuStreamWaitValue32) O(cuStreamWaitValue32_ptsz)                         \
    O(cuStreamWriteValue64) O(cuStreamWriteValue64_ptsz)                       \
    O(cuStreamWaitValue64) O(cuStreamWaitValue64_ptsz)                         \
    O(cuStreamBatchMemOp) O(cuStreamBatchMemOp_ptsz)                           \
    O(cuStreamWriteValue32_v2) O(cuStreamWriteValue32_v2_ptsz)                 \
    O(cuStreamWaitValue32_v2) O(cuStreamWaitValue32_v2_ptsz)                   \
    O(cuStreamWriteValue64_v2) O(cuStreamWriteValue64_v2_ptsz)                 \
    O(cuStreamWaitValue64_v2) O(cuStreamWaitValue64_v2_ptsz)                   \
    O(cuStreamBatchMemOp_v2) O(cuStreamBatchMemOp_v2_ptsz)

/* Legacy CUDA IPC on gvmshim memory (preload/hooks_ipc.c): the memory
 * handle calls. cuIpcOpenMemHandle is the legacy symbol of the _v2 ABI;
 * event IPC is not hooked. */
#define GVM_DRIVER_SERVED_IPC(R, O)                                            \
    O(cuIpcGetMemHandle) O(cuIpcOpenMemHandle) O(cuIpcOpenMemHandle_v2)        \
    O(cuIpcCloseMemHandle)

/* ... and kernel launches, replaced only while the policy tracks recency
 * (otherwise the program keeps the driver's own function, at no cost). */
#define GVM_DRIVER_LAUNCH(R, O)                                                \
    O(cuLaunchKernel) O(cuLaunchKernel_ptsz) O(cuLaunchKernelEx)               \
    O(cuLaunchKernelEx_ptsz) O(cuLaunchCooperativeKernel)                      \
    O(cuLaunchCooperativeKernel_ptsz) O(cuGraphLaunch) O(cuGraphLaunch_ptsz)

/* ---- stream capture (preload/hooks_capture.c) ----
 * The begin and end of every capture are interposed so the core knows when
 * a device-wide wait would break one (core/capture.h); the stream's context
 * tells which device a capture is on. */
#define GVM_DRIVER_CAPTURE_USED(R, O) O(cuStreamGetCtx)
#define GVM_DRIVER_CAPTURE(R, O)                                               \
    O(cuStreamBeginCapture) O(cuStreamBeginCapture_ptsz)                       \
    O(cuStreamBeginCapture_v2) O(cuStreamBeginCapture_v2_ptsz)                 \
    O(cuStreamBeginCaptureToGraph) O(cuStreamBeginCaptureToGraph_ptsz)         \
    O(cuStreamEndCapture) O(cuStreamEndCapture_ptsz)

#define GVM_DRIVER_HOOKED(R, O) GVM_DRIVER_SERVED(R, O) GVM_DRIVER_CAPTURE(R, O) GVM_DRIVER_LAUNCH(R, O)
#define GVM_DRIVER_ALL(R, O) GVM_DRIVER_CORE(R, O) GVM_DRIVER_CAPTURE_USED(R, O) GVM_DRIVER_HOOKED(R, O)

#endif
