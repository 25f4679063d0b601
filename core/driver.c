#include "core/driver.h"


#include <dlfcn.h>
#include <stdio.h>

struct gvm_driver gvm_drv;
static void *driver_handle;

#define GVM_DRIVER_NAME(name) #name,
const char *const gvm_driver_names[GVM_FN_COUNT] = {
    GVM_DRIVER_ALL(GVM_DRIVER_NAME, GVM_DRIVER_NAME)};
#undef GVM_DRIVER_NAME

static const unsigned char driver_required[GVM_FN_COUNT] = {
#define REQ(name) 1,
#define OPT(name) 0,
    GVM_DRIVER_ALL(REQ, OPT)
#undef REQ
#undef OPT
};

int gvm_driver_load(const char *path, gvm_symbol_lookup lookup, char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load %s: %s", path, dlerror());
        return -1;
    }
    void **slots = (void **)&gvm_drv;
    for (int i = 0; i < GVM_FN_COUNT; i++) {
        slots[i] = lookup(h, gvm_driver_names[i]);
        if (!slots[i] && driver_required[i]) {
            snprintf(err, errlen, "%s lacks %s", path, gvm_driver_names[i]);
            return -1;
        }
    }
    driver_handle = h;
    return 0;
}

void *gvm_driver_handle(void) { return driver_handle; }

uint64_t gvm_driver_calls[GVM_FN_COUNT];
bool gvm_driver_deinitialized;

void gvm_driver_count(enum gvm_driver_fn fn) { __atomic_fetch_add(&gvm_driver_calls[fn], 1, __ATOMIC_RELAXED); }
