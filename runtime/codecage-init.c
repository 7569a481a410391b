/* codecage-init: pid 1 of a long-lived sandbox.
 *
 * The server's launch pipeline (src/core/sandbox.c) applies every
 * containment step, then execs this program from a sealed, execute-only
 * memfd: nothing inside the sandbox can rewrite it, read it, or trace it
 * (an unreadable executable makes the process non-dumpable, and we say so
 * again below). It starts with a fresh memory image, so it holds nothing of
 * the server's.
 *
 * It serves requests from the server on fd BOX_CTL_FD (src/core/box_proto.h):
 * each EXEC becomes a child in its own session that waits for the server's
 * go (the server moves it into a cgroup of its own first), then execs the
 * program; its start and its end are reported on the exec's status pipe.
 * init reaps every process re-parented to it. When the server's end of the
 * control socket closes, init exits, and the kernel kills everything left
 * in the sandbox's pid namespace.
 *
 * In a sandbox a zygote forked (src/core/zygote.c), the zygote's child execs
 * us as `codecage-init PID` once it has forked the session driver: that
 * process (already our child) is reported on the status pipe at
 * BOX_ADOPTED_STATUS_FD as if it were an exec with id BOX_ADOPTED_EXEC_ID.
 *
 * Signals sent from inside the sandbox cannot reach it: pid 1 ignores every
 * signal it has no handler for, and it installs none (SIGCHLD is read from
 * a signalfd). Requests are bounded and checked; a bad one fails only
 * itself. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/box_proto.h"

struct exec_slot {
        bool used;
        uint32_t id;
        pid_t pid;
        int status_fd;
};

static struct exec_slot slots[BOX_EXECS_MAX];

/* One request as received: header, blob, and the fds that came with it. */
struct request {
        union {
                uint32_t kind;
                struct box_exec_request exec;
                struct box_signal_request sig;
                char bytes[sizeof(struct box_exec_request) + BOX_EXEC_BLOB_MAX];
        } msg;
        size_t len;
        int fds[BOX_FD_MAX];
        size_t n_fds;
};

static struct request req;
static char *exec_argv[BOX_EXEC_ARGS_MAX + 1];
static char *exec_envp[BOX_EXEC_ARGS_MAX + 1];

static void send_status(int fd, int kind, int value)
{
        struct box_status s = {.kind = kind, .value = value};
        (void)!write(fd, &s, sizeof(s));
}

static void close_request_fds(void)
{
        for (size_t i = 0; i < req.n_fds; i++)
                if (req.fds[i] >= 0)
                        close(req.fds[i]);
        req.n_fds = 0;
}

/* 1 with a request in req, 0 when the server closed the socket, -1 on a
 * message to ignore. */
static int receive_request(void)
{
        char control[CMSG_SPACE(sizeof(int) * BOX_FD_MAX)];
        struct iovec iov = {.iov_base = req.msg.bytes, .iov_len = sizeof(req.msg.bytes)};
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control,
                .msg_controllen = sizeof(control),
        };
        ssize_t n = recvmsg(BOX_CTL_FD, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN ? -1 : 0;
        if (n == 0)
                return 0;
        req.len = (size_t)n;
        req.n_fds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k && req.n_fds < BOX_FD_MAX; i++)
                        memcpy(&req.fds[req.n_fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                close_request_fds();
                return -1;
        }
        return 1;
}

/* Points exec_argv / exec_envp into the blob; returns the working
 * directory, or NULL when the blob does not hold exactly what the header
 * says. */
static const char *parse_exec_blob(void)
{
        const struct box_exec_request *h = &req.msg.exec;
        if (req.len < sizeof(*h) || h->blob_len != req.len - sizeof(*h) || h->argc < 1 ||
            h->argc > BOX_EXEC_ARGS_MAX || h->envc > BOX_EXEC_ARGS_MAX)
                return NULL;
        char *p = req.msg.bytes + sizeof(*h), *end = p + h->blob_len;
        uint32_t want = h->argc + h->envc + 1, got = 0;
        char *strings[2 * BOX_EXEC_ARGS_MAX + 1];
        while (p < end && got < want) {
                char *nul = memchr(p, '\0', (size_t)(end - p));
                if (!nul)
                        return NULL;
                strings[got++] = p;
                p = nul + 1;
        }
        if (got != want || p != end)
                return NULL;
        memcpy(exec_argv, strings, h->argc * sizeof(char *));
        exec_argv[h->argc] = NULL;
        memcpy(exec_envp, strings + h->argc, h->envc * sizeof(char *));
        exec_envp[h->envc] = NULL;
        return strings[want - 1];
}

static struct exec_slot *free_slot(void)
{
        for (size_t i = 0; i < BOX_EXECS_MAX; i++)
                if (!slots[i].used)
                        return &slots[i];
        return NULL;
}

static struct exec_slot *slot_by_id(uint32_t id)
{
        for (size_t i = 0; i < BOX_EXECS_MAX; i++)
                if (slots[i].used && slots[i].id == id)
                        return &slots[i];
        return NULL;
}

static const char *env_path(void)
{
        for (char **e = exec_envp; *e; e++)
                if (strncmp(*e, "PATH=", 5) == 0)
                        return *e + 5;
        return "/usr/local/bin:/usr/bin:/bin";
}

/* execve along the exec's own PATH; returns the errno worth reporting. */
static int exec_program(void)
{
        const char *file = exec_argv[0];
        if (strchr(file, '/')) {
                execve(file, exec_argv, exec_envp);
                return errno;
        }
        int saved = ENOENT;
        for (const char *p = env_path(); *p;) {
                const char *end = strchrnul(p, ':');
                char path[4096];
                int n = snprintf(path, sizeof(path), "%.*s/%s", (int)(end - p), p, file);
                if (n > 0 && (size_t)n < sizeof(path) && end > p) {
                        execve(path, exec_argv, exec_envp);
                        if (errno != ENOENT && errno != ENOTDIR)
                                saved = errno;
                }
                p = *end ? end + 1 : end;
        }
        return saved;
}

