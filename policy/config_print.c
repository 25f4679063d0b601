/* The printers: --help-config, the README's Markdown table, and the
 * effective configuration in config file syntax. */
#include "policy/config_internal.h"

#include <string.h>

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
                 "by GVM_CONFIG, environment variables GVM_<NAME>. Those marked live can\n"
                 "also change in a running process: gvmctl set PID NAME=VALUE.\n\n");
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct gvm_cfg_type *t = gvm_cfg_type_of(i);
        char env[64];
        gvm_cfg_upper(env, sizeof env, o->name);
        fprintf(out, "GVM_%s%s\n", env, i == GVM_OPT_config ? " (environment only)" : "");
        fprintf(out, "    file key: %s; default: %s\n", o->name, o->def[0] ? o->def : "(empty)");
        fprintf(out, "    %s: %s%s\n", t->name, t->doc, gvm_cfg_allow_none(o) ? ", or none" : "");
        fprintf(out, "    %s\n", o->doc);
        if (o->live) fprintf(out, "    live: gvmctl set PID %s=VALUE changes it in a running process\n", o->name);
        fputc('\n', out);
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
    fprintf(out, "| Environment | File key | Type | Default | Live | Description |\n"
                 "|---|---|---|---|---|---|\n");
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct gvm_cfg_type *t = gvm_cfg_type_of(i);
        char env[64];
        gvm_cfg_upper(env, sizeof env, o->name);
        fprintf(out, "| `GVM_%s` | %s%s%s | ", env, i == GVM_OPT_config ? "" : "`",
                i == GVM_OPT_config ? "(environment only)" : o->name,
                i == GVM_OPT_config ? "" : "`");
        md_escaped(out, t->words ? t->doc : t->name);
        fprintf(out, " | %s%s%s | ", o->def[0] ? "`" : "", o->def[0] ? o->def : "(empty)",
                o->def[0] ? "`" : "");
        fprintf(out, "%s | ", o->live ? "yes" : "");
        md_escaped(out, o->doc);
        fprintf(out, " |\n");
    }
    fprintf(out, "\n| Type | Values |\n|---|---|\n");
    for (int t = 0; t < GVM_TYPE_COUNT; t++) {
        if (gvm_cfg_types[t].words) continue;
        fprintf(out, "| %s | ", gvm_cfg_types[t].name);
        md_escaped(out, gvm_cfg_types[t].doc);
        fprintf(out, " |\n");
    }
}

static void rule_where(const struct gvm_rule *r, char *buf, size_t n)
{
    struct gvm_cfg_sbuf b = {buf, n, 0};
    buf[0] = 0;
    switch (r->place) {
    case GVM_RULE_PLACE_DEVICE:
        gvm_cfg_sb_add(&b, "device %d", r->place_device);
        break;
    case GVM_RULE_PLACE_PEER:
        gvm_cfg_sb_add(&b, "peer");
        break;
    case GVM_RULE_PLACE_HOST:
        gvm_cfg_sb_add(&b, "host");
        break;
    default:
        gvm_cfg_sb_add(&b, "interleave");
        for (int i = 0; i < r->ninterleave; i++)
            gvm_cfg_sb_add(&b, "%s%d", i ? "," : " ", r->interleave[i]);
        break;
    }
}

void gvm_config_dump_lines(const struct gvm_config *cfg,
                           void (*emit)(const char *line, void *arg), void *arg)
{
    char line[GVM_CFG_LINE_MAX], value[GVM_CFG_PATH_MAX], from[GVM_CFG_PATH_MAX + 32];
    const char *file = cfg->file[0] ? cfg->file : "file";
    snprintf(line, sizeof line, "# effective configuration (config file: %s)",
             cfg->file[0] ? cfg->file : "none");
    emit(line, arg);
    if (cfg->env_ignored)
        emit("# GVM_* environment ignored: the process is privileged (setuid, setgid or "
             "capabilities)", arg);
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        const struct gvm_option_info *o = &gvm_options[i];
        const struct gvm_cfg_type *t = gvm_cfg_type_of(i);
        t->format((const char *)cfg + o->offset, t->words, value, sizeof value);
        int origin = cfg->origin[i];
        char env[64];
        gvm_cfg_upper(env, sizeof env, o->name);
        if (origin > 0)
            snprintf(from, sizeof from, "%s:%d", file, origin);
        else if (origin == GVM_ORIGIN_ENV)
            snprintf(from, sizeof from, "GVM_%s", env);
        else if (origin == GVM_ORIGIN_PROGRAM)
            snprintf(from, sizeof from, "set by the program");
        else if (origin == GVM_ORIGIN_CONTROL)
            snprintf(from, sizeof from, "set by gvmctl");
        else if (origin == GVM_ORIGIN_CLUSTER)
            snprintf(from, sizeof from, "CUDA_DEVICE_MEMORY_LIMIT (a GPU-sharing layer's)");
        else
            snprintf(from, sizeof from, "default");
        gvm_cfg_bprintf(line, sizeof line, "%s%s = %s  # %s%s", i == GVM_OPT_config ? "# " : "",
                 o->name, value, from, i == GVM_OPT_config ? ", environment only" : "");
        emit(line, arg);
    }
    for (int i = 0; i < cfg->nrules; i++) {
        const struct gvm_rule *r = &cfg->rules[i];
        snprintf(line, sizeof line, "[rule %s]  # %s:%d", r->name, file, r->line);
        emit(line, arg);
        if (r->size_min != 0 || r->size_max != SIZE_MAX) {
            char lo[32] = "", hi[32] = "";
            if (r->size_min) gvm_cfg_format_bytes(r->size_min, lo, sizeof lo);
            if (r->size_max != SIZE_MAX) gvm_cfg_format_bytes(r->size_max, hi, sizeof hi);
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

