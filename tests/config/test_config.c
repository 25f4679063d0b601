/* Tests of the configuration: every option with good and bad values,
 * per-device lists, the file and its rules, precedence, error lines, and
 * the gvm-config tool (its path is argv[1]). */
#define CHECK_CONTINUE
#include "../check.h"

#include "policy/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define TIB ((size_t)1 << 40)

static struct gvm_config cfg;
static char err[GVM_CFG_ERR_MAX];
static char tmpdir[] = "/tmp/gvm-config-test-XXXXXX";
static char files[512][256];
static int nfiles;

/* ---- helpers ------------------------------------------------------------ */

/* Load from a NULL-terminated list of environment entries. */
static int load_envv(const char *const *vars)
{
    err[0] = 0;
    return gvm_config_load(&cfg, (char *const *)vars, err, sizeof err);
}

/* Load with one variable NAME=VALUE. */
static int env1(const char *name, const char *value)
{
    static char var[8192];
    snprintf(var, sizeof var, "%s=%s", name, value);
    const char *vars[] = {"PATH=/usr/bin", var, NULL};
    return load_envv(vars);
}

/* Expect env1 to fail with exactly this line. */
#define ENV_ERR(name, value, want)                                             \
    do {                                                                       \
        CHECK(env1(name, value) == -1);                                        \
        CHECK_STR(err, want);                                                  \
    } while (0)

#define ENV_OK(name, value)                                                    \
    do {                                                                       \
        int rc_ = env1(name, value);                                           \
        CHECK(rc_ == 0);                                                       \
        if (rc_) fprintf(stderr, "  %s=%s: %s\n", name, value, err);           \
    } while (0)

static const char *write_file(const char *name, const char *text)
{
    if (nfiles == (int)(sizeof files / sizeof *files)) {
        fprintf(stderr, "too many temp files\n");
        exit(2);
    }
    char *path = files[nfiles++];
    snprintf(path, sizeof files[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load with GVM_CONFIG naming a file holding text, plus extra env entries. */
static int load_file_env(const char *text, const char *extra1, const char *extra2)
{
    static char var[512];
    static char name[32];
    static int count;
    snprintf(name, sizeof name, "f%d.conf", count++);
    const char *path = write_file(name, text);
    snprintf(var, sizeof var, "GVM_CONFIG=%s", path);
    const char *vars[] = {var, extra1, extra2, NULL};
    return load_envv(vars);
}

static int load_text(const char *text)
{
    return load_file_env(text, NULL, NULL);
}

/* The error of the last file load, with the temp directory cut off. */
static const char *file_err(void)
{
    static char buf[GVM_CFG_ERR_MAX];
    size_t n = strlen(tmpdir);
    if (strncmp(err, tmpdir, n) == 0 && err[n] == '/')
        snprintf(buf, sizeof buf, "%s", err + n + 1);
    else
        snprintf(buf, sizeof buf, "%s", err);
    return buf;
}

#define FILE_ERR(text, want)                                                   \
    do {                                                                       \
        CHECK(load_text(text) == -1);                                          \
        char want_[GVM_CFG_ERR_MAX];                                           \
        snprintf(want_, sizeof want_, "f%d.conf:%s", file_no(), want);         \
        CHECK_STR(file_err(), want_);                                          \
    } while (0)

static int file_no(void)
{
    /* the number in the name of the last file written by load_file_env */
    const char *base = strrchr(files[nfiles - 1], '/') + 1;
    return atoi(base + 1);
}

static char dump_buf[64 * 1024];

static const char *dump(const struct gvm_config *c)
{
    FILE *f = fmemopen(dump_buf, sizeof dump_buf, "w");
    gvm_config_dump(c, f);
    fclose(f);
    return dump_buf;
}

/* The dump without "# ..." comments, for comparing two configurations. */
static void strip_comments(char *s)
{
    char *out = s;
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char *hash = memchr(line, '#', len);
        size_t keep = hash ? (size_t)(hash - line) : len;
        while (keep && line[keep - 1] == ' ') keep--;
        if (keep) {
            memmove(out, line, keep);
            out += keep;
            *out++ = '\n';
        }
        line += len + (nl ? 1 : 0);
    }
    *out = 0;
}

/* ---- tests -------------------------------------------------------------- */

static void test_defaults(void)
{
    struct gvm_config c;
    gvm_config_defaults(&c);
    /* every default goes through the parser and passes its checks */
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        char e[GVM_CFG_ERR_MAX];
        int rc = gvm_config_set(&c, gvm_options[i].name, gvm_options[i].def, e, sizeof e);
        CHECK(rc == 0);
        if (rc) fprintf(stderr, "  default of %s: %s\n", gvm_options[i].name, e);
        CHECK(gvm_option_find(gvm_options[i].name) == i);
        CHECK(gvm_options[i].doc[0] != 0);
    }
    gvm_config_defaults(&c);
    CHECK(c.disable == false);
    CHECK(c.log == GVM_CFG_LOG_WARN);
    CHECK_STR(c.stats, "");
    CHECK_STR(c.config, "");
    CHECK_STR(c.libcuda, "libcuda.so.1");
    CHECK(c.small_max == MIB);
    CHECK(c.block_size == 64 * MIB);
    CHECK(c.headroom == 1.0);
    CHECK(!c.cache_limit.is_list);
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++) {
        CHECK(c.cache_limit.dev[d].kind == GVM_SIZE_PCT && c.cache_limit.dev[d].ppm == 100000);
        CHECK(c.pool_limit.dev[d].kind == GVM_SIZE_PCT && c.pool_limit.dev[d].ppm == 50000);
        CHECK(c.device_limit.dev[d].kind == GVM_SIZE_NONE);
    }
    CHECK(gvm_cfg_device_value(&c.cache_limit, 3, 80 * GIB) == 8 * GIB);
    CHECK(gvm_cfg_device_value(&c.cache_limit, 1000, 80 * GIB) == 8 * GIB);
    CHECK(gvm_cfg_device_value(&c.pool_limit, 0, 80 * GIB) == 4 * GIB);
    CHECK(gvm_cfg_device_value(&c.device_limit, 0, 80 * GIB) == SIZE_MAX);
    CHECK(c.host_pool == 4 * GIB);
    CHECK(c.host_access == GVM_CFG_HOST_ACCESS_LAZY);
    CHECK(c.host_limit == SIZE_MAX);
    CHECK(c.spill.n == 0);
    CHECK(c.spill_mode == GVM_CFG_SPILL_EVICT);
    CHECK(c.promote == true);
    CHECK(c.promote_rate == 8 * GIB);
    CHECK(c.promote_interval == 50);
    CHECK(c.track_launches == GVM_CFG_TRACK_AUTO);
    CHECK(c.nrules == 0);
    for (int i = 0; i < GVM_OPT_COUNT; i++) CHECK(c.origin[i] == GVM_ORIGIN_DEFAULT);
    CHECK_STR(c.file, "");

    /* loading an environment without GVM_ variables gives the defaults */
    const char *vars[] = {"HOME=/root", "XGVM_SPILL=x", "gvm_spill=x", NULL};
    CHECK(load_envv(vars) == 0);
    CHECK(memcmp(&cfg, &c, sizeof c) == 0);
}

static void test_bool(void)
{
    const char *yes[] = {"1", "yes", "true", "on", "YES", "True", " on "};
    const char *no[] = {"0", "no", "false", "off", "OFF"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        ENV_OK("GVM_DISABLE", yes[i]);
        CHECK(cfg.disable == true);
        CHECK(cfg.origin[GVM_OPT_disable] == GVM_ORIGIN_ENV);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        ENV_OK("GVM_PROMOTE", no[i]);
        CHECK(cfg.promote == false);
    }
    ENV_ERR("GVM_DISABLE", "maybe", "GVM_DISABLE='maybe': expected 1/0, yes/no, true/false or on/off");
    ENV_ERR("GVM_DISABLE", "2", "GVM_DISABLE='2': expected 1/0, yes/no, true/false or on/off");
    ENV_ERR("GVM_PROMOTE", "", "GVM_PROMOTE='': expected 1/0, yes/no, true/false or on/off");
}

