/* Persistent workspaces; see workspace.h and docs/WORKSPACES.md.
 *
 * A LOOP workspace's life: create = sparse image + mkfs.ext4 (a child
 * process with a deadline) + one detached mount of the new filesystem to
 * drop lost+found and add output/, all in a .creating- directory renamed to
 * <id> when complete; mount = flock the image, attach it to a free loop
 * device (autoclear), mount it detached, check its root, then move_mount it
 * onto mnt/; unmount = umount2 (lazily only when busy), after which the
 * kernel clears the loop device, and with its file reference the flock, as
 * the last user of the filesystem goes.
 *
 * Paths handed to the kernel as strings are built from the canonical base
 * (trusted configuration) and names this file made; anything that sandbox
 * code may have written is reached only through fds, with O_NOFOLLOW. */
#include "workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/debug_pause.h"
#include "util/error.h"
#include "util/fdutil.h"

#define IMAGE_NAME      "image"
#define MNT_NAME        "mnt"
#define DATA_NAME       "data"
#define SIZE_NAME       "disk_bytes"
#define OUTPUT_NAME     "output"
#define CREATING_PREFIX ".creating-"
#define DELETING_PREFIX ".deleting-"
#define TEMPLATE_PREFIX ".template-" /* + the size in bytes: a formatted image to copy */
#define TEMPLATE_MAX    16           /* sizes kept; others are formatted each time */
#define FS_LABEL        "codecage-ws"
#define STAGE_NAME_MAX  128

#define LOOP_ATTACH_TRIES 64  /* another process may take the free loop device first */
#define LOCK_WAIT_MS      500 /* a loop device being cleared may still hold the image */
#define MOUNT_STACK_MAX   16  /* mounts stacked on mnt/ that unmount removes */
#define MKFS_STDERR_MAX   512

