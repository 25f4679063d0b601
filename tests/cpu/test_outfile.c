/* The files gvmshim writes (the stats file): created private, never through a symlink, and a %p name
 * (predictable) always a new file. */
#include "harness.h"

#include "preload/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static char dir[] = "/tmp/gvm-outfile-test-XXXXXX";

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) perror(cmd);
}

/* Each case (a process of its own) gets a directory, removed when it ends
 * (a failed check exits, so atexit; a passing case calls done()). */
static void make_dir(void)
{
    CHECK(mkdtemp(dir) != NULL);
    atexit(remove_dir);
}

static void done(void) { remove_dir(); }

static void put(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);
}

static void expect_content(const char *path, const char *want)
{
    char buf[256] = "";
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHECK(n >= 0);
    buf[n > 0 ? n : 0] = 0;
    CHECK(!strcmp(buf, want));
}

static void new_file_is_private(void)
{
    make_dir();
    char pattern[128], path[256];
    snprintf(pattern, sizeof pattern, "%s/stats.json", dir);
    int fd = gvm_outfile_open(pattern, path, sizeof path);
    CHECK(fd >= 0);
    CHECK(!strcmp(path, pattern));
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    /* a fixed name is the user's own file: written over */
    put(path, "old stats");
    fd = gvm_outfile_open(pattern, path, sizeof path);
    CHECK(fd >= 0);
    close(fd);
    expect_content(path, "");
    done();
}

static void symlink_is_not_followed_nor_clobbered(void)
{
    make_dir();
    char victim[128], link[128], path[256];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/stats.json", dir);
    put(victim, "precious");
    CHECK(symlink(victim, link) == 0);
    errno = 0;
    CHECK_EQ(gvm_outfile_open(link, path, sizeof path), -1);
    CHECK_EQ(errno, ELOOP);
    CHECK(strstr(gvm_outfile_why(errno), "symbolic link"));
    expect_content(victim, "precious");
    /* a dangling one does not create its target either */
    char ghost[128];
    snprintf(ghost, sizeof ghost, "%s/ghost", dir);
    unlink(link);
    CHECK(symlink(ghost, link) == 0);
    CHECK_EQ(gvm_outfile_open(link, path, sizeof path), -1);
    CHECK(access(ghost, F_OK) == -1);
    done();
}

static void pid_name_is_always_a_new_file(void)
{
    make_dir();
    char pattern[128], path[256], mine[256];
    snprintf(pattern, sizeof pattern, "%s/stats-%%p.json", dir);
    snprintf(mine, sizeof mine, "%s/stats-%ld.json", dir, (long)getpid());
    put(mine, "placed by someone");
    errno = 0;
    CHECK_EQ(gvm_outfile_open(pattern, path, sizeof path), -1);
    CHECK_EQ(errno, EEXIST);
    CHECK(!strcmp(path, mine));
    expect_content(mine, "placed by someone");
    unlink(mine);
    int fd = gvm_outfile_open(pattern, path, sizeof path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(!strcmp(path, mine));
    done();
}

static const struct test_case cases[] = {
    TEST_ENTRY(new_file_is_private)
    TEST_ENTRY(symlink_is_not_followed_nor_clobbered)
    TEST_ENTRY(pid_name_is_always_a_new_file)
};

int main(int argc, char **argv) { return run_cases(cases, sizeof cases / sizeof *cases, argc, argv); }