static void test_enums(void)
{
    const char *levels[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        ENV_OK("GVM_LOG", levels[i]);
        CHECK((int)cfg.log == i);
    }
    ENV_OK("GVM_LOG", "DEBUG");
    CHECK(cfg.log == GVM_CFG_LOG_DEBUG);
    ENV_ERR("GVM_LOG", "verbose", "GVM_LOG='verbose': expected error, warn, info or debug");
    ENV_ERR("GVM_LOG", "3", "GVM_LOG='3': expected error, warn, info or debug");

    ENV_OK("GVM_HOST_ACCESS", "eager");
    CHECK(cfg.host_access == GVM_CFG_HOST_ACCESS_EAGER);
    ENV_OK("GVM_HOST_ACCESS", "lazy");
    CHECK(cfg.host_access == GVM_CFG_HOST_ACCESS_LAZY);
    ENV_OK("GVM_HOST_ACCESS", "off");
    CHECK(cfg.host_access == GVM_CFG_HOST_ACCESS_OFF);
    ENV_ERR("GVM_HOST_ACCESS", "never", "GVM_HOST_ACCESS='never': expected eager, lazy or off");

    ENV_OK("GVM_SPILL_MODE", "place");
    CHECK(cfg.spill_mode == GVM_CFG_SPILL_PLACE);
    ENV_OK("GVM_SPILL_MODE", "evict");
    CHECK(cfg.spill_mode == GVM_CFG_SPILL_EVICT);
    ENV_ERR("GVM_SPILL_MODE", "move", "GVM_SPILL_MODE='move': expected evict or place");

    ENV_OK("GVM_TRACK_LAUNCHES", "on");
    CHECK(cfg.track_launches == GVM_CFG_TRACK_ON);
    ENV_OK("GVM_TRACK_LAUNCHES", "off");
    CHECK(cfg.track_launches == GVM_CFG_TRACK_OFF);
    ENV_OK("GVM_TRACK_LAUNCHES", "auto");
    CHECK(cfg.track_launches == GVM_CFG_TRACK_AUTO);
    ENV_ERR("GVM_TRACK_LAUNCHES", "1", "GVM_TRACK_LAUNCHES='1': expected auto, on or off");
}

#define SIZE_SYNTAX "expected a size in bytes with an optional K/M/G/T suffix (e.g. 512M, 1.5G)"

static void test_sizes(void)
{
    static const struct {
        const char *text;
        size_t bytes;
    } good[] = {
        {"512M", 512 * MIB}, {"1.5G", 3 * GIB / 2}, {"4096", 4096}, {"1K", KIB},
        {"1k", KIB}, {"2T", 2 * TIB}, {"1KiB", KIB}, {"3MB", 3 * MIB}, {"7b", 7},
        {"0", 0}, {"0.5M", MIB / 2}, {"1.0", 1}, {"0.001K", 1}, {"1.25T", 5 * TIB / 4},
        {" 8G ", 8 * GIB}, {"16777215T", 16777215 * TIB},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ENV_OK("GVM_HOST_POOL", good[i].text);
        CHECK(cfg.host_pool == good[i].bytes);
        if (cfg.host_pool != good[i].bytes)
            fprintf(stderr, "  %s -> %zu\n", good[i].text, cfg.host_pool);
    }
    ENV_ERR("GVM_HOST_POOL", "12X", "GVM_HOST_POOL='12X': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "-1", "GVM_HOST_POOL='-1': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "M", "GVM_HOST_POOL='M': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "1..5M", "GVM_HOST_POOL='1..5M': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "1.M", "GVM_HOST_POOL='1.M': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "1 M", "GVM_HOST_POOL='1 M': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "1MiBB", "GVM_HOST_POOL='1MiBB': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "0x100", "GVM_HOST_POOL='0x100': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "", "GVM_HOST_POOL='': " SIZE_SYNTAX);
    ENV_ERR("GVM_HOST_POOL", "1.5", "GVM_HOST_POOL='1.5': a number of bytes must be whole");
    ENV_ERR("GVM_HOST_POOL", "99999999999999999999", "GVM_HOST_POOL='99999999999999999999': too large");
    ENV_ERR("GVM_HOST_POOL", "16777216T", "GVM_HOST_POOL='16777216T': too large");
    ENV_ERR("GVM_HOST_POOL", "none", "GVM_HOST_POOL='none': cannot be none (" SIZE_SYNTAX ")");

    /* host_limit's default is none, so it takes none */
    ENV_OK("GVM_HOST_LIMIT", "none");
    CHECK(cfg.host_limit == SIZE_MAX);
    ENV_OK("GVM_HOST_LIMIT", "256G");
    CHECK(cfg.host_limit == 256 * GIB);
    ENV_ERR("GVM_HOST_LIMIT", "lots",
            "GVM_HOST_LIMIT='lots': expected a size in bytes with an optional K/M/G/T suffix "
            "(e.g. 512M, 1.5G), or none");

    /* small_max: 0 to 1M */
    ENV_OK("GVM_SMALL_MAX", "0");
    CHECK(cfg.small_max == 0);
    ENV_OK("GVM_SMALL_MAX", "1M");
    CHECK(cfg.small_max == MIB);
    ENV_OK("GVM_SMALL_MAX", "64K");
    CHECK(cfg.small_max == 64 * KIB);
    ENV_ERR("GVM_SMALL_MAX", "1025K", "GVM_SMALL_MAX='1025K': must be between 0 and 1M");
    ENV_ERR("GVM_SMALL_MAX", "2M", "GVM_SMALL_MAX='2M': must be between 0 and 1M");

    /* block_size: a power-of-two multiple of 2M in [2M, 1G] */
    for (size_t b = 2 * MIB; b <= GIB; b *= 2) {
        char text[32];
        snprintf(text, sizeof text, "%zuM", b / MIB);
        ENV_OK("GVM_BLOCK_SIZE", text);
        CHECK(cfg.block_size == b);
    }
    ENV_OK("GVM_BLOCK_SIZE", "1G");
    CHECK(cfg.block_size == GIB);
    const char *bad_blocks[] = {"3M", "1M", "2G", "6M", "0", "2097153", "1.5G"};
    for (size_t i = 0; i < sizeof bad_blocks / sizeof *bad_blocks; i++) {
        char want[256];
        snprintf(want, sizeof want,
                 "GVM_BLOCK_SIZE='%s': must be a power-of-two multiple of 2M between 2M and 1G",
                 bad_blocks[i]);
        ENV_ERR("GVM_BLOCK_SIZE", bad_blocks[i], want);
    }

    ENV_OK("GVM_PROMOTE_RATE", "1G");
    CHECK(cfg.promote_rate == GIB);
    ENV_ERR("GVM_PROMOTE_RATE", "0",
            "GVM_PROMOTE_RATE='0': must be more than 0 (promote = 0 turns promotion off)");
}

static void test_ratio(void)
{
    static const struct {
        const char *text;
        double v;
    } good[] = {{"100%", 1.0}, {"1.5", 1.5}, {"150%", 1.5}, {"0", 0.0}, {"0%", 0.0},
                {"1000%", 10.0}, {"10", 10.0}, {"12.5%", 0.125}, {"0.25", 0.25}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ENV_OK("GVM_HEADROOM", good[i].text);
        CHECK(cfg.headroom == good[i].v);
    }
    const char *range[] = {"1001%", "11", "10.5"};
    for (size_t i = 0; i < 3; i++) {
        char want[128];
        snprintf(want, sizeof want, "GVM_HEADROOM='%s': must be between 0%% and 1000%%", range[i]);
        ENV_ERR("GVM_HEADROOM", range[i], want);
    }
    const char *bad[] = {"abc", "-1", "50 %", "%", "1.5x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[128];
        snprintf(want, sizeof want,
                 "GVM_HEADROOM='%s': expected a percentage (e.g. 150%%) or a factor (e.g. 1.5)",
                 bad[i]);
        ENV_ERR("GVM_HEADROOM", bad[i], want);
    }
}

