/* The library builds with -fvisibility=hidden: what it exports (the public
 * gvm_* API, libcuda's names it interposes, dlsym) is marked with this one
 * attribute, and preload/gvmshim.map lists the names. */
#ifndef GVM_EXPORT_H
#define GVM_EXPORT_H

#define GVM_EXPORT __attribute__((visibility("default")))

#endif
