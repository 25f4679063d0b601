/* The control socket's server thread and its worker (see server.h). */
#define _GNU_SOURCE
#include "ctl/server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
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
    void (*lease)(void *);
    void *lease_arg;
};

static gvm_ctl_handler handlers[GVM_CTL_TYPES];

/* Server state. conn_lock guards the connection table against fork (the
 * child closes what it inherited); only the server thread changes it, and
 * it holds the lock only to add or remove an entry. */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1;
static uint64_t endpoint;
static pid_t owner;            /* the process that serves */
static char sock_path[sizeof ((struct sockaddr_un *)0)->sun_path];
static struct gvm_ctl_conn **conns;
static size_t nconns, capconns;

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

void gvm_ctl_register(uint8_t type, gvm_ctl_handler fn)
{
    if (type && type < GVM_CTL_TYPES) __atomic_store_n(&handlers[type], fn, __ATOMIC_RELEASE);
}

uint64_t gvm_ctl_endpoint(void) { return __atomic_load_n(&endpoint, __ATOMIC_ACQUIRE); }

/* ---- connections ---------------------------------------------------- */

static void conn_add(int fd)
{
    struct gvm_ctl_conn *c = calloc(1, sizeof *c);
    pthread_mutex_lock(&conn_lock);
    if (c && nconns == capconns) {
        size_t cap = capconns ? capconns * 2 : 16;
        struct gvm_ctl_conn **n = realloc(conns, cap * sizeof *n);
        if (n) {
            conns = n;
            capconns = cap;
        }
    }
    if (c && nconns < capconns) {
        c->fd = fd;
        conns[nconns++] = c;
        c = NULL;
        fd = -1;
    }
    pthread_mutex_unlock(&conn_lock);
    free(c);
    if (fd >= 0) close(fd);   /* no memory: refuse the connection */
}

static void conn_drop(size_t i)
{
    struct gvm_ctl_conn *c = conns[i];
    pthread_mutex_lock(&conn_lock);
    conns[i] = conns[--nconns];
    close(c->fd);
    pthread_mutex_unlock(&conn_lock);
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

/* One message from c; false when c must go. */
static bool serve_one(struct gvm_ctl_conn *c)
{
    uint8_t buf[GVM_CTL_MSG_MAX];
    int fds[GVM_CTL_FDS_MAX], nfds = 0;
    ssize_t n = gvm_ctl_recv(c->fd, buf, sizeof buf, fds, &nfds, GVM_CTL_FDS_MAX);
    if (n == -EAGAIN) return true;
    for (int i = 0; i < nfds; i++) close(fds[i]);   /* clients send none */
    struct gvm_ctl_msg m;
    if (n <= 0 || nfds || gvm_ctl_parse(buf, (size_t)n, &m)) return false;
    gvm_ctl_handler h = __atomic_load_n(&handlers[m.type], __ATOMIC_ACQUIRE);
    if (!h) return false;
    h(c, &m);
    return !c->hangup;
}

static void accept_one(void)
{
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        /* Out of descriptors: the pending connection stays readable; back
         * off instead of spinning on it. */
        if (errno == EMFILE || errno == ENFILE) poll(NULL, 0, 100);
        return;
    }
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
        !gvm_ctl_peer_allowed(cr.uid, geteuid(), gvm_ctl_allow_root)) {
        close(fd);
        return;
    }
    conn_add(fd);
}

