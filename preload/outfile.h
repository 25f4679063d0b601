/* The files gvmshim writes at the user's request: their names with "%p"
 * (GVM_STATS, GVM_TRACE), and the stats file opened so that a name in a
 * shared directory cannot be turned into a way to overwrite another file
 * (core/trace.c opens the trace with the same O_NOFOLLOW and 0600). */
#ifndef GVM_OUTFILE_H
#define GVM_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

/* "%p" in pattern becomes the process id, so processes of one job write
 * their own files. Returns whether pattern had one. */
bool gvm_outfile_name(const char *pattern, char *out, size_t len);

/* Opens the file pattern names for writing; path gets the name opened
 * (for messages). The file is created private (0600) and a symlink at the
 * path is never followed. A %p name, which anyone can predict, must not
 * exist yet: such a file is always new. Returns the descriptor, or -1 with
 * errno set. */
int gvm_outfile_open(const char *pattern, char *path, size_t pathlen);

/* Why gvm_outfile_open failed with err, for the warning. */
const char *gvm_outfile_why(int err);

#endif
