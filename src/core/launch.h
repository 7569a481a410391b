/* The launch plan: everything the sandboxed child needs, computed by the
 * supervisor before clone(). The child runs after a raw clone in a process
 * that may have had other threads, so it must not allocate or take locks:
 * it only reads this plan and makes system calls. */
#ifndef CODECAGE_CORE_LAUNCH_H
#define CODECAGE_CORE_LAUNCH_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "codecage/codecage.h"

struct cage_seccomp_filters;

#define STAGING_ROOT     "/tmp" /* where the new root is assembled, in the child's mount ns */
#define ROOT_ENTRIES_MAX 64

enum root_entry_kind {
        ROOT_ENTRY_DIR_BIND,  /* read-only bind of a host directory */
        ROOT_ENTRY_FILE_BIND, /* read-only bind of a host file */
        ROOT_ENTRY_SYMLINK,   /* a symlink with the same target */
        ROOT_ENTRY_FILE_DATA, /* a file written from memory */
        ROOT_ENTRY_EMPTY_DIR, /* a directory */
        ROOT_ENTRY_FILE_OVER, /* data bound read-only over a regular file of an earlier bind */
};

/* One path of the new root, relative to it (e.g. "usr", "etc/passwd"). */
struct root_entry {
        enum root_entry_kind kind;
        char path[128];
        char source[256]; /* host path (binds) or link target (symlinks) */
        const char *data; /* FILE_DATA and FILE_OVER contents */
        size_t data_len;
};

struct launch_plan {
        const struct cage_spec *spec;
        bool privileged; /* root case: clear supplementary groups */
        /* ROOT_ENTRIES_MAX entries (26 KiB), allocated by plan_build() and
         * freed by plan_free(): a box keeps its plan's other fields for its
         * life, and every sandbox cloned from the server copies its heap. */
        struct root_entry *root;
        size_t n_root;
        const char *proc_masked[24]; /* /proc files the sandbox user could open */
        size_t n_proc_masked;
        bool scratch_workspace; /* /workspace on the scratch tmpfs (no user mount) */
        char scratch_opts[96];  /* tmpfs options (size=, nr_inodes=) of the scratch tmpfs */
        char *const *envp;
        bool envp_borrowed; /* envp is not ours to free */
        /* Copies of spec->argv and spec->workdir (the spec's strings may live
         * in the supervisor's argv area, which init wipes), and that area,
         * which /proc/1/cmdline would otherwise show to the sandbox. */
        char *const *argv;
        const char *workdir;
        char *strings; /* owns argv, workdir and (unless borrowed) envp strings */
        uintptr_t arg_start, arg_end;
        const char *path_env; /* PATH value used to find argv[0] */
        const struct cage_seccomp_filters *seccomp;
        int stdin_fd, stdout_fd, stderr_fd; /* child ends */
        int report_fd;                      /* child -> supervisor, close-on-exec */
        int sync_fd;                        /* supervisor -> child: maps written */
        int mount_fds[CAGE_MOUNTS_MAX];     /* idmapped detached mounts, -1: plain bind */
        uint32_t disable;                   /* enum cage_debug_disable */
        bool rlimit_memory;                 /* no memory controller: cap address space instead */
        bool box;                           /* long-lived sandbox: pid 1 is codecage-init */
        int box_init_fd;                    /* box: the sealed codecage-init memfd */
        int box_ctl_fd;                     /* box: init's end of the control socket */
        int clone_cgroup_fd;                /* v2: the group the child is born in, or -1 */
        /* As root: the host uid the child is cloned as, so its user namespace
         * is owned by (and its per-user kernel counts are charged to) the
         * sandbox's own uid; its file-system uid stays root's until it
         * becomes the sandbox user. 0: as the caller. */
        uid_t owner_uid;
        bool nests_namespaces; /* a zygote's template: no user namespace limits */
        /* > 0: cloned sharing the supervisor's fd table (CLONE_FILES), with
         * every fd above in slots below this number; the child's first step
         * is a private copy of only those (launcher.c, "lean clones"). */
        int shared_fds_below;
};

/* Bytes the supervisor sends on sync_fd, in this order. */
#define SYNC_MAPS_WRITTEN 'm'
#define SYNC_IN_CGROUP    'c'

/* Records the child sends on report_fd; each is one atomic pipe write. */
enum report_kind {
        REPORT_SETUP_FAILED = 1, /* value = errno; step names the launch step */
        REPORT_EXEC_FAILED = 2,  /* value = errno of execve */
        REPORT_EXITED = 3,       /* value = wait status of the program */
        REPORT_STARTED = 4,      /* the program's pid inside (sent before exec) */
        REPORT_BAD_MOUNT = 5,    /* value = errno; step = "mounts[i].target" */
};

struct child_report {
        int32_t kind;
        int32_t value;
        char step[120];
};

/* Child side; never returns. */
_Noreturn void sandbox_child_main(const struct launch_plan *plan);

/* Reports a failed step and exits; async-signal-safe. */
_Noreturn void child_fail(const struct launch_plan *plan, const char *step, int err);

/* rootfs.c: builds the new root under STAGING_ROOT and pivots into it.
 * rootfs_open_sources() fills exactly ROOTFS_SOURCE_FDS entries (-1 where
 * unused). */
#define ROOTFS_DEV_NODES  6
#define ROOTFS_SOURCE_FDS (ROOT_ENTRIES_MAX + CAGE_MOUNTS_MAX + ROOTFS_DEV_NODES)
int rootfs_open_sources(const struct launch_plan *plan, int *fds, const char **step);
/* On a mount point that cannot be made (a read-only or non-directory
 * parent in the image: the caller's mistake), *bad_mount is its index.
 * With sysctl_user, *sysctl_user is an O_PATH fd of the new /proc's
 * sys/user, taken before it is made read-only (-1 if the kernel has none). */
int rootfs_build(const struct launch_plan *plan, const int *fds, const char **step, int *bad_mount,
                 int *sysctl_user);
int rootfs_pivot(const char **step);
/* The /proc directories made read-only and hidden (for the zygote, which
 * masks a fresh /proc the same way). */
void rootfs_proc_dirs(const char *const **readonly, size_t *n_readonly, const char *const **hidden,
                      size_t *n_hidden);

/* caps.c / rlimit.c */
int caps_drop_all(void);
int rlimits_apply(const struct launch_plan *plan, const char **step);
/* What rlimits_apply() sets, in order (at most RLIMITS_MAX). */
#define RLIMITS_MAX 6
struct rlimit_setting {
        int resource;
        uint64_t cur, max;
        const char *step;
};
size_t rlimits_list(const struct launch_plan *plan, struct rlimit_setting *out);
int rlimit_memory_fallback(const struct launch_plan *plan);

/* init.c: pid 1 inside the sandbox: starts the program, reaps, reports.
 * With plan->box set, pid 1 is codecage-init instead (exec'd from
 * that fd with the control socket as BOX_CTL_FD). */
_Noreturn void init_run(const struct launch_plan *plan);

#endif
