/* File-descriptor helpers; see fdutil.h. Async-signal-safe where the
 * sandbox child uses them (no malloc, no stdio). */
#include "fdutil.h"

#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPENAT2_TRIES 16 /* EAGAIN: a rename raced with ".." resolution */

int write_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

static ssize_t write_some(int fd, const char *p, size_t len, bool *socket)
{
        if (*socket) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n >= 0 || errno != ENOTSOCK)
                        return n;
                *socket = false;
        }
        return write(fd, p, len);
}

int write_all_until(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
        const char *p = buf;
        bool socket = true;
        while (len > 0) {
                ssize_t n = write_some(fd, p, len, &socket);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno != EAGAIN)
                        return -errno;
                int wait = clock_poll_ms_until(deadline_ms);
                if (wait == 0)
                        return -ETIMEDOUT;
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                (void)poll(&pfd, 1, wait);
        }
        return 0;
}

ssize_t read_full(int fd, void *buf, size_t len)
{
        char *p = buf;
        size_t got = 0;
        while (got < len) {
                ssize_t n = read(fd, p + got, len - got);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

int write_file_at(int dirfd, const char *path, const char *content)
{
        int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        int r = write_all(fd, content, strlen(content));
        if (close(fd) < 0 && r == 0 && errno != EINTR)
                r = -errno;
        return r;
}

ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size)
{
        if (size == 0)
                return -EINVAL;
        int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        ssize_t n = read_full(fd, buf, size - 1);
        close(fd);
        if (n < 0)
                return n;
        buf[n] = '\0';
        return n;
}

static bool fd_kept(int fd, const int *keep, size_t n_keep)
{
        for (size_t i = 0; i < n_keep; i++)
                if (keep[i] == fd)
                        return true;
        return false;
}

int close_fds_from(int lowfd, const int *keep, size_t n_keep)
{
        /* close_range() over the gaps between kept fds: one syscall per gap
         * instead of one per possible fd. */
        int start = lowfd;
        for (;;) {
                int next_keep = -1;
                for (size_t i = 0; i < n_keep; i++)
                        if (keep[i] >= start && (next_keep < 0 || keep[i] < next_keep))
                                next_keep = keep[i];
                unsigned int end = next_keep < 0 ? ~0U : (unsigned int)next_keep - 1;
                if (next_keep != start && syscall(SYS_close_range, (unsigned int)start, end, 0) < 0)
                        return -errno;
                if (next_keep < 0)
                        return 0;
                start = next_keep + 1;
                while (fd_kept(start, keep, n_keep))
                        start++;
        }
}

int fd_set_cloexec(int fd, bool on)
{
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0)
                return -errno;
        flags = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC;
        return fcntl(fd, F_SETFD, flags) < 0 ? -errno : 0;
}

int fd_set_nonblock(int fd, bool on)
{
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0)
                return -errno;
        flags = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK;
        return fcntl(fd, F_SETFL, flags) < 0 ? -errno : 0;
}

void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

int openat2_retry(int dfd, const char *path, uint64_t flags, mode_t mode, uint64_t resolve)
{
        struct open_how how = {.flags = flags | O_CLOEXEC, .mode = mode, .resolve = resolve};
        for (int i = 0; i < OPENAT2_TRIES; i++) {
                long fd = syscall(SYS_openat2, dfd, path, &how, sizeof(how));
                if (fd >= 0)
                        return (int)fd;
                if (errno != EAGAIN && errno != EINTR)
                        return -errno;
        }
        return -EAGAIN;
}

ssize_t fd_send(int sock, const void *buf, size_t len, const int *fds, size_t n)
{
        if (n > FD_SEND_MAX)
                return -EINVAL;
        char control[CMSG_SPACE(sizeof(int) * FD_SEND_MAX)] = {0};
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (n > 0) {
                mh.msg_control = control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
        }
        ssize_t sent;
        do
                sent = sendmsg(sock, &mh, MSG_NOSIGNAL);
        while (sent < 0 && errno == EINTR);
        return sent < 0 ? -errno : sent;
}
