/* gvmshim's configuration: built-in defaults < the file named by GVM_CONFIG
 * < environment variables GVM_<NAME>. The options themselves are listed in
 * policy/options.h.
 *
 * Loaded once, at library load, before any CUDA call; it needs nothing but
 * libc and one buffer for the file (a regular file of at most 1 MiB). Any
 * problem (a bad value, an unknown option, an unreadable file) is an error:
 * a job must never run with a policy other than the one its user wrote. */
#ifndef GVM_POLICY_CONFIG_H
#define GVM_POLICY_CONFIG_H

#include "policy/options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GVM_CFG_MAX_DEVICES 64   /* ordinals in per-device lists: 0 to 63 */
#define GVM_CFG_MAX_RULES 32
#define GVM_CFG_PATH_MAX 4096    /* path and string options, with the NUL */
#define GVM_CFG_NAME_MAX 64      /* rule names and tags, with the NUL */
#define GVM_CFG_ERR_MAX 1024     /* an error buffer that holds any message */

/* ---- value types, one per type in options.h -------------------------- */

#define GVM_CFG_ENUM(enumerator, word) enumerator,
#define GVM_CFG_ENUM_TYPE(type, VALUES)                                        \
    enum gvm_cfg_##type { VALUES(GVM_CFG_ENUM) };                              \
    typedef enum gvm_cfg_##type gvm_opt_##type##_t;
GVM_ENUM_TYPES(GVM_CFG_ENUM_TYPE)
#undef GVM_CFG_ENUM_TYPE
#undef GVM_CFG_ENUM

/* A size, or a share of the device's memory, or none (unlimited). */
enum gvm_size_kind { GVM_SIZE_BYTES, GVM_SIZE_PCT, GVM_SIZE_NONE };
struct gvm_size_pct {
    int kind;          /* enum gvm_size_kind */
    size_t bytes;      /* GVM_SIZE_BYTES */
    uint32_t ppm;      /* GVM_SIZE_PCT: millionths of the device (100% = 1000000) */
};

/* One value per device. dev[] is filled for every ordinal: listed devices
 * carry their own value, the others 'other' (the single value given, or the
 * option's default when a list was given). */
struct gvm_size_pct_dev {
    struct gvm_size_pct dev[GVM_CFG_MAX_DEVICES];
    struct gvm_size_pct other;   /* devices not listed, ordinals >= 64 too */
    uint64_t listed;             /* bit d: device d was named in a list */
    bool is_list;
};

enum gvm_spill_target { GVM_SPILL_PEER, GVM_SPILL_HOST };
struct gvm_spill_list {
    int n;             /* 0: off */
    int target[2];     /* enum gvm_spill_target, in the order to try */
};

static inline bool gvm_spill_list_has(const struct gvm_spill_list *s, enum gvm_spill_target t)
{
    for (int i = 0; i < s->n; i++)
        if (s->target[i] == (int)t) return true;
    return false;
}

typedef bool gvm_opt_bool_t;
typedef size_t gvm_opt_size_t;       /* SIZE_MAX: none, where allowed */
typedef struct gvm_size_pct gvm_opt_size_pct_t;
typedef struct gvm_size_pct_dev gvm_opt_size_pct_dev_t;
typedef double gvm_opt_ratio_pct_t;  /* a factor: 100% = 1.0 */
typedef struct gvm_spill_list gvm_opt_spill_t;
typedef uint64_t gvm_opt_millis_t;
typedef char gvm_opt_path_t[GVM_CFG_PATH_MAX];    /* "" = unset */
typedef char gvm_opt_string_t[GVM_CFG_PATH_MAX];  /* "" = unset */

/* ---- placement rules ([rule NAME] sections of the file) -------------- */

enum gvm_rule_place {
    GVM_RULE_PLACE_DEVICE,      /* device N */
    GVM_RULE_PLACE_PEER,        /* peer */
    GVM_RULE_PLACE_HOST,        /* host */
    GVM_RULE_PLACE_INTERLEAVE,  /* interleave [d,d,...] */
};

struct gvm_rule {
    char name[GVM_CFG_NAME_MAX];
    int line;                   /* of the [rule NAME] header */
    /* conditions, all of which must hold; absent ones always hold */
    size_t size_min, size_max;  /* inclusive; 0 and SIZE_MAX when absent */
    char tag[GVM_CFG_NAME_MAX]; /* "" = any tag (or none) */
    int device;                 /* ordinal the allocation is made on; -1 = any */
    /* the decision */
    int place;                  /* enum gvm_rule_place */
    int place_device;           /* GVM_RULE_PLACE_DEVICE */
    int ninterleave;            /* GVM_RULE_PLACE_INTERLEAVE: 0 = all devices */
    unsigned char interleave[GVM_CFG_MAX_DEVICES]; /* ordinals, in file order */
};

/* ---- the configuration ----------------------------------------------- */

