/* Whether the core serves: not started yet, serving, or off (disabled, or
 * its start failed). Every hooked call asks, and so do core files on every
 * floor (a fault handler, the host pool's filler): the flag sits below them
 * all, apart from the start-up that sets it (core/core.c). */
#ifndef GVM_CORE_STATE_H
#define GVM_CORE_STATE_H

#include <stdbool.h>

/* 0 not started, 1 serving, -1 off (core_state.c). */
extern int gvm_core_state;

/* True once gvm_core_start succeeded. Inline: every hooked call asks. */
static inline bool gvm_core_active(void) { return __atomic_load_n(&gvm_core_state, __ATOMIC_ACQUIRE) > 0; }

/* True when the core will not serve: disabled, or its start failed
 * (rather than not started yet). */
bool gvm_core_off(void);

/* Marks the core serving, or off (disabled, or start failed). */
void gvm_core_set_active(bool on);

#endif
