/* cage-probe: the security suite's agent inside a sandbox.
 *
 * Each subcommand does one thing an attacker would try and prints one JSON
 * line saying what happened ({"op":...,"ret":...,"errno":...,"errname":...}
 * plus op-specific fields). It depends on nothing but libc, so it runs in
 * any image; Cage.probe_run() binds it read-only at /opt/probe/cage-probe.
 *
 * `syscall NAME` tells "the seccomp filter blocked it" from "the kernel
 * refused it" the way bubblewrap's try-syscall does: the call is made with
 * deliberately invalid arguments, so with the filter in place it fails with
 * the filter's errno (EPERM; ENOSYS for clone3/openat2) and without it the
 * kernel answers EINVAL/EFAULT/EBADF/ESRCH/ENOSYS-for-unconfigured.
 * Calls the kernel refuses with EPERM before looking at their arguments
 * unless the caller holds CAP_SYS_ADMIN over its mount namespace (the mount
 * family) are first "escalated": the probe tries to enter a new user and
 * mount namespace, where it holds every capability. Under the filter that
 * unshare is itself refused, so the call still meets the filter.
 *
 * Usage: cage-probe OP [ARGS...]; run without arguments for the list. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/select.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#define X32_SYSCALL_BIT 0x40000000L
#ifndef SYS_open_tree_attr
#define SYS_open_tree_attr 467
#endif

/* ---- JSON output ---- */

static void json_string(const char *s, size_t len)
{
        putchar('"');
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c == '\n')
                        fputs("\\n", stdout);
                else if (c < 0x20 || c >= 0x7f)
                        printf("\\u%04x", c); /* bytes, not UTF-8: keep it ASCII */
                else
                        putchar(c);
        }
        putchar('"');
}

static void json_cstr(const char *s)
{
        json_string(s, strlen(s));
}

static const char *errname(int e)
{
        if (e == 0)
                return "OK";
        const char *n = strerrorname_np(e);
        return n ? n : "E?";
}

/* {"op":OP,"ret":RET,"errno":E,"errname":"..." — the caller adds fields
 * and closes with end_line(). */
static void begin_line(const char *op, long ret, int err)
{
        printf("{\"op\":");
        json_cstr(op);
        printf(",\"ret\":%ld,\"errno\":%d,\"errname\":\"%s\"", ret, err, errname(err));
}

static void field_str(const char *key, const char *value)
{
        printf(",\"%s\":", key);
        json_cstr(value);
}

static void field_long(const char *key, long value)
{
        printf(",\"%s\":%ld", key, value);
}

static void field_bool(const char *key, bool value)
{
        printf(",\"%s\":%s", key, value ? "true" : "false");
}

static void end_line(void)
{
        puts("}");
        fflush(stdout);
}

static int simple(const char *op, long ret, int err)
{
        begin_line(op, ret, err);
        end_line();
        return 0;
}

static _Noreturn void usage(void)
{
        fprintf(stderr,
                "usage: cage-probe OP [ARGS]\n"
                "  syscall NAME            invalid-argument call: filter EPERM vs kernel errno\n"
                "  syscalls                list the NAMEs\n"
                "  tiocsti[-pty]           inject into a pty of our own (controlling tty)\n"
                "  tiocsti-fd FD|PATH TEXT inject TEXT into the terminal on FD (or opened PATH)\n"
                "  x32 | i386              getpid through another ABI\n"
                "  caps | ids              capability sets, NoNewPrivs, Seccomp / real ids\n"
                "  fds                     open fds and their targets\n"
                "  fd-read FD [NAME]       read FD, or NAME beneath directory FD\n"
                "  fd-escape FD            fchdir(FD), climb with .., list what is there\n"
                "  cwd | ls PATH | read PATH | write PATH | readlink PATH\n"
                "  mknod PATH MAJ MIN      character device node\n"
                "  kill PID SIG            kill(2); kill-host PID: kill(PID, SIGTERM)\n"
                "  forkbomb N              hold N live processes, report how many\n"
                "  memory MIB              allocate and touch\n"
                "  files N                 open N fds\n"
                "  disk PATH MIB           write MIB MiB to PATH\n"
                "  flood MIB               write MIB MiB to stdout\n"
                "  spin SECONDS NPROC      NPROC processes each burn SECONDS of CPU\n"
                "  daemon SECONDS MARKER   double-fork + setsid a sleeper, return at once\n"
                "  sleep SECONDS [MARK..]  sleep (MARK only tags argv)\n"
                "  connect IPV4 PORT       TCP connect, 2 s timeout\n"
                "  environ                 the environment\n");
        exit(2);
}

/* ---- syscall NAME ---- */