static const char *const mkfs_candidates[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"};

/* ---- small helpers ---------------------------------------------------- */

static void sleep_ms(long ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static bool dot_or_dotdot(const char *name)
{
        return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

static bool id_valid(const char *id)
{
        size_t n = id ? strnlen(id, CAGE_WORKSPACE_ID_MAX + 1) : 0;
        if (n == 0 || n > CAGE_WORKSPACE_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') ||
                      id[i] == '-'))
                        return false;
        return true;
}

static bool is_root(void)
{
        return geteuid() == 0;
}

/* The owner workspace roots must have: OWNER as root, ourselves otherwise. */
static uid_t owner_uid(void)
{
        return is_root() ? CAGE_WORKSPACE_OWNER_UID : geteuid();
}

static const char *mkfs_path(void)
{
        for (size_t i = 0; i < ELEMENTSOF(mkfs_candidates); i++)
                if (access(mkfs_candidates[i], X_OK) == 0)
                        return mkfs_candidates[i];
        return NULL;
}

/* Removes trailing newlines and a " (deleted)" suffix (sysfs backing_file). */
static void strip_backing_suffix(char *s)
{
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '\n')
                s[--n] = '\0';
        static const char deleted[] = " (deleted)";
        if (n >= sizeof(deleted) - 1 && strcmp(s + n - (sizeof(deleted) - 1), deleted) == 0)
                s[n - (sizeof(deleted) - 1)] = '\0';
}

/* ---- the workspace being worked on ------------------------------------ */

struct ws {
        const char *id;
        char *base; /* realpath of the base directory */
        int base_fd;
        int dir_fd; /* <base>/<id>, -1 when it does not exist */
};
#define WS_INIT                                                                                    \
        {                                                                                          \
                .base_fd = -1, .dir_fd = -1                                                        \
        }

static void ws_done(struct ws *w)
{
        free(w->base);
        cleanup_closep(&w->base_fd);
        cleanup_closep(&w->dir_fd);
}
#define _cleanup_ws_ __attribute__((cleanup(ws_done)))

static int check_id(const char *id, struct cage_error *err)
{
        if (!id_valid(id))
                return cage_fail(err, -EINVAL,
                                 "workspace id \"%.80s\" must be 1 to %d characters of a-z, 0-9 "
                                 "and -",
                                 id ? id : "", CAGE_WORKSPACE_ID_MAX);
        return 0;
}

static int open_base(const char *base, char **ret_real, struct cage_error *err)
{
        if (!base || !*base)
                return cage_fail(err, -EINVAL, "the workspace base directory must be a path");
        _cleanup_free_ char *real = realpath(base, NULL);
        if (!real)
                return cage_fail(err, -errno, "workspace base \"%s\"", base);
        int fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return cage_fail(err, -errno, "open workspace base \"%s\"", real);
        *ret_real = TAKE_PTR(real);
        return fd;
}

/* Validates id, opens base and, when it exists, <base>/<id>. */
static int ws_open(const char *base, const char *id, struct ws *w, struct cage_error *err)
{
        int r = check_id(id, err);
        if (r < 0)
                return r;
        w->id = id;
        w->base_fd = open_base(base, &w->base, err);
        if (w->base_fd < 0)
                return w->base_fd;
        w->dir_fd = openat(w->base_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (w->dir_fd < 0 && errno != ENOENT)
                return cage_fail(err, -errno, "open workspace %s", id);
        return 0;
}

/* "<base>/<id>/<name>", or NULL when out of memory. */
static char *ws_path(const struct ws *w, const char *name)
{
        char *p;
        return asprintf(&p, "%s/%s/%s", w->base, w->id, name) < 0 ? NULL : p;
}

/* Which backend an existing workspace uses: an image means LOOP. */
static int ws_backend(const struct ws *w, struct cage_error *err)
{
        struct stat st;
        if (fstatat(w->dir_fd, IMAGE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return S_ISREG(st.st_mode) ? (int)CAGE_WORKSPACE_LOOP
                                           : cage_fail(err, -EUCLEAN,
                                                       "workspace %s: image is not a file", w->id);
        if (errno != ENOENT)
                return cage_fail(err, -errno, "workspace %s: stat image", w->id);
        if (fstatat(w->dir_fd, DATA_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
                return CAGE_WORKSPACE_DIR;
        return cage_fail(err, -EUCLEAN, "workspace %s has neither an image nor data/", w->id);
}

/* A fresh, unique name "<prefix><id>-<12 hex>" made as a 0700 directory. */
static int stage_make(int base_fd, const char *prefix, const char *id, char name[STAGE_NAME_MAX])
{
        for (int tries = 0; tries < 16; tries++) {
                uint8_t rnd[6];
                if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                        return -EIO;
                snprintf(name, STAGE_NAME_MAX, "%s%s-%02x%02x%02x%02x%02x%02x", prefix, id, rnd[0],
                         rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
                if (mkdirat(base_fd, name, 0700) == 0)
                        return 0;
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

/* ---- directories owned by OWNER --------------------------------------- */

/* mkdirat with mode 0755 exactly and OWNER as owner (when root); returns
 * an fd of the new directory. */
static int mkdir_owned(int dir_fd, const char *name)
{
        if (mkdirat(dir_fd, name, 0755) < 0)
                return -errno;
        _cleanup_close_ int fd =
                openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fchmod(fd, 0755) < 0)
                return -errno;
        if (is_root() && fchown(fd, CAGE_WORKSPACE_OWNER_UID, CAGE_WORKSPACE_OWNER_GID) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* output/ is where artifacts go; whatever the sandbox put there instead
 * (a file, a symlink) is left alone. */
static int ensure_output(int root_fd, const char *id, struct cage_error *err)
{
        _cleanup_close_ int fd = mkdir_owned(root_fd, OUTPUT_NAME);
        if (fd < 0 && fd != -EEXIST)
                return cage_fail(err, fd, "workspace %s: create output/", id);
        return 0;
}

static int root_check(int root_fd, const char *id, struct cage_error *err)
{
        struct stat st;
        if (fstat(root_fd, &st) < 0)
                return cage_fail(err, -errno, "workspace %s: stat its root", id);
        bool group_ok = !is_root() || st.st_gid == CAGE_WORKSPACE_OWNER_GID;
        if (!S_ISDIR(st.st_mode) || st.st_uid != owner_uid() || !group_ok)
                return cage_fail(err, -EUCLEAN,
                                 "workspace %s: its root is not a directory owned by %u "
                                 "(found mode %o, owner %u:%u)",
                                 id, (unsigned)owner_uid(), (unsigned)st.st_mode,
                                 (unsigned)st.st_uid, (unsigned)st.st_gid);
        return 0;
}

/* 1 when dir_fd is the root of a mount, 0 when not. */
static int is_mount_root(int dir_fd, int parent_fd)
{
        struct statx stx;
        if (statx(dir_fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) < 0)
                return -errno;
        if (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
                return !!(stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
        struct stat parent; /* before Linux 5.8: a different device */
        if (fstat(parent_fd, &parent) < 0)
                return -errno;
        return makedev(stx.stx_dev_major, stx.stx_dev_minor) != parent.st_dev;
}

/* ---- loop devices ----------------------------------------------------- */

static int loop_configure(int loop_fd, int image_fd)
{
        struct loop_config config = {.fd = (uint32_t)image_fd};
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        if (ioctl(loop_fd, LOOP_CONFIGURE, &config) == 0)
                return 0;
        if (errno != ENOTTY)
                return -errno;
        /* Before Linux 5.8: attach, then ask for autoclear. */
        if (ioctl(loop_fd, LOOP_SET_FD, image_fd) < 0)
                return -errno;
        struct loop_info64 info = {.lo_flags = LO_FLAGS_AUTOCLEAR};
        if (ioctl(loop_fd, LOOP_SET_STATUS64, &info) < 0) {
                int r = -errno;
                (void)ioctl(loop_fd, LOOP_CLR_FD, 0);
                return r;
        }
        return 0;
}

/* One past the loop device this process bound last. While sandboxes are
 * only being made, the next free device is there (or does not exist yet),
 * so LOOP_CTL_GET_FREE, which walks every loop device of the machine, is
 * skipped. -1 after an unmount (a device below may be free again) and
 * while an attach is trying it. */
static atomic_int loop_next = -1;

/* Opens /dev/loop<n> into dev, making the device first when a guessed n
 * does not exist yet. */
static int loop_open(int ctl, int n, bool guessed, char dev[static 32])
{
        snprintf(dev, 32, "/dev/loop%d", n);
        int fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd >= 0 || !guessed || (errno != ENOENT && errno != ENXIO))
                return fd < 0 ? -errno : fd;
        if (ioctl(ctl, LOOP_CTL_ADD, n) < 0 && errno != EEXIST)
                return -errno;
        fd = open(dev, O_RDWR | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Binds image_fd to a free loop device; returns the device's fd (keep it
 * open until a filesystem holds the device, or autoclear releases it) and
 * its path in dev. */
static int loop_attach(int image_fd, char dev[static 32], struct cage_error *err)
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return cage_fail(err, -errno, "open /dev/loop-control");
        for (int i = 0; i < LOOP_ATTACH_TRIES; i++) {
                int n = atomic_exchange(&loop_next, -1);
                bool guessed = n >= 0;
                if (!guessed && (n = ioctl(ctl, LOOP_CTL_GET_FREE)) < 0)
                        return cage_fail(err, -errno, "find a free loop device");
                _cleanup_close_ int fd = loop_open(ctl, n, guessed, dev);
                if (fd < 0 && guessed)
                        continue; /* ask the kernel instead */
                if (fd < 0)
                        return cage_fail(err, fd, "open %s", dev);
                int r = loop_configure(fd, image_fd);
                if (r == -EBUSY) /* taken, by someone else or before we looked */
                        continue;
                if (r < 0)
                        return cage_fail(err, r, "attach the workspace image to %s", dev);
                atomic_store(&loop_next, n + 1);
                return TAKE_FD(fd);
        }
        return cage_fail(err, -EBUSY, "no free loop device after %d tries", LOOP_ATTACH_TRIES);
}

/* Reads the backing file of block device name ("loop3") into buf; 0 when
 * the device is not a bound loop device. */
static int loop_backing_file(const char *sys_dir, char *buf, size_t size)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/loop/backing_file", sys_dir);
        ssize_t n = read_file_at(AT_FDCWD, path, buf, size);
        if (n < 0)
                return n == -ENOENT ? 0 : (int)n;
        strip_backing_suffix(buf);
        return buf[0] ? 1 : 0;
}

/* Detaches every loop device whose backing file lies beneath prefix (ends
 * in '/'). LOOP_CLR_FD on a device still in use only sets autoclear, so the
 * kernel finishes the job when its last user goes: never disruptive. */
static int loops_detach_beneath(const char *prefix, int *count, struct cage_error *err)
{
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        if (!d)
                return errno == ENOENT ? 0 : cage_fail(err, -errno, "open /sys/block");
        int first = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                char sys[PATH_MAX], backing[PATH_MAX + 32], dev[300];
                snprintf(sys, sizeof(sys), "/sys/block/%s", de->d_name);
                if (loop_backing_file(sys, backing, sizeof(backing)) <= 0 ||
                    strncmp(backing, prefix, strlen(prefix)) != 0)
                        continue;
                snprintf(dev, sizeof(dev), "/dev/%s", de->d_name);
                _cleanup_close_ int fd = open(dev, O_RDWR | O_CLOEXEC);
                int r = fd < 0 ? -errno : ioctl(fd, LOOP_CLR_FD, 0) < 0 ? -errno : 0;
                if (r == 0)
                        (*count)++;
                else if (r != -ENXIO && r != -ENOENT && first == 0) /* ENXIO: already cleared */
                        first = cage_fail(err, r, "detach %s (backing %s)", dev, backing);
        }
        return first;
}

/* ---- ext4 on a loop device -------------------------------------------- */

/* The kernel's own explanation of a failed fsconfig, from the fs context. */
static int fs_fail(int fs_fd, int code, const char *dev, struct cage_error *err)
{
        char log[256];
        ssize_t n = read(fs_fd, log, sizeof(log) - 1);
        if (n <= 0)
                return cage_fail(err, code, "mount ext4 from %s", dev);
        log[n] = '\0';
        log[strcspn(log, "\n")] = '\0';
        return cage_fail(err, code, "mount ext4 from %s (%s)", dev, log);
}

/* Mounts the ext4 filesystem on dev, detached: nosuid (the image is written
 * by sandbox code), nodev, and discard so deleted files give their space
 * back to the host. Returns the mount's fd. */
static int ext4_mount_detached(const char *dev, struct cage_error *err)
{
        _cleanup_close_ int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
        if (fs < 0)
                return cage_fail(err, -errno, "fsopen ext4");
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "discard", NULL, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return fs_fail(fs, -errno, dev, err);
        int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
                return cage_fail(err, -errno, "fsmount ext4 from %s", dev);
        return mnt;
}

/* Takes the image's exclusive flock. The loop device keeps our open file,
 * so the lock lasts as long as the device is bound: a second attach while
 * an old mount lives on (in a sandbox's namespace, or lazily detached)
 * would run two ext4 instances on one image. Waits briefly for a device
 * that is being cleared. */
static int image_lock(int image_fd)
{
        for (int64_t start = clock_mono_ms();;) {
                if (flock(image_fd, LOCK_EX | LOCK_NB) == 0)
                        return 0;
                if (errno != EWOULDBLOCK)
                        return -errno;
                if (clock_mono_ms() - start >= LOCK_WAIT_MS)
                        return -EBUSY;
                sleep_ms(10);
        }
}

/* Locks the image, attaches it to a loop device and mounts it detached;
 * returns the mount's fd. The filesystem then holds the loop device, the
 * loop device the image and its lock. */
static int image_mount_detached(int image_fd, const char *id, struct cage_error *err)
{
        int r = image_lock(image_fd);
        if (r < 0)
                return cage_fail(err, r,
                                 "workspace %s is still in use (an earlier mount lives on, "
                                 "e.g. in a sandbox)",
                                 id);
        char dev[32];
        _cleanup_close_ int loop = loop_attach(image_fd, dev, err);
        if (loop < 0)
                return loop;
        return ext4_mount_detached(dev, err);
}

/* 1 when the filesystem of mnt_fd is image_path on a loop device. */
static int mounted_is_image(int mnt_fd, const char *image_path)
{
        struct stat st;
        if (fstat(mnt_fd, &st) < 0)
                return -errno;
        char sys[96], backing[PATH_MAX + 32];
        snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", major(st.st_dev), minor(st.st_dev));
        int r = loop_backing_file(sys, backing, sizeof(backing));
        return r <= 0 ? r : strcmp(backing, image_path) == 0;
}

/* ---- mkfs.ext4 -------------------------------------------------------- */

static int spawn_mkfs(const char *mkfs, const char *image, int err_fd, pid_t *ret_pid)
{
        char ext[96];
        snprintf(ext, sizeof(ext), "root_owner=%u:%u,lazy_itable_init=1,lazy_journal_init=1",
                 CAGE_WORKSPACE_OWNER_UID, CAGE_WORKSPACE_OWNER_GID);
        const char *argv[] = {"mkfs.ext4", "-q", "-F",     "-m",  "0", "-E",
                              ext,         "-L", FS_LABEL, image, NULL};
        static const char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t all, none;
        sigfillset(&all);
        sigemptyset(&none);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
        int r = posix_spawn(ret_pid, mkfs, &fa, &attr, (char *const *)argv, (char *const *)envp);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        return -r;
}

/* Appends what can be read now from fd to buf (bounded; the rest is
 * discarded). Returns true at end of file. */
static bool drain(int fd, char *buf, size_t size, size_t *len)
{
        for (;;) {
                char tmp[512];
                ssize_t n = read(fd, tmp, sizeof(tmp));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n == 0 || errno != EAGAIN;
                size_t take = (size_t)n < size - 1 - *len ? (size_t)n : size - 1 - *len;
                memcpy(buf + *len, tmp, take);
                *len += take;
                buf[*len] = '\0';
        }
}

/* Waits for pid with a deadline, collecting its stderr from out_fd
 * (non-blocking). Returns the wait status, or -ETIMEDOUT after killing it. */
static int child_wait(pid_t pid, int out_fd, int timeout_ms, char *buf, size_t size)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        int r = pidfd < 0 ? -errno : 0;
        size_t len = 0;
        bool eof = false;
        for (int64_t deadline = clock_mono_ms() + timeout_ms; r == 0;) {
                int64_t left = deadline - clock_mono_ms();
                if (left <= 0) {
                        r = -ETIMEDOUT;
                        break;
                }
                struct pollfd p[2] = {{.fd = eof ? -1 : out_fd, .events = POLLIN},
                                      {.fd = pidfd, .events = POLLIN}};
                if (poll(p, 2, (int)left) < 0 && errno != EINTR)
                        r = -errno;
                if (p[0].revents)
                        eof = drain(out_fd, buf, size, &len);
                if (p[1].revents)
                        break;
        }
        if (r < 0)
                kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return r < 0 ? r : -errno;
        if (!eof)
                drain(out_fd, buf, size, &len);
        return r < 0 ? r : status;
}

/* Message-safe: one line, printable. */
static void one_line(char *s)
{
        for (; *s; s++)
                if (*s == '\n' || *s == '\t')
                        *s = ' ';
                else if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
                        *s = '?';
}

static int run_mkfs(const char *image, struct cage_error *err)
{
        const char *mkfs = mkfs_path();
        if (!mkfs)
                return cage_fail(err, -ENOENT,
                                 "mkfs.ext4 not found in /usr/sbin or /sbin (install e2fsprogs)");
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe for mkfs.ext4");
        _cleanup_close_ int rd = pipefd[0];
        _cleanup_close_ int wr = pipefd[1];
        pid_t pid;
        int r = fd_set_nonblock(rd, true);
        if (r == 0)
                r = spawn_mkfs(mkfs, image, wr, &pid);
        if (r < 0)
                return cage_fail(err, r, "start %s", mkfs);
        cleanup_closep(&wr); /* so that our read end sees EOF */
        wr = -1;
        char out[MKFS_STDERR_MAX] = "";
        int status = child_wait(pid, rd, CAGE_WORKSPACE_MKFS_TIMEOUT_MS, out, sizeof(out));
        one_line(out);
        if (status == -ETIMEDOUT)
                return cage_fail(err, status, "%s took more than %d ms and was killed", mkfs,
                                 CAGE_WORKSPACE_MKFS_TIMEOUT_MS);
        if (status < 0)
                return cage_fail(err, status, "wait for %s", mkfs);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return cage_fail(err, -EIO, "%s %s failed (%s %d): %s", mkfs, image,
                                 WIFEXITED(status) ? "exit status" : "signal",
                                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), out);
        return 0;
}

/* ---- removing trees --------------------------------------------------- */

struct dir_id {
        dev_t dev;
        ino_t ino;
};

/* An fd-relative, non-recursive deletion walk: one directory open at a
 * time, plus the identity of every directory above it. */
struct rm_walk {
        DIR *dir;          /* the directory being emptied */
        struct dir_id cur; /* ... and its identity */
        struct dir_id *up; /* the directories above it, outermost first */
        size_t depth, cap;
};

static void rm_walk_done(struct rm_walk *w)
{
        cleanup_closedirp(&w->dir);
        free(w->up);
}

/* Replaces the walk's directory with fd (which it takes). */
static int rm_walk_switch(struct rm_walk *w, int fd, const struct stat *st)
{
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        cleanup_closedirp(&w->dir);
        w->dir = d;
        w->cur = (struct dir_id){st->st_dev, st->st_ino};
        return 0;
}

/* Enters name, which must still be the directory that was stat'ed. */
static int rm_walk_enter(struct rm_walk *w, const char *name, const struct stat *seen)
{
        if (w->depth == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 32;
                struct dir_id *up = realloc(w->up, cap * sizeof(*up));
                if (!up)
                        return -ENOMEM;
                w->up = up;
                w->cap = cap;
        }
        int fd = openat(dirfd(w->dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0 || st.st_dev != seen->st_dev || st.st_ino != seen->st_ino) {
                close(fd);
                return -ESTALE; /* replaced while we looked: someone is still writing */
        }
        struct dir_id parent = w->cur;
        int r = rm_walk_switch(w, fd, &st);
        if (r == 0)
                w->up[w->depth++] = parent;
        return r;
}

/* Goes back up through "..", checking that it is where we came from. */
static int rm_walk_leave(struct rm_walk *w)
{
        int fd = openat(dirfd(w->dir), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct stat st;
        const struct dir_id *want = &w->up[w->depth - 1];
        if (fstat(fd, &st) < 0 || st.st_dev != want->dev || st.st_ino != want->ino) {
                close(fd);
                return -ESTALE; /* moved while we were inside */
        }
        int r = rm_walk_switch(w, fd, &st);
        if (r == 0)
                w->depth--;
        return r;
}

/* Unlinks what the current directory holds, from its start. Returns 1
 * after entering a non-empty subdirectory, 0 once the directory is empty. */
static int rm_walk_scan(struct rm_walk *w)
{
        int fd = dirfd(w->dir);
        rewinddir(w->dir);
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(w->dir);
                if (!de)
                        return -errno;
                if (dot_or_dotdot(de->d_name))
                        continue;
                struct stat st;
                if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno == ENOENT)
                                continue;
                        return -errno;
                }
                if (!S_ISDIR(st.st_mode)) { /* files, symlinks (never followed), ... */
                        if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT)
                                return -errno;
                        continue;
                }
                if (st.st_dev != w->cur.dev)
                        return -EBUSY; /* a mount inside: never cross into it */
                if (unlinkat(fd, de->d_name, AT_REMOVEDIR) == 0 || errno == ENOENT)
                        continue;
                if (errno != ENOTEMPTY && errno != EEXIST)
                        return -errno;
                int r = rm_walk_enter(w, de->d_name, &st);
                return r < 0 ? r : 1;
        }
}

/* Removes name in dir_fd and everything beneath it: no symlink followed,
 * no mount crossed, no recursion (a tree as deep as sandbox code cares to
 * make costs 16 bytes a level). */
static int rm_tree_at(int dir_fd, const char *name)
{
        int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOTDIR || errno == ELOOP)
                        return unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
                return errno == ENOENT ? 0 : -errno;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        __attribute__((cleanup(rm_walk_done))) struct rm_walk w = {0};
        int r = rm_walk_switch(&w, fd, &st);
        while (r >= 0) {
                r = rm_walk_scan(&w);
                if (r == 0) {
                        if (w.depth == 0)
                                break;
                        r = rm_walk_leave(&w);
                }
        }
        if (r < 0)
                return r;
        return unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

/* ---- create ----------------------------------------------------------- */

static int write_new_file(int dir_fd, const char *name, const char *content)
{
        _cleanup_close_ int fd =
                openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        int r = write_all(fd, content, strlen(content));
        return r < 0 ? r : fsync(fd) < 0 ? -errno : 0;
}

static int create_dir(int stage_fd, const char *id, uint64_t disk_bytes, struct cage_error *err)
{
        char size[32];
        snprintf(size, sizeof(size), "%" PRIu64 "\n", disk_bytes);
        int r = write_new_file(stage_fd, SIZE_NAME, size);
        if (r < 0)
                return cage_fail(err, r, "workspace %s: write " SIZE_NAME, id);
        _cleanup_close_ int data = mkdir_owned(stage_fd, DATA_NAME);
        if (data < 0)
                return cage_fail(err, data, "workspace %s: create data/", id);
        return ensure_output(data, id, err);
}

/* One detached mount of the new filesystem: drop lost+found (the sandbox
 * has no use for it and it would show in every listing), add output/,
 * check the root, and sync before the workspace is published. */
static int image_finish(int image_fd, const char *id, struct cage_error *err)
{
        _cleanup_close_ int mnt = image_mount_detached(image_fd, id, err);
        if (mnt < 0)
                return mnt;
        if (unlinkat(mnt, "lost+found", AT_REMOVEDIR) < 0 && errno != ENOENT)
                return cage_fail(err, -errno, "workspace %s: remove lost+found", id);
        int r = ensure_output(mnt, id, err);
        if (r == 0)
                r = root_check(mnt, id, err);
        if (r < 0)
                return r;
        /* syncfs needs a real open file; the mount fd is O_PATH. */
        _cleanup_close_ int root = openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0 || syncfs(root) < 0)
                return cage_fail(err, -errno, "workspace %s: sync the new filesystem", id);
        return 0;
}

/* How many templates base holds (a scan of base: only when one is missing). */
static int templates_count(int base_fd)
{
        int fd = openat(base_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                n += strncmp(de->d_name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) == 0;
        return n;
}

/* A new sparse image of disk_bytes: the host pays only for blocks the
 * filesystem writes. */
static int image_create(int stage_fd, const char *image_path, uint64_t disk_bytes,
                        struct cage_error *err)
{
        int image = openat(stage_fd, IMAGE_NAME, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           0600);
        if (image < 0)
                return cage_fail(err, -errno, "create %s", image_path);
        if (fchmod(image, 0600) < 0 || ftruncate(image, (off_t)disk_bytes) < 0) {
                int r = cage_fail(err, -errno, "size %s", image_path);
                close(image);
                return r;
        }
        return image;
}

/* Formats a new image in stage_fd (mkfs.ext4, then image_finish); returns
 * its fd. */
static int format_image(int stage_fd, const char *image_path, const char *id, uint64_t disk_bytes,
                        struct cage_error *err)
{
        _cleanup_close_ int image = image_create(stage_fd, image_path, disk_bytes, err);
        if (image < 0)
                return image;
        int r = run_mkfs(image_path, err);
        if (r == 0)
                r = image_finish(image, id, err);
        return r < 0 ? r : TAKE_FD(image);
}

/* Copies the data of src (a sparse file of size bytes) into dst, which is
 * that size already and all hole: extent by extent, holes stay holes. */
static int copy_sparse(int src, int dst, off_t size)
{
        for (off_t pos = 0; pos < size;) {
                off_t data = lseek(src, pos, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : -errno;
                off_t hole = lseek(src, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                off_t in = data, out = data;
                while (in < hole) {
                        ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return -errno;
                        if (n == 0)
                                return -EIO; /* src shrank under us */
                }
                pos = hole;
        }
        return 0;
}

/* The template of this size: a finished image (formatted, lost+found gone,
 * output/ made, synced) that new workspaces of the size copy instead of
 * running mkfs.ext4 and mounting once each (~40 ms -> ~2 ms). Returns an
 * fd of <base>/.template-<bytes>/image, made first when missing (at most
 * TEMPLATE_MAX sizes; -ENOSPC beyond). Templates are the server's own
 * files, never mounted but while they are made, and swept at start. */
static int template_open(int base_fd, const char *base, uint64_t disk_bytes, struct cage_error *err)
{
        char name[64], path[STAGE_NAME_MAX + 16];
        snprintf(name, sizeof(name), TEMPLATE_PREFIX "%" PRIu64, disk_bytes);
        snprintf(path, sizeof(path), "%s/" IMAGE_NAME, name);
        int fd = openat(base_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT)
                return fd >= 0 ? fd : cage_fail(err, -errno, "open %s/%s", base, path);
        int r = templates_count(base_fd);
        if (r < 0 || r >= TEMPLATE_MAX)
                return r < 0 ? cage_fail(err, r, "read %s", base) : -ENOSPC;
        char stage[STAGE_NAME_MAX];
        if ((r = stage_make(base_fd, CREATING_PREFIX, "template", stage)) < 0)
                return cage_fail(err, r, "create a directory in %s", base);
        _cleanup_free_ char *image_path = NULL;
        _cleanup_close_ int stage_fd =
                openat(base_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (stage_fd < 0 || asprintf(&image_path, "%s/%s/" IMAGE_NAME, base, stage) < 0)
                r = cage_fail(err, stage_fd < 0 ? -errno : -ENOMEM, "template in %s", base);
        else if ((r = format_image(stage_fd, image_path, "template", disk_bytes, err)) >= 0)
                fd = r;
        /* Another creation may have made the same template meanwhile: ours is
         * as good for this copy, and then goes. */
        bool placed = false;
        if (r >= 0 && renameat2(base_fd, stage, base_fd, name, RENAME_NOREPLACE) == 0)
                placed = true;
        else if (r >= 0 && errno != EEXIST)
                r = cage_fail(err, -errno, "rename the template into %s", base);
        if (!placed)
                (void)rm_tree_at(base_fd, stage);
        if (r < 0) {
                if (fd >= 0)
                        close(fd);
                return r;
        }
        return fd;
}

/* A new image for the workspace: a copy of the template of its size, or
 * formatted here when there is none. */
static int image_from_template(int base_fd, const char *base, int stage_fd, const char *image_path,
                               const char *id, uint64_t disk_bytes, struct cage_error *err)
{
        _cleanup_close_ int tpl = template_open(base_fd, base, disk_bytes, err);
        if (tpl == -ENOSPC)
                return format_image(stage_fd, image_path, id, disk_bytes, err);
        if (tpl < 0)
                return tpl;
        struct stat st;
        if (fstat(tpl, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != disk_bytes)
                return cage_fail(err, -EUCLEAN, "%s: a template of the wrong size", base);
        _cleanup_close_ int image = image_create(stage_fd, image_path, disk_bytes, err);
        if (image < 0)
                return image;
        int r = copy_sparse(tpl, image, st.st_size);
        if (r == 0 && fsync(image) < 0)
                r = -errno;
        return r < 0 ? cage_fail(err, r, "workspace %s: copy the template image", id)
                     : TAKE_FD(image);
}

static int create_loop(const struct ws *w, int stage_fd, const char *image_path,
                       uint64_t disk_bytes, struct cage_error *err)
{
        _cleanup_close_ int image = image_from_template(w->base_fd, w->base, stage_fd, image_path,
                                                        w->id, disk_bytes, err);
        if (image < 0)
                return image;
        if (mkdirat(stage_fd, MNT_NAME, 0700) < 0)
                return cage_fail(err, -errno, "workspace %s: create mnt/", w->id);
        return 0;
}

static int create_staged(const struct ws *w, const char *stage, uint64_t disk_bytes,
                         enum cage_workspace_backend backend, struct cage_error *err)
{
        _cleanup_close_ int fd =
                openat(w->base_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchmod(fd, 0700) < 0)
                return cage_fail(err, -errno, "open %s/%s", w->base, stage);
        if (backend == CAGE_WORKSPACE_DIR)
                return create_dir(fd, w->id, disk_bytes, err);
        _cleanup_free_ char *image = NULL;
        if (asprintf(&image, "%s/%s/" IMAGE_NAME, w->base, stage) < 0)
                return cage_fail(err, -ENOMEM, "workspace %s", w->id);
        return create_loop(w, fd, image, disk_bytes, err);
}

int cage_workspace_create(const char *base, const char *id, uint64_t disk_bytes,
                          enum cage_workspace_backend backend, struct cage_error *err)
{
        if (disk_bytes < CAGE_WORKSPACE_MIN_BYTES || disk_bytes > CAGE_WORKSPACE_MAX_BYTES)
                return cage_fail(err, -EINVAL,
                                 "disk_mib must be between %llu and %llu for a workspace (got "
                                 "%" PRIu64 " bytes)",
                                 CAGE_WORKSPACE_MIN_BYTES >> 20, CAGE_WORKSPACE_MAX_BYTES >> 20,
                                 disk_bytes);
        if (backend != CAGE_WORKSPACE_LOOP && backend != CAGE_WORKSPACE_DIR)
                return cage_fail(err, -EINVAL, "unknown workspace backend %d", (int)backend);
        _cleanup_ws_ struct ws w = WS_INIT;
        int r = ws_open(base, id, &w, err);
        if (r < 0)
                return r;
        struct stat st;
        if (fstatat(w.base_fd, id, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return cage_fail(err, -EEXIST, "workspace %s already exists", id);
        char stage[STAGE_NAME_MAX];
        r = stage_make(w.base_fd, CREATING_PREFIX, id, stage);
        if (r < 0)
                return cage_fail(err, r, "workspace %s: create a directory in %s", id, w.base);
        r = create_staged(&w, stage, disk_bytes, backend, err);
        /* Why a rename: <id> appears complete or not at all, even across a crash. */
        if (r == 0 && renameat2(w.base_fd, stage, w.base_fd, id, RENAME_NOREPLACE) < 0)
                r = errno == EEXIST ? cage_fail(err, -EEXIST, "workspace %s already exists", id)
                                    : cage_fail(err, -errno, "workspace %s: rename into place", id);
        if (r < 0) {
                (void)rm_tree_at(w.base_fd, stage);
                return r;
        }
        if (fsync(w.base_fd) < 0)
                return cage_fail(err, -errno, "workspace %s: sync %s", id, w.base);
        return 0;
}

/* ---- mount / unmount -------------------------------------------------- */

/* Already mounted: it must be our image; then the same checks as a fresh
 * mount. */
static int mount_loop_again(const struct ws *w, int mnt_fd, const char *mnt_path,
                            struct cage_error *err)
{
        _cleanup_free_ char *image = ws_path(w, IMAGE_NAME);
        if (!image)
                return cage_fail(err, -ENOMEM, "workspace %s", w->id);
        int r = mounted_is_image(mnt_fd, image);
        if (r < 0)
                return cage_fail(err, r, "workspace %s: inspect the mount on %s", w->id, mnt_path);
        if (r == 0)
                return cage_fail(err, -EBUSY, "workspace %s: something else is mounted on %s",
                                 w->id, mnt_path);
        r = root_check(mnt_fd, w->id, err);
        return r < 0 ? r : ensure_output(mnt_fd, w->id, err);
}

static int mount_loop(const struct ws *w, const char *mnt_path, struct cage_error *err)
{
        _cleanup_close_ int mnt_dir =
                openat(w->dir_fd, MNT_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (mnt_dir < 0)
                return cage_fail(err, -errno, "open %s", mnt_path);
        int r = is_mount_root(mnt_dir, w->dir_fd);
        if (r < 0)
                return cage_fail(err, r, "stat %s", mnt_path);
        if (r > 0)
                return mount_loop_again(w, mnt_dir, mnt_path, err);
        _cleanup_close_ int image =
                openat(w->dir_fd, IMAGE_NAME, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (image < 0)
                return cage_fail(err, -errno, "workspace %s: open its image", w->id);
        _cleanup_close_ int mnt = image_mount_detached(image, w->id, err);
        if (mnt < 0)
                return mnt;
        /* Checked and completed while detached: nothing half-ready is visible. */
        r = root_check(mnt, w->id, err);
        if (r == 0)
                r = ensure_output(mnt, w->id, err);
        if (r == 0 && syscall(SYS_move_mount, mnt, "", mnt_dir, "",
                              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                r = cage_fail(err, -errno, "move_mount onto %s", mnt_path);
        return r;
}

static int mount_dir(const struct ws *w, struct cage_error *err)
{
        _cleanup_close_ int data =
                openat(w->dir_fd, DATA_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (data < 0)
                return cage_fail(err, -errno, "workspace %s: open data/", w->id);
        int r = root_check(data, w->id, err);
        return r < 0 ? r : ensure_output(data, w->id, err);
}

/* Opens an existing workspace; returns its backend. */
static int ws_open_existing(const char *base, const char *id, struct ws *w, struct cage_error *err)
{
        int r = ws_open(base, id, w, err);
        if (r == 0 && w->dir_fd < 0)
                r = cage_fail(err, -ENOENT, "workspace %s does not exist", id);
        return r < 0 ? r : ws_backend(w, err);
}

int cage_workspace_mount(const char *base, const char *id, char **ret_path, struct cage_error *err)
{
        _cleanup_ws_ struct ws w = WS_INIT;
        int backend = ws_open_existing(base, id, &w, err);
        if (backend < 0)
                return backend;
        bool loop = backend == CAGE_WORKSPACE_LOOP;
        _cleanup_free_ char *path = ws_path(&w, loop ? MNT_NAME : DATA_NAME);
        if (!path)
                return cage_fail(err, -ENOMEM, "workspace %s", id);
        int r = loop ? mount_loop(&w, path, err) : mount_dir(&w, err);
        if (r < 0)
                return r;
        *ret_path = TAKE_PTR(path);
        return 0;
}

/* 1 when something is mounted on <id>/mnt, 0 when not (or no mnt/). */
static int mnt_mounted(const struct ws *w)
{
        _cleanup_close_ int fd =
                openat(w->dir_fd, MNT_NAME, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        return is_mount_root(fd, w->dir_fd); /* fd closed here: it would pin the mount */
}

static int unmount_mnt(const struct ws *w, struct cage_error *err)
{
        _cleanup_free_ char *path = ws_path(w, MNT_NAME);
        if (!path)
                return cage_fail(err, -ENOMEM, "workspace %s", w->id);
        for (int i = 0; i < MOUNT_STACK_MAX; i++) {
                int r = mnt_mounted(w);
                if (r <= 0)
                        return r < 0 ? cage_fail(err, r, "stat %s", path) : 0;
                if (umount2(path, UMOUNT_NOFOLLOW) == 0) {
                        atomic_store(&loop_next, -1); /* its device is free again */
                        continue;
                }
                if (errno != EBUSY)
                        return cage_fail(err, -errno, "unmount %s", path);
                /* Busy (a process still works in it): detach now; the kernel
                 * releases the filesystem, then the loop device, when the last
                 * user leaves. */
                if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
                        return cage_fail(err, -errno, "detach %s", path);
                atomic_store(&loop_next, -1); /* free once its last user goes */
        }
        return cage_fail(err, -EBUSY, "%s: more than %d mounts stacked", path, MOUNT_STACK_MAX);
}

int cage_workspace_unmount(const char *base, const char *id, struct cage_error *err)
{
        _cleanup_ws_ struct ws w = WS_INIT;
        int r = ws_open(base, id, &w, err);
        if (r < 0 || w.dir_fd < 0)
                return r;
        return unmount_mnt(&w, err);
}

/* ---- destroy ---------------------------------------------------------- */

/* After the unmount: detaches whatever loop device still holds the image.
 * Its flock is free exactly when none does (a device keeps the file it was
 * attached with, and the lock with it; autoclear drops both once the
 * filesystem is gone), so the scan of every loop device on the machine
 * runs only when one still does. */
static int loops_release(const struct ws *w, struct cage_error *err)
{
        _cleanup_close_ int image =
                openat(w->dir_fd, IMAGE_NAME, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (image >= 0 && image_lock(image) == 0)
                return 0; /* unlocked by the close */
        _cleanup_free_ char *prefix = ws_path(w, "");
        if (!prefix)
                return cage_fail(err, -ENOMEM, "workspace %s", w->id);
        int detached = 0;
        return loops_detach_beneath(prefix, &detached, err);
}

int cage_workspace_destroy(const char *base, const char *id, struct cage_error *err)
{
        _cleanup_ws_ struct ws w = WS_INIT;
        int r = ws_open(base, id, &w, err);
        if (r < 0 || w.dir_fd < 0)
                return r;
        r = unmount_mnt(&w, err);
        if (r < 0)
                return r;
        debug_pause_point("workspace-unmounted");
        r = loops_release(&w, err);
        if (r < 0)
                return r;
        char stage[STAGE_NAME_MAX];
        r = stage_make(w.base_fd, DELETING_PREFIX, id, stage);
        /* Why a rename first: a crash mid-deletion leaves a .deleting- directory
         * that sweep finishes, never a half-deleted workspace under its id. */
        if (r == 0 && renameat(w.base_fd, id, w.base_fd, stage) < 0)
                r = -errno;
        if (r < 0)
                return cage_fail(err, r, "workspace %s: move aside for deletion", id);
        r = rm_tree_at(w.base_fd, stage);
        if (r < 0)
                return cage_fail(err, r, "workspace %s: remove %s/%s", id, w.base, stage);
        return 0;
}

int cage_workspace_retire(const char *base, const char *id, char *stage, struct cage_error *err)
{
        _cleanup_ws_ struct ws w = WS_INIT;
        stage[0] = '\0';
        int r = ws_open(base, id, &w, err);
        if (r < 0 || w.dir_fd < 0)
                return r;
        char name[STAGE_NAME_MAX];
        r = stage_make(w.base_fd, DELETING_PREFIX, id, name);
        if (r == 0 && renameat(w.base_fd, id, w.base_fd, name) < 0) {
                r = -errno;
                (void)unlinkat(w.base_fd, name, AT_REMOVEDIR);
        }
        if (r < 0)
                return cage_fail(err, r, "workspace %s: move aside for deletion", id);
        snprintf(stage, CAGE_WORKSPACE_STAGE_MAX, "%s", name);
        return 0;
}

int cage_workspace_destroy_retired(const char *base, const char *stage, struct cage_error *err)
{
        if (strncmp(stage, DELETING_PREFIX, strlen(DELETING_PREFIX)) != 0 || strchr(stage, '/') ||
            strlen(stage) >= STAGE_NAME_MAX)
                return cage_fail(err, -EINVAL, "not a retired workspace: \"%.80s\"", stage);
        _cleanup_ws_ struct ws w = WS_INIT;
        w.id = stage;
        w.base_fd = open_base(base, &w.base, err);
        if (w.base_fd < 0)
                return w.base_fd;
        w.dir_fd = openat(w.base_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (w.dir_fd < 0)
                return errno == ENOENT ? 0 : cage_fail(err, -errno, "open %s/%s", w.base, stage);
        int r = unmount_mnt(&w, err);
        if (r < 0)
                return r;
        debug_pause_point("workspace-unmounted");
        if ((r = loops_release(&w, err)) < 0)
                return r;
        r = rm_tree_at(w.base_fd, stage);
        return r < 0 ? cage_fail(err, r, "remove %s/%s", w.base, stage) : 0;
}

/* ---- usage ------------------------------------------------------------ */

struct du {
        uint64_t bytes;
        unsigned long entries;
        bool truncated;
        dev_t dev;
};

/* Adds up the blocks under fd (which it takes), bounded in entries and
 * depth; stays on one filesystem and never follows symlinks. */
static int du_dir(int fd, unsigned depth, struct du *du)
{
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                if (dot_or_dotdot(de->d_name))
                        continue;
                if (++du->entries > CAGE_WORKSPACE_DU_MAX_ENTRIES) {
                        du->truncated = true;
                        return 0;
                }
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                du->bytes += (uint64_t)st.st_blocks * 512;
                if (!S_ISDIR(st.st_mode) || st.st_dev != du->dev)
                        continue;
                if (depth + 1 >= CAGE_WORKSPACE_DU_MAX_DEPTH) {
                        du->truncated = true;
                        continue;
                }
                int child = openat(dirfd(d), de->d_name,
                                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                int r = du_dir(child, depth + 1, du);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int usage_dir(const struct ws *w, uint64_t *used, uint64_t *total, struct cage_error *err)
{
        char size[32];
        ssize_t n = read_file_at(w->dir_fd, SIZE_NAME, size, sizeof(size));
        int fd = openat(w->dir_fd, DATA_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
                int r = cage_fail(err, -errno, "workspace %s: open data/", w->id);
                cleanup_closep(&fd);
                return r;
        }
        struct du du = {.bytes = (uint64_t)st.st_blocks * 512, .dev = st.st_dev};
        int r = du_dir(fd, 0, &du);
        if (r < 0)
                return cage_fail(err, r, "workspace %s: count usage", w->id);
        *used = du.bytes;
        *total = n > 0 ? strtoull(size, NULL, 10) : 0;
        return du.truncated ? 1 : 0;
}

static int usage_loop(const struct ws *w, uint64_t *used, uint64_t *total, struct cage_error *err)
{
        int r = mnt_mounted(w);
        if (r <= 0)
                return cage_fail(err, r < 0 ? r : -ENOTCONN, "workspace %s is not mounted", w->id);
        _cleanup_close_ int fd =
                openat(w->dir_fd, MNT_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct statvfs sv;
        if (fd < 0 || fstatvfs(fd, &sv) < 0)
                return cage_fail(err, -errno, "workspace %s: statvfs", w->id);
        *total = (uint64_t)sv.f_blocks * sv.f_frsize;
        *used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
        return 0;
}

int cage_workspace_usage(const char *base, const char *id, uint64_t *used, uint64_t *total,
                         struct cage_error *err)
{
        _cleanup_ws_ struct ws w = WS_INIT;
        int backend = ws_open_existing(base, id, &w, err);
        if (backend < 0)
                return backend;
        return backend == CAGE_WORKSPACE_LOOP ? usage_loop(&w, used, total, err)
                                              : usage_dir(&w, used, total, err);
}

/* ---- sweep ------------------------------------------------------------ */

/* Decodes the octal escapes of a mountinfo field (\040 for space, ...). */
static void mountinfo_unescape(char *s)
{
        char *out = s;
        for (char *in = s; *in; out++) {
                if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
                    in[3] >= '0' && in[3] <= '7') {
                        *out = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
                        in += 4;
                } else {
                        *out = *in++;
                }
        }
        *out = '\0';
}

static size_t path_depth(const char *p)
{
        size_t n = 0;
        for (; *p; p++)
                n += *p == '/';
        return n;
}

static int deepest_first(const void *a, const void *b)
{
        const char *x = *(const char *const *)a, *y = *(const char *const *)b;
        size_t dx = path_depth(x), dy = path_depth(y);
        return dx != dy ? (dx < dy ? 1 : -1) : strcmp(y, x);
}

struct strv {
        char **v;
        size_t n, cap;
};

static void strv_done(struct strv *s)
{
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
}

static int strv_push(struct strv *s, const char *str)
{
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 16;
                char **v = realloc(s->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->v = v;
                s->cap = cap;
        }
        if (!(s->v[s->n] = strdup(str)))
                return -ENOMEM;
        s->n++;
        return 0;
}

/* Mount points strictly beneath prefix (ends in '/'), one per mount. */
static int mounts_beneath(const char *prefix, struct strv *out)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        while (getline(&line, &size, f) > 0) {
                char *save = NULL, *field = strtok_r(line, " ", &save);
                for (int i = 1; field && i < 5; i++) /* field 5 is the mount point */
                        field = strtok_r(NULL, " ", &save);
                if (!field)
                        continue;
                mountinfo_unescape(field);
                if (strncmp(field, prefix, strlen(prefix)) == 0 && strv_push(out, field) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int sweep_mounts(const char *prefix, int *count, struct cage_error *err)
{
        __attribute__((cleanup(strv_done))) struct strv mounts = {0};
        int r = mounts_beneath(prefix, &mounts);
        if (r < 0)
                return cage_fail(err, r, "read /proc/self/mountinfo");
        if (mounts.n > 1)
                qsort(mounts.v, mounts.n, sizeof(*mounts.v), deepest_first);
        int first = 0;
        for (size_t i = 0; i < mounts.n; i++) {
                const char *mp = mounts.v[i];
                if (umount2(mp, UMOUNT_NOFOLLOW) < 0 &&
                    (errno != EBUSY || umount2(mp, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)) {
                        if (errno != EINVAL && errno != ENOENT && first == 0) /* gone already */
                                first = cage_fail(err, -errno, "unmount %s", mp);
                        continue;
                }
                (*count)++;
        }
        return first;
}

/* Templates go too: the next ones are made by this server's mkfs.ext4. */
static bool is_stage_name(const char *name)
{
        return strncmp(name, CREATING_PREFIX, strlen(CREATING_PREFIX)) == 0 ||
               strncmp(name, DELETING_PREFIX, strlen(DELETING_PREFIX)) == 0 ||
               strncmp(name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) == 0;
}

/* Interrupted creations and deletions; and the templates. */
static int sweep_stages(int base_fd, const char *base, int *count, struct cage_error *err)
{
        int fd = openat(base_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return cage_fail(err, -errno, "open %s", base);
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                int r = cage_fail(err, -errno, "read %s", base);
                close(fd);
                return r;
        }
        int first = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!is_stage_name(de->d_name))
                        continue;
                int r = rm_tree_at(base_fd, de->d_name);
                bool cache = strncmp(de->d_name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) == 0;
                if (r == 0)
                        *count += !cache; /* a template is no leftover */
                else if (first == 0)
                        first = cage_fail(err, r, "remove %s/%s", base, de->d_name);
        }
        return first;
}

int cage_workspace_sweep(const char *base, struct cage_error *err)
{
        _cleanup_free_ char *real = NULL;
        _cleanup_close_ int base_fd = open_base(base, &real, err);
        if (base_fd < 0)
                return base_fd;
        _cleanup_free_ char *prefix = NULL;
        if (asprintf(&prefix, "%s/", real) < 0)
                return cage_fail(err, -ENOMEM, "sweep %s", real);
        int count = 0;
        /* Mounts first (deepest first), so that autoclear frees most loop
         * devices by itself; then loops left bound; then staging dirs. Each
         * step runs even when an earlier one failed; err keeps the first. */
        int first = sweep_mounts(prefix, &count, err);
        int r = loops_detach_beneath(prefix, &count, first < 0 ? NULL : err);
        first = first < 0 ? first : r;
        r = sweep_stages(base_fd, real, &count, first < 0 ? NULL : err);
        first = first < 0 ? first : r;
        return first < 0 ? first : count;
}

/* ---- backend ---------------------------------------------------------- */

const char *cage_workspace_backend_to_string(enum cage_workspace_backend b)
{
        switch (b) {
        case CAGE_WORKSPACE_LOOP:
                return "loop";
        case CAGE_WORKSPACE_DIR:
                return "dir";
        }
        return NULL;
}

enum cage_workspace_backend cage_workspace_backend_detect(void)
{
        if (!is_root() || !mkfs_path())
                return CAGE_WORKSPACE_DIR;
        _cleanup_close_ int fd = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        return fd >= 0 ? CAGE_WORKSPACE_LOOP : CAGE_WORKSPACE_DIR;
}
