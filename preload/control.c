/* gvmctl's requests, served on the control socket (ctl/server.h). The
 * server thread only copies a request and hands it to the control worker,
 * since answering takes the core's locks (and pause, resume and migrate move
 * memory); the worker answers on a duplicate of the connection, so the
 * server thread never waits for it. A reply ends only when the work is done:
 * `gvmctl pause` returns once the device memory is released. */
#define _GNU_SOURCE
#include "preload/control.h"

#include "preload/nvml.h"
#include "preload/shim.h"

#include "core/log.h"
#include "core/stats.h"
#include "core/topo.h"
#include "core/where.h"
#include "ctl/server.h"
#include "gvmshim.h"
#include "policy/policy.h"
#include "policy/set.h"
#include "policy/tags.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct request {
    uint8_t type;
    int fd;                    /* a duplicate of the connection */
    uint32_t len;
    uint8_t payload[];
};

/* Sends one reply message, waiting (bounded) for room: the connection is
 * non-blocking, and a slow reader must not lose the end of a reply. */
static int send_part(int fd, uint8_t type, const uint8_t *msg, size_t len)
{
    for (int tries = 0; tries < 100; tries++) {
        int rc = gvm_ctl_send(fd, type, msg, len, NULL, 0, MSG_DONTWAIT);
        if (rc != -EAGAIN) return rc;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 100);
    }
    return -ETIMEDOUT;
}

/* The reply: status and text, cut into as many messages as it needs. */
static void reply(int fd, uint8_t type, int status, const char *text, size_t len)
{
    uint8_t msg[GVM_CTL_MSG_MAX - GVM_CTL_HDR];
    const size_t room = sizeof msg - GVM_CTL_REPLY_HDR;
    size_t off = 0;
    do {
        size_t n = len - off < room ? len - off : room;
        msg[0] = off + n < len;
        gvm_put_u32(msg + 1, (uint32_t)status);
        memcpy(msg + GVM_CTL_REPLY_HDR, text + off, n);
        if (send_part(fd, type, msg, GVM_CTL_REPLY_HDR + n)) return;
        off += n;
    } while (off < len);
}

static void reply_str(int fd, uint8_t type, int status, const char *text)
{
    reply(fd, type, status, text, strlen(text));
}

/* ---- the requests ------------------------------------------------------- */

static void info(int fd)
{
    int ndev = gvm_topo.ndev;
    struct gvm_where *w = calloc((size_t)(ndev ? ndev : 1), sizeof *w);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!w || !f) {
        if (f) fclose(f);
        free(text);
        free(w);
        reply_str(fd, GVM_CTL_INFO, -ENOMEM, "out of memory");
        return;
    }
    gvm_heap_where(w, ndev);
    fprintf(f, "pid %d\n", (int)getpid());
    fprintf(f, "moved %llu\n", (unsigned long long)__atomic_load_n(&gvm_stats.bytes_migrated, __ATOMIC_RELAXED));
    for (int d = 0; d < ndev; d++) {
        size_t lim = gvm_policy_limit(d);
        fprintf(f, "device %d held %zu limit %zu home %zu peer %zu host %zu\n", d, gvm_policy_usage(d), lim,
                w[d].home, w[d].peer, w[d].host);
    }
    fprintf(f, "host held %zu\n", gvm_policy_usage(GVM_LOC_HOST));
    fclose(f);
    reply(fd, GVM_CTL_INFO, 0, text, len);
    free(text);
    free(w);
}

static void stats(int fd, const uint8_t *p, uint32_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        reply_str(fd, GVM_CTL_STATS, -ENOMEM, "out of memory");
        return;
    }
    int64_t nvml_used[GVM_MAX_DEVICES];
    int ndev = gvm_topo.ndev;
    const int64_t *used = gvm_nvml_process_used(ndev, gvm_real_dlsym, nvml_used) ? nvml_used : NULL;
    gvm_stats_write(f, n >= 1 && p[0], ndev, used);
    fclose(f);
    reply(fd, GVM_CTL_STATS, 0, text, len);
    free(text);
}

/* The tag a request names ("" = every tag), NUL-terminated in tag. */
static bool tag_of(const uint8_t *p, uint32_t n, uint32_t skip, char *tag, size_t cap)
{
    if (n < skip || n - skip >= cap) return false;
    memcpy(tag, p + skip, n - skip);
    tag[n - skip] = 0;
    return strlen(tag) == n - skip;   /* no NUL inside */
}

/* The answer of a pause, resume or migrate: its first line says why
 * nothing or not everything was done ("" when all went), then "key value"
 * lines in bytes (gvmctl words them). */
