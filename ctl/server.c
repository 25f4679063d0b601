/* The servers of ctl/server.h: the control socket's and the import
 * socket's, each one thread, and the worker they share. */
#define _GNU_SOURCE
#include "ctl/server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct gvm_ctl_conn {
    int fd;
    bool hangup;
    bool pending;            /* import socket: its one request not answered yet */
    int64_t deadline_ns;     /* import socket: a pending connection goes then */
    void (*lease)(void *);
    void *lease_arg;
};

/* One listening socket of a server. */
struct listener {
    int fd;
    bool check_peer;         /* the same user only (SO_PEERCRED) */
    char path[sizeof ((struct sockaddr_un *)0)->sun_path];   /* a file to unlink at exit; "" if abstract */
};

/* A server: its listeners, handlers and connections, served by one
 * thread. conn_lock guards the connection table against fork (the child
 * closes what it inherited); only the server's thread changes it, and it
 * holds the lock only to add or remove an entry. */
struct server {
    gvm_ctl_handler handlers[GVM_CTL_TYPES];
    bool limited;            /* the import socket's limits apply (server.h) */
    struct listener ls[2];
    int nls;
    uint64_t endpoint;       /* 0 until started */
    pid_t owner;             /* the process that serves */
    pthread_mutex_t conn_lock;
    struct gvm_ctl_conn **conns;
    size_t nconns, capconns;
    size_t pending;          /* limited: connections whose request is not answered */
    double tokens;           /* limited: accepts left in the bucket */
    int64_t refilled_ns;
};

#define NO_LISTENERS {{.fd = -1}, {.fd = -1}}
static struct server ctl = {.conn_lock = PTHREAD_MUTEX_INITIALIZER, .ls = NO_LISTENERS};
static struct server imp = {.limited = true, .conn_lock = PTHREAD_MUTEX_INITIALIZER, .ls = NO_LISTENERS};
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

/* The worker: a queue of deferred jobs. */
struct job {
    void (*fn)(void *);
    void *arg;
    struct job *next;
};
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cond = PTHREAD_COND_INITIALIZER;
static struct job *jobs_head, **jobs_tail = &jobs_head;
static bool worker_started;

static void set_handler(struct server *s, uint8_t type, gvm_ctl_handler fn)
{
    if (type && type < GVM_CTL_TYPES) __atomic_store_n(&s->handlers[type], fn, __ATOMIC_RELEASE);
}

void gvm_ctl_register(uint8_t type, gvm_ctl_handler fn) { set_handler(&ctl, type, fn); }
void gvm_ctl_register_import(uint8_t type, gvm_ctl_handler fn) { set_handler(&imp, type, fn); }

uint64_t gvm_ctl_endpoint(void) { return __atomic_load_n(&ctl.endpoint, __ATOMIC_ACQUIRE); }
uint64_t gvm_ctl_import_endpoint(void) { return __atomic_load_n(&imp.endpoint, __ATOMIC_ACQUIRE); }

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ---- connections ---------------------------------------------------- */

static void conn_add(struct server *s, int fd)
{
    struct gvm_ctl_conn *c = calloc(1, sizeof *c);
    pthread_mutex_lock(&s->conn_lock);
    if (c && s->nconns == s->capconns) {
        size_t cap = s->capconns ? s->capconns * 2 : 16;
        struct gvm_ctl_conn **n = realloc(s->conns, cap * sizeof *n);
        if (n) {
            s->conns = n;
            s->capconns = cap;
        }
    }
    if (c && s->nconns < s->capconns) {
        c->fd = fd;
        if (s->limited) {
            c->pending = true;
            c->deadline_ns = now_ns() + (int64_t)GVM_IMPORT_REQUEST_MS * 1000000;
            s->pending++;
        }
        s->conns[s->nconns++] = c;
        c = NULL;
        fd = -1;
    }
    pthread_mutex_unlock(&s->conn_lock);
    free(c);
    if (fd >= 0) close(fd);   /* no memory: refuse the connection */
}

static void conn_drop(struct server *s, size_t i)
{
    struct gvm_ctl_conn *c = s->conns[i];
    pthread_mutex_lock(&s->conn_lock);
    s->conns[i] = s->conns[--s->nconns];
    if (c->pending) s->pending--;
    close(c->fd);
    pthread_mutex_unlock(&s->conn_lock);
    if (c->lease) c->lease(c->lease_arg);
    free(c);
}

