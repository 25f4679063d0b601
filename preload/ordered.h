/* The stream-ordered allocations gvmshim serves for the devices' default
 * pools, by pointer: natively they are the pool's, and programs read the
 * pool's use from its attributes (PyTorch's cudaMallocAsync backend reports
 * them as reserved memory, CuPy's async pool as its used bytes), so the
 * hooks of cuMemPoolGetAttribute add them in (hooks_mem.c). */
#ifndef GVM_PRELOAD_ORDERED_H
#define GVM_PRELOAD_ORDERED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A stream-ordered allocation of bytes on dev, served at p. */
void gvm_ordered_note(uintptr_t p, int dev, size_t bytes);

/* p is freed (by any free call): forgotten if it was one. Costs one load
 * while no stream-ordered allocation is live. */
void gvm_ordered_forget(uintptr_t p);

/* Bytes live on dev now, and the most at once since the start or the
 * last reset (cuMemPoolSetAttribute of a high-water mark to 0). */
uint64_t gvm_ordered_bytes(int dev);
uint64_t gvm_ordered_high(int dev);
void gvm_ordered_reset_high(int dev);

#endif
