/* gvmctl: see and steer the processes of this user that run under gvmshim,
 * through each one's control socket (ctl/server.h). `gvmctl --help` is the
 * manual. Every error is one line on stderr and a non-zero exit. */
#define _GNU_SOURCE
#include "ctl/server.h"
#include "policy/config.h"
#include "tools/gvmctl_share.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEV 64

static const char *const manual =
    "NAME\n"
    "    gvmctl - see and steer running programs' GPU memory under gvmshim\n"
    "\n"
    "SYNOPSIS\n"
    "    gvmctl list [--json]\n"
    "    gvmctl stats PID [--json]\n"
    "    gvmctl set PID KEY=VALUE...\n"
    "    gvmctl pause PID [TAG] [--discard | --unmapped]\n"
    "    gvmctl resume PID [TAG]\n"
    "    gvmctl migrate PID (TAG|--all) (DEVICE|host)\n"
    "    gvmctl top [--interval SECONDS] [--count N]\n"
    "    gvmctl share [--dir DIR] [--json]\n"
    "    gvmctl --help\n"
    "\n"
    "DESCRIPTION\n"
    "    Talks to every process of this user that runs under gvmshim, through\n"
    "    the control socket each one serves (GVM_CONTROL=1, the default) in a\n"
    "    private runtime directory ($XDG_RUNTIME_DIR/gvmshim, else\n"
    "    /tmp/gvmshim-UID, mode 0700). A process appears once it has started\n"
    "    CUDA and made its first allocation.\n"
    "\n"
    "COMMANDS\n"
    "    list      one line per process: pid, command line, and per device the\n"
    "              bytes gvmshim holds there / its limit, and how many of the\n"
    "              bytes allocated on it are at home, on a peer, on the host;\n"
    "              then, where processes share a device (GVM_SHARE=1), what\n"
    "              `share` shows (top too)\n"
    "    stats     the process's full statistics (the fields of GVM_STATS), live\n"
    "    set       changes options in the running process, all of them or, when\n"
    "              one is refused, none: the options that can change live\n"
    "              (listed below), with the values the config file takes\n"
    "              (device_limit=0:8G,1:50%). Prints each option's old and new\n"
    "              value. Lowering device_limit below what the process holds\n"
    "              on a device moves its least recently used allocations to\n"
    "              the spill targets first, and returns once the device holds\n"
    "              at most the new limit; with spill off it is refused and\n"
    "              nothing changes. Raising it lets promotion bring spilled\n"
    "              memory back.\n"
    "@LIVE@"
    "    pause     gvm_pause from outside: moves TAG's memory, or without TAG\n"
    "              every allocation of the process, to host memory, where\n"
    "              kernels and copies keep reading and writing it (the program\n"
    "              keeps running), and gives gvmshim's idle device memory back\n"
    "              to the driver. With --discard (TAG only) it releases TAG's\n"
    "              memory without a copy; with --unmapped the copy in host\n"
    "              memory is not mapped at the allocations' addresses (faster;\n"
    "              touching paused memory faults). Returns once the device\n"
    "              memory is released, saying how many bytes moved, how fast,\n"
    "              and how many went back to the driver. Pointers stay valid.\n"
    "              Memory shared with other processes (CUDA IPC) stays, and\n"
    "              the exit status says so; during a stream capture nothing\n"
    "              is done. Pausing what is paused does nothing.\n"
    "    resume    gvm_resume from outside; returns once the memory is back.\n"
    "              Allocations made while paused are left as they are.\n"
    "    migrate   gvm_migrate of every allocation of TAG (--all: every\n"
    "              allocation) to device DEVICE or to host memory; returns\n"
    "              once moved. Allocations another process maps (CUDA IPC)\n"
    "              or that are paused stay, and the exit status says so.\n"
    "    top       list, refreshed every --interval seconds (1), with the rate\n"
    "              at which each process moves memory; --count N stops after N\n"
    "    share     the processes sharing each device's memory (GVM_SHARE=1):\n"
    "              the budget, and per process what it holds, its guaranteed\n"
    "              minimum and weight, when it last used its memory, what it\n"
    "              gave back for others and to whom; read from the shared\n"
    "              state in --dir (GVM_SHARE_DIR, else the runtime directory)\n"
    "\n"
    "OPTIONS\n"
    "    --json    machine-readable output\n"
    "\n"
    "EXIT STATUS\n"
    "    0 on success; 1 when the process cannot be reached or refuses (no such\n"
    "    process, not under gvmshim, another user's process, a failed\n"
    "    operation, memory that stayed, a TAG no allocation carries); 2 on a\n"
    "    usage error.\n";

