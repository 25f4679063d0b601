/* Freed memory kept for reuse goes back to the device once it has been
 * idle for cache_idle: natively a free gives memory back at once, so
 * nvidia-smi and other processes on the GPU see it go. */
#ifndef GVM_POLICY_IDLE_H
#define GVM_POLICY_IDLE_H

#include <stdbool.h>

/* Starts the background thread that gives it back (policy/idle.c), once;
 * called at the program's frees. */
void gvm_idle_start(void);

/* Gives back now all the idle memory gvmshim keeps for device (freed
 * allocations cached, pooled pieces), as a trim of its default pool does
 * natively (preload's cuMemPoolTrimTo); after a round under way. */
void gvm_idle_give_back(int device);

/* Waits for a round under way and keeps the next from starting (on), or
 * lets rounds run again (off): a device reset frees the memory itself and
 * must find no round half done. */
void gvm_idle_hold(bool on);

#endif
