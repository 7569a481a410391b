/* The zygote's template loop and spawn, in C: runtime/python/codecage_zygote.py
 * loads this shared object (sent by the server as a sealed memfd) and calls
 * cz_serve() once, which serves the server's spawn requests
 * (src/core/zygote_proto.h) until the server closes the control socket.
 *
 * The loop runs no Python: after every fork each page the template writes is
 * copied while any child still shares it, so it only receives a request,
 * clones, writes the child's id maps and reaps, on its own stack.
 *
 * Each spawn clones the child (B) straight into fresh user, mount, ipc, uts
 * and pid namespaces. B never runs the template's Python again: every step
 * of docs/ARCHITECTURE.md's zygote fork (its cgroup, fds, ids, network
 * namespace, mounts, host name, loopback, cgroup namespace, limits, setsid,
 * rlimits, capabilities, no_new_privs, seccomp) is a system call made from
 * here, so B writes almost none of the template's pages. B then forks the
 * session driver (C) with the C library's own fork(), so that C is an
 * ordinary fork of a Python process: C applies what is its own (a session,
 * dumpable, RLIMIT_AS, its working directory) with system calls, so that
 * no Python writes the template's pages for it, and cz_serve() returns 0 in
 * C, which goes on in Python (codecage_zygote.py's run_driver()); and B
 * execs codecage-init, pid 1 of the sandbox.
 *
 * No C library: this object runs inside any image's Python, so it calls the
 * kernel itself (raw_syscall.h) and is linked with -nostdlib -z defs (a
 * stray memcpy or strlen fails the build, not a sandbox start). struct
 * cz_template is mirrored by ctypes in codecage_zygote.py. */
#include <asm/unistd.h>
#include <linux/capability.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/poll.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/signalfd.h>
#include <linux/sockios.h>
#include <linux/stat.h>
#include <linux/uio.h>
#include <stddef.h>
#include <stdint.h>

#include "core/zygote_proto.h"
#include "raw_syscall.h"

#define CZ_ABI 3

/* Protections the server's unsafe debug build switched off (zygote.c). */
#define CZ_NO_CAPS    1u
#define CZ_NO_SECCOMP 2u
#define CZ_NO_LIMITS  4u

/* What every child applies: the server's hello, read once by the template. */
struct cz_template {
        uint32_t uid, gid; /* the sandbox user, inside its namespace */
        uint32_t flags;    /* CZ_NO_* */
        uint32_t n_progs;
        const struct sock_fprog *progs; /* installed in this order */
        /* /proc entries: each list is NUL-terminated names, then an empty one. */
        const char *proc_masked, *proc_readonly, *proc_hidden;
        int (*fork)(void); /* the C library's, so the driver is a proper fork */
};

/* One spawn: the request's fds, then the pipe of the id maps and the
 * workspace when it has one; they become the child's 1..n_fds (FD_* below). */
struct cz_spawn {
        const int *fds;
        uint32_t n_fds;
        uint32_t workspace;
        const char *scratch_opts;
        const struct zygote_rlimit *rlimits;
        uint32_t n_rlimits;
        uint64_t sigmask; /* the template's before cz_serve(): B's and the driver's */
};

/* The child's fds: the request's, at zygote_proto.h's place plus one. */
enum {
        FD_OUT = ZYGOTE_FD_STDOUT + 1,
        FD_ERR = ZYGOTE_FD_STDERR + 1,
        FD_CHAN = ZYGOTE_FD_CHANNEL + 1,
        FD_SYNC = ZYGOTE_FD_SYNC + 1,
        FD_CTL = ZYGOTE_FD_CTL + 1,
        FD_STATUS = ZYGOTE_FD_STATUS + 1,
        FD_INIT = ZYGOTE_FD_INIT + 1,
        FD_ENV = ZYGOTE_FD_ENV + 1,
        FD_MAPPED = ZYGOTE_CHILD_FDS + 1,
        FD_WORKSPACE,
        FD_MAX = FD_WORKSPACE,
};
/* codecage-init's fds (src/core/box_proto.h): BOX_CTL_FD, BOX_ADOPTED_STATUS_FD. */
enum { INIT_CTL_FD = 3, INIT_STATUS_FD = 4, INIT_IMAGE_FD = 5 };