#define PCT_SYNTAX "expected a size (e.g. 512M) or a percentage of the device's memory (e.g. 80%)"

static void test_per_device(void)
{
    ENV_OK("GVM_CACHE_LIMIT", "20%");
    CHECK(!cfg.cache_limit.is_list && cfg.cache_limit.listed == 0);
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++)
        CHECK(gvm_cfg_device_value(&cfg.cache_limit, d, 80 * GIB) == 16 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, -1, 80 * GIB) == 16 * GIB);

    ENV_OK("GVM_CACHE_LIMIT", "8G");
    for (int d = 0; d < GVM_CFG_MAX_DEVICES; d++)
        CHECK(gvm_cfg_device_value(&cfg.cache_limit, d, 80 * GIB) == 8 * GIB);

    ENV_OK("GVM_CACHE_LIMIT", "0:8G,1:16G,2:50%");
    CHECK(cfg.cache_limit.is_list);
    CHECK(cfg.cache_limit.listed == 7);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 0, 80 * GIB) == 8 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 1, 80 * GIB) == 16 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 2, 80 * GIB) == 40 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 3, 80 * GIB) == 8 * GIB);    /* default 10% */
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 63, 40 * GIB) == 4 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 64, 40 * GIB) == 4 * GIB);

    ENV_OK("GVM_POOL_LIMIT", " 63 : 1G , 5:2%");
    CHECK(cfg.pool_limit.listed == ((1ull << 63) | (1ull << 5)));
    CHECK(gvm_cfg_device_value(&cfg.pool_limit, 63, 80 * GIB) == GIB);
    CHECK(cfg.pool_limit.dev[5].kind == GVM_SIZE_PCT && cfg.pool_limit.dev[5].ppm == 20000);
    CHECK(gvm_cfg_device_value(&cfg.pool_limit, 0, 100 * GIB) == 5 * GIB);   /* default 5% */

    ENV_OK("GVM_DEVICE_LIMIT", "1:40G");
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 1, 80 * GIB) == 40 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == SIZE_MAX);  /* default none */
    ENV_OK("GVM_DEVICE_LIMIT", "0:none,1:90%");
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == SIZE_MAX);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 1, 80 * GIB) == 72 * GIB);
    ENV_OK("GVM_DEVICE_LIMIT", "none");
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 7, 80 * GIB) == SIZE_MAX);
    ENV_OK("GVM_DEVICE_LIMIT", "75%");
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 7, 80 * GIB) == 60 * GIB);

    /* percentages */
    ENV_OK("GVM_CACHE_LIMIT", "12.5%");
    CHECK(cfg.cache_limit.other.ppm == 125000);
    ENV_OK("GVM_CACHE_LIMIT", "0.0001%");
    CHECK(cfg.cache_limit.other.ppm == 1);
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 0, 1000000) == 1);
    ENV_OK("GVM_CACHE_LIMIT", "100%");
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 0, SIZE_MAX - 1) == SIZE_MAX - 1);
    ENV_OK("GVM_CACHE_LIMIT", "0%");
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 0, 80 * GIB) == 0);

    ENV_ERR("GVM_CACHE_LIMIT", "150%", "GVM_CACHE_LIMIT='150%': a percentage must be between 0% and 100%");
    ENV_ERR("GVM_CACHE_LIMIT", "100.5%", "GVM_CACHE_LIMIT='100.5%': a percentage must be between 0% and 100%");
    ENV_ERR("GVM_CACHE_LIMIT", "lots", "GVM_CACHE_LIMIT='lots': " PCT_SYNTAX);
    ENV_ERR("GVM_CACHE_LIMIT", "5%%", "GVM_CACHE_LIMIT='5%%': " PCT_SYNTAX);
    ENV_ERR("GVM_CACHE_LIMIT", "none",
            "GVM_CACHE_LIMIT='none': cannot be none (a size (e.g. 512M) or a percentage of the "
            "device's memory (e.g. 80%))");
    ENV_ERR("GVM_DEVICE_LIMIT", "x",
            "GVM_DEVICE_LIMIT='x': expected a size (e.g. 512M), a percentage of the device's "
            "memory (e.g. 80%), or none");
    ENV_ERR("GVM_CACHE_LIMIT", "0:8G,0:4G", "GVM_CACHE_LIMIT='0:8G,0:4G': device 0 listed twice");
    ENV_ERR("GVM_CACHE_LIMIT", "64:1G", "GVM_CACHE_LIMIT='64:1G': '64' is not a device ordinal (0 to 63)");
    ENV_ERR("GVM_CACHE_LIMIT", "a:1G", "GVM_CACHE_LIMIT='a:1G': 'a' is not a device ordinal (0 to 63)");
    ENV_ERR("GVM_CACHE_LIMIT", "-1:1G", "GVM_CACHE_LIMIT='-1:1G': '-1' is not a device ordinal (0 to 63)");
    ENV_ERR("GVM_CACHE_LIMIT", "0:8X", "GVM_CACHE_LIMIT='0:8X': device 0: " PCT_SYNTAX);
    ENV_ERR("GVM_CACHE_LIMIT", "1:none", "GVM_CACHE_LIMIT='1:none': device 1: cannot be none "
            "(a size (e.g. 512M) or a percentage of the device's memory (e.g. 80%))");
    ENV_ERR("GVM_CACHE_LIMIT", "0:8G,,1:2G",
            "GVM_CACHE_LIMIT='0:8G,,1:2G': empty item in the list (expected DEVICE:VALUE,... e.g. 0:8G,1:50%)");
    ENV_ERR("GVM_CACHE_LIMIT", "0:8G,",
            "GVM_CACHE_LIMIT='0:8G,': empty item in the list (expected DEVICE:VALUE,... e.g. 0:8G,1:50%)");
    ENV_ERR("GVM_CACHE_LIMIT", "0:8G,5G",
            "GVM_CACHE_LIMIT='0:8G,5G': '5G': expected DEVICE:VALUE (e.g. 0:8G,1:50%)");
    ENV_ERR("GVM_CACHE_LIMIT", "0:", "GVM_CACHE_LIMIT='0:': device 0: " PCT_SYNTAX);

    /* all 64 devices in one list */
    char list[2048] = "";
    for (int d = 0; d < 64; d++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d:%dM", d ? "," : "", d, d + 1);
    ENV_OK("GVM_POOL_LIMIT", list);
    CHECK(cfg.pool_limit.listed == UINT64_MAX);
    CHECK(gvm_cfg_device_value(&cfg.pool_limit, 41, 80 * GIB) == 42 * MIB);
}

static void test_spill(void)
{
    ENV_OK("GVM_SPILL", "off");
    CHECK(cfg.spill.n == 0);
    ENV_OK("GVM_SPILL", "peer");
    CHECK(cfg.spill.n == 1 && cfg.spill.target[0] == GVM_SPILL_PEER);
    ENV_OK("GVM_SPILL", "host");
    CHECK(cfg.spill.n == 1 && cfg.spill.target[0] == GVM_SPILL_HOST);
    ENV_OK("GVM_SPILL", "peer,host");
    CHECK(cfg.spill.n == 2 && cfg.spill.target[0] == GVM_SPILL_PEER &&
          cfg.spill.target[1] == GVM_SPILL_HOST);
    ENV_OK("GVM_SPILL", "HOST , peer");
    CHECK(cfg.spill.n == 2 && cfg.spill.target[0] == GVM_SPILL_HOST &&
          cfg.spill.target[1] == GVM_SPILL_PEER);
    ENV_ERR("GVM_SPILL", "hots", "GVM_SPILL='hots': expected off or a list of peer, host");
    ENV_ERR("GVM_SPILL", "peer,peer", "GVM_SPILL='peer,peer': peer listed twice");
    ENV_ERR("GVM_SPILL", "off,host", "GVM_SPILL='off,host': expected off or a list of peer, host");
    ENV_ERR("GVM_SPILL", "peer,", "GVM_SPILL='peer,': expected off or a list of peer, host");
    ENV_ERR("GVM_SPILL", "", "GVM_SPILL='': expected off or a list of peer, host");
    ENV_ERR("GVM_SPILL", "peer host", "GVM_SPILL='peer host': expected off or a list of peer, host");
}

