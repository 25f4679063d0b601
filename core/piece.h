/* One physical piece of memory, the unit phys.c pools and regions map: a
 * cuMemCreate handle, or registered host pages (core/hostpin.h). Its own
 * header, below both files that make pieces (phys.c, and hostpin.c, whose
 * pieces phys.c destroys through it). */
#ifndef GVM_PIECE_H
#define GVM_PIECE_H

#include "core/cuda_api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gvm_phys {
    CUmemGenericAllocationHandle handle;
    size_t size;
    int loc;                 /* device ordinal or GVM_LOC_HOST */
    CUdeviceptr staging;     /* second mapping for copies, 0 if none */
    void *host;              /* registered host pages, no handle (core/hostpin.h): staging is this */
    int host_dev;            /* ... registered in this device's primary context */
    unsigned host_era;       /* ... before this many resets of it (core/hostpin.h) */
    uint32_t staged_for;     /* devices (bit per ordinal) granted the staging mapping */
    bool stuck;              /* a mapping of it could not be removed: never pooled or released */
    struct gvm_phys *next;   /* pool list */
};

#endif