#define CLONE_NS_FLAGS  (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
#define PROC_FLAGS      (MS_NOSUID | MS_NODEV | MS_NOEXEC)
#define S_TYPE_MASK     0170000
#define S_TYPE_DIR      0040000
#define SIGCHLD_NR      17
#define SIG_BLOCK_NR    0
#define SIG_SETMASK_NR  2
#define WNOHANG_NR      1
#define SOL_SOCKET_NR   1
#define SCM_RIGHTS_NR   1
#define MSG_CTRUNC_NR   0x8
#define MSG_TRUNC_NR    0x20
#define MSG_CLOEXEC_NR  0x40000000 /* MSG_CMSG_CLOEXEC */
#define RLIMIT_AS_NR    9
#define AF_INET_NR      2
#define SOCK_DGRAM_NR   2
#define SOCK_CLOEXEC_NR 02000000
#define IFF_UP_FLAG     1
/* NOROOT, NO_SETUID_FIXUP and KEEP_CAPS off, each locked (as caps.c). */
#define SECUREBITS_LOCKED 0x2f

/* ---- small things a C library would have ---- */

static size_t cz_strlen(const char *s)
{
        size_t n = 0;
        while (s[n])
                n++;
        return n;
}

/* Appends s to buf (size bytes, always terminated); returns the new end. */
static char *append(char *pos, char *end, const char *s)
{
        while (*s && pos + 1 < end)
                *pos++ = *s++;
        *pos = '\0';
        return pos;
}

static char *append_uint(char *pos, char *end, unsigned long v)
{
        char digits[24];
        int n = 0;
        do
                digits[n++] = (char)('0' + v % 10);
        while ((v /= 10) && n < (int)sizeof(digits));
        while (n && pos + 1 < end)
                *pos++ = digits[--n];
        *pos = '\0';
        return pos;
}

/* The errors a launch step can meet, named as strerror(3) names them. */
static const struct {
        long code;
        const char *text;
} errno_texts[] = {
        {EPERM, "Operation not permitted"},   {ENOENT, "No such file or directory"},
        {EBADF, "Bad file descriptor"},       {EAGAIN, "Resource temporarily unavailable"},
        {ENOMEM, "Cannot allocate memory"},   {EACCES, "Permission denied"},
        {EBUSY, "Device or resource busy"},   {EEXIST, "File exists"},
        {ENODEV, "No such device"},           {ENOTDIR, "Not a directory"},
        {EINVAL, "Invalid argument"},         {EMFILE, "Too many open files"},
        {ENOSPC, "No space left on device"},  {EROFS, "Read-only file system"},
        {ENOSYS, "Function not implemented"},
};

static const char *errno_text(long e)
{
        for (size_t i = 0; i < sizeof(errno_texts) / sizeof(errno_texts[0]); i++)
                if (errno_texts[i].code == e)
                        return errno_texts[i].text;
        return NULL;
}

static __attribute__((noreturn)) void exit_now(int status)
{
        for (;;)
                raw_syscall1(__NR_exit_group, status);
}

/* A failed step: "e<step>: <error>" on the sync socket (the server puts it
 * in its error), then the end of B. */
static __attribute__((noreturn)) void fail(const char *step, long r)
{
        char msg[200], *end = msg + sizeof(msg);
        char *pos = append(msg, end, "e");
        pos = append(pos, end, step);
        pos = append(pos, end, ": ");
        const char *text = errno_text(-r);
        if (text) {
                pos = append(pos, end, text);
        } else {
                pos = append(pos, end, "errno ");
                pos = append_uint(pos, end, (unsigned long)-r);
        }
        raw_syscall3(__NR_write, FD_SYNC, msg, pos - msg);
        exit_now(125);
}

static void check(long r, const char *step)
{
        if (r < 0)
                fail(step, r);
}

static long sys_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                      const char *data)
{
        return raw_syscall5(__NR_mount, src, dst, type, flags, data);
}