#define MS_SYNTAX "expected milliseconds, optionally with suffix ms or s (e.g. 50ms, 2s)"

static void test_millis(void)
{
    static const struct {
        const char *text;
        uint64_t ms;
    } good[] = {{"50", 50}, {"50ms", 50}, {"2s", 2000}, {"0.5s", 500}, {"1ms", 1},
                {"3600s", 3600000}, {"0.001s", 1}, {"10MS", 10}, {"1.0ms", 1}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ENV_OK("GVM_PROMOTE_INTERVAL", good[i].text);
        CHECK(cfg.promote_interval == good[i].ms);
    }
    ENV_ERR("GVM_PROMOTE_INTERVAL", "1.5ms", "GVM_PROMOTE_INTERVAL='1.5ms': must be a whole number of milliseconds");
    ENV_ERR("GVM_PROMOTE_INTERVAL", "0.0005s", "GVM_PROMOTE_INTERVAL='0.0005s': must be a whole number of milliseconds");
    ENV_ERR("GVM_PROMOTE_INTERVAL", "0", "GVM_PROMOTE_INTERVAL='0': must be between 1ms and 1h (3600s)");
    ENV_ERR("GVM_PROMOTE_INTERVAL", "3601s", "GVM_PROMOTE_INTERVAL='3601s': must be between 1ms and 1h (3600s)");
    ENV_ERR("GVM_PROMOTE_INTERVAL", "2h", "GVM_PROMOTE_INTERVAL='2h': " MS_SYNTAX);
    ENV_ERR("GVM_PROMOTE_INTERVAL", "ms", "GVM_PROMOTE_INTERVAL='ms': " MS_SYNTAX);
    ENV_ERR("GVM_PROMOTE_INTERVAL", "99999999999999999999", "GVM_PROMOTE_INTERVAL='99999999999999999999': too large");
}

static void test_strings(void)
{
    ENV_OK("GVM_STATS", "1");
    CHECK_STR(cfg.stats, "1");
    ENV_OK("GVM_STATS", "/tmp/stats.json");
    CHECK_STR(cfg.stats, "/tmp/stats.json");
    ENV_OK("GVM_STATS", "");
    CHECK_STR(cfg.stats, "");
    ENV_ERR("GVM_STATS", "0", "GVM_STATS='0': would be a file name; leave it empty to turn stats "
                              "off (write ./0 for a file of that name)");
    ENV_ERR("GVM_STATS", "off", "GVM_STATS='off': would be a file name; leave it empty to turn "
                                "stats off (write ./off for a file of that name)");
    ENV_OK("GVM_LIBCUDA", "/opt/sim/libcuda.so");
    CHECK_STR(cfg.libcuda, "/opt/sim/libcuda.so");
    ENV_ERR("GVM_LIBCUDA", "", "GVM_LIBCUDA='': must not be empty");

    static char longv[GVM_CFG_PATH_MAX + 10];
    memset(longv, 'a', sizeof longv - 1);
    CHECK(env1("GVM_LIBCUDA", longv) == -1);
    CHECK(strstr(err, ": longer than 4095 characters") != NULL);
    CHECK(strncmp(err, "GVM_LIBCUDA='aaaa", 17) == 0);
    longv[GVM_CFG_PATH_MAX - 1] = 0;
    ENV_OK("GVM_LIBCUDA", longv);
    CHECK(strlen(cfg.libcuda) == GVM_CFG_PATH_MAX - 1);
}

static void test_env_names(void)
{
    ENV_ERR("GVM_SPIL", "host", "GVM_SPIL: unknown option (did you mean GVM_SPILL?)");
    ENV_ERR("GVM_HEADROM", "1", "GVM_HEADROM: unknown option (did you mean GVM_HEADROOM?)");
    ENV_ERR("GVM_BLOCKSIZE", "2M", "GVM_BLOCKSIZE: unknown option (did you mean GVM_BLOCK_SIZE?)");
    ENV_ERR("GVM_spill", "host", "GVM_spill: unknown option (did you mean GVM_SPILL?)");
    ENV_ERR("GVM_PROMOTE_INTERVALS", "1", "GVM_PROMOTE_INTERVALS: unknown option (did you mean GVM_PROMOTE_INTERVAL?)");
    ENV_ERR("GVM_XYZZY_FROB", "1", "GVM_XYZZY_FROB: unknown option (gvm-config --help-config lists them)");
    ENV_ERR("GVM_", "1", "GVM_: unknown option (gvm-config --help-config lists them)");

    /* GVM_TEST_* belongs to test harnesses, GVM_TMS_* to the
     * torch_memory_saver drop-in, GVM_LIB to gvmrun; other prefixes are
     * not ours */
    const char *vars[] = {"GVM_TEST_SIM_DEVICES=4", "GVM_TEST_=x", "GVM_TMS_DISCARD=0", "GVM_LIB=/x/libgvmshim.so",
                          "NOT_GVM_SPIL=1",
                          "GVM_SPILL=host", "GVMSPILL=1", "GVM_ROOT=/home/u/.gvm",
                          "GVM_VERSION=1.0.22", "GVM_OVERLAY_PREFIX=/x", NULL};
    CHECK(load_envv(vars) == 0);
    CHECK(cfg.spill.n == 1);
    /* a variable without '=' is still ours to judge */
    const char *noeq[] = {"GVM_SPILL", NULL};
    CHECK(load_envv(noeq) == -1);
    CHECK_STR(err, "GVM_SPILL='': expected off or a list of peer, host");

    /* envp NULL reads environ */
    char **saved = environ;
    char *mine[] = {"GVM_SPILL=peer", "GVM_LOG=debug", NULL};
    environ = mine;
    int rc = gvm_config_load(&cfg, NULL, err, sizeof err);
    environ = saved;
    CHECK(rc == 0);
    CHECK(cfg.spill.n == 1 && cfg.spill.target[0] == GVM_SPILL_PEER);
    CHECK(cfg.log == GVM_CFG_LOG_DEBUG);

    /* the error buffer is cut, not overrun */
    char small[8];
    const char *bad[] = {"GVM_SPILL=hots", NULL};
    CHECK(gvm_config_load(&cfg, (char *const *)bad, small, sizeof small) == -1);
    CHECK_STR(small, "GVM_SPI");
    CHECK(gvm_config_load(&cfg, (char *const *)bad, NULL, 0) == -1);
}

