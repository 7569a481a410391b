/* The sandbox's filesystem, built inside the child's private mount
 * namespace: a small tmpfs root holding read-only binds of the image's
 * directories, synthetic /etc files, a fresh /proc with sensitive entries
 * masked, a minimal /dev, and one sized "scratch" tmpfs that backs /tmp,
 * /dev/shm and (for one-shot runs) /workspace, so disk_bytes caps them all.
 * Then pivot_root into it and detach the old root.
 *
 * Runs in the child: no allocation, paths in stack buffers. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"
#include "util/cleanup.h"
#include "util/fdutil.h"

#define DEV_NODES_MAX ROOTFS_DEV_NODES
static const char *const dev_nodes[DEV_NODES_MAX] = {"null",   "zero",    "full",
                                                     "random", "urandom", "tty"};

#define FD_INDEX_MOUNT(plan, i) ((plan)->n_root + (i))
#define FD_INDEX_DEV(plan, i)   ((plan)->n_root + CAGE_MOUNTS_MAX + (i))

#define RO_FLAGS (MS_RDONLY | MS_NOSUID | MS_NODEV)

static int fd_path(int fd, char *buf, size_t size)
{
        return snprintf(buf, size, "/proc/self/fd/%d", fd) < (int)size ? 0 : -ENAMETOOLONG;
}

static int path_join(char *buf, size_t size, const char *dir, const char *name)
{
        int n = snprintf(buf, size, "%s/%s", dir, name);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int staged(char *buf, size_t size, const char *rel)
{
        while (*rel == '/')
                rel++;
        return snprintf(buf, size, STAGING_ROOT "/%s", rel) < (int)size ? 0 : -ENAMETOOLONG;
}

/* Opens every bind source as an O_PATH fd. Called while the child still has
 * its initial credentials, so sources the caller may read but the sandbox
 * uid may not (e.g. under /root when run as root) can still be bound. */
int rootfs_open_sources(const struct launch_plan *plan, int *fds, const char **step)
{
        for (size_t i = 0; i < ROOTFS_SOURCE_FDS; i++)
                fds[i] = -1;
        for (size_t i = 0; i < plan->n_root; i++) {
                const struct root_entry *e = &plan->root[i];
                if (e->kind != ROOT_ENTRY_DIR_BIND && e->kind != ROOT_ENTRY_FILE_BIND)
                        continue;
                fds[i] = open(e->source, O_PATH | O_CLOEXEC | O_NOFOLLOW);
                if (fds[i] < 0) {
                        *step = "open image path";
                        return -errno;
                }
        }
        for (size_t i = 0; i < plan->spec->n_mounts; i++) {
                int fd = plan->mount_fds[i] >= 0
                                 ? plan->mount_fds[i]
                                 : open(plan->spec->mounts[i].source, O_PATH | O_CLOEXEC);
                if (fd < 0) {
                        *step = "open mount source";
                        return -errno;
                }
                fds[FD_INDEX_MOUNT(plan, i)] = fd;
        }
        for (size_t i = 0; i < DEV_NODES_MAX; i++) {
                char path[32];
                snprintf(path, sizeof(path), "/dev/%s", dev_nodes[i]);
                fds[FD_INDEX_DEV(plan, i)] = open(path, O_PATH | O_CLOEXEC);
        }
        return 0;
}

static int bind_fd(int fd, const char *target, unsigned long extra, bool recursive)
{
        char src[64];
        int r = fd_path(fd, src, sizeof(src));
        if (r < 0)
                return r;
        if (mount(src, target, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL) < 0)
                return -errno;
        if (!extra)
                return 0;
        /* A bind cannot change flags in the same call; remount it. */
        if (mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | extra, NULL) < 0)
                return -errno;
        return 0;
}

static int make_file(const char *path, const char *data, size_t len, mode_t mode)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return -errno;
        int r = data ? write_all(fd, data, len) : 0;
        close(fd);
        return r;
}

static int open_in_root(int rootfd, const char *rel, uint64_t flags);
static int attach_tree(int src_fd, int target_fd, uint64_t attrs, bool clone);

