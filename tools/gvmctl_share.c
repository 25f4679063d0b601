/* gvmctl share: the processes sharing each device's memory (option share),
 * read from the tables they keep together (policy/share_table.h) without
 * asking any of them: a hung participant shows as it last wrote. */
#define _GNU_SOURCE
#include "tools/gvmctl_share.h"

#include "policy/share_table.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void human(uint64_t b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The table at path, mapped read-only once it checks out; NULL otherwise. */
static const struct gvm_share_table *map_table(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    const struct gvm_share_table *t = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)sizeof *t) {
        void *m = mmap(NULL, sizeof *t, PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) t = m;
    }
    close(fd);
    if (t && (t->magic != GVM_SHARE_MAGIC || t->version != GVM_SHARE_VERSION)) {
        munmap((void *)t, sizeof *t);
        t = NULL;
    }
    return t;
}

static bool alive(const struct gvm_share_slot *s) { return gvm_share_process_alive(s->pid, s->start); }

static void show(const char *name, const struct gvm_share_table *t, bool json, bool *first)
{
    uint64_t now = now_ns(), held = 0, budget = 0;
    int n = 0;
    for (int i = 0; i < GVM_SHARE_SLOTS; i++) {
        const struct gvm_share_slot *s = &t->slot[i];
        if (!alive(s)) continue;
        n++;
        held += s->held > GVM_SHARE_BYTES_MAX ? GVM_SHARE_BYTES_MAX : s->held;
        if (s->budget > budget && s->budget <= GVM_SHARE_BYTES_MAX) budget = s->budget;
    }
    char hb[32], bb[32];
    human(held, hb, sizeof hb);
    human(budget, bb, sizeof bb);
    if (json) {
        printf("%s{\"device\":\"%s\",\"budget\":%llu,\"held\":%llu,\"processes\":[", *first ? "" : ",", name,
               (unsigned long long)budget, (unsigned long long)held);
    } else {
        printf("%s: budget %s, held %s by %d process%s\n", name, bb, hb, n, n == 1 ? "" : "es");
        if (n) printf("  %8s %11s %11s %7s %13s %11s %8s\n", "PID", "HELD", "MIN", "WEIGHT", "IDLE FOR", "GAVE",
                      "GAVE TO");
    }
    *first = false;
    int k = 0;
    for (int i = 0; i < GVM_SHARE_SLOTS; i++) {
        const struct gvm_share_slot *s = &t->slot[i];
        if (!alive(s)) continue;
        double idle = s->active_ns && s->active_ns <= now ? (double)(now - s->active_ns) / 1e9 : -1;
        bool hung = s->beat_ns <= now && now - s->beat_ns > 2000000000ull;
        if (json) {
            printf("%s{\"pid\":%d,\"held\":%llu,\"min\":%llu,\"weight\":%.3f,\"idle_seconds\":%.3f,\"gave\":%llu,"
                   "\"gave_to\":%llu,\"responding\":%s}",
                   k++ ? "," : "", s->pid, (unsigned long long)s->held, (unsigned long long)s->min,
                   (double)s->weight / 1000.0, idle, (unsigned long long)s->gave, (unsigned long long)s->gave_to,
                   hung ? "false" : "true");
            continue;
        }
        char h[32], m[32], g[32], to[24] = "-";
        human(s->held, h, sizeof h);
        human(s->min, m, sizeof m);
        human(s->gave, g, sizeof g);
        if (s->gave_to) snprintf(to, sizeof to, "%llu", (unsigned long long)s->gave_to);
        printf("  %8d %11s %11s %7.2f %11.1f s %11s %8s%s\n", s->pid, h, m, (double)s->weight / 1000.0, idle, g, to,
               hung ? "  (not responding)" : "");
    }
    if (json) printf("]}");
}

/* One table's participants, quiet where there is none: what list and top
 * show under their processes. */
int gvmctl_share_summary(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int shown = 0;
    bool first = true;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "share-", 6) != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const struct gvm_share_table *t = map_table(path);
        if (!t) continue;
        if (!shown++) printf("\nshared devices (GVM_SHARE):\n");
        show(e->d_name + 6, t, false, &first);
        munmap((void *)t, sizeof *t);
    }
    closedir(d);
    return shown;
}

int gvmctl_share(const char *dir, bool json)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "gvmctl: %s: no shared state (no process shares memory there)\n", dir);
        return 1;
    }
    bool first = true;
    int found = 0;
    if (json) printf("[");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "share-", 6) != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const struct gvm_share_table *t = map_table(path);
        if (!t) {
            if (!json) printf("%s: not a share table of this version: ignored\n", e->d_name);
            continue;
        }
        show(e->d_name + 6, t, json, &first);
        munmap((void *)t, sizeof *t);
        found++;
    }
    closedir(d);
    if (json) printf("]\n");
    else if (!found) printf("no device is shared in %s\n", dir);
    return 0;
}
