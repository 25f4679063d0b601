/* Announcements of a call that names many pointers: the batch copies and
 * batched memory operations. Each entry is checked before the driver runs
 * any, so a batch with one entry past its allocation does nothing, as
 * natively. */
#include "preload/shim.h"

#include <stdlib.h>

bool gvm_shim_uses_open(struct gvm_shim_uses *u, size_t want)
{
    u->r = u->stack;
    u->n = 0;
    u->tick = 0;
    u->bad = false;
    if (want <= GVM_SHIM_USES_STACK) return true;
    /* An array of that many pointers cannot exist. */
    if (want > SIZE_MAX / sizeof *u->r) return false;
    u->r = malloc(want * sizeof *u->r);
    return u->r != NULL;
}

void gvm_shim_uses_add(struct gvm_shim_uses *u, uintptr_t p, size_t n, bool pair)
{
    if (u->bad) return;
    const struct gvm_region *held = pair && u->n ? u->r[u->n - 1] : NULL;
    u->r[u->n] = gvm_shim_use_span(p, n, &u->bad, &u->tick, held);
    u->n++;
}

bool gvm_shim_uses_ours(const struct gvm_shim_uses *u)
{
    for (size_t i = 0; i < u->n; i++)
        if (u->r[i]) return true;
    return false;
}

void gvm_shim_uses_close(struct gvm_shim_uses *u)
{
    for (size_t i = 0; i < u->n; i++) gvm_shim_used_end(u->r[i]);
    if (u->r != u->stack) free(u->r);
    u->r = u->stack;
    u->n = 0;
}