/* Binds e->data read-only over the regular file e->path, which lies in an
 * image's read-only bind (the image's own /etc/hosts, say). The data is a
 * file of the root tmpfs in the directory /dev will cover (reserved: no
 * image entry is there), so no filesystem of its own (see hide_proc_dirs);
 * it is not unlinked, since the root tmpfs could not be made read-only
 * with an unlinked file in use. The target resolves inside the new root,
 * and one that is no regular file (a symlink could lead anywhere) is left
 * as it is. */
static int cover_file(const struct root_entry *e, size_t index)
{
        _cleanup_close_ int rootfd = open(STAGING_ROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0)
                return -errno;
        _cleanup_close_ int target = open_in_root(rootfd, e->path, O_PATH | O_NOFOLLOW);
        struct stat st;
        if (target < 0 || fstat(target, &st) < 0 || !S_ISREG(st.st_mode))
                return 0;
        char dir[PATH_MAX], name[48], file[PATH_MAX];
        snprintf(name, sizeof(name), ".codecage-cover-%zu", index);
        int r = staged(dir, sizeof(dir), "dev");
        if (r < 0 || (r = path_join(file, sizeof(file), dir, name)) < 0)
                return r;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        if ((r = make_file(file, e->data, e->data_len, 0644)) < 0)
                return r;
        _cleanup_close_ int src = open(file, O_PATH | O_CLOEXEC);
        if (src < 0)
                return -errno;
        return attach_tree(src, target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                           true);
}

static int build_entry(const struct root_entry *e, size_t index, int fd)
{
        char dst[PATH_MAX];
        int r = staged(dst, sizeof(dst), e->path);
        if (r < 0)
                return r;
        switch (e->kind) {
        case ROOT_ENTRY_DIR_BIND:
                if (mkdir(dst, 0755) < 0 && errno != EEXIST)
                        return -errno;
                return bind_fd(fd, dst, RO_FLAGS, true);
        case ROOT_ENTRY_FILE_BIND:
                if ((r = make_file(dst, NULL, 0, 0644)) < 0)
                        return r;
                return bind_fd(fd, dst, RO_FLAGS, false);
        case ROOT_ENTRY_SYMLINK:
                return symlink(e->source, dst) < 0 ? -errno : 0;
        case ROOT_ENTRY_FILE_DATA:
                return make_file(dst, e->data, e->data_len, 0644);
        case ROOT_ENTRY_EMPTY_DIR:
                return mkdir(dst, 0755) < 0 && errno != EEXIST ? -errno : 0;
        case ROOT_ENTRY_FILE_OVER:
                return cover_file(e, index);
        }
        return -EINVAL;
}

static const char *const proc_readonly_dirs[] = {"sys", "bus", "fs", "irq"};
static const char *const proc_hidden_dirs[] = {"acpi", "scsi", "asound", "firmware", "driver"};

#define PROC_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

/* The hidden directories show the empty directory the new /proc covers
 * (on the root tmpfs, read-only once built), bound read-only: no
 * filesystem of their own. Each superblock the kernel holds costs every
 * memory cgroup on the machine a slot for as long as it lives (each
 * group's shrinker table is sized by the highest superblock count), so
 * memory per sandbox would grow with the number of sandboxes: a sandbox
 * makes as few as it can. */
static int hide_proc_dirs(const char *proc, int empty_dir)
{
        char p[PATH_MAX];
        for (size_t i = 0; i < ELEMENTSOF(proc_hidden_dirs); i++) {
                if (path_join(p, sizeof(p), proc, proc_hidden_dirs[i]) < 0)
                        return -ENAMETOOLONG;
                int r = bind_fd(empty_dir, p, MS_RDONLY | PROC_FLAGS, false);
                if (r < 0 && r != -ENOENT)
                        return r;
        }
        return 0;
}

