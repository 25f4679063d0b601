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

/* Reserves bytes on dev under its cap before the driver is asked; false
 * (nothing reserved) when the cap would be passed. */
bool gvm_direct_reserve(int dev, size_t bytes);

/* Gives a reservation back: the creation failed, or its handle was
 * released (gvm_direct_forget). */
void gvm_direct_unreserve(int dev, size_t bytes);

/* Records a created handle; false when it cannot be recorded (no memory):
 * the caller then gives the reservation back, as the release could not. */
bool gvm_direct_remember(CUmemGenericAllocationHandle h, int dev, size_t bytes);

/* Removes h from the record; false when h is not there (a handle gvmshim
 * created, one imported from another process, one already released). */
bool gvm_direct_forget(CUmemGenericAllocationHandle h, int *dev, size_t *bytes);

/* Bytes the program holds through its own handles on loc (0 for host). */
size_t gvm_direct_bytes(int loc);
size_t gvm_direct_peak(int loc);   /* the most at once so far */

#endif
