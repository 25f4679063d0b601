/* The control socket module and the CUDA IPC formats, without CUDA: framing
 * and handle parsing on bad input, the credentials and directory checks
 * (with injected users: the suite runs as root), and a live server: ping,
 * leases, malformed requests. */
#define _GNU_SOURCE
#include "ctl/server.h"
#include "harness.h"
#include "preload/ipc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

static void framing_rejects_malformed_messages(void)
{
    uint8_t buf[GVM_CTL_MSG_MAX + 16], payload[GVM_CTL_MSG_MAX];
    struct gvm_ctl_msg m;
    memset(payload, 7, sizeof payload);
    size_t n = gvm_ctl_frame(buf, sizeof buf, GVM_CTL_PING, payload, 10);
    CHECK_EQ(n, GVM_CTL_HDR + 10);
    CHECK_EQ(gvm_ctl_parse(buf, n, &m), 0);
    CHECK_EQ(m.type, GVM_CTL_PING);
    CHECK_EQ(m.len, 10);
    CHECK_EQ(m.payload[9], 7);
    CHECK_EQ(gvm_ctl_parse(buf, n - 1, &m), -1);           /* length does not match */
    CHECK_EQ(gvm_ctl_parse(buf, GVM_CTL_HDR - 1, &m), -1); /* shorter than a header */
    CHECK_EQ(gvm_ctl_parse(NULL, 0, &m), -1);
    buf[0] = GVM_CTL_VERSION + 1;
    CHECK_EQ(gvm_ctl_parse(buf, n, &m), -1);
    buf[0] = GVM_CTL_VERSION;
    buf[1] = 0;
    CHECK_EQ(gvm_ctl_parse(buf, n, &m), -1);
    buf[1] = GVM_CTL_TYPES;
    CHECK_EQ(gvm_ctl_parse(buf, n, &m), -1);
    /* Too big to send, too big to accept. */
    CHECK_EQ(gvm_ctl_frame(buf, sizeof buf, GVM_CTL_PING, payload, GVM_CTL_MSG_MAX), 0);
    CHECK_EQ(gvm_ctl_frame(buf, 12, GVM_CTL_PING, payload, 10), 0);
    n = gvm_ctl_frame(buf, sizeof buf, GVM_CTL_PING, payload, GVM_CTL_MSG_MAX - GVM_CTL_HDR);
    CHECK_EQ(n, GVM_CTL_MSG_MAX);
    CHECK_EQ(gvm_ctl_parse(buf, n, &m), 0);
    CHECK_EQ(gvm_ctl_parse(buf, n + 1, &m), -1);
}

static struct gvm_ipc_handle sample(void)
{
    struct gvm_ipc_handle h = {.endpoint = 0x1122334455667788ull, .offset = 512, .size = 1000,
                               .extent = 2u << 20, .npieces = 1};
    for (int i = 0; i < 16; i++) h.id[i] = (uint8_t)(i * 13);
    return h;
}

static void handles_decode_only_what_they_encode(void)
{
    struct gvm_ipc_handle h = sample(), d;
    uint8_t b[CU_IPC_HANDLE_SIZE];
    gvm_ipc_encode(&h, b);
    CHECK_EQ(gvm_ipc_decode(b, sizeof b, &d), GVM_IPC_OK);
    CHECK(d.endpoint == h.endpoint && !memcmp(d.id, h.id, sizeof h.id) && d.offset == h.offset &&
          d.size == h.size && d.extent == h.extent && d.npieces == h.npieces);
    CHECK_EQ(gvm_ipc_decode(b, sizeof b - 1, &d), GVM_IPC_FOREIGN);
    /* Every single flipped bit is caught: magic (foreign) or checksum (bad). */
    for (size_t bit = 0; bit < 8 * sizeof b; bit++) {
        b[bit / 8] ^= (uint8_t)(1u << bit % 8);
        int k = gvm_ipc_decode(b, sizeof b, &d);
        CHECK(bit < 48 ? k == GVM_IPC_FOREIGN : k == GVM_IPC_BAD);
        b[bit / 8] ^= (uint8_t)(1u << bit % 8);
    }
    uint8_t zero[CU_IPC_HANDLE_SIZE] = {0};
    CHECK_EQ(gvm_ipc_decode(zero, sizeof zero, &d), GVM_IPC_FOREIGN);
    /* Fields that do not add up, with a valid checksum. */
    struct gvm_ipc_handle bad[] = {h, h, h, h, h, h};
    bad[0].endpoint = 0;
    bad[1].npieces = 0;
    bad[2].offset = bad[2].extent;
    bad[3].size = bad[3].extent;
    bad[4].npieces = 1000;
    bad[5].size = 0;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gvm_ipc_encode(&bad[i], b);
        CHECK_EQ(gvm_ipc_decode(b, sizeof b, &d), GVM_IPC_BAD);
    }
}

