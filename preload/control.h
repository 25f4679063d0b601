/* gvmctl's side in the process: the requests it serves on the control
 * socket (list, stats, pause, resume...). Started with the core. */
#ifndef GVM_PRELOAD_CONTROL_H
#define GVM_PRELOAD_CONTROL_H

/* Registers the requests and opens the socket; 0 or -errno (logged). */
int gvm_control_start(void);

#endif
