/* Loading, checking and printing the configuration. Everything here is
 * driven by the tables generated from policy/options.h. */
#include "policy/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

extern char **environ;

__extension__ typedef unsigned __int128 u128;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* ---- tables generated from options.h ---------------------------------- */

enum gvm_type {
#define TYPE_ID(type, ...) GVM_TYPE_##type,
    GVM_OPTION_TYPES(TYPE_ID) GVM_ENUM_TYPES(TYPE_ID)
#undef TYPE_ID
    GVM_TYPE_COUNT
};

typedef int (*parse_fn)(const char *s, void *out, const struct gvm_option_info *o, char *why,
                        size_t n);
typedef void (*format_fn)(const void *v, const char *const *words, char *buf, size_t n);

/* Every value type, as a union: the scratch space a value is parsed into. */
union any_value {
#define TYPE_MEMBER(type, ...) gvm_opt_##type##_t v_##type;
    GVM_OPTION_TYPES(TYPE_MEMBER) GVM_ENUM_TYPES(TYPE_MEMBER)
#undef TYPE_MEMBER
};

#define PARSE_DECL(type, ...)                                                  \
    static int parse_##type(const char *s, void *out, const struct gvm_option_info *o,  \
                            char *why, size_t n);                              \
    static void format_##type(const void *v, const char *const *words, char *buf, size_t n);
GVM_OPTION_TYPES(PARSE_DECL)
#undef PARSE_DECL
static int parse_enum(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n);
static void format_enum(const void *v, const char *const *words, char *buf, size_t n);

/* The words of each enum type, and "a|b|c" for the help. */
#define ENUM_WORD(enumerator, word) #word,
#define ENUM_BAR(enumerator, word) "|" #word
#define ENUM_TABLES(type, VALUES)                                              \
    static const char *const words_##type[] = {VALUES(ENUM_WORD) NULL};        \
    static const char bars_##type[] = "" VALUES(ENUM_BAR);
GVM_ENUM_TYPES(ENUM_TABLES)
#undef ENUM_TABLES
#undef ENUM_BAR
#undef ENUM_WORD

struct type_info {
    const char *name;
    const char *doc;
    parse_fn parse;
    format_fn format;
    const char *const *words; /* enum types: the words, NULL-terminated */
};

static const struct type_info types[GVM_TYPE_COUNT] = {
#define TYPE_PLAIN(type, doc) [GVM_TYPE_##type] = {#type, doc, parse_##type, format_##type, NULL},
#define TYPE_ENUM(type, VALUES)                                                \
    [GVM_TYPE_##type] = {#type, bars_##type + 1, parse_enum, format_enum, words_##type},
    GVM_OPTION_TYPES(TYPE_PLAIN) GVM_ENUM_TYPES(TYPE_ENUM)
#undef TYPE_PLAIN
#undef TYPE_ENUM
};

const struct gvm_option_info gvm_options[GVM_OPT_COUNT] = {
#define OPTION_INFO(name, type, def, doc)                                      \
    [GVM_OPT_##name] = {#name, #type, def, doc, offsetof(struct gvm_config, name), \
                        sizeof(((struct gvm_config *)0)->name)},
    GVM_OPTIONS(OPTION_INFO)
#undef OPTION_INFO
};

static const unsigned char option_type[GVM_OPT_COUNT] = {
#define OPTION_TYPE(name, type, def, doc) [GVM_OPT_##name] = GVM_TYPE_##type,
    GVM_OPTIONS(OPTION_TYPE)
#undef OPTION_TYPE
};

static const struct type_info *type_of(int id) { return &types[option_type[id]]; }

static bool allow_none(const struct gvm_option_info *o)
{
    return o && strcmp(o->def, "none") == 0;
}

/* ---- small text helpers ----------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) s[--len] = 0;
    return s;
}

/* Copy src into dst (of size n) with surrounding white space removed;
 * -1 when it does not fit. */
static int copy_trimmed(char *dst, size_t n, const char *src)
{
    while (isspace((unsigned char)*src)) src++;
    size_t len = strlen(src);
    while (len && isspace((unsigned char)src[len - 1])) len--;
    if (len >= n) return -1;
    memcpy(dst, src, len);
    dst[len] = 0;
    return 0;
}

/* A value as messages show it: long ones are cut, so the reason still fits. */
#define SHOWN_MAX 128
static const char *shown(const char *v, char *buf)
{
    if (strlen(v) < 100) return v;
    snprintf(buf, SHOWN_MAX, "%.96s...", v);
    return buf;
}

/* snprintf for messages and lines, where cutting what does not fit is
 * intended (and gcc's truncation warnings are not); buf may be NULL. */
static void bprintf(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bprintf(char *buf, size_t n, const char *fmt, ...)
{
    if (!buf || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* Appends to a buffer that always stays NUL-terminated. */
struct sbuf {
    char *p;
    size_t n, len;
};
static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
    if (b->len >= b->n) return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
    va_end(ap);
    if (m > 0) b->len += (size_t)m;
    if (b->len >= b->n) b->len = b->n - 1;
}

/* strlen, but at most 63 (strnlen's bound upsets gcc -O3 on short literals) */
static int cut_len(const char *s)
{
    int n = 0;
    while (n < 63 && s[n]) n++;
    return n;
}

/* Edit distance with transpositions, case-insensitive; strings are cut at
 * 63 characters. */
static int edit_distance(const char *a, const char *b)
{
    int d[64][64];
    int la = cut_len(a), lb = cut_len(b);
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++) {
        for (int j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int cost = ca != cb;
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

/* The candidate closest to key, if it is close enough to be a typo. */
static const char *closest(const char *key, const char *const *cands, int ncands)
{
    int len = cut_len(key);
    int limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    const char *best = NULL;
    int bestd = limit + 1;
    for (int i = 0; i < ncands; i++) {
        int d = edit_distance(key, cands[i]);
        if (d < bestd) {
            bestd = d;
            best = cands[i];
        }
    }
    return best;
}

static const char *closest_option(const char *key)
{
    const char *names[GVM_OPT_COUNT];
    for (int i = 0; i < GVM_OPT_COUNT; i++) names[i] = gvm_options[i].name;
    return closest(key, names, GVM_OPT_COUNT);
}

static void upper(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (char)toupper((unsigned char)src[i]);
    dst[i] = 0;
}

int gvm_option_find(const char *name)
{
    for (int i = 0; i < GVM_OPT_COUNT; i++)
        if (strcmp(name, gvm_options[i].name) == 0) return i;
    return -1;
}

/* ---- numbers ------------------------------------------------------------ */

static const uint64_t pow10_tab[19] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
    100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
    10000000000000ull, 100000000000000ull, 1000000000000000ull, 10000000000000000ull,
    100000000000000000ull, 1000000000000000000ull,
};

/* A decimal number ip.fp, where fp has nd digits. */
struct dec {
    uint64_t ip, fp;
    int nd;
    bool too_big;
};

/* digits ['.' digits]; returns where it stopped, NULL when s does not start
 * with one. Fraction digits past 18 are dropped (that is below a byte). */
static const char *scan_dec(const char *s, struct dec *d)
{
    memset(d, 0, sizeof *d);
    if (!isdigit((unsigned char)*s)) return NULL;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned c = (unsigned)(*s - '0');
        if (d->ip > (UINT64_MAX - c) / 10)
            d->too_big = true;
        else
            d->ip = d->ip * 10 + c;
    }
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s)) return NULL;
        for (; isdigit((unsigned char)*s); s++) {
            if (d->nd < 18) {
                d->fp = d->fp * 10 + (uint64_t)(*s - '0');
                d->nd++;
            }
        }
    }
    return s;
}