static int mask_proc(const struct launch_plan *plan, const char *proc, int null_fd, int empty_dir)
{
        char p[PATH_MAX];
        int r;
        for (size_t i = 0; i < plan->n_proc_masked; i++) {
                if (path_join(p, sizeof(p), proc, plan->proc_masked[i]) < 0)
                        return -ENAMETOOLONG;
                r = bind_fd(null_fd, p, 0, false);
                if (r < 0 && r != -ENOENT)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(proc_readonly_dirs); i++) {
                if (path_join(p, sizeof(p), proc, proc_readonly_dirs[i]) < 0)
                        return -ENAMETOOLONG;
                if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0) {
                        if (errno == ENOENT)
                                continue;
                        return -errno;
                }
                if (mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, NULL) < 0)
                        return -errno;
        }
        return hide_proc_dirs(proc, empty_dir);
}

/* An O_PATH fd of the fresh /proc's sys/user, before the masks make sys
 * read-only, for the user namespace's limits (sandbox.c); -1 where the
 * kernel has none. Through the host's /proc, each live sandbox's user
 * namespace adds a /proc/sys/user dentry to one hash chain (same parent,
 * same name), so every launch's lookup walked one per live sandbox: ~0.3 ms
 * each at 2000. A procfs instance of our own has its own dentries. */
static int open_sysctl_user(const char *proc, int *ret)
{
        char p[PATH_MAX];
        if (path_join(p, sizeof(p), proc, "sys/user") < 0)
                return -ENAMETOOLONG;
        *ret = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return *ret >= 0 || errno == ENOENT ? 0 : -errno;
}