/* Enters a new user + mount namespace (full capabilities there). Under the
 * seccomp filter this fails, which is the point. */
static bool escalate(void)
{
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS) < 0)
                return false;
        char map[64];
        int fd = open("/proc/self/setgroups", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void)!write(fd, "deny", 4);
                close(fd);
        }
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if ((fd = open("/proc/self/uid_map", O_WRONLY | O_CLOEXEC)) >= 0) {
                (void)!write(fd, map, strlen(map));
                close(fd);
        }
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if ((fd = open("/proc/self/gid_map", O_WRONLY | O_CLOEXEC)) >= 0) {
                (void)!write(fd, map, strlen(map));
                close(fd);
        }
        return true;
}

#define BAD_PTR ((void *)1)
#define NO_PID  0x3ffffff0L /* above pid_max: no such process */

static long sc_clone_newuser(void)
{
        long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0)
                _exit(0);
        if (pid > 0)
                waitpid((pid_t)pid, NULL, 0);
        return pid;
}

static long sc_socket_vsock(void)
{
        /* Valid arguments: success means a vsock socket exists (no
         * traffic is sent); a kernel without vsock says EAFNOSUPPORT. */
        long fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0)
                close((int)fd);
        return fd;
}

static long sc_tiocsti(void)
{
        char c = 'x';
        return syscall(SYS_ioctl, -1, (unsigned long)TIOCSTI, &c);
}

static long sc_tiocsti_highbits(void)
{
        /* The kernel takes the request as an unsigned int; a filter that
         * compared all 64 bits would miss this spelling. */
        char c = 'x';
        return syscall(SYS_ioctl, -1, (1UL << 32) | (unsigned long)TIOCSTI, &c);
}

static long sc_tioclinux(void)
{
        char c = 0;
        return syscall(SYS_ioctl, -1, (unsigned long)TIOCLINUX, &c);
}

struct syscall_case {
        const char *name;
        bool escalate;
        int filter_errno; /* what the filter answers */
};

