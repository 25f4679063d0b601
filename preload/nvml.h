/* What NVML says the process uses on each device, for the exit summary:
 * beside what gvmshim holds, it shows the memory gvmshim does not control
 * (the CUDA context, libraries' own cuMemCreate, NCCL buffers). */
#ifndef GVM_NVML_H
#define GVM_NVML_H

#include "core/driver.h"

#include <stdbool.h>
#include <stdint.h>

/* Fills used[0..ndev) with this process's memory on each CUDA device, as
 * NVML reports it (symbols found with `lookup`, the real dlsym). False (used untouched) when NVML cannot be loaded or
 * does not see this process: the summary then leaves the figures out. */
bool gvm_nvml_process_used(int ndev, gvm_symbol_lookup lookup, int64_t *used);

#endif
