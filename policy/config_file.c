/* The config file: 'key = value' lines and [rule NAME] sections, read
 * from a file or from text, and matching an allocation against the rules. */
#include "policy/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

enum rule_key { RK_SIZE, RK_TAG, RK_DEVICE, RK_PLACE, RK_COUNT };
static const char *const rule_keys[RK_COUNT] = {"size", "tag", "device", "place"};

struct reader {
    struct gvm_config *cfg;
    const char *source;          /* the file, in messages */
    int line;
    int seen[GVM_OPT_COUNT];     /* line that set each option */
    struct gvm_rule *rule;       /* the open [rule] section */
    int rule_seen[RK_COUNT];
    char *err;
    size_t errlen;
};

#define READ_ERR(r, ...)                                                       \
    do {                                                                       \
        char msg_[GVM_CFG_ERR_MAX];                                            \
        gvm_cfg_bprintf(msg_, sizeof msg_, __VA_ARGS__);                               \
        gvm_cfg_bprintf((r)->err, (r)->errlen, "%s:%d: %s", (r)->source, (r)->line, msg_); \
    } while (0)

static bool valid_name(const char *s)
{
    if (!*s || strlen(s) >= GVM_CFG_NAME_MAX) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return false;
    return true;
}

static int close_rule(struct reader *r)
{
    struct gvm_rule *rule = r->rule;
    if (!rule) return 0;
    r->rule = NULL;
    if (!r->rule_seen[RK_PLACE]) {
        gvm_cfg_bprintf(r->err, r->errlen, "%s:%d: [rule %s]: missing 'place = ...'", r->source,
                rule->line, rule->name);
        return -1;
    }
    return 0;
}

static int open_rule(struct reader *r, char *line)
{
    char *end = strchr(line, ']');
    if (!end || end[1]) {
        READ_ERR(r, "expected '[rule NAME]'");
        return -1;
    }
    *end = 0;
    char *in = gvm_cfg_trim(line + 1);
    if (strncmp(in, "rule", 4) != 0 || (in[4] && !isspace((unsigned char)in[4]))) {
        READ_ERR(r, "unknown section '[%s]' (expected [rule NAME])", in);
        return -1;
    }
    char *name = gvm_cfg_trim(in + 4);
    if (!valid_name(name)) {
        READ_ERR(r, "[rule %s]: a rule name is 1 to %d letters, digits, '-', '_' or '.'", name,
                 GVM_CFG_NAME_MAX - 1);
        return -1;
    }
    if (close_rule(r)) return -1;
    struct gvm_config *cfg = r->cfg;
    for (int i = 0; i < cfg->nrules; i++) {
        if (strcmp(cfg->rules[i].name, name) == 0) {
            READ_ERR(r, "[rule %s]: a rule of that name is already on line %d", name,
                     cfg->rules[i].line);
            return -1;
        }
    }
    if (cfg->nrules >= GVM_CFG_MAX_RULES) {
        READ_ERR(r, "[rule %s]: too many rules (at most %d)", name, GVM_CFG_MAX_RULES);
        return -1;
    }
    struct gvm_rule *rule = &cfg->rules[cfg->nrules++];
    memset(rule, 0, sizeof *rule);
    strcpy(rule->name, name);
    rule->line = r->line;
    rule->size_max = SIZE_MAX;
    rule->device = -1;
    r->rule = rule;
    memset(r->rule_seen, 0, sizeof r->rule_seen);
    return 0;
}

#define PLACE_SYNTAX "expected device N, peer, host, interleave or interleave N,N,..."

