/* The launch log: records go into one buffer reserved at start (never
 * backed until written), each launch taking its slots with one atomic
 * add, so launches from several threads never wait for each other. */
#define _GNU_SOURCE
#include "preload/launchlog.h"

#include "preload/outfile.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

bool gvm_launch_log_on;

static struct gvm_launch_rec *recs;
static uint64_t taken;      /* slots handed out (may pass the end: those are dropped) */
static uint64_t launches;   /* the last launch number given */

int gvm_launch_log_start(void)
{
    void *p = mmap(NULL, (size_t)GVM_LAUNCH_LOG_RECORDS * sizeof *recs, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    recs = p;
    __atomic_store_n(&gvm_launch_log_on, true, __ATOMIC_RELEASE);
    return 0;
}

static void put(uint64_t slot, const struct gvm_launch_rec *rec)
{
    if (slot >= GVM_LAUNCH_LOG_RECORDS) return;
    struct gvm_launch_rec *to = &recs[slot];
    to->stream = rec->stream;
    to->buffer = rec->buffer;
    to->base = rec->base;
    to->bytes = rec->bytes;
    to->flags = rec->flags;
    /* The launch number last: the writer skips slots still 0. */
    __atomic_store_n(&to->launch, rec->launch, __ATOMIC_RELEASE);
}

void gvm_launch_log_record(struct gvm_region *const *r, int n, CUstream s, bool per_thread, bool partial)
{
    uint64_t no = __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
    uint64_t slot = __atomic_fetch_add(&taken, n ? (uint64_t)n : 1, __ATOMIC_RELAXED);
    struct gvm_launch_rec rec = {.launch = no, .stream = (uint64_t)(uintptr_t)s,
                                 .flags = (partial ? GVM_LAUNCH_LOG_PARTIAL : 0) |
                                          (per_thread ? GVM_LAUNCH_LOG_PER_THREAD : 0)};
    if (!n) {
        put(slot, &rec);   /* a launch on none: still a launch, with its share of the step's time */
        return;
    }
    for (int i = 0; i < n; i++) {
        rec.buffer = GVM_LOAD(r[i]->buffer_id);
        rec.base = GVM_LOAD(r[i]->base);
        rec.bytes = GVM_LOAD(r[i]->mapped);
        put(slot + (uint64_t)i, &rec);
    }
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Filled slots are copied out in runs; a slot whose launch is still
 * being written (another thread at exit) is left out. Counts what it
 * wrote into *kept. */
static int write_records(int fd, uint64_t n, uint64_t *kept)
{
    enum { RUN = 1024 };
    static struct gvm_launch_rec run[RUN];   /* at exit, on one thread */
    unsigned k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!__atomic_load_n(&recs[i].launch, __ATOMIC_ACQUIRE)) continue;
        run[k] = recs[i];
        run[k++].zero = 0;
        ++*kept;
        if (k == RUN) {
            if (write_all(fd, run, sizeof run)) return -1;
            k = 0;
        }
    }
    return k ? write_all(fd, run, k * sizeof *run) : 0;
}

int gvm_launch_log_write(const char *pattern, char *path, size_t pathlen)
{
    if (!recs) return 0;
    uint64_t all = __atomic_load_n(&taken, __ATOMIC_ACQUIRE);
    uint64_t n = all < GVM_LAUNCH_LOG_RECORDS ? all : GVM_LAUNCH_LOG_RECORDS;
    struct {
        char magic[8];
        uint32_t rec_size, zero;
        uint64_t records, dropped;
    } head = {.rec_size = sizeof(struct gvm_launch_rec)};
    memcpy(head.magic, GVM_LAUNCH_LOG_MAGIC, sizeof head.magic);
    int fd = gvm_outfile_open(pattern, path, pathlen);
    if (fd < 0) return -1;
    /* The header again once the records are out: their count is known then. */
    uint64_t kept = 0;
    int rc = write_all(fd, &head, sizeof head) || write_records(fd, n, &kept) ? -1 : 0;
    head.records = kept;
    head.dropped = all - kept;
    if (!rc && pwrite(fd, &head, sizeof head, 0) != (ssize_t)sizeof head) rc = -1;
    int err = errno;
    if (close(fd) && !rc) return -1;
    errno = err;
    return rc;
}
