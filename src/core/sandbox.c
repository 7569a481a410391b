/* The containment pipeline. sandbox_clone() creates the child in new user,
 * pid, mount, net, ipc and uts namespaces; sandbox_child_main() then applies
 * every containment step in order, on one screen, each with a why where the
 * order matters. A failing step is reported to the supervisor over the
 * close-on-exec report pipe as (step, errno) and the child exits, so
 * launcher failures are never mistaken for the program's own. */
#include <errno.h>
#include <fcntl.h>
#include <linux/securebits.h>
#include <stdlib.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"
#include "sandbox.h"
#include "seccomp.h"
#include "spec.h"
#include "util/cleanup.h"
#include "util/fdutil.h"

_Noreturn void child_fail(const struct launch_plan *plan, const char *step, int err)
{
        struct child_report rep = {.kind = REPORT_SETUP_FAILED, .value = err};
        snprintf(rep.step, sizeof(rep.step), "%s", step);
        (void)!write(plan->report_fd, &rep, sizeof(rep));
        _exit(125);
}

/* A mount point the spec asked for cannot exist in this image: a request
 * error, reported apart from launcher failures. */
static _Noreturn void child_report_bad_mount(const struct launch_plan *plan, int index, int err)
{
        struct child_report rep = {.kind = REPORT_BAD_MOUNT, .value = err};
        snprintf(rep.step, sizeof(rep.step), "mounts[%d].target", index);
        (void)!write(plan->report_fd, &rep, sizeof(rep));
        _exit(125);
}

static void close_inherited_fds(const struct launch_plan *plan)
{
        int keep[7 + CAGE_MOUNTS_MAX] = {plan->stdin_fd, plan->stdout_fd, plan->stderr_fd,
                                         plan->report_fd, plan->sync_fd};
        size_t n = 5;
        if (plan->box) {
                keep[n++] = plan->box_init_fd;
                keep[n++] = plan->box_ctl_fd;
        }
        for (size_t i = 0; i < plan->spec->n_mounts; i++)
                if (plan->mount_fds[i] >= 0)
                        keep[n++] = plan->mount_fds[i];
        if (!(plan->disable & CAGE_DEBUG_KEEP_FDS) && close_fds_from(3, keep, n) < 0)
                child_fail(plan, "close inherited fds", errno);
}

/* The supervisor sends SYNC_MAPS_WRITTEN, then SYNC_IN_CGROUP. */
static void wait_for_supervisor(const struct launch_plan *plan, char expected)
{
        char got;
        ssize_t n;
        do
                n = read(plan->sync_fd, &got, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1 || got != expected)
                _exit(125); /* the supervisor is gone or failed: it reports */
}

/* Raw system calls, not glibc's wrappers: those broadcast the change to
 * every thread of the process (__nptl_setxid) and wait on futexes of the
 * supervisor's other threads, which do not exist in this clone — a thread
 * being created or exiting at clone time would hang the child forever. */
static void become_sandbox_user(const struct launch_plan *plan)
{
        /* Root's supplementary groups would still grant host group access. */
        if (plan->privileged && syscall(SYS_setgroups, 0, NULL) < 0)
                child_fail(plan, "setgroups", errno);
        uint32_t uid = plan->spec->uid, gid = plan->spec->gid;
        if (syscall(SYS_setresgid, gid, gid, gid) < 0)
                child_fail(plan, "setresgid", errno);
        if (syscall(SYS_setresuid, uid, uid, uid) < 0)
                child_fail(plan, "setresuid", errno);
}

static void bring_up_loopback(const struct launch_plan *plan)
{
        _cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
                child_fail(plan, "loopback flags", errno);
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
                child_fail(plan, "loopback up", errno);
}

