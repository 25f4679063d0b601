/* The configuration against hostile input: a privileged process ignores its
 * environment (simulated, and for real when the test may make a setuid
 * copy of gvm-config, whose path is argv[1]), and the config file must be a
 * regular text file of bounded size and line length. */
#define _GNU_SOURCE
#define CHECK_CONTINUE
#include "../check.h"

#include "policy/config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct gvm_config cfg, defaults;
static char err[GVM_CFG_ERR_MAX];
static char dir[] = "/tmp/gvm-hardening-XXXXXX";
static char secret[256];   /* a file a config error must never show */

static void write_bytes(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
        perror(path);
        exit(2);
    }
    close(fd);
}

/* Loads with GVM_CONFIG=path, failing the test if it takes more than 5 s. */
static int load_config_file(const char *path)
{
    char var[512];
    snprintf(var, sizeof var, "GVM_CONFIG=%s", path);
    char *env[] = {var, NULL};
    err[0] = 0;
    alarm(5);
    int rc = gvm_config_load_as(&cfg, env, NULL, false, err, sizeof err);
    alarm(0);
    return rc;
}

/* ---- a privileged process ----------------------------------------------- */

static void privileged_process_ignores_the_environment(void)
{
    char conf[300];
    snprintf(conf, sizeof conf, "GVM_CONFIG=%s", secret);
    char *env[] = {"PATH=/usr/bin", conf, "GVM_LIBCUDA=/tmp/evil.so", "GVM_STATS=/etc/passwd",
                   "GVM_BLOCK_SIZE=3M", "GVM_NO_SUCH_OPTION=1", NULL};
    /* Unprivileged, the file is read, and its first line shows in the error. */
    CHECK(gvm_config_load_as(&cfg, env, NULL, false, err, sizeof err) == -1);
    CHECK(strstr(err, "root:secret") != NULL);
    /* Privileged: defaults, nothing read, nothing shown, one flag for the warning. */
    err[0] = 0;
    CHECK(gvm_config_load_as(&cfg, env, NULL, true, err, sizeof err) == 0);
    CHECK_STR(err, "");
    CHECK(cfg.env_ignored);
    cfg.env_ignored = false;
    CHECK(memcmp(&cfg, &defaults, sizeof cfg) == 0);
    /* A file the program names is not read either. */
    CHECK(gvm_config_load_as(&cfg, env, secret, true, err, sizeof err) == 0);
    CHECK(cfg.file[0] == 0 && cfg.nrules == 0);
    /* Without GVM_* variables there is nothing to warn about. */
    char *plain[] = {"PATH=/usr/bin", "GVM_TEST_X=1", "GVM_ROOT=/opt/gvm", NULL};
    CHECK(gvm_config_load_as(&cfg, plain, NULL, true, err, sizeof err) == 0);
    CHECK(!cfg.env_ignored);
}

static void privileged_dump_says_the_environment_was_ignored(void)
{
    char *env[] = {"GVM_SPILL=host", NULL};
    CHECK(gvm_config_load_as(&cfg, env, NULL, true, err, sizeof err) == 0);
    char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    gvm_config_dump(&cfg, f);
    fclose(f);
    CHECK(strstr(buf, "\n# GVM_* environment ignored: the process is privileged") != NULL);
    CHECK(strstr(buf, "\nspill = off  # default\n") != NULL);
}