/* An ordinal 0..63; -1 when s is anything else. */
static int scan_ordinal(const char *s)
{
    if (!*s || strlen(s) > 2) return -1;
    int v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s)) return -1;
        v = v * 10 + (*s - '0');
    }
    return v < GVM_CFG_MAX_DEVICES ? v : -1;
}

#define SIZE_SYNTAX "expected a size in bytes with an optional K/M/G/T suffix (e.g. 512M, 1.5G)"

/* A size without "none". */
static int scan_size(const char *s, size_t *out, char *why, size_t n)
{
    struct dec d;
    const char *p = scan_dec(s, &d);
    if (!p) goto syntax;
    int shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    }
    if (shift) p++;
    if (shift && (p[0] == 'i' || p[0] == 'I') && (p[1] == 'b' || p[1] == 'B'))
        p += 2;
    else if (*p == 'b' || *p == 'B')
        p++;
    if (*p) goto syntax;
    if (d.too_big) goto too_big;
    if (!shift && d.fp) {
        bprintf(why, n, "a number of bytes must be whole");
        return -1;
    }
    u128 v = (u128)d.ip << shift;
    v += ((u128)d.fp << shift) / pow10_tab[d.nd];
    if (v >= SIZE_MAX) goto too_big;
    *out = (size_t)v;
    return 0;
syntax:
    bprintf(why, n, SIZE_SYNTAX);
    return -1;
too_big:
    bprintf(why, n, "too large");
    return -1;
}

static void format_bytes(size_t v, char *buf, size_t n)
{
    static const char suffix[] = "KMGT";
    if (v == SIZE_MAX) {
        snprintf(buf, n, "none");
        return;
    }
    int i = -1;
    size_t x = v;
    while (i < 3 && x && x % 1024 == 0) {
        x /= 1024;
        i++;
    }
    if (i < 0)
        snprintf(buf, n, "%zu", v);
    else
        snprintf(buf, n, "%zu%c", x, suffix[i]);
}

static void format_ppm(uint32_t ppm, char *buf, size_t n)
{
    unsigned whole = ppm / 10000, frac = ppm % 10000;
    if (!frac) {
        snprintf(buf, n, "%u%%", whole);
        return;
    }
    int digits = 4;
    while (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    snprintf(buf, n, "%u.%0*u%%", whole, digits, frac);
}

/* ---- parsers and formatters, one pair per type ------------------------ */

static int parse_bool(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *(bool *)out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *(bool *)out = false;
            return 0;
        }
    }
    bprintf(why, n, "expected 1/0, yes/no, true/false or on/off");
    return -1;
}

static void format_bool(const void *v, const char *const *words, char *buf, size_t n)
{
    snprintf(buf, n, "%d", *(const bool *)v ? 1 : 0);
}