static void *server_main(void *arg)
{
    (void)arg;
    /* Here, not in gvm_ctl_start: the program does not wait for it. */
    gvm_ctl_sweep();
    struct pollfd *pf = NULL;
    size_t cap = 0;
    for (;;) {
        size_t n = nconns + 1;
        if (n > cap) {
            struct pollfd *np = realloc(pf, n * sizeof *np);
            if (!np) {
                poll(NULL, 0, 100);
                continue;
            }
            pf = np;
            cap = n;
        }
        pf[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        for (size_t i = 0; i < nconns; i++) pf[i + 1] = (struct pollfd){.fd = conns[i]->fd, .events = POLLIN};
        if (poll(pf, n, -1) < 0) continue;
        /* Back to front: dropping i moves the last entry into its place. */
        for (size_t i = n - 1; i-- > 0;)
            if (pf[i + 1].revents && !serve_one(conns[i])) conn_drop(i);
        if (pf[0].revents & POLLIN) accept_one();
    }
    return NULL;
}

/* ---- the worker --------------------------------------------------------- */

/* gvmshim's threads take none of the program's signals: it may expect
 * them on its own threads. */
static int start_thread(void *(*fn)(void *))
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, fn, NULL);
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
    if (!worker_started) worker_started = start_thread(worker_main) == 0;
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
    pthread_mutex_lock(&conn_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&conn_lock);
    pthread_mutex_unlock(&job_lock);
    pthread_mutex_unlock(&start_lock);
}

/* The child has neither thread: it must not hold the parent's socket (a
 * client would connect to a backlog nobody accepts) nor its connections
 * (the leases would outlive their holder). */
static void fork_child(void)
{
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = -1;
    for (size_t i = 0; i < nconns; i++) {
        close(conns[i]->fd);
        free(conns[i]);
    }
    nconns = 0;
    __atomic_store_n(&endpoint, 0, __ATOMIC_RELEASE);
    jobs_head = NULL;   /* jobs of the parent's objects: not the child's business */
    jobs_tail = &jobs_head;
    worker_started = false;
    pthread_mutex_init(&conn_lock, NULL);
    pthread_mutex_init(&job_lock, NULL);
    pthread_mutex_init(&start_lock, NULL);
    pthread_cond_init(&job_cond, NULL);
}

__attribute__((destructor)) static void ctl_unlink(void)
{
    if (gvm_ctl_endpoint() && owner == getpid()) unlink(sock_path);
}

/* Bound under a name of its own (<endpoint>.bind), and given the
 * socket's name only once it listens: a socket under that name accepts
 * connections while its process lives, so one that refuses them is a dead
 * process's (stale.c). Never replaces an existing name. */
static int open_socket(uint64_t ep)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX}, b;
    int rc = gvm_ctl_path(ep, a.sun_path, sizeof a.sun_path, true);
    if (rc) return rc;
    b = a;
    memcpy(b.sun_path + strlen(b.sun_path) - strlen(".sock"), ".bind", strlen(".bind"));
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&b, sizeof b)) {
        rc = -errno;
        close(fd);
        return rc;
    }
    if (listen(fd, 128) || renameat2(AT_FDCWD, b.sun_path, AT_FDCWD, a.sun_path, RENAME_NOREPLACE)) {
        rc = -errno;
        unlink(b.sun_path);
        close(fd);
        return rc;
    }
    memcpy(sock_path, a.sun_path, sizeof sock_path);
    return fd;
}

static uint64_t new_endpoint(void)
{
    uint64_t ep = 0;
    while (!ep)
        if (getrandom(&ep, sizeof ep, 0) != (ssize_t)sizeof ep) ep = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return ep;
}

int gvm_ctl_start(void)
{
    static bool atfork_done;
    if (gvm_ctl_endpoint()) return 0;
    pthread_mutex_lock(&start_lock);
    int rc = 0;
    if (!gvm_ctl_endpoint()) {
        if (!atfork_done) atfork_done = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
        gvm_ctl_register(GVM_CTL_PING, ping);
        uint64_t ep = new_endpoint();
        int fd = open_socket(ep);
        if (fd < 0) rc = fd;
        if (!rc) {
            listen_fd = fd;
            owner = getpid();
            if ((rc = -start_thread(server_main)) == 0) __atomic_store_n(&endpoint, ep, __ATOMIC_RELEASE);
        }
        if (rc && fd >= 0) {
            close(fd);
            unlink(sock_path);
            listen_fd = -1;
        }
    }
    pthread_mutex_unlock(&start_lock);
    return rc;
}
