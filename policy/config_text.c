/* Text helpers shared by the configuration's files: trimming, messages
 * that always fit their buffer, and the did-you-mean for misspelt names. */
#include "policy/config_internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <string.h>

char *gvm_cfg_trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) s[--len] = 0;
    return s;
}

/* Copy src into dst (of size n) with surrounding white space removed;
 * -1 when it does not fit. */
int gvm_cfg_copy_trimmed(char *dst, size_t n, const char *src)
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
const char *gvm_cfg_shown(const char *v, char *buf)
{
    if (strlen(v) < 100) return v;
    snprintf(buf, GVM_CFG_SHOWN_MAX, "%.96s...", v);
    return buf;
}

/* snprintf for messages and lines, where cutting what does not fit is
 * intended (and gcc's truncation warnings are not); buf may be NULL. */
void gvm_cfg_bprintf(char *buf, size_t n, const char *fmt, ...)
{
    if (!buf || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* Appends to a buffer that always stays NUL-terminated. */
void gvm_cfg_sb_add(struct gvm_cfg_sbuf *b, const char *fmt, ...)
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
const char *gvm_cfg_closest(const char *key, const char *const *cands, int ncands)
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

const char *gvm_cfg_closest_option(const char *key)
{
    const char *names[GVM_OPT_COUNT];
    for (int i = 0; i < GVM_OPT_COUNT; i++) names[i] = gvm_options[i].name;
    return gvm_cfg_closest(key, names, GVM_OPT_COUNT);
}

void gvm_cfg_upper(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (char)toupper((unsigned char)src[i]);
    dst[i] = 0;
}
