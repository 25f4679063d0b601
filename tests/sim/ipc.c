/* Sharing memory between processes.
 *
 * VMM handles are memfds (vmm.c), so sharing is real: exporting a handle
 * as a POSIX file descriptor dups its memfd, and importing a descriptor
 * (received from another process over a Unix socket) makes a handle over
 * the same pages. The memfd's name tells the importer where the memory
 * lives; the importing process is not charged for it.
 *
 * Legacy IPC on native (cuMemAlloc) memory: natives are private anonymous
 * mappings, so no other process can open them. cuIpcGetMemHandle gives a
 * handle, cuIpcOpenMemHandle refuses every handle it did not map and
 * cuIpcCloseMemHandle every pointer (nothing is ever open), which is what
 * a program sees for a stale handle: enough to check that handles and
 * pointers that are not gvmshim's reach the driver untouched. */
#define _GNU_SOURCE
#include "sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shareable handles -------------------------------------------------- */

static CUresult sim_export(void *out, CUmemGenericAllocationHandle id,
                           CUmemAllocationHandleType type, unsigned long long flags)
{
    struct sim_handle *h = sim_handle_find(id);
    if (!out || !h || !h->refs || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* not requested at cuMemCreate */
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    SIM_API(cuMemExportToShareableHandle, SIM_READ,
            sim_export(shareableHandle, handle, handleType, flags));
}

/* The location a simcuda memfd was created at, or -3 when fd is not one. */
static int sim_memfd_location(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -3;
    target[n] = 0;
    const char *prefix = "/memfd:" SIM_MEMFD_PREFIX;
    if (strncmp(target, prefix, strlen(prefix)) != 0)
        return -3;
    char *end;
    long loc = strtol(target + strlen(prefix), &end, 10);
    if (end == target + strlen(prefix) || (*end && *end != ' '))
        return -3;
    if (loc != SIMCUDA_LOC_HOST && !sim_dev_valid((int)loc))
        return -3;
    return (int)loc;
}

static CUresult sim_import(CUmemGenericAllocationHandle *out, void *os_handle,
                           CUmemAllocationHandleType type)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = (int)(intptr_t)os_handle;
    struct stat st;
    int loc = sim_memfd_location(fd);
    if (loc == -3 || fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % SIM_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_handle *h = calloc(1, sizeof *h);
    if (!h || sim_vec_push(&sim.handles, h)) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* the caller closes its fd */
    if (own < 0) {
        sim_vec_remove(&sim.handles, h);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    prop.location.type = loc == SIMCUDA_LOC_HOST ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                                 : CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = loc == SIMCUDA_LOC_HOST ? 0 : loc;
    *h = (struct sim_handle){sim_new_id(), (size_t)st.st_size, loc, own, prop, 1, 0, 1};
    *out = h->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    SIM_API(cuMemImportFromShareableHandle, SIM_WRITE, sim_import(handle, osHandle, shHandleType));
}

/* ---- legacy IPC on native memory -------------------------------------- */

static const char sim_ipc_magic[8] = "SIMIPC01";

static CUresult sim_ipc_get(CUipcMemHandle *out, CUdeviceptr p)
{
    struct sim_native *n = sim_native_at((uintptr_t)p);
    /* A default pool's memory is not legacy IPC's (two H100s, driver 580). */
    if (!out || !n || n->base != (uintptr_t)p || n->pooled)
        return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, sim_ipc_magic, sizeof sim_ipc_magic);
    memcpy(out->reserved + 8, &n->id, sizeof n->id);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    SIM_API(cuIpcGetMemHandle, SIM_READ, sim_ipc_get(pHandle, dptr));
}

static CUresult sim_ipc_open(CUdeviceptr *out, unsigned flags)
{
    if (!out || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_need_ctx(NULL);
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    (void)handle;
    SIM_API(cuIpcOpenMemHandle, SIM_READ, sim_ipc_open(pdptr, Flags));
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    (void)handle;
    SIM_API(cuIpcOpenMemHandle_v2, SIM_READ, sim_ipc_open(pdptr, Flags));
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    (void)dptr;
    SIM_API(cuIpcCloseMemHandle, SIM_READ, CUDA_ERROR_INVALID_VALUE);
}

/* Event IPC is not gvmshim's business: present so a test can check that
 * it is left to the driver. */
static CUresult sim_event_get(CUipcEventHandle *out, CUevent e)
{
    if (!out || !e)
        return CUDA_ERROR_INVALID_HANDLE;
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, "SIMEVT01", 8);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    SIM_API(cuIpcGetEventHandle, SIM_READ, sim_event_get(pHandle, event));
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    (void)handle;
    SIM_API(cuIpcOpenEventHandle, SIM_READ, phEvent ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE);
}
