/* cuGetErrorName / cuGetErrorString for the codes the sim returns and the
 * ones tests are likely to inject. */
#include "sim.h"

#include <stddef.h>

struct sim_error {
    CUresult code;
    const char *name, *text;
};

#define SIM_ERR(code, text) {code, #code, text}
static const struct sim_error sim_errors[] = {
    SIM_ERR(CUDA_SUCCESS, "no error"),
    SIM_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    SIM_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    SIM_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    SIM_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    SIM_ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    SIM_ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    SIM_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    SIM_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    SIM_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    SIM_ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    SIM_ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    SIM_ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    SIM_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    SIM_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    SIM_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    SIM_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    SIM_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    SIM_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    SIM_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    SIM_ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    SIM_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    SIM_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    SIM_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    SIM_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    SIM_ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    SIM_ERR(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    SIM_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    SIM_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    SIM_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef SIM_ERR

static const struct sim_error *sim_error_find(CUresult rc)
{
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == rc)
            return &sim_errors[i];
    return NULL;
}

const char *sim_error_name(CUresult rc)
{
    const struct sim_error *e = sim_error_find(rc);
    return e ? e->name : NULL;
}

/* Like the real driver: an unknown code sets *out to NULL and fails. */
static CUresult sim_error_text(CUresult rc, const char **out, int want_name)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_error *e = sim_error_find(rc);
    *out = e ? (want_name ? e->name : e->text) : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    SIM_API(cuGetErrorString, SIM_ANYTIME, sim_error_text(error, pStr, 0));
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    SIM_API(cuGetErrorName, SIM_ANYTIME, sim_error_text(error, pStr, 1));
}