int gvm_ctl_reply(struct gvm_ctl_conn *c, uint8_t type, const void *payload, size_t len, const int *fds,
                  int nfds)
{
    int rc = gvm_ctl_send(c->fd, type, payload, len, fds, nfds, MSG_DONTWAIT);
    if (rc) c->hangup = true;
    return rc;
}

void gvm_ctl_hangup(struct gvm_ctl_conn *c) { c->hangup = true; }

int gvm_ctl_dup(struct gvm_ctl_conn *c)
{
    int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

bool gvm_ctl_lease(struct gvm_ctl_conn *c, void (*fn)(void *), void *arg)
{
    if (c->lease) return false;
    c->lease = fn;
    c->lease_arg = arg;
    return true;
}

static void ping(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m)
{
    (void)m;
    uint8_t p[16];
    gvm_put_u32(p, (uint32_t)getpid());
    gvm_put_u32(p + 4, (uint32_t)geteuid());
    gvm_put_u64(p + 8, gvm_ctl_endpoint());
    gvm_ctl_reply(c, GVM_CTL_PING, p, sizeof p, NULL, 0);
}

/* One message from c; false when c must go. On the import socket a
 * connection carries one request: after it, the peer may only hang up
 * (ending the lease the request took, if any). */
static bool serve_one(struct server *s, struct gvm_ctl_conn *c)
{
    if (s->limited && !c->pending) return false;
    uint8_t buf[GVM_CTL_MSG_MAX];
    int fds[GVM_CTL_FDS_MAX], nfds = 0;
    ssize_t n = gvm_ctl_recv(c->fd, buf, sizeof buf, fds, &nfds, GVM_CTL_FDS_MAX);
    if (n == -EAGAIN) return true;
    for (int i = 0; i < nfds; i++) close(fds[i]);   /* clients send none */
    struct gvm_ctl_msg m;
    if (n <= 0 || nfds || gvm_ctl_parse(buf, (size_t)n, &m)) return false;
    gvm_ctl_handler h = __atomic_load_n(&s->handlers[m.type], __ATOMIC_ACQUIRE);
    if (!h) return false;
    h(c, &m);
    if (s->limited) {
        c->pending = false;
        s->pending--;
        if (!c->lease) return false;
    }
    return !c->hangup;
}

static void accept_one(struct server *s, const struct listener *l)
{
    if (s->limited) s->tokens -= 1;   /* a failed accept is work too */
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        /* Out of descriptors: the pending connection stays readable; back
         * off instead of spinning on it. */
        if (errno == EMFILE || errno == ENFILE) poll(NULL, 0, 100);
        return;
    }
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (l->check_peer && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
                          !gvm_ctl_peer_allowed(cr.uid, geteuid(), gvm_ctl_allow_root))) {
        close(fd);
        return;
    }
    conn_add(s, fd);
}

/* ---- the import socket's limits (server thread) ------------------------- */

static void refill(struct server *s, int64_t now)
{
    s->tokens += (double)(now - s->refilled_ns) * GVM_IMPORT_RATE / 1e9;
    if (s->tokens > GVM_IMPORT_BURST) s->tokens = GVM_IMPORT_BURST;
    s->refilled_ns = now;
}

/* Connections that did not send their request in time go. */
static void drop_late(struct server *s, int64_t now)
{
    for (size_t i = s->nconns; i-- > 0;)
        if (s->conns[i]->pending && s->conns[i]->deadline_ns <= now) conn_drop(s, i);
}

/* While this is false the listeners are not polled: new connections wait
 * in the backlog (and past it, the clients' connect waits or fails). */
static bool accepting(const struct server *s)
{
    return !s->limited ||
           (s->pending < GVM_IMPORT_PENDING_MAX && s->nconns < GVM_IMPORT_CONNS_MAX && s->tokens >= 1);
}

