#include "core/core_state.h"

int gvm_core_state;   /* 0 not started, 1 serving, -1 off */

bool gvm_core_off(void) { return __atomic_load_n(&gvm_core_state, __ATOMIC_ACQUIRE) < 0; }

void gvm_core_set_active(bool on) { __atomic_store_n(&gvm_core_state, on ? 1 : -1, __ATOMIC_RELEASE); }
