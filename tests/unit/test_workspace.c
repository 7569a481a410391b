/* Unit tests for persistent workspaces: what the service relies on - the
 * layout and owners of a new workspace, the hard cap (ENOSPC), persistence
 * across unmount/mount, idempotent mount/unmount/destroy, no mount or loop
 * device left behind by destroy or by sweep after a "crash", refusal to
 * attach an image that an old mount still holds, destroy never following a
 * planted symlink, and bad ids. Each test gets a fresh base under /tmp.
 *
 * The binary first moves into a private mount namespace (when root), so
 * any mount it makes vanishes with it. LOOP tests need root and
 * /dev/loop-control and are skipped without them. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "services/workspace.h"

#define MIB (1024ull * 1024)

struct tmp {
        char base[64];
        char real[128]; /* realpath of base (a short /tmp path) */
};

static bool private_ns(void)
{
        static int state; /* 0 unknown, 1 yes, -1 no */
        if (state == 0) {
                bool ok = geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
                          mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
                state = ok ? 1 : -1;
        }
        return state > 0;
}

static bool loop_ok(void)
{
        return private_ns() && access("/dev/loop-control", R_OK | W_OK) == 0 &&
               cage_workspace_backend_detect() == CAGE_WORKSPACE_LOOP;
}

#define REQUIRE_LOOP()                                                                             \
        do {                                                                                       \
                if (!loop_ok())                                                                    \
                        SKIP("%s: needs root, /dev/loop-control and mkfs.ext4", __func__);         \
        } while (0)

static void tmp_make(struct tmp *t)
{
        (void)private_ns();
        snprintf(t->base, sizeof(t->base), "/tmp/codecage-ws-XXXXXX");
        char real[PATH_MAX];
        if (!mkdtemp(t->base) || !realpath(t->base, real) || strlen(real) >= sizeof(t->real)) {
                perror("mkdtemp");
                abort();
        }
        memcpy(t->real, real, strlen(real) + 1);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st, (void)flag, (void)ftw;
        remove(path);
        return 0;
}

static void tmp_remove(struct tmp *t)
{
        (void)cage_workspace_sweep(t->base, NULL);
        nftw(t->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static char *path_of(const struct tmp *t, const char *rel)
{
        static char buf[4][PATH_MAX];
        static int next;
        char *p = buf[next++ % 4];
        snprintf(p, PATH_MAX, "%s/%s", t->real, rel);
        return p;
}

/* Mounts in /proc/self/mountinfo whose mount point starts with prefix. */
static int mounts_with_prefix(const char *prefix)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -1;
        char line[4096], mp[4096];
        int n = 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 &&
                    strncmp(mp, prefix, strlen(prefix)) == 0)
                        n++;
        fclose(f);
        return n;
}

/* Whether loop device i is bound to a file whose path starts with prefix. */
static bool loop_backed_by(int i, const char *prefix)
{
        char path[96], backing[PATH_MAX];
        snprintf(path, sizeof(path), "/sys/block/loop%d/loop/backing_file", i);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        bool ours =
                fgets(backing, sizeof(backing), f) && strncmp(backing, prefix, strlen(prefix)) == 0;
        fclose(f);
        return ours;
}

/* Loop devices whose backing file starts with prefix. */
static int loops_with_prefix(const char *prefix)
{
        int n = 0;
        for (int i = 0; i < 4096; i++)
                n += loop_backed_by(i, prefix);
        return n;
}

/* The index of the first of them; -1 when none. */
static int loop_index_of(const char *prefix)
{
        for (int i = 0; i < 4096; i++)
                if (loop_backed_by(i, prefix))
                        return i;
        return -1;
}

/* Loop devices go away with their last user; give the kernel a moment. */
static int loops_settled(const char *prefix)
{
        int n = loops_with_prefix(prefix);
        for (int i = 0; n > 0 && i < 200; i++) {
                usleep(10000);
                n = loops_with_prefix(prefix);
        }
        return n;
}

static int write_file(const char *path, const char *content)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, content, strlen(content));
        int r = n == (ssize_t)strlen(content) ? 0 : -EIO;
        close(fd);
        return r;
}

