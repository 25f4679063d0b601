/* CUDA IPC, the exporter (preload/ipc.h): a registry of exported
 * allocations, each with its pieces' descriptors (exported at
 * cuIpcGetMemHandle) and its importers' leases, served from the import
 * socket's thread (ctl/server.h) to whoever presents an allocation's
 * secret, whatever its user.
 *
 * Locks: reg_lock guards the registry and is held only for list and
 * counter updates (the server thread takes it; it never waits on the core).
 * Export and free hold the region's lock first, then reg_lock; the server
 * never takes a region's lock: what needs one (dropping a freed chunk
 * slot's hold) goes to the control worker thread. */
#define _GNU_SOURCE
#include "preload/ipc.h"

#include "core/log.h"
#include "core/share.h"
#include "ctl/server.h"
#include "preload/shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct export {
    uint8_t id[GVM_IPC_SECRET];    /* the secret: 128 random bits */
    struct gvm_region *region;
    int slot;
    uint64_t buffer_id;
    uint8_t handle[CU_IPC_HANDLE_SIZE];
    uint64_t extent;
    int npieces;
    int *fds;                /* NULL once revoked and not being sent */
    uint64_t *sizes;
    int leases;              /* importers holding it open (connections) */
    int sending;             /* replies under way */
    bool revoked;            /* the program freed it: no new opens */
    struct export *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct export *exports;
static int live_leases;

/* ---- the registry (reg_lock held) ------------------------------------- */

static struct export *find_alloc(const struct gvm_region *r, int slot, uint64_t buffer_id)
{
    for (struct export *e = exports; e; e = e->next)
        if (e->region == r && e->slot == slot && e->buffer_id == buffer_id && !e->revoked) return e;
    return NULL;
}

/* In constant time: how long a comparison takes must not tell a guesser
 * how many of its bytes were right. */
static bool same_secret(const uint8_t *a, const uint8_t *b)
{
    volatile uint8_t d = 0;
    for (int i = 0; i < GVM_IPC_SECRET; i++) d |= a[i] ^ b[i];
    return d == 0;
}

/* Every export is compared, match or not, so the time taken depends on
 * their number only. */
static struct export *find_id(const uint8_t id[GVM_IPC_SECRET])
{
    struct export *hit = NULL;
    for (struct export *e = exports; e; e = e->next)
        if (same_secret(e->id, id) && !e->revoked) hit = e;
    return hit;
}

static void unlink_export(struct export *e)
{
    struct export **pp = &exports;
    while (*pp && *pp != e) pp = &(*pp)->next;
    if (*pp) *pp = e->next;
}

/* A revoked export's descriptors go once no reply is sending them; the
 * caller closes what this returns, after unlocking. */
static struct gvm_share take_fds(struct export *e)
{
    struct gvm_share s = {0};
    if (e->revoked && !e->sending && e->fds) {
        s.fds = e->fds;
        s.sizes = e->sizes;
        s.npieces = e->npieces;
        e->fds = NULL;
        e->sizes = NULL;
    }
    return s;
}

/* ---- the end of an export ---------------------------------------------- */

static void release_slot(void *arg)
{
    struct export *e = arg;
    gvm_share_release(e->region, e->slot);
    free(e);
}

/* The last lease of a revoked export is gone: the export goes, and with it
 * the hold of its chunk slot (on the worker: it takes the region's lock). */
static void lease_end(void *arg)
{
    struct export *e = arg;
    pthread_mutex_lock(&reg_lock);
    e->leases--;
    live_leases--;
    bool gone = e->revoked && !e->leases && !e->sending;
    if (gone) unlink_export(e);
    struct gvm_share s = take_fds(e);
    pthread_mutex_unlock(&reg_lock);
    gvm_share_drop_fds(&s);
    if (!gone) return;
    if (e->slot >= 0)
        gvm_ctl_defer(release_slot, e);
    else
        free(e);
}

/* Core hook: the program freed an allocation of a shared region (its
 * region locked). */