static int parse_enum_words(const char *s, int *out, const char *const *words, char *why,
                            size_t n)
{
    int count = 0;
    for (; words[count]; count++) {
        if (strcasecmp(s, words[count]) == 0) {
            *out = count;
            return 0;
        }
    }
    struct sbuf b = {why, n, 0};
    sb_add(&b, "expected ");
    for (int i = 0; i < count; i++)
        sb_add(&b, "%s%s", i == 0 ? "" : i == count - 1 ? " or " : ", ", words[i]);
    return -1;
}

static int parse_enum(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n)
{
    int v;
    if (parse_enum_words(s, &v, type_of((int)(o - gvm_options))->words, why, n)) return -1;
    /* all enum types are plain enums: store through an object of that type */
    gvm_opt_level_t e = (gvm_opt_level_t)v;
    _Static_assert(sizeof(gvm_opt_level_t) == sizeof(gvm_opt_host_access_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_spill_mode_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_track_launches_t),
                   "enum options share one representation");
    memcpy(out, &e, sizeof e);
    return 0;
}

static void format_enum(const void *v, const char *const *words, char *buf, size_t n)
{
    gvm_opt_level_t e;
    memcpy(&e, v, sizeof e);
    snprintf(buf, n, "%s", words[(int)e]);
}

static int parse_size(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n)
{
    if (strcasecmp(s, "none") == 0) {
        if (!allow_none(o)) {
            bprintf(why, n, "cannot be none (" SIZE_SYNTAX ")");
            return -1;
        }
        *(size_t *)out = SIZE_MAX;
        return 0;
    }
    if (scan_size(s, out, why, n) == 0) return 0;
    if (allow_none(o) && strcmp(why, SIZE_SYNTAX) == 0)
        bprintf(why, n, "expected a size in bytes with an optional K/M/G/T suffix "
                        "(e.g. 512M, 1.5G), or none");
    return -1;
}

static void format_size(const void *v, const char *const *words, char *buf, size_t n)
{
    format_bytes(*(const size_t *)v, buf, n);
}

static int parse_size_pct(const char *s, void *out, const struct gvm_option_info *o, char *why,
                          size_t n)
{
    struct gvm_size_pct *v = out;
    memset(v, 0, sizeof *v);
    const char *expected = allow_none(o)
        ? "expected a size (e.g. 512M), a percentage of the device's memory (e.g. 80%), or none"
        : "expected a size (e.g. 512M) or a percentage of the device's memory (e.g. 80%)";
    if (strcasecmp(s, "none") == 0) {
        if (!allow_none(o)) {
            bprintf(why, n, "cannot be none (%s)", expected + strlen("expected "));
            return -1;
        }
        v->kind = GVM_SIZE_NONE;
        return 0;
    }
    size_t len = strlen(s);
    if (len && s[len - 1] == '%') {
        struct dec d;
        const char *p = scan_dec(s, &d);
        if (!p || p != s + len - 1) {
            bprintf(why, n, "%s", expected);
            return -1;
        }
        u128 ppm = d.too_big ? (u128)UINT64_MAX : (u128)d.ip * 10000;
        ppm += (u128)d.fp * 10000 / pow10_tab[d.nd];
        if (ppm > 1000000) {
            bprintf(why, n, "a percentage must be between 0%% and 100%%");
            return -1;
        }
        v->kind = GVM_SIZE_PCT;
        v->ppm = (uint32_t)ppm;
        return 0;
    }
    if (scan_size(s, &v->bytes, why, n)) {
        if (strcmp(why, SIZE_SYNTAX) == 0) bprintf(why, n, "%s", expected);
        return -1;
    }
    v->kind = GVM_SIZE_BYTES;
    return 0;
}

static void format_size_pct(const void *vp, const char *const *words, char *buf, size_t n)
{
    const struct gvm_size_pct *v = vp;
    if (v->kind == GVM_SIZE_NONE)
        snprintf(buf, n, "none");
    else if (v->kind == GVM_SIZE_PCT)
        format_ppm(v->ppm, buf, n);
    else
        format_bytes(v->bytes, buf, n);
}

static int parse_size_pct_dev(const char *s, void *out, const struct gvm_option_info *o,
                              char *why, size_t n)
{
    struct gvm_size_pct_dev *v = out;
    memset(v, 0, sizeof *v);
    if (!strchr(s, ':')) {
        if (parse_size_pct(s, &v->other, o, why, n)) return -1;
        for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++) v->dev[d] = v->other;
        return 0;
    }
    if (parse_size_pct(o->def, &v->other, o, why, n)) return -1;
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++) v->dev[d] = v->other;
    v->is_list = true;

    char buf[GVM_CFG_PATH_MAX];
    if (copy_trimmed(buf, sizeof buf, s)) {
        bprintf(why, n, "too long");
        return -1;
    }
    /* items split by hand: strtok would skip empty ones */
    char *cur = buf;
    for (;;) {
        char *comma = strchr(cur, ',');
        if (comma) *comma = 0;
        char *item = trim(cur);
        if (!*item) {
            bprintf(why, n, "empty item in the list (expected DEVICE:VALUE,... e.g. 0:8G,1:50%%)");
            return -1;
        }
        char *colon = strchr(item, ':');
        if (!colon) {
            bprintf(why, n, "'%s': expected DEVICE:VALUE (e.g. 0:8G,1:50%%)", item);
            return -1;
        }
        *colon = 0;
        char *ord = trim(item), *val = trim(colon + 1);
        int d = scan_ordinal(ord);
        if (d < 0) {
            bprintf(why, n, "'%s' is not a device ordinal (0 to %d)", ord,
                    GVM_CFG_MAX_DEVICES - 1);
            return -1;
        }
        if (v->listed & (1ull << d)) {
            bprintf(why, n, "device %d listed twice", d);
            return -1;
        }
        char sub[GVM_CFG_ERR_MAX];
        if (parse_size_pct(val, &v->dev[d], o, sub, sizeof sub)) {
            bprintf(why, n, "device %d: %s", d, sub);
            return -1;
        }
        v->listed |= 1ull << d;
        if (!comma) break;
        cur = comma + 1;
    }
    return 0;
}

