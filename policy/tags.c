/* Tag names to small ids, and the per-thread tag stack of gvm_tag_push. */
#include "policy/tags.h"

#include "core/export.h"
#include "core/location.h"
#include "core/phys.h"
#include "gvmshim.h"

#include <pthread.h>
#include <string.h>

#define MAX_TAGS 64
#define TAG_LEN 64
#define STACK_DEPTH 16

static char names[MAX_TAGS][TAG_LEN];
static int ntags = 1;   /* id 0 means untagged */
static pthread_mutex_t tag_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread int stack[STACK_DEPTH];
static __thread int depth;

int gvm_tag_id(const char *name, bool create)
{
    if (!name || !*name) return 0;
    pthread_mutex_lock(&tag_lock);
    int id = -1;
    for (int i = 1; i < ntags; i++)
        if (!strcmp(names[i], name)) id = i;
    if (id < 0 && create && ntags < MAX_TAGS) {
        id = ntags++;
        strncpy(names[id], name, TAG_LEN - 1);
    }
    pthread_mutex_unlock(&tag_lock);
    return id;
}

void gvm_tags_after_fork(void) { pthread_mutex_init(&tag_lock, NULL); }

const char *gvm_tag_name(int id)
{
    if (id <= 0 || id >= MAX_TAGS) return NULL;
    return names[id];
}

int gvm_policy_current_tag(void) { return depth ? stack[depth - 1] : 0; }

GVM_EXPORT gvm_status gvm_tag_push(const char *tag)
{
    if (!tag || strlen(tag) >= TAG_LEN) return GVM_ERR_INVALID;
    if (depth == STACK_DEPTH) return GVM_ERR_INVALID;
    if (!*tag) {   /* untagged inside a tagged block: a library's own buffers */
        stack[depth++] = 0;
        return GVM_OK;
    }
    int id = gvm_tag_id(tag, true);
    if (id < 0) return GVM_ERR_NO_MEMORY;
    stack[depth++] = id;
    /* Tagged memory is what gvm_pause moves to host: have host memory
     * ready by then. */
    gvm_phys_prefill_hint(GVM_LOC_HOST);
    return GVM_OK;
}

GVM_EXPORT gvm_status gvm_tag_pop(void)
{
    if (!depth) return GVM_ERR_INVALID;
    depth--;
    return GVM_OK;
}