static void replies_are_checked(void)
{
    uint8_t p[GVM_IPC_REPLY_HDR + 8 * GVM_IPC_BATCH] = {0};
    struct gvm_ipc_reply r;
    gvm_put_u32(p + 4, 3);
    gvm_put_u32(p + 8, 1);
    gvm_put_u32(p + 12, 2);
    gvm_put_u64(p + 16, 6u << 20);
    CHECK_EQ(gvm_ipc_parse_reply(p, GVM_IPC_REPLY_HDR + 16, &r), 0);
    CHECK_EQ(r.first, 1);
    CHECK_EQ(gvm_ipc_parse_reply(p, GVM_IPC_REPLY_HDR + 8, &r), -1);   /* count says 2 sizes */
    gvm_put_u32(p + 8, 2);
    CHECK_EQ(gvm_ipc_parse_reply(p, GVM_IPC_REPLY_HDR + 16, &r), -1);  /* past the total */
    gvm_put_u32(p + 12, GVM_IPC_BATCH + 1);
    CHECK_EQ(gvm_ipc_parse_reply(p, sizeof p, &r), -1);
    memset(p, 0, sizeof p);
    gvm_put_u32(p, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gvm_ipc_parse_reply(p, GVM_IPC_REPLY_HDR, &r), 0);
    CHECK_EQ(r.status, CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(gvm_ipc_parse_reply(p, GVM_IPC_REPLY_HDR - 1, &r), -1);
}

/* The suite runs as root, so other users are injected. */
static void other_users_are_refused(void)
{
    CHECK(gvm_ctl_peer_allowed(1000, 1000, false));
    CHECK(!gvm_ctl_peer_allowed(1001, 1000, false));
    CHECK(!gvm_ctl_peer_allowed(0, 1000, false));
    CHECK(gvm_ctl_peer_allowed(0, 1000, true));
    CHECK(!gvm_ctl_peer_allowed(1001, 1000, true));
    CHECK(!gvm_ctl_peer_allowed(1000, 0, false));
    struct stat st = {.st_mode = S_IFDIR | 0700, .st_uid = 1000};
    CHECK(gvm_ctl_dir_safe(&st, 1000));
    CHECK(!gvm_ctl_dir_safe(&st, 1001));        /* another user's directory */
    st.st_mode = S_IFDIR | 0770;
    CHECK(!gvm_ctl_dir_safe(&st, 1000));        /* others may write or read */
    st.st_mode = S_IFLNK | 0700;
    CHECK(!gvm_ctl_dir_safe(&st, 1000));        /* a symlink planted in its place */
}

static char tmpdir[64];

static void private_runtime_dir(void)
{
    CHECK(snprintf(tmpdir, sizeof tmpdir, "%s/run-XXXXXX", test_scratch_dir()) < (int)sizeof tmpdir);
    CHECK(mkdtemp(tmpdir));
    setenv("XDG_RUNTIME_DIR", tmpdir, 1);
}

static void unsafe_runtime_dirs_are_refused(void)
{
    private_runtime_dir();
    char dir[256], sub[300];
    snprintf(sub, sizeof sub, "%s/gvmshim", tmpdir);
    CHECK_EQ(symlink("/tmp", sub), 0);
    CHECK_EQ(gvm_ctl_dir(dir, sizeof dir, true), -EPERM);
    CHECK_EQ(gvm_ctl_start(), -EPERM);
    CHECK_EQ(gvm_ctl_endpoint(), 0);
    unlink(sub);
    CHECK_EQ(mkdir(sub, 0755), 0);
    CHECK_EQ(gvm_ctl_dir(dir, sizeof dir, true), -EPERM);
    chmod(sub, 0700);
    CHECK_EQ(gvm_ctl_dir(dir, sizeof dir, true), 0);
    CHECK(!strcmp(dir, sub));
    rmdir(sub);
    rmdir(tmpdir);
}

static int leases_ended;

static void count_lease(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&leases_ended, 1, __ATOMIC_SEQ_CST);
}

