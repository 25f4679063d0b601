/* The shared table of the processes sharing a device (policy/share_table.h):
 * a file mapped by each of them, checked before it is trusted. */
#define _GNU_SOURCE
#include "policy/share_table.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A directory shared by a group: not ours, owned by root or another user,
 * group-writable, with the setgid bit so files made in it belong to the
 * group. Others may not write it. */
static bool group_dir(const struct stat *d)
{
    return d->st_uid != geteuid() && (d->st_mode & S_ISGID) && (d->st_mode & S_IWGRP) &&
           !(d->st_mode & S_IWOTH);
}

static int dir_ok(const char *dir, bool *group, char *why, size_t n)
{
    struct stat d;
    if (lstat(dir, &d) != 0) {
        snprintf(why, n, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(d.st_mode)) {
        snprintf(why, n, "%s is not a directory", dir);
        return -1;
    }
    *group = group_dir(&d);
    if (d.st_uid != geteuid() && !*group) {
        snprintf(why, n, "%s belongs to another user and is no group directory (setgid, mode 2770)", dir);
        return -1;
    }
    if (d.st_uid == geteuid() && (d.st_mode & (S_IWGRP | S_IWOTH)) && !(d.st_mode & S_ISVTX)) {
        snprintf(why, n, "%s is writable by others", dir);
        return -1;
    }
    return 0;
}

/* The file as it must be: a regular file, ours (or, in a group directory,
 * our group's), of the table's size once made. */
static int file_ok(int fd, bool group, bool *fresh, char *why, size_t n)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, n, "not a regular file");
        return -1;
    }
    if (st.st_uid != geteuid() && !(group && st.st_gid == getegid())) {
        snprintf(why, n, "owned by another user");
        return -1;
    }
    if (st.st_mode & S_IWOTH) {
        snprintf(why, n, "writable by others");
        return -1;
    }
    *fresh = st.st_size == 0;
    if (!*fresh && st.st_size != (off_t)sizeof(struct gvm_share_table)) {
        snprintf(why, n, "%lld bytes, not a table of this version", (long long)st.st_size);
        return -1;
    }
    return 0;
}

int gvm_share_open(struct gvm_share_file *f, const char *dir, const char *name, char *why, size_t n)
{
    bool group = false, fresh = false;
    f->fd = -1;
    f->t = NULL;
    f->mine = -1;
    if (dir_ok(dir, &group, why, n)) return -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        snprintf(why, n, "path too long");
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, group ? 0660 : 0600);
    if (fd < 0) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    flock(fd, LOCK_EX);
    int rc = file_ok(fd, group, &fresh, why, n);
    if (rc) {
        char what[256];
        snprintf(what, sizeof what, "%s", why);
        snprintf(why, n, "%s: %s", path, what);
    }
    if (rc == 0 && fresh && ftruncate(fd, sizeof(struct gvm_share_table)) != 0) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        rc = -1;
    }
    void *m = MAP_FAILED;
    if (rc == 0) m = mmap(NULL, sizeof(struct gvm_share_table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (rc == 0 && m == MAP_FAILED) {
        snprintf(why, n, "mmap: %s", strerror(errno));
        rc = -1;
    }
    struct gvm_share_table *t = m;
    if (rc == 0 && fresh) {
        t->version = GVM_SHARE_VERSION;
        t->nslots = GVM_SHARE_SLOTS;
        __atomic_store_n(&t->magic, GVM_SHARE_MAGIC, __ATOMIC_RELEASE);
    }
    if (rc == 0 && (__atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != GVM_SHARE_MAGIC ||
                    t->version != GVM_SHARE_VERSION || t->nslots != GVM_SHARE_SLOTS)) {
        snprintf(why, n, "%s is not a gvmshim share table of version %d", path, GVM_SHARE_VERSION);
        rc = -1;
    }
    flock(fd, LOCK_UN);
    if (rc) {
        if (m != MAP_FAILED) munmap(m, sizeof(struct gvm_share_table));
        close(fd);
        return -1;
    }
    f->fd = fd;
    f->t = t;
    return 0;
}

/* A process's start time and whether it has exited (a zombie its parent
 * has not reaped holds no memory): 0 when /proc does not show it. */
static uint64_t proc_start(int pid, bool *exited)
{
    char path[64], buf[1024];
    *exited = false;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) return 0;
    buf[len] = 0;
    /* The command name may hold spaces and parentheses: fields count from
     * the last ')'. Field 3, the state, follows it; the start time is 22. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return 0;
    *exited = p[2] == 'Z' || p[2] == 'X';
    int field = 2;
    for (char *s = p + 1; *s; s++) {
        if (*s == ' ' && ++field == 22) return strtoull(s + 1, NULL, 10);
    }
    return 0;
}

uint64_t gvm_share_start_time(int pid)
{
    bool exited;
    return proc_start(pid, &exited);
}

bool gvm_share_process_alive(int pid, uint64_t start)
{
    if (pid <= 0) return false;
    /* kill refuses another user's live process (a group directory). */
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    bool exited;
    uint64_t now = proc_start(pid, &exited);
    if (exited) return false;
    /* In another pid namespace /proc may not show it: kill said it lives. */
    return !now || !start || now == start;
}