static const struct syscall_case cases[] = {
        {"keyctl", false, EPERM},
        {"add_key", false, EPERM},
        {"request_key", false, EPERM},
        {"bpf", false, EPERM},
        {"perf_event_open", false, EPERM},
        {"userfaultfd", false, EPERM},
        {"io_uring_setup", false, EPERM},
        {"io_uring_enter", false, EPERM},
        {"io_uring_register", false, EPERM},
        {"ptrace", false, EPERM},
        {"process_vm_readv", false, EPERM},
        {"process_vm_writev", false, EPERM},
        {"kcmp", false, EPERM},
        {"pidfd_getfd", false, EPERM},
        {"process_madvise", false, EPERM},
        {"mount", false, EPERM},
        {"umount2", false, EPERM},
        {"pivot_root", true, EPERM},
        {"chroot", false, EPERM},
        {"move_mount", true, EPERM},
        {"open_tree", true, EPERM},
        {"fsopen", true, EPERM},
        {"fsconfig", true, EPERM},
        {"fsmount", true, EPERM},
        {"fspick", true, EPERM},
        {"mount_setattr", true, EPERM},
        {"open_tree_attr", true, EPERM},
        {"unshare", false, EPERM},
        {"setns", false, EPERM},
        {"kexec_load", false, EPERM},
        {"kexec_file_load", false, EPERM},
        {"init_module", false, EPERM},
        {"finit_module", false, EPERM},
        {"delete_module", false, EPERM},
        {"name_to_handle_at", false, EPERM},
        {"open_by_handle_at", false, EPERM},
        {"clone3", false, ENOSYS},
        {"openat2", false, ENOSYS},
        {"clone-newuser", false, EPERM},
        {"socket-vsock", false, EPERM},
        {"chmod-setuid", false, EPERM},
        {"tiocsti", false, EPERM},
        {"tiocsti-highbits", false, EPERM},
        {"tioclinux", false, EPERM},
        {"tiocsetd", false, EPERM},
        {"tioccons", false, EPERM},
        {"statmount", false, ENOSYS},
        {"listmount", false, ENOSYS},
        {"lsm_get_self_attr", false, ENOSYS},
        {"lsm_list_modules", false, ENOSYS},
        {"personality-norandom", false, ENOSYS},
        {"personality-exec", false, ENOSYS},
        {"modify_ldt", false, EPERM},
        {"mbind", false, EPERM},
        {"set_mempolicy", false, EPERM},
        {"migrate_pages", false, EPERM},
        {"move_pages", false, EPERM},
        {"ustat", false, EPERM},
        {"sysfs", false, EPERM},
        {"socket-packet", false, EPERM},
        {"socket-inet-raw", false, EPERM},
        {"socket-netlink-audit", false, EPERM},
        {"socketpair-inet", false, EPERM},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* Newer kernels' calls by x86_64 number (the headers may not name them). */
#define NR_STATMOUNT         457
#define NR_LISTMOUNT         458
#define NR_LSM_GET_SELF_ATTR 459
#define NR_LSM_LIST_MODULES  461
#define BAD_SOCK_TYPE        0x0f /* >= SOCK_MAX: the kernel says EINVAL first */

static long sc_personality(unsigned long persona)
{
        long old = syscall(SYS_personality, persona);
        if (old >= 0)
                syscall(SYS_personality, (unsigned long)old); /* put it back */
        return old;
}

static long sc_socketpair_inet(void)
{
        int sv[2];
        long r = syscall(SYS_socketpair, AF_INET, SOCK_STREAM, 0, sv); /* EOPNOTSUPP */
        if (r == 0) {
                close(sv[0]);
                close(sv[1]);
        }
        return r;
}

/* The classes of the allow list and of its argument checks: absent calls
 * (ENOSYS) and refused modes (EPERM), each with arguments the kernel itself
 * would refuse otherwise (comment: its answer). */
static long call_case_more(const char *n)
{
#define IS(s) (strcmp(n, s) == 0)
        char c = 0;
        if (IS("tiocsetd"))
                return syscall(SYS_ioctl, -1, (unsigned long)TIOCSETD, &c); /* EBADF */
        if (IS("tioccons"))
                return syscall(SYS_ioctl, -1, (unsigned long)TIOCCONS, &c); /* EBADF */
        if (IS("statmount"))
                return syscall(NR_STATMOUNT, NULL, NULL, 0, 0); /* EFAULT */
        if (IS("listmount"))
                return syscall(NR_LISTMOUNT, NULL, NULL, 0, 0); /* EFAULT */
        if (IS("lsm_get_self_attr"))
                return syscall(NR_LSM_GET_SELF_ATTR, 0, NULL, NULL, 0xffffffffL); /* EINVAL */
        if (IS("lsm_list_modules"))
                return syscall(NR_LSM_LIST_MODULES, NULL, NULL, 0xffffffffL); /* EINVAL */
        if (IS("personality-norandom"))
                return sc_personality(PER_LINUX | ADDR_NO_RANDOMIZE); /* succeeds */
        if (IS("personality-exec"))
                return sc_personality(PER_LINUX | READ_IMPLIES_EXEC); /* succeeds */
        if (IS("modify_ldt"))
                return syscall(SYS_modify_ldt, 0x7f, NULL, 0); /* ENOSYS: no such func */
        if (IS("mbind"))
                return syscall(SYS_mbind, 0, 0, 0xff, NULL, 0, 0); /* EINVAL */
        if (IS("set_mempolicy"))
                return syscall(SYS_set_mempolicy, 0xff, NULL, 0); /* EINVAL */
        if (IS("migrate_pages"))
                return syscall(SYS_migrate_pages, NO_PID, 0, NULL, NULL); /* ESRCH */
        if (IS("move_pages"))
                return syscall(SYS_move_pages, NO_PID, 0, NULL, NULL, NULL, 0xffff); /* EINVAL */
        if (IS("ustat"))
                return syscall(SYS_ustat, 0, NULL); /* EFAULT or EINVAL */
        if (IS("sysfs"))
                return syscall(SYS_sysfs, 99); /* EINVAL */
        if (IS("socket-packet"))
                return syscall(SYS_socket, AF_PACKET, BAD_SOCK_TYPE, 0); /* EINVAL */
        if (IS("socket-inet-raw"))
                return syscall(SYS_socket, AF_INET, SOCK_RAW, 300); /* EINVAL: protocol */
        if (IS("socket-netlink-audit"))
                return syscall(SYS_socket, AF_NETLINK, BAD_SOCK_TYPE, NETLINK_AUDIT); /* EINVAL */
        if (IS("socketpair-inet"))
                return sc_socketpair_inet();
#undef IS
        errno = EINVAL;
        return -2;
}

static long call_case(const char *n)
{
#define IS(s) (strcmp(n, s) == 0)
        if (IS("keyctl"))
                return syscall(SYS_keyctl, 0x7fffffffL, 0, 0, 0, 0); /* EOPNOTSUPP */
        if (IS("add_key"))
                return syscall(SYS_add_key, NULL, NULL, NULL, 0, 0); /* EFAULT */
        if (IS("request_key"))
                return syscall(SYS_request_key, NULL, NULL, NULL, 0); /* EFAULT */
        if (IS("bpf"))
                return syscall(SYS_bpf, -1, NULL, 0); /* EINVAL */
        if (IS("perf_event_open"))
                return syscall(SYS_perf_event_open, NULL, 0, -1, -1, ~0UL); /* EINVAL */
        if (IS("userfaultfd"))
                /* UFFD_USER_MODE_ONLY passes the sysctl check; bit 30 is invalid. */
                return syscall(SYS_userfaultfd, 1L | (1L << 30)); /* EINVAL */
        if (IS("io_uring_setup"))
                return syscall(SYS_io_uring_setup, 1, NULL); /* EFAULT */
        if (IS("io_uring_enter"))
                return syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0); /* EBADF */
        if (IS("io_uring_register"))
                return syscall(SYS_io_uring_register, -1, 0, NULL, 0); /* EBADF */
        if (IS("ptrace"))
                return syscall(SYS_ptrace, 2 /* PEEKDATA */, NO_PID, NULL, NULL); /* ESRCH */
        if (IS("process_vm_readv"))
                return syscall(SYS_process_vm_readv, getpid(), NULL, 0, NULL, 0, 1); /* EINVAL */
        if (IS("process_vm_writev"))
                return syscall(SYS_process_vm_writev, getpid(), NULL, 0, NULL, 0, 1); /* EINVAL */
        if (IS("kcmp"))
                return syscall(SYS_kcmp, NO_PID, NO_PID, 0, 0, 0); /* ESRCH */
        if (IS("pidfd_getfd"))
                return syscall(SYS_pidfd_getfd, -1, 0, 0); /* EBADF */
        if (IS("process_madvise"))
                return syscall(SYS_process_madvise, -1, NULL, 0, 0, 0); /* EBADF */
        if (IS("mount"))
                return syscall(SYS_mount, NULL, NULL, BAD_PTR, 0, NULL); /* EFAULT */
        if (IS("umount2"))
                return syscall(SYS_umount2, "/", 0x80000000L); /* EINVAL */
        if (IS("pivot_root"))
                return syscall(SYS_pivot_root, NULL, NULL); /* EFAULT */
        if (IS("chroot"))
                return syscall(SYS_chroot, NULL); /* EFAULT */
        if (IS("move_mount"))
                return syscall(SYS_move_mount, -1, NULL, -1, NULL, 0xffffffffL); /* EINVAL */
        if (IS("open_tree"))
                return syscall(SYS_open_tree, -1, NULL, 0xffffffffL); /* EINVAL */
        if (IS("fsopen"))
                return syscall(SYS_fsopen, NULL, 0); /* EFAULT */
        if (IS("fsconfig"))
                return syscall(SYS_fsconfig, -1, 0xffff, NULL, NULL, 0); /* EINVAL */
        if (IS("fsmount"))
                return syscall(SYS_fsmount, -1, 0, 0); /* EBADF */
        if (IS("fspick"))
                return syscall(SYS_fspick, -1, NULL, 0xffffffffL); /* EINVAL */
        if (IS("mount_setattr"))
                return syscall(SYS_mount_setattr, -1, NULL, 0xffffffffL, NULL, 0); /* EINVAL */
        if (IS("open_tree_attr"))
                return syscall(SYS_open_tree_attr, -1, NULL, 0xffffffffL, NULL, 0); /* EINVAL */
        if (IS("unshare"))
                return syscall(SYS_unshare, 0x1L); /* EINVAL: not an unshare flag */
        if (IS("setns"))
                return syscall(SYS_setns, -1, 0); /* EBADF */
        if (IS("kexec_load"))
                return syscall(SYS_kexec_load, 0, 0, NULL, 0xffffffffL);
        if (IS("kexec_file_load"))
                return syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xffffffffL);
        if (IS("init_module"))
                return syscall(SYS_init_module, NULL, 0, NULL);
        if (IS("finit_module"))
                return syscall(SYS_finit_module, -1, NULL, 0xffffffffL);
        if (IS("delete_module"))
                return syscall(SYS_delete_module, NULL, 0);
        if (IS("name_to_handle_at"))
                return syscall(SYS_name_to_handle_at, -1, NULL, NULL, NULL,
                               0xffffffffL); /* EINVAL */
        if (IS("open_by_handle_at"))
                return syscall(SYS_open_by_handle_at, -1, NULL, 0); /* EBADF/EFAULT */
        if (IS("clone3"))
                return syscall(SYS_clone3, NULL, 0); /* EINVAL */
        if (IS("openat2"))
                return syscall(SYS_openat2, -1, NULL, NULL, 0); /* EINVAL */
        if (IS("clone-newuser"))
                return sc_clone_newuser(); /* succeeds */
        if (IS("socket-vsock"))
                return sc_socket_vsock();
        if (IS("chmod-setuid"))
                return syscall(SYS_fchmodat, AT_FDCWD, "/nonexistent/x", 04755, 0); /* ENOENT */
        if (IS("tiocsti"))
                return sc_tiocsti(); /* EBADF */
        if (IS("tiocsti-highbits"))
                return sc_tiocsti_highbits(); /* EBADF */
        if (IS("tioclinux"))
                return sc_tioclinux(); /* EBADF */
        return call_case_more(n);