/* The manual, with the options that can change live from the option table
 * in place of @LIVE@. */
static void print_manual(void)
{
    const char *mark = strstr(manual, "@LIVE@");
    fwrite(manual, 1, (size_t)(mark - manual), stdout);
    int col = printf("              live options:");
    bool first = true;
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        if (!gvm_options[i].live) continue;
        int len = (int)strlen(gvm_options[i].name);
        if (!first) col += printf(",");
        if (col + 1 + len > 78) col = printf("\n             ") - 1;
        col += printf(" %s", gvm_options[i].name);
        first = false;
    }
    printf("\n");
    fputs(mark + strlen("@LIVE@"), stdout);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gvmctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int usage(void)
{
    fputs("usage: gvmctl list [--json] | stats PID [--json] | set PID KEY=VALUE... |\n"
          "              pause PID [TAG] [--discard|--unmapped] | resume PID [TAG] |\n"
          "              migrate PID (TAG|--all) (DEVICE|host) |\n"
          "              top [--interval S] [--count N] | share [--dir DIR] [--json] | --help\n",
          stderr);
    return 2;
}

/* ---- finding processes ------------------------------------------------ */

struct proc {
    int pid;
    uint64_t endpoint;
};

/* Every live endpoint in the runtime directory, with its pid (PING). The
 * socket of a process that died without removing it goes. */
static int find_all(struct proc *out, int max)
{
    char dir[256];
    if (gvm_ctl_dir(dir, sizeof dir, false)) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; n < max && (e = readdir(d));) {
        uint64_t ep;
        if (!gvm_ctl_sock_name(e->d_name, &ep)) continue;
        int fd = gvm_ctl_connect(ep);
        if (fd == -ECONNREFUSED) gvm_ctl_remove_dead(dir, e->d_name);   /* checked again there */
        if (fd < 0) continue;
        uint8_t buf[GVM_CTL_MSG_MAX];
        struct gvm_ctl_msg m;
        ssize_t r = gvm_ctl_send(fd, GVM_CTL_PING, NULL, 0, NULL, 0, 0) ? -1
                                                                          : gvm_ctl_recv(fd, buf, sizeof buf, NULL, NULL, 0);
        if (r > 0 && !gvm_ctl_parse(buf, (size_t)r, &m) && m.type == GVM_CTL_PING && m.len >= 16)
            out[n++] = (struct proc){(int)gvm_get_u32(m.payload), ep};
        close(fd);
    }
    closedir(d);
    return n;
}

/* The uid owning /proc/PID, or -1 when there is no such process. */
static long proc_uid(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long uid = -1, real;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Uid: %ld %ld", &real, &uid) == 2) break;
    fclose(f);
    return uid;
}

static int find_pid(int pid, uint64_t *endpoint)
{
    struct proc all[1024];
    int n = find_all(all, 1024);
    for (int i = 0; i < n; i++)
        if (all[i].pid == pid) {
            *endpoint = all[i].endpoint;
            return 0;
        }
    long uid = proc_uid(pid);
    if (uid < 0) return fail("no process %d", pid);
    if (uid != (long)geteuid()) return fail("process %d belongs to another user", pid);
    return fail("process %d is not running under gvmshim (or has made no allocation yet, or runs with "
                "GVM_CONTROL=0)",
                pid);
}

static int parse_pid(const char *s, int *pid)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v <= 0 || v > 1 << 30) return fail("not a process id: '%s'", s);
    *pid = (int)v;
    return 0;
}

/* ---- one request ------------------------------------------------------- */

/* Sends a request and collects the whole reply text (malloc'd, NUL-ended)
 * and its status. Returns 0, or 1 after saying why. */
