/* Test-control API of the simulated CUDA driver (tests/sim/libcuda.so.1).
 *
 * The CPU test suite runs gvmshim against this library instead of the real
 * libcuda. Tests reach these functions by linking the sim or by dlsym() on
 * its handle. Every function here is thread-safe, but the ones documented
 * as "between tests" must not race with driver calls. */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include "../../core/cuda_api.h"

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Physical location of memory for the accounting queries. */
#define SIMCUDA_LOC_HOST (-1)     /* host / host-NUMA located physical memory */
#define SIMCUDA_LOC_UNMAPPED (-2) /* simcuda_location_of(): nothing mapped */
#define SIMCUDA_CPU_BIT (1u << 31) /* simcuda_access_mask(): CPU access */

/* Fault injection. Both are one-shot; an injected failure has no side
 * effect (outputs untouched). */
/* The n-th next call (1-based) to any cu* entry point fails with err;
 * n = 0 cancels. */
void simcuda_fail_nth(unsigned long n, CUresult err);
/* Like simcuda_fail_nth, counting only the calling thread's calls: the
 * same call fails every run, whatever other threads call meanwhile. */
void simcuda_fail_nth_here(unsigned long n, CUresult err);
/* The nth next call of the entry point with that ELF name ("cuMemMap",
 * "cuMemcpyHtoD_v2_ptds") fails with err; nth = 0 cancels. An unknown name
 * aborts the test, so a typo cannot pass silently. */
void simcuda_fail_call(const char *name, unsigned long nth, CUresult err);
/* Like simcuda_fail_call, but the nth next call and the times-1 calls of
 * that entry point after it all fail (a fault that a retry does not cure). */
void simcuda_fail_calls(const char *name, unsigned long nth, unsigned long times, CUresult err);

/* As a driver whose exit handlers ran (at exit, before the program's
 * static destructors and whatever else runs after them): from now on
 * every call but the ones that need no driver (error names, entry-point
 * lookups, the version) answers CUDA_ERROR_DEINITIALIZED. simcuda_reset
 * revives it. */
void simcuda_shut_down(void);

/* Call counters, injected failures included. */
unsigned long simcuda_call_count(void);
unsigned long simcuda_calls_of(const char *name); /* 0 for unknown names */
/* The calling thread's calls since it last reset the counts. */
unsigned long simcuda_call_count_here(void);
void simcuda_reset_counts(void);

/* Leak accounting. */
size_t simcuda_phys_bytes(int location); /* live cuMemCreate bytes there */
long simcuda_live_handles(void);      /* physical allocations not yet freed */
long simcuda_live_reservations(void); /* cuMemAddressReserve ranges */
long simcuda_live_mappings(void);     /* cuMemMap ranges, orphans included */
long simcuda_orphan_mappings(void);   /* mappings whose reservation was freed under them */
long simcuda_live_native(void);       /* cuMemAlloc* allocations */
size_t simcuda_registered_bytes(void); /* cuMemHostRegister'd bytes */
/* Every live reservation, handle and mapping, one line each: what a leak
 * check prints when it fails. */
void simcuda_dump_live(FILE *out);

/* What the "hardware" sees at an address. */
int simcuda_access_mask(CUdeviceptr p); /* bit per device, SIMCUDA_CPU_BIT */
int simcuda_location_of(CUdeviceptr p); /* ordinal, LOC_HOST or LOC_UNMAPPED */

/* Kernels in flight (SIMCUDA_KERNELS_IN_FLIGHT=1, or =fatal to abort at the
 * first hazard, or set here any time: 1 counts):
 * a launch counts as running until a synchronize of its stream or
 * context, or of an event recorded after it, covers it; an unmap of
 * memory such a kernel was given a pointer into is counted here (and
 * named on stderr), as on a GPU that kernel would die. */
void simcuda_set_kernels_in_flight(int on);   /* simcuda_reset forgets both */
unsigned long simcuda_unmapped_in_flight(void);

/* Configuration. Environment (read at first use) gives the defaults:
 * SIMCUDA_DEVICES (2), SIMCUDA_MEM ("256M" or "0:64M,1:128M"),
 * SIMCUDA_HOST_MEM ("1G"), SIMCUDA_NO_VMM=1, SIMCUDA_NO_PEER=1, SIMCUDA_PEER_PCIE=1,
 * SIMCUDA_TRACE=1, SIMCUDA_CPU_FAULTS=1, SIMCUDA_HOST_CREATE_US (a host cuMemCreate's
 * length, lock held, as a GPU's driver holds itself while it pins). */
void simcuda_set_capacity(int location, size_t bytes); /* any time */
void simcuda_set_devices(int n);  /* before cuInit or after simcuda_reset */
void simcuda_set_vmm(int supported);   /* like SIMCUDA_NO_VMM; any time */
void simcuda_set_peer(int supported);  /* like SIMCUDA_NO_PEER; any time */
/* Host cuMemCreate takes create_us holding the driver (as SIMCUDA_HOST_CREATE_US);
 * a host piece's cuMemRelease takes release_us after letting it go. Any time. */
void simcuda_set_host_pin_us(unsigned create_us, unsigned release_us);
/* Peers joined by PCIe (no native atomics between them) rather than by
 * NVLink, as cuDeviceGetP2PAttribute answers; like SIMCUDA_PEER_PCIE=1. */
void simcuda_set_peer_pcie(int pcie);
/* As on a GPU: a CPU touch of host-located memory mapped without CPU
 * access faults (SIGSEGV), while copies, sets and the device side keep
 * working. Off by default (any granted access makes the pages readable).
 * Like SIMCUDA_CPU_FAULTS=1; applies to access set after the call. */
void simcuda_set_cpu_faults(int on);
/* Between tests: frees every object, forgets cuInit, clears counters and
 * armed faults, and empties every thread's context stack. Configuration
 * and fake kernels survive. */
void simcuda_reset(void);

/* Prints every call and its result to stderr. */
void simcuda_trace(int on);

/* A fake kernel: cuLaunchKernel* calls body(kernelParams) synchronously.
 * param_sizes gives the size of each parameter (for cuFuncGetParamInfo and
 * the CU_LAUNCH_PARAM_BUFFER_POINTER form); body may be NULL. The handle
 * stays valid for the life of the process and is also a valid CUkernel. */
CUfunction simcuda_function(void (*body)(void **params), unsigned nparams,
                            const size_t *param_sizes);

#ifdef __cplusplus
}
#endif

#endif
