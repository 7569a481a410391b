/* Seccomp policy, compiled with libseccomp at build time (tools/
 * gen-seccomp.c turns it into the BPF program that src/core/seccomp.c
 * installs; nothing of libseccomp is needed at run time). Allow by default, refuse the kernel
 * attack surface a sandboxed program never needs. Denied calls fail with EPERM (so a test can tell
 * "the filter blocked it" from "the kernel refused it" by passing invalid arguments, which the
 * kernel would reject with EINVAL/EFAULT/EBADF); clone3 fails with ENOSYS so libc falls back to
 * clone(2), whose flags the filter can inspect; syscalls of any other ABI (i386, x32) kill the
 * process.
 *
 * Families: keyrings, bpf, perf, userfaultfd, io_uring, the ptrace family,
 * the mount family including the new mount API, namespaces, kexec and
 * modules, time setting, swap/reboot/acct, handle-based opens, TIOCSTI and
 * TIOCLINUX, setuid/setgid mode bits (see add_setid_mode_rules), and
 * AF_VSOCK sockets (vsock is not isolated by network
 * namespaces: it would reach the hypervisor host). */
#include "seccomp_policy.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/error.h"

const char *const cage_seccomp_denied[] = {
        /* keyrings */
        "add_key",
        "request_key",
        "keyctl",
        /* bpf, perf, userfaultfd, io_uring */
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        /* ptrace family */
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "kcmp",
        "pidfd_getfd",
        "process_madvise",
        /* mount family, old and new API */
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "open_tree_attr",
        /* namespaces */
        "unshare",
        "setns",
        /* kexec and modules */
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        /* host-wide state */
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "syslog",
        "quotactl",
        "quotactl_fd",
        "vhangup",
        "iopl",
        "ioperm",
        "uselib",
        "nfsservctl",
        "lookup_dcookie",
        /* handle-based opens bypass path checks ("shocker") */
        "name_to_handle_at",
        "open_by_handle_at",
        NULL,
};

#define NAMESPACE_FLAGS                                                                            \
        (CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | \
         CLONE_NEWCGROUP | CLONE_NEWTIME)

static int add_denied_syscalls(scmp_filter_ctx ctx)
{
        for (size_t i = 0; cage_seccomp_denied[i]; i++) {
                int nr = seccomp_syscall_resolve_name(cage_seccomp_denied[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not known to this libseccomp: nothing to deny */
                int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Syscalls newer than some libseccomp releases know, by x86_64 number. */
static const struct {
        const char *name;
        int nr;
} raw_denied[] = {
#ifdef __x86_64__
        {"open_tree_attr", 467},
#endif
};

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

static const unsigned long namespace_flags[] = {
        CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
        CLONE_NEWIPC, CLONE_NEWUTS,  CLONE_NEWCGROUP, CLONE_NEWTIME,
};

/* Where the mode argument sits for calls that set file modes. */
static const struct {
        const char *name;
        int nr_fallback; /* x86_64 number when libseccomp does not know it */
        unsigned arg;
} mode_calls[] = {
        {"chmod", -1, 1},   {"fchmod", -1, 1}, {"fchmodat", -1, 2}, {"fchmodat2", 452, 2},
        {"open", -1, 2},    {"openat", -1, 3}, {"creat", -1, 1},    {"mkdir", -1, 1},
        {"mkdirat", -1, 2}, {"mknod", -1, 1},  {"mknodat", -1, 2},
};

/* No setuid/setgid bits: on an idmapped mount the sandbox user is the
 * host owner of the files (often root), and a setuid-root file it made
 * would be a privilege escalation for whoever runs it on the host. openat2
 * hides its mode in memory, so it gets ENOSYS (libc does not need it). */
static int add_setid_mode_rules(scmp_filter_ctx ctx)
{
        static const unsigned long bits[] = {S_ISUID, S_ISGID};
        for (size_t i = 0; i < ELEMENTSOF(mode_calls); i++) {
                int nr = seccomp_syscall_resolve_name(mode_calls[i].name);
                if (nr == __NR_SCMP_ERROR)
                        nr = mode_calls[i].nr_fallback;
                if (nr < 0)
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
#ifdef __x86_64__
        int openat2 = seccomp_syscall_resolve_name("openat2");
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
                                openat2 != __NR_SCMP_ERROR ? openat2 : 437, 0);
#else
        return 0;
#endif
}

static int add_argument_rules(scmp_filter_ctx ctx)
{
        int r;
        /* clone(2) may not create namespaces (its flags are argument 0 on
         * x86_64); clone3 hides its flags in memory, so it gets ENOSYS and
         * libc falls back to clone(2). */
        for (size_t i = 0; i < ELEMENTSOF(namespace_flags); i++) {
                r = seccomp_rule_add(
                        ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                        SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i]));
                if (r < 0)
                        return r;
        }
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        if (r < 0)
                return r;
        /* TIOCSTI / TIOCLINUX push input into a terminal (escape to the
         * caller's shell); the request is an unsigned int, so mask 32 bits. */
        static const unsigned long tty_requests[] = {TIOCSTI, TIOCLINUX};
        for (size_t i = 0; i < ELEMENTSOF(tty_requests); i++) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, tty_requests[i]));
                if (r < 0)
                        return r;
        }
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                             SCMP_A0(SCMP_CMP_EQ, AF_VSOCK));
        if (r < 0)
                return r;
        return add_setid_mode_rules(ctx);
}

int cage_seccomp_policy_export(int fd, struct cage_error *err)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return cage_fail(err, -ENOMEM, "seccomp_init");
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r == 0)
                r = add_denied_syscalls(ctx);
        if (r == 0)
                r = add_raw_denied(ctx);
        if (r == 0)
                r = add_argument_rules(ctx);
        if (r == 0)
                r = seccomp_export_bpf(ctx, fd);
        seccomp_release(ctx);
        if (r < 0)
                return cage_fail(err, r, "building the seccomp filter");
        return 0;
}
