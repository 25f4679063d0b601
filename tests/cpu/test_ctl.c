/* The control socket module and the CUDA IPC formats, without CUDA: framing
 * and handle parsing on bad input, the credentials and directory checks
 * (with injected users: the suite runs as root), and a live server: ping,
 * leases, malformed requests. */
#define _GNU_SOURCE
#include "ctl/server.h"
#include "harness.h"
#include "preload/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>

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

static const struct test_case cases[] = {
    TEST_ENTRY(framing_rejects_malformed_messages)
    TEST_ENTRY(handles_decode_only_what_they_encode)
    TEST_ENTRY(replies_are_checked)
    TEST_ENTRY(other_users_are_refused)
    TEST_ENTRY(unsafe_runtime_dirs_are_refused)
    TEST_ENTRY(server_answers_and_ends_leases)
    TEST_ENTRY(forked_child_does_not_serve)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