/* Milliseconds until the next deadline or accept token, -1: none. */
static int poll_timeout(const struct server *s, int64_t now, bool listening)
{
    if (!s->limited) return -1;
    int64_t wait = -1;
    if (!listening && s->tokens < 1) wait = (int64_t)((1 - s->tokens) * 1e9 / GVM_IMPORT_RATE);
    for (size_t i = 0; i < s->nconns; i++) {
        if (!s->conns[i]->pending) continue;
        int64_t d = s->conns[i]->deadline_ns - now;
        if (d < 0) d = 0;
        if (wait < 0 || d < wait) wait = d;
    }
    return wait < 0 ? -1 : (int)(wait / 1000000 + 1);
}

static void *server_main(void *arg)
{
    struct server *s = arg;
    /* Here, not in gvm_ctl_start: the program does not wait for it. */
    if (s == &ctl) gvm_ctl_sweep();
    struct pollfd *pf = NULL;
    size_t cap = 0, nls = (size_t)s->nls;
    for (;;) {
        int64_t now = now_ns();
        if (s->limited) {
            refill(s, now);
            drop_late(s, now);
        }
        bool listening = accepting(s);
        size_t n = s->nconns + nls;
        if (n > cap) {
            struct pollfd *np = realloc(pf, n * sizeof *np);
            if (!np) {
                poll(NULL, 0, 100);
                continue;
            }
            pf = np;
            cap = n;
        }
        for (size_t l = 0; l < nls; l++) pf[l] = (struct pollfd){.fd = listening ? s->ls[l].fd : -1, .events = POLLIN};
        for (size_t i = 0; i < s->nconns; i++) pf[nls + i] = (struct pollfd){.fd = s->conns[i]->fd, .events = POLLIN};
        if (poll(pf, n, poll_timeout(s, now, listening)) < 0) continue;
        /* Back to front: dropping i moves the last entry into its place. */
        for (size_t i = n - nls; i-- > 0;)
            if (pf[nls + i].revents && !serve_one(s, s->conns[i])) conn_drop(s, i);
        for (size_t l = 0; l < nls; l++)
            if (pf[l].revents & POLLIN) accept_one(s, &s->ls[l]);
    }
    return NULL;
}

/* ---- the worker --------------------------------------------------------- */

/* gvmshim's threads take none of the program's signals: it may expect
 * them on its own threads. */
static int start_thread(void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, fn, arg);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&job_lock);
    for (;;) {
        while (!jobs_head) pthread_cond_wait(&job_cond, &job_lock);
        struct job *j = jobs_head;
        jobs_head = j->next;
        if (!jobs_head) jobs_tail = &jobs_head;
        pthread_mutex_unlock(&job_lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&job_lock);
    }
    return NULL;
}

void gvm_ctl_defer(void (*fn)(void *), void *arg)
{
    struct job *j = malloc(sizeof *j);
    if (!j) {
        fn(arg);   /* no memory for the queue: run it here, late rather than never */
        return;
    }
    *j = (struct job){fn, arg, NULL};
    pthread_mutex_lock(&job_lock);
    if (!worker_started) worker_started = start_thread(worker_main, NULL) == 0;
    *jobs_tail = j;
    jobs_tail = &j->next;
    pthread_cond_signal(&job_cond);
    pthread_mutex_unlock(&job_lock);
}

/* ---- start, fork, exit -------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&start_lock);
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&ctl.conn_lock);
    pthread_mutex_lock(&imp.conn_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&imp.conn_lock);
    pthread_mutex_unlock(&ctl.conn_lock);
    pthread_mutex_unlock(&job_lock);
    pthread_mutex_unlock(&start_lock);
}

/* The child has no server thread: it must not hold the parent's sockets
 * (a client would connect to a backlog nobody accepts) nor its
 * connections (the leases would outlive their holder). */
static void server_forget(struct server *s)
{
    for (int l = 0; l < 2; l++) {
        if (s->ls[l].fd >= 0) close(s->ls[l].fd);
        s->ls[l] = (struct listener){.fd = -1};
    }
    s->nls = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        close(s->conns[i]->fd);
        free(s->conns[i]);
    }
    s->nconns = 0;
    s->pending = 0;
    __atomic_store_n(&s->endpoint, 0, __ATOMIC_RELEASE);
    pthread_mutex_init(&s->conn_lock, NULL);
}

static void fork_child(void)
{
    server_forget(&ctl);
    server_forget(&imp);
    jobs_head = NULL;   /* jobs of the parent's objects: not the child's business */
    jobs_tail = &jobs_head;
    worker_started = false;
    pthread_mutex_init(&job_lock, NULL);
    pthread_mutex_init(&start_lock, NULL);
    pthread_cond_init(&job_cond, NULL);
}