/* Runs prog with args and env; its stdout and stderr into out. */
static int run(const char *prog, char *const argv[], char *const env[], char *out, size_t outlen)
{
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execve(prog, argv, env);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < outlen && (r = read(fds[0], out + n, outlen - n - 1)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A copy of path in dir, owned by nobody, setuid. NULL when it cannot be made. */
static const char *setuid_copy(const char *path, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", dir, name);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, buf);
    if (system(cmd) != 0) return NULL;
    if (chown(buf, 65534, 65534) || chmod(buf, 04755)) return NULL;
    return buf;
}

/* The real thing: gvm-config made setuid (as root, a copy owned by nobody:
 * the kernel then marks the process AT_SECURE). Skipped, with a note, where
 * the test cannot make such a copy or the file system ignores setuid. */
static void setuid_tool_ignores_the_environment(const char *self, const char *tool)
{
    char probe_path[512], tool_path[512], out[16384];
    if (geteuid() != 0 || !setuid_copy(self, "probe", probe_path, sizeof probe_path) ||
        !setuid_copy(tool, "gvm-config", tool_path, sizeof tool_path)) {
        printf("note: not root or cannot make a setuid copy: the real setuid run is skipped\n");
        return;
    }
    char *probe_argv[] = {"probe", "--at-secure", NULL};
    char *no_env[] = {NULL};
    if (run(probe_path, probe_argv, no_env, out, sizeof out) != 0 || strcmp(out, "1\n") != 0) {
        printf("note: a setuid copy did not run AT_SECURE (a nosuid mount, or a sanitizer "
               "runtime that refuses setuid): the real setuid run is skipped\n");
        return;
    }
    char conf[300];
    snprintf(conf, sizeof conf, "GVM_CONFIG=%s", secret);
    char *env[] = {conf, "GVM_BLOCK_SIZE=3M", "GVM_SPILL=host", NULL};
    char *argv[] = {"gvm-config", "--check", NULL};
    CHECK(run(tool_path, argv, env, out, sizeof out) == 0);
    CHECK(strstr(out, "root:secret") == NULL);
    CHECK(strstr(out, "# GVM_* environment ignored: the process is privileged") != NULL);
    CHECK(strstr(out, "\nblock_size = 64M  # default\n") != NULL);
    CHECK(strstr(out, "\nspill = off  # default\n") != NULL);
    /* The same copy, not privileged (run as its owner): the environment counts. */
    if (chmod(tool_path, 0755) == 0) {
        CHECK(run(tool_path, argv, env, out, sizeof out) == 1);
        CHECK(strstr(out, "root:secret") != NULL);
    }
}

/* ---- the file ------------------------------------------------------------- */

static void device_fifo_and_directory_are_refused_at_once(void)
{
    CHECK(load_config_file("/dev/zero") == -1);
    CHECK_STR(err, "GVM_CONFIG=/dev/zero: not a regular file (a character device)");
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(load_config_file(fifo) == -1);
    char want[400];
    snprintf(want, sizeof want, "GVM_CONFIG=%s: not a regular file (a FIFO)", fifo);
    CHECK_STR(err, want);
    CHECK(load_config_file(dir) == -1);
    snprintf(want, sizeof want, "GVM_CONFIG=%s: not a regular file (a directory)", dir);
    CHECK_STR(err, want);
}

static void oversize_file_is_refused(void)
{
    size_t max = (size_t)1 << 20;
    char *text = malloc(max + 1);
    /* Short comment lines: only the size is wrong. */
    for (size_t i = 0; i < max + 1; i++) text[i] = i % 64 == 63 ? '\n' : '#';
    char path[300], want[400];
    snprintf(path, sizeof path, "%s/big.conf", dir);
    write_bytes(path, text, max);
    CHECK(load_config_file(path) == 0);   /* exactly 1 MiB still reads */
    write_bytes(path, text, max + 1);
    CHECK(load_config_file(path) == -1);
    snprintf(want, sizeof want, "GVM_CONFIG=%s: larger than 1 MiB: not a configuration file",
             path);
    CHECK_STR(err, want);
    free(text);
}

static void nul_byte_is_reported_with_its_line(void)
{
    static const char text[] = "spill = host\n# fine\nblock_size = 128M\0 # hidden\nlog = info\n";
    char path[300], want[400];
    snprintf(path, sizeof path, "%s/nul.conf", dir);
    write_bytes(path, text, sizeof text - 1);
    CHECK(load_config_file(path) == -1);
    snprintf(want, sizeof want, "%s:3: a NUL byte: the file is not text", path);
    CHECK_STR(err, want);
    /* the same through the parser of bytes every file goes through */
    CHECK(gvm_config_load_as(&cfg, (char *[]){NULL}, path, false, err, sizeof err) == -1);
    CHECK_STR(err, want);
}

static void long_line_is_refused_with_its_line(void)
{
    size_t n = 5000;
    char *text = malloc(n + 32);
    strcpy(text, "log = info\n# ");
    size_t len = strlen(text);
    memset(text + len, 'x', n);
    text[len + n] = '\n';
    char path[300], want[400];
    snprintf(path, sizeof path, "%s/long.conf", dir);
    write_bytes(path, text, len + n + 1);
    CHECK(load_config_file(path) == -1);
    snprintf(want, sizeof want, "%s:2: line longer than 4350 characters", path);
    CHECK_STR(err, want);
    free(text);
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) perror(cmd);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--at-secure")) {
        printf("%lu\n", getauxval(AT_SECURE));
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test-hardening PATH-TO-gvm-config\n");
        return 2;
    }
    if (!mkdtemp(dir) || chmod(dir, 0755)) {
        perror(dir);
        return 2;
    }
    atexit(cleanup);
    snprintf(secret, sizeof secret, "%s/shadow", dir);
    write_bytes(secret, "root:secret:19000:0:99999:7:::\n", 31);
    gvm_config_defaults(&defaults);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;

    privileged_process_ignores_the_environment();
    privileged_dump_says_the_environment_was_ignored();
    setuid_tool_ignores_the_environment(self, argv[1]);
    device_fifo_and_directory_are_refused_at_once();
    oversize_file_is_refused();
    nul_byte_is_reported_with_its_line();
    long_line_is_refused_with_its_line();
    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}
