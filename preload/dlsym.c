/* dlsym is interposed so that a program (or cudart) asking libcuda for an
 * entry point by name gets the hook. The real dlsym comes from dlvsym and
 * this file never calls the public one. Known limits: dlvsym and dlmopen
 * namespaces bypass it, and dlsym(RTLD_NEXT, ...) issued by the program is
 * answered relative to gvmshim rather than to the caller. */
#include "preload/shim.h"

#include <dlfcn.h>

GVM_EXPORT void *dlsym(void *handle, const char *name)
{
    void *r = gvm_real_dlsym(handle, name);
    /* Only names of libcuda's shape ("cu" and a capital: cuMemAlloc, not
     * cudnnCreate or cublasSgemm) are worth a look; everything else goes
     * back untouched before any other work. */
    if (!r || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z' ||
        gvm_shim_loading() || gvm_cfg_disabled())
        return r;
    if (!gvm_shim_driver()) return r;
    void *h = gvm_shim_hook_for(r, name);
    return h ? h : r;
}
