/* Sockets of processes that died without removing theirs (killed, crashed,
 * _exit): every such process leaves one in the runtime directory. A server
 * sweeps them once as it starts, and a client (gvmctl list) removes one it
 * finds; see server.h.
 *
 * Dead means: nothing listens on it (a connect is refused). A live
 * server's socket accepts a connection from the moment its name exists
 * (it is bound under another name, listens, and only then takes its own:
 * server.c), so a socket that accepts one, or answers anything but a
 * refusal, stays. The endpoint in the name is random, never reused: no
 * later process can be mistaken for the dead one. Only sockets of this
 * user are touched, never through a symlink. */
#define _GNU_SOURCE
#include "ctl/server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

bool gvm_ctl_sock_name(const char *name, uint64_t *endpoint)
{
    unsigned long long ep = 0;
    int end = 0;
    if (strspn(name, "0123456789abcdef") != 16 || (strcmp(name + 16, ".sock") && strcmp(name + 16, ".ipc")))
        return false;
    if (sscanf(name, "%16llx%n", &ep, &end) != 1 || end != 16) return false;
    if (endpoint) *endpoint = ep;
    return true;
}

/* Whether nothing listens at path: a connect refused. A non-blocking
 * connect never waits on a live server whose backlog is full (EAGAIN:
 * alive). */
static bool refuses_connections(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) return false;
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return false;
    int rc;
    do rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    while (rc && errno == EINTR);
    bool refused = rc && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

bool gvm_ctl_remove_dead(const char *dir, const char *name)
{
    if (!gvm_ctl_sock_name(name, NULL)) return false;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return false;
    struct stat st;
    char path[sizeof ((struct sockaddr_un *)0)->sun_path];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    bool removed = false;
    /* The entry itself (a symlink is not a socket), this user's; the
     * directory is this user's alone (gvm_ctl_dir), so it stays the same
     * entry from the check to the removal. */
    if (n > 0 && (size_t)n < sizeof path && !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) &&
        S_ISSOCK(st.st_mode) && st.st_uid == geteuid() && refuses_connections(path))
        removed = unlinkat(dfd, name, 0) == 0;
    close(dfd);
    return removed;
}

int gvm_ctl_sweep(void)
{
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path];
    if (gvm_ctl_dir(dir, sizeof dir, false)) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0, seen = 0;
    for (struct dirent *e; seen < GVM_CTL_SWEEP_MAX && (e = readdir(d));) {
        if (!gvm_ctl_sock_name(e->d_name, NULL)) continue;
        seen++;
        removed += gvm_ctl_remove_dead(dir, e->d_name);
    }
    closedir(d);
    return removed;
}