/* A test request type: takes a lease and answers with a descriptor. */
static void lease_handler(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m)
{
    (void)m;
    CHECK(gvm_ctl_lease(c, count_lease, NULL));
    CHECK(!gvm_ctl_lease(c, count_lease, NULL));
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    gvm_ctl_reply(c, 9, "ok", 2, &fd, 1);
    close(fd);
}

static void wait_for(int *counter, int value)
{
    for (int i = 0; i < 500 && __atomic_load_n(counter, __ATOMIC_SEQ_CST) != value; i++) usleep(10000);
    CHECK_EQ(__atomic_load_n(counter, __ATOMIC_SEQ_CST), value);
}

static void server_answers_and_ends_leases(void)
{
    private_runtime_dir();
    gvm_ctl_register(9, lease_handler);
    CHECK_EQ(gvm_ctl_start(), 0);
    uint64_t ep = gvm_ctl_endpoint();
    CHECK(ep != 0);
    CHECK_EQ(gvm_ctl_start(), 0);
    CHECK_EQ(gvm_ctl_endpoint(), ep);
    int fd = gvm_ctl_connect(ep);
    CHECK(fd >= 0);
    CHECK_EQ(gvm_ctl_send(fd, GVM_CTL_PING, NULL, 0, NULL, 0, 0), 0);
    uint8_t buf[GVM_CTL_MSG_MAX];
    int fds[4], nfds = -1;
    ssize_t n = gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4);
    struct gvm_ctl_msg m;
    CHECK(n > 0);
    CHECK_EQ(gvm_ctl_parse(buf, (size_t)n, &m), 0);
    CHECK_EQ(m.type, GVM_CTL_PING);
    CHECK_EQ(m.len, 16);
    CHECK_EQ(gvm_get_u32(m.payload), getpid());
    CHECK(gvm_get_u64(m.payload + 8) == ep);
    CHECK_EQ(nfds, 0);
    /* A lease ends when the client goes. */
    CHECK_EQ(gvm_ctl_send(fd, 9, NULL, 0, NULL, 0, 0), 0);
    n = gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4);
    CHECK_EQ(n, GVM_CTL_HDR + 2);
    CHECK_EQ(nfds, 1);
    close(fds[0]);
    CHECK_EQ(__atomic_load_n(&leases_ended, __ATOMIC_SEQ_CST), 0);
    close(fd);
    wait_for(&leases_ended, 1);
    /* A malformed message, an unknown type, descriptors sent to the
     * server: it hangs up. */
    const uint8_t junk[3][8] = {{GVM_CTL_VERSION + 1, GVM_CTL_PING}, {GVM_CTL_VERSION, 17}, {GVM_CTL_VERSION, 1, 0, 0, 9}};
    for (int i = 0; i < 3; i++) {
        fd = gvm_ctl_connect(ep);
        CHECK(fd >= 0);
        CHECK_EQ(send(fd, junk[i], sizeof junk[i], 0), 8);
        CHECK_EQ(gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4), 0);
        close(fd);
    }
    fd = gvm_ctl_connect(ep);
    int devnull = open("/dev/null", O_RDONLY);
    CHECK_EQ(gvm_ctl_send(fd, GVM_CTL_PING, NULL, 0, &devnull, 1, 0), 0);
    CHECK_EQ(gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4), 0);
    close(fd);
    close(devnull);
    /* No such endpoint. */
    CHECK_EQ(gvm_ctl_connect(ep ^ 1), -ENOENT);
}

