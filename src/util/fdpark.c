/* Parking fds in a socket's queue; see fdpark.h. */
#include "fdpark.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdutil.h"

_Static_assert(FD_PARK_MAX <= FD_SEND_MAX, "parked fds go in one fd_send()");

/* The message: which of the n slots were present, then those fds. */
struct park_note {
        uint32_t present; /* bit i: fds[i] was parked */
        uint32_t count;
};

int fd_park(int *const fds[], size_t n)
{
        if (n > FD_PARK_MAX)
                return -EINVAL;
        struct park_note note = {0};
        int sent[FD_PARK_MAX];
        for (size_t i = 0; i < n; i++)
                if (*fds[i] >= 0) {
                        note.present |= 1u << i;
                        sent[note.count++] = *fds[i];
                }
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        ssize_t r = fd_send(sv[0], &note, sizeof(note), sent, note.count);
        close(sv[0]);
        if (r != (ssize_t)sizeof(note)) {
                close(sv[1]);
                return r < 0 ? (int)r : -EIO;
        }
        for (size_t i = 0; i < n; i++)
                close_fd(fds[i]);
        return sv[1];
}

/* The fds of the SCM_RIGHTS message in mh, at most max; their count. */
static size_t received_fds(struct msghdr *mh, int *out, size_t max)
{
        size_t got = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (got < max)
                                out[got++] = fd;
                        else
                                close(fd);
                }
        }
        return got;
}

int fd_unpark(int *park, int *const fds[], size_t n)
{
        for (size_t i = 0; i < n; i++)
                close_fd(fds[i]);
        if (*park < 0)
                return -EBADF;
        struct park_note note = {0};
        char control[CMSG_SPACE(sizeof(int) * FD_PARK_MAX)];
        struct iovec iov = {.iov_base = &note, .iov_len = sizeof(note)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control,
                            .msg_controllen = sizeof(control)};
        ssize_t r;
        do
                r = recvmsg(*park, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        while (r < 0 && errno == EINTR);
        int e = r < 0 ? errno : EIO;
        close_fd(park);
        int got[FD_PARK_MAX];
        size_t k = r == (ssize_t)sizeof(note) ? received_fds(&mh, got, FD_PARK_MAX) : 0;
        bool ok = r == (ssize_t)sizeof(note) && !(mh.msg_flags & MSG_CTRUNC) && k == note.count &&
                  (note.present >> n) == 0 && (size_t)__builtin_popcount(note.present) == k;
        if (!ok) {
                for (size_t i = 0; i < k; i++)
                        close(got[i]);
                return -e;
        }
        for (size_t i = 0, j = 0; i < n; i++)
                if (note.present & (1u << i))
                        *fds[i] = got[j++];
        return 0;
}