static int freed(struct gvm_region *r, int slot, uint64_t buffer_id)
{
    pthread_mutex_lock(&reg_lock);
    struct export *e = find_alloc(r, slot, buffer_id);
    if (!e) {
        pthread_mutex_unlock(&reg_lock);
        return GVM_SHARE_NONE;
    }
    e->revoked = true;
    bool gone = !e->leases;   /* no lease, so no reply sending either */
    if (gone) unlink_export(e);
    struct gvm_share s = take_fds(e);
    pthread_mutex_unlock(&reg_lock);
    gvm_share_drop_fds(&s);
    if (!gone) return GVM_SHARE_KEEP;
    free(e);
    return GVM_SHARE_RELEASE;
}

/* ---- serving OPEN (the import socket's thread) ---------------------------
 * Any user may connect and ask. Every refusal (a wrong endpoint, a secret
 * no live export has, a request of the wrong shape) is the same reply and
 * leaves no trace in the log: nothing tells a guesser more than "no". */

static void reply_error(struct gvm_ctl_conn *c, CUresult rc)
{
    uint8_t p[GVM_IPC_REPLY_HDR] = {0};
    gvm_put_u32(p, (uint32_t)rc);
    gvm_ctl_reply(c, GVM_CTL_IPC_OPEN, p, sizeof p, NULL, 0);
    gvm_ctl_hangup(c);
}

static void send_pieces(struct gvm_ctl_conn *c, struct export *e)
{
    uint8_t p[GVM_IPC_REPLY_HDR + GVM_IPC_BATCH * 8];
    for (int first = 0; first < e->npieces; first += GVM_IPC_BATCH) {
        int n = e->npieces - first < GVM_IPC_BATCH ? e->npieces - first : GVM_IPC_BATCH;
        gvm_put_u32(p, CUDA_SUCCESS);
        gvm_put_u32(p + 4, (uint32_t)e->npieces);
        gvm_put_u32(p + 8, (uint32_t)first);
        gvm_put_u32(p + 12, (uint32_t)n);
        gvm_put_u64(p + 16, e->extent);
        for (int i = 0; i < n; i++) gvm_put_u64(p + GVM_IPC_REPLY_HDR + 8 * i, e->sizes[first + i]);
        if (gvm_ctl_reply(c, GVM_CTL_IPC_OPEN, p, GVM_IPC_REPLY_HDR + 8 * (size_t)n, e->fds + first, n)) return;
    }
}

static void serve_open(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m)
{
    if (m->len != GVM_IPC_OPEN_LEN || gvm_get_u64(m->payload) != gvm_ctl_import_endpoint()) {
        reply_error(c, CUDA_ERROR_INVALID_VALUE);
        return;
    }
    pthread_mutex_lock(&reg_lock);
    struct export *e = find_id(m->payload + 8);
    if (e && !gvm_ctl_lease(c, lease_end, e)) e = NULL;   /* one open per connection */
    if (e) {
        e->leases++;
        e->sending++;
        live_leases++;
    }
    pthread_mutex_unlock(&reg_lock);
    if (!e) {
        reply_error(c, CUDA_ERROR_INVALID_VALUE);
        return;
    }
    send_pieces(c, e);   /* e->fds stay while sending > 0 */
    pthread_mutex_lock(&reg_lock);
    e->sending--;
    struct gvm_share s = take_fds(e);
    pthread_mutex_unlock(&reg_lock);
    gvm_share_drop_fds(&s);
}

/* ---- exporting (program threads) --------------------------------------- */

static void reg_fork_prepare(void) { pthread_mutex_lock(&reg_lock); }
static void reg_fork_parent(void) { pthread_mutex_unlock(&reg_lock); }

/* A forked child exports nothing and must not keep the parent's memory
 * alive through inherited descriptors. */
static void reg_fork_child(void)
{
    for (struct export *e = exports; e;) {
        struct export *next = e->next;
        for (int i = 0; e->fds && i < e->npieces; i++) close(e->fds[i]);
        free(e->fds);
        free(e->sizes);
        free(e);
        e = next;
    }
    exports = NULL;
    live_leases = 0;
    pthread_mutex_init(&reg_lock, NULL);
}