static void forked_child_does_not_serve(void)
{
    private_runtime_dir();
    CHECK_EQ(gvm_ctl_start(), 0);
    uint64_t ep = gvm_ctl_endpoint();
    int go[2];
    CHECK_EQ(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {
        /* No endpoint, and a start here makes a new one. */
        if (gvm_ctl_endpoint() != 0) _exit(1);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(2);
        _exit(0);
    }
    /* The parent still serves while the child lives ... */
    int fd = gvm_ctl_connect(ep);
    CHECK(fd >= 0);
    close(fd);
    int status;
    CHECK(write(go[1], "x", 1) == 1);
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The import socket: any user (abstract, no file permissions), only the
 * types registered on it, one request per connection, and a connection
 * that sends nothing is dropped after GVM_IMPORT_REQUEST_MS. */
static void import_socket_serves_one_request_of_its_own_types(void)
{
    private_runtime_dir();
    gvm_ctl_register_import(9, lease_handler);
    CHECK_EQ(gvm_ctl_start_import(), 0);
    uint64_t ep = gvm_ctl_import_endpoint();
    CHECK(ep != 0);
    CHECK(ep != gvm_ctl_endpoint());
    uint8_t buf[GVM_CTL_MSG_MAX];
    int fds[4], nfds = -1;
    /* Its type: answered, the lease held until the client goes. */
    int fd = gvm_ctl_connect_import(ep);
    CHECK(fd >= 0);
    CHECK_EQ(gvm_ctl_send(fd, 9, NULL, 0, NULL, 0, 0), 0);
    CHECK_EQ(gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4), GVM_CTL_HDR + 2);
    CHECK_EQ(nfds, 1);
    close(fds[0]);
    /* A second request on it: hung up on unread (a reset), and the lease
     * ends. */
    CHECK_EQ(gvm_ctl_send(fd, 9, NULL, 0, NULL, 0, 0), 0);
    ssize_t n = gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4);
    CHECK(n == 0 || n == -ECONNRESET);
    close(fd);
    wait_for(&leases_ended, 1);
    /* The control socket's types are not served here. */
    fd = gvm_ctl_connect_import(ep);
    CHECK_EQ(gvm_ctl_send(fd, GVM_CTL_PING, NULL, 0, NULL, 0, 0), 0);
    CHECK_EQ(gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4), 0);
    close(fd);
    /* Silence: dropped, not kept. */
    fd = gvm_ctl_connect_import(ep);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(gvm_ctl_recv(fd, buf, sizeof buf, fds, &nfds, 4), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= GVM_IMPORT_REQUEST_MS / 2);
    close(fd);
    /* Reached through the runtime directory too (the same user in another
     * network namespace), and not at all once the endpoint is wrong. */
    char path[256];
    CHECK_EQ(gvm_ctl_socket_path(ep, ".ipc", path, sizeof path, false), 0);
    CHECK_EQ(access(path, F_OK), 0);
    CHECK_EQ(gvm_ctl_connect_import(ep ^ 1), -ECONNREFUSED);
}

/* ---- dead processes' sockets ---------------------------------------- */

/* A socket file at dir/name that nobody listens on: what a process killed
 * while serving leaves (its listening descriptor closed with it). */
static void dead_socket(const char *dir, const char *name)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
}

/* One that listens: a live process's (its pid may be anything). */
static int live_socket(const char *dir, const char *name)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(fd, 4), 0);
    return fd;
}

static bool exists_in(const char *dir, const char *name)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* A process that served and died without its destructors: its socket. */
static uint64_t killed_servers_endpoint(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t ep = gvm_ctl_start() ? 0 : gvm_ctl_endpoint();
        _exit(write(p[1], &ep, sizeof ep) == (ssize_t)sizeof ep ? 0 : 1);
    }
    uint64_t ep = 0;
    CHECK_EQ(read(p[0], &ep, sizeof ep), (ssize_t)sizeof ep);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    close(p[0]);
    close(p[1]);
    CHECK(ep != 0);
    return ep;
}

/* The directory's entries besides the sockets the sweep may remove: a
 * live socket, another user's dead one, a symlink to a dead socket, a
 * regular file and a dead socket under names that are not a socket's. */
#define LIVE "00000000000000a1.sock"
#define FOREIGN "00000000000000a2.sock"
#define LINK "00000000000000a3.sock"
#define PLAIN "00000000000000a4.sock"
#define ODD "notes.sock"
#define STALE "00000000000000d1.sock"

static int untouchables(const char *dir, bool *foreign)
{
    int live = live_socket(dir, LIVE);
    dead_socket(dir, FOREIGN);
    char path[512], target[512];
    snprintf(path, sizeof path, "%s/%s", dir, FOREIGN);
    *foreign = chown(path, 12345, 12345) == 0;   /* the suite runs as root; else not checked */
    dead_socket(tmpdir, "elsewhere.sock");
    snprintf(target, sizeof target, "%s/elsewhere.sock", tmpdir);
    snprintf(path, sizeof path, "%s/%s", dir, LINK);
    CHECK_EQ(symlink(target, path), 0);
    snprintf(path, sizeof path, "%s/%s", dir, PLAIN);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    close(fd);
    dead_socket(dir, ODD);
    return live;
}

static void untouched(const char *dir, bool foreign)
{
    CHECK(exists_in(dir, LIVE));
    CHECK(!foreign || exists_in(dir, FOREIGN));
    CHECK(exists_in(dir, LINK));
    CHECK(exists_in(tmpdir, "elsewhere.sock"));
    CHECK(exists_in(dir, PLAIN));
    CHECK(exists_in(dir, ODD));
}

