#include "core/ids.h"

uint64_t gvm_clock;
__thread uint64_t gvm_clock_mine __attribute__((tls_model("initial-exec")));
static uint64_t buffer_ids;

uint64_t gvm_next_buffer_id(void) { return __atomic_add_fetch(&buffer_ids, 1, __ATOMIC_RELAXED); }