/* The type bits of path's inode (following a last symlink or not), or 0. */
static unsigned path_type(const char *path, int follow)
{
        struct statx stx;
        int flags = follow ? 0 : AT_SYMLINK_NOFOLLOW;
        if (raw_syscall5(__NR_statx, AT_FDCWD, path, flags, STATX_TYPE, &stx) < 0)
                return 0;
        return stx.stx_mode & S_TYPE_MASK;
}

static long write_byte(int fd, char c)
{
        return raw_syscall3(__NR_write, fd, &c, 1);
}

/* ---- B's steps ---- */

/* The server reads our pid from this message's credentials, puts us in
 * our cgroup, then answers; it waits for "r" (or a failed step) after, and
 * checks that the "r" comes from us with the ids it chose. */
static void wait_for_cgroup(int sync)
{
        char c = 0;
        if (write_byte(sync, 'p') != 1 || raw_syscall3(__NR_read, sync, &c, 1) != 1 || c != 'c')
                exit_now(125); /* the server is gone or gave up on us */
}

/* fds become 1..n, stdin /dev/null; every other fd of the template closes. */
static void place_fds(const struct cz_spawn *s)
{
        int high[FD_MAX];
        long null = raw_syscall4(__NR_openat, AT_FDCWD, "/dev/null", O_RDONLY, 0);
        if (null >= 0) /* above the fds placed below, as they are */
                null = raw_syscall3(__NR_fcntl, null, F_DUPFD, 64);
        if (null < 0 || s->n_fds > FD_MAX)
                exit_now(125);
        for (uint32_t i = 0; i < s->n_fds; i++) {
                long fd = raw_syscall3(__NR_fcntl, s->fds[i], F_DUPFD, 64);
                if (fd < 0)
                        exit_now(125);
                high[i] = (int)fd;
        }
        for (uint32_t i = 0; i < s->n_fds; i++)
                if (raw_syscall3(__NR_dup3, high[i], i + 1, 0) < 0)
                        exit_now(125);
        if (raw_syscall3(__NR_dup3, null, 0, 0) < 0 ||
            raw_syscall3(__NR_close_range, s->n_fds + 1, ~0u, 0) < 0)
                exit_now(125);
}

/* Limits of the child's user namespace, as codecage's own launch sets them
 * (src/core/sandbox.c): opened through our own fresh /proc (a sysctl file
 * belongs to the user namespace that looks it up), written once our own
 * namespaces exist. */
static const struct {
        const char *path, *value;
} userns_limits[] = {
        {"/proc/sys/user/max_inotify_instances", "64"},
        {"/proc/sys/user/max_inotify_watches", "16384"},
        {"/proc/sys/user/max_user_namespaces", "0"},
};
#define N_USERNS_LIMITS (sizeof(userns_limits) / sizeof(userns_limits[0]))

static void open_userns_limits(const struct cz_template *t, int fds[N_USERNS_LIMITS])
{
        for (size_t i = 0; i < N_USERNS_LIMITS; i++) {
                fds[i] = -1;
                if (t->flags & CZ_NO_LIMITS)
                        continue;
                long fd = raw_syscall4(__NR_openat, AT_FDCWD, userns_limits[i].path,
                                       O_WRONLY | O_CLOEXEC, 0);
                if (fd == -ENOENT) /* a kernel without it */
                        continue;
                check(fd, "open user namespace limits");
                fds[i] = (int)fd;
        }
}

static void write_userns_limits(int fds[N_USERNS_LIMITS])
{
        for (size_t i = 0; i < N_USERNS_LIMITS; i++) {
                if (fds[i] < 0)
                        continue;
                const char *v = userns_limits[i].value;
                long n = raw_syscall3(__NR_write, fds[i], v, cz_strlen(v));
                check(n == (long)cz_strlen(v) ? 0 : (n < 0 ? n : -EIO), "user namespace limits");
                raw_syscall1(__NR_close, fds[i]);
        }
}

/* "/proc/" + name, in buf. */
static const char *proc_path(char *buf, size_t size, const char *name)
{
        append(append(buf, buf + size, "/proc/"), buf + size, name);
        return buf;
}

