/* Tags: names the program gives its allocations (gvm_tag_push), as small
 * ids (0 = untagged). */
#ifndef GVM_POLICY_TAGS_H
#define GVM_POLICY_TAGS_H

#include <stdbool.h>

/* The calling thread's tag. */
int gvm_policy_current_tag(void);

/* The id of a tag name (created when `create` and there is room), -1 when
 * unknown or full; and the name of an id (NULL for 0). */
int gvm_tag_id(const char *name, bool create);
const char *gvm_tag_name(int id);

/* In a forked child: the tag lock may have been held by a thread that did
 * not follow; start it over. */
void gvm_tags_after_fork(void);

/* Moves every live allocation of `tag` (NULL: every allocation) to loc,
 * as gvm_migrate would each (for gvmctl migrate). GVM_ERR_BUSY when some
 * were left in place (paused, or shared with other processes). */
int gvm_policy_migrate_tag(const char *tag, int loc);

/* The same, with what it did (the bytes that reached loc, what stayed). */
struct gvm_pause_result;
int gvm_policy_migrate_report(const char *tag, int loc, struct gvm_pause_result *out);

#endif
