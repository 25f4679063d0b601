/* Fuzz target: the configuration parser, on bytes an untrusted file (or
 * environment) could hold. Built with clang -fsanitize=fuzzer (see
 * meson.build); any crash, sanitizer report or broken property is a bug.
 *
 * Each input is used three ways:
 *   - as a config file, NUL bytes included (the path every file takes);
 *   - when it parsed: the effective configuration is printed, read back and
 *     printed again, and the values must be the same (the dump is
 *     documented as readable back by the loader);
 *   - its first byte picks an option and the rest is that option's value,
 *     through gvm_config_set (every value parser, including ones the file
 *     syntax cannot reach: '#', '=' and leading '[' in values);
 *   - split at newlines, as an environment for the loader (GVM_CONFIG
 *     entries dropped: the fuzzer must not read files of this machine). */
#include "policy/config_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct text {
    char buf[64 * 1024];
    size_t len;
    int lines;
};

/* Keeps a dump's values: comment lines go, and so does each line's
 * "  # where it came from", which differs between the two dumps. */
static void keep_values(const char *line, void *arg)
{
    struct text *t = arg;
    if (line[0] == '#') return;
    const char *cut = strstr(line, "  # ");
    size_t n = cut ? (size_t)(cut - line) : strlen(line);
    if (t->len + n + 2 > sizeof t->buf) abort();   /* the dump is bounded: 20 options, 32 rules */
    memcpy(t->buf + t->len, line, n);
    t->len += n;
    t->buf[t->len++] = '\n';
    t->buf[t->len] = 0;
    t->lines++;
}

static void round_trip(const struct gvm_config *cfg)
{
    static struct gvm_config again;
    static struct text first, second;
    char err[GVM_CFG_ERR_MAX];
    first.len = second.len = 0;
    first.lines = second.lines = 0;
    first.buf[0] = second.buf[0] = 0;
    gvm_config_dump_lines(cfg, keep_values, &first);
    gvm_config_defaults(&again);
    if (gvm_config_parse_text(&again, first.buf, "dump", err, sizeof err)) {
        fprintf(stderr, "the dump does not read back: %s\n--- dump\n%s", err, first.buf);
        abort();
    }
    gvm_config_dump_lines(&again, keep_values, &second);
    if (strcmp(first.buf, second.buf) != 0) {
        fprintf(stderr, "the dump changed on reading back\n--- first\n%s--- second\n%s",
                first.buf, second.buf);
        abort();
    }
}

static void as_environment(const uint8_t *data, size_t size)
{
    static struct gvm_config cfg;
    static char text[GVM_CFG_PATH_MAX * 4];
    char *envp[65];
    char err[GVM_CFG_ERR_MAX];
    if (size >= sizeof text) return;
    memcpy(text, data, size);
    text[size] = 0;
    int n = 0;
    for (char *line = text; line && n < 64;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl++ = 0;
        if (strncmp(line, "GVM_CONFIG", 10) != 0) envp[n++] = line;
        line = nl;
    }
    envp[n] = NULL;
    if (gvm_config_load_as(&cfg, envp, NULL, false, err, sizeof err) != 0 && !err[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gvm_config cfg;
    char err[GVM_CFG_ERR_MAX];

    gvm_config_defaults(&cfg);
    if (gvm_cfg_parse_bytes(&cfg, (const char *)data, size, "fuzz", err, sizeof err) == 0)
        round_trip(&cfg);
    else if (!err[0] || memchr(err, 0, sizeof err) == NULL)
        abort();   /* a failure always says why, in a terminated line */

    if (size > 0 && size < GVM_CFG_PATH_MAX + 64) {
        char value[GVM_CFG_PATH_MAX + 64];
        memcpy(value, data + 1, size - 1);
        value[size - 1] = 0;
        gvm_config_defaults(&cfg);
        const char *name = gvm_options[data[0] % GVM_OPT_COUNT].name;
        if (gvm_config_set(&cfg, name, value, err, sizeof err) != 0 && !err[0]) abort();
    }

    as_environment(data, size);
    return 0;
}