static void format_size_pct_dev(const void *vp, const char *const *words, char *buf, size_t n)
{
    const struct gvm_size_pct_dev *v = vp;
    if (!v->is_list) {
        format_size_pct(&v->other, NULL, buf, n);
        return;
    }
    struct sbuf b = {buf, n, 0};
    buf[0] = 0;
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++) {
        if (!(v->listed & (1ull << d))) continue;
        char one[64];
        format_size_pct(&v->dev[d], NULL, one, sizeof one);
        sb_add(&b, "%s%d:%s", b.len ? "," : "", d, one);
    }
}

static int parse_ratio_pct(const char *s, void *out, const struct gvm_option_info *o,
                           char *why, size_t n)
{
    struct dec d;
    const char *p = scan_dec(s, &d);
    size_t len = strlen(s);
    bool pct = len && s[len - 1] == '%';
    if (!p || p != s + len - (pct ? 1 : 0)) {
        bprintf(why, n, "expected a percentage (e.g. 150%%) or a factor (e.g. 1.5)");
        return -1;
    }
    if (d.too_big) {
        bprintf(why, n, "too large");
        return -1;
    }
    double v = (double)d.ip + (double)d.fp / (double)pow10_tab[d.nd];
    *(double *)out = pct ? v / 100.0 : v;
    return 0;
}

static void format_ratio_pct(const void *v, const char *const *words, char *buf, size_t n)
{
    snprintf(buf, n, "%.6g%%", *(const double *)v * 100.0);
}

#define SPILL_SYNTAX "expected off or a list of peer, host"

static int parse_spill(const char *s, void *out, const struct gvm_option_info *o, char *why,
                       size_t n)
{
    static const char *const targets[] = {[GVM_SPILL_PEER] = "peer", [GVM_SPILL_HOST] = "host"};
    struct gvm_spill_list *v = out;
    memset(v, 0, sizeof *v);
    if (strcasecmp(s, "off") == 0) return 0;
    char buf[64];
    if (copy_trimmed(buf, sizeof buf, s)) goto syntax;
    char *cur = buf;
    for (;;) {
        char *comma = strchr(cur, ',');
        if (comma) *comma = 0;
        char *item = trim(cur);
        int t = -1;
        for (int i = 0; i < 2; i++)
            if (strcasecmp(item, targets[i]) == 0) t = i;
        if (t < 0) goto syntax;
        for (int i = 0; i < v->n; i++) {
            if (v->target[i] == t) {
                bprintf(why, n, "%s listed twice", targets[t]);
                return -1;
            }
        }
        v->target[v->n++] = t;
        if (!comma) break;
        cur = comma + 1;
    }
    return 0;
syntax:
    bprintf(why, n, SPILL_SYNTAX);
    return -1;
}

static void format_spill(const void *vp, const char *const *words, char *buf, size_t n)
{
    const struct gvm_spill_list *v = vp;
    struct sbuf b = {buf, n, 0};
    buf[0] = 0;
    if (!v->n) sb_add(&b, "off");
    for (int i = 0; i < v->n; i++)
        sb_add(&b, "%s%s", i ? "," : "", v->target[i] == GVM_SPILL_PEER ? "peer" : "host");
}

static int parse_millis(const char *s, void *out, const struct gvm_option_info *o, char *why,
                        size_t n)
{
    struct dec d;
    const char *p = scan_dec(s, &d);
    uint64_t unit = 0;
    if (p) {
        if (!*p || strcasecmp(p, "ms") == 0)
            unit = 1;
        else if (strcasecmp(p, "s") == 0)
            unit = 1000;
    }
    if (!unit) {
        bprintf(why, n, "expected milliseconds, optionally with suffix ms or s (e.g. 50ms, 2s)");
        return -1;
    }
    u128 frac = (u128)d.fp * unit;
    u128 v = (u128)d.ip * unit + frac / pow10_tab[d.nd];
    if (d.too_big || v > UINT64_MAX) {
        bprintf(why, n, "too large");
        return -1;
    }
    if (frac % pow10_tab[d.nd]) {
        bprintf(why, n, "must be a whole number of milliseconds");
        return -1;
    }
    *(uint64_t *)out = (uint64_t)v;
    return 0;
}

static void format_millis(const void *v, const char *const *words, char *buf, size_t n)
{
    snprintf(buf, n, "%llums", (unsigned long long)*(const uint64_t *)v);
}

static int parse_text_value(const char *s, void *out, char *why, size_t n)
{
    if (strlen(s) >= GVM_CFG_PATH_MAX) {
        bprintf(why, n, "longer than %d characters", GVM_CFG_PATH_MAX - 1);
        return -1;
    }
    strcpy(out, s);
    return 0;
}