static int request(uint64_t endpoint, int pid, uint8_t type, const void *p, size_t n, char **text, int *status)
{
    int fd = gvm_ctl_connect(endpoint);
    if (fd < 0) return fail("cannot reach process %d: %s", pid, strerror(-fd));
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    int rc = out ? gvm_ctl_send(fd, type, p, n, NULL, 0, 0) : -ENOMEM;
    for (bool more = true; !rc && more;) {
        uint8_t buf[GVM_CTL_MSG_MAX];
        struct gvm_ctl_msg m;
        /* Pausing many gigabytes takes a while: wait as long as it takes. */
        ssize_t r;
        do r = gvm_ctl_recv(fd, buf, sizeof buf, NULL, NULL, 0);
        while (r == -EAGAIN && type != GVM_CTL_INFO && type != GVM_CTL_STATS);
        if (r <= 0) {
            rc = r ? (int)r : -ECONNRESET;
            break;
        }
        if (gvm_ctl_parse(buf, (size_t)r, &m) || m.type != type || m.len < GVM_CTL_REPLY_HDR) {
            rc = -EPROTO;
            break;
        }
        more = m.payload[0];
        *status = (int)gvm_get_u32(m.payload + 1);
        size_t k = m.len - GVM_CTL_REPLY_HDR;
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *nt = realloc(out, cap);
            if (!nt) {
                rc = -ENOMEM;
                break;
            }
            out = nt;
        }
        memcpy(out + len, m.payload + GVM_CTL_REPLY_HDR, k);
        len += k;
    }
    close(fd);
    if (rc) {
        free(out);
        return fail("process %d: %s", pid, rc == -ECONNRESET ? "it closed the connection (did it exit?)"
                                                               : strerror(-rc));
    }
    out[len] = 0;
    *text = out;
    return 0;
}

/* ---- list and top ------------------------------------------------------ */

struct dev_info {
    int ordinal;
    unsigned long long held, limit, home, peer, host;
};

struct info {
    int pid, ndev;
    unsigned long long moved, host_held;
    struct dev_info dev[MAX_DEV];
    char cmd[256];
};

static void read_cmdline(int pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i + 1 < n; i++)
        if (!out[i]) out[i] = ' ';
    out[n] = 0;
    if (!n) snprintf(out, cap, "?");
}

static int get_info(const struct proc *p, struct info *in)
{
    char *text;
    int status = 0;
    if (request(p->endpoint, p->pid, GVM_CTL_INFO, NULL, 0, &text, &status)) return 1;
    memset(in, 0, sizeof *in);
    in->pid = p->pid;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        struct dev_info d;
        if (sscanf(line, "device %d held %llu limit %llu home %llu peer %llu host %llu", &d.ordinal, &d.held,
                   &d.limit, &d.home, &d.peer, &d.host) == 6 && in->ndev < MAX_DEV)
            in->dev[in->ndev++] = d;
        else if (sscanf(line, "moved %llu", &in->moved) == 1 || sscanf(line, "host held %llu", &in->host_held) == 1)
            continue;
    }
    free(text);
    read_cmdline(p->pid, in->cmd, sizeof in->cmd);
    return status ? fail("process %d: %s", p->pid, "could not describe itself") : 0;
}