static void mask_proc(const struct cz_template *t)
{
        char p[256];
        for (const char *n = t->proc_masked; *n; n += cz_strlen(n) + 1)
                if (path_type(proc_path(p, sizeof(p), n), 0))
                        check(sys_mount("/dev/null", p, NULL, MS_BIND, NULL), "mask /proc entries");
        for (const char *n = t->proc_readonly; *n; n += cz_strlen(n) + 1) {
                if (path_type(proc_path(p, sizeof(p), n), 1) != S_TYPE_DIR)
                        continue;
                check(sys_mount(p, p, NULL, MS_BIND | MS_REC, NULL), "mask /proc entries");
                check(sys_mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, NULL),
                      "mask /proc entries");
        }
        /* One empty read-only tmpfs for them all, as rootfs.c does: each
         * superblock costs every memory cgroup of the machine a slot. */
        char first[256] = "";
        for (const char *n = t->proc_hidden; *n; n += cz_strlen(n) + 1) {
                if (path_type(proc_path(p, sizeof(p), n), 1) != S_TYPE_DIR)
                        continue;
                if (!first[0]) {
                        check(sys_mount("tmpfs", p, "tmpfs", MS_RDONLY | PROC_FLAGS,
                                        "size=0,mode=0555"),
                              "mask /proc entries");
                        append(first, first + sizeof(first), p);
                } else {
                        check(sys_mount(first, p, NULL, MS_BIND, NULL), "mask /proc entries");
                }
        }
}

static void make_dir(const char *path, unsigned mode)
{
        check(raw_syscall3(__NR_mkdirat, AT_FDCWD, path, mode), "make scratch directories");
        check(raw_syscall4(__NR_fchmodat, AT_FDCWD, path, mode, 0), "make scratch directories");
}

/* One tmpfs behind /tmp, /dev/shm and (without a workspace of its own)
 * /workspace, over the template's. */
static void build_scratch(const struct cz_spawn *s)
{
        const char *step = "bind /tmp, /dev/shm, /workspace";
        check(sys_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, s->scratch_opts),
              "mount scratch tmpfs");
        make_dir("/tmp/tmp", 01777);
        make_dir("/tmp/shm", 01777);
        if (!s->workspace)
                make_dir("/tmp/workspace", 0755);
        check(sys_mount("/tmp/shm", "/dev/shm", NULL, MS_BIND, NULL), step);
        if (s->workspace) {
                /* The server's detached mount of this sandbox's own workspace
                 * (idmapped to its uid slot), moved over the template's. */
                check(raw_syscall5(__NR_move_mount, FD_WORKSPACE, "", AT_FDCWD, "/workspace",
                                   MOVE_MOUNT_F_EMPTY_PATH),
                      "mount the workspace");
                raw_syscall1(__NR_close, FD_WORKSPACE);
        } else {
                make_dir("/tmp/workspace/output", 0755);
                check(sys_mount("/tmp/workspace", "/workspace", NULL, MS_BIND, NULL), step);
        }
        check(sys_mount("/tmp/tmp", "/tmp", NULL, MS_BIND, NULL), step);
}

struct if_flags_req { /* struct ifreq with its flags member */
        char name[16];
        short flags;
        char pad[22];
};

static void loopback_up(void)
{
        long s = raw_syscall3(__NR_socket, AF_INET_NR, SOCK_DGRAM_NR | SOCK_CLOEXEC_NR, 0);
        check(s, "bring up loopback");
        struct if_flags_req req;
        for (size_t i = 0; i < sizeof(req.name); i++)
                req.name[i] = "lo"[i < 2 ? i : 2];
        req.flags = 0;
        check(raw_syscall3(__NR_ioctl, s, SIOCGIFFLAGS, &req), "bring up loopback");
        req.flags |= IFF_UP_FLAG;
        check(raw_syscall3(__NR_ioctl, s, SIOCSIFFLAGS, &req), "bring up loopback");
        raw_syscall1(__NR_close, s);
}

