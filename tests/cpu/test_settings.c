/* Policy's reading of the configuration: core's settings for the devices
 * present, and the launch-tracking decision. No driver is needed: the
 * topology is a value. */
#include "harness.h"

#include "policy/derive.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void load(struct gvm_config *cfg, const char *text)
{
    char err[GVM_CFG_ERR_MAX];
    gvm_config_defaults(cfg);
    if (gvm_config_parse_text(cfg, text, "test", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

static struct gvm_topo two_devices(void)
{
    struct gvm_topo t;
    memset(&t, 0, sizeof t);
    t.ndev = 2;
    t.dev[0].total = 8 * GiB;
    t.dev[1].total = 16 * GiB;
    return t;
}

static void defaults_are_shares_of_each_device(void)
{
    static struct gvm_config cfg;
    load(&cfg, "");
    struct gvm_topo t = two_devices();
    struct gvm_settings s;
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.small_max, 1 * MiB);
    CHECK_EQ(s.block_size, 64 * MiB);
    CHECK(s.headroom == 1.0);
    CHECK_EQ(s.host_pool, 4 * GiB);
    CHECK_EQ(s.host_access, GVM_HOST_ACCESS_LAZY);
    CHECK_EQ(s.cache_limit[0], 8 * GiB / 10);
    CHECK_EQ(s.cache_limit[1], 16 * GiB / 10);
    CHECK_EQ(s.pool_limit[0], 8 * GiB / 20);
    CHECK_EQ(s.pool_limit[1], 16 * GiB / 20);
}

static void every_option_reaches_the_settings(void)
{
    static struct gvm_config cfg;
    load(&cfg, "small_max = 512K\nblock_size = 128M\nheadroom = 250%\nhost_pool = 2G\n"
               "host_access = eager\ncache_limit = 0:1G,1:50%\npool_limit = 1:0\n");
    struct gvm_topo t = two_devices();
    struct gvm_settings s;
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.small_max, 512 * 1024);
    CHECK_EQ(s.block_size, 128 * MiB);
    CHECK(s.headroom == 2.5);
    CHECK_EQ(s.host_pool, 2 * GiB);
    CHECK_EQ(s.host_access, GVM_HOST_ACCESS_EAGER);
    CHECK_EQ(s.cache_limit[0], 1 * GiB);
    CHECK_EQ(s.cache_limit[1], 8 * GiB);
    CHECK_EQ(s.pool_limit[0], 8 * GiB / 20);   /* unlisted: the option's default */
    CHECK_EQ(s.pool_limit[1], 0);
}

static void launches_are_tracked_when_spill_needs_them(void)
{
    static struct gvm_config cfg;
    load(&cfg, "");
    CHECK(!gvm_policy_tracks_launches(&cfg));
    load(&cfg, "spill = host\n");
    CHECK(gvm_policy_tracks_launches(&cfg));
    load(&cfg, "spill = peer,host\ntrack_launches = off\n");
    CHECK(!gvm_policy_tracks_launches(&cfg));
    load(&cfg, "track_launches = on\n");
    CHECK(gvm_policy_tracks_launches(&cfg));
}

/* Memory that will move keeps the block size; the host pool fills from the
 * start when the configuration shows host memory in play. */
static void pieces_and_prefill_follow_the_configuration(void)
{
    static struct gvm_config cfg;
    struct gvm_topo t = two_devices();
    struct gvm_settings s;
    load(&cfg, "");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.grow_block, 16 * GiB);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_AUTO);
    load(&cfg, "spill = peer\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.grow_block, 64 * MiB);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_AUTO);
    load(&cfg, "spill = host\ngrow_block = 1G\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.grow_block, 64 * MiB);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_ON);
    load(&cfg, "grow_block = 1G\nhost_pool = 16G\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.grow_block, 1 * GiB);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_ON);
    load(&cfg, "host_pool = 0\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_AUTO);
    load(&cfg, "[rule big]\nsize = 1G-\nplace = host\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_ON);
    load(&cfg, "spill = host\nhost_prefill = off\n");
    gvm_policy_settings(&cfg, &t, &s);
    CHECK_EQ(s.host_prefill, GVM_HOST_PREFILL_OFF);
    char err[GVM_CFG_ERR_MAX];
    const char *bad[] = {"3M", "1M", "128G", "0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gvm_config_defaults(&cfg);
        CHECK(gvm_config_set(&cfg, "grow_block", bad[i], err, sizeof err) != 0);
        CHECK(strstr(err, "power-of-two") != NULL);
    }
    CHECK_EQ(gvm_config_set(&cfg, "grow_block", "64G", err, sizeof err), 0);
    CHECK(gvm_config_set(&cfg, "host_prefill", "sometimes", err, sizeof err) != 0);
}

static const struct test_case cases[] = {
    TEST_ENTRY(defaults_are_shares_of_each_device)
    TEST_ENTRY(every_option_reaches_the_settings)
    TEST_ENTRY(launches_are_tracked_when_spill_needs_them)
    TEST_ENTRY(pieces_and_prefill_follow_the_configuration)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