static int parse_path(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n)
{
    return parse_text_value(s, out, why, n);
}

static int parse_string(const char *s, void *out, const struct gvm_option_info *o, char *why,
                        size_t n)
{
    return parse_text_value(s, out, why, n);
}

static void format_path(const void *v, const char *const *words, char *buf, size_t n)
{
    snprintf(buf, n, "%s", (const char *)v);
}

static void format_string(const void *v, const char *const *words, char *buf, size_t n)
{
    snprintf(buf, n, "%s", (const char *)v);
}

/* ---- ranges beyond the types ------------------------------------------ */

static int check_option(int id, const union any_value *v, char *why, size_t n)
{
    switch (id) {
    case GVM_OPT_small_max:
        if (v->v_size > MIB) {
            bprintf(why, n, "must be between 0 and 1M");
            return -1;
        }
        break;
    case GVM_OPT_block_size: {
        size_t b = v->v_size;
        if (b < 2 * MIB || b > GIB || (b & (b - 1))) {
            bprintf(why, n, "must be a power-of-two multiple of 2M between 2M and 1G");
            return -1;
        }
        break;
    }
    case GVM_OPT_headroom:
        if (!(v->v_ratio_pct >= 0.0 && v->v_ratio_pct <= 10.0)) {
            bprintf(why, n, "must be between 0%% and 1000%%");
            return -1;
        }
        break;
    case GVM_OPT_promote_rate:
        if (v->v_size == 0) {
            bprintf(why, n, "must be more than 0 (promote = 0 turns promotion off)");
            return -1;
        }
        break;
    case GVM_OPT_trace_max:
        if (v->v_size < 4 * KIB) {
            bprintf(why, n, "must be at least 4K");
            return -1;
        }
        break;
    case GVM_OPT_promote_interval:
        if (v->v_millis < 1 || v->v_millis > 3600000) {
            bprintf(why, n, "must be between 1ms and 1h (3600s)");
            return -1;
        }
        break;
    case GVM_OPT_libcuda:
        if (!v->v_path[0]) {
            bprintf(why, n, "must not be empty");
            return -1;
        }
        break;
    case GVM_OPT_stats: {
        static const char *const offs[] = {"0", "no", "false", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(v->v_string, offs[i]) == 0) {
                bprintf(why, n, "would be a file name; leave it empty to turn stats off "
                                "(write ./%s for a file of that name)", v->v_string);
                return -1;
            }
        }
        break;
    }
    }
    return 0;
}

/* Parse, check and store one option; why gets the problem alone. */
static int set_option(struct gvm_config *cfg, int id, const char *text, char *why, size_t n)
{
    const struct gvm_option_info *o = &gvm_options[id];
    union any_value v;
    memset(&v, 0, sizeof v);
    if (type_of(id)->parse(text, &v, o, why, n)) return -1;
    if (check_option(id, &v, why, n)) return -1;
    memcpy((char *)cfg + o->offset, &v, o->size);
    return 0;
}

/* ---- the configuration -------------------------------------------------- */

void gvm_config_defaults(struct gvm_config *cfg)
{
    char why[GVM_CFG_ERR_MAX];
    memset(cfg, 0, sizeof *cfg);
    /* The defaults go through the parser; the tests check that each parses. */
    for (int i = 0; i < GVM_OPT_COUNT; i++) set_option(cfg, i, gvm_options[i].def, why, sizeof why);
}

int gvm_config_set(struct gvm_config *cfg, const char *name, const char *value, char *err,
                   size_t errlen)
{
    int id = gvm_option_find(name);
    if (id < 0) {
        const char *s = closest_option(name);
        if (s)
            bprintf(err, errlen, "unknown option '%s' (did you mean '%s'?)", name, s);
        else
            bprintf(err, errlen, "unknown option '%s'", name);
        return -1;
    }
    char why[GVM_CFG_ERR_MAX];
    if (set_option(cfg, id, value, why, sizeof why)) {
        char sv[SHOWN_MAX];
        bprintf(err, errlen, "%s = %s: %s", name, shown(value, sv), why);
        return -1;
    }
    cfg->origin[id] = GVM_ORIGIN_PROGRAM;
    return 0;
}