static void unlink_files(struct server *s)
{
    if (!__atomic_load_n(&s->endpoint, __ATOMIC_ACQUIRE) || s->owner != getpid()) return;
    for (int l = 0; l < s->nls; l++)
        if (s->ls[l].path[0]) unlink(s->ls[l].path);
}

__attribute__((destructor)) static void ctl_unlink(void)
{
    unlink_files(&ctl);
    unlink_files(&imp);
}

static void close_listeners(struct server *s)
{
    for (int l = 0; l < s->nls; l++) {
        close(s->ls[l].fd);
        if (s->ls[l].path[0]) unlink(s->ls[l].path);
        s->ls[l] = (struct listener){.fd = -1};
    }
    s->nls = 0;
}

static int listen_on(const struct sockaddr_un *a, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (const struct sockaddr *)a, len) || listen(fd, 128)) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* A socket file in the private runtime directory: the same user only.
 * Bound under a name of its own (<endpoint>.bind), and given its name only
 * once it listens: a socket under that name accepts connections while its
 * process lives, so one that refuses them is a dead process's (stale.c).
 * Never replaces an existing name. */
static int listen_file(struct server *s, uint64_t ep, const char *suffix)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX}, b;
    int rc = gvm_ctl_socket_path(ep, suffix, a.sun_path, sizeof a.sun_path, true);
    if (rc) return rc;
    b = a;
    if (gvm_ctl_socket_path(ep, ".bind", b.sun_path, sizeof b.sun_path, false)) return -ENAMETOOLONG;
    int fd = listen_on(&b, sizeof b);
    if (fd < 0) return fd;
    if (renameat2(AT_FDCWD, b.sun_path, AT_FDCWD, a.sun_path, RENAME_NOREPLACE)) {
        rc = -errno;
        unlink(b.sun_path);
        close(fd);
        return rc;
    }
    struct listener *l = &s->ls[s->nls++];
    *l = (struct listener){.fd = fd, .check_peer = true};
    memcpy(l->path, a.sun_path, sizeof l->path);
    return 0;
}

static int open_control(struct server *s, uint64_t ep) { return listen_file(s, ep, ".sock"); }

/* The abstract socket any user of the network namespace reaches; and, for
 * the same user in another network namespace that shares the runtime
 * directory, a file beside the control socket (optional: without it,
 * imports come through the abstract socket only). */
static int open_import(struct server *s, uint64_t ep)
{
    struct sockaddr_un a;
    socklen_t len = gvm_ctl_import_name(ep, &a);
    int fd = listen_on(&a, len);
    if (fd < 0) return fd;
    s->ls[s->nls++] = (struct listener){.fd = fd};
    listen_file(s, ep, ".ipc");
    s->tokens = GVM_IMPORT_BURST;
    s->refilled_ns = now_ns();
    return 0;
}

static uint64_t new_endpoint(void)
{
    uint64_t ep = 0;
    while (!ep)
        if (getrandom(&ep, sizeof ep, 0) != (ssize_t)sizeof ep) ep = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return ep;
}

static int start_server(struct server *s, int (*open_listeners)(struct server *, uint64_t))
{
    static bool atfork_done;
    if (__atomic_load_n(&s->endpoint, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&start_lock);
    int rc = 0;
    if (!s->endpoint) {
        if (!atfork_done) atfork_done = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
        uint64_t ep;
        /* A name in use (another process chose it, or took it): another. */
        for (int tries = 0;; tries++) {
            ep = new_endpoint();
            rc = open_listeners(s, ep);
            if (rc != -EADDRINUSE || tries == 7) break;
        }
        if (!rc) {
            s->owner = getpid();
            if ((rc = -start_thread(server_main, s)) == 0) __atomic_store_n(&s->endpoint, ep, __ATOMIC_RELEASE);
            else close_listeners(s);
        }
    }
    pthread_mutex_unlock(&start_lock);
    return rc;
}

int gvm_ctl_start(void)
{
    gvm_ctl_register(GVM_CTL_PING, ping);
    return start_server(&ctl, open_control);
}

int gvm_ctl_start_import(void) { return start_server(&imp, open_import); }
