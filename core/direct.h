/* Device memory the program creates itself with cuMemCreate (PyTorch's
 * expandable segments, NCCL's cuMem buffers). gvmshim cannot move it: the
 * program holds the handle and maps it where it likes. But it occupies the
 * device all the same, so from its creation to its release it counts under
 * the device's cap (core/held.h) beside gvmshim's own memory: a device
 * limit holds for the process, not only for what gvmshim serves. */
#ifndef GVM_DIRECT_H
#define GVM_DIRECT_H

#include "core/cuda_api.h"

#include <stdbool.h>
#include <stddef.h>

/* Its bytes are reserved in core/held.h before the driver is asked, and
 * given back when the creation fails or the handle is released. */

/* Records a created handle; false when it cannot be recorded (no memory):
 * the caller then gives the reservation back, as the release could not. */
bool gvm_direct_remember(CUmemGenericAllocationHandle h, int dev, size_t bytes);

/* Removes h from the record; false when h is not there (a handle gvmshim
 * created, one imported from another process, one already released). */
bool gvm_direct_forget(CUmemGenericAllocationHandle h, int *dev, size_t *bytes);

/* Bytes the program holds through its own handles on loc (0 for host),
 * counted from the creation's record (gvm_direct_remember) to its release. */
size_t gvm_direct_bytes(int loc);
size_t gvm_direct_peak(int loc);   /* the most at once so far */

#endif