static void set_rlimits(const struct cz_spawn *s)
{
        for (uint32_t i = 0; i < s->n_rlimits; i++) {
                uint64_t lim[2] = {s->rlimits[i].soft, s->rlimits[i].hard};
                check(raw_syscall4(__NR_prlimit64, 0, s->rlimits[i].resource, lim, NULL),
                      "set rlimits");
        }
}

static void drop_privileges(const struct cz_template *t)
{
        if (!(t->flags & CZ_NO_CAPS)) {
                check(raw_syscall2(__NR_prctl, PR_SET_SECUREBITS, SECUREBITS_LOCKED),
                      "drop capabilities");
                for (long cap = 0; cap < 64; cap++)
                        if (raw_syscall2(__NR_prctl, PR_CAPBSET_DROP, cap) < 0)
                                break; /* past the kernel's last capability */
                raw_syscall2(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL);
                struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
                struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
                check(raw_syscall2(__NR_capset, &hdr, data), "drop capabilities");
        }
        check(raw_syscall2(__NR_prctl, PR_SET_DUMPABLE, 0), "set non-dumpable");
        check(raw_syscall2(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1), "no_new_privs");
        if (t->flags & CZ_NO_SECCOMP)
                return;
        for (uint32_t i = 0; i < t->n_progs; i++)
                check(raw_syscall3(__NR_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &t->progs[i]),
                      "install seccomp filter");
}

/* Before any other step of the sandbox's: until here B shares the
 * template's network namespace (itself a sandbox's: loopback only), and
 * nothing so far used it. */
static void sandbox_init(const struct cz_template *t, const struct cz_spawn *s)
{
        int limits[N_USERNS_LIMITS];
        check(raw_syscall1(__NR_unshare, CLONE_NEWNET), "unshare network namespace");
        check(sys_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "private propagation");
        check(sys_mount("proc", "/proc", "proc", PROC_FLAGS, NULL), "mount /proc");
        open_userns_limits(t, limits);
        mask_proc(t);
        check(sys_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                        "newinstance,ptmxmode=0666,mode=0620"),
              "mount /dev/pts");
        build_scratch(s);
        check(raw_syscall2(__NR_sethostname, "codecage", 8), "sethostname");
        loopback_up();
        check(raw_syscall1(__NR_unshare, CLONE_NEWCGROUP), "unshare cgroup namespace");
        write_userns_limits(limits);
        check(raw_syscall0(__NR_setsid), "setsid");
        set_rlimits(s);
        drop_privileges(t);
}

/* B becomes codecage-init, which holds nothing of the template: the
 * driver's pipes closed, the control socket as its fd 3, the driver's
 * status pipe as fd 4; its image (a sealed memfd) is closed by the exec. */
static __attribute__((noreturn)) void exec_init(long driver_pid)
{
        char pid_text[24];
        append_uint(pid_text, pid_text + sizeof(pid_text), (unsigned long)driver_pid);
        char *argv[] = {"codecage-init", pid_text, NULL};
        char *envp[] = {NULL};
        if (raw_syscall3(__NR_dup3, 0, FD_OUT, 0) >= 0 &&
            raw_syscall3(__NR_dup3, 0, FD_ERR, 0) >= 0 &&
            raw_syscall3(__NR_dup3, FD_CTL, INIT_CTL_FD, 0) >= 0 &&
            raw_syscall3(__NR_dup3, FD_STATUS, INIT_STATUS_FD, 0) >= 0 &&
            raw_syscall3(__NR_dup3, FD_INIT, INIT_IMAGE_FD, O_CLOEXEC) >= 0 &&
            raw_syscall3(__NR_close_range, INIT_IMAGE_FD + 1, ~0u, 0) >= 0)
                raw_syscall5(__NR_execveat, INIT_IMAGE_FD, "", argv, envp, AT_EMPTY_PATH);
        exit_now(125); /* the driver ends with us: the server sees its session go */
}

static void sigchld_default(void)
{
        unsigned long act[4] = {0, 0, 0, 0}; /* SIG_DFL, no flags, empty mask */
        raw_syscall4(__NR_rt_sigaction, SIGCHLD_NR, act, NULL, 8);
}

