/* The loader: defaults, then the file GVM_CONFIG names, then the GVM_*
 * variables of the environment; in a privileged process, defaults only.
 * This is the one place gvmshim reads its environment. */
#include "policy/config_internal.h"

#include <ctype.h>
#include <string.h>
#include <sys/auxv.h>

extern char **environ;

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
 * harnesses, GVM_TMS_* to the torch_memory_saver drop-in (Python, read by
 * python/torch_memory_saver), GVM_LIB to gvmrun (the library it preloads,
 * still in the program's environment), and the ones Go Version Manager exports in every shell where
 * it is sourced (failing every job of its users would help nobody). */
static bool foreign_env(const char *var)
{
    static const char *const names[] = {"GVM_TEST_", "GVM_TMS_", "GVM_LIB=", "GVM_ROOT=", "GVM_VERSION=",
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
            const char *s = gvm_cfg_closest_option(key + 4);
            if (s) {
                char env[64];
                gvm_cfg_upper(env, sizeof env, s);
                gvm_cfg_bprintf(err, errlen, "%.*s: unknown option (did you mean GVM_%s?)", (int)len, var,
                        env);
            } else {
                gvm_cfg_bprintf(err, errlen, "%.*s: unknown option (gvm-config --help-config lists them)",
                        (int)len, var);
            }
            return -1;
        }
        char text[GVM_CFG_PATH_MAX], why[GVM_CFG_ERR_MAX];
        int rc = gvm_cfg_copy_trimmed(text, sizeof text, value);
        if (rc)
            gvm_cfg_bprintf(why, sizeof why, "longer than %d characters", GVM_CFG_PATH_MAX - 1);
        else
            rc = gvm_cfg_set_option(cfg, id, text, why, sizeof why);
        if (rc) {
            char sv[GVM_CFG_SHOWN_MAX];
            gvm_cfg_bprintf(err, errlen, "%.*s='%s': %s", (int)len, var, gvm_cfg_shown(value, sv), why);
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

/* Does envp hold a variable gvmshim would read? */
static bool has_gvm_env(char *const *envp)
{
    for (char *const *e = envp; *e; e++)
        if (strncmp(*e, "GVM_", 4) == 0 && !foreign_env(*e)) return true;
    return false;
}

bool gvm_config_privileged(void) { return getauxval(AT_SECURE) != 0; }

/* Sharing gives memory back by spilling it to host: spill comes on with it
 * where it was left off by default (an explicit spill=off stays off, and
 * the processes then only refuse, as natively, past what fits). */
static void share_spills(struct gvm_config *cfg)
{
    if (!cfg->share || cfg->origin[GVM_OPT_spill] != GVM_ORIGIN_DEFAULT || cfg->spill.n) return;
    cfg->spill.n = 1;
    cfg->spill.target[0] = GVM_SPILL_HOST;
}

int gvm_config_load_as(struct gvm_config *cfg, char *const *envp, const char *file,
                       bool privileged, char *err, size_t errlen)
{
    if (!envp) envp = environ;
    gvm_config_defaults(cfg);
    if (privileged) {
        /* Whoever started a setuid/setgid/capability program chose its
         * environment, and must not choose which files it reads, which
         * library it loads or where it writes (secure_getenv's rule, for
         * every variable at once). */
        cfg->env_ignored = has_gvm_env(envp);
        return 0;
    }
    if (file) {
        if (gvm_cfg_read_file(cfg, file, file, err, errlen)) return -1;
    } else {
        const char *path = env_get(envp, "GVM_CONFIG");
        char text[GVM_CFG_PATH_MAX];
        if (path && gvm_cfg_copy_trimmed(text, sizeof text, path) == 0 && text[0]) {
            char label[GVM_CFG_PATH_MAX + 16];
            snprintf(label, sizeof label, "GVM_CONFIG=%s", text);
            if (gvm_cfg_read_file(cfg, text, label, err, errlen)) return -1;
        }
    }
    if (apply_env(cfg, envp, err, errlen)) return -1;
    share_spills(cfg);
    return gvm_cfg_apply_cluster_limit(cfg, envp, err, errlen);
}

int gvm_config_load_from(struct gvm_config *cfg, char *const *envp, const char *file, char *err,
                         size_t errlen)
{
    return gvm_config_load_as(cfg, envp, file, gvm_config_privileged(), err, errlen);
}

int gvm_config_load(struct gvm_config *cfg, char *const *envp, char *err, size_t errlen)
{
    return gvm_config_load_from(cfg, envp, NULL, err, errlen);
}