/* Whether the process in slot s is still the one that claimed it. */
static bool slot_alive(const struct gvm_share_slot *s)
{
    return gvm_share_process_alive(__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE),
                                   __atomic_load_n(&s->start, __ATOMIC_RELAXED));
}

static void slot_clear(struct gvm_share_slot *s)
{
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
    uint64_t *w = &s->start;
    for (size_t i = 0; i < (sizeof *s - offsetof(struct gvm_share_slot, start)) / 8; i++)
        __atomic_store_n(&w[i], 0, __ATOMIC_RELAXED);
}

int gvm_share_claim(struct gvm_share_file *f, uint64_t min, uint64_t weight)
{
    int got = -1, me = getpid();
    flock(f->fd, LOCK_EX);
    for (int i = 0; i < GVM_SHARE_SLOTS && got < 0; i++) {
        struct gvm_share_slot *s = &f->t->slot[i];
        if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == me || !slot_alive(s)) got = i;
    }
    if (got >= 0) {
        struct gvm_share_slot *s = &f->t->slot[got];
        slot_clear(s);
        s->uid = geteuid();
        __atomic_store_n(&s->start, gvm_share_start_time(me), __ATOMIC_RELAXED);
        __atomic_store_n(&s->min, min, __ATOMIC_RELAXED);
        __atomic_store_n(&s->weight, weight, __ATOMIC_RELAXED);
        __atomic_store_n(&s->pid, me, __ATOMIC_RELEASE);
        f->mine = got;
    }
    flock(f->fd, LOCK_UN);
    return got;
}

void gvm_share_close(struct gvm_share_file *f)
{
    if (!f->t) return;
    if (f->mine >= 0) {
        flock(f->fd, LOCK_EX);
        if (__atomic_load_n(&f->t->slot[f->mine].pid, __ATOMIC_ACQUIRE) == getpid())
            slot_clear(&f->t->slot[f->mine]);
        flock(f->fd, LOCK_UN);
    }
    munmap(f->t, sizeof *f->t);
    close(f->fd);
    f->t = NULL;
    f->fd = -1;
    f->mine = -1;
}

static uint64_t bytes_field(const uint64_t *p)
{
    uint64_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
    return v > GVM_SHARE_BYTES_MAX ? GVM_SHARE_BYTES_MAX : v;
}

int gvm_share_peers(struct gvm_share_file *f, struct gvm_share_peer *out)
{
    int n = 0;
    bool reap = false;
    for (int i = 0; i < GVM_SHARE_SLOTS; i++) {
        if (i == f->mine) continue;
        const struct gvm_share_slot *s = &f->t->slot[i];
        int pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0) continue;
        if (!slot_alive(s)) {
            reap = true;
            continue;
        }
        struct gvm_share_peer *p = &out[n++];
        p->slot = i;
        p->pid = pid;
        p->held = bytes_field(&s->held);
        p->min = bytes_field(&s->min);
        p->want = bytes_field(&s->want);
        p->gave = bytes_field(&s->gave);
        uint64_t w = __atomic_load_n(&s->weight, __ATOMIC_RELAXED);
        p->weight = w < 100 ? 100 : w > 100000 ? 100000 : w;
        p->want_seq = __atomic_load_n(&s->want_seq, __ATOMIC_RELAXED);
        p->beat_ns = __atomic_load_n(&s->beat_ns, __ATOMIC_RELAXED);
        p->active_ns = __atomic_load_n(&s->active_ns, __ATOMIC_RELAXED);
        p->grew_ns = __atomic_load_n(&s->grew_ns, __ATOMIC_RELAXED);
        p->gave_to = __atomic_load_n(&s->gave_to, __ATOMIC_RELAXED);
    }
    if (reap) {
        /* A process that died (SIGKILL, the OOM killer) frees its share at
         * once: its slot is cleared for the next claim. */
        flock(f->fd, LOCK_EX);
        for (int i = 0; i < GVM_SHARE_SLOTS; i++) {
            struct gvm_share_slot *s = &f->t->slot[i];
            if (i != f->mine && __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) > 0 && !slot_alive(s)) slot_clear(s);
        }
        flock(f->fd, LOCK_UN);
    }
    return n;
}

void gvm_share_put(struct gvm_share_file *f, size_t field_offset, uint64_t value)
{
    if (f->mine < 0) return;
    uint64_t *p = (uint64_t *)((char *)&f->t->slot[f->mine] + field_offset);
    __atomic_store_n(p, value, __ATOMIC_RELAXED);
}

uint64_t gvm_share_get(const struct gvm_share_file *f, size_t field_offset)
{
    if (f->mine < 0) return 0;
    const uint64_t *p = (const uint64_t *)((const char *)&f->t->slot[f->mine] + field_offset);
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
