/* Where a process's allocations are, per device they were allocated on:
 * at home, on a peer device, on the host. For live views (gvmctl), not for
 * decisions: it locks every region in turn, so it is not cheap. */
#ifndef GVM_WHERE_H
#define GVM_WHERE_H

#include <stddef.h>

struct gvm_where {
    size_t home, peer, host;    /* physical bytes */
};

/* Fills out[0 .. ndev) (zeroed first). */
void gvm_heap_where(struct gvm_where *out, int ndev);

#endif