/* ---- the config file -------------------------------------------------- */

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
        bprintf(msg_, sizeof msg_, __VA_ARGS__);                               \
        bprintf((r)->err, (r)->errlen, "%s:%d: %s", (r)->source, (r)->line, msg_); \
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
        bprintf(r->err, r->errlen, "%s:%d: [rule %s]: missing 'place = ...'", r->source,
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
    char *in = trim(line + 1);
    if (strncmp(in, "rule", 4) != 0 || (in[4] && !isspace((unsigned char)in[4]))) {
        READ_ERR(r, "unknown section '[%s]' (expected [rule NAME])", in);
        return -1;
    }
    char *name = trim(in + 4);
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
    char *arg = trim(v);
    if (strcasecmp(word, "peer") == 0 || strcasecmp(word, "host") == 0) {
        if (*arg) goto syntax;
        rule->place = strcasecmp(word, "peer") == 0 ? GVM_RULE_PLACE_PEER : GVM_RULE_PLACE_HOST;
        return 0;
    }
    if (strcasecmp(word, "device") == 0) {
        int d = scan_ordinal(arg);
        if (d < 0) {
            bprintf(why, n, "expected device N with N a device ordinal (0 to %d)",
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
        char *item = trim(cur);
        int d = scan_ordinal(item);
        if (d < 0) {
            bprintf(why, n, "interleave: '%s' is not a device ordinal (0 to %d)", item,
                    GVM_CFG_MAX_DEVICES - 1);
            return -1;
        }
        if (seen & (1ull << d)) {
            bprintf(why, n, "interleave: device %d listed twice", d);
            return -1;
        }
        seen |= 1ull << d;
        rule->interleave[rule->ninterleave++] = (unsigned char)d;
        if (!comma) break;
        cur = comma + 1;
    }
    if (rule->ninterleave < 2) {
        bprintf(why, n, "interleave needs at least two devices (for one, write device N)");
        return -1;
    }
    return 0;
syntax:
    bprintf(why, n, PLACE_SYNTAX);
    return -1;
}

#define RANGE_SYNTAX "expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)"

static int parse_range(struct gvm_rule *rule, char *v, char *why, size_t n)
{
    char *dash = strchr(v, '-');
    if (!dash) {
        bprintf(why, n, RANGE_SYNTAX);
        return -1;
    }
    *dash = 0;
    char *lo = trim(v), *hi = trim(dash + 1);
    if (!*lo && !*hi) {
        bprintf(why, n, RANGE_SYNTAX);
        return -1;
    }
    size_t min = 0, max = SIZE_MAX;
    char sub[GVM_CFG_ERR_MAX];
    if (*lo && scan_size(lo, &min, sub, sizeof sub)) {
        bprintf(why, n, "'%s': %s", lo, strcmp(sub, SIZE_SYNTAX) ? sub : RANGE_SYNTAX);
        return -1;
    }
    if (*hi && scan_size(hi, &max, sub, sizeof sub)) {
        bprintf(why, n, "'%s': %s", hi, strcmp(sub, SIZE_SYNTAX) ? sub : RANGE_SYNTAX);
        return -1;
    }
    if (min > max) {
        bprintf(why, n, "the range is empty (%s is above %s)", lo, hi);
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
        const char *s = closest(key, rule_keys, RK_COUNT);
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
    char text[SHOWN_MAX], cut[SHOWN_MAX]; /* the value as written, for the message */
    snprintf(text, sizeof text, "%s", shown(value, cut));
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
            bprintf(why, sizeof why, "a tag is 1 to %d printable characters without spaces",
                    GVM_CFG_NAME_MAX - 1);
            rc = -1;
        } else {
            strcpy(rule->tag, value);
        }
        break;
    }
    case RK_DEVICE:
        rule->device = scan_ordinal(value);
        if (rule->device < 0) {
            bprintf(why, sizeof why, "expected a device ordinal (0 to %d)",
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
        const char *s = closest_option(key);
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
        char sv[SHOWN_MAX];
        READ_ERR(r, "config = %s: only valid in the environment (GVM_CONFIG)", shown(value, sv));
        return -1;
    }
    if (r->seen[id]) {
        READ_ERR(r, "'%s' is already set on line %d", key, r->seen[id]);
        return -1;
    }
    char why[GVM_CFG_ERR_MAX];
    if (set_option(r->cfg, id, value, why, sizeof why)) {
        char sv[SHOWN_MAX];
        READ_ERR(r, "%s = %s: %s", key, shown(value, sv), why);
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
    line = trim(line);
    if (!*line) return 0;
    if (line[0] == '[') return open_rule(r, line);
    char *eq = strchr(line, '=');
    if (!eq) {
        READ_ERR(r, "'%s': expected 'key = value' or '[rule NAME]'", line);
        return -1;
    }
    *eq = 0;
    char *key = trim(line), *value = trim(eq + 1);
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

#define LINE_MAX_LEN (GVM_CFG_PATH_MAX + 256)

int gvm_config_parse_text(struct gvm_config *cfg, const char *text, const char *source,
                          char *err, size_t errlen)
{
    struct reader r;
    reader_init(&r, cfg, source, err, errlen);
    char line[LINE_MAX_LEN];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        r.line++;
        if (len >= sizeof line - 1) {
            READ_ERR(&r, "line longer than %d characters", (int)sizeof line - 2);
            return -1;
        }
        memcpy(line, p, len);
        line[len] = 0;
        if (read_line(&r, line)) return -1;
        if (!nl) break;
        p = nl + 1;
    }
    return close_rule(&r);
}

/* label: how the file is named in an open error ("GVM_CONFIG=x" or "x"). */
static int read_file(struct gvm_config *cfg, const char *path, const char *label, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        bprintf(err, errlen, "%s: cannot open: %s", label, strerror(errno));
        return -1;
    }
    struct reader r;
    reader_init(&r, cfg, path, err, errlen);
    char line[LINE_MAX_LEN];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        r.line++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            READ_ERR(&r, "line longer than %d characters", (int)sizeof line - 2);
            rc = -1;
            break;
        }
        if (read_line(&r, line)) {
            rc = -1;
            break;
        }
    }
    if (!rc && ferror(f)) {
        bprintf(err, errlen, "%s: cannot read: %s", label, strerror(errno));
        rc = -1;
    }
    fclose(f);
    if (!rc) rc = close_rule(&r);
    if (!rc) snprintf(cfg->file, sizeof cfg->file, "%s", path);
    return rc;
}

