/* Shared by the configuration's files (config_*.c) only: the table of value
 * types and the helpers more than one of them needs. */
#ifndef GVM_POLICY_CONFIG_INTERNAL_H
#define GVM_POLICY_CONFIG_INTERNAL_H

#include "policy/config.h"

/* ---- value types (config_types.c) ------------------------------------- */

enum gvm_type {
#define TYPE_ID(type, ...) GVM_TYPE_##type,
    GVM_OPTION_TYPES(TYPE_ID) GVM_ENUM_TYPES(TYPE_ID)
#undef TYPE_ID
    GVM_TYPE_COUNT
};

typedef int (*parse_fn)(const char *s, void *out, const struct gvm_option_info *o, char *why,
                        size_t n);
typedef void (*format_fn)(const void *v, const char *const *words, char *buf, size_t n);

struct gvm_cfg_type {
    const char *name;
    const char *doc;
    parse_fn parse;
    format_fn format;
    const char *const *words; /* enum types: the words, NULL-terminated */
};

extern const struct gvm_cfg_type gvm_cfg_types[GVM_TYPE_COUNT];

/* The type of option id. */
const struct gvm_cfg_type *gvm_cfg_type_of(int id);

/* Does the option accept "none" (its default is "none")? */
bool gvm_cfg_allow_none(const struct gvm_option_info *o);

#define GVM_CFG_SIZE_SYNTAX                                                    \
    "expected a size in bytes with an optional K/M/G/T suffix (e.g. 512M, 1.5G)"

/* A size without "none". */
int gvm_cfg_scan_size(const char *s, size_t *out, char *why, size_t n);
/* device_limit from a GPU-sharing layer's variables, where no explicit one
 * was given (policy/config_cluster.c). */
int gvm_cfg_apply_cluster_limit(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen);

/* An ordinal 0..63; -1 when s is anything else. */
int gvm_cfg_scan_ordinal(const char *s);

/* v in bytes, with the largest binary suffix that divides it; "none" for SIZE_MAX. */
void gvm_cfg_format_bytes(size_t v, char *buf, size_t n);

/* Parse, check and store one option; why gets the problem alone. */
int gvm_cfg_set_option(struct gvm_config *cfg, int id, const char *text, char *why, size_t n);

/* ---- the file (config_file.c) ------------------------------------------ */

/* The longest line of a config file, and of the dump. */
#define GVM_CFG_LINE_MAX (GVM_CFG_PATH_MAX + 256)

/* The largest config file read: anything larger is not a configuration
 * (and reading it would hold up the program's start). */
#define GVM_CFG_FILE_MAX ((size_t)1 << 20)

/* gvm_config_parse_text for text of len bytes, which may hold NUL bytes:
 * such a line is refused, with its number. */
int gvm_cfg_parse_bytes(struct gvm_config *cfg, const char *text, size_t len, const char *source,
                        char *err, size_t errlen);

/* Reads and applies a config file: a regular file of at most
 * GVM_CFG_FILE_MAX bytes. label: how the file is named in an open error
 * ("GVM_CONFIG=x" or "x"). */
int gvm_cfg_read_file(struct gvm_config *cfg, const char *path, const char *label, char *err,
                      size_t errlen);

/* ---- text helpers (config_text.c) -------------------------------------- */

char *gvm_cfg_trim(char *s);

/* Copy src into dst (of size n) with surrounding white space removed;
 * -1 when it does not fit. */
int gvm_cfg_copy_trimmed(char *dst, size_t n, const char *src);

/* A value as messages show it: long ones are cut, so the reason still fits. */
#define GVM_CFG_SHOWN_MAX 128
const char *gvm_cfg_shown(const char *v, char *buf);

/* snprintf for messages and lines, where cutting what does not fit is
 * intended (and gcc's truncation warnings are not); buf may be NULL. */
void gvm_cfg_bprintf(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends to a buffer that always stays NUL-terminated. */
struct gvm_cfg_sbuf {
    char *p;
    size_t n, len;
};
void gvm_cfg_sb_add(struct gvm_cfg_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The candidate closest to key, if it is close enough to be a typo. */
const char *gvm_cfg_closest(const char *key, const char *const *cands, int ncands);
const char *gvm_cfg_closest_option(const char *key);

/* src in uppercase, cut to fit dst. */
void gvm_cfg_upper(char *dst, size_t n, const char *src);

#endif