#undef IS
        errno = EINVAL;
        return -2;
}

static int op_syscall(int argc, char **argv)
{
        if (argc < 1)
                usage();
        const struct syscall_case *c = NULL;
        for (size_t i = 0; i < N_CASES; i++)
                if (strcmp(cases[i].name, argv[0]) == 0)
                        c = &cases[i];
        if (!c) {
                fprintf(stderr, "cage-probe: unknown syscall case \"%s\"\n", argv[0]);
                return 2;
        }
        bool escalated = c->escalate && escalate();
        errno = 0;
        long ret = call_case(c->name);
        int e = ret < 0 ? errno : 0;
        begin_line("syscall", ret, e);
        field_str("name", c->name);
        field_bool("escalated", escalated);
        field_long("filter_errno", c->filter_errno);
        end_line();
        return 0;
}

static int op_syscalls(void)
{
        for (size_t i = 0; i < N_CASES; i++)
                printf("%s\n", cases[i].name);
        return 0;
}

/* ---- terminals ---- */

static int inject(int fd, const char *text, int *err)
{
        int n = 0;
        *err = 0;
        for (const char *p = text; *p; p++, n++)
                if (ioctl(fd, TIOCSTI, p) < 0) {
                        *err = errno;
                        break;
                }
        return n;
}