static void close_source_fds(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

/* Per-user kernel objects of this user namespace (charged to its owner: as
 * root the sandbox's own host uid, else the caller): tight limits, and no
 * nested user namespace — the only way to any other nested namespace once
 * capabilities are gone, a second layer under the seccomp filter (which
 * also refuses fanotify). Set as root and rootless alike. The files are
 * opened through our own fresh /proc (a sysctl file belongs to the user
 * namespace that looks it up; permission is CAP_SYS_RESOURCE there, which
 * we hold until the drop) and written once our own namespaces exist:
 * building the root makes short-lived mount namespaces (detached trees). */
static const struct {
        const char *file;
        const char *value;
} userns_limits[] = {
        {"max_inotify_instances", "64"},
        {"max_inotify_watches", "16384"},
        {"max_user_namespaces", "0"},
};

#define N_USERNS_LIMITS ELEMENTSOF(userns_limits)

static bool sets_userns_limits(const struct launch_plan *plan)
{
        /* Root-owned namespaces (the unsafe build's switch) have none, as
         * before; a template's children set their own. */
        return !(plan->disable & CAGE_DEBUG_ROOT_OWNED_USERNS) && !plan->nests_namespaces;
}

static void open_userns_limits(const struct launch_plan *plan, int dir, int *fds)
{
        for (size_t i = 0; i < N_USERNS_LIMITS; i++) {
                fds[i] = -1;
                if (dir < 0) /* a kernel without them is fine */
                        continue;
                fds[i] = openat(dir, userns_limits[i].file, O_WRONLY | O_CLOEXEC);
                if (fds[i] < 0 && errno != ENOENT)
                        child_fail(plan, "user namespace limits", errno);
        }
}

static void write_userns_limits(const struct launch_plan *plan, int *fds)
{
        for (size_t i = 0; i < N_USERNS_LIMITS; i++) {
                if (fds[i] < 0)
                        continue;
                const char *v = userns_limits[i].value;
                if (write(fds[i], v, strlen(v)) < 0)
                        child_fail(plan, "user namespace limits", errno);
                close(fds[i]);
        }
}

/* Fault injection (unsafe_debug builds only, refused by validation
 * otherwise): lets tests drive the internal_error path of a named step. */
static void fault_point(const struct launch_plan *plan, const char *step)
{
        const char *want = plan->spec->debug_fail_step;
        if (want && strcmp(want, step) == 0)
                child_fail(plan, step, EIO);
}

_Noreturn void sandbox_child_main(const struct launch_plan *plan)
{
        const char *step = "";
        int fds[ROOTFS_SOURCE_FDS];
        int r;

        /* First, while we share the supervisor's fd table: a table of our
         * own with its fds below shared_fds_below only, so the thousands
         * above are neither copied nor closed one by one. */
        if (plan->shared_fds_below > 0 && syscall(SYS_close_range, (unsigned)plan->shared_fds_below,
                                                  ~0U, CLOSE_RANGE_UNSHARE) < 0)
                child_fail(plan, "unshare fd table", errno);
        /* Die with the supervisor; re-armed below, credential changes clear it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close_inherited_fds(plan);
        /* The supervisor writes our id maps first. */
        wait_for_supervisor(plan, SYNC_MAPS_WRITTEN);
        /* With the initial file-system uid (root's when the supervisor is
         * root), which may read what the sandbox uid cannot. */
        if ((r = rootfs_open_sources(plan, fds, &step)) < 0)
                child_fail(plan, step, -r);
        /* After the maps exist and before creating files on new tmpfs mounts,
         * which need a mapped fsuid (EOVERFLOW otherwise). */
        become_sandbox_user(plan);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int bad_mount = -1, sysctl_user = -1;
        if ((r = rootfs_build(plan, fds, &step, &bad_mount,
                              sets_userns_limits(plan) ? &sysctl_user : NULL)) < 0 &&
            bad_mount >= 0)
                child_report_bad_mount(plan, bad_mount, -r);
        if (r < 0)
                child_fail(plan, step, -r);
        int limit_fds[N_USERNS_LIMITS];
        open_userns_limits(plan, sysctl_user, limit_fds);
        if (sysctl_user >= 0)
                close(sysctl_user);
        fault_point(plan, "pivot_root");
        if ((r = rootfs_pivot(&step)) < 0)
                child_fail(plan, step, -r);
        /* O_PATH fds to host directories would let a process fchdir out. */
        close_source_fds(fds, ELEMENTSOF(fds));
        if (sethostname("codecage", 8) < 0)
                child_fail(plan, "sethostname", errno);
        if (!(plan->disable & CAGE_DEBUG_NO_NETNS))
                bring_up_loopback(plan);
        /* Meanwhile the supervisor made our cgroup; nothing below may run
         * before we are in it (limits apply from the first fork on). */
        wait_for_supervisor(plan, SYNC_IN_CGROUP);
        close(plan->sync_fd);
        /* After joining the cgroup: the new cgroup namespace is rooted at it. */
        if (unshare(CLONE_NEWCGROUP) < 0)
                child_fail(plan, "unshare cgroup namespace", errno);
        /* Every namespace of ours exists now. */
        write_userns_limits(plan, limit_fds);
        /* No controlling terminal: the program cannot signal or inject into ours. */
        if (!(plan->disable & CAGE_DEBUG_NO_SETSID) && setsid() < 0)
                child_fail(plan, "setsid", errno);
        if ((r = rlimits_apply(plan, &step)) < 0)
                child_fail(plan, step, -r);
        /* Without no_new_privs (unsafe debug builds) the kernel installs a
         * filter only for a CAP_SYS_ADMIN holder: install it before the drop
         * (it denies nothing the steps below use). */
        bool filter_early = (plan->disable & CAGE_DEBUG_NO_NO_NEW_PRIVS) &&
                            !(plan->disable & CAGE_DEBUG_NO_SECCOMP);
        if (filter_early && (r = cage_seccomp_install(plan->seccomp)) < 0)
                child_fail(plan, "install seccomp filter", -r);
        /* After every step that needs a capability (mounts, hostname, lo). */
        if (!(plan->disable & CAGE_DEBUG_NO_CAPS_DROP) && (r = caps_drop_all()) < 0)
                child_fail(plan, "drop capabilities", -r);
        /* init keeps the supervisor's memory image: nobody may ptrace or read it. */
        if (prctl(PR_SET_DUMPABLE, 0) < 0)
                child_fail(plan, "set non-dumpable", errno);
        /* Before seccomp (required without CAP_SYS_ADMIN) and before exec. */
        if (!(plan->disable & CAGE_DEBUG_NO_NO_NEW_PRIVS) &&
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                child_fail(plan, "no_new_privs", errno);
        /* Last, so every step above could use the syscalls it denies. */
        fault_point(plan, "install seccomp filter");
        if (!(plan->disable & CAGE_DEBUG_NO_SECCOMP) && !filter_early &&
            (r = cage_seccomp_install(plan->seccomp)) < 0)
                child_fail(plan, "install seccomp filter", -r);
        init_run(plan);
}

static unsigned long long namespace_flags(uint32_t disable)
{
        unsigned long long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
        if (!(disable & CAGE_DEBUG_NO_PIDNS))
                flags |= CLONE_NEWPID;
        if (!(disable & CAGE_DEBUG_NO_NETNS))
                flags |= CLONE_NEWNET;
        return flags;
}

/* The creating thread's identity for the clone: a new user namespace is
 * owned by the euid that creates it. The file-system uid stays the
 * caller's (root's), so the child opens its bind sources with the access it
 * had before. Raw syscalls, so the change stays on this thread (glibc's
 * setresuid applies it to every thread); capabilities are kept
 * (SECBIT_NO_SETUID_FIXUP) for CLONE_INTO_CGROUP's permission check and the
 * way back. */
struct clone_identity {
        uid_t ruid, euid, suid;
        int securebits;
        bool switched;
};

static int become_owner(const struct launch_plan *plan, struct clone_identity *id)
{
        id->switched = false;
        if (!plan->owner_uid)
                return 0;
        int bits = prctl(PR_GET_SECUREBITS);
        if (bits < 0 || syscall(SYS_getresuid, &id->ruid, &id->euid, &id->suid) < 0)
                return -errno;
        id->securebits = bits;
        if (prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP) < 0)
                return -errno;
        uid_t u = plan->owner_uid;
        if (syscall(SYS_setresuid, u, u, u) < 0) {
                int e = -errno;
                prctl(PR_SET_SECUREBITS, bits);
                return e;
        }
        id->switched = true;
        syscall(SYS_setfsuid, id->euid); /* returns the old fsuid, never fails */
        return 0;
}

static void restore_identity(const struct clone_identity *id)
{
        if (!id->switched)
                return;
        /* CAP_SETUID was kept, so this cannot fail; a supervisor thread left
         * running as a sandbox's uid must not go on. */
        if (syscall(SYS_setresuid, id->ruid, id->euid, id->suid) < 0 ||
            prctl(PR_SET_SECUREBITS, id->securebits) < 0)
                abort();
}

pid_t sandbox_clone(const struct launch_plan *plan, int *ret_pidfd)
{
        int pidfd = -1;
        struct clone_args args = {
                .flags = namespace_flags(plan->disable) | CLONE_PIDFD |
                         (plan->shared_fds_below > 0 ? CLONE_FILES : 0),
                .pidfd = (uint64_t)(uintptr_t)&pidfd,
                .exit_signal = SIGCHLD,
        };
        if (plan->clone_cgroup_fd >= 0) {
                args.flags |= CLONE_INTO_CGROUP;
                args.cgroup = (uint64_t)plan->clone_cgroup_fd;
        }
        struct clone_identity id;
        int r = become_owner(plan, &id);
        if (r < 0)
                return r;
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
                sandbox_child_main(plan);
        int e = errno;
        restore_identity(&id);
        if (pid < 0)
                return -e;
        *ret_pidfd = pidfd;
        return (pid_t)pid;
}