static void test_file_basics(void)
{
    CHECK(load_file_env("# a comment\n"
                        "\n"
                        "   spill = host,peer   # trailing comment\n"
                        "block_size=32M\n"
                        "\tlog\t=\tinfo\t\n"
                        "headroom = 50%\r\n"
                        "stats =\n"
                        "cache_limit = 0:1G, 1:2G\n"
                        "promote = off",  /* no newline at the end */
                        NULL, NULL) == 0);
    if (err[0]) fprintf(stderr, "  %s\n", err);
    CHECK(cfg.spill.n == 2 && cfg.spill.target[0] == GVM_SPILL_HOST);
    CHECK(cfg.block_size == 32 * MIB);
    CHECK(cfg.log == GVM_CFG_LOG_INFO);
    CHECK(cfg.headroom == 0.5);
    CHECK_STR(cfg.stats, "");
    CHECK(gvm_cfg_device_value(&cfg.cache_limit, 1, 80 * GIB) == 2 * GIB);
    CHECK(cfg.promote == false);
    CHECK(cfg.origin[GVM_OPT_spill] == 3);
    CHECK(cfg.origin[GVM_OPT_block_size] == 4);
    CHECK(cfg.origin[GVM_OPT_promote] == 9);
    CHECK(cfg.origin[GVM_OPT_small_max] == GVM_ORIGIN_DEFAULT);
    CHECK(cfg.origin[GVM_OPT_config] == GVM_ORIGIN_ENV);
    CHECK(strstr(cfg.file, tmpdir) == cfg.file);
    CHECK_STR(cfg.config, cfg.file);

    /* an empty file and a file of comments are fine */
    CHECK(load_text("") == 0);
    CHECK(load_text("# nothing\n\n   \n# more\n") == 0);
    CHECK(cfg.nrules == 0);

    /* errors carry the file and the line */
    FILE_ERR("# header\n\nblock_size = 3M\n",
             "3: block_size = 3M: must be a power-of-two multiple of 2M between 2M and 1G");
    FILE_ERR("log = warn\nspill = hots\n", "2: spill = hots: expected off or a list of peer, host");
    FILE_ERR("a\nb\nheadrom = 2\n", "1: 'a': expected 'key = value' or '[rule NAME]'");
    FILE_ERR("\n\nheadrom = 2\n", "3: unknown option 'headrom' (did you mean 'headroom'?)");
    FILE_ERR("Block_Size = 2M\n", "1: unknown option 'Block_Size' (keys are lowercase: did you mean 'block_size'?)");
    FILE_ERR("SPILL = host\n", "1: unknown option 'SPILL' (keys are lowercase: did you mean 'spill'?)");
    FILE_ERR("frobnicate = 2\n", "1: unknown option 'frobnicate' (gvm-config --help-config lists them)");
    FILE_ERR("spill = host\nlog = info\nspill = peer\n", "3: 'spill' is already set on line 1");
    FILE_ERR("= 5\n", "1: '= 5': the key is missing");
    FILE_ERR("promote_rate = 0\n", "1: promote_rate = 0: must be more than 0 (promote = 0 turns promotion off)");
    FILE_ERR("block_size =\n", "1: block_size = : " SIZE_SYNTAX);
    FILE_ERR("config = /etc/gvm.conf\n", "1: config = /etc/gvm.conf: only valid in the environment (GVM_CONFIG)");
    FILE_ERR("size = 1G-\n", "1: 'size' belongs in a [rule NAME] section");
    FILE_ERR("place = host\n", "1: 'place' belongs in a [rule NAME] section");
    FILE_ERR("log = info # ok\nhost_access = sometimes # no\n",
             "2: host_access = sometimes: expected eager, lazy or off");

    /* lines too long */
    static char text[GVM_CFG_PATH_MAX + 512];
    snprintf(text, sizeof text, "log = info\nstats = ");
    size_t at = strlen(text);
    memset(text + at, 'x', GVM_CFG_PATH_MAX + 300);
    strcpy(text + at + GVM_CFG_PATH_MAX + 300, "\n");
    FILE_ERR(text, "2: line longer than 4350 characters");
    /* a value longer than a path, on a line that fits */
    snprintf(text, sizeof text, "stats = ");
    at = strlen(text);
    memset(text + at, 'x', GVM_CFG_PATH_MAX);
    text[at + GVM_CFG_PATH_MAX] = 0;
    CHECK(load_text(text) == -1);
    CHECK(strstr(err, ": longer than 4095 characters") != NULL);
    CHECK(strstr(file_err(), ":1: stats = xxxx") != NULL);
}

static void test_file_sources(void)
{
    /* missing, unreadable */
    ENV_ERR("GVM_CONFIG", "/nonexistent/gvm.conf",
            "GVM_CONFIG=/nonexistent/gvm.conf: cannot open: No such file or directory");
    ENV_ERR("GVM_CONFIG", "/", "GVM_CONFIG=/: not a regular file (a directory)");
    /* empty GVM_CONFIG: no file */
    ENV_OK("GVM_CONFIG", "");
    CHECK_STR(cfg.file, "");

    /* precedence: defaults < file < environment */
    CHECK(load_file_env("spill = host\nblock_size = 32M\nlog = debug\n", "GVM_SPILL=peer",
                        "GVM_LOG=error") == 0);
    CHECK(cfg.spill.n == 1 && cfg.spill.target[0] == GVM_SPILL_PEER);
    CHECK(cfg.origin[GVM_OPT_spill] == GVM_ORIGIN_ENV);
    CHECK(cfg.block_size == 32 * MIB);
    CHECK(cfg.origin[GVM_OPT_block_size] == 2);
    CHECK(cfg.log == GVM_CFG_LOG_ERROR);
    CHECK(cfg.small_max == MIB);

    /* a bad environment value fails even when the file sets the option well */
    CHECK(load_file_env("spill = host\n", "GVM_SPILL=bogus", NULL) == -1);
    CHECK_STR(err, "GVM_SPILL='bogus': expected off or a list of peer, host");
    /* an unknown variable fails after a good file */
    CHECK(load_file_env("spill = host\n", "GVM_SPILLL=1", NULL) == -1);
    CHECK_STR(err, "GVM_SPILLL: unknown option (did you mean GVM_SPILL?)");

    /* gvm_config_load_from: the given file instead of GVM_CONFIG */
    const char *path = write_file("given.conf", "spill = host\n");
    const char *vars[] = {"GVM_CONFIG=/nonexistent.conf", "GVM_HOST_ACCESS=eager", NULL};
    CHECK(gvm_config_load_from(&cfg, (char *const *)vars, path, err, sizeof err) == 0);
    CHECK(cfg.spill.n == 1 && cfg.spill.target[0] == GVM_SPILL_HOST);
    CHECK(cfg.host_access == GVM_CFG_HOST_ACCESS_EAGER);
    CHECK_STR(cfg.file, path);
    CHECK(gvm_config_load_from(&cfg, (char *const *)vars, "/nonexistent/x.conf", err, sizeof err) == -1);
    CHECK_STR(err, "/nonexistent/x.conf: cannot open: No such file or directory");

    /* gvm_config_parse_text and gvm_config_set */
    gvm_config_defaults(&cfg);
    CHECK(gvm_config_parse_text(&cfg, "log = debug\n\nspill = peer\n", "inline", err, sizeof err) == 0);
    CHECK(cfg.log == GVM_CFG_LOG_DEBUG && cfg.origin[GVM_OPT_log] == 1);
    CHECK(gvm_config_parse_text(&cfg, "log = debug\nspil = peer\n", "inline", err, sizeof err) == -1);
    CHECK_STR(err, "inline:2: unknown option 'spil' (did you mean 'spill'?)");
    CHECK(gvm_config_set(&cfg, "block_size", "128M", err, sizeof err) == 0);
    CHECK(cfg.block_size == 128 * MIB && cfg.origin[GVM_OPT_block_size] == GVM_ORIGIN_PROGRAM);
    CHECK(gvm_config_set(&cfg, "block_size", "100M", err, sizeof err) == -1);
    CHECK_STR(err, "block_size = 100M: must be a power-of-two multiple of 2M between 2M and 1G");
    CHECK(cfg.block_size == 128 * MIB); /* a failed set changes nothing */
    CHECK(gvm_config_set(&cfg, "blok_size", "2M", err, sizeof err) == -1);
    CHECK_STR(err, "unknown option 'blok_size' (did you mean 'block_size'?)");
    CHECK(gvm_config_set(&cfg, "config", "/x.conf", err, sizeof err) == 0);
    CHECK(gvm_option_find("nope") == -1);
    CHECK(gvm_option_find("SPILL") == -1);
}