/* The case's files: harness children end with _exit, so no destructor
 * removes this process's own socket either. */
static void remove_runtime_dir(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) CHECK_EQ(unlinkat(dirfd(d), e->d_name, 0), 0);
    closedir(d);
    CHECK_EQ(rmdir(dir), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/elsewhere.sock", tmpdir);
    unlink(path);
    CHECK_EQ(rmdir(tmpdir), 0);
}

static void ping_once(uint64_t ep)
{
    int fd = gvm_ctl_connect(ep);
    CHECK(fd >= 0);
    CHECK_EQ(gvm_ctl_send(fd, GVM_CTL_PING, NULL, 0, NULL, 0, 0), 0);
    uint8_t buf[GVM_CTL_MSG_MAX];
    CHECK(gvm_ctl_recv(fd, buf, sizeof buf, NULL, NULL, 0) > 0);
    close(fd);
}

static void a_starting_server_removes_dead_processes_sockets(void)
{
    private_runtime_dir();
    char dir[256], name[64];
    CHECK_EQ(gvm_ctl_dir(dir, sizeof dir, true), 0);
    bool foreign;
    int live = untouchables(dir, &foreign);
    dead_socket(dir, STALE);
    snprintf(name, sizeof name, "%016llx.sock", (unsigned long long)killed_servers_endpoint());
    /* The killed server swept as it started; its own socket stays. */
    CHECK(exists_in(dir, name));
    CHECK_EQ(gvm_ctl_start(), 0);
    /* The server sweeps before it serves: once it answered, it is done. */
    ping_once(gvm_ctl_endpoint());
    CHECK(!exists_in(dir, STALE));
    CHECK(!exists_in(dir, name));
    untouched(dir, foreign);
    char own[64];
    snprintf(own, sizeof own, "%016llx.sock", (unsigned long long)gvm_ctl_endpoint());
    CHECK(exists_in(dir, own));
    close(live);
    remove_runtime_dir(dir);
}

static void a_client_removes_only_a_dead_socket(void)
{
    private_runtime_dir();
    char dir[256];
    CHECK_EQ(gvm_ctl_dir(dir, sizeof dir, true), 0);
    bool foreign;
    int live = untouchables(dir, &foreign);
    dead_socket(dir, STALE);
    const char *keep[] = {LIVE, FOREIGN, LINK, PLAIN, ODD, "00000000000000ff.sock"};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) CHECK(!gvm_ctl_remove_dead(dir, keep[i]));
    CHECK_EQ(gvm_ctl_connect(0xd1), -ECONNREFUSED);
    CHECK(gvm_ctl_remove_dead(dir, STALE));
    CHECK(!exists_in(dir, STALE));
    CHECK_EQ(gvm_ctl_connect(0xd1), -ENOENT);
    untouched(dir, foreign);
    /* A sweep leaves what the client left. */
    CHECK_EQ(gvm_ctl_sweep(), 0);
    untouched(dir, foreign);
    close(live);
    remove_runtime_dir(dir);
}

static void socket_names_are_exact(void)
{
    uint64_t ep = 0;
    CHECK(gvm_ctl_sock_name("0123456789abcdef.sock", &ep));
    CHECK(ep == 0x0123456789abcdefull);
    const char *bad[] = {"0123456789abcdef.bind", "0123456789abcde.sock", "0123456789abcdef0.sock",
                         "0123456789ABCDEF.sock", " 123456789abcdef.sock", "0123456789abcdef.sock.x",
                         "-123456789abcdef.sock", ".sock", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(!gvm_ctl_sock_name(bad[i], NULL));
}

static const struct test_case cases[] = {
    TEST_ENTRY(framing_rejects_malformed_messages)
    TEST_ENTRY(handles_decode_only_what_they_encode)
    TEST_ENTRY(replies_are_checked)
    TEST_ENTRY(other_users_are_refused)
    TEST_ENTRY(unsafe_runtime_dirs_are_refused)
    TEST_ENTRY(server_answers_and_ends_leases)
    TEST_ENTRY(forked_child_does_not_serve)
    TEST_ENTRY(a_starting_server_removes_dead_processes_sockets)
    TEST_ENTRY(a_client_removes_only_a_dead_socket)
    TEST_ENTRY(socket_names_are_exact)
    TEST_ENTRY(import_socket_serves_one_request_of_its_own_types)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