/* B, pid 1 of the new sandbox: returns only in the driver it forks. */
static void child_b(const struct cz_template *t, const struct cz_spawn *s)
{
        sigchld_default();
        /* The template blocks SIGCHLD for its signalfd; we and the driver do not. */
        raw_syscall4(__NR_rt_sigprocmask, SIG_SETMASK_NR, &s->sigmask, NULL, 8);
        /* Into our own cgroup before anything else: the pages we write from
         * here on, and all we make (namespaces, mounts), are charged to
         * this sandbox, not to the template. */
        wait_for_cgroup(s->fds[FD_SYNC - 1]);
        place_fds(s);
        char mapped = 0;
        if (raw_syscall3(__NR_read, FD_MAPPED, &mapped, 1) != 1 || mapped != 'm')
                exit_now(125); /* the template could not write our maps */
        raw_syscall1(__NR_close, FD_MAPPED);
        check(raw_syscall3(__NR_setresgid, t->gid, t->gid, t->gid), "take the sandbox's ids");
        check(raw_syscall3(__NR_setresuid, t->uid, t->uid, t->uid), "take the sandbox's ids");
        sandbox_init(t, s);
        write_byte(FD_SYNC, 'r'); /* every step done: the server counts the launch as made */
        raw_syscall1(__NR_close, FD_SYNC);
        int pid = t->fork();
        if (pid < 0)
                exit_now(125); /* "r" is sent: the server sees the sandbox end */
        if (pid == 0) {
                for (int fd = FD_CTL; fd <= FD_INIT; fd++)
                        raw_syscall1(__NR_close, fd);
                return;
        }
        exec_init(pid);
}

/* In the template: B's pid, or -errno. In the driver: 0. B never returns. */
static long spawn(const struct cz_template *t, const struct cz_spawn *s)
{
        struct clone_args args = {
                .flags = CLONE_NS_FLAGS,
                .exit_signal = SIGCHLD_NR,
        };
        long pid = raw_syscall2(__NR_clone3, &args, sizeof(args));
        if (pid != 0)
                return pid;
        child_b(t, s);
        return 0;
}

/* ---- the template's loop ---- */

/* The C library's struct msghdr and struct cmsghdr, as the kernel reads them. */
struct cz_msghdr {
        void *name;
        uint32_t namelen, pad;
        struct iovec *iov;
        unsigned long iovlen;
        void *control;
        unsigned long controllen;
        uint32_t flags, pad2;
};

struct cz_cmsghdr {
        unsigned long len;
        int level, type;
};

#define FDS_MAX (ZYGOTE_CHILD_FDS + 1)

struct received {
        struct zygote_spawn_request req;
        int fds[FDS_MAX];
        uint32_t n_fds;
};

static void close_all(const int *fds, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                raw_syscall1(__NR_close, fds[i]);
}

/* The fds a message carried, each kept in in->fds or closed: 0 when there
 * were more than a request has (all of them closed then). */
static int take_fds(const struct cz_cmsghdr *hdr, unsigned long controllen, struct received *in)
{
        in->n_fds = 0;
        if (controllen < sizeof(*hdr) || hdr->level != SOL_SOCKET_NR ||
            hdr->type != SCM_RIGHTS_NR || hdr->len < sizeof(*hdr) || hdr->len > controllen)
                return 1;
        unsigned long count = (hdr->len - sizeof(*hdr)) / sizeof(int);
        const int *fds = (const int *)(hdr + 1);
        for (unsigned long i = 0; i < count; i++) {
                if (in->n_fds < FDS_MAX)
                        in->fds[in->n_fds++] = fds[i];
                else
                        raw_syscall1(__NR_close, fds[i]);
        }
        if (count <= FDS_MAX)
                return 1;
        close_all(in->fds, in->n_fds);
        in->n_fds = 0;
        return 0;
}

/* One message: 1 with a request, 0 when the server closed the socket,
 * -EAGAIN for nothing to read, -EINVAL for a message we do not serve (its fds
 * closed), or another -errno. */
