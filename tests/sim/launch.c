/* Fake kernels: tests make a CUfunction from a C callback, and every
 * launch entry point runs it synchronously on the caller's thread, so a
 * test can check what a shim passes to (or changes in) a launch. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* Parameters are packed at their natural alignment: the largest power of
 * two dividing the size, capped at 8 (a 12-byte struct of floats sits on 4). */
static size_t sim_param_align(size_t size)
{
    size_t a = 1;
    while (a < 8 && size % (a * 2) == 0)
        a *= 2;
    return a;
}

static struct CUfunc_st *sim_function_new(void (*body)(void **), unsigned n, const size_t *sizes)
{
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f || (n && !(f->size = calloc(n, sizeof *f->size))) ||
        (n && !(f->offset = calloc(n, sizeof *f->offset))))
        sim_die("out of memory creating a fake kernel");
    f->body = body;
    f->nparams = n;
    for (unsigned i = 0; i < n; i++) {
        size_t a = sim_param_align(sizes[i]);
        f->offset[i] = (f->total + a - 1) & ~(a - 1);
        f->size[i] = sizes[i];
        f->total = f->offset[i] + sizes[i];
    }
    return f;
}

CUfunction simcuda_function(void (*body)(void **params), unsigned nparams,
                            const size_t *param_sizes)
{
    if (nparams && !param_sizes)
        sim_die("simcuda_function: param_sizes is NULL");
    struct CUfunc_st *f = sim_function_new(body, nparams, param_sizes);
    pthread_rwlock_wrlock(&sim.lock);
    if (sim_vec_push(&sim.funcs, f))
        sim_die("out of memory registering a fake kernel");
    pthread_rwlock_unlock(&sim.lock);
    return f;
}

/* ---- launches --------------------------------------------------------- */

struct sim_launch {
    CUfunction f;
    unsigned grid[3], block[3];
    CUstream stream;
    void **params, **extra;
};

/* The kernelParams array the body gets from the packed-buffer form:
 * extra = {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}. */
static CUresult sim_unpack_extra(CUfunction f, void **extra, void ***out)
{
    char *buf = NULL;
    size_t *size = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf || !size || *size < f->total)
        return CUDA_ERROR_INVALID_VALUE;
    void **params = calloc(f->nparams ? f->nparams : 1, sizeof *params);
    if (!params)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < f->nparams; i++)
        params[i] = buf + f->offset[i];
    *out = params;
    return CUDA_SUCCESS;
}

static CUresult sim_launch_check(const struct sim_launch *l)
{
    if (!l->f || !sim_vec_has(&sim.funcs, l->f))
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < 3; i++)
        if (!l->grid[i] || !l->block[i])
            return CUDA_ERROR_INVALID_VALUE;
    if (l->params && l->extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (!l->params && !l->extra && l->f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_stream_dev(l->stream, NULL);
}

/* A launch on a capturing stream: its parameters are packed and kept. */
static int sim_launch_recorded(const struct sim_launch *l, void **params, CUresult *rc)
{
    struct sim_node node = {.kind = SIM_NODE_KERNEL, .f = l->f};
    node.args = malloc(l->f->total ? l->f->total : 1);
    if (!node.args)
        sim_die("out of memory recording a launch");
    for (unsigned i = 0; i < l->f->nparams; i++)
        memcpy(node.args + l->f->offset[i], params[i], l->f->size[i]);
    pthread_rwlock_rdlock(&sim.lock);
    int recorded = sim_capture_add(l->stream, &node, rc);
    pthread_rwlock_unlock(&sim.lock);
    if (!recorded)
        free(node.args);
    return recorded;
}

/* Checks under the lock, then runs the body without it so a kernel body
 * may itself call the driver. */
static CUresult sim_launch(const struct sim_launch *l)
{
    void **unpacked = NULL;
    pthread_rwlock_rdlock(&sim.lock);
    CUresult rc = sim_launch_check(l);
    pthread_rwlock_unlock(&sim.lock);
    if (rc == CUDA_SUCCESS && l->extra)
        rc = sim_unpack_extra(l->f, l->extra, &unpacked);
    if (rc == CUDA_SUCCESS && sim_launch_recorded(l, unpacked ? unpacked : l->params, &rc)) {
        free(unpacked);
        return rc;
    }
    if (rc == CUDA_SUCCESS && l->f->body)
        l->f->body(unpacked ? unpacked : l->params);
    if (rc == CUDA_SUCCESS)
        sim_flight_launch(l->stream, l->f, unpacked ? unpacked : l->params);
    free(unpacked);
    return rc;
}

static CUresult sim_launch_args(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, CUstream s,
                                void **params, void **extra)
{
    struct sim_launch l = {f, {gx, gy, gz}, {bx, by, bz}, s, params, extra};
    return sim_launch(&l);
}

SIM_API2(cuLaunchKernel, cuLaunchKernel_ptsz, SIM_NOLOCK,
         (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
          unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
          unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra),
         sim_launch_args(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                         hStream, kernelParams, extra))

SIM_API2(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, SIM_NOLOCK,
         (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
          unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
          unsigned int sharedMemBytes, CUstream hStream, void **kernelParams),
         sim_launch_args(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                         hStream, kernelParams, NULL))

static CUresult sim_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_launch_args(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX,
                           c->blockDimY, c->blockDimZ, c->hStream, params, extra);
}

SIM_API2(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, SIM_NOLOCK,
         (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
         sim_launch_ex(config, f, kernelParams, extra))

/* ---- parameter layout ------------------------------------------------- */

static CUresult sim_param_info(CUfunction f, size_t i, size_t *off, size_t *size)
{
    if (!f || !sim_vec_has(&sim.funcs, f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (i >= f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = f->offset[i];
    if (size)
        *size = f->size[i];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    SIM_API(cuFuncGetParamInfo, SIM_READ, sim_param_info(func, paramIndex, paramOffset, paramSize));
}

/* simcuda_function handles double as CUkernel handles. */
CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                      size_t *paramSize)
{
    SIM_API(cuKernelGetParamInfo, SIM_READ,
            sim_param_info((CUfunction)(void *)kernel, paramIndex, paramOffset, paramSize));
}