/* A pty of our own, made our controlling terminal in a new session: the
 * one case where the kernel lets an unprivileged process use TIOCSTI, so
 * only the filter stands in the way. */
static int op_tiocsti_pty(void)
{
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
                return simple("tiocsti-pty", -1, errno);
        char *name = ptsname(m);
        int sync[2];
        if (!name || pipe(sync) < 0)
                return simple("tiocsti-pty", -1, errno);
        pid_t pid = fork();
        if (pid == 0) {
                int e = 0, n = 0;
                int s = -1;
                if (setsid() < 0 || (s = open(name, O_RDWR)) < 0 || ioctl(s, TIOCSCTTY, 0) < 0)
                        e = errno;
                else
                        n = inject(s, "pwned\n", &e);
                int msg[2] = {n, e};
                (void)!write(sync[1], msg, sizeof(msg));
                _exit(0);
        }
        close(sync[1]);
        int msg[2] = {0, ECHILD};
        (void)!read(sync[0], msg, sizeof(msg));
        waitpid(pid, NULL, 0);
        /* Injected bytes show up as input on the slave side, and are echoed
         * on the master; both mean the injection worked. */
        char buf[256] = "";
        ssize_t got = 0;
        fcntl(m, F_SETFL, O_NONBLOCK);
        usleep(50000);
        got = read(m, buf, sizeof(buf) - 1);
        begin_line("tiocsti-pty", msg[0] > 0 ? 0 : -1, msg[1]);
        field_long("injected", msg[0]);
        printf(",\"echo\":");
        json_string(buf, got > 0 ? (size_t)got : 0);
        end_line();
        return 0;
}

