/* Seccomp policy, compiled with libseccomp at build time (tools/
 * gen-seccomp.c turns it into the BPF programs that src/core/seccomp.c
 * installs; nothing of libseccomp is needed at run time).
 *
 * Two programs, stacked (the kernel runs both and the more restrictive
 * answer wins):
 *   syscalls   an allow list. Every syscall the kernel headers name is
 *              classified in exactly one of the three tables below (a unit
 *              test enforces it, so each new syscall is a decision):
 *              allowed; denied with EPERM (so a test can tell "the filter
 *              blocked it" from "the kernel refused it" by passing invalid
 *              arguments); or absent, ENOSYS, as if the kernel had none (so
 *              libc falls back: clone3 → clone, openat2 → openat). Anything
 *              else — every syscall a newer kernel adds — is ENOSYS too.
 *              Syscalls of any other ABI (i386, x32) kill the process.
 *   arguments  allows everything but dangerous modes of allowed calls, with
 *              EPERM: namespace flags of clone, terminal ioctls that inject
 *              input or change the line discipline, socket families other
 *              than unix, inet, inet6 and netlink-route, raw and packet
 *              sockets, socketpair beyond unix, setuid/setgid mode bits.
 * personality is allowed only to query or to set the default (PER_LINUX);
 * other personas (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) are ENOSYS.
 * docs/SECURITY.md explains each refused family. */
#include "seccomp_policy.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/error.h"

/* The tables: one line per group, not one per name. */
// clang-format off
const char *const cage_seccomp_allowed[] = {
        /* files and descriptors */
        "read", "write", "open", "openat", "creat", "close", "close_range", "lseek", "pread64",
        "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", "dup", "dup2",
        "dup3", "fcntl", "flock", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
        "fadvise64", "readahead", "fallocate", "truncate", "ftruncate", "sendfile", "splice",
        "tee", "vmsplice", "copy_file_range", "pipe", "pipe2", "ioctl",
        /* metadata and directories */
        "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
        "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd",
        "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
        "renameat2", "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "chmod",
        "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "umask", "utime", "utimes",
        "utimensat", "futimesat",
        /* extended attributes */
        "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
        "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
        /* file events */
        "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
        /* memory */
        "mmap", "munmap", "mprotect", "mremap", "brk", "madvise", "mincore", "msync", "mlock",
        "mlock2", "munlock", "mlockall", "munlockall", "memfd_create", "membarrier",
        "remap_file_pages", "pkey_mprotect", "pkey_alloc", "pkey_free", "get_mempolicy",
        /* processes and threads */
        "clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
        "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
        "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv",
        "arch_prctl", "set_thread_area", "get_thread_area", "prctl", "personality", "seccomp",
        "restart_syscall", "pidfd_open", "pidfd_send_signal",
        /* scheduling and limits */
        "sched_yield", "sched_setparam", "sched_getparam", "sched_setscheduler",
        "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval", "sched_setaffinity", "sched_getaffinity", "sched_setattr",
        "sched_getattr", "getpriority", "setpriority", "ioprio_get", "ioprio_set", "getrlimit",
        "setrlimit", "prlimit64", "getrusage", "times", "getcpu",
        /* credentials (inside the sandbox's user namespace, without capabilities) */
        "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
        "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid",
        "setfsgid", "capget", "capset",
        /* signals */
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
        "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "signalfd",
        "signalfd4", "kill", "tkill", "tgkill", "pause", "alarm",
        /* time and timers */
        "time", "gettimeofday", "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
        "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
        "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
        /* waiting for events */
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
        /* asynchronous I/O (not io_uring) */
        "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
        /* System V and POSIX IPC (the sandbox's own IPC namespace) */
        "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
        "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
        "mq_notify", "mq_getsetattr",
        /* sockets (families and types: the arguments program) */
        "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname",
        "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
        "shutdown", "setsockopt", "getsockopt",
        /* system information; the sandbox's own UTS namespace */
        "uname", "sysinfo", "getrandom", "sethostname", "setdomainname",
        /* self-restriction */
        "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        NULL,
};
// clang-format on

