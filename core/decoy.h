/* A range of addresses the driver has never heard of, for pointer queries
 * on addresses gvmshim holds that are in no allocation of the program:
 * freed memory kept in the cache or quarantine, a slot's padding, the tail
 * of a 2 MiB rounding, growth headroom. Natively such an address belongs to
 * no allocation, so the driver's own answer for an unknown address is the
 * native one; asking it at the decoy (same offset modulo 2 MiB) gets that
 * answer, whatever the call, attribute, context or driver version. */
#ifndef GVM_DECOY_H
#define GVM_DECOY_H

#include <stdbool.h>
#include <stdint.h>

#define GVM_DECOY_SIZE ((uintptr_t)2 << 20)

/* Sets the range up (once, at core start); -1 when it cannot be. */
int gvm_decoy_init(void);

/* The decoy address standing in for p. */
uintptr_t gvm_decoy_for(uintptr_t p);

/* An address the driver answered for the decoy of p, as an answer for p:
 * inside the decoy range it is moved back to p's 2 MiB page; any other
 * value (0 included) is left as it is. */
uintptr_t gvm_decoy_restore(uintptr_t v, uintptr_t p);

#endif