static int op_tiocsti_fd(int argc, char **argv)
{
        if (argc < 2)
                usage();
        int e, fd = atoi(argv[0]);
        if (argv[0][0] == '/' && (fd = open(argv[0], O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
                return simple("tiocsti-fd", -1, errno);
        int n = inject(fd, argv[1], &e);
        begin_line("tiocsti-fd", e ? -1 : 0, e);
        field_long("injected", n);
        field_bool("isatty", isatty(fd));
        end_line();
        return 0;
}

/* ---- other ABIs ---- */

static int op_x32(void)
{
        long ret = syscall(X32_SYSCALL_BIT | SYS_getpid);
        return simple("x32", ret, ret < 0 ? errno : 0);
}

static int op_i386(void)
{
#if defined(__x86_64__)
        long ret = 20; /* __NR_getpid on i386 */
        __asm__ volatile("int $0x80" : "+a"(ret) : : "memory", "rcx", "r11");
        return simple("i386", ret, ret < 0 && ret > -4096 ? (int)-ret : 0);
#else
        return simple("i386", -1, ENOSYS);
#endif
}

/* ---- identity ---- */

static void status_fields(void)
{
        static const char *const keys[] = {"CapInh",     "CapPrm",  "CapEff", "CapBnd", "CapAmb",
                                           "NoNewPrivs", "Seccomp", "Uid",    "Gid",    "Groups"};
        FILE *f = fopen("/proc/self/status", "re");
        char line[512];
        while (f && fgets(line, sizeof(line), f)) {
                char *colon = strchr(line, ':');
                if (!colon)
                        continue;
                *colon = '\0';
                for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                        if (strcmp(line, keys[i]) != 0)
                                continue;
                        char *v = colon + 1;
                        v += strspn(v, " \t");
                        v[strcspn(v, "\n")] = '\0';
                        field_str(keys[i], v);
                }
        }
        if (f)
                fclose(f);
}

static int op_caps(void)
{
        begin_line("caps", 0, 0);
        status_fields();
        end_line();
        return 0;
}

static int op_ids(void)
{
        uid_t r, e, s;
        gid_t gr, ge, gs;
        getresuid(&r, &e, &s);
        getresgid(&gr, &ge, &gs);
        begin_line("ids", 0, 0);
        field_long("ruid", r);
        field_long("euid", e);
        field_long("suid", s);
        field_long("rgid", gr);
        field_long("egid", ge);
        field_long("sgid", gs);
        status_fields();
        end_line();
        return 0;
}

/* ---- files and fds ---- */

static void print_entries(DIR *d)
{
        printf(",\"entries\":[");
        bool first = true;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (!first)
                        putchar(',');
                first = false;
                json_cstr(de->d_name);
        }
        putchar(']');
}

static int op_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return simple("fds", -1, errno);
        begin_line("fds", 0, 0);
        printf(",\"fds\":[");
        bool first = true;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(d))
                        continue;
                char target[4096];
                ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
                target[n > 0 ? n : 0] = '\0';
                printf("%s{\"fd\":%s,\"target\":", first ? "" : ",", de->d_name);
                json_cstr(target);
                putchar('}');
                first = false;
        }
        putchar(']');
        closedir(d);
        end_line();
        return 0;
}

static void print_content(int fd)
{
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        printf(",\"content\":");
        json_string(buf, n > 0 ? (size_t)n : 0);
}