/* Where an option's value came from (origin[]): a line number > 0 of the
 * config file, or one of these. */
enum {
    GVM_ORIGIN_DEFAULT = 0,
    GVM_ORIGIN_ENV = -1,
    GVM_ORIGIN_PROGRAM = -2,    /* gvm_config_set(), or a file given to the loader */
    GVM_ORIGIN_CONTROL = -3,    /* changed in the running process by gvmctl set */
    GVM_ORIGIN_CLUSTER = -4,    /* CUDA_DEVICE_MEMORY_LIMIT[_<i>] (policy/config_cluster.c) */
};

struct gvm_config {
#define GVM_CFG_FIELD(name, type, def, when, doc) gvm_opt_##type##_t name;
    GVM_OPTIONS(GVM_CFG_FIELD)
#undef GVM_CFG_FIELD
    struct gvm_rule rules[GVM_CFG_MAX_RULES];
    int nrules;
    int origin[GVM_OPT_COUNT];
    char file[GVM_CFG_PATH_MAX]; /* the config file read; "" = none */
    bool env_ignored;            /* privileged process: GVM_* variables were ignored */
};

/* The option table, in options.h order. */
struct gvm_option_info {
    const char *name;     /* file key: "block_size" */
    const char *type;     /* type name: "size" */
    const char *def;      /* default, as text; "none" here lets the option be none */
    const char *doc;
    bool live;            /* gvmctl set may change it while the process runs */
    size_t offset, size;  /* of the field in struct gvm_config */
};
extern const struct gvm_option_info gvm_options[GVM_OPT_COUNT];

/* ---- API ----------------------------------------------------------------
 * Functions that can fail return 0, or -1 with one line in err (no
 * "gvmshim: " prefix, no newline; truncated to errlen). The line names the
 * source (GVM_NAME='value', or FILE:LINE: key = value), then the problem. */

/* Every option at its default, no rules. */
void gvm_config_defaults(struct gvm_config *cfg);

/* Defaults, then the file named by GVM_CONFIG in envp, then every GVM_*
 * variable of envp (environ when envp is NULL). Variables named GVM_TEST_*
 * are left to test harnesses. In a privileged process (see below) the
 * environment is ignored and no file is read: defaults only, and
 * env_ignored is set when envp held a GVM_* variable (the caller warns). */
int gvm_config_load(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen);

/* The same, reading 'file' instead of GVM_CONFIG when file is not NULL. */
int gvm_config_load_from(struct gvm_config *cfg, char *const *envp, const char *file,
                         char *err, size_t errlen);

/* True when the kernel marked the process AT_SECURE: setuid, setgid or file
 * capabilities, where whoever started it is not whom it runs as. */
bool gvm_config_privileged(void);

/* gvm_config_load_from with the privilege given instead of asked for (the
 * other two pass gvm_config_privileged(); tests pass either). */
int gvm_config_load_as(struct gvm_config *cfg, char *const *envp, const char *file,
                       bool privileged, char *err, size_t errlen);

/* Apply config file text (the contents of a file) on top of cfg; 'source'
 * names it in messages. Rules are appended. */
int gvm_config_parse_text(struct gvm_config *cfg, const char *text, const char *source,
                          char *err, size_t errlen);

/* Set one option by file key ("block_size") from text, as the program. */
int gvm_config_set(struct gvm_config *cfg, const char *name, const char *value,
                   char *err, size_t errlen);

/* Option by file key; -1 when there is none. */
int gvm_option_find(const char *name);

/* Option id's value in cfg, as the config file writes it ("64M", "peer,host"). */
void gvm_config_format(const struct gvm_config *cfg, int id, char *buf, size_t n);

/* The number of bytes v stands for on a device of device_total bytes:
 * a percentage of device_total, or SIZE_MAX for none. */
size_t gvm_size_resolve(const struct gvm_size_pct *v, size_t device_total);
size_t gvm_cfg_device_value(const struct gvm_size_pct_dev *v, int device, size_t device_total);

/* The first rule, in file order, that matches an allocation of 'size'
 * bytes made on 'device' under 'tag' (NULL: no tag); NULL when none does. */
const struct gvm_rule *gvm_rule_match(const struct gvm_config *cfg, size_t size, int device,
                                      const char *tag);

/* Every option: environment name, file key, type, default, doc; then the
 * file syntax and the rules. */
void gvm_config_print_help(FILE *out);
/* The README table of options, in Markdown. */
void gvm_config_print_markdown(FILE *out);
/* The effective values, in config file syntax (readable back by the
 * loader), each with where it came from. */
void gvm_config_dump(const struct gvm_config *cfg, FILE *out);
/* The same, one line (no newline) at a time, without stdio: for the log. */
void gvm_config_dump_lines(const struct gvm_config *cfg,
                           void (*emit)(const char *line, void *arg), void *arg);

#endif