/* Moves fd to a number >= 3 so dup2() onto 0..2 cannot clobber another. */
static int lift_fd(int fd)
{
        return fd < 3 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd;
}

static _Noreturn void exec_child(const char *cwd)
{
        int status_fd = req.fds[BOX_FD_STATUS];
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = lift_fd(req.fds[BOX_FD_STDIN]), out = lift_fd(req.fds[BOX_FD_STDOUT]),
            err = lift_fd(req.fds[BOX_FD_STDERR]);
        /* The channel goes to fd 3, where our control socket is: the exec
         * must not have that anyway. Every received fd is above 3. */
        bool channel = req.n_fds == BOX_FD_MAX;
        if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
            dup2(err, 2) < 0 || (channel && dup2(req.fds[BOX_FD_CHANNEL], 3) < 0) || setsid() < 0) {
                send_status(status_fd, BOX_STATUS_SETUP_FAILED, errno);
                _exit(127);
        }
        /* The server moves us into our own cgroup, then says go. */
        char go;
        if (read(req.fds[BOX_FD_GO], &go, 1) != 1)
                _exit(127);
        if (chdir(cwd) < 0) {
                send_status(status_fd, BOX_STATUS_EXEC_FAILED, errno);
                _exit(127);
        }
        int e = exec_program();
        send_status(status_fd, BOX_STATUS_EXEC_FAILED, e);
        _exit(e == ENOENT ? 127 : 126);
}

static void start_exec(void)
{
        bool fds_ok = req.n_fds == BOX_FD_COUNT || req.n_fds == BOX_FD_MAX;
        int status_fd = fds_ok ? req.fds[BOX_FD_STATUS] : -1;
        const char *cwd = status_fd >= 0 ? parse_exec_blob() : NULL;
        struct exec_slot *slot = cwd ? free_slot() : NULL;
        if (!slot) {
                if (status_fd >= 0)
                        send_status(status_fd, BOX_STATUS_SETUP_FAILED, cwd ? EAGAIN : EINVAL);
                close_request_fds();
                return;
        }
        pid_t pid = fork();
        if (pid == 0)
                exec_child(cwd);
        if (pid < 0) {
                send_status(status_fd, BOX_STATUS_SETUP_FAILED, errno);
                close_request_fds();
                return;
        }
        *slot = (struct exec_slot){
                .used = true, .id = req.msg.exec.exec_id, .pid = pid, .status_fd = status_fd};
        send_status(status_fd, BOX_STATUS_STARTED, pid);
        req.fds[BOX_FD_STATUS] = -1; /* kept until the exec ends */
        close_request_fds();
}

static void signal_exec(void)
{
        close_request_fds();
        if (req.len != sizeof(req.msg.sig))
                return;
        struct exec_slot *slot = slot_by_id(req.msg.sig.exec_id);
        int sig = req.msg.sig.signal;
        if (slot && sig > 0 && sig < NSIG) {
                kill(-slot->pid, sig); /* its session's process group */
                kill(slot->pid, sig);
        }
}

static void reap_children(void)
{
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                for (size_t i = 0; i < BOX_EXECS_MAX; i++) {
                        if (!slots[i].used || slots[i].pid != pid)
                                continue;
                        send_status(slots[i].status_fd, BOX_STATUS_EXITED, status);
                        close(slots[i].status_fd);
                        slots[i].used = false;
                }
        }
}

static void drain_signalfd(int sfd)
{
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                ;
}

/* `codecage-init PID`: the session driver a zygote's child forked before
 * exec'ing us. Anything else on the command line is refused. */
static int adopt(int argc, char **argv)
{
        if (argc == 1)
                return 0;
        char *end;
        errno = 0;
        long pid = argc == 2 ? strtol(argv[1], &end, 10) : 0;
        if (errno || pid <= 1 || pid > 4194304 || *end)
                return -1;
        if (fcntl(BOX_ADOPTED_STATUS_FD, F_SETFD, FD_CLOEXEC) < 0)
                return -1;
        slots[0] = (struct exec_slot){.used = true,
                                      .id = BOX_ADOPTED_EXEC_ID,
                                      .pid = (pid_t)pid,
                                      .status_fd = BOX_ADOPTED_STATUS_FD};
        return 0;
}

int main(int argc, char **argv)
{
        /* Already non-dumpable (our executable is unreadable); said again
         * in case a kernel decides otherwise: nobody may ptrace or read us. */
        prctl(PR_SET_DUMPABLE, 0);
        prctl(PR_SET_NAME, "codecage-init"); /* not the memfd's name */
        if (fcntl(BOX_CTL_FD, F_SETFD, FD_CLOEXEC) < 0)
                return 125;
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0 || adopt(argc, argv) < 0)
                return 125;
        reap_children(); /* an adopted driver may have ended before the signalfd */
        for (;;) {
                struct pollfd p[2] = {{.fd = BOX_CTL_FD, .events = POLLIN},
                                      {.fd = sfd, .events = POLLIN}};
                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        return 125;
                if (p[1].revents) {
                        drain_signalfd(sfd);
                        reap_children();
                }
                if (!p[0].revents)
                        continue;
                int r = receive_request();
                if (r == 0)
                        _exit(0); /* the server is gone: the kernel ends the rest */
                if (r < 0)
                        continue;
                if (req.msg.kind == BOX_REQ_EXEC)
                        start_exec();
                else if (req.msg.kind == BOX_REQ_SIGNAL)
                        signal_exec();
                else
                        close_request_fds();
        }
}