// clang-format off
const char *const cage_seccomp_denied[] = {
        /* keyrings */
        "add_key", "request_key", "keyctl",
        /* bpf, perf, userfaultfd, io_uring */
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register",
        /* the ptrace family */
        "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        "process_madvise",
        /* the mount family, old and new API */
        "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
        "fsconfig", "fsmount", "fspick", "mount_setattr",
        /* namespaces */
        "unshare", "setns",
        /* kexec and modules */
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        /* host-wide state */
        "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime",
        "adjtimex", "syslog", "quotactl", "quotactl_fd", "vhangup", "iopl", "ioperm",
        "fanotify_init", "fanotify_mark",
        /* handle-based opens bypass path checks ("shocker") */
        "name_to_handle_at", "open_by_handle_at",
        /* the local descriptor table (16-bit segments: old exploit vector) */
        "modify_ldt",
        /* NUMA placement: another tenant's memory nodes are not ours to steer */
        "mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",
        /* obsolete calls kept by the kernel for old binaries */
        "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "lookup_dcookie",
        /* secret memory: unreclaimable, outside the memory accounting we report */
        "memfd_secret",
        NULL,
};
// clang-format on

// clang-format off
const char *const cage_seccomp_absent[] = {
        /* libc falls back to the calls whose arguments the filter can read:
         * clone3 hides its flags in memory, openat2 its mode */
        "clone3", "openat2",
        /* removed from the kernel or never implemented on x86_64 */
        "create_module", "get_kernel_syms", "query_module", "getpmsg", "putpmsg", "afs_syscall",
        "tuxcall", "security", "vserver", "epoll_ctl_old", "epoll_wait_old",
        /* not needed by a sandboxed program */
        "process_mrelease",
        NULL,
};
// clang-format on

/* Syscalls newer than some libseccomp releases know, denied by x86_64 number. */
static const struct {
        const char *name;
        int nr;
} raw_denied[] = {
#ifdef __x86_64__
        {"open_tree_attr", 467},
#endif
};

static int add_list(scmp_filter_ctx ctx, const char *const *names, uint32_t action)
{
        for (size_t i = 0; names[i]; i++) {
                int nr = seccomp_syscall_resolve_name(names[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not known to this libseccomp: the default applies */
                int r = seccomp_rule_add(ctx, action, nr, 0);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int add_raw_denied(scmp_filter_ctx ctx)
{
        for (size_t i = 0; i < ELEMENTSOF(raw_denied); i++) {
                if (seccomp_syscall_resolve_name(raw_denied[i].name) != __NR_SCMP_ERROR)
                        continue; /* already added by name */
                int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), raw_denied[i].nr, 0);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* personality: only the query (0xffffffff) and the default persona. */
static int add_personality(scmp_filter_ctx ctx)
{
        static const unsigned long allowed[] = {PER_LINUX, 0xffffffffUL};
        for (size_t i = 0; i < ELEMENTSOF(allowed); i++) {
                int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                                         SCMP_A0(SCMP_CMP_EQ, allowed[i]));
                if (r < 0)
                        return r;
        }
        return 0;
}

static int build_syscalls(scmp_filter_ctx ctx)
{
        /* personality has argument rules of its own (below) */
        for (size_t i = 0; cage_seccomp_allowed[i]; i++) {
                if (strcmp(cage_seccomp_allowed[i], "personality") == 0)
                        continue;
                int nr = seccomp_syscall_resolve_name(cage_seccomp_allowed[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue;
                int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
                if (r < 0)
                        return r;
        }
        int r = add_personality(ctx);
        if (r == 0)
                r = add_list(ctx, cage_seccomp_denied, SCMP_ACT_ERRNO(EPERM));
        if (r == 0)
                r = add_raw_denied(ctx);
        /* cage_seccomp_absent: the default action already answers ENOSYS */
        return r;
}

/* ---- the arguments program ---- */

static const unsigned long namespace_flags[] = {
        CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
        CLONE_NEWIPC, CLONE_NEWUTS,  CLONE_NEWCGROUP, CLONE_NEWTIME,
};

/* clone(2) may not create namespaces (its flags are argument 0 on x86_64). */
static int add_clone_rules(scmp_filter_ctx ctx)
{
        for (size_t i = 0; i < ELEMENTSOF(namespace_flags); i++) {
                int r = seccomp_rule_add(
                        ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                        SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i]));
                if (r < 0)
                        return r;
        }
        return 0;
}

/* TIOCSTI / TIOCLINUX push input into a terminal (an escape to the caller's
 * shell), TIOCSETD changes its line discipline (loads kernel code paths no
 * program needs), TIOCCONS redirects the console. The request is an
 * unsigned int: mask 32 bits. */
static int add_tty_rules(scmp_filter_ctx ctx)
{
        static const unsigned long requests[] = {TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS};
        for (size_t i = 0; i < ELEMENTSOF(requests); i++) {
                int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, requests[i]));
                if (r < 0)
                        return r;
        }
        return 0;
}

#define AF_LAST        64 /* above every family a kernel defines (AF_MAX is 46 in 6.x) */
#define SOCK_TYPE_MASK 0xf

static bool family_allowed(unsigned long family, bool pair)
{
        if (pair)
                return family == AF_UNIX;
        return family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK;
}

/* Every family but the allowed ones, one value per rule (libseccomp takes
 * one comparison per argument in a rule), and anything above AF_LAST. */
static int add_family_rules(scmp_filter_ctx ctx, int nr, bool pair)
{
        int r;
        for (unsigned long f = 0; f <= AF_LAST; f++) {
                if (family_allowed(f, pair))
                        continue;
                if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                                          SCMP_A0(SCMP_CMP_EQ, f))) < 0)
                        return r;
        }
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                                SCMP_A0(SCMP_CMP_GT, (unsigned long)AF_LAST));
}