/* ---- the environment --------------------------------------------------- */

static int env_option(const char *name, size_t len)
{
    if (len <= 4) return -1;
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const char *o = gvm_options[i].name;
        if (strlen(o) != len - 4) continue;
        size_t j = 0;
        while (j < len - 4 && name[4 + j] == toupper((unsigned char)o[j])) j++;
        if (j == len - 4) return i;
    }
    return -1;
}

/* Variables of the same prefix that belong to others: GVM_TEST_* to test
 * harnesses, and the ones Go Version Manager exports in every shell where
 * it is sourced (failing every job of its users would help nobody). */
static bool foreign_env(const char *var)
{
    static const char *const names[] = {"GVM_TEST_", "GVM_ROOT=", "GVM_VERSION=",
                                        "GVM_OVERLAY_PREFIX=", "GVM_PATH_BACKUP=", "GVM_GO_"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strncmp(var, names[i], strlen(names[i]))) return true;
    return false;
}

static int apply_env(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen)
{
    for (char *const *e = envp; *e; e++) {
        const char *var = *e;
        if (strncmp(var, "GVM_", 4) != 0 || foreign_env(var)) continue;
        const char *eq = strchr(var, '=');
        size_t len = eq ? (size_t)(eq - var) : strlen(var);
        const char *value = eq ? eq + 1 : "";
        int id = env_option(var, len);
        if (id < 0) {
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(len < 63 ? len : 63), var);
            const char *s = closest_option(key + 4);
            if (s) {
                char env[64];
                upper(env, sizeof env, s);
                bprintf(err, errlen, "%.*s: unknown option (did you mean GVM_%s?)", (int)len, var,
                        env);
            } else {
                bprintf(err, errlen, "%.*s: unknown option (gvm-config --help-config lists them)",
                        (int)len, var);
            }
            return -1;
        }
        char text[GVM_CFG_PATH_MAX], why[GVM_CFG_ERR_MAX];
        int rc = copy_trimmed(text, sizeof text, value);
        if (rc)
            bprintf(why, sizeof why, "longer than %d characters", GVM_CFG_PATH_MAX - 1);
        else
            rc = set_option(cfg, id, text, why, sizeof why);
        if (rc) {
            char sv[SHOWN_MAX];
            bprintf(err, errlen, "%.*s='%s': %s", (int)len, var, shown(value, sv), why);
            return -1;
        }
        cfg->origin[id] = GVM_ORIGIN_ENV;
    }
    return 0;
}

static const char *env_get(char *const *envp, const char *name)
{
    size_t len = strlen(name);
    const char *found = NULL;
    for (char *const *e = envp; *e; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') found = *e + len + 1;
    return found;
}

int gvm_config_load_from(struct gvm_config *cfg, char *const *envp, const char *file, char *err,
                         size_t errlen)
{
    if (!envp) envp = environ;
    gvm_config_defaults(cfg);
    if (file) {
        if (read_file(cfg, file, file, err, errlen)) return -1;
    } else {
        const char *path = env_get(envp, "GVM_CONFIG");
        char text[GVM_CFG_PATH_MAX];
        if (path && copy_trimmed(text, sizeof text, path) == 0 && text[0]) {
            char label[GVM_CFG_PATH_MAX + 16];
            snprintf(label, sizeof label, "GVM_CONFIG=%s", text);
            if (read_file(cfg, text, label, err, errlen)) return -1;
        }
    }
    return apply_env(cfg, envp, err, errlen);
}

int gvm_config_load(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen)
{
    return gvm_config_load_from(cfg, envp, NULL, err, errlen);
}

/* ---- using the values --------------------------------------------------- */

size_t gvm_size_resolve(const struct gvm_size_pct *v, size_t device_total)
{
    switch (v->kind) {
    case GVM_SIZE_BYTES:
        return v->bytes;
    case GVM_SIZE_PCT: {
        /* total * ppm / 1e6 without overflow: ppm <= 1e6 */
        size_t q = device_total / 1000000, rem = device_total % 1000000;
        return q * v->ppm + (size_t)((uint64_t)rem * v->ppm / 1000000);
    }
    default:
        return SIZE_MAX;
    }
}

size_t gvm_cfg_device_value(const struct gvm_size_pct_dev *v, int device, size_t device_total)
{
    if (device >= 0 && device < GVM_CFG_MAX_DEVICES)
        return gvm_size_resolve(&v->dev[device], device_total);
    return gvm_size_resolve(&v->other, device_total);
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

/* ---- printing ----------------------------------------------------------- */

static const char file_syntax[] =
    "The file (GVM_CONFIG) has lines 'key = value' with the keys above, in\n"
    "lowercase; '#' starts a comment; each option at most once. Placement rules\n"
    "follow the options, as sections:\n"
    "\n"
    "  [rule NAME]          NAME: letters, digits, '-', '_', '.'\n"
    "  size = MIN-MAX       allocation sizes, either side optional: 2G-, -1M, 1M-64M\n"
    "  tag = TAG            allocations made under gvm_tag_push(TAG)\n"
    "  device = N           allocations made on device N\n"
    "  place = WHERE        required: device N | peer | host | interleave\n"
    "                       (all devices) | interleave 0,1,3\n"
    "\n"
    "A rule applies when all of its conditions hold; the first that applies, in\n"
    "file order, wins. At most 32 rules.\n";

void gvm_config_print_help(FILE *out)
{
    fprintf(out, "gvmshim options. Sources, later wins: built-in defaults, the file named\n"
                 "by GVM_CONFIG, environment variables GVM_<NAME>.\n\n");
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct type_info *t = type_of(i);
        char env[64];
        upper(env, sizeof env, o->name);
        fprintf(out, "GVM_%s%s\n", env, i == GVM_OPT_config ? " (environment only)" : "");
        fprintf(out, "    file key: %s; default: %s\n", o->name, o->def[0] ? o->def : "(empty)");
        fprintf(out, "    %s: %s%s\n", t->name, t->doc, allow_none(o) ? ", or none" : "");
        fprintf(out, "    %s\n\n", o->doc);
    }
    fputs(file_syntax, out);
}

static void md_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

void gvm_config_print_markdown(FILE *out)
{
    fprintf(out, "| Environment | File key | Type | Default | Description |\n"
                 "|---|---|---|---|---|\n");
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct type_info *t = type_of(i);
        char env[64];
        upper(env, sizeof env, o->name);
        fprintf(out, "| `GVM_%s` | %s%s%s | ", env, i == GVM_OPT_config ? "" : "`",
                i == GVM_OPT_config ? "(environment only)" : o->name,
                i == GVM_OPT_config ? "" : "`");
        md_escaped(out, t->words ? t->doc : t->name);
        fprintf(out, " | %s%s%s | ", o->def[0] ? "`" : "", o->def[0] ? o->def : "(empty)",
                o->def[0] ? "`" : "");
        md_escaped(out, o->doc);
        fprintf(out, " |\n");
    }
    fprintf(out, "\n| Type | Values |\n|---|---|\n");
    for (int t = 0; t < GVM_TYPE_COUNT; t++) {
        if (types[t].words) continue;
        fprintf(out, "| %s | ", types[t].name);
        md_escaped(out, types[t].doc);
        fprintf(out, " |\n");
    }
}