static long receive(int ctl, struct received *in)
{
        union {
                struct cz_cmsghdr hdr;
                char bytes[sizeof(struct cz_cmsghdr) + (FDS_MAX + 2) * sizeof(int)];
        } control;
        struct iovec iov = {.iov_base = &in->req, .iov_len = sizeof(in->req)};
        struct cz_msghdr mh = {.iov = &iov,
                               .iovlen = 1,
                               .control = control.bytes,
                               .controllen = sizeof(control.bytes)};
        long n = raw_syscall3(__NR_recvmsg, ctl, &mh, MSG_CLOEXEC_NR);
        if (n <= 0)
                return n;
        int fds_ok = take_fds(&control.hdr, mh.controllen, in);
        const struct zygote_spawn_request *r = &in->req;
        int ok = fds_ok && n == (long)sizeof(*r) && !(mh.flags & (MSG_TRUNC_NR | MSG_CTRUNC_NR)) &&
                 r->magic == ZYGOTE_SPAWN_MAGIC && r->workspace <= 1 &&
                 in->n_fds == ZYGOTE_CHILD_FDS + r->workspace &&
                 r->n_rlimits <= ZYGOTE_RLIMITS_MAX &&
                 r->scratch_opts[ZYGOTE_SCRATCH_MAX - 1] == '\0' &&
                 r->workdir[ZYGOTE_WORKDIR_MAX - 1] == '\0';
        if (!ok) {
                close_all(in->fds, in->n_fds);
                return -EINVAL;
        }
        return 1;
}

static long write_text(const char *path, const char *text)
{
        long fd = raw_syscall4(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0)
                return fd;
        long len = (long)cz_strlen(text);
        long n = raw_syscall3(__NR_write, fd, text, len);
        raw_syscall1(__NR_close, fd);
        return n == len ? 0 : (n < 0 ? n : -EIO);
}

/* "/proc/<pid>/<name>", in buf. */
static const char *child_file(char *buf, size_t size, long pid, const char *name)
{
        char *pos = append_uint(append(buf, buf + size, "/proc/"), buf + size, (unsigned long)pid);
        append(append(pos, buf + size, "/"), buf + size, name);
        return buf;
}

/* "<inside> <outside> 1\n", in buf. */
static const char *id_map(char *buf, size_t size, uint32_t inside, uint32_t outside)
{
        char *pos = append_uint(buf, buf + size, inside);
        pos = append_uint(append(pos, buf + size, " "), buf + size, outside);
        append(pos, buf + size, " 1\n");
        return buf;
}

/* Our user namespace maps the host's uid slots to themselves, so host ids
 * are ours to hand out (0 is our own); setgroups is denied for good. */
static long write_maps(const struct cz_template *t, long pid, uint32_t uid, uint32_t gid)
{
        char path[64], map[64];
        long r = write_text(child_file(path, sizeof(path), pid, "uid_map"),
                            id_map(map, sizeof(map), t->uid, uid));
        if (r == 0)
                r = write_text(child_file(path, sizeof(path), pid, "setgroups"), "deny");
        if (r == 0)
                r = write_text(child_file(path, sizeof(path), pid, "gid_map"),
                               id_map(map, sizeof(map), t->gid, gid));
        return r;
}

/* One child: B's pid in the template (or -errno: the server times out
 * waiting for it), 0 in the driver. The request's fds stay the caller's. */
static long serve_spawn(const struct cz_template *t, const struct received *in, uint64_t sigmask)
{
        const struct zygote_spawn_request *r = &in->req;
        int mapped[2];
        long e = raw_syscall2(__NR_pipe2, mapped, O_CLOEXEC);
        if (e < 0)
                return e;
        int fds[FDS_MAX + 1];
        uint32_t n = 0;
        for (; n < ZYGOTE_CHILD_FDS; n++)
                fds[n] = in->fds[n];
        fds[n++] = mapped[0];
        if (r->workspace)
                fds[n++] = in->fds[ZYGOTE_CHILD_FDS];
        struct cz_spawn s = {fds,          n,      r->workspace, r->scratch_opts, r->rlimits,
                             r->n_rlimits, sigmask};
        long pid = spawn(t, &s);
        if (pid == 0)
                return 0;
        raw_syscall1(__NR_close, mapped[0]);
        if (pid > 0) {
                uint32_t uid = r->shared ? 0 : r->host_uid, gid = r->shared ? 0 : r->host_gid;
                if (write_maps(t, pid, uid, gid) == 0)
                        write_byte(mapped[1], 'm');
        }
        raw_syscall1(__NR_close, mapped[1]); /* without its maps the child exits */
        return pid;
}