/* inet sockets: no raw or packet types (they would see or forge any
 * traffic of the namespace); netlink: routing only (no netfilter, xfrm,
 * audit, uevents, sock_diag). */
static int add_socket_rules(scmp_filter_ctx ctx)
{
        int r = add_family_rules(ctx, SCMP_SYS(socket), false);
        if (r == 0)
                r = add_family_rules(ctx, SCMP_SYS(socketpair), true);
        static const unsigned long inet[] = {AF_INET, AF_INET6};
        static const unsigned long bad_types[] = {SOCK_RAW, SOCK_PACKET};
        for (size_t i = 0; r == 0 && i < ELEMENTSOF(inet); i++)
                for (size_t t = 0; r == 0 && t < ELEMENTSOF(bad_types); t++)
                        r = seccomp_rule_add(
                                ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
                                SCMP_A0(SCMP_CMP_EQ, inet[i]),
                                SCMP_A1(SCMP_CMP_MASKED_EQ, SOCK_TYPE_MASK, bad_types[t]));
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
                                     SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                                     SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE));
        return r;
}

/* Where the mode argument sits for calls that set file modes. */
static const struct {
        const char *name;
        unsigned arg;
} mode_calls[] = {
        {"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"open", 2},  {"openat", 3},
        {"creat", 1}, {"mkdir", 1},  {"mkdirat", 2},  {"mknod", 1}, {"mknodat", 2},
};

/* No setuid/setgid bits: on an idmapped mount the sandbox user is the
 * host owner of the files (often root), and a setuid-root file it made
 * would be a privilege escalation for whoever runs it on the host. */
static int add_setid_mode_rules(scmp_filter_ctx ctx)
{
        static const unsigned long bits[] = {S_ISUID, S_ISGID};
        for (size_t i = 0; i < ELEMENTSOF(mode_calls); i++) {
                int nr = seccomp_syscall_resolve_name(mode_calls[i].name);
                if (nr == __NR_SCMP_ERROR)
                        continue;
                for (size_t b = 0; b < ELEMENTSOF(bits); b++) {
                        struct scmp_arg_cmp cmp = {.arg = mode_calls[i].arg,
                                                   .op = SCMP_CMP_MASKED_EQ,
                                                   .datum_a = bits[b],
                                                   .datum_b = bits[b]};
                        int r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &cmp);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static int build_arguments(scmp_filter_ctx ctx)
{
        int r = add_clone_rules(ctx);
        if (r == 0)
                r = add_tty_rules(ctx);
        if (r == 0)
                r = add_socket_rules(ctx);
        if (r == 0)
                r = add_setid_mode_rules(ctx);
        return r;
}

/* ---- export ---- */

static int export_one(int fd, uint32_t default_action, int (*build)(scmp_filter_ctx),
                      struct cage_error *err)
{
        scmp_filter_ctx ctx = seccomp_init(default_action);
        if (!ctx)
                return cage_fail(err, -ENOMEM, "seccomp_init");
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        /* A binary tree of syscall numbers rather than a list: the kernel
         * runs a filter for every syscall, and when it installs one it runs
         * it once per syscall number (its cache of what is always allowed),
         * so each launch pays for the path through the list ~450 times. */
        if (r == 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
        if (r == 0)
                r = build(ctx);
        if (r == 0)
                r = seccomp_export_bpf(ctx, fd);
        seccomp_release(ctx);
        if (r < 0)
                return cage_fail(err, r, "building the seccomp filter");
        return 0;
}

int cage_seccomp_policy_export(enum cage_seccomp_program which, int fd, struct cage_error *err)
{
        if (which == CAGE_SECCOMP_SYSCALLS)
                return export_one(fd, SCMP_ACT_ERRNO(ENOSYS), build_syscalls, err);
        return export_one(fd, SCMP_ACT_ALLOW, build_arguments, err);
}
