/* Stream capture and graphs, after CUDA's documented rules.
 *
 * A stream that captures records its copies, sets and kernel launches into
 * a graph instead of running them; cuGraphLaunch replays the graph. What
 * conflicts with a capture invalidates it, and its end then returns
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph:
 * - a "potentially unsafe" call (cuMemAlloc*, cuMemFree, synchronous
 *   copies and sets, the VMM calls) from a thread whose capture mode
 *   forbids it (cuThreadExchangeStreamCaptureMode): global mode, while the
 *   thread's own capture was not begun relaxed or another thread's was
 *   begun global; thread-local mode, while its own was not begun relaxed.
 *   The call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
 * - in every mode: cuCtxSynchronize while a stream of that device
 *   captures, cuStreamSynchronize/cuStreamQuery of a capturing stream
 *   (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), cuEventSynchronize/Query of an
 *   event last recorded in a capture (CUDA_ERROR_CAPTURED_EVENT).
 * Not simulated: 2D/3D/peer/batch copies on a capturing stream run at once;
 * captures on the per-thread default stream; the legacy stream's implicit
 * dependency on capturing blocking streams; graph nodes' dependencies (a
 * graph replays in capture order). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

struct CUgraph_st {
    struct sim_node *node;
    size_t n, cap;
};

struct CUgraphExec_st {
    struct sim_node *node;
    size_t n;
};

struct sim_capture {
    unsigned long long id;
    CUstream origin;
    CUgraph graph;
    int own_graph; /* created by the begin (not ...ToGraph) */
    CUstreamCaptureMode mode;
    pthread_t thread;
    int dev, invalidated;
};

/* Capture state has its own lock: copies and launches hold the sim lock
 * only for reading, several at once. */
static pthread_mutex_t sim_cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_vec sim_caps, sim_graphs, sim_execs;
static unsigned long long sim_cap_ids;
static __thread CUstreamCaptureMode sim_thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static void sim_nodes_free(struct sim_node *node, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(node[i].args);
    free(node);
}

static void sim_graph_free(CUgraph g)
{
    sim_nodes_free(g->node, g->n);
    free(g);
}

void sim_captures_reset(void)
{
    pthread_mutex_lock(&sim_cap_lock);
    for (size_t i = 0; i < sim_caps.len; i++) {
        struct sim_capture *c = sim_caps.item[i];
        if (c->own_graph)
            sim_graph_free(c->graph);
        free(c);
    }
    for (size_t i = 0; i < sim_graphs.len; i++)
        sim_graph_free(sim_graphs.item[i]);
    for (size_t i = 0; i < sim_execs.len; i++) {
        CUgraphExec x = sim_execs.item[i];
        sim_nodes_free(x->node, x->n);
        free(x);
    }
    sim_caps.len = sim_graphs.len = sim_execs.len = 0;
    pthread_mutex_unlock(&sim_cap_lock);
}

/* The capture s records into (cap lock held). */
static struct sim_capture *sim_cap_of(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || !sim_vec_has(&sim.streams, s))
        return NULL;
    return s->cap;
}

static struct sim_capture *sim_cap_by_id(unsigned long long id)
{
    for (size_t i = 0; id && i < sim_caps.len; i++)
        if (((struct sim_capture *)sim_caps.item[i])->id == id)
            return sim_caps.item[i];
    return NULL;
}

static int sim_graph_push(CUgraph g, const struct sim_node *node)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct sim_node *nn = realloc(g->node, cap * sizeof *nn);
        if (!nn)
            return -1;
        g->node = nn;
        g->cap = cap;
    }
    g->node[g->n++] = *node;
    return 0;
}