static int op_fd_read(int argc, char **argv)
{
        if (argc < 1)
                usage();
        int fd = atoi(argv[0]);
        if (argc > 1) {
                fd = openat(fd, argv[1], O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return simple("fd-read", -1, errno);
        } else if (lseek(fd, 0, SEEK_SET) < 0 && errno != ESPIPE) {
                return simple("fd-read", -1, errno);
        }
        begin_line("fd-read", 0, 0);
        print_content(fd);
        end_line();
        return 0;
}

static int op_fd_escape(int argc, char **argv)
{
        if (argc < 1)
                usage();
        if (fchdir(atoi(argv[0])) < 0)
                return simple("fd-escape", -1, errno);
        for (int i = 0; i < 64; i++)
                if (chdir("..") < 0)
                        break;
        DIR *d = opendir(".");
        if (!d)
                return simple("fd-escape", -1, errno);
        begin_line("fd-escape", 0, 0);
        print_entries(d);
        closedir(d);
        end_line();
        return 0;
}

static int op_cwd(void)
{
        char cwd[4096] = "";
        if (!getcwd(cwd, sizeof(cwd)))
                snprintf(cwd, sizeof(cwd), "(unreachable: %s)", errname(errno));
        char link[4096];
        ssize_t n = readlink("/proc/self/cwd", link, sizeof(link) - 1);
        link[n > 0 ? n : 0] = '\0';
        DIR *d = opendir(".");
        begin_line("cwd", 0, d ? 0 : errno);
        field_str("cwd", cwd);
        field_str("link", link);
        if (d) {
                print_entries(d);
                closedir(d);
        }
        end_line();
        return 0;
}

static int op_ls(int argc, char **argv)
{
        if (argc < 1)
                usage();
        DIR *d = opendir(argv[0]);
        if (!d)
                return simple("ls", -1, errno);
        begin_line("ls", 0, 0);
        print_entries(d);
        closedir(d);
        end_line();
        return 0;
}

static int op_read(int argc, char **argv)
{
        if (argc < 1)
                usage();
        int fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return simple("read", -1, errno);
        begin_line("read", 0, 0);
        print_content(fd);
        end_line();
        return 0;
}

static int op_write(int argc, char **argv)
{
        if (argc < 1)
                usage();
        int fd = open(argv[0], O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
        if (fd < 0)
                return simple("write", -1, errno);
        ssize_t n = write(fd, "x", 1);
        int e = n < 0 ? errno : 0;
        close(fd);
        return simple("write", n, e);
}

static int op_readlink(int argc, char **argv)
{
        if (argc < 1)
                usage();
        char target[4096];
        ssize_t n = readlink(argv[0], target, sizeof(target) - 1);
        if (n < 0)
                return simple("readlink", -1, errno);
        target[n] = '\0';
        begin_line("readlink", 0, 0);
        field_str("target", target);
        end_line();
        return 0;
}

static int op_mknod(int argc, char **argv)
{
        if (argc < 3)
                usage();
        int r = mknod(argv[0], S_IFCHR | 0666, makedev(atoi(argv[1]), atoi(argv[2])));
        return simple("mknod", r, r < 0 ? errno : 0);
}

static int op_kill(int argc, char **argv)
{
        if (argc < 2)
                usage();
        int r = kill(atoi(argv[0]), atoi(argv[1]));
        return simple("kill", r, r < 0 ? errno : 0);
}

static int op_environ(void)
{
        extern char **environ;
        begin_line("environ", 0, 0);
        printf(",\"env\":[");
        for (char **e = environ; *e; e++) {
                if (e != environ)
                        putchar(',');
                json_cstr(*e);
        }
        putchar(']');
        end_line();
        return 0;
}

/* ---- resources ---- */

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Holds up to N live processes at once (each blocks on a pipe), then
 * releases and reaps them all. Bounded by N and by 20 s. */
static int op_forkbomb(int argc, char **argv)
{
        if (argc < 1)
                usage();
        long want = atol(argv[0]), made = 0;
        int hold[2], e = 0;
        if (pipe(hold) < 0)
                return simple("forkbomb", -1, errno);
        double deadline = now_s() + 20;
        while (made < want && now_s() < deadline) {
                pid_t pid = fork();
                if (pid == 0) {
                        char c;
                        close(hold[1]);
                        (void)!read(hold[0], &c, 1);
                        _exit(0);
                }
                if (pid < 0) {
                        e = errno;
                        break;
                }
                made++;
        }
        close(hold[1]);
        while (wait(NULL) > 0 || errno == EINTR)
                ;
        begin_line("forkbomb", made, e);
        field_long("wanted", want);
        field_long("created", made);
        end_line();
        return 0;
}

static int op_memory(int argc, char **argv)
{
        if (argc < 1)
                usage();
        long want = atol(argv[0]), got = 0;
        int e = 0;
        for (; got < want; got++) {
                char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
                if (p == MAP_FAILED) {
                        e = errno;
                        break;
                }
                memset(p, 0x5a, 1 << 20);
        }
        begin_line("memory", e ? -1 : got, e);
        field_long("touched_mib", got);
        end_line();
        return 0;
}

static int op_files(int argc, char **argv)
{
        if (argc < 1)
                usage();
        long want = atol(argv[0]), got = 0;
        int e = 0;
        for (; got < want; got++)
                if (open("/dev/null", O_RDONLY) < 0) {
                        e = errno;
                        break;
                }
        begin_line("files", e ? -1 : got, e);
        field_long("opened", got);
        end_line();
        return 0;
}

static int op_disk(int argc, char **argv)
{
        if (argc < 2)
                usage();
        long want = atol(argv[1]) << 20, done = 0;
        int e = 0;
        int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return simple("disk", -1, errno);
        static char buf[1 << 16];
        memset(buf, 'd', sizeof(buf));
        while (done < want) {
                ssize_t n = write(fd, buf, sizeof(buf));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        e = errno;
                        break;
                }
                done += n;
        }
        close(fd);
        begin_line("disk", e ? -1 : done, e);
        field_long("written", done);
        end_line();
        return 0;
}

static int op_flood(int argc, char **argv)
{
        if (argc < 1)
                usage();
        long want = atol(argv[0]) << 20, done = 0;
        static char buf[1 << 16];
        memset(buf, 'A', sizeof(buf));
        for (size_t i = 127; i < sizeof(buf); i += 128)
                buf[i] = '\n';
        while (done < want) {
                ssize_t n = write(1, buf, sizeof(buf));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                done += n;
        }
        fprintf(stderr, "flood: wrote %ld bytes\n", done);
        return 0;
}

static volatile unsigned long spin_sink; /* keeps the busy loop */

static double cpu_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* NPROC processes each burn SECONDS of CPU. A wall-clock bound (25x that,
 * plus 10 s) only ends a run starved of CPU; it is far beyond the limits
 * the tests set, so a busy or emulated machine makes the spin slower, never
 * shorter in CPU time. */
static int op_spin(int argc, char **argv)
{
        if (argc < 2)
                usage();
        double secs = atof(argv[0]);
        int nproc = atoi(argv[1]);
        for (int i = 1; i < nproc; i++)
                if (fork() == 0)
                        break;
        double wall_end = now_s() + 25 * secs + 10;
        while (cpu_s() < secs && now_s() < wall_end)
                for (int i = 0; i < 100000; i++)
                        spin_sink += (unsigned long)i;
        while (wait(NULL) > 0 || errno == EINTR)
                ;
        return simple("spin", 0, 0);
}

static int op_sleep(int argc, char **argv)
{
        if (argc < 1)
                usage();
        struct timespec ts = {.tv_sec = atol(argv[0])};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        return 0;
}

/* Double fork + setsid: the sleeper is re-parented to init, in a session
 * of its own, with no fd on the output pipes. Its argv carries MARKER so
 * the host can look for it afterwards. */
static int op_daemon(int argc, char **argv)
{
        if (argc < 2)
                usage();
        pid_t pid = fork();
        if (pid == 0) {
                setsid();
                if (fork() != 0)
                        _exit(0);
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                        dup2(null, 0);
                        dup2(null, 1);
                        dup2(null, 2);
                }
                signal(SIGHUP, SIG_IGN);
                execl("/proc/self/exe", "cage-probe", "sleep", argv[0], argv[1], (char *)NULL);
                _exit(127);
        }
        if (pid > 0)
                waitpid(pid, NULL, 0);
        return simple("daemon", pid, pid < 0 ? errno : 0);
}