static void human(unsigned long long b, char *out, size_t cap)
{
    static const char *const units[] = {"B", "K", "M", "G", "T"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (b == (unsigned long long)SIZE_MAX) snprintf(out, cap, "none");
    else snprintf(out, cap, u ? "%.1f%s" : "%.0f%s", v, units[u]);
}

static void print_info(const struct info *in, double rate)
{
    printf("%-8d %-32.32s", in->pid, in->cmd);
    for (int i = 0; i < in->ndev; i++) {
        const struct dev_info *d = &in->dev[i];
        char held[16], lim[16], peer[16], host[16];
        human(d->held, held, sizeof held);
        human(d->limit, lim, sizeof lim);
        human(d->peer, peer, sizeof peer);
        human(d->host, host, sizeof host);
        printf("  dev%d %s/%s peer %s host %s", d->ordinal, held, lim, peer, host);
    }
    if (rate >= 0) printf("  moving %.2f GB/s", rate / 1e9);
    printf("\n");
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void print_info_json(const struct info *in, bool first)
{
    printf("%s{\"pid\": %d, \"command\": ", first ? "" : ",\n ", in->pid);
    json_string(in->cmd);
    printf(", \"bytes_moved\": %llu, \"host_held\": %llu, \"devices\": [", in->moved, in->host_held);
    for (int i = 0; i < in->ndev; i++) {
        const struct dev_info *d = &in->dev[i];
        printf("%s{\"device\": %d, \"held\": %llu, \"limit\": %llu, \"home\": %llu, \"on_peer\": %llu, "
               "\"on_host\": %llu}",
               i ? ", " : "", d->ordinal, d->held, d->limit, d->home, d->peer, d->host);
    }
    printf("]}");
}

/* Where the shared state lives: GVM_SHARE_DIR, else the runtime directory
 * (share_dir's default). */
static int share_dir(char *dir, size_t n)
{
    const char *env = getenv("GVM_SHARE_DIR");
    if (env && env[0]) {
        snprintf(dir, n, "%s", env);
        return 0;
    }
    return gvm_ctl_dir(dir, n, false);
}

static void share_summary(void)
{
    char dir[4096];
    if (!share_dir(dir, sizeof dir)) gvmctl_share_summary(dir);
}

static int cmd_list(int argc, char **argv)
{
    bool json = argc == 1 && !strcmp(argv[0], "--json");
    if (argc && !json) return usage();
    struct proc all[1024];
    int n = find_all(all, 1024), bad = 0;
    if (json) printf("[");
    else if (n) printf("%-8s %-32s  per device: held/limit, allocated there but on a peer, on the host\n", "PID",
                       "COMMAND");
    for (int i = 0, shown = 0; i < n; i++) {
        struct info in;
        if (get_info(&all[i], &in)) {
            bad = 1;
            continue;
        }
        if (json) print_info_json(&in, !shown);
        else print_info(&in, -1);
        shown++;
    }
    if (json) printf("]\n");
    else share_summary();
    return bad;
}

static int cmd_top(int argc, char **argv)
{
    double interval = 1;
    long count = -1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--interval") && i + 1 < argc) interval = atof(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) count = atol(argv[++i]);
        else return usage();
    }
    if (!(interval > 0)) return fail("--interval must be more than 0");
    static struct {
        int pid;
        unsigned long long moved;
    } last[1024];
    int nlast = 0;
    for (long round = 0; count < 0 || round < count; round++) {
        if (round) {
            struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (isatty(STDOUT_FILENO)) printf("\033[H\033[2J");
        time_t now = time(NULL);
        printf("gvmctl top - %s", ctime(&now));
        printf("%-8s %-32s  per device: held/limit, allocated there but on a peer, on the host\n", "PID", "COMMAND");
        struct proc all[1024];
        int n = find_all(all, 1024), nnew = 0;
        static struct {
            int pid;
            unsigned long long moved;
        } cur[1024];
        for (int i = 0; i < n; i++) {
            struct info in;
            if (get_info(&all[i], &in)) continue;
            double rate = -1;
            for (int j = 0; j < nlast; j++)
                if (last[j].pid == in.pid) rate = (double)(in.moved - last[j].moved) / interval;
            print_info(&in, rate);
            cur[nnew].pid = in.pid;
            cur[nnew++].moved = in.moved;
        }
        memcpy(last, cur, sizeof cur);
        nlast = nnew;
        share_summary();
        fflush(stdout);
    }
    return 0;
}

/* ---- commands on one process ------------------------------------------- */

static int one(const char *pid_text, uint8_t type, const void *p, size_t n, bool print)
{
    int pid = 0;
    uint64_t ep = 0;
    char *text = NULL;
    int status = 0;
    if (parse_pid(pid_text, &pid) || find_pid(pid, &ep) || request(ep, pid, type, p, n, &text, &status)) return 1;
    int rc = status ? fail("process %d: %s", pid, text) : 0;
    if (!status && print) fputs(text, stdout);
    free(text);
    return rc;
}

static int cmd_stats(int argc, char **argv)
{
    bool json = argc == 2 && !strcmp(argv[1], "--json");
    if (argc < 1 || (argc == 2 && !json) || argc > 2) return usage();
    uint8_t j = json;
    return one(argv[0], GVM_CTL_STATS, &j, 1, true);
}

/* ---- pause, resume, migrate: answers in bytes ---------------------------- */

/* A reply of pause, resume or migrate (preload/control.c): a reason line,
 * then "key value" lines. */
struct report {
    char reason[512];
    bool parsed;                 /* the key lines were there */
    int matched, done, already, to;
    unsigned long long bytes, released, stayed, shared;
    unsigned long long dev[MAX_DEV];
    double seconds;
};

static void parse_report(char *text, struct report *r)
{
    memset(r, 0, sizeof *r);
    char *nl = strchr(text, '\n');
    size_t n = nl ? (size_t)(nl - text) : strlen(text);
    snprintf(r->reason, sizeof r->reason, "%.*s", (int)n, text);
    for (char *line = nl ? strtok(nl + 1, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int d;
        unsigned long long v;
        if (sscanf(line, "matched %d", &r->matched) == 1) r->parsed = true;
        else if (sscanf(line, "device %d %llu", &d, &v) == 2 && d >= 0 && d < MAX_DEV) r->dev[d] = v;
        else if (sscanf(line, "done %d", &r->done) == 1 || sscanf(line, "already %d", &r->already) == 1 ||
                 sscanf(line, "bytes %llu", &r->bytes) == 1 || sscanf(line, "released %llu", &r->released) == 1 ||
                 sscanf(line, "stayed %llu", &r->stayed) == 1 || sscanf(line, "shared %llu", &r->shared) == 1 ||
                 sscanf(line, "seconds %lf", &r->seconds) == 1 || sscanf(line, "to %d", &r->to) == 1)
            continue;
    }
}

/* Bytes in binary units, one decimal: "10.9 GiB". */
static void bytes_text(unsigned long long b, char *out, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

enum verb { V_PAUSE, V_RESUME, V_MIGRATE };

/* "paused 10.9 GiB (device 0: 10.9 GiB to host) in 2.31 s, 4.7 GB/s;
 * released 11.2 GiB to the driver" */
static void print_report(const struct report *r, enum verb v, bool unmapped, const char *dest)
{
    static const char *const verbs[] = {"paused", "resumed", "moved"};
    char b[32];
    bytes_text(r->bytes, b, sizeof b);
    printf("%s %s", verbs[v], b);
    if (v == V_MIGRATE) printf(" to %s", dest);
    const char *how = v == V_RESUME ? "back"
                      : v == V_MIGRATE ? (r->to >= 0 ? "arrived" : "left")
                      : r->to == -3    ? "discarded"
                      : unmapped       ? "to host, unmapped"
                                       : "to host";
    bool first = true;
    for (int d = 0; d < MAX_DEV; d++) {
        if (!r->dev[d]) continue;
        bytes_text(r->dev[d], b, sizeof b);
        printf("%sdevice %d: %s %s", first ? " (" : ", ", d, b, how);
        first = false;
    }
    printf("%s in %.2f s", first ? "" : ")", r->seconds);
    if (r->seconds > 0 && r->bytes) printf(", %.1f GB/s", (double)r->bytes / r->seconds / 1e9);
    if (v != V_RESUME) {
        bytes_text(r->released, b, sizeof b);
        printf("; released %s to the driver", b);
    }
    printf("\n");
}

/* Says what a pause, resume or migrate did; the exit status: 1 when it
 * failed, left memory behind, or named a tag nothing carries. */
static int answer(int pid, int status, char *text, enum verb v, bool named, bool unmapped, const char *dest)
{
    static const char *const nouns[] = {"pause", "resume", "move"};
    struct report r;
    parse_report(text, &r);
    if (!r.parsed) {   /* a process of an older gvmshim: a status and a word */
        if (status) return fail("process %d: %s", pid, text);
        printf("%s\n", v == V_PAUSE ? "paused" : v == V_RESUME ? "resumed" : "moved");
        return 0;
    }
    if (r.done || r.bytes) print_report(&r, v, unmapped, dest);
    if (status) {
        if (r.stayed && !strstr(r.reason, "stay")) {
            char b[32];
            bytes_text(r.stayed, b, sizeof b);
            return fail("process %d: %s; %s stayed on the devices", pid, r.reason, b);
        }
        return fail("process %d: %s", pid, r.reason);
    }
    if (r.done || r.bytes) return 0;
    /* Nothing done: fine when all was as asked already, an error when the
     * request named nothing. */
    if (named && !r.matched) return fail("process %d: nothing to %s: %s", pid, nouns[v], r.reason);
    printf("nothing to %s: %s", nouns[v], r.reason);
    if (v == V_PAUSE && r.released) {
        char b[32];
        bytes_text(r.released, b, sizeof b);
        printf("; released %s to the driver", b);
    }
    printf("\n");
    return 0;
}

/* One request whose reply is a report (the process's answer text kept on
 * failure too). */
static int report_request(const char *pid_text, uint8_t type, const void *p, size_t n, int *pid, char **text,
                          int *status)
{
    uint64_t ep = 0;
    if (parse_pid(pid_text, pid) || find_pid(*pid, &ep)) return 1;
    return request(ep, *pid, type, p, n, text, status);
}

static int cmd_pause_resume(int argc, char **argv, bool pause)
{
    const char *tag = "";
    bool discard = false, unmapped = false;
    if (argc < 1) return usage();
    for (int i = 1; i < argc; i++) {
        if (pause && !strcmp(argv[i], "--discard")) discard = true;
        else if (pause && !strcmp(argv[i], "--unmapped")) unmapped = true;
        else if (argv[i][0] != '-' && !tag[0]) tag = argv[i];
        else return usage();
    }
    uint8_t p[GVM_CTL_MSG_MAX];
    size_t tl = strlen(tag);
    if (tl > 200) return fail("tag too long: '%.20s...'", tag);
    if (discard && unmapped) return fail("--discard and --unmapped exclude each other");
    if (discard && !tl)
        return fail("--discard needs a TAG: the whole process's memory would come back zeroed (pause without "
                    "--discard keeps a copy)");
    gvm_put_u32(p, (discard ? 1u : 0u) | (unmapped ? 2u : 0u));
    memcpy(p + 4, tag, tl);
    int pid = 0, status = 0;
    char *text = NULL;
    if (report_request(argv[0], pause ? GVM_CTL_PAUSE : GVM_CTL_RESUME, p, 4 + tl, &pid, &text, &status)) return 1;
    int rc = answer(pid, status, text, pause ? V_PAUSE : V_RESUME, tl > 0, unmapped, NULL);
    free(text);
    return rc;
}

static int cmd_migrate(int argc, char **argv)
{
    if (argc != 3) return usage();
    bool all = !strcmp(argv[1], "--all");
    const char *tag = all ? "" : argv[1];
    if (!all && tag[0] == '-') return usage();
    long loc;
    char *end;
    if (!strcmp(argv[2], "host")) {
        loc = -1;   /* GVM_HOST */
    } else {
        loc = strtol(argv[2], &end, 10);
        if (!argv[2][0] || *end || loc < 0 || loc > 1 << 16)
            return fail("not a device ordinal or 'host': '%s'", argv[2]);
    }
    size_t tl = strlen(tag);
    if (tl > 200) return fail("tag too long: '%.20s...'", tag);
    uint8_t p[GVM_CTL_MSG_MAX];
    gvm_put_u32(p, (uint32_t)(int32_t)loc);
    p[4] = all;
    memcpy(p + 5, tag, tl);
    int pid = 0, status = 0;
    char *text = NULL;
    char dest[32];
    snprintf(dest, sizeof dest, loc < 0 ? "host" : "device %ld", loc);
    if (report_request(argv[0], GVM_CTL_MIGRATE, p, 5 + tl, &pid, &text, &status)) return 1;
    int rc = answer(pid, status, text, V_MIGRATE, !all, false, dest);
    free(text);
    return rc;
}

static int cmd_set(int argc, char **argv)
{
    if (argc < 2) return usage();
    char p[GVM_CTL_MSG_MAX];
    size_t len = 0;
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (!strchr(argv[i], '=') || strchr(argv[i], '\n')) {
            fail("'%s': expected KEY=VALUE", argv[i]);
            return 2;
        }
        if (len + n + 1 > GVM_CTL_MSG_MAX - GVM_CTL_HDR) return fail("too many or too long KEY=VALUE arguments");
        memcpy(p + len, argv[i], n);
        len += n;
        p[len++] = '\n';
    }
    return one(argv[0], GVM_CTL_SET, p, len, true);
}

static int cmd_share(int argc, char **argv)
{
    char dir[4096] = "";
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(dir, sizeof dir, "%s", argv[++i]);
        else return usage();
    }
    if (!dir[0] && share_dir(dir, sizeof dir)) return fail("no runtime directory: give --dir");
    return gvmctl_share(dir, json);
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_manual();
        return 0;
    }
    if (!strcmp(cmd, "list")) return cmd_list(argc - 2, argv + 2);
    if (!strcmp(cmd, "top")) return cmd_top(argc - 2, argv + 2);
    if (!strcmp(cmd, "stats")) return cmd_stats(argc - 2, argv + 2);
    if (!strcmp(cmd, "set")) return cmd_set(argc - 2, argv + 2);
    if (!strcmp(cmd, "pause")) return cmd_pause_resume(argc - 2, argv + 2, true);
    if (!strcmp(cmd, "resume")) return cmd_pause_resume(argc - 2, argv + 2, false);
    if (!strcmp(cmd, "migrate")) return cmd_migrate(argc - 2, argv + 2);
    if (!strcmp(cmd, "share")) return cmd_share(argc - 2, argv + 2);
    fail("unknown command '%s'", cmd);
    return usage();
}
