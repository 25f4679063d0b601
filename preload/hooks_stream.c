/* The end of a stream. A lazy swap waits for the events recorded after
 * its regions' last uses, one per region and stream, the slot named by
 * the stream's handle (core/usemark.h). Once the program destroys a stream
 * with work still queued, the driver may give a new stream the same
 * handle, and a launch there re-records the slot's event on the new
 * stream: the wait would no longer cover the old stream's work, which
 * still runs. So a destruction counts as work of unknown reach, and the
 * next lazy swap waits for the devices, as after a graph's launch. */
#include "preload/shim.h"

#include "core/usemark.h"

GVM_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream s)
{
    gvm_hook_count(GVM_FN_cuStreamDestroy_v2);
    /* Before the handle can be reused: a stamp taken after its work was
     * queued, so a whole wait begun later covers that work. */
    if (gvm_shim_active()) gvm_usemark_untracked("a destroyed stream");
    return GVM_REAL(cuStreamDestroy_v2)(s);
}
