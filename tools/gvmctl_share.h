/* gvmctl share: the processes sharing each device's memory, from the
 * tables in dir (tools/gvmctl_share.c). */
#ifndef GVM_TOOLS_GVMCTL_SHARE_H
#define GVM_TOOLS_GVMCTL_SHARE_H

#include <stdbool.h>

int gvmctl_share(const char *dir, bool json);

#endif