static int build_proc(const struct launch_plan *plan, const int *fds, const char **step,
                      int *sysctl_user)
{
        char proc[PATH_MAX];
        staged(proc, sizeof(proc), "proc");
        *step = "mount /proc";
        if (mkdir(proc, 0555) < 0 && errno != EEXIST)
                return -errno;
        /* The (empty) directory the new /proc covers. */
        _cleanup_close_ int under = open(proc, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (under < 0)
                return -errno;
        /* A fresh procfs shows only this pid namespace. (Debug builds
         * without a pid namespace may not mount one: bind the host's.) */
        if (plan->disable & CAGE_DEBUG_NO_PIDNS) {
                if (mount("/proc", proc, NULL, MS_BIND | MS_REC, NULL) < 0)
                        return -errno;
        } else if (mount("proc", proc, "proc", PROC_FLAGS, NULL) < 0) {
                return -errno;
        }
        int r;
        *step = "open user namespace limits";
        if (sysctl_user && (r = open_sysctl_user(proc, sysctl_user)) < 0)
                return r;
        if (plan->disable & CAGE_DEBUG_NO_PROC_MASK)
                return 0;
        *step = "mask /proc entries";
        return mask_proc(plan, proc, fds[FD_INDEX_DEV(plan, 0)], under);
}

static const char *const dev_links[][2] = {
        {"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
        {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},
};

static int build_dev(const struct launch_plan *plan, const int *fds, const char *scratch,
                     const char **step)
{
        char dev[PATH_MAX], p[PATH_MAX];
        staged(dev, sizeof(dev), "dev");
        *step = "mount /dev";
        if (mkdir(dev, 0755) < 0 && errno != EEXIST)
                return -errno;
        /* Writable by the sandbox user, like a container's: a directory of
         * the scratch tmpfs (so within its bytes and files), not a tmpfs of
         * its own (see hide_proc_dirs for what each superblock costs). */
        if (path_join(p, sizeof(p), scratch, "dev") < 0)
                return -ENAMETOOLONG;
        if (mkdir(p, 0755) < 0 || chmod(p, 0755) < 0)
                return -errno;
        if (mount(p, dev, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, dev, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
                    0)
                return -errno;
        *step = "bind device nodes";
        for (size_t i = 0; i < DEV_NODES_MAX; i++) {
                int fd = fds[FD_INDEX_DEV(plan, i)];
                if (fd < 0)
                        continue;
                if (path_join(p, sizeof(p), dev, dev_nodes[i]) < 0)
                        return -ENAMETOOLONG;
                int r = make_file(p, NULL, 0, 0666);
                if (r == 0)
                        r = bind_fd(fd, p, 0, false);
                if (r < 0)
                        return r;
        }
        *step = "populate /dev";
        for (size_t i = 0; i < ELEMENTSOF(dev_links); i++) {
                if (path_join(p, sizeof(p), dev, dev_links[i][0]) < 0)
                        return -ENAMETOOLONG;
                if (symlink(dev_links[i][1], p) < 0)
                        return -errno;
        }
        if (path_join(p, sizeof(p), dev, "pts") < 0)
                return -ENAMETOOLONG;
        if (mkdir(p, 0755) < 0)
                return -errno;
        *step = "mount /dev/pts";
        /* A private devpts instance: no access to the host's terminals. */
        if (mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620") < 0)
                return -errno;
        if (path_join(p, sizeof(p), dev, "shm") < 0)
                return -ENAMETOOLONG;
        return mkdir(p, 01777) < 0 ? -errno : 0;
}

/* One tmpfs sized by disk_bytes behind /dev, /tmp, /dev/shm and
 * /workspace, staged at `scratch` until bind_scratch has bound it. */
static int mount_scratch(const struct launch_plan *plan, const char *scratch, const char **step)
{
        *step = "mount scratch tmpfs";
        if (mkdir(scratch, 0700) < 0)
                return -errno;
        if (mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, plan->scratch_opts) < 0)
                return -errno;
        return 0;
}

static int bind_scratch(const struct launch_plan *plan, const char *scratch, const char **step)
{
        static const char *const dirs[][2] = {
                {"tmp", "tmp"}, {"shm", "dev/shm"}, {"workspace", "workspace"}};
        char src[PATH_MAX], dst[PATH_MAX];
        *step = "bind /tmp, /dev/shm, /workspace";
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                bool is_ws = strcmp(dirs[i][0], "workspace") == 0;
                if (is_ws && !plan->scratch_workspace)
                        continue;
                if (path_join(src, sizeof(src), scratch, dirs[i][0]) < 0)
                        return -ENAMETOOLONG;
                staged(dst, sizeof(dst), dirs[i][1]);
                if (mkdir(src, is_ws ? 0755 : 01777) < 0 || chmod(src, is_ws ? 0755 : 01777) < 0)
                        return -errno;
                if (mkdir(dst, 0755) < 0 && errno != EEXIST)
                        return -errno;
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        return -errno;
        }
        if (plan->scratch_workspace) {
                snprintf(dst, sizeof(dst), STAGING_ROOT "/workspace/output");
                if (mkdir(dst, 0755) < 0)
                        return -errno;
        }
        /* The binds keep the tmpfs alive; its staging mount point goes. */
        if (umount2(scratch, MNT_DETACH) < 0 || rmdir(scratch) < 0)
                return -errno;
        return 0;
}

static int open_in_root(int rootfd, const char *rel, uint64_t flags)
{
        /* Symlinks resolve as if the staging root were "/": an image's
         * "evil -> /var/tmp" can never lead the launcher to the host. */
        struct open_how how = {.flags = flags | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        int fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
        return fd < 0 ? -errno : fd;
}

/* Creates `name` in dirfd as a directory or an empty file; EEXIST is fine. */
static int create_entry(int dirfd, const char *name, bool dir)
{
        if (dir)
                return mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return errno == EEXIST ? 0 : -errno;
        close(fd);
        return 0;
}

/* Returns an O_PATH fd of `target` (absolute, inside the sandbox) under
 * rootfd, creating missing parents and the final entry (a directory or an
 * empty file). Every step resolves inside the root. */
static int mount_point_fd(int rootfd, const char *target, bool is_dir)
{
        char path[PATH_MAX];
        if (strlen(target) >= sizeof(path))
                return -ENAMETOOLONG;
        strcpy(path, target + 1);
        int parent = open_in_root(rootfd, ".", O_PATH | O_DIRECTORY);
        for (char *comp = path; parent >= 0 && *comp;) {
                char *slash = strchr(comp, '/');
                bool last = !slash;
                uint64_t want = O_PATH | (last && !is_dir ? 0 : O_DIRECTORY);
                if (slash)
                        *slash = '\0';
                int fd = open_in_root(rootfd, path, want);
                if (fd == -ENOENT) {
                        int r = create_entry(parent, comp, !last || is_dir);
                        fd = r < 0 ? r : open_in_root(rootfd, path, want);
                }
                close(parent);
                parent = fd;
                if (last)
                        break;
                *slash = '/';
                comp = slash + 1;
        }
        return parent;
}

/* Clones src_fd's tree, applies the flags, attaches it at target_fd. */
static int attach_tree(int src_fd, int target_fd, uint64_t attrs, bool clone)
{
        _cleanup_close_ int tree = -1;
        if (clone) {
                tree = (int)syscall(SYS_open_tree, src_fd, "",
                                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH |
                                            AT_RECURSIVE);
                if (tree < 0)
                        return -errno;
                struct mount_attr attr = {.attr_set = attrs};
                if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                            sizeof(attr)) < 0)
                        return -errno;
                src_fd = tree;
        }
        if (syscall(SYS_move_mount, src_fd, "", target_fd, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return -errno;
        return 0;
}

static int build_user_mounts(const struct launch_plan *plan, const int *fds, const char **step,
                             int *bad_mount)
{
        _cleanup_close_ int rootfd = open(STAGING_ROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0)
                return -errno;
        for (size_t i = 0; i < plan->spec->n_mounts; i++) {
                const struct cage_mount *m = &plan->spec->mounts[i];
                int fd = fds[FD_INDEX_MOUNT(plan, i)];
                bool prepared = plan->mount_fds[i] >= 0; /* idmapped, flags set */
                struct stat st;
                *step = "user mount";
                if (fstat(fd, &st) < 0)
                        return -errno;
                *step = "user mount point";
                _cleanup_close_ int target = mount_point_fd(rootfd, m->target, S_ISDIR(st.st_mode));
                if (target < 0) {
                        *bad_mount = (int)i;
                        return target;
                }
                *step = "user mount";
                uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                 (m->writable ? 0 : MOUNT_ATTR_RDONLY);
                int r = attach_tree(fd, target, attrs, !prepared);
                if (r < 0)
                        return r;
        }
        return 0;
}

int rootfs_build(const struct launch_plan *plan, const int *fds, const char **step, int *bad_mount,
                 int *sysctl_user)
{
        int r;
        *step = "make mounts private";
        /* Before any other mount: nothing we mount may propagate to the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        *step = "mount root tmpfs";
        if (mount("tmpfs", STAGING_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=0755") < 0)
                return -errno;
        for (size_t i = 0; i < plan->n_root; i++) {
                *step = "populate root";
                if ((r = build_entry(&plan->root[i], i, fds[i])) < 0)
                        return r;
        }
        char scratch[PATH_MAX];
        staged(scratch, sizeof(scratch), ".scratch");
        if ((r = mount_scratch(plan, scratch, step)) < 0 ||
            (r = build_proc(plan, fds, step, sysctl_user)) < 0 ||
            (r = build_dev(plan, fds, scratch, step)) < 0 ||
            (r = bind_scratch(plan, scratch, step)) < 0 ||
            (r = build_user_mounts(plan, fds, step, bad_mount)) < 0)
                return r;
        *step = "remount root read-only";
        /* Last: every mount point exists now, and nothing may add more. */
        if (mount(NULL, STAGING_ROOT, NULL, MS_REMOUNT | RO_FLAGS, "size=8m,mode=0755") < 0)
                return -errno;
        return 0;
}

int rootfs_pivot(const char **step)
{
        *step = "pivot_root";
        if (chdir(STAGING_ROOT) < 0)
                return -errno;
        /* pivot_root(".", ".") stacks the old root under the new one; the
         * detach then removes every host mount from this namespace. */
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                return -errno;
        *step = "detach old root";
        if (umount2(".", MNT_DETACH) < 0)
                return -errno;
        return chdir("/") < 0 ? -errno : 0;
}

void rootfs_proc_dirs(const char *const **readonly, size_t *n_readonly, const char *const **hidden,
                      size_t *n_hidden)
{
        *readonly = proc_readonly_dirs;
        *n_readonly = ELEMENTSOF(proc_readonly_dirs);
        *hidden = proc_hidden_dirs;
        *n_hidden = ELEMENTSOF(proc_hidden_dirs);
}
