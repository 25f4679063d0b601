/* Blocks of memory one per thread, for what hot paths write on every call
 * (counters, announcements): a thread writes only its own block, so no
 * cache line passes between threads and no write needs a locked
 * instruction; readers walk every block. Blocks are never freed: a thread
 * that exits leaves its block to the next new thread (its contents as they
 * are: the owner of each kind of block decides what that means). */
#ifndef GVM_PERTHREAD_H
#define GVM_PERTHREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* The head of every block; a block of `size` bytes starts with it. */
struct gvm_perthread {
    struct gvm_perthread *next;   /* every block of the list, newest first */
    struct gvm_perthread **owner; /* the owning thread's pointer to it */
    int idle;                     /* its thread has exited */
};

struct gvm_perthread_list {
    size_t size;                  /* bytes of a block, its head included */
    struct gvm_perthread *head;
    pthread_mutex_t lock;
    pthread_key_t key;
    bool have_key;
};

#define GVM_PERTHREAD_LIST(type)                                               \
    {.size = sizeof(type), .lock = PTHREAD_MUTEX_INITIALIZER}

/* The calling thread's block (made zeroed, or taken over from a thread
 * that exited), stored in *mine, the thread's own pointer (a __thread
 * variable), which is reset to NULL when the thread exits. NULL when no
 * memory is left. A block's type starts with its struct gvm_perthread. */
struct gvm_perthread *gvm_perthread_attach(struct gvm_perthread_list *l, struct gvm_perthread **mine);

/* The first block of the list, for walking it with ->next. */
static inline struct gvm_perthread *gvm_perthread_first(struct gvm_perthread_list *l)
{
    return __atomic_load_n(&l->head, __ATOMIC_ACQUIRE);
}

/* In a forked child: only the calling thread exists; every other block is
 * free again. */
void gvm_perthread_after_fork(struct gvm_perthread_list *l, const struct gvm_perthread *mine);

#endif
