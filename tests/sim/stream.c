/* Streams and events. Device work runs when it is enqueued, so every wait,
 * query and synchronize succeeds at once; what is checked is that the
 * handles are live and that no capture forbids it (graph.c). */
#include "sim.h"

#include <stdlib.h>

/* The device a stream's work runs on. The special streams (0, legacy,
 * per-thread) belong to the current context. */
CUresult sim_stream_dev(CUstream s, int *dev)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return sim_need_ctx(dev);
    if (!sim_vec_has(&sim.streams, s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (dev)
        *dev = s->dev;
    return CUDA_SUCCESS;
}

void sim_streams_reset(void)
{
    for (size_t i = 0; i < sim.streams.len; i++)
        free(sim.streams.item[i]);
    for (size_t i = 0; i < sim.events.len; i++)
        free(sim.events.item[i]);
    sim.streams.len = sim.events.len = 0;
}

/* Streams and events of a context. A stream still capturing is left as it
 * is: its capture holds it. */
void sim_streams_drop_ctx(struct CUctx_st *c)
{
    sim_flight_drop_ctx(c);   /* its work ended with it */
    for (size_t i = sim.streams.len; i-- > 0;) {
        struct CUstream_st *s = sim.streams.item[i];
        if (s->ctx != c || s->cap)
            continue;
        sim_vec_remove(&sim.streams, s);
        free(s);
    }
    for (size_t i = sim.events.len; i-- > 0;) {
        struct CUevent_st *e = sim.events.item[i];
        if (e->ctx != c)
            continue;
        sim_vec_remove(&sim.events, e);
        free(e);
    }
}

static CUresult sim_stream_create(CUstream *ph, unsigned flags)
{
    int dev;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_need_ctx(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s || sim_vec_push(&sim.streams, s)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    static unsigned long long next_id = 100;
    s->dev = dev;
    s->ctx = sim_ctx_current();
    s->flags = flags;
    s->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    *ph = s;
    return CUDA_SUCCESS;
}

/* The special streams: one legacy stream per device, one per-thread
 * stream (the sim does not tell threads apart). */
static CUresult sim_stream_get_id(CUstream s, unsigned long long *id)
{
    int dev;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    *id = s == CU_STREAM_PER_THREAD ? 50u + (unsigned)dev : s == NULL || s == CU_STREAM_LEGACY ? 1u + (unsigned)dev : s->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    SIM_API(cuStreamGetId, SIM_READ, sim_stream_get_id(hStream, streamId));
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    SIM_API(cuStreamCreate, SIM_WRITE, sim_stream_create(phStream, Flags));
}

static CUresult sim_stream_destroy(CUstream s)
{
    if (!s || !sim_vec_has(&sim.streams, s))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_vec_remove(&sim.streams, s);
    free(s);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    SIM_API(cuStreamDestroy_v2, SIM_WRITE, sim_stream_destroy(hStream));
}

/* A finished wait (a query that finds the work done) covers the kernels
 * before it (flight.c). */
static CUresult sim_stream_wait_all(CUstream s)
{
    CUresult rc = sim_capture_stream_sync(s);
    if (rc == CUDA_SUCCESS)
        sim_flight_stream_sync(s);
    return rc;
}

/* A synchronize also settles the pools' frees (pool.c); a query does not. */
static CUresult sim_stream_sync(CUstream s)
{
    CUresult rc = sim_stream_wait_all(s);
    if (rc == CUDA_SUCCESS)
        sim_pool_settle();
    return rc;
}

SIM_API2(cuStreamSynchronize, cuStreamSynchronize_ptsz, SIM_READ,
         (CUstream hStream), sim_stream_sync(hStream))

SIM_API2(cuStreamQuery, cuStreamQuery_ptsz, SIM_READ,
         (CUstream hStream), sim_stream_wait_all(hStream))

static CUresult sim_stream_get_ctx(CUstream s, CUcontext *pctx)
{
    int dev;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_stream_dev(s, &dev);
    if (rc == CUDA_SUCCESS)
        *pctx = &sim.dev[dev].ctx;
    return rc;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    SIM_API(cuStreamGetCtx, SIM_READ, sim_stream_get_ctx(hStream, pctx));
}

static int sim_event_live(CUevent e)
{
    return e && sim_vec_has(&sim.events, e);
}

static CUresult sim_stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    (void)flags;
    return sim_capture_stream_wait(s, e);
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_API(cuStreamWaitEvent, SIM_READ, sim_stream_wait_event(hStream, hEvent, Flags));
}

/* ---- events ----------------------------------------------------------- */

static CUresult sim_event_create(CUevent *ph, unsigned flags)
{
    int dev;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_need_ctx(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e || sim_vec_push(&sim.events, e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->dev = dev;
    e->ctx = sim_ctx_current();
    e->flags = flags;
    *ph = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    SIM_API(cuEventCreate, SIM_WRITE, sim_event_create(phEvent, Flags));
}

static CUresult sim_event_destroy(CUevent e)
{
    if (!sim_event_live(e))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_vec_remove(&sim.events, e);
    free(e);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    SIM_API(cuEventDestroy_v2, SIM_WRITE, sim_event_destroy(hEvent));
}

static CUresult sim_event_record(CUevent e, CUstream s)
{
    CUresult rc = sim_capture_event_record(e, s);
    if (rc == CUDA_SUCCESS)
        sim_flight_event_record(e, s);
    return rc;
}

SIM_API2(cuEventRecord, cuEventRecord_ptsz, SIM_READ,
         (CUevent hEvent, CUstream hStream), sim_event_record(hEvent, hStream))

static CUresult sim_event_check(CUevent e)
{
    CUresult rc = sim_capture_event_sync(e);
    if (rc == CUDA_SUCCESS)
        sim_flight_event_sync(e);
    return rc;
}

static CUresult sim_event_sync(CUevent e)
{
    CUresult rc = sim_event_check(e);
    if (rc == CUDA_SUCCESS)
        sim_pool_settle();
    return rc;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    SIM_API(cuEventSynchronize, SIM_READ, sim_event_sync(hEvent));
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    SIM_API(cuEventQuery, SIM_READ, sim_event_check(hEvent));
}