static void rule_where(const struct gvm_rule *r, char *buf, size_t n)
{
    struct sbuf b = {buf, n, 0};
    buf[0] = 0;
    switch (r->place) {
    case GVM_RULE_PLACE_DEVICE:
        sb_add(&b, "device %d", r->place_device);
        break;
    case GVM_RULE_PLACE_PEER:
        sb_add(&b, "peer");
        break;
    case GVM_RULE_PLACE_HOST:
        sb_add(&b, "host");
        break;
    default:
        sb_add(&b, "interleave");
        for (int i = 0; i < r->ninterleave; i++)
            sb_add(&b, "%s%d", i ? "," : " ", r->interleave[i]);
        break;
    }
}

void gvm_config_dump_lines(const struct gvm_config *cfg,
                           void (*emit)(const char *line, void *arg), void *arg)
{
    char line[LINE_MAX_LEN], value[GVM_CFG_PATH_MAX], from[GVM_CFG_PATH_MAX + 32];
    const char *file = cfg->file[0] ? cfg->file : "file";
    snprintf(line, sizeof line, "# effective configuration (config file: %s)",
             cfg->file[0] ? cfg->file : "none");
    emit(line, arg);
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct type_info *t = type_of(i);
        t->format((const char *)cfg + o->offset, t->words, value, sizeof value);
        int origin = cfg->origin[i];
        char env[64];
        upper(env, sizeof env, o->name);
        if (origin > 0)
            snprintf(from, sizeof from, "%s:%d", file, origin);
        else if (origin == GVM_ORIGIN_ENV)
            snprintf(from, sizeof from, "GVM_%s", env);
        else if (origin == GVM_ORIGIN_PROGRAM)
            snprintf(from, sizeof from, "set by the program");
        else
            snprintf(from, sizeof from, "default");
        bprintf(line, sizeof line, "%s%s = %s  # %s%s", i == GVM_OPT_config ? "# " : "",
                 o->name, value, from, i == GVM_OPT_config ? ", environment only" : "");
        emit(line, arg);
    }
    for (int i = 0; i < cfg->nrules; i++) {
        const struct gvm_rule *r = &cfg->rules[i];
        snprintf(line, sizeof line, "[rule %s]  # %s:%d", r->name, file, r->line);
        emit(line, arg);
        if (r->size_min != 0 || r->size_max != SIZE_MAX) {
            char lo[32] = "", hi[32] = "";
            if (r->size_min) format_bytes(r->size_min, lo, sizeof lo);
            if (r->size_max != SIZE_MAX) format_bytes(r->size_max, hi, sizeof hi);
            snprintf(line, sizeof line, "size = %s-%s", lo, hi);
            emit(line, arg);
        }
        if (r->tag[0]) {
            snprintf(line, sizeof line, "tag = %s", r->tag);
            emit(line, arg);
        }
        if (r->device >= 0) {
            snprintf(line, sizeof line, "device = %d", r->device);
            emit(line, arg);
        }
        rule_where(r, value, sizeof value);
        snprintf(line, sizeof line, "place = %s", value);
        emit(line, arg);
    }
}

static void emit_file(const char *line, void *arg)
{
    FILE *out = arg;
    fputs(line, out);
    fputc('\n', out);
}

void gvm_config_dump(const struct gvm_config *cfg, FILE *out)
{
    gvm_config_dump_lines(cfg, emit_file, out);
}