static int parse_place(struct gvm_rule *rule, char *v, char *why, size_t n)
{
    char *word = v;
    while (*v && !isspace((unsigned char)*v)) v++;
    if (*v) *v++ = 0;
    char *arg = gvm_cfg_trim(v);
    if (strcasecmp(word, "peer") == 0 || strcasecmp(word, "host") == 0) {
        if (*arg) goto syntax;
        rule->place = strcasecmp(word, "peer") == 0 ? GVM_RULE_PLACE_PEER : GVM_RULE_PLACE_HOST;
        return 0;
    }
    if (strcasecmp(word, "device") == 0) {
        int d = gvm_cfg_scan_ordinal(arg);
        if (d < 0) {
            gvm_cfg_bprintf(why, n, "expected device N with N a device ordinal (0 to %d)",
                    GVM_CFG_MAX_DEVICES - 1);
            return -1;
        }
        rule->place = GVM_RULE_PLACE_DEVICE;
        rule->place_device = d;
        return 0;
    }
    if (strcasecmp(word, "interleave") != 0) goto syntax;
    rule->place = GVM_RULE_PLACE_INTERLEAVE;
    rule->ninterleave = 0;
    if (!*arg) return 0;
    uint64_t seen = 0;
    char *cur = arg;
    for (;;) {
        char *comma = strchr(cur, ',');
        if (comma) *comma = 0;
        char *item = gvm_cfg_trim(cur);
        int d = gvm_cfg_scan_ordinal(item);
        if (d < 0) {
            gvm_cfg_bprintf(why, n, "interleave: '%s' is not a device ordinal (0 to %d)", item,
                    GVM_CFG_MAX_DEVICES - 1);
            return -1;
        }
        if (seen & (1ull << d)) {
            gvm_cfg_bprintf(why, n, "interleave: device %d listed twice", d);
            return -1;
        }
        seen |= 1ull << d;
        rule->interleave[rule->ninterleave++] = (unsigned char)d;
        if (!comma) break;
        cur = comma + 1;
    }
    if (rule->ninterleave < 2) {
        gvm_cfg_bprintf(why, n, "interleave needs at least two devices (for one, write device N)");
        return -1;
    }
    return 0;
syntax:
    gvm_cfg_bprintf(why, n, PLACE_SYNTAX);
    return -1;
}

#define RANGE_SYNTAX "expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)"

static int parse_range(struct gvm_rule *rule, char *v, char *why, size_t n)
{
    char *dash = strchr(v, '-');
    if (!dash) {
        gvm_cfg_bprintf(why, n, RANGE_SYNTAX);
        return -1;
    }
    *dash = 0;
    char *lo = gvm_cfg_trim(v), *hi = gvm_cfg_trim(dash + 1);
    if (!*lo && !*hi) {
        gvm_cfg_bprintf(why, n, RANGE_SYNTAX);
        return -1;
    }
    size_t min = 0, max = SIZE_MAX;
    char sub[GVM_CFG_ERR_MAX];
    if (*lo && gvm_cfg_scan_size(lo, &min, sub, sizeof sub)) {
        gvm_cfg_bprintf(why, n, "'%s': %s", lo, strcmp(sub, GVM_CFG_SIZE_SYNTAX) ? sub : RANGE_SYNTAX);
        return -1;
    }
    if (*hi && gvm_cfg_scan_size(hi, &max, sub, sizeof sub)) {
        gvm_cfg_bprintf(why, n, "'%s': %s", hi, strcmp(sub, GVM_CFG_SIZE_SYNTAX) ? sub : RANGE_SYNTAX);
        return -1;
    }
    if (min > max) {
        gvm_cfg_bprintf(why, n, "the range is empty (%s is above %s)", lo, hi);
        return -1;
    }
    rule->size_min = min;
    rule->size_max = max;
    return 0;
}

