/* The value types: the tables generated from policy/options.h, one parser
 * and one formatter per type, the ranges beyond the types, and setting an
 * option from text. */
#include "policy/config_internal.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

__extension__ typedef unsigned __int128 u128;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* ---- tables generated from options.h ---------------------------------- */

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

const struct gvm_cfg_type gvm_cfg_types[GVM_TYPE_COUNT] = {
#define TYPE_PLAIN(type, doc) [GVM_TYPE_##type] = {#type, doc, parse_##type, format_##type, NULL},
#define TYPE_ENUM(type, VALUES)                                                \
    [GVM_TYPE_##type] = {#type, bars_##type + 1, parse_enum, format_enum, words_##type},
    GVM_OPTION_TYPES(TYPE_PLAIN) GVM_ENUM_TYPES(TYPE_ENUM)
#undef TYPE_PLAIN
#undef TYPE_ENUM
};

const struct gvm_option_info gvm_options[GVM_OPT_COUNT] = {
#define OPTION_INFO(name, type, def, when, doc)                                \
    [GVM_OPT_##name] = {#name, #type, def, doc, GVM_OPTION_LIVE(when),         \
                        offsetof(struct gvm_config, name),                     \
                        sizeof(((struct gvm_config *)0)->name)},
    GVM_OPTIONS(OPTION_INFO)
#undef OPTION_INFO
};

static const unsigned char option_type[GVM_OPT_COUNT] = {
#define OPTION_TYPE(name, type, def, when, doc) [GVM_OPT_##name] = GVM_TYPE_##type,
    GVM_OPTIONS(OPTION_TYPE)
#undef OPTION_TYPE
};

const struct gvm_cfg_type *gvm_cfg_type_of(int id) { return &gvm_cfg_types[option_type[id]]; }

bool gvm_cfg_allow_none(const struct gvm_option_info *o)
{
    return o && strcmp(o->def, "none") == 0;
}

int gvm_option_find(const char *name)
{
    for (int i = 0; i < GVM_OPT_COUNT; i++)
        if (strcmp(name, gvm_options[i].name) == 0) return i;
    return -1;
}

void gvm_config_format(const struct gvm_config *cfg, int id, char *buf, size_t n)
{
    const struct gvm_cfg_type *t = gvm_cfg_type_of(id);
    t->format((const char *)cfg + gvm_options[id].offset, t->words, buf, n);
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
int gvm_cfg_scan_ordinal(const char *s)
{
    if (!*s || strlen(s) > 2) return -1;
    int v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s)) return -1;
        v = v * 10 + (*s - '0');
    }
    return v < GVM_CFG_MAX_DEVICES ? v : -1;
}

/* A size without "none". */
int gvm_cfg_scan_size(const char *s, size_t *out, char *why, size_t n)
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
        gvm_cfg_bprintf(why, n, "a number of bytes must be whole");
        return -1;
    }
    u128 v = (u128)d.ip << shift;
    v += ((u128)d.fp << shift) / pow10_tab[d.nd];
    if (v >= SIZE_MAX) goto too_big;
    *out = (size_t)v;
    return 0;
syntax:
    gvm_cfg_bprintf(why, n, GVM_CFG_SIZE_SYNTAX);
    return -1;
too_big:
    gvm_cfg_bprintf(why, n, "too large");
    return -1;
}

void gvm_cfg_format_bytes(size_t v, char *buf, size_t n)
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
    gvm_cfg_bprintf(why, n, "expected 1/0, yes/no, true/false or on/off");
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
    struct gvm_cfg_sbuf b = {why, n, 0};
    gvm_cfg_sb_add(&b, "expected ");
    for (int i = 0; i < count; i++)
        gvm_cfg_sb_add(&b, "%s%s", i == 0 ? "" : i == count - 1 ? " or " : ", ", words[i]);
    return -1;
}

static int parse_enum(const char *s, void *out, const struct gvm_option_info *o, char *why,
                      size_t n)
{
    int v;
    if (parse_enum_words(s, &v, gvm_cfg_type_of((int)(o - gvm_options))->words, why, n)) return -1;
    /* all enum types are plain enums: store through an object of that type */
    gvm_opt_level_t e = (gvm_opt_level_t)v;
    _Static_assert(sizeof(gvm_opt_level_t) == sizeof(gvm_opt_host_access_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_spill_mode_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_track_launches_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_host_prefill_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_swap_in_t) &&
                       sizeof(gvm_opt_level_t) == sizeof(gvm_opt_spill_host_map_t),
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
        if (!gvm_cfg_allow_none(o)) {
            gvm_cfg_bprintf(why, n, "cannot be none (" GVM_CFG_SIZE_SYNTAX ")");
            return -1;
        }
        *(size_t *)out = SIZE_MAX;
        return 0;
    }
    if (gvm_cfg_scan_size(s, out, why, n) == 0) return 0;
    if (gvm_cfg_allow_none(o) && strcmp(why, GVM_CFG_SIZE_SYNTAX) == 0)
        gvm_cfg_bprintf(why, n, "expected a size in bytes with an optional K/M/G/T suffix "
                        "(e.g. 512M, 1.5G), or none");
    return -1;
}