static void test_rules(void)
{
    CHECK(load_text("spill = host\n"
                    "\n"
                    "[rule big-in-host]\n"
                    "size = 2G-\n"
                    "place = host\n"
                    "[rule kv_cache]   # tagged\n"
                    "tag = kv.cache\n"
                    "place = interleave 0, 1,3\n"
                    "[ rule  mid ]\n"
                    "size = 1M-64M\n"
                    "device = 1\n"
                    "place = device 2\n"
                    "[rule small]\n"
                    "size = -1M\n"
                    "place = peer\n"
                    "[rule everything]\n"
                    "place = interleave\n") == 0);
    if (err[0]) fprintf(stderr, "  %s\n", err);
    CHECK(cfg.nrules == 5);
    const struct gvm_rule *r = cfg.rules;
    CHECK_STR(r[0].name, "big-in-host");
    CHECK(r[0].line == 3 && r[0].size_min == 2 * GIB && r[0].size_max == SIZE_MAX);
    CHECK(r[0].place == GVM_RULE_PLACE_HOST && r[0].device == -1 && r[0].tag[0] == 0);
    CHECK_STR(r[1].name, "kv_cache");
    CHECK_STR(r[1].tag, "kv.cache");
    CHECK(r[1].place == GVM_RULE_PLACE_INTERLEAVE && r[1].ninterleave == 3);
    CHECK(r[1].interleave[0] == 0 && r[1].interleave[1] == 1 && r[1].interleave[2] == 3);
    CHECK(r[1].size_min == 0 && r[1].size_max == SIZE_MAX);
    CHECK_STR(r[2].name, "mid");
    CHECK(r[2].size_min == MIB && r[2].size_max == 64 * MIB && r[2].device == 1);
    CHECK(r[2].place == GVM_RULE_PLACE_DEVICE && r[2].place_device == 2);
    CHECK(r[3].size_min == 0 && r[3].size_max == MIB && r[3].place == GVM_RULE_PLACE_PEER);
    CHECK(r[4].place == GVM_RULE_PLACE_INTERLEAVE && r[4].ninterleave == 0);
    CHECK(cfg.spill.n == 1);

    /* matching: first rule that applies wins */
    CHECK(gvm_rule_match(&cfg, 2 * GIB, 0, NULL) == &r[0]);
    CHECK(gvm_rule_match(&cfg, 3 * GIB, 5, "kv.cache") == &r[0]);  /* big wins over tag */
    CHECK(gvm_rule_match(&cfg, 2 * GIB - 1, 0, "kv.cache") == &r[1]);
    CHECK(gvm_rule_match(&cfg, 10, 0, "kv.cache") == &r[1]);
    CHECK(gvm_rule_match(&cfg, 10, 0, "kv.cach") == &r[3]);       /* tags match whole */
    CHECK(gvm_rule_match(&cfg, MIB, 1, NULL) == &r[2]);            /* range is inclusive */
    CHECK(gvm_rule_match(&cfg, 64 * MIB, 1, "other") == &r[2]);
    CHECK(gvm_rule_match(&cfg, 64 * MIB + 1, 1, NULL) == &r[4]);
    CHECK(gvm_rule_match(&cfg, MIB, 0, NULL) == &r[3]);            /* device 0: not mid */
    CHECK(gvm_rule_match(&cfg, MIB + 1, 0, NULL) == &r[4]);
    CHECK(gvm_rule_match(&cfg, 0, 3, NULL) == &r[3]);

    /* no rules, or none that applies */
    CHECK(load_text("[rule only-tagged]\ntag = t\nplace = host\n") == 0);
    CHECK(gvm_rule_match(&cfg, 100, 0, NULL) == NULL);
    CHECK(gvm_rule_match(&cfg, 100, 0, "T") == NULL);
    CHECK(gvm_rule_match(&cfg, 100, 0, "t") == &cfg.rules[0]);
    CHECK(load_text("log = info\n") == 0);
    CHECK(gvm_rule_match(&cfg, 100, 0, "t") == NULL);
    /* device conditions */
    CHECK(load_text("[rule d3]\ndevice = 3\nplace = device 0\n[rule rest]\nsize=0-\nplace=peer\n") == 0);
    CHECK(gvm_rule_match(&cfg, 1, 3, NULL) == &cfg.rules[0]);
    CHECK(gvm_rule_match(&cfg, 1, 2, NULL) == &cfg.rules[1]);
    /* a tag rule and an environment override together */
    CHECK(load_file_env("[rule a]\nsize = 1K-\nplace = host\n", "GVM_SPILL=peer", NULL) == 0);
    CHECK(cfg.nrules == 1 && cfg.spill.target[0] == GVM_SPILL_PEER);

    /* 32 rules fit, 33 do not */
    static char text[8192];
    text[0] = 0;
    for (int i = 0; i < 33; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "[rule r%d]\nsize = %dM-\nplace = host\n", i, 32 - i);
    char *cut = strstr(text, "[rule r32]");
    *cut = 0;
    CHECK(load_text(text) == 0);
    CHECK(cfg.nrules == 32);
    CHECK(gvm_rule_match(&cfg, 20 * MIB, 0, NULL) == &cfg.rules[12]);
    *cut = '[';
    FILE_ERR(text, "97: [rule r32]: too many rules (at most 32)");

    /* errors */
    FILE_ERR("[rule a]\nsize = 1G-\n", "1: [rule a]: missing 'place = ...'");
    FILE_ERR("log = info\n[rule a]\nsize = 1G-\n[rule b]\nplace = host\n", "2: [rule a]: missing 'place = ...'");
    FILE_ERR("[rule a]\nplace = host\n[rule a]\nplace = peer\n", "3: [rule a]: a rule of that name is already on line 1");
    FILE_ERR("[rule a]\nplce = host\n", "2: [rule a]: unknown key 'plce' (did you mean 'place'?)");
    FILE_ERR("[rule a]\nwhere = host\n", "2: [rule a]: unknown key 'where' (a rule has size, tag, device and place)");
    FILE_ERR("[rule a]\nplace = host\nplace = peer\n", "3: [rule a]: 'place' is already set on line 2");
    FILE_ERR("[rule a]\nplace = host\nspill = host\n",
             "3: 'spill' is an option, not a rule key: options go before the first [rule] section");
    FILE_ERR("[rule a]\nplace = hots\n",
             "2: [rule a]: place = hots: expected device N, peer, host, interleave or interleave N,N,...");
    FILE_ERR("[rule a]\nplace = host 1\n",
             "2: [rule a]: place = host 1: expected device N, peer, host, interleave or interleave N,N,...");
    FILE_ERR("[rule a]\nplace = device\n", "2: [rule a]: place = device: expected device N with N a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\nplace = device 64\n", "2: [rule a]: place = device 64: expected device N with N a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\nplace = interleave 0\n",
             "2: [rule a]: place = interleave 0: interleave needs at least two devices (for one, write device N)");
    FILE_ERR("[rule a]\nplace = interleave 0,0\n", "2: [rule a]: place = interleave 0,0: interleave: device 0 listed twice");
    FILE_ERR("[rule a]\nplace = interleave 0,x\n", "2: [rule a]: place = interleave 0,x: interleave: 'x' is not a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\nplace = interleave 0,\n", "2: [rule a]: place = interleave 0,: interleave: '' is not a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\nsize = 2G\nplace = host\n",
             "2: [rule a]: size = 2G: expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)");
    FILE_ERR("[rule a]\nsize = -\nplace = host\n",
             "2: [rule a]: size = -: expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)");
    FILE_ERR("[rule a]\nsize = 2G-1G\nplace = host\n", "2: [rule a]: size = 2G-1G: the range is empty (2G is above 1G)");
    FILE_ERR("[rule a]\nsize = 2X-\nplace = host\n",
             "2: [rule a]: size = 2X-: '2X': expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)");
    FILE_ERR("[rule a]\nsize = 1.5-\nplace = host\n", "2: [rule a]: size = 1.5-: '1.5': a number of bytes must be whole");
    FILE_ERR("[rule a]\nsize = -1M-2M\nplace = host\n",
             "2: [rule a]: size = -1M-2M: '1M-2M': expected a size range MIN-MAX, either side optional (e.g. 2G-, -1M, 1M-64M)");
    FILE_ERR("[rule a]\ndevice = 64\nplace = host\n", "2: [rule a]: device = 64: expected a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\ndevice = one\nplace = host\n", "2: [rule a]: device = one: expected a device ordinal (0 to 63)");
    FILE_ERR("[rule a]\ntag =\nplace = host\n", "2: [rule a]: tag = : a tag is 1 to 63 printable characters without spaces");
    FILE_ERR("[rule a]\ntag = two words\nplace = host\n", "2: [rule a]: tag = two words: a tag is 1 to 63 printable characters without spaces");
    FILE_ERR("[foo]\n", "1: unknown section '[foo]' (expected [rule NAME])");
    FILE_ERR("[rules a]\n", "1: unknown section '[rules a]' (expected [rule NAME])");
    FILE_ERR("[rule]\n", "1: [rule ]: a rule name is 1 to 63 letters, digits, '-', '_' or '.'");
    FILE_ERR("[rule a b]\n", "1: [rule a b]: a rule name is 1 to 63 letters, digits, '-', '_' or '.'");
    FILE_ERR("[rule a\n", "1: expected '[rule NAME]'");
    FILE_ERR("[rule a] x\n", "1: expected '[rule NAME]'");
}