static int rule_line(struct reader *r, const char *key, char *value)
{
    int k = -1;
    for (int i = 0; i < RK_COUNT; i++)
        if (strcmp(key, rule_keys[i]) == 0) k = i;
    if (k < 0) {
        if (gvm_option_find(key) >= 0) {
            READ_ERR(r, "'%s' is an option, not a rule key: options go before the first "
                        "[rule] section", key);
            return -1;
        }
        const char *s = gvm_cfg_closest(key, rule_keys, RK_COUNT);
        if (s)
            READ_ERR(r, "[rule %s]: unknown key '%s' (did you mean '%s'?)", r->rule->name, key, s);
        else
            READ_ERR(r, "[rule %s]: unknown key '%s' (a rule has size, tag, device and place)",
                     r->rule->name, key);
        return -1;
    }
    if (r->rule_seen[k]) {
        READ_ERR(r, "[rule %s]: '%s' is already set on line %d", r->rule->name, key,
                 r->rule_seen[k]);
        return -1;
    }
    char text[GVM_CFG_SHOWN_MAX], cut[GVM_CFG_SHOWN_MAX]; /* the value as written, for the message */
    snprintf(text, sizeof text, "%s", gvm_cfg_shown(value, cut));
    char why[GVM_CFG_ERR_MAX];
    struct gvm_rule *rule = r->rule;
    int rc = 0;
    switch (k) {
    case RK_SIZE:
        rc = parse_range(rule, value, why, sizeof why);
        break;
    case RK_TAG: {
        bool ok = *value && strlen(value) < GVM_CFG_NAME_MAX;
        for (const char *p = value; *p; p++)
            if (isspace((unsigned char)*p) || !isprint((unsigned char)*p)) ok = false;
        if (!ok) {
            gvm_cfg_bprintf(why, sizeof why, "a tag is 1 to %d printable characters without spaces",
                    GVM_CFG_NAME_MAX - 1);
            rc = -1;
        } else {
            strcpy(rule->tag, value);
        }
        break;
    }
    case RK_DEVICE:
        rule->device = gvm_cfg_scan_ordinal(value);
        if (rule->device < 0) {
            gvm_cfg_bprintf(why, sizeof why, "expected a device ordinal (0 to %d)",
                    GVM_CFG_MAX_DEVICES - 1);
            rc = -1;
        }
        break;
    case RK_PLACE:
        rc = parse_place(rule, value, why, sizeof why);
        break;
    }
    if (rc) {
        READ_ERR(r, "[rule %s]: %s = %s: %s", rule->name, key, text, why);
        return -1;
    }
    r->rule_seen[k] = r->line;
    return 0;
}

static int option_line(struct reader *r, const char *key, const char *value)
{
    int id = gvm_option_find(key);
    if (id < 0) {
        for (int i = 0; i < RK_COUNT; i++) {
            if (strcmp(key, rule_keys[i]) == 0) {
                READ_ERR(r, "'%s' belongs in a [rule NAME] section", key);
                return -1;
            }
        }
        const char *s = gvm_cfg_closest_option(key);
        bool has_upper = false;
        for (const char *p = key; *p; p++)
            if (isupper((unsigned char)*p)) has_upper = true;
        if (s && has_upper)
            READ_ERR(r, "unknown option '%s' (keys are lowercase: did you mean '%s'?)", key, s);
        else if (s)
            READ_ERR(r, "unknown option '%s' (did you mean '%s'?)", key, s);
        else
            READ_ERR(r, "unknown option '%s' (gvm-config --help-config lists them)", key);
        return -1;
    }
    if (id == GVM_OPT_config) {
        char sv[GVM_CFG_SHOWN_MAX];
        READ_ERR(r, "config = %s: only valid in the environment (GVM_CONFIG)", gvm_cfg_shown(value, sv));
        return -1;
    }
    if (r->seen[id]) {
        READ_ERR(r, "'%s' is already set on line %d", key, r->seen[id]);
        return -1;
    }
    char why[GVM_CFG_ERR_MAX];
    if (gvm_cfg_set_option(r->cfg, id, value, why, sizeof why)) {
        char sv[GVM_CFG_SHOWN_MAX];
        READ_ERR(r, "%s = %s: %s", key, gvm_cfg_shown(value, sv), why);
        return -1;
    }
    r->seen[id] = r->line;
    r->cfg->origin[id] = r->line;
    return 0;
}

static int read_line(struct reader *r, char *line)
{
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    line = gvm_cfg_trim(line);
    if (!*line) return 0;
    if (line[0] == '[') return open_rule(r, line);
    char *eq = strchr(line, '=');
    if (!eq) {
        READ_ERR(r, "'%s': expected 'key = value' or '[rule NAME]'", line);
        return -1;
    }
    *eq = 0;
    char *key = gvm_cfg_trim(line), *value = gvm_cfg_trim(eq + 1);
    if (!*key) {
        READ_ERR(r, "'= %s': the key is missing", value);
        return -1;
    }
    return r->rule ? rule_line(r, key, value) : option_line(r, key, value);
}