static void format_size(const void *v, const char *const *words, char *buf, size_t n)
{
    gvm_cfg_format_bytes(*(const size_t *)v, buf, n);
}

static int parse_size_pct(const char *s, void *out, const struct gvm_option_info *o, char *why,
                          size_t n)
{
    struct gvm_size_pct *v = out;
    memset(v, 0, sizeof *v);
    const char *expected = gvm_cfg_allow_none(o)
        ? "expected a size (e.g. 512M), a percentage of the device's memory (e.g. 80%), or none"
        : "expected a size (e.g. 512M) or a percentage of the device's memory (e.g. 80%)";
    if (strcasecmp(s, "none") == 0) {
        if (!gvm_cfg_allow_none(o)) {
            gvm_cfg_bprintf(why, n, "cannot be none (%s)", expected + strlen("expected "));
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
            gvm_cfg_bprintf(why, n, "%s", expected);
            return -1;
        }
        u128 ppm = d.too_big ? (u128)UINT64_MAX : (u128)d.ip * 10000;
        ppm += (u128)d.fp * 10000 / pow10_tab[d.nd];
        if (ppm > 1000000) {
            gvm_cfg_bprintf(why, n, "a percentage must be between 0%% and 100%%");
            return -1;
        }
        v->kind = GVM_SIZE_PCT;
        v->ppm = (uint32_t)ppm;
        return 0;
    }
    if (gvm_cfg_scan_size(s, &v->bytes, why, n)) {
        if (strcmp(why, GVM_CFG_SIZE_SYNTAX) == 0) gvm_cfg_bprintf(why, n, "%s", expected);
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
        gvm_cfg_format_bytes(v->bytes, buf, n);
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
    if (gvm_cfg_copy_trimmed(buf, sizeof buf, s)) {
        gvm_cfg_bprintf(why, n, "too long");
        return -1;
    }
    /* items split by hand: strtok would skip empty ones */
    char *cur = buf;
    for (;;) {
        char *comma = strchr(cur, ',');
        if (comma) *comma = 0;
        char *item = gvm_cfg_trim(cur);
        if (!*item) {
            gvm_cfg_bprintf(why, n, "empty item in the list (expected DEVICE:VALUE,... e.g. 0:8G,1:50%%)");
            return -1;
        }
        char *colon = strchr(item, ':');
        if (!colon) {
            gvm_cfg_bprintf(why, n, "'%s': expected DEVICE:VALUE (e.g. 0:8G,1:50%%)", item);
            return -1;
        }
        *colon = 0;
        char *ord = gvm_cfg_trim(item), *val = gvm_cfg_trim(colon + 1);
        int d = gvm_cfg_scan_ordinal(ord);
        if (d < 0) {
            gvm_cfg_bprintf(why, n, "'%s' is not a device ordinal (0 to %d)", ord,
                    GVM_CFG_MAX_DEVICES - 1);
            return -1;
        }
        if (v->listed & (1ull << d)) {
            gvm_cfg_bprintf(why, n, "device %d listed twice", d);
            return -1;
        }
        char sub[GVM_CFG_ERR_MAX];
        if (parse_size_pct(val, &v->dev[d], o, sub, sizeof sub)) {
            gvm_cfg_bprintf(why, n, "device %d: %s", d, sub);
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
    struct gvm_cfg_sbuf b = {buf, n, 0};
    buf[0] = 0;
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++) {
        if (!(v->listed & (1ull << d))) continue;
        char one[64];
        format_size_pct(&v->dev[d], NULL, one, sizeof one);
        gvm_cfg_sb_add(&b, "%s%d:%s", b.len ? "," : "", d, one);
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
        gvm_cfg_bprintf(why, n, "expected a percentage (e.g. 150%%) or a factor (e.g. 1.5)");
        return -1;
    }
    if (d.too_big) {
        gvm_cfg_bprintf(why, n, "too large");
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
    if (gvm_cfg_copy_trimmed(buf, sizeof buf, s)) goto syntax;
    char *cur = buf;
    for (;;) {
        char *comma = strchr(cur, ',');
        if (comma) *comma = 0;
        char *item = gvm_cfg_trim(cur);
        int t = -1;
        for (int i = 0; i < 2; i++)
            if (strcasecmp(item, targets[i]) == 0) t = i;
        if (t < 0) goto syntax;
        for (int i = 0; i < v->n; i++) {
            if (v->target[i] == t) {
                gvm_cfg_bprintf(why, n, "%s listed twice", targets[t]);
                return -1;
            }
        }
        v->target[v->n++] = t;
        if (!comma) break;
        cur = comma + 1;
    }
    return 0;
syntax:
    gvm_cfg_bprintf(why, n, SPILL_SYNTAX);
    return -1;
}

static void format_spill(const void *vp, const char *const *words, char *buf, size_t n)
{
    const struct gvm_spill_list *v = vp;
    struct gvm_cfg_sbuf b = {buf, n, 0};
    buf[0] = 0;
    if (!v->n) gvm_cfg_sb_add(&b, "off");
    for (int i = 0; i < v->n; i++)
        gvm_cfg_sb_add(&b, "%s%s", i ? "," : "", v->target[i] == GVM_SPILL_PEER ? "peer" : "host");
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
        gvm_cfg_bprintf(why, n, "expected milliseconds, optionally with suffix ms or s (e.g. 50ms, 2s)");
        return -1;
    }
    u128 frac = (u128)d.fp * unit;
    u128 v = (u128)d.ip * unit + frac / pow10_tab[d.nd];
    if (d.too_big || v > UINT64_MAX) {
        gvm_cfg_bprintf(why, n, "too large");
        return -1;
    }
    if (frac % pow10_tab[d.nd]) {
        gvm_cfg_bprintf(why, n, "must be a whole number of milliseconds");
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
        gvm_cfg_bprintf(why, n, "longer than %d characters", GVM_CFG_PATH_MAX - 1);
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
            gvm_cfg_bprintf(why, n, "must be between 0 and 1M");
            return -1;
        }
        break;
    case GVM_OPT_block_size: {
        size_t b = v->v_size;
        if (b < 2 * MIB || b > GIB || (b & (b - 1))) {
            gvm_cfg_bprintf(why, n, "must be a power-of-two multiple of 2M between 2M and 1G");
            return -1;
        }
        break;
    }
    case GVM_OPT_grow_block: {
        size_t b = v->v_size;
        if (b < 2 * MIB || b > 64 * GIB || (b & (b - 1))) {
            gvm_cfg_bprintf(why, n, "must be a power-of-two multiple of 2M between 2M and 64G");
            return -1;
        }
        break;
    }
    case GVM_OPT_share_weight:
        if (!(v->v_ratio_pct >= 0.1 && v->v_ratio_pct <= 100.0)) {
            gvm_cfg_bprintf(why, n, "must be between 0.1 and 100");
            return -1;
        }
        break;
    case GVM_OPT_headroom:
        if (!(v->v_ratio_pct >= 0.0 && v->v_ratio_pct <= 10.0)) {
            gvm_cfg_bprintf(why, n, "must be between 0%% and 1000%%");
            return -1;
        }
        break;
    case GVM_OPT_promote_rate:
        if (v->v_size == 0) {
            gvm_cfg_bprintf(why, n, "must be more than 0 (promote = 0 turns promotion off)");
            return -1;
        }
        break;
    case GVM_OPT_trace_max:
        if (v->v_size < 4 * KIB) {
            gvm_cfg_bprintf(why, n, "must be at least 4K");
            return -1;
        }
        break;
    case GVM_OPT_promote_interval:
        if (v->v_millis < 1 || v->v_millis > 3600000) {
            gvm_cfg_bprintf(why, n, "must be between 1ms and 1h (3600s)");
            return -1;
        }
        break;
    case GVM_OPT_cache_idle:
        if (v->v_millis > 3600000) {
            gvm_cfg_bprintf(why, n, "must be at most 1h (3600s); 0 keeps freed memory until it is needed");
            return -1;
        }
        break;
    case GVM_OPT_libcuda:
        if (!v->v_path[0]) {
            gvm_cfg_bprintf(why, n, "must not be empty");
            return -1;
        }
        break;
    case GVM_OPT_stats: {
        static const char *const offs[] = {"0", "no", "false", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(v->v_string, offs[i]) == 0) {
                gvm_cfg_bprintf(why, n, "would be a file name; leave it empty to turn stats off "
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
int gvm_cfg_set_option(struct gvm_config *cfg, int id, const char *text, char *why, size_t n)
{
    const struct gvm_option_info *o = &gvm_options[id];
    union any_value v;
    memset(&v, 0, sizeof v);
    if (gvm_cfg_type_of(id)->parse(text, &v, o, why, n)) return -1;
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
    for (int i = 0; i < GVM_OPT_COUNT; i++) gvm_cfg_set_option(cfg, i, gvm_options[i].def, why, sizeof why);
}

int gvm_config_set(struct gvm_config *cfg, const char *name, const char *value, char *err,
                   size_t errlen)
{
    int id = gvm_option_find(name);
    if (id < 0) {
        const char *s = gvm_cfg_closest_option(name);
        if (s)
            gvm_cfg_bprintf(err, errlen, "unknown option '%s' (did you mean '%s'?)", name, s);
        else
            gvm_cfg_bprintf(err, errlen, "unknown option '%s'", name);
        return -1;
    }
    char why[GVM_CFG_ERR_MAX];
    if (gvm_cfg_set_option(cfg, id, value, why, sizeof why)) {
        char sv[GVM_CFG_SHOWN_MAX];
        gvm_cfg_bprintf(err, errlen, "%s = %s: %s", name, gvm_cfg_shown(value, sv), why);
        return -1;
    }
    cfg->origin[id] = GVM_ORIGIN_PROGRAM;
    return 0;
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
