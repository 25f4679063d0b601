/* gvmshim's per-process sockets, each served by one thread of its own and
 * started on first need; requests are dispatched by type through a table
 * per socket, so a socket serves exactly the types registered on it.
 *
 * The control socket (gvmctl's requests, started with the core): the
 * process's own user only.
 *   Where: <dir>/<endpoint>.sock, <dir> being $XDG_RUNTIME_DIR/gvmshim or
 *   /tmp/gvmshim-<uid>, a directory of mode 0700 owned by the user (checked
 *   with lstat: never a symlink, never another user's). The endpoint is a
 *   random 64-bit id, not the pid, so it means the same in every pid
 *   namespace and is never reused by a later process.
 *   Who: a connecting process must run as the same user (SO_PEERCRED), or
 *   as root when gvm_ctl_allow_root is set; clients check the server the
 *   same way.
 *
 * The import socket (CUDA IPC, started at the first export): any user, for
 * one request per connection (the request's secret decides, not the
 * peer's user: preload/ipc.h), with an endpoint of its own.
 *   Where: the abstract Unix socket "gvmshim-ipc-<endpoint>" (no file, no
 *   permissions: every process of the network namespace reaches it), and
 *   <dir>/<endpoint>.ipc for the same user in another network namespace
 *   that shares the runtime directory. ARCHITECTURE.md, "CUDA IPC across
 *   users", says why.
 *   Limits (a flood of connections from another user costs the process
 *   bounded work): at most GVM_IMPORT_RATE accepts a second (bursts of
 *   GVM_IMPORT_BURST), GVM_IMPORT_PENDING_MAX connections waiting for their
 *   request, GVM_IMPORT_CONNS_MAX in all (leases included), and a
 *   connection that has not sent its request after GVM_IMPORT_REQUEST_MS
 *   is dropped. Past a limit the socket is not accepted from: connections
 *   wait in the backlog.
 *
 * The server threads make no CUDA calls and take no lock a program thread
 * can hold for long: handlers run on them and must be quick; they read
 * only whole datagrams from non-blocking sockets and send without waiting.
 * Work that needs the driver or the core's locks goes to a worker thread
 * (gvm_ctl_defer). A connection may carry a lease: a callback run when the
 * peer hangs up (EOF: it closed the connection, or it died).
 *
 * A forked child does not serve: it has no server thread, and it closes
 * the inherited listening sockets and connections at once.  *
 * Litter: a process that dies without its destructors (killed, crashed,
 * _exit) leaves its socket files behind. Each control server, as it
 * starts, sweeps the directory once (at most GVM_CTL_SWEEP_MAX sockets
 * looked at) and removes the sockets of this user that nobody listens on;
 * a client that finds one removes it too (ctl/stale.c).
 */
#ifndef GVM_CTL_SERVER_H
#define GVM_CTL_SERVER_H

#include "ctl/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>

#define GVM_IMPORT_RATE 1000          /* accepts per second on the import socket */
#define GVM_IMPORT_BURST 64
#define GVM_IMPORT_PENDING_MAX 32
#define GVM_IMPORT_CONNS_MAX 4096
#define GVM_IMPORT_REQUEST_MS 2000

struct gvm_ctl_conn;

/* Runs on the server thread for each valid message of its type. */
typedef void (*gvm_ctl_handler)(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m);

/* Sets the handler of a type on the control socket, or on the import
 * socket (before or after the start). */
void gvm_ctl_register(uint8_t type, gvm_ctl_handler fn);
void gvm_ctl_register_import(uint8_t type, gvm_ctl_handler fn);

/* Starts the control socket's (import socket's) server once; returns 0, or
 * -errno (then nothing is served and a later call tries again). */
int gvm_ctl_start(void);
int gvm_ctl_start_import(void);

/* This process's endpoint ids, 0 before a successful start. */
uint64_t gvm_ctl_endpoint(void);
uint64_t gvm_ctl_import_endpoint(void);

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

/* The control socket's path of an endpoint (<dir>/<endpoint>.sock), or any
 * suffix's. 0 or -errno. */
int gvm_ctl_path(uint64_t endpoint, char *out, size_t len, bool create_dir);
int gvm_ctl_socket_path(uint64_t endpoint, const char *suffix, char *out, size_t len, bool create_dir);

/* The import socket's abstract address; returns its length. */
socklen_t gvm_ctl_import_name(uint64_t endpoint, struct sockaddr_un *a);

/* ---- the client side ---- */

#define GVM_CTL_TIMEOUT_S 10   /* a client's wait for one message */

/* Connects to an endpoint's socket and checks the server runs as an allowed
 * user; sends and receives on it time out after
 * GVM_CTL_TIMEOUT_S. Returns the descriptor, or -errno (-ENOENT/-ECONNREFUSED: no such
 * process any more; -EPERM: another user's). */
int gvm_ctl_connect(uint64_t endpoint);

/* Connects to an import socket: the abstract one, whoever serves it; where
 * there is none in this network namespace, the runtime directory's, of an
 * allowed user only. Returns the descriptor or -errno. */
int gvm_ctl_connect_import(uint64_t endpoint);

/* Sends one message with descriptors. 0 or -errno. */
int gvm_ctl_send(int fd, uint8_t type, const void *payload, size_t len, const int *fds, int nfds,
                 int flags);

/* Receives one message into buf (cap >= GVM_CTL_MSG_MAX) and its
 * descriptors (close-on-exec) into fds. Returns the bytes received, 0 at
 * EOF, or -errno; -EMSGSIZE when the message or its descriptors were
 * truncated (descriptors that did arrive are closed). */
ssize_t gvm_ctl_recv(int fd, void *buf, size_t cap, int *fds, int *nfds, int maxfds);

/* ---- dead processes' sockets (stale.c) ---- */

#define GVM_CTL_SWEEP_MAX 4096   /* sockets one sweep looks at */

/* Whether name is a socket file's name, "<16 hex digits>.sock" (control)
 * or ".ipc" (imports); its endpoint. */
bool gvm_ctl_sock_name(const char *name, uint64_t *endpoint);

/* Removes dir/name when it is a dead process's socket: a socket's name, a
 * socket (never a symlink's target) of this user that refuses connections.
 * True when it was removed. */
bool gvm_ctl_remove_dead(const char *dir, const char *name);

/* Removes every dead process's socket from the runtime directory (at most
 * GVM_CTL_SWEEP_MAX looked at); how many went. */
int gvm_ctl_sweep(void);

#endif
