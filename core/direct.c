#include "core/direct.h"

#include "core/tally.h"

static struct gvm_tally handles = GVM_TALLY_INIT;

bool gvm_direct_remember(CUmemGenericAllocationHandle h, int dev, size_t bytes)
{
    return gvm_tally_add(&handles, (uint64_t)h, dev, bytes);
}

bool gvm_direct_forget(CUmemGenericAllocationHandle h, int *dev, size_t *bytes)
{
    return gvm_tally_take(&handles, (uint64_t)h, dev, bytes);
}

size_t gvm_direct_bytes(int loc) { return (size_t)gvm_tally_bytes(&handles, loc); }

size_t gvm_direct_peak(int loc) { return (size_t)gvm_tally_high(&handles, loc); }