/* Our children are pid 1 of the sandboxes we made: reap those that ended. */
static void reap(int sigfd)
{
        struct signalfd_siginfo info[4];
        while (raw_syscall3(__NR_read, sigfd, info, sizeof(info)) > 0)
                ;
        while (raw_syscall4(__NR_wait4, -1, NULL, WNOHANG_NR, NULL) > 0)
                ;
}

/* The driver's own process state, before it goes back to Python: its own
 * session, a /proc/self it may read (as after an exec), RLIMIT_AS when no
 * memory cgroup caps it, and its working directory. Without them it must
 * not run: it exits, and the server sees the sandbox's session end. */
static void driver_init(const struct zygote_spawn_request *r)
{
        uint64_t as[2] = {r->rlimit_as, r->rlimit_as};
        if (raw_syscall0(__NR_setsid) < 0 ||
            raw_syscall5(__NR_prctl, PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 ||
            (r->rlimit_as && raw_syscall4(__NR_prlimit64, 0, RLIMIT_AS_NR, as, NULL) < 0) ||
            raw_syscall1(__NR_chdir, r->workdir) < 0)
                exit_now(125);
}

/* Requests on ctl until the server closes it, each child's end reaped as it
 * comes (a signalfd; SIGCHLD blocked here, restored in every child). */
static long serve_loop(const struct cz_template *t, int ctl, int sigfd, uint64_t sigmask)
{
        struct received in;
        for (;;) {
                struct pollfd p[2] = {{.fd = ctl, .events = POLLIN},
                                      {.fd = sigfd, .events = POLLIN}};
                long r = raw_syscall5(__NR_ppoll, p, 2, NULL, NULL, 8);
                if (r < 0 && r != -EINTR)
                        return r;
                if (r > 0 && p[1].revents)
                        reap(sigfd);
                if (r <= 0 || !p[0].revents)
                        continue;
                r = receive(ctl, &in);
                if (r == 0)
                        return 1;
                if (r == -EAGAIN || r == -EINTR || r == -EINVAL)
                        continue;
                if (r < 0)
                        return r;
                if (serve_spawn(t, &in, sigmask) == 0) {
                        driver_init(&in.req);
                        return 0;
                }
                close_all(in.fds, in.n_fds);
        }
}

#define EXPORT __attribute__((visibility("default")))
EXPORT int cz_abi(void);
EXPORT long cz_serve(const struct cz_template *t, int ctl);

/* The version of these structures; the template checks it first. */
EXPORT int cz_abi(void)
{
        return CZ_ABI;
}

/* In the template: 1 once the server closed ctl, or -errno. In a driver: 0,
 * with its request's session, rlimit and working directory applied. */
EXPORT long cz_serve(const struct cz_template *t, int ctl)
{
        uint64_t chld = 1ull << (SIGCHLD_NR - 1), before = 0;
        long r = raw_syscall4(__NR_rt_sigprocmask, SIG_BLOCK_NR, &chld, &before, 8);
        if (r < 0)
                return r;
        long sigfd = raw_syscall4(__NR_signalfd4, -1, &chld, 8, SFD_NONBLOCK | SFD_CLOEXEC);
        if (sigfd >= 0) {
                r = serve_loop(t, ctl, (int)sigfd, before);
                if (r == 0)
                        return 0; /* a driver: B restored its mask and closed the rest */
                raw_syscall1(__NR_close, sigfd);
        }
        raw_syscall4(__NR_rt_sigprocmask, SIG_SETMASK_NR, &before, NULL, 8);
        return sigfd < 0 ? sigfd : r;
}
