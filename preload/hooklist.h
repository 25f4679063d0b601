/* Every entry point the preload layer replaces. H: always; L: kernel
 * launches, replaced only while the policy tracks recency (otherwise the
 * program keeps the driver's own function, at no cost). */
#ifndef GVM_HOOKLIST_H
#define GVM_HOOKLIST_H

#define GVM_HOOKS(H, L)                                                        \
    H(cuGetProcAddress) H(cuGetProcAddress_v2)                                 \
    H(cuMemAlloc_v2) H(cuMemAllocPitch_v2) H(cuMemFree_v2) H(cuMemGetInfo_v2)  \
    H(cuMemGetAddressRange_v2) H(cuPointerGetAttribute)                        \
    H(cuPointerGetAttributes) H(cuMemAllocAsync) H(cuMemAllocAsync_ptsz)       \
    H(cuMemFreeAsync) H(cuMemFreeAsync_ptsz)                                   \
    H(cuMemcpy) H(cuMemcpy_ptds) H(cuMemcpyAsync) H(cuMemcpyAsync_ptsz)        \
    H(cuMemcpyPeer) H(cuMemcpyPeer_ptds) H(cuMemcpyPeerAsync)                  \
    H(cuMemcpyPeerAsync_ptsz) H(cuMemcpyHtoD_v2) H(cuMemcpyHtoD_v2_ptds)       \
    H(cuMemcpyDtoH_v2) H(cuMemcpyDtoH_v2_ptds) H(cuMemcpyDtoD_v2)              \
    H(cuMemcpyDtoD_v2_ptds) H(cuMemcpyDtoA_v2) H(cuMemcpyDtoA_v2_ptds)         \
    H(cuMemcpyAtoD_v2) H(cuMemcpyAtoD_v2_ptds) H(cuMemcpyHtoDAsync_v2)         \
    H(cuMemcpyHtoDAsync_v2_ptsz) H(cuMemcpyDtoHAsync_v2)                       \
    H(cuMemcpyDtoHAsync_v2_ptsz) H(cuMemcpyDtoDAsync_v2)                       \
    H(cuMemcpyDtoDAsync_v2_ptsz) H(cuMemcpy2D_v2) H(cuMemcpy2D_v2_ptds)        \
    H(cuMemcpy2DUnaligned_v2) H(cuMemcpy2DUnaligned_v2_ptds)                   \
    H(cuMemcpy2DAsync_v2) H(cuMemcpy2DAsync_v2_ptsz) H(cuMemcpy3D_v2)          \
    H(cuMemcpy3D_v2_ptds) H(cuMemcpy3DAsync_v2) H(cuMemcpy3DAsync_v2_ptsz)     \
    H(cuMemcpy3DPeer) H(cuMemcpy3DPeer_ptds) H(cuMemcpy3DPeerAsync)            \
    H(cuMemcpy3DPeerAsync_ptsz) H(cuMemcpyBatchAsync_v2)                       \
    H(cuMemcpyBatchAsync_v2_ptsz)                                              \
    H(cuMemsetD8_v2) H(cuMemsetD8_v2_ptds) H(cuMemsetD16_v2)                   \
    H(cuMemsetD16_v2_ptds) H(cuMemsetD32_v2) H(cuMemsetD32_v2_ptds)            \
    H(cuMemsetD2D8_v2) H(cuMemsetD2D8_v2_ptds) H(cuMemsetD2D16_v2)             \
    H(cuMemsetD2D16_v2_ptds) H(cuMemsetD2D32_v2) H(cuMemsetD2D32_v2_ptds)      \
    H(cuMemsetD8Async) H(cuMemsetD8Async_ptsz) H(cuMemsetD16Async)             \
    H(cuMemsetD16Async_ptsz) H(cuMemsetD32Async) H(cuMemsetD32Async_ptsz)      \
    H(cuMemsetD2D8Async) H(cuMemsetD2D8Async_ptsz) H(cuMemsetD2D16Async)       \
    H(cuMemsetD2D16Async_ptsz) H(cuMemsetD2D32Async)                           \
    H(cuMemsetD2D32Async_ptsz)                                                 \
    L(cuLaunchKernel) L(cuLaunchKernel_ptsz) L(cuLaunchKernelEx)               \
    L(cuLaunchKernelEx_ptsz) L(cuLaunchCooperativeKernel)                      \
    L(cuLaunchCooperativeKernel_ptsz) L(cuGraphLaunch) L(cuGraphLaunch_ptsz)

#endif
