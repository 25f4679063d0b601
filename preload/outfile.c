#include "preload/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool gvm_outfile_name(const char *in, char *out, size_t len)
{
    bool pid = false;
    size_t o = 0;
    for (; *in && o + 24 < len; in++) {
        if (in[0] == '%' && in[1] == 'p') {
            o += (size_t)snprintf(out + o, len - o, "%ld", (long)getpid());
            pid = true;
            in++;
        } else {
            out[o++] = *in;
        }
    }
    out[o] = 0;
    return pid;
}

int gvm_outfile_open(const char *pattern, char *path, size_t pathlen)
{
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC;
    if (gvm_outfile_name(pattern, path, pathlen)) flags |= O_EXCL;
    return open(path, flags, 0600);
}

const char *gvm_outfile_why(int err)
{
    if (err == ELOOP) return "it is a symbolic link, which is never followed";
    if (err == EEXIST) return "it exists already (a %p name is always a new file)";
    return strerror(err);
}
