/* Unit tests for fd helpers: close_fds_from keeps exactly what it is told;
 * parked fds stay open (a pipe keeps its data and its writer) and come back
 * in order. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <errno.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util/fdpark.h"
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

static int open_fds(void)
{
        int n = 0;
        for (int fd = 0; fd < 1024; fd++)
                n += fd_open(fd);
        return n;
}

TEST(parked_fds_stay_open_and_come_back_in_order)
{
        int p[2], q[2];
        CHECK(pipe2(p, O_CLOEXEC) == 0 && pipe2(q, O_CLOEXEC) == 0);
        int before = open_fds();
        int a = p[0], none = -1, b = q[0];
        int *const fds[] = {&a, &none, &b};
        int park = fd_park(fds, 3);
        CHECK(park >= 0);
        CHECK(a == -1 && none == -1 && b == -1);
        CHECK(open_fds() == before - 1); /* two fds held by one */
        /* The readers are parked, not closed: writers see no EPIPE. */
        CHECK(write(p[1], "xy", 2) == 2);
        CHECK(write(q[1], "z", 1) == 1);
        CHECK(fd_unpark(&park, fds, 3) == 0);
        CHECK(park == -1 && none == -1 && a >= 0 && b >= 0);
        CHECK(fcntl(a, F_GETFD) & FD_CLOEXEC);
        char buf[4] = {0};
        CHECK(read(a, buf, sizeof(buf)) == 2 && buf[0] == 'x' && buf[1] == 'y');
        CHECK(read(b, buf, sizeof(buf)) == 1 && buf[0] == 'z');
        CHECK(open_fds() == before);
        close(a), close(b), close(p[1]), close(q[1]);
}

TEST(closing_a_park_closes_what_it_holds)
{
        int p[2];
        CHECK(pipe2(p, O_CLOEXEC) == 0);
        int r = p[0];
        int *const fds[] = {&r};
        int park = fd_park(fds, 1);
        CHECK(park >= 0);
        close(park);
        /* The only reader is gone with the park: the writer sees EPIPE. */
        signal(SIGPIPE, SIG_IGN);
        CHECK(write(p[1], "x", 1) < 0 && errno == EPIPE);
        close(p[1]);
        int bad = -1;
        int *const none[] = {&r};
        CHECK(fd_unpark(&bad, none, 1) == -EBADF && r == -1);
}

RUN_TESTS(T(close_fds_keeps_listed_fds_only), T(read_write_file_roundtrip),
          T(parked_fds_stay_open_and_come_back_in_order), T(closing_a_park_closes_what_it_holds))
