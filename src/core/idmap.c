/* Idmapped mounts; see idmap.h.
 *
 * The idmapping is a user namespace whose uid_map reads "O HOSTUID 1": an
 * on-disk owner O is treated as id O inside it and shown as HOSTUID (the
 * sandbox user's host uid); writes by HOSTUID are stored as O. The namespace
 * is made by a short-lived child that only waits to be killed (and is). It
 * shares our memory and fd table (CLONE_VM | CLONE_FILES, as posix_spawn's
 * child does): a plain fork would copy the server's page tables and its fd
 * table, both of which grow with every live sandbox, and then close every fd
 * and unmap every page again when it is killed. */
#include "idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
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

/* The child that holds the namespace: it only waits to be killed. It runs
 * on a stack of its own in our address space, so it calls nothing that
 * touches memory of ours (errno included: no call here fails in a way it
 * reads); every signal but SIGKILL stays blocked, as it was blocked for the
 * clone, so no handler of ours runs on its stack. It dies with its parent
 * thread if that goes first. */
static _Noreturn int hold_namespace(void *parent)
{
        syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (syscall(SYS_getppid) != (long)(intptr_t)parent)
                syscall(SYS_exit, 0);
        for (;;) /* a poll of nothing, for ever: until SIGKILL */
                syscall(SYS_ppoll, NULL, 0, NULL, NULL, 0);
}

#define HOLDER_STACK_SIZE (64 * 1024)

/* The holder, cloned into a new user namespace with every signal blocked. */
static pid_t clone_holder(void *stack)
{
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pid_t pid =
                clone(hold_namespace, (char *)stack + HOLDER_STACK_SIZE,
                      CLONE_NEWUSER | CLONE_VM | CLONE_FILES | SIGCHLD, (void *)(intptr_t)getpid());
        int saved = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        errno = saved;
        return pid;
}

/* A user namespace mapping O→host_uid and G→host_gid, as an fd. */
static int idmap_userns(uid_t owner, gid_t group, uid_t host_uid, gid_t host_gid)
{
        _cleanup_free_ void *stack = malloc(HOLDER_STACK_SIZE);
        if (!stack)
                return -ENOMEM;
        long pid = clone_holder(stack);
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