int sim_capture_add(CUstream s, const struct sim_node *node, CUresult *rc)
{
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_of(s);
    if (c) {
        *rc = CUDA_SUCCESS;
        if (c->invalidated)
            *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (sim_graph_push(c->graph, node))
            *rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (*rc != CUDA_SUCCESS)
            free(node->args);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return c != NULL;
}

int sim_capture_break(CUstream s)
{
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_of(s);
    if (c)
        c->invalidated = 1;
    pthread_mutex_unlock(&sim_cap_lock);
    return c != NULL;
}

CUresult sim_capture_unsafe(void)
{
    CUresult rc = CUDA_SUCCESS;
    CUstreamCaptureMode mode = sim_thread_mode;
    if (mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return rc;
    pthread_mutex_lock(&sim_cap_lock);
    for (size_t i = 0; i < sim_caps.len; i++) {
        struct sim_capture *c = sim_caps.item[i];
        int mine = pthread_equal(c->thread, pthread_self());
        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

CUresult sim_capture_ctx_sync(void)
{
    int dev;
    CUresult rc = sim_need_ctx(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim_cap_lock);
    for (size_t i = 0; i < sim_caps.len; i++) {
        struct sim_capture *c = sim_caps.item[i];
        if (c->dev == dev) {
            c->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

CUresult sim_capture_stream_sync(CUstream s)
{
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_capture_break(s) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult sim_capture_event_sync(CUevent e)
{
    if (!e || !sim_vec_has(&sim.events, e))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&sim_cap_lock);
    CUresult rc = CUDA_SUCCESS;
    if (e->captured) {
        struct sim_capture *c = sim_cap_by_id(e->captured);
        if (c)
            c->invalidated = 1;
        rc = CUDA_ERROR_CAPTURED_EVENT;
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

CUresult sim_capture_event_record(CUevent e, CUstream s)
{
    if (!e || !sim_vec_has(&sim.events, e))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_of(s);
    if (c && c->invalidated)
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else
        e->captured = c ? c->id : 0;
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

CUresult sim_capture_stream_wait(CUstream s, CUevent e)
{
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!e || !sim_vec_has(&sim.events, e))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_by_id(e->captured), *mine = sim_cap_of(s);
    if (mine && c && mine != c)
        rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    else if (c && !mine && s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD)
        s->cap = c; /* joins the capture: its work is recorded from now on */
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

/* ---- begin, end, status ------------------------------------------------ */

static CUresult sim_begin(CUstream s, CUgraph into, CUstreamCaptureMode mode)
{
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = sim_stream_dev(s, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s == NULL || s == CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_NOT_SUPPORTED; /* not simulated */
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = NULL;
    int fresh = !into;
    if (s->cap)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (into && !sim_vec_has(&sim_graphs, into))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(c = calloc(1, sizeof *c)) || (fresh && !(into = calloc(1, sizeof *into))) ||
             sim_vec_push(&sim_caps, c))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        *c = (struct sim_capture){++sim_cap_ids, s, into, fresh, mode, pthread_self(), dev, 0};
        s->cap = c;
    } else {
        if (fresh)
            free(into);
        free(c);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

SIM_API2(cuStreamBeginCapture, cuStreamBeginCapture_ptsz, SIM_READ, (CUstream hStream),
         sim_begin(hStream, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL))

SIM_API2(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz, SIM_READ,
         (CUstream hStream, CUstreamCaptureMode mode), sim_begin(hStream, NULL, mode))

SIM_API2(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz, SIM_READ,
         (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
          const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode),
         (dependencies || dependencyData || numDependencies) ? CUDA_ERROR_NOT_SUPPORTED
         : hGraph ? sim_begin(hStream, hGraph, mode) : CUDA_ERROR_INVALID_VALUE)

static CUresult sim_end(CUstream s, CUgraph *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_of(s);
    if (!c || c->origin != s)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (rc == CUDA_SUCCESS) {
        for (size_t i = 0; i < sim.streams.len; i++)
            if (((CUstream)sim.streams.item[i])->cap == c)
                ((CUstream)sim.streams.item[i])->cap = NULL;
        sim_vec_remove(&sim_caps, c);
        *out = NULL;
        if (c->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            if (c->own_graph)
                sim_graph_free(c->graph);
        } else if (c->own_graph && sim_vec_push(&sim_graphs, c->graph)) {
            sim_graph_free(c->graph);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *out = c->graph;
        }
        free(c);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

SIM_API2(cuStreamEndCapture, cuStreamEndCapture_ptsz, SIM_READ,
         (CUstream hStream, CUgraph *phGraph), sim_end(hStream, phGraph))

static CUresult sim_is_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&sim_cap_lock);
    struct sim_capture *c = sim_cap_of(s);
    *st = !c ? CU_STREAM_CAPTURE_STATUS_NONE
          : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                           : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&sim_cap_lock);
    return CUDA_SUCCESS;
}

SIM_API2(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, SIM_READ,
         (CUstream hStream, CUstreamCaptureStatus *captureStatus),
         sim_is_capturing(hStream, captureStatus))

static CUresult sim_exchange_capture_mode(CUstreamCaptureMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = sim_thread_mode;
    sim_thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_API(cuThreadExchangeStreamCaptureMode, SIM_NOLOCK, sim_exchange_capture_mode(mode));
}

/* ---- graphs ------------------------------------------------------------ */

static CUresult sim_instantiate(CUgraphExec *out, CUgraph g)
{
    if (!out || !g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_cap_lock);
    CUresult rc = sim_vec_has(&sim_graphs, g) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    CUgraphExec x = NULL;
    if (rc == CUDA_SUCCESS && (!(x = calloc(1, sizeof *x)) ||
                               (g->n && !(x->node = calloc(g->n, sizeof *x->node)))))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n; i++) {
        x->node[i] = g->node[i];
        x->node[i].args = NULL;
        size_t len = g->node[i].f ? g->node[i].f->total : 0;
        if (g->node[i].args && !(x->node[i].args = malloc(len ? len : 1)))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (g->node[i].args)
            memcpy(x->node[i].args, g->node[i].args, len);
        x->n = i + 1;
    }
    if (rc == CUDA_SUCCESS && sim_vec_push(&sim_execs, x))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        *out = x;
    else if (x) {
        sim_nodes_free(x->node, x->n);
        free(x);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    SIM_API(cuGraphInstantiateWithFlags, SIM_READ,
            flags ? CUDA_ERROR_NOT_SUPPORTED : sim_instantiate(phGraphExec, hGraph));
}

static CUresult sim_graph_destroy(CUgraph g)
{
    pthread_mutex_lock(&sim_cap_lock);
    int live = g && sim_vec_has(&sim_graphs, g);
    if (live) {
        sim_vec_remove(&sim_graphs, g);
        sim_graph_free(g);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    SIM_API(cuGraphDestroy, SIM_NOLOCK, sim_graph_destroy(hGraph));
}

static CUresult sim_exec_destroy(CUgraphExec x)
{
    pthread_mutex_lock(&sim_cap_lock);
    int live = x && sim_vec_has(&sim_execs, x);
    if (live) {
        sim_vec_remove(&sim_execs, x);
        sim_nodes_free(x->node, x->n);
        free(x);
    }
    pthread_mutex_unlock(&sim_cap_lock);
    return live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    SIM_API(cuGraphExecDestroy, SIM_NOLOCK, sim_exec_destroy(hGraphExec));
}

/* Runs one node: copies and sets under the sim lock, kernels without it
 * (a kernel body may call the driver). */
static CUresult sim_replay_node(const struct sim_node *nd, CUstream s)
{
    CUresult rc = CUDA_SUCCESS;
    if (nd->kind == SIM_NODE_KERNEL) {
        void *params[nd->f->nparams ? nd->f->nparams : 1];
        for (unsigned i = 0; i < nd->f->nparams; i++)
            params[i] = nd->args + nd->f->offset[i];
        if (nd->f->body)
            nd->f->body(params);
        sim_flight_launch(s, nd->f, params);   /* in flight on the launch's stream */
        return rc;
    }
    pthread_rwlock_rdlock(&sim.lock);
    if (nd->kind == SIM_NODE_COPY)
        rc = sim_copy_1d(nd->dst, nd->dkind, nd->src, nd->skind, nd->n);
    else
        rc = sim_fill(nd->dst, nd->pitch, nd->value, nd->elem, nd->width, nd->height);
    pthread_rwlock_unlock(&sim.lock);
    if (rc == CUDA_SUCCESS && nd->kind == SIM_NODE_COPY)
        sim_flight_op(s, nd->dst, nd->n, nd->src, nd->n);
    else if (rc == CUDA_SUCCESS && nd->width && nd->height)
        sim_flight_op(s, nd->dst, nd->pitch * (nd->height - 1) + nd->width * nd->elem, 0, 0);
    return rc;
}

/* The exec is copied out first: replay runs without the capture lock. */
static CUresult sim_graph_launch(CUgraphExec x, CUstream s)
{
    pthread_rwlock_rdlock(&sim.lock);
    CUresult rc = sim_stream_dev(s, NULL);
    pthread_mutex_lock(&sim_cap_lock);
    if (rc == CUDA_SUCCESS && (!x || !sim_vec_has(&sim_execs, x)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && sim_cap_of(s))
        rc = CUDA_ERROR_NOT_SUPPORTED; /* graphs captured into graphs: not simulated */
    size_t n = rc == CUDA_SUCCESS ? x->n : 0;
    struct sim_node *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (n && !copy)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (copy)
        memcpy(copy, x->node, n * sizeof *copy);
    pthread_mutex_unlock(&sim_cap_lock);
    pthread_rwlock_unlock(&sim.lock);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
        if (sim_replay_node(&copy[i], s) != CUDA_SUCCESS)
            rc = CUDA_ERROR_LAUNCH_FAILED; /* a node's memory is gone: a fault at run time */
    free(copy);
    return rc;
}

SIM_API2(cuGraphLaunch, cuGraphLaunch_ptsz, SIM_NOLOCK,
         (CUgraphExec hGraphExec, CUstream hStream), sim_graph_launch(hGraphExec, hStream))