static bool file_is(const char *path, const char *content)
{
        char buf[256] = "";
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        return strcmp(buf, content) == 0;
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

static bool is_mounted_dir(const char *path)
{
        struct statx stx;
        return statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0 &&
               (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

static int create(const struct tmp *t, const char *id, uint64_t bytes,
                  enum cage_workspace_backend b)
{
        struct cage_error err = {0};
        int r = cage_workspace_create(t->base, id, bytes, b, &err);
        if (r < 0)
                fprintf(stderr, "  create %s: %s\n", id, err.message);
        return r;
}

static char *mount_ok(const struct tmp *t, const char *id)
{
        struct cage_error err = {0};
        char *path = NULL;
        int r = cage_workspace_mount(t->base, id, &path, &err);
        if (r < 0)
                fprintf(stderr, "  mount %s: %s\n", id, err.message);
        CHECK(r == 0 && path);
        return path ? path : strdup("/nonexistent"); /* later checks fail, not crash */
}

/* A fresh base holding one mounted LOOP workspace; returns its path. */
static char *loop_start(struct tmp *t, const char *id, uint64_t bytes)
{
        tmp_make(t);
        CHECK(create(t, id, bytes, CAGE_WORKSPACE_LOOP) == 0);
        return mount_ok(t, id);
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(test_bad_input)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_error err = {0};
        const char *bad[] = {"", "A", "a/b", "..", ".", "a.b", "a b", "a\nb", "é", NULL};
        char too_long[CAGE_WORKSPACE_ID_MAX + 2];
        memset(too_long, 'a', sizeof(too_long) - 1);
        too_long[sizeof(too_long) - 1] = '\0';
        bad[sizeof(bad) / sizeof(bad[0]) - 1] = too_long;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *path = NULL;
                uint64_t u, tot;
                CHECK(cage_workspace_create(t.base, bad[i], 16 * MIB, CAGE_WORKSPACE_DIR, &err) ==
                      -EINVAL);
                CHECK(cage_workspace_mount(t.base, bad[i], &path, &err) == -EINVAL && !path);
                CHECK(cage_workspace_unmount(t.base, bad[i], &err) == -EINVAL);
                CHECK(cage_workspace_destroy(t.base, bad[i], &err) == -EINVAL);
                CHECK(cage_workspace_usage(t.base, bad[i], &u, &tot, &err) == -EINVAL);
        }
        CHECK(cage_workspace_create(t.base, NULL, 16 * MIB, CAGE_WORKSPACE_DIR, &err) == -EINVAL);
        /* 64 characters is the longest id. */
        CHECK(create(&t, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde-",
                     8 * MIB, CAGE_WORKSPACE_DIR) == 0);
        CHECK(cage_workspace_create(t.base, "small", 8 * MIB - 1, CAGE_WORKSPACE_DIR, &err) ==
              -EINVAL);
        CHECK(strstr(err.message, "disk_mib") != NULL);
        CHECK(cage_workspace_create(t.base, "huge", CAGE_WORKSPACE_MAX_BYTES + 1,
                                    CAGE_WORKSPACE_LOOP, &err) == -EINVAL);
        CHECK(cage_workspace_create(t.base, "x", 16 * MIB, (enum cage_workspace_backend)7, &err) ==
              -EINVAL);
        CHECK(cage_workspace_create("/nonexistent/base", "x", 16 * MIB, CAGE_WORKSPACE_DIR, &err) ==
              -ENOENT);
        /* Missing workspaces: mount and usage say so; unmount and destroy are no-ops. */
        char *path = NULL;
        uint64_t u, tot;
        CHECK(cage_workspace_mount(t.base, "missing", &path, &err) == -ENOENT);
        CHECK(cage_workspace_usage(t.base, "missing", &u, &tot, &err) == -ENOENT);
        CHECK(cage_workspace_unmount(t.base, "missing", &err) == 0);
        CHECK(cage_workspace_destroy(t.base, "missing", &err) == 0);
        /* Only the valid one was made, and no staging directory is left. */
        CHECK(!exists(path_of(&t, "small")) && !exists(path_of(&t, "x")));
        CHECK(cage_workspace_sweep(t.base, &err) == 0);
        tmp_remove(&t);
}

TEST(test_backend_names)
{
        CHECK_STREQ(cage_workspace_backend_to_string(CAGE_WORKSPACE_LOOP), "loop");
        CHECK_STREQ(cage_workspace_backend_to_string(CAGE_WORKSPACE_DIR), "dir");
        CHECK(cage_workspace_backend_to_string((enum cage_workspace_backend)9) == NULL);
        if (geteuid() != 0)
                CHECK(cage_workspace_backend_detect() == CAGE_WORKSPACE_DIR);
}

TEST(test_loop_create_mount)
{
        REQUIRE_LOOP();
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "ws1", 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_create(t.base, "ws1", 16 * MIB, CAGE_WORKSPACE_LOOP, &err) == -EEXIST);
        struct stat st;
        CHECK(stat(path_of(&t, "ws1"), &st) == 0 && (st.st_mode & 07777) == 0700);
        CHECK(stat(path_of(&t, "ws1/image"), &st) == 0 && (st.st_mode & 07777) == 0600);
        CHECK(st.st_size == (off_t)(16 * MIB) && (uint64_t)st.st_blocks * 512 < 16 * MIB);
        CHECK(loops_settled(t.real) == 0); /* create leaves nothing attached */

        char *path = mount_ok(&t, "ws1");
        CHECK_STREQ(path, path_of(&t, "ws1/mnt"));
        CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
        CHECK(st.st_uid == CAGE_WORKSPACE_OWNER_UID && st.st_gid == CAGE_WORKSPACE_OWNER_GID);
        CHECK(stat(path_of(&t, "ws1/mnt/output"), &st) == 0 && S_ISDIR(st.st_mode));
        CHECK(st.st_uid == CAGE_WORKSPACE_OWNER_UID && (st.st_mode & 07777) == 0755);
        CHECK(!exists(path_of(&t, "ws1/mnt/lost+found")));
        struct statvfs sv;
        CHECK(statvfs(path, &sv) == 0 && (sv.f_flag & ST_NOSUID) && (sv.f_flag & ST_NODEV) &&
              !(sv.f_flag & ST_NOEXEC));

        CHECK(write_file(path_of(&t, "ws1/mnt/hello.txt"), "hello") == 0);
        CHECK(file_is(path_of(&t, "ws1/mnt/hello.txt"), "hello"));
        uint64_t used = 0, total = 0;
        CHECK(cage_workspace_usage(t.base, "ws1", &used, &total, &err) == 0);
        CHECK(total <= 16 * MIB && total >= 12 * MIB && used > 0 && used < total);

        /* Idempotent: same path, still exactly one mount. */
        char *again = mount_ok(&t, "ws1");
        CHECK_STREQ(again, path);
        CHECK(mounts_with_prefix(path) == 1);
        CHECK(loops_with_prefix(path_of(&t, "ws1/image")) == 1);
        free(again);
        free(path);
        tmp_remove(&t);
}

/* Workspaces of one size are copies of one formatted template: each is
 * complete, and each is its own filesystem. Past the number of sizes kept,
 * a workspace is formatted on its own. Sweep drops templates, uncounted. */
TEST(test_loop_template)
{
        REQUIRE_LOOP();
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "one", 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        CHECK(create(&t, "two", 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        struct stat st;
        CHECK(stat(path_of(&t, ".template-16777216/image"), &st) == 0 && S_ISREG(st.st_mode));
        CHECK((st.st_mode & 07777) == 0600 && st.st_size == (off_t)(16 * MIB));
        char *p1 = mount_ok(&t, "one"), *p2 = mount_ok(&t, "two");
        CHECK(!exists(path_of(&t, "two/mnt/lost+found")) && exists(path_of(&t, "two/mnt/output")));
        CHECK(write_file(path_of(&t, "one/mnt/only-in-one"), "1") == 0);
        CHECK(!exists(path_of(&t, "two/mnt/only-in-one")));
        struct stat s1, s2;
        CHECK(stat(p1, &s1) == 0 && stat(p2, &s2) == 0 && s1.st_dev != s2.st_dev);
        free(p1);
        free(p2);
        for (int i = 0; i < 18; i++) { /* 18 more sizes: 16 templates at most */
                char id[16];
                snprintf(id, sizeof(id), "size%d", i);
                CHECK(create(&t, id, (uint64_t)(17 + i) * MIB, CAGE_WORKSPACE_LOOP) == 0);
                char *p = mount_ok(&t, id);
                CHECK(p && !exists(path_of(&t, "size17/mnt/lost+found")));
                free(p);
        }
        CHECK(exists(path_of(&t, ".template-32505856")));  /* 31 MiB: the 16th size */
        CHECK(!exists(path_of(&t, ".template-33554432"))); /* 32 MiB: formatted on its own */
        CHECK(exists(path_of(&t, "size17/mnt/output")));
        struct cage_error err = {0};
        CHECK(cage_workspace_sweep(t.base, &err) >= 0);
        CHECK(!exists(path_of(&t, ".template-16777216")));
        CHECK(cage_workspace_sweep(t.base, &err) == 0);
        p1 = mount_ok(&t, "one");
        CHECK(file_is(path_of(&t, "one/mnt/only-in-one"), "1"));
        free(p1);
        tmp_remove(&t);
}

TEST(test_loop_cap_enospc)
{
        REQUIRE_LOOP();
        struct tmp t;
        char *path = loop_start(&t, "full", 8 * MIB);
        static char chunk[1 << 20];
        memset(chunk, 'x', sizeof(chunk));
        int fd = open(path_of(&t, "full/mnt/big"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        int failure = 0;
        size_t written = 0;
        for (int i = 0; i < 16 && !failure; i++) { /* 16 MiB into 8 */
                ssize_t n = write(fd, chunk, sizeof(chunk));
                if (n < 0)
                        failure = errno;
                else
                        written += (size_t)n;
        }
        if (!failure && fsync(fd) < 0)
                failure = errno;
        close(fd);
        CHECK(failure == ENOSPC);
        CHECK(written < 8 * MIB && written > 4 * MIB);
        uint64_t used = 0, total = 0;
        struct cage_error err = {0};
        CHECK(cage_workspace_usage(t.base, "full", &used, &total, &err) == 0);
        CHECK(total - used < 1 * MIB);
        /* Space comes back when the file goes. */
        CHECK(unlink(path_of(&t, "full/mnt/big")) == 0);
        CHECK(write_file(path_of(&t, "full/mnt/small"), "ok") == 0);
        free(path);
        tmp_remove(&t);
}

TEST(test_loop_persistence)
{
        REQUIRE_LOOP();
        struct tmp t;
        char *path = loop_start(&t, "keep", 16 * MIB);
        CHECK(mkdir(path_of(&t, "keep/mnt/dir"), 0755) == 0);
        CHECK(write_file(path_of(&t, "keep/mnt/dir/data.csv"), "a,b\n1,2\n") == 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_unmount(t.base, "keep", &err) == 0);
        CHECK(!is_mounted_dir(path) && !exists(path_of(&t, "keep/mnt/dir")));
        CHECK(cage_workspace_unmount(t.base, "keep", &err) == 0);
        uint64_t used, total;
        CHECK(cage_workspace_usage(t.base, "keep", &used, &total, &err) == -ENOTCONN);
        CHECK(loops_settled(t.real) == 0);
        free(path);
        path = mount_ok(&t, "keep");
        CHECK(file_is(path_of(&t, "keep/mnt/dir/data.csv"), "a,b\n1,2\n"));
        free(path);
        tmp_remove(&t);
}

TEST(test_loop_destroy)
{
        REQUIRE_LOOP();
        struct tmp t;
        char *path = loop_start(&t, "gone", 16 * MIB);
        CHECK(write_file(path_of(&t, "gone/mnt/f"), "x") == 0);
        CHECK(mkdir(path_of(&t, "outside"), 0755) == 0);
        CHECK(write_file(path_of(&t, "outside/keep"), "keep") == 0);
        CHECK(symlink(path_of(&t, "outside"), path_of(&t, "gone/mnt/link")) == 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_destroy(t.base, "gone", &err) == 0);
        CHECK(!exists(path_of(&t, "gone")));
        CHECK(mounts_with_prefix(t.real) == 0);
        CHECK(loops_settled(t.real) == 0);
        CHECK(file_is(path_of(&t, "outside/keep"), "keep"));
        CHECK(cage_workspace_destroy(t.base, "gone", &err) == 0);
        CHECK(cage_workspace_sweep(t.base, &err) == 0); /* nothing staged is left */
        free(path);
        tmp_remove(&t);
}

/* Workspaces made and destroyed one after another reuse the loop device
 * each frees, rather than adding a new device every time (the next device
 * is tried first only while none was freed). Another process may take a
 * freed device first, hence the margin. */
TEST(test_loop_devices_reused)
{
        REQUIRE_LOOP();
        struct tmp t;
        tmp_make(&t);
        bool seen[4096] = {false};
        int distinct = 0;
        for (int i = 0; i < 10; i++) {
                char id[16];
                snprintf(id, sizeof(id), "churn%d", i);
                CHECK(create(&t, id, 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
                free(mount_ok(&t, id));
                int n = loop_index_of(path_of(&t, id));
                CHECK(n >= 0);
                if (n >= 0 && !seen[n]) {
                        seen[n] = true;
                        distinct++;
                }
                struct cage_error err = {0};
                CHECK(cage_workspace_destroy(t.base, id, &err) == 0);
                CHECK(loops_settled(path_of(&t, id)) == 0);
        }
        CHECK(distinct <= 5);
        tmp_remove(&t);
}

/* A clone of the mount (what a running sandbox holds) keeps the filesystem
 * and its loop device alive after unmount: a second attach must wait. */
TEST(test_loop_refuses_double_attach)
{
        REQUIRE_LOOP();
        struct tmp t;
        char *path = loop_start(&t, "held", 16 * MIB);
        int clone =
                (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        CHECK(clone >= 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_unmount(t.base, "held", &err) == 0);
        char *again = NULL;
        CHECK(cage_workspace_mount(t.base, "held", &again, &err) == -EBUSY && !again);
        CHECK(strstr(err.message, "still in use") != NULL);
        close(clone);
        free(path);
        path = mount_ok(&t, "held");
        free(path);
        tmp_remove(&t);
}

/* An open file keeps the filesystem busy: unmount detaches it lazily. */
TEST(test_loop_unmount_busy)
{
        REQUIRE_LOOP();
        struct tmp t;
        char *path = loop_start(&t, "busy", 16 * MIB);
        CHECK(write_file(path_of(&t, "busy/mnt/open"), "still here") == 0);
        int fd = open(path_of(&t, "busy/mnt/open"), O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_unmount(t.base, "busy", &err) == 0);
        CHECK(!is_mounted_dir(path) && mounts_with_prefix(t.real) == 0);
        char buf[16] = "";
        CHECK(read(fd, buf, sizeof(buf) - 1) == 10 && strcmp(buf, "still here") == 0);
        close(fd);
        free(path);
        path = mount_ok(&t, "busy");
        CHECK(file_is(path_of(&t, "busy/mnt/open"), "still here"));
        free(path);
        tmp_remove(&t);
}

/* Binds a file to a loop device without autoclear, as a server killed
 * between LOOP_SET_FD and LOOP_SET_STATUS64 would leave it. */
static int leak_loop(const char *file)
{
        int image = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        int r = -1;
        if (image >= 0 && ctl >= 0 && ftruncate(image, 1 << 20) == 0) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                char dev[32];
                snprintf(dev, sizeof(dev), "/dev/loop%d", n);
                int fd = n >= 0 ? open(dev, O_RDWR | O_CLOEXEC) : -1;
                if (fd >= 0 && ioctl(fd, LOOP_SET_FD, image) == 0)
                        r = 0;
                if (fd >= 0)
                        close(fd);
        }
        if (image >= 0)
                close(image);
        if (ctl >= 0)
                close(ctl);
        return r;
}

TEST(test_sweep)
{
        REQUIRE_LOOP();
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "a", 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        CHECK(create(&t, "b", 16 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        char *pa = mount_ok(&t, "a"), *pb = mount_ok(&t, "b");
        CHECK(write_file(path_of(&t, "a/mnt/fa"), "A") == 0);
        CHECK(write_file(path_of(&t, "b/mnt/fb"), "B") == 0);
        /* What a crashed server leaves: a leaked loop device, interrupted
         * creation and deletion directories. */
        CHECK(leak_loop(path_of(&t, "stray.img")) == 0);
        CHECK(mkdir(path_of(&t, ".creating-c-0123456789ab"), 0700) == 0);
        CHECK(write_file(path_of(&t, ".creating-c-0123456789ab/image"), "half") == 0);
        CHECK(mkdir(path_of(&t, ".deleting-d-0123456789ab"), 0700) == 0);
        CHECK(mkdir(path_of(&t, ".deleting-d-0123456789ab/data"), 0700) == 0);
        CHECK(loops_with_prefix(t.real) == 3);

        struct cage_error err = {0};
        int n = cage_workspace_sweep(t.base, &err);
        if (n < 0)
                fprintf(stderr, "  sweep: %s\n", err.message);
        CHECK(n >= 5); /* 2 mounts, the stray loop, 2 staging dirs */
        CHECK(!is_mounted_dir(pa) && !is_mounted_dir(pb) && mounts_with_prefix(t.real) == 0);
        CHECK(loops_settled(t.real) == 0);
        CHECK(!exists(path_of(&t, ".creating-c-0123456789ab")));
        CHECK(!exists(path_of(&t, ".deleting-d-0123456789ab")));
        CHECK(cage_workspace_sweep(t.base, &err) == 0);
        free(pa);
        free(pb);
        pa = mount_ok(&t, "a");
        pb = mount_ok(&t, "b");
        CHECK(file_is(path_of(&t, "a/mnt/fa"), "A") && file_is(path_of(&t, "b/mnt/fb"), "B"));
        free(pa);
        free(pb);
        tmp_remove(&t);
}

TEST(test_loop_timing_1gib)
{
        REQUIRE_LOOP();
        struct tmp t;
        tmp_make(&t);
        int64_t start = now_ms();
        CHECK(create(&t, "big", 1024 * MIB, CAGE_WORKSPACE_LOOP) == 0);
        int64_t created = now_ms();
        char *path = mount_ok(&t, "big");
        int64_t mounted = now_ms();
        struct stat st;
        CHECK(stat(path_of(&t, "big/image"), &st) == 0);
        printf("  1 GiB workspace: create %lld ms, mount %lld ms, image uses %lld KiB on disk\n",
               (long long)(created - start), (long long)(mounted - created),
               (long long)st.st_blocks / 2);
        CHECK(mounted - start < 20000);
        struct cage_error err = {0};
        CHECK(cage_workspace_destroy(t.base, "big", &err) == 0);
        free(path);
        tmp_remove(&t);
}

TEST(test_dir_roundtrip)
{
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "plain", 16 * MIB, CAGE_WORKSPACE_DIR) == 0);
        struct stat st;
        CHECK(stat(path_of(&t, "plain"), &st) == 0 && (st.st_mode & 07777) == 0700);
        char *path = mount_ok(&t, "plain");
        CHECK_STREQ(path, path_of(&t, "plain/data"));
        uid_t owner = geteuid() == 0 ? CAGE_WORKSPACE_OWNER_UID : geteuid();
        CHECK(stat(path, &st) == 0 && st.st_uid == owner);
        CHECK(stat(path_of(&t, "plain/data/output"), &st) == 0 && st.st_uid == owner);
        char big[64 * 1024];
        memset(big, 'y', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        CHECK(write_file(path_of(&t, "plain/data/output/report.txt"), big) == 0);
        uint64_t used = 0, total = 0;
        struct cage_error err = {0};
        CHECK(cage_workspace_usage(t.base, "plain", &used, &total, &err) == 0);
        CHECK(total == 16 * MIB && used >= sizeof(big) - 1);
        CHECK(cage_workspace_unmount(t.base, "plain", &err) == 0);
        /* A deleted output/ comes back on mount. */
        CHECK(unlink(path_of(&t, "plain/data/output/report.txt")) == 0);
        CHECK(rmdir(path_of(&t, "plain/data/output")) == 0);
        free(path);
        path = mount_ok(&t, "plain");
        CHECK(exists(path_of(&t, "plain/data/output")));
        CHECK(cage_workspace_destroy(t.base, "plain", &err) == 0);
        CHECK(!exists(path_of(&t, "plain")));
        free(path);
        tmp_remove(&t);
}

TEST(test_dir_damaged_root)
{
        if (geteuid() != 0)
                SKIP("%s: needs root", __func__);
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "bad", 16 * MIB, CAGE_WORKSPACE_DIR) == 0);
        CHECK(chown(path_of(&t, "bad/data"), 0, 0) == 0);
        struct cage_error err = {0};
        char *path = NULL;
        CHECK(cage_workspace_mount(t.base, "bad", &path, &err) == -EUCLEAN && !path);
        CHECK(rename(path_of(&t, "bad/data"), path_of(&t, "bad/other")) == 0);
        CHECK(cage_workspace_mount(t.base, "bad", &path, &err) == -EUCLEAN && !path);
        CHECK(cage_workspace_destroy(t.base, "bad", &err) == 0);
        tmp_remove(&t);
}

TEST(test_destroy_never_follows_symlinks)
{
        struct tmp t;
        tmp_make(&t);
        CHECK(mkdir(path_of(&t, "outside"), 0755) == 0);
        CHECK(mkdir(path_of(&t, "outside/sub"), 0755) == 0);
        CHECK(write_file(path_of(&t, "outside/keep"), "keep") == 0);
        CHECK(write_file(path_of(&t, "outside/sub/keep"), "keep") == 0);
        CHECK(create(&t, "evil", 16 * MIB, CAGE_WORKSPACE_DIR) == 0);
        char *path = mount_ok(&t, "evil");
        CHECK(symlink(path_of(&t, "outside"), path_of(&t, "evil/data/link")) == 0);
        CHECK(mkdir(path_of(&t, "evil/data/a"), 0755) == 0);
        CHECK(mkdir(path_of(&t, "evil/data/a/b"), 0755) == 0);
        CHECK(symlink(path_of(&t, "outside/sub"), path_of(&t, "evil/data/a/b/link")) == 0);
        CHECK(symlink(path_of(&t, "outside/keep"), path_of(&t, "evil/data/a/file-link")) == 0);
        CHECK(symlink("../../../outside", path_of(&t, "evil/data/a/b/rel")) == 0);
        CHECK(link(path_of(&t, "outside/keep"), path_of(&t, "evil/data/a/hard")) == 0);
        CHECK(mkfifo(path_of(&t, "evil/data/a/fifo"), 0600) == 0);
        struct cage_error err = {0};
        CHECK(cage_workspace_destroy(t.base, "evil", &err) == 0);
        CHECK(!exists(path_of(&t, "evil")));
        CHECK(file_is(path_of(&t, "outside/keep"), "keep"));
        CHECK(file_is(path_of(&t, "outside/sub/keep"), "keep"));
        free(path);
        tmp_remove(&t);
}

/* A tree far deeper than any fd or stack budget: destroy still removes it,
 * usage reports a lower bound. */
TEST(test_destroy_deep_tree)
{
        struct tmp t;
        tmp_make(&t);
        CHECK(create(&t, "deep", 16 * MIB, CAGE_WORKSPACE_DIR) == 0);
        char *path = mount_ok(&t, "deep");
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        CHECK(fd >= 0);
        for (int i = 0; i < 3000 && fd >= 0; i++) {
                if (mkdirat(fd, "d", 0755) < 0)
                        break;
                /* a byte each: on tmpfs an empty file and a directory use no blocks */
                int f = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                if (f >= 0) {
                        (void)!write(f, "x", 1);
                        close(f);
                }
                int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                close(fd);
                fd = next;
        }
        CHECK(fd >= 0);
        if (fd >= 0)
                close(fd);
        uint64_t used = 0, total = 0;
        struct cage_error err = {0};
        CHECK(cage_workspace_usage(t.base, "deep", &used, &total, &err) == 1 && used > 0);
        CHECK(cage_workspace_destroy(t.base, "deep", &err) == 0);
        CHECK(!exists(path_of(&t, "deep")));
        free(path);
        tmp_remove(&t);
}

RUN_TESTS(T(test_bad_input), T(test_backend_names), T(test_loop_create_mount),
          T(test_loop_devices_reused), T(test_loop_template), T(test_loop_cap_enospc),
          T(test_loop_persistence), T(test_loop_destroy), T(test_loop_refuses_double_attach),
          T(test_loop_unmount_busy), T(test_sweep), T(test_loop_timing_1gib), T(test_dir_roundtrip),
          T(test_dir_damaged_root), T(test_destroy_never_follows_symlinks),
          T(test_destroy_deep_tree))