static void test_dump_roundtrip(void)
{
    CHECK(load_file_env("spill = peer,host\n"
                        "block_size = 256M\n"
                        "headroom = 37.5%\n"
                        "cache_limit = 0:8G,3:12.5%,5:1536M\n"
                        "device_limit = 1:none,2:1G\n"
                        "host_limit = 100000\n"
                        "promote_interval = 2s\n"
                        "stats = /tmp/s.json\n"
                        "[rule big]\nsize = 1536M-\nplace = host\n"
                        "[rule t]\ntag = kv\ndevice = 2\nsize = -4K\nplace = interleave 3,1\n"
                        "[rule d]\nplace = device 7\n",
                        "GVM_LOG=debug", "GVM_POOL_LIMIT=3%") == 0);
    if (err[0]) fprintf(stderr, "  %s\n", err);
    struct gvm_config a = cfg;
    char first[sizeof dump_buf];
    snprintf(first, sizeof first, "%s", dump(&a));
    CHECK(strstr(first, "\nspill = peer,host  # ") != NULL);
    CHECK(strstr(first, "\nlog = debug  # GVM_LOG\n") != NULL);
    CHECK(strstr(first, "\nblock_size = 256M  # ") != NULL);
    CHECK(strstr(first, ".conf:2\n") != NULL);
    CHECK(strstr(first, "\nsmall_max = 1M  # default\n") != NULL);
    CHECK(strstr(first, "\nheadroom = 37.5%") != NULL);
    CHECK(strstr(first, "\ncache_limit = 0:8G,3:12.5%,5:1536M  #") != NULL);
    CHECK(strstr(first, "\ndevice_limit = 1:none,2:1G  #") != NULL);
    CHECK(strstr(first, "\nhost_limit = 100000  #") != NULL);
    CHECK(strstr(first, "\nhost_pool = 4G  # default\n") != NULL);
    CHECK(strstr(first, "\npool_limit = 3%  # GVM_POOL_LIMIT\n") != NULL);
    CHECK(strstr(first, "\npromote_interval = 2000ms") != NULL);
    CHECK(strstr(first, "\n# config = ") != NULL);
    CHECK(strstr(first, "\nsize = -4K\ntag = kv\ndevice = 2\nplace = interleave 3,1\n") != NULL);
    CHECK(strstr(first, "\nplace = device 7\n") != NULL);

    /* the dump reads back to the same configuration */
    struct gvm_config b;
    gvm_config_defaults(&b);
    int rc = gvm_config_parse_text(&b, first, "dump", err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s\n", err);
    char second[sizeof dump_buf];
    snprintf(second, sizeof second, "%s", dump(&b));
    strip_comments(first);
    strip_comments(second);
    CHECK_STR(second, first);
    CHECK(b.nrules == a.nrules);
    for (int i = 0; i < a.nrules && i < b.nrules; i++) {
        CHECK_STR(b.rules[i].name, a.rules[i].name);
        CHECK(b.rules[i].size_min == a.rules[i].size_min && b.rules[i].size_max == a.rules[i].size_max);
        CHECK(b.rules[i].device == a.rules[i].device && b.rules[i].place == a.rules[i].place);
    }
    CHECK(b.headroom == a.headroom);

    /* the defaults, dumped, read back too */
    gvm_config_defaults(&a);
    snprintf(first, sizeof first, "%s", dump(&a));
    gvm_config_defaults(&b);
    CHECK(gvm_config_parse_text(&b, first, "dump", err, sizeof err) == 0);
    snprintf(second, sizeof second, "%s", dump(&b));
    strip_comments(first);
    strip_comments(second);
    CHECK_STR(second, first);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_docs(void)
{
    static char buf[64 * 1024];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    gvm_config_print_help(f);
    fclose(f);
    for (int i = 0; i < GVM_OPT_COUNT; i++) {
        char env[64], key[80];
        snprintf(env, sizeof env, "GVM_");
        for (const char *p = gvm_options[i].name; *p; p++) {
            size_t l = strlen(env);
            env[l] = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
            env[l + 1] = 0;
        }
        CHECK(strstr(buf, env) != NULL);
        snprintf(key, sizeof key, "file key: %s;", gvm_options[i].name);
        CHECK(strstr(buf, key) != NULL);
        CHECK(strstr(buf, gvm_options[i].doc) != NULL);
    }
    CHECK(strstr(buf, "GVM_HOST_ACCESS\n    file key: host_access; default: lazy\n"
                      "    host_access: eager|lazy|off\n") != NULL);
    CHECK(strstr(buf, "GVM_HOST_LIMIT\n    file key: host_limit; default: none\n") != NULL);
    CHECK(strstr(buf, "[rule NAME]") != NULL);
    /* Which options gvmctl set may change comes from the table, and shows. */
    int live = 0;
    for (int i = 0; i < GVM_OPT_COUNT; i++) live += gvm_options[i].live;
    CHECK(live >= 8 && count(buf, "    live: gvmctl set PID ") == live);
    CHECK(strstr(buf, "(none: the device's capacity)\n    live: gvmctl set PID device_limit=VALUE") != NULL);
    CHECK(gvm_options[GVM_OPT_device_limit].live && gvm_options[GVM_OPT_spill].live &&
          !gvm_options[GVM_OPT_block_size].live);

    f = fmemopen(buf, sizeof buf, "w");
    gvm_config_print_markdown(f);
    fclose(f);
    CHECK(count(buf, "| `GVM_") == GVM_OPT_COUNT);
    CHECK(strstr(buf, "| `GVM_BLOCK_SIZE` | `block_size` | size | `64M` |  |") != NULL);
    CHECK(strstr(buf, "| `GVM_DEVICE_LIMIT` | `device_limit` | size_pct_dev | `none` | yes |") != NULL);
    CHECK(strstr(buf, "| `GVM_LOG` | `log` | error\\|warn\\|info\\|debug | `warn` |") != NULL);
    CHECK(strstr(buf, "| `GVM_CONFIG` | (environment only) |") != NULL);
}

/* Run argv with exactly envp; stdout and stderr into files read back. */
static int run_tool(char *const argv[], char *const envp[], char *out, size_t outn, char *errb,
                    size_t errn)
{
    char opath[300], epath[300];
    snprintf(opath, sizeof opath, "%s/tool.out", tmpdir);
    snprintf(epath, sizeof epath, "%s/tool.err", tmpdir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char *bufs[2] = {out, errb};
    size_t ns[2] = {outn, errn};
    const char *paths[2] = {opath, epath};
    for (int i = 0; i < 2; i++) {
        bufs[i][0] = 0;
        FILE *f = fopen(paths[i], "r");
        if (!f) continue;
        size_t n = fread(bufs[i], 1, ns[i] - 1, f);
        bufs[i][n] = 0;
        fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_tool(const char *tool)
{
    static char out[64 * 1024], errb[4096];
    char *env_bad[] = {"PATH=/usr/bin", "GVM_SPIL=host", NULL};
    char *env_none[] = {"PATH=/usr/bin", NULL};
    char *env_spill[] = {"GVM_SPILL=peer", "GVM_TEST_ANYTHING=1", NULL};

    char *check[] = {(char *)tool, "--check", NULL};
    CHECK(run_tool(check, env_bad, out, sizeof out, errb, sizeof errb) == 1);
    CHECK_STR(errb, "gvmshim: GVM_SPIL: unknown option (did you mean GVM_SPILL?)\n");
    CHECK(run_tool(check, env_none, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(strstr(out, "\nspill = off  # default\n") != NULL);
    CHECK_STR(errb, "");
    CHECK(run_tool(check, env_spill, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(strstr(out, "\nspill = peer  # GVM_SPILL\n") != NULL);

    const char *good = write_file("tool-good.conf", "spill = host\n[rule r]\nsize=2G-\nplace=host\n");
    char *check_good[] = {(char *)tool, "--check", (char *)good, NULL};
    CHECK(run_tool(check_good, env_none, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(strstr(out, "\nspill = host  # ") != NULL);
    CHECK(strstr(out, "[rule r]") != NULL);
    /* the environment still overrides the file */
    CHECK(run_tool(check_good, env_spill, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(strstr(out, "\nspill = peer  # GVM_SPILL\n") != NULL);

    const char *bad = write_file("tool-bad.conf", "log = info\nblock_size = 3M\n");
    char *check_bad[] = {(char *)tool, "--check", (char *)bad, NULL};
    CHECK(run_tool(check_bad, env_none, out, sizeof out, errb, sizeof errb) == 1);
    char want[512];
    snprintf(want, sizeof want,
             "gvmshim: %s:2: block_size = 3M: must be a power-of-two multiple of 2M between 2M "
             "and 1G\n", bad);
    CHECK_STR(errb, want);
    CHECK_STR(out, "");

    char *check_missing[] = {(char *)tool, "--check", "/nope.conf", NULL};
    CHECK(run_tool(check_missing, env_none, out, sizeof out, errb, sizeof errb) == 1);
    CHECK_STR(errb, "gvmshim: /nope.conf: cannot open: No such file or directory\n");
    char *env_missing[] = {"GVM_CONFIG=/nope.conf", NULL};
    CHECK(run_tool(check, env_missing, out, sizeof out, errb, sizeof errb) == 1);
    CHECK_STR(errb, "gvmshim: GVM_CONFIG=/nope.conf: cannot open: No such file or directory\n");

    char *help[] = {(char *)tool, "--help-config", NULL};
    CHECK(run_tool(help, env_bad, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(strstr(out, "GVM_PROMOTE_INTERVAL") != NULL);
    char *md[] = {(char *)tool, "--markdown", NULL};
    CHECK(run_tool(md, env_none, out, sizeof out, errb, sizeof errb) == 0);
    CHECK(count(out, "| `GVM_") == GVM_OPT_COUNT);
    char *usage[] = {(char *)tool, "--bogus", NULL};
    CHECK(run_tool(usage, env_none, out, sizeof out, errb, sizeof errb) == 2);
    CHECK(strstr(errb, "usage: gvm-config") != NULL);
    char *none[] = {(char *)tool, NULL};
    CHECK(run_tool(none, env_none, out, sizeof out, errb, sizeof errb) == 2);
    char *extra[] = {(char *)tool, "--check", "a", "b", NULL};
    CHECK(run_tool(extra, env_none, out, sizeof out, errb, sizeof errb) == 2);
}

/* A GPU-sharing layer's limit (HAMi, KAI's hamicore): CUDA_DEVICE_MEMORY_LIMIT
 * for every device, CUDA_DEVICE_MEMORY_LIMIT_<i> for one, in MiB with an m
 * suffix as the device plugins write it; an explicit device_limit wins. */
static void test_cluster_limit(void)
{
    ENV_OK("CUDA_DEVICE_MEMORY_LIMIT", "8192m");
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == 8 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 5, 80 * GIB) == 8 * GIB);
    CHECK(cfg.origin[GVM_OPT_device_limit] == GVM_ORIGIN_CLUSTER);
    CHECK(strstr(dump(&cfg), "device_limit = 8G  # CUDA_DEVICE_MEMORY_LIMIT") != NULL);

    const char *per[] = {"CUDA_DEVICE_MEMORY_LIMIT_1=2g", "CUDA_DEVICE_MEMORY_LIMIT=4096m",
                         "CUDA_DEVICE_MEMORY_LIMIT_3=0", NULL};
    CHECK(load_envv(per) == 0);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == 4 * GIB);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 1, 80 * GIB) == 2 * GIB);   /* its own wins */
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 3, 80 * GIB) == SIZE_MAX);  /* 0: none */

    ENV_OK("CUDA_DEVICE_MEMORY_LIMIT", "1073741824");                        /* bytes */
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == GIB);

    const char *explicit_wins[] = {"GVM_DEVICE_LIMIT=1G", "CUDA_DEVICE_MEMORY_LIMIT=8192m", NULL};
    CHECK(load_envv(explicit_wins) == 0);
    CHECK(gvm_cfg_device_value(&cfg.device_limit, 0, 80 * GIB) == GIB);
    CHECK(cfg.origin[GVM_OPT_device_limit] == GVM_ORIGIN_ENV);

    const char *other_names[] = {"CUDA_DEVICE_MEMORY_LIMIT_X=1g", "CUDA_DEVICE_MEMORY_LIMITS=1g",
                                 "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x", NULL};
    CHECK(load_envv(other_names) == 0);
    CHECK(cfg.origin[GVM_OPT_device_limit] == GVM_ORIGIN_DEFAULT);

    ENV_ERR("CUDA_DEVICE_MEMORY_LIMIT", "8 GB",
            "CUDA_DEVICE_MEMORY_LIMIT='8 GB': expected a size in bytes or with a k, m or g suffix (e.g. 8192m)");
    ENV_ERR("CUDA_DEVICE_MEMORY_LIMIT_0", "-1m",
            "CUDA_DEVICE_MEMORY_LIMIT_0='-1m': expected a size in bytes or with a k, m or g suffix (e.g. 8192m)");
    ENV_ERR("CUDA_DEVICE_MEMORY_LIMIT", "99999999999999999999g",
            "CUDA_DEVICE_MEMORY_LIMIT='99999999999999999999g': expected a size in bytes or with a k, m or g "
            "suffix (e.g. 8192m)");
}

int main(int argc, char **argv)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_defaults();
    test_bool();
    test_enums();
    test_sizes();
    test_ratio();
    test_per_device();
    test_spill();
    test_millis();
    test_strings();
    test_env_names();
    test_cluster_limit();
    test_file_basics();
    test_file_sources();
    test_rules();
    test_dump_roundtrip();
    test_docs();
    if (argc > 1)
        test_tool(argv[1]);
    else
        fprintf(stderr, "no gvm-config path given: tool tests skipped\n");

    for (int i = 0; i < nfiles; i++) unlink(files[i]);
    char path[300];
    snprintf(path, sizeof path, "%s/tool.out", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tool.err", tmpdir);
    unlink(path);
    if (rmdir(tmpdir)) fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}
