/* NVML is opened only here, at exit, and only when stats are asked for:
 * no link dependency, and any failure leaves the figures out. A CUDA
 * ordinal is matched to its NVML device by PCI bus id (the two number
 * devices differently when CUDA_VISIBLE_DEVICES is set). */
#define _GNU_SOURCE
#include "preload/nvml.h"

#include "core/driver.h"
#include "core/location.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

typedef int nvml_return;
typedef void *nvml_device;

/* nvmlProcessInfo_v2_t, what the _v2 and _v3 process queries fill. */
struct nvml_process {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
};

#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ull)
#define MAX_PROCESSES 1024

struct nvml {
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*by_bus_id)(const char *bus_id, nvml_device *dev);
    nvml_return (*processes)(nvml_device dev, unsigned *count, struct nvml_process *out);
};

static bool nvml_open(gvm_symbol_lookup lookup, void *lib, struct nvml *n)
{
    n->init = (nvml_return(*)(void))lookup(lib, "nvmlInit_v2");
    n->shutdown = (nvml_return(*)(void))lookup(lib, "nvmlShutdown");
    n->by_bus_id = (nvml_return(*)(const char *, nvml_device *))lookup(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    void *p = lookup(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!p) p = lookup(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    n->processes = (nvml_return(*)(nvml_device, unsigned *, struct nvml_process *))p;
    return n->init && n->shutdown && n->by_bus_id && n->processes && n->init() == NVML_SUCCESS;
}

/* This process's bytes on one device: -1 when NVML cannot say, 0 when the
 * process is not listed there. *seen tells whether it was. */
static int64_t used_on(gvm_symbol_lookup lookup, const struct nvml *n, int dev, bool *seen)
{
    typedef CUresult (*bus_id_fn)(char *, int, CUdevice);
    bus_id_fn bus_id = (bus_id_fn)lookup(gvm_driver_handle(), "cuDeviceGetPCIBusId");
    char id[32];
    nvml_device h;
    if (!bus_id || bus_id(id, (int)sizeof id, dev) != CUDA_SUCCESS || n->by_bus_id(id, &h) != NVML_SUCCESS) return -1;
    static struct nvml_process procs[MAX_PROCESSES];
    unsigned count = MAX_PROCESSES;
    if (n->processes(h, &count, procs) != NVML_SUCCESS) return -1;
    for (unsigned i = 0; i < count; i++) {
        if (procs[i].pid != (unsigned)getpid()) continue;
        if (procs[i].used == NVML_VALUE_NOT_AVAILABLE) return -1;
        *seen = true;
        return (int64_t)procs[i].used;
    }
    return 0;
}

bool gvm_nvml_process_used(int ndev, gvm_symbol_lookup lookup, int64_t *used)
{
    if (ndev <= 0 || !gvm_driver_handle()) return false;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    struct nvml n;
    bool ok = nvml_open(lookup, lib, &n), seen = false;
    int64_t got[GVM_MAX_DEVICES];
    if (ok) {
        for (int d = 0; ok && d < ndev; d++) ok = (got[d] = used_on(lookup, &n, d, &seen)) >= 0;
        n.shutdown();
    }
    dlclose(lib);
    /* Listed nowhere: NVML sees another pid namespace; its figures are not ours. */
    if (!ok || !seen) return false;
    memcpy(used, got, (size_t)ndev * sizeof *used);
    return true;
}
