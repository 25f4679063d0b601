/* Socket plumbing shared by the server and its clients: the runtime
 * directory, paths, credentials, sending and receiving with descriptors. */
#define _GNU_SOURCE
#include "ctl/server.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

bool gvm_ctl_allow_root;

bool gvm_ctl_peer_allowed(uid_t peer_uid, uid_t self_uid, bool allow_root)
{
    return peer_uid == self_uid || (allow_root && peer_uid == 0);
}

bool gvm_ctl_dir_safe(const struct stat *st, uid_t self)
{
    return S_ISDIR(st->st_mode) && st->st_uid == self && !(st->st_mode & 077);
}

int gvm_ctl_dir(char *out, size_t len, bool create)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n = xdg && xdg[0] == '/' ? snprintf(out, len, "%s/gvmshim", xdg)
                                 : snprintf(out, len, "/tmp/gvmshim-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= len) return -ENAMETOOLONG;
    if (create && mkdir(out, 0700) && errno != EEXIST) return -errno;
    struct stat st;
    /* lstat: a symlink planted in /tmp is refused, not followed. */
    if (lstat(out, &st)) return -errno;
    return gvm_ctl_dir_safe(&st, geteuid()) ? 0 : -EPERM;
}

int gvm_ctl_socket_path(uint64_t endpoint, const char *suffix, char *out, size_t len, bool create_dir)
{
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path];
    int rc = gvm_ctl_dir(dir, sizeof dir, create_dir);
    if (rc) return rc;
    int n = snprintf(out, len, "%s/%016llx%s", dir, (unsigned long long)endpoint, suffix);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int gvm_ctl_path(uint64_t endpoint, char *out, size_t len, bool create_dir)
{
    return gvm_ctl_socket_path(endpoint, ".sock", out, len, create_dir);
}

socklen_t gvm_ctl_import_name(uint64_t endpoint, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* sun_path[0] is 0: the abstract namespace; the name is the bytes
     * after it, without a terminating 0. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gvmshim-ipc-%016llx", (unsigned long long)endpoint);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int peer_uid(int fd, uid_t *uid)
{
    struct ucred cr;
    socklen_t n = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &n)) return -errno;
    *uid = cr.uid;
    return 0;
}

/* Connects to a; with check_server, only to a server of an allowed user. */
static int connect_to(const struct sockaddr_un *a, socklen_t len, bool check_server)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    uid_t uid = (uid_t)-1;
    /* A stopped or wedged server makes a request fail, not hang. */
    struct timeval tv = {.tv_sec = GVM_CTL_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc = 0;
    if (connect(fd, (const struct sockaddr *)a, len)) rc = -errno;
    else if (check_server && (rc = peer_uid(fd, &uid)) == 0 &&
             !gvm_ctl_peer_allowed(uid, geteuid(), gvm_ctl_allow_root))
        rc = -EPERM;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int gvm_ctl_connect(uint64_t endpoint)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int rc = gvm_ctl_path(endpoint, a.sun_path, sizeof a.sun_path, false);
    return rc ? rc : connect_to(&a, sizeof a, true);
}

int gvm_ctl_connect_import(uint64_t endpoint)
{
    struct sockaddr_un a;
    socklen_t len = gvm_ctl_import_name(endpoint, &a);
    /* Any user's exporter: the handle's secret, not the server's user, is
     * what makes the import right. */
    int rc = connect_to(&a, len, false);
    if (rc != -ECONNREFUSED && rc != -ENOENT) return rc;
    /* Not in this network namespace: the same user's exporter may be
     * reachable through a runtime directory both see. */
    a = (struct sockaddr_un){.sun_family = AF_UNIX};
    if (gvm_ctl_socket_path(endpoint, ".ipc", a.sun_path, sizeof a.sun_path, false)) return rc;
    int frc = connect_to(&a, sizeof a, true);
    return frc == -ENOENT ? rc : frc;
}

int gvm_ctl_send(int fd, uint8_t type, const void *payload, size_t len, const int *fds, int nfds, int flags)
{
    uint8_t buf[GVM_CTL_MSG_MAX];
    size_t n = gvm_ctl_frame(buf, sizeof buf, type, payload, len);
    if (!n || nfds < 0 || nfds > GVM_CTL_FDS_MAX) return -EMSGSIZE;
    union {
        char buf[CMSG_SPACE(sizeof(int) * GVM_CTL_FDS_MAX)];
        struct cmsghdr align;
    } ctrl;
    struct iovec iov = {buf, n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = ctrl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t w;
    do w = sendmsg(fd, &mh, MSG_NOSIGNAL | flags);
    while (w < 0 && errno == EINTR);
    if (w < 0) return -errno;
    return (size_t)w == n ? 0 : -EMSGSIZE;
}

ssize_t gvm_ctl_recv(int fd, void *buf, size_t cap, int *fds, int *nfds, int maxfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * GVM_CTL_FDS_MAX)];
        struct cmsghdr align;
    } ctrl;
    struct iovec iov = {buf, cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                        .msg_controllen = sizeof ctrl.buf};
    ssize_t r;
    do r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    int got = 0;
    bool bad = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int d;
            memcpy(&d, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof d);
            if (fds && got < maxfds) fds[got++] = d;
            else {
                close(d);
                bad = true;
            }
        }
    }
    if (bad) {
        for (int i = 0; i < got; i++) close(fds[i]);
        got = 0;
        r = -EMSGSIZE;
    }
    if (nfds) *nfds = got;
    return r;
}
