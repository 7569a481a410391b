/* Unit tests for fd helpers: close_fds_from keeps exactly what it is told. */
#include <fcntl.h>
#include <stdlib.h>
#include <errno.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util/fdutil.h"

static bool fd_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

TEST(close_fds_keeps_listed_fds_only)
{
        int a = open("/dev/null", O_RDONLY), b = open("/dev/null", O_RDONLY),
            c = open("/dev/null", O_RDONLY), d = dup2(a, 200);
        CHECK(a >= 3 && b > a && c > b && d == 200);
        pid_t pid = fork();
        if (pid == 0) {
                int keep[] = {c, 200};
                if (close_fds_from(3, keep, 2) < 0)
                        _exit(2);
                _exit(!fd_open(a) && !fd_open(b) && fd_open(c) && fd_open(200) && fd_open(1) ? 0
                                                                                             : 1);
        }
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(a), close(b), close(c), close(d);
}

TEST(read_write_file_roundtrip)
{
        char path[] = "/tmp/codecage-fdutil-XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        CHECK(write_file_at(AT_FDCWD, path, "hello") == 0);
        char buf[4];
        CHECK(read_file_at(AT_FDCWD, path, buf, sizeof(buf)) == 3);
        CHECK_STREQ(buf, "hel");
        CHECK(read_file_at(AT_FDCWD, "/nonexistent/x", buf, sizeof(buf)) == -ENOENT);
        unlink(path);
}

RUN_TESTS(T(close_fds_keeps_listed_fds_only), T(read_write_file_roundtrip))
