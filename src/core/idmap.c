/* Idmapped mounts; see idmap.h.
 *
 * The idmapping is a user namespace whose uid_map reads "O HOSTUID 1": an
 * on-disk owner O is treated as id O inside it and shown as HOSTUID (the
 * sandbox user's host uid); writes by HOSTUID are stored as O. The namespace
 * is made by a short-lived child that only waits to be killed (and is). */
#include "idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

static int write_map(pid_t pid, const char *file, unsigned inside, unsigned outside)
{
        char path[64], map[64];
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
        snprintf(map, sizeof(map), "%u %u 1\n", inside, outside);
        return write_file_at(AT_FDCWD, path, map);
}

/* The child that holds the namespace: it only waits to be killed. It
 * shares no fd table with us (no CLONE_FILES), so waiting for a pipe's end
 * of file would hang whenever another thread's child inherited that pipe:
 * it is killed instead, and dies with us if we die first. */
static void hold_namespace(pid_t parent)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(0);
        for (;;)
                pause();
}

/* A user namespace mapping O→host_uid and G→host_gid, as an fd. */
static int idmap_userns(uid_t owner, gid_t group, uid_t host_uid, gid_t host_gid)
{
        pid_t parent = getpid();
        struct clone_args args = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
                hold_namespace(parent);
        int r = pid < 0 ? -errno : 0;
        if (r == 0)
                r = write_map((pid_t)pid, "uid_map", owner, host_uid);
        if (r == 0)
                r = write_map((pid_t)pid, "gid_map", group, host_gid);
        int fd = -1;
        if (r == 0) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        r = -errno;
        }
        if (pid > 0) {
                kill((pid_t)pid, SIGKILL);
                while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        return r < 0 ? r : fd;
}

int idmap_mount_open(const char *source, uid_t host_uid, gid_t host_gid, bool writable,
                     struct cage_error *err)
{
        struct stat st;
        if (stat(source, &st) < 0)
                return cage_fail(err, -errno, "stat \"%s\"", source);
        _cleanup_close_ int userns = idmap_userns(st.st_uid, st.st_gid, host_uid, host_gid);
        if (userns < 0)
                return cage_fail(err, userns, "idmap user namespace for \"%s\"", source);
        _cleanup_close_ int mnt =
                (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (mnt < 0)
                return cage_fail(err, -errno, "open_tree \"%s\"", source);
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                            (writable ? 0 : MOUNT_ATTR_RDONLY),
                .userns_fd = (uint64_t)userns,
        };
        if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return cage_fail(err, -errno, "idmapping \"%s\"", source);
        return TAKE_FD(mnt);
}

int bind_tree_open(const char *source, bool writable, struct cage_error *err)
{
        _cleanup_close_ int mnt =
                (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (mnt < 0)
                return cage_fail(err, -errno, "open_tree \"%s\"", source);
        struct mount_attr attr = {
                .attr_set =
                        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY),
        };
        if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return cage_fail(err, -errno, "mount flags of \"%s\"", source);
        return TAKE_FD(mnt);
}