static int op_connect(int argc, char **argv)
{
        if (argc < 2)
                usage();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return simple("connect", -1, errno);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((unsigned short)atoi(argv[1]))};
        if (inet_pton(AF_INET, argv[0], &sa.sin_addr) != 1)
                usage();
        int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        int e = r < 0 ? errno : 0;
        if (r < 0 && e == EINPROGRESS) {
                fd_set w;
                FD_ZERO(&w);
                FD_SET(fd, &w);
                struct timeval tv = {.tv_sec = 2};
                if (select(fd + 1, NULL, &w, NULL, &tv) <= 0) {
                        e = ETIMEDOUT;
                } else {
                        socklen_t len = sizeof(e);
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
                }
                r = e ? -1 : 0;
        }
        close(fd);
        return simple("connect", r, e);
}

int main(int argc, char **argv)
{
        if (argc < 2)
                usage();
        const char *op = argv[1];
        int n = argc - 2;
        char **a = argv + 2;
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (strcmp(op, "syscall") == 0)
                return op_syscall(n, a);
        if (strcmp(op, "syscalls") == 0)
                return op_syscalls();
        if (strcmp(op, "tiocsti-pty") == 0 || strcmp(op, "tiocsti") == 0)
                return op_tiocsti_pty();
        if (strcmp(op, "tiocsti-fd") == 0)
                return op_tiocsti_fd(n, a);
        if (strcmp(op, "x32") == 0)
                return op_x32();
        if (strcmp(op, "i386") == 0)
                return op_i386();
        if (strcmp(op, "caps") == 0)
                return op_caps();
        if (strcmp(op, "ids") == 0)
                return op_ids();
        if (strcmp(op, "fds") == 0)
                return op_fds();
        if (strcmp(op, "fd-read") == 0)
                return op_fd_read(n, a);
        if (strcmp(op, "fd-escape") == 0)
                return op_fd_escape(n, a);
        if (strcmp(op, "cwd") == 0)
                return op_cwd();
        if (strcmp(op, "ls") == 0)
                return op_ls(n, a);
        if (strcmp(op, "read") == 0)
                return op_read(n, a);
        if (strcmp(op, "write") == 0)
                return op_write(n, a);
        if (strcmp(op, "readlink") == 0)
                return op_readlink(n, a);
        if (strcmp(op, "mknod") == 0)
                return op_mknod(n, a);
        if (strcmp(op, "kill") == 0)
                return op_kill(n, a);
        if (strcmp(op, "kill-host") == 0 && n >= 1) {
                char *kill_args[] = {a[0], (char *)"15", NULL};
                return op_kill(2, kill_args);
        }
        if (strcmp(op, "environ") == 0)
                return op_environ();
        if (strcmp(op, "forkbomb") == 0)
                return op_forkbomb(n, a);
        if (strcmp(op, "memory") == 0)
                return op_memory(n, a);
        if (strcmp(op, "files") == 0)
                return op_files(n, a);
        if (strcmp(op, "disk") == 0)
                return op_disk(n, a);
        if (strcmp(op, "flood") == 0)
                return op_flood(n, a);
        if (strcmp(op, "spin") == 0)
                return op_spin(n, a);
        if (strcmp(op, "sleep") == 0)
                return op_sleep(n, a);
        if (strcmp(op, "daemon") == 0)
                return op_daemon(n, a);
        if (strcmp(op, "connect") == 0)
                return op_connect(n, a);
        usage();
}