static void reader_init(struct reader *r, struct gvm_config *cfg, const char *source, char *err,
                        size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->source = source;
    r->err = err;
    r->errlen = errlen;
}

/* Every line of text[0..len): NUL bytes are refused (text is never cut). */
static int read_lines(struct reader *r, const char *text, size_t len)
{
    char line[GVM_CFG_LINE_MAX];
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        r->line++;
        if (n >= sizeof line - 1) {
            READ_ERR(r, "line longer than %d characters", (int)sizeof line - 2);
            return -1;
        }
        if (memchr(p, 0, n)) {
            READ_ERR(r, "a NUL byte: the file is not text");
            return -1;
        }
        memcpy(line, p, n);
        line[n] = 0;
        if (read_line(r, line)) return -1;
        if (!nl) break;
        p = nl + 1;
    }
    return close_rule(r);
}

int gvm_cfg_parse_bytes(struct gvm_config *cfg, const char *text, size_t len, const char *source,
                        char *err, size_t errlen)
{
    struct reader r;
    reader_init(&r, cfg, source, err, errlen);
    return read_lines(&r, text, len);
}

int gvm_config_parse_text(struct gvm_config *cfg, const char *text, const char *source,
                          char *err, size_t errlen)
{
    return gvm_cfg_parse_bytes(cfg, text, strlen(text), source, err, errlen);
}

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

/* The whole file, at most GVM_CFG_FILE_MAX bytes, into a new buffer
 * (*len bytes, NUL-terminated); NULL with the error in err. Anything but a
 * regular file is refused before a byte is read: a device or a FIFO would
 * stall the program's start or never end. */
static char *slurp(const char *path, const char *label, size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        gvm_cfg_bprintf(err, errlen, "%s: cannot open: %s", label, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    size_t n = 0;
    if (fstat(fd, &st)) {
        gvm_cfg_bprintf(err, errlen, "%s: cannot read: %s", label, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        gvm_cfg_bprintf(err, errlen, "%s: not a regular file (%s)", label, file_kind(st.st_mode));
        goto out;
    }
    if ((uint64_t)st.st_size > GVM_CFG_FILE_MAX) goto too_big;
    /* One byte more than allowed: a file that grew is caught too. */
    text = malloc(GVM_CFG_FILE_MAX + 2);
    if (!text) {
        gvm_cfg_bprintf(err, errlen, "%s: cannot read: %s", label, strerror(ENOMEM));
        goto out;
    }
    while (n <= GVM_CFG_FILE_MAX) {
        ssize_t got = read(fd, text + n, GVM_CFG_FILE_MAX + 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            gvm_cfg_bprintf(err, errlen, "%s: cannot read: %s", label, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    if (n > GVM_CFG_FILE_MAX) goto too_big;
    text[n] = 0;
    *len = n;
    goto out;
too_big:
    gvm_cfg_bprintf(err, errlen, "%s: larger than %zu MiB: not a configuration file",
                    label, GVM_CFG_FILE_MAX >> 20);
fail:
    free(text);
    text = NULL;
out:
    close(fd);
    return text;
}

/* label: how the file is named in an open error ("GVM_CONFIG=x" or "x"). */
int gvm_cfg_read_file(struct gvm_config *cfg, const char *path, const char *label, char *err,
                     size_t errlen)
{
    size_t len;
    char *text = slurp(path, label, &len, err, errlen);
    if (!text) return -1;
    int rc = gvm_cfg_parse_bytes(cfg, text, len, path, err, errlen);
    free(text);
    if (!rc) snprintf(cfg->file, sizeof cfg->file, "%s", path);
    return rc;
}

const struct gvm_rule *gvm_rule_match(const struct gvm_config *cfg, size_t size, int device,
                                      const char *tag)
{
    for (int i = 0; i < cfg->nrules; i++) {
        const struct gvm_rule *r = &cfg->rules[i];
        if (size < r->size_min || size > r->size_max) continue;
        if (r->device >= 0 && r->device != device) continue;
        if (r->tag[0] && (!tag || strcmp(r->tag, tag) != 0)) continue;
        return r;
    }
    return NULL;
}
