/* CUDA IPC, the importer (preload/ipc.h): opens a gvmshim handle by asking
 * the exporter's import socket for the pieces' descriptors, maps them in
 * a range of its own, and counts opens of the same handle in the same
 * device's context. The connection to the exporter stays open while the
 * handle does: it is the lease that tells the exporter the memory is in
 * use. imp_lock serializes opens and closes (program threads only). */
#define _GNU_SOURCE
#include "preload/ipc.h"

#include "core/capture.h"
#include "core/log.h"
#include "ctl/server.h"
#include "preload/shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct import {
    uint64_t endpoint;
    uint8_t id[16];
    CUdevice device;
    CUdeviceptr va;
    size_t extent, offset;
    unsigned refs;
    int conn;
    struct import *next;
};

static pthread_mutex_t imp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct import *imports;

/* The pieces of one open, while they are received and mapped. */
struct pieces {
    int n, got;
    int *fds;
    uint64_t *sizes;
};

static void pieces_free(struct pieces *p)
{
    for (int i = 0; p->fds && i < p->got; i++)
        if (p->fds[i] >= 0) close(p->fds[i]);
    free(p->fds);
    free(p->sizes);
}

/* Asks the exporter for the allocation; fills p. A dead exporter, an
 * unknown or freed allocation and a reply that does not match the handle
 * all read as a handle that is no longer valid. */
