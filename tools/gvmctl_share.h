/* gvmctl share: the processes sharing each device's memory, from the
 * tables in dir (tools/gvmctl_share.c). */
#ifndef GVM_TOOLS_GVMCTL_SHARE_H
#define GVM_TOOLS_GVMCTL_SHARE_H

#include <stdbool.h>

int gvmctl_share(const char *dir, bool json);

/* The same, without a word where nothing is shared (gvmctl list, top);
 * how many devices it showed. */
int gvmctl_share_summary(const char *dir);

#endif
