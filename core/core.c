#include "core/core.h"

#include "core/decoy.h"
#include "core/held.h"
#include "core/hostaccess.h"
#include "core/log.h"
#include "core/phys.h"
#include "core/topo.h"

CUresult gvm_core_probe(void)
{
    CUresult rc = gvm_topo_init();
    if (rc != CUDA_SUCCESS) return rc;
    if (gvm_decoy_init()) return CUDA_ERROR_OUT_OF_MEMORY;   /* pointer queries need it */
    return CUDA_SUCCESS;
}

CUresult gvm_core_start(const struct gvm_settings *s)
{
    gvm_settings = *s;
    if (!gvm_topo.gran) return CUDA_ERROR_NOT_SUPPORTED;
    if (gvm_settings.block_size < gvm_topo.gran) gvm_settings.block_size = gvm_topo.gran;
    if (gvm_settings.grow_block < gvm_settings.block_size) gvm_settings.grow_block = gvm_settings.block_size;
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_phys_set_limit(d, gvm_settings.pool_limit[d]);
    gvm_phys_set_limit(GVM_LOC_HOST, gvm_settings.host_pool);
    for (int d = 0; d < gvm_topo.ndev; d++) gvm_held_set_cap(d, gvm_settings.hold_limit[d]);
    gvm_held_set_cap(GVM_LOC_HOST, gvm_settings.hold_limit[gvm_loc_slot(GVM_LOC_HOST)]);
    if (gvm_settings.host_access == GVM_HOST_ACCESS_LAZY && gvm_hostaccess_install())
        gvm_warn("cannot install the fault handler for lazy host access; granting it eagerly");
    gvm_core_set_active(true);
    if (gvm_settings.host_prefill == GVM_HOST_PREFILL_ON ||
        (gvm_settings.host_prefill == GVM_HOST_PREFILL_AUTO && gvm_phys_prefill_hinted(GVM_LOC_HOST)))
        gvm_phys_prefill(GVM_LOC_HOST);
    return CUDA_SUCCESS;
}
