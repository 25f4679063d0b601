/* The state processes sharing one device keep together: a file per device
 * in share_dir, mapped by every participant, one slot per process. A slot
 * is written only by its owner (plain atomic stores); everyone reads every
 * slot. Claiming and freeing a slot take the file's flock, which the kernel
 * drops when a process dies, so no lock outlives its holder. The file is
 * input from other processes: every value read is checked, and a file
 * that is not ours or not of this layout is not used (policy/share.c then
 * keeps this process to its own limit). */
#ifndef GVM_POLICY_SHARE_TABLE_H
#define GVM_POLICY_SHARE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GVM_SHARE_SLOTS 64
#define GVM_SHARE_MAGIC 0x65726168736d7667ull   /* "gvmshare" */
#define GVM_SHARE_VERSION 1

struct gvm_share_slot {
    int32_t pid;          /* 0: free */
    uint32_t uid;
    uint64_t start;       /* the process's start time (/proc/PID/stat), to tell a reused pid */
    uint64_t held;        /* bytes it holds on the device through gvmshim */
    uint64_t min;         /* bytes it keeps however much others need */
    uint64_t weight;      /* thousandths: lower gives way first */
    uint64_t want;        /* bytes an allocation of it waits for; 0: none */
    uint64_t want_seq;    /* bumped with each new want */
    uint64_t beat_ns;     /* CLOCK_MONOTONIC of its last round: a silent one is hung */
    uint64_t active_ns;   /* when it last used its memory (copies, launches) */
    uint64_t grew_ns;     /* when it last took memory others gave */
    uint64_t gave;        /* bytes it gave back for others, in all */
    uint64_t gave_to;     /* the pid it last made room for */
    uint64_t budget;      /* the budget it keeps to (its share_budget less memory outside) */
};

struct gvm_share_table {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    struct gvm_share_slot slot[GVM_SHARE_SLOTS];
};

/* A participant's view of one slot, read and checked. */
struct gvm_share_peer {
    int slot;
    int pid;
    uint64_t held, min, weight, want, want_seq, beat_ns, active_ns, grew_ns, gave, gave_to;
};

struct gvm_share_file {
    int fd;
    struct gvm_share_table *t;
    int mine;             /* our slot, -1 before the claim */
};

/* Opens (creating it 0600, or 0660 in a group directory) and maps the
 * table at dir/name: refused (-1, why says) when it is a link, not a
 * regular file, owned by another user outside a group directory, of
 * another size, or of another magic or version. */
int gvm_share_open(struct gvm_share_file *f, const char *dir, const char *name, char *why, size_t n);

/* Claims a free slot, or one whose process is gone; -1 when all are in
 * use by live processes. */
int gvm_share_claim(struct gvm_share_file *f, uint64_t min, uint64_t weight);

/* Frees our slot and unmaps the table. */
void gvm_share_close(struct gvm_share_file *f);

/* The live slots other than ours, checked: at most GVM_SHARE_SLOTS into
 * out; returns how many. Slots of processes that are gone are freed on
 * the way (under the flock). */
int gvm_share_peers(struct gvm_share_file *f, struct gvm_share_peer *out);

/* Our slot's fields, as the owner writes them. */
void gvm_share_put(struct gvm_share_file *f, size_t field_offset, uint64_t value);
uint64_t gvm_share_get(const struct gvm_share_file *f, size_t field_offset);

#define GVM_SHARE_SET(f, field, v) gvm_share_put((f), offsetof(struct gvm_share_slot, field), (uint64_t)(v))
#define GVM_SHARE_GET(f, field) gvm_share_get((f), offsetof(struct gvm_share_slot, field))

/* Whether process pid lives and is not a zombie (which holds no memory),
 * and, with start != 0, is the one that started then (not a reused pid). */
bool gvm_share_process_alive(int pid, uint64_t start);

/* A process's start time, 0 when it cannot be read (gone). */
uint64_t gvm_share_start_time(int pid);

/* Bytes past which a slot's byte counts are not believed (a corrupt or
 * hostile file): a petabyte. */
#define GVM_SHARE_BYTES_MAX ((uint64_t)1 << 50)

#endif
