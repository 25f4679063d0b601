/* Freed memory kept for reuse goes back to the device once it has been
 * idle for cache_idle: natively a free gives memory back at once, so
 * nvidia-smi and other processes on the GPU see it go. */
#ifndef GVM_POLICY_IDLE_H
#define GVM_POLICY_IDLE_H

/* Starts the background thread that gives it back (policy/idle.c), once;
 * called at the program's frees. */
void gvm_idle_start(void);

#endif