static void setup(void)
{
    gvm_share_freed_hook = freed;
    gvm_ctl_register_import(GVM_CTL_IPC_OPEN, serve_open);
    pthread_atfork(reg_fork_prepare, reg_fork_parent, reg_fork_child);
}

/* 128 bits from the kernel's generator: the capability an importer must
 * present. Without them there is no export (a guessable id would let any
 * user of the network namespace map the memory). */
static bool new_secret(uint8_t out[GVM_IPC_SECRET])
{
    size_t got = 0;
    while (got < GVM_IPC_SECRET) {
        ssize_t n = getrandom(out + got, GVM_IPC_SECRET - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        got += (size_t)n;
    }
    return true;
}

static struct export *new_export(struct gvm_share *s, uint64_t endpoint, CUresult *rc)
{
    struct export *e = calloc(1, sizeof *e);
    *rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!e) return NULL;
    if (!new_secret(e->id)) {
        gvm_warn("cannot export for CUDA IPC: no random bytes from getrandom: %s", strerror(errno));
        free(e);
        *rc = CUDA_ERROR_OPERATING_SYSTEM;
        return NULL;
    }
    e->region = s->region;
    e->slot = s->slot;
    e->buffer_id = s->buffer_id;
    e->extent = s->extent;
    e->npieces = s->npieces;
    e->fds = s->fds;
    e->sizes = s->sizes;
    struct gvm_ipc_handle h = {.endpoint = endpoint, .offset = s->offset, .size = s->size,
                               .extent = s->extent, .npieces = (uint32_t)s->npieces};
    memcpy(h.id, e->id, sizeof h.id);
    gvm_ipc_encode(&h, e->handle);
    *rc = CUDA_SUCCESS;
    return e;
}

CUresult gvm_ipc_export(CUipcMemHandle *out, CUdeviceptr p)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup);
    struct gvm_share s;
    CUresult rc = gvm_share_lock((uintptr_t)p, &s);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&reg_lock);
    struct export *e = find_alloc(s.region, s.slot, s.buffer_id);
    if (e) memcpy(out->reserved, e->handle, sizeof e->handle);   /* the same handle every time */
    pthread_mutex_unlock(&reg_lock);
    if (e) {
        gvm_share_unlock(&s);
        return CUDA_SUCCESS;
    }
    int err = gvm_ctl_start_import();
    if (err) {
        gvm_share_unlock(&s);
        gvm_warn("cannot serve CUDA IPC: import socket: %s", strerror(-err));
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    rc = gvm_share_export(&s);
    if (rc == CUDA_SUCCESS && !(e = new_export(&s, gvm_ctl_import_endpoint(), &rc))) gvm_share_unexport(&s);
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&reg_lock);
        e->next = exports;
        exports = e;
        pthread_mutex_unlock(&reg_lock);
        memcpy(out->reserved, e->handle, sizeof e->handle);
        gvm_stat_inc(ipc_exports);
        gvm_debug("ipc: exported %#lx (%zu bytes, %d pieces)", (unsigned long)p, s.size, s.npieces);
    }
    gvm_share_unlock(&s);
    return rc;
}

/* What CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE answers for gvmshim
 * memory (preload/hooks_query.c): whether cuIpcGetMemHandle can export it.
 * Host-resident memory can (it comes home first), paused memory cannot. */
bool gvm_ipc_capable(const struct gvm_ref *ref)
{
    const struct gvm_region *r = ref->region;
    return gvm_drv.cuMemExportToShareableHandle && gvm_topo.dev[r->device].posix_fd &&
           !(GVM_LOAD(r->flags) & GVM_RF_PAUSED);
}

/* Diagnostics (not in gvmshim.h): exported allocations and the leases
 * importers hold on them. */
GVM_EXPORT void gvm_ipc_counts(int *exported, int *leases)
{
    pthread_mutex_lock(&reg_lock);
    int n = 0;
    for (struct export *e = exports; e; e = e->next) n++;
    if (exported) *exported = n;
    if (leases) *leases = live_leases;
    pthread_mutex_unlock(&reg_lock);
}