static CUresult fetch(int conn, const struct gvm_ipc_handle *h, struct pieces *p)
{
    uint8_t req[GVM_IPC_OPEN_LEN];
    gvm_put_u64(req, h->endpoint);
    memcpy(req + 8, h->id, 16);
    /* A socket that takes the request but never answers (closed at once:
     * what a killed exporter's forked child leaves) is no exporter either:
     * as natively for a handle whose exporter is gone. */
    if (gvm_ctl_send(conn, GVM_CTL_IPC_OPEN, req, sizeof req, NULL, 0, 0)) return CUDA_ERROR_INVALID_HANDLE;
    p->n = (int)h->npieces;
    uint64_t total = 0;
    while (p->got < p->n) {
        uint8_t buf[GVM_CTL_MSG_MAX];
        int fds[GVM_CTL_FDS_MAX], nfds = 0;
        ssize_t len = gvm_ctl_recv(conn, buf, sizeof buf, fds, &nfds, GVM_CTL_FDS_MAX);
        if (len <= 0 && !p->got) return CUDA_ERROR_INVALID_HANDLE;
        struct gvm_ctl_msg m;
        struct gvm_ipc_reply r;
        bool ok = len > 0 && !gvm_ctl_parse(buf, (size_t)len, &m) && m.type == GVM_CTL_IPC_OPEN &&
                  !gvm_ipc_parse_reply(m.payload, m.len, &r) && !r.status && r.total == h->npieces &&
                  r.first == (uint32_t)p->got && r.extent == h->extent && (uint32_t)nfds == r.count;
        /* Memory for the pieces once the exporter confirmed their count: a
         * forged count costs nothing. */
        bool oom = false;
        if (ok && !p->fds) {
            p->fds = malloc((size_t)p->n * sizeof *p->fds);
            p->sizes = malloc((size_t)p->n * sizeof *p->sizes);
            oom = !p->fds || !p->sizes;
            ok = !oom;
        }
        for (int i = 0; i < nfds; i++) {
            if (ok) {
                p->fds[p->got] = fds[i];
                p->sizes[p->got] = gvm_get_u64(r.sizes + 8 * i);
                total += p->sizes[p->got++];
            } else {
                close(fds[i]);
            }
        }
        if (!ok) return oom ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    return total == h->extent ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The devices that get access to a piece located at loc: the opening
 * context's device, and with LAZY_ENABLE_PEER_ACCESS every other device
 * that can reach it. */
static int access_for(CUdevice dev, int loc, unsigned flags, CUmemAccessDesc *d, int max)
{
    int n = 0;
    d[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int count = 0;
    if (!(flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || loc < 0 ||
        GVM_REAL(cuDeviceGetCount)(&count) != CUDA_SUCCESS)
        return n;
    for (int o = 0; o < count && n < max; o++) {
        int can = o == loc;
        if (o == dev || (!can && GVM_REAL(cuDeviceCanAccessPeer)(&can, o, loc) != CUDA_SUCCESS)) continue;
        if (can)
            d[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = o},
                                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    return n;
}

/* Imports piece i, maps it at va and grants access; its handle is released
 * at once (the mapping keeps the memory). */
static CUresult map_piece(struct pieces *p, int i, CUdeviceptr va, CUdevice dev, unsigned flags)
{
    CUmemGenericAllocationHandle h;
    CUresult rc = GVM_REAL(cuMemImportFromShareableHandle)(&h, (void *)(intptr_t)p->fds[i],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(p->fds[i]);
    p->fds[i] = -1;
    if (rc != CUDA_SUCCESS) return rc;
    int loc = -1;
    CUmemAllocationProp prop;
    if (gvm_drv.cuMemGetAllocationPropertiesFromHandle &&
        GVM_REAL(cuMemGetAllocationPropertiesFromHandle)(&prop, h) == CUDA_SUCCESS &&
        prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        loc = prop.location.id;
    rc = GVM_REAL(cuMemMap)(va, p->sizes[i], 0, h, 0);
    GVM_REAL(cuMemRelease)(h);
    if (rc != CUDA_SUCCESS) return rc;
    CUmemAccessDesc d[GVM_MAX_DEVICES];
    int nd = access_for(dev, loc, flags, d, GVM_MAX_DEVICES);
    rc = GVM_REAL(cuMemSetAccess)(va, p->sizes[i], d, (size_t)nd);
    if (rc != CUDA_SUCCESS) GVM_REAL(cuMemUnmap)(va, p->sizes[i]);
    return rc;
}

static size_t va_alignment(const struct pieces *p)
{
    size_t a = (size_t)2 << 20;
    for (int i = 0; i < p->n; i++)
        while (p->sizes[i] % a) a /= 2;   /* the pieces' common power-of-two granularity */
    return a;
}

/* Maps every piece in a new range; on failure nothing stays mapped. */
static CUresult map_all(struct pieces *p, size_t extent, CUdevice dev, unsigned flags, CUdeviceptr *out)
{
    CUdeviceptr va = 0;
    CUresult rc = GVM_REAL(cuMemAddressReserve)(&va, extent, va_alignment(p), 0, 0);
    if (rc != CUDA_SUCCESS) return rc;
    size_t off = 0;
    int i = 0;
    for (; i < p->n; i++) {
        if ((rc = map_piece(p, i, va + off, dev, flags)) != CUDA_SUCCESS) break;
        off += p->sizes[i];
    }
    if (rc != CUDA_SUCCESS) {
        if (off) GVM_REAL(cuMemUnmap)(va, off);
        GVM_REAL(cuMemAddressFree)(va, extent);
        return rc;
    }
    *out = va;
    return CUDA_SUCCESS;
}

static struct import *find(const struct gvm_ipc_handle *h, CUdevice dev)
{
    for (struct import *m = imports; m; m = m->next)
        if (m->endpoint == h->endpoint && m->device == dev && !memcmp(m->id, h->id, 16)) return m;
    return NULL;
}

static CUresult import_new(const struct gvm_ipc_handle *h, CUdevice dev, unsigned flags, struct import **out)
{
    /* A gvmshim handle comes from a driver that exports VMM memory; one
     * that cannot import it cannot open it. */
    if (!gvm_drv.cuMemImportFromShareableHandle) return CUDA_ERROR_NOT_SUPPORTED;
    struct import *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    int conn = gvm_ctl_connect_import(h->endpoint);
    if (conn < 0) {
        /* Natively a handle whose exporter exited answers
         * CUDA_ERROR_INVALID_HANDLE (two H200s, driver 580: gpu-ipc-users). */
        gvm_debug("ipc: exporter %016llx unreachable: %s", (unsigned long long)h->endpoint, strerror(-conn));
        free(m);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct pieces p = {0};
    CUresult rc = fetch(conn, h, &p);
    if (rc == CUDA_SUCCESS) rc = map_all(&p, h->extent, dev, flags, &m->va);
    pieces_free(&p);
    if (rc != CUDA_SUCCESS) {
        close(conn);
        free(m);
        return rc;
    }
    m->endpoint = h->endpoint;
    memcpy(m->id, h->id, 16);
    m->device = dev;
    m->extent = h->extent;
    m->offset = h->offset;
    m->conn = conn;
    *out = m;
    return CUDA_SUCCESS;
}

static void imp_fork_prepare(void) { pthread_mutex_lock(&imp_lock); }
static void imp_fork_parent(void) { pthread_mutex_unlock(&imp_lock); }

/* A forked child has no CUDA context and must not hold the parent's
 * leases (the exporter would never see them end). */
static void imp_fork_child(void)
{
    for (struct import *m = imports; m;) {
        struct import *next = m->next;
        close(m->conn);
        free(m);
        m = next;
    }
    imports = NULL;
    pthread_mutex_init(&imp_lock, NULL);
}

static void setup(void) { pthread_atfork(imp_fork_prepare, imp_fork_parent, imp_fork_child); }

CUresult gvm_ipc_open(CUdeviceptr *out, const CUipcMemHandle *handle, unsigned flags)
{
    struct gvm_ipc_handle h;
    int kind = gvm_ipc_decode(handle->reserved, sizeof handle->reserved, &h);
    if (kind == GVM_IPC_FOREIGN) return CUDA_ERROR_NOT_FOUND;
    if (!out || kind != GVM_IPC_OK || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup);
    CUcontext ctx = NULL;
    CUdevice dev;
    CUresult rc = GVM_REAL(cuCtxGetCurrent)(&ctx);
    if (rc == CUDA_SUCCESS && !ctx) rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS) rc = GVM_REAL(cuCtxGetDevice)(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&imp_lock);
    struct import *m = find(&h, dev);
    if (m) {
        m->refs++;
    } else if ((rc = import_new(&h, dev, flags, &m)) == CUDA_SUCCESS) {
        m->refs = 1;
        m->next = imports;
        imports = m;
        gvm_stat_inc(ipc_imports);
    }
    if (rc == CUDA_SUCCESS) *out = m->va + m->offset;
    pthread_mutex_unlock(&imp_lock);
    return rc;
}

CUresult gvm_ipc_close(CUdeviceptr p)
{
    pthread_mutex_lock(&imp_lock);
    struct import **pp = &imports;
    while (*pp && (*pp)->va + (*pp)->offset != p) pp = &(*pp)->next;
    struct import *m = *pp;
    CUresult rc = m ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    if (m && !--m->refs) {
        /* Unmapping memory a kernel still reads would kill the kernel; but
         * a wait would break a stream capture open on the device. */
        CUcontext ctx = NULL;
        if (GVM_REAL(cuCtxGetCurrent)(&ctx) == CUDA_SUCCESS && ctx && gvm_capture_wait_begin((int)m->device)) {
            GVM_REAL(cuCtxSynchronize)();
            gvm_capture_wait_end((int)m->device);
        }
        rc = GVM_REAL(cuMemUnmap)(m->va, m->extent);
        if (rc == CUDA_SUCCESS) {
            GVM_REAL(cuMemAddressFree)(m->va, m->extent);
            close(m->conn);   /* the lease ends */
            *pp = m->next;
            free(m);
        } else {
            m->refs++;   /* still mapped: the program may close again */
        }
    }
    pthread_mutex_unlock(&imp_lock);
    return rc;
}