static void reply_report(int fd, uint8_t type, gvm_status st, const gvm_pause_result *res)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        reply_str(fd, type, st, st ? gvm_strerror(st) : "");
        return;
    }
    fprintf(f, "%s\n", res->reason[0] ? res->reason : st ? gvm_strerror(st) : "");
    fprintf(f, "matched %d\ndone %d\nalready %d\nbytes %zu\n", res->matched, res->done, res->already, res->bytes);
    for (int d = 0; d < GVM_REPORT_DEVICES; d++)
        if (res->device_bytes[d]) fprintf(f, "device %d %zu\n", d, res->device_bytes[d]);
    fprintf(f, "released %zu\nstayed %zu\nshared %zu\nseconds %.6f\nto %d\n", res->released, res->stayed,
            res->stayed_shared, res->seconds, res->to);
    fclose(f);
    reply(fd, type, st, text, len);
    free(text);
}

static void pause_resume(int fd, uint8_t type, const uint8_t *p, uint32_t n)
{
    char tag[GVM_CTL_MSG_MAX];
    if (n < 4 || !tag_of(p, n, 4, tag, sizeof tag)) {
        reply_str(fd, type, GVM_ERR_INVALID, "malformed request");
        return;
    }
    gvm_pause_result res;
    gvm_status st = type == GVM_CTL_PAUSE ? gvm_pause_report(tag[0] ? tag : NULL, (int)gvm_get_u32(p), &res)
                                          : gvm_resume_report(tag[0] ? tag : NULL, &res);
    reply_report(fd, type, st, &res);
}

static void migrate(int fd, const uint8_t *p, uint32_t n)
{
    char tag[GVM_CTL_MSG_MAX];
    if (n < 5 || !tag_of(p, n, 5, tag, sizeof tag) || (!p[4] && !tag[0])) {
        reply_str(fd, GVM_CTL_MIGRATE, GVM_ERR_INVALID, "malformed request");
        return;
    }
    gvm_pause_result res;
    gvm_status st = gvm_policy_migrate_report(p[4] ? NULL : tag, (int)(int32_t)gvm_get_u32(p), &res);
    reply_report(fd, GVM_CTL_MIGRATE, st, &res);
}

/* "key=value" lines, applied together or not at all (policy/set.h). */
static void set(int fd, const uint8_t *p, uint32_t n)
{
    char *text = malloc((size_t)n + 1), *out = NULL;
    char **items = calloc((size_t)n / 2 + 1, sizeof *items);   /* lines are 2 bytes or more apart */
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!text || !items || !f) {
        if (f) fclose(f);
        free(out);
        free(items);
        free(text);
        reply_str(fd, GVM_CTL_SET, -ENOMEM, "out of memory");
        return;
    }
    memcpy(text, p, n);
    text[n] = 0;
    int st = GVM_ERR_INVALID, count = 0;
    if (strlen(text) != n) {
        fputs("malformed request", f);
    } else {
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            items[count++] = line;
        st = gvm_policy_set(items, count, f);
    }
    fclose(f);
    reply(fd, GVM_CTL_SET, st, out, len);
    free(out);
    free(items);
    free(text);
}

static void run(void *arg)
{
    struct request *r = arg;
    switch (r->type) {
    case GVM_CTL_INFO: info(r->fd); break;
    case GVM_CTL_STATS: stats(r->fd, r->payload, r->len); break;
    case GVM_CTL_PAUSE:
    case GVM_CTL_RESUME: pause_resume(r->fd, r->type, r->payload, r->len); break;
    case GVM_CTL_MIGRATE: migrate(r->fd, r->payload, r->len); break;
    case GVM_CTL_SET: set(r->fd, r->payload, r->len); break;
    default: reply_str(r->fd, r->type, GVM_ERR_INVALID, "unknown request"); break;
    }
    close(r->fd);
    free(r);
}

/* On the server thread: copy, hand over, return. */
static void accept_request(struct gvm_ctl_conn *c, const struct gvm_ctl_msg *m)
{
    struct request *r = malloc(sizeof *r + m->len);
    int fd = r ? gvm_ctl_dup(c) : -1;
    if (!r || fd < 0) {
        free(r);
        gvm_ctl_hangup(c);
        return;
    }
    r->type = m->type;
    r->fd = fd;
    r->len = m->len;
    memcpy(r->payload, m->payload, m->len);
    gvm_ctl_defer(run, r);
}

int gvm_control_start(void)
{
    static const uint8_t types[] = {GVM_CTL_INFO,  GVM_CTL_STATS,  GVM_CTL_SET,
                                    GVM_CTL_PAUSE, GVM_CTL_RESUME, GVM_CTL_MIGRATE};
    for (size_t i = 0; i < sizeof types; i++) gvm_ctl_register(types[i], accept_request);
    int rc = gvm_ctl_start();
    if (rc) gvm_warn("cannot open the control socket (%s): gvmctl will not reach this process", strerror(-rc));
    return rc;
}
