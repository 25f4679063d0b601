/* gvmshim's per-process control socket: one listening Unix socket per
 * process, served by one thread, started on first need (the first CUDA IPC
 * export; gvmctl's requests later). Requests are dispatched by type through
 * a table (gvm_ctl_register).
 *
 * Where: <dir>/<endpoint>.sock, <dir> being $XDG_RUNTIME_DIR/gvmshim or
 * /tmp/gvmshim-<uid>, a directory of mode 0700 owned by the user (checked
 * with lstat: never a symlink, never another user's). The endpoint is a
 * random 64-bit id, not the pid, so it means the same in every pid
 * namespace and is never reused by a later process.
 *
 * Litter: a process that dies without its destructors (killed, crashed,
 * _exit) leaves its socket behind. Each server, as it starts, sweeps the
 * directory once (at most GVM_CTL_SWEEP_MAX sockets looked at) and removes
 * the sockets of this user that nobody listens on; a client that finds one
 * removes it too (ctl/stale.c).
 *
 * Who: a connecting process must run as the same user (SO_PEERCRED), or as
 * root when gvm_ctl_allow_root is set; clients check the server the same way.
 *
 * The server thread makes no CUDA calls and takes no lock a program thread
 * can hold for long: handlers run on it and must be quick. Work that needs
 * the driver or the core's locks goes to a worker thread (gvm_ctl_defer).
 * A connection may carry a lease: a callback run when the peer hangs up
 * (EOF: it closed the connection, or it died).
 *
 * A forked child does not serve: it has no server thread, and it closes
 * the inherited listening socket and connections at once. */
#ifndef GVM_CTL_SERVER_H
#define GVM_CTL_SERVER_H

#include "ctl/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct gvm_ctl_conn;

/* Runs on the server thread for each valid message of its type. */
typedef void (*gvm_ctl_handler)(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m);

/* Sets the handler of a type (before or after the start). */
void gvm_ctl_register(uint8_t type, gvm_ctl_handler fn);

/* Starts the server once; returns 0, or -errno (then nothing is served and
 * a later call tries again). */
int gvm_ctl_start(void);

/* This process's endpoint id, 0 before a successful start. */
uint64_t gvm_ctl_endpoint(void);

/* From a handler: replies on c with descriptors (not closed). Returns 0 or
 * -errno; a peer that does not read is hung up on rather than waited for. */
int gvm_ctl_reply(struct gvm_ctl_conn *c, uint8_t type, const void *payload, size_t len, const int *fds,
                  int nfds);

/* From a handler: a duplicate of c's descriptor (close-on-exec), so that a
 * deferred job can answer after the handler returned; -errno on failure. */
int gvm_ctl_dup(struct gvm_ctl_conn *c);

/* From a handler: closes c once the handler returns. */
void gvm_ctl_hangup(struct gvm_ctl_conn *c);

/* From a handler: fn(arg) runs (on the server thread) when c's peer hangs
 * up, or the server drops c. One lease per connection; false if c has one. */
bool gvm_ctl_lease(struct gvm_ctl_conn *c, void (*fn)(void *), void *arg);

/* Runs fn(arg) on the worker thread (started on first use), in order. */
void gvm_ctl_defer(void (*fn)(void *), void *arg);

/* May a peer running as peer_uid talk to a process running as self_uid? */
bool gvm_ctl_peer_allowed(uid_t peer_uid, uid_t self_uid, bool allow_root);
extern bool gvm_ctl_allow_root;

/* Is the runtime directory described by st safe for user self? */
bool gvm_ctl_dir_safe(const struct stat *st, uid_t self);

/* The runtime directory: created (create=true) and checked. 0 or -errno. */
int gvm_ctl_dir(char *out, size_t len, bool create);

/* The socket path of an endpoint. 0 or -errno. */
int gvm_ctl_path(uint64_t endpoint, char *out, size_t len, bool create_dir);

/* ---- dead processes' sockets (stale.c) ---- */

#define GVM_CTL_SWEEP_MAX 4096   /* sockets one sweep looks at */

/* Whether name is a socket's name, "<16 hex digits>.sock"; its endpoint. */
bool gvm_ctl_sock_name(const char *name, uint64_t *endpoint);

/* Removes dir/name when it is a dead process's socket: a socket's name, a
 * socket (never a symlink's target) of this user that refuses connections.
 * True when it was removed. */
bool gvm_ctl_remove_dead(const char *dir, const char *name);

/* Removes every dead process's socket from the runtime directory (at most
 * GVM_CTL_SWEEP_MAX looked at); how many went. */
int gvm_ctl_sweep(void);

/* ---- the client side ---- */

#define GVM_CTL_TIMEOUT_S 10   /* a client's wait for one message */

/* Connects to an endpoint's socket and checks the server runs as an allowed
 * user; sends and receives on it time out after GVM_CTL_TIMEOUT_S. Returns the descriptor, or -errno (-ENOENT/-ECONNREFUSED: no such
 * process any more; -EPERM: another user's). */
int gvm_ctl_connect(uint64_t endpoint);

/* Sends one message with descriptors. 0 or -errno. */
int gvm_ctl_send(int fd, uint8_t type, const void *payload, size_t len, const int *fds, int nfds,
                 int flags);

/* Receives one message into buf (cap >= GVM_CTL_MSG_MAX) and its
 * descriptors (close-on-exec) into fds. Returns the bytes received, 0 at
 * EOF, or -errno; -EMSGSIZE when the message or its descriptors were
 * truncated (descriptors that did arrive are closed). */
ssize_t gvm_ctl_recv(int fd, void *buf, size_t cap, int *fds, int *nfds, int maxfds);

#endif
