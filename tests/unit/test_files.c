/* Unit tests for workspace files and artifacts: client paths are checked;
 * nothing the sandbox plants in the workspace (symlinks to host files or
 * directories, hard links, FIFOs, device nodes) makes the server read or
 * write outside it, block, or read more than allowed; created files belong
 * to the workspace owner; artifacts are exactly the new or changed regular
 * files of output/; copy_tree keeps within its limits and copies no link. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "services/files.h"

#define OWNER 12345

/* A 1x1 PNG. */
static const unsigned char png[] = {
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
        0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
        0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78,
        0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00,
        0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

/* base/ws is the workspace (owned by OWNER when we are root), base/outside
 * stands for the host. */
static char base[64];
static int root_fd = -1;

static const char *at(const char *rel)
{
        static char bufs[4][512];
        static int next;
        char *b = bufs[next++ % 4];
        snprintf(b, sizeof(bufs[0]), "%s/%s", base, rel);
        return b;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void teardown(void)
{
        if (root_fd >= 0)
                close(root_fd);
        root_fd = -1;
        if (base[0])
                nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        base[0] = '\0';
}

static void setup(void)
{
        teardown();
        snprintf(base, sizeof(base), "/tmp/codecage-test-files-XXXXXX");
        if (!mkdtemp(base))
                abort();
        if (mkdir(at("ws"), 0755) < 0 || mkdir(at("outside"), 0755) < 0)
                abort();
        if (geteuid() == 0 && chown(at("ws"), OWNER, OWNER) < 0)
                abort();
        root_fd = open(at("ws"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0)
                abort();
}

static void put(const char *rel, const void *data, size_t len)
{
        int fd = open(at(rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, data, len) != (ssize_t)len)
                abort();
        close(fd);
}

static void put_str(const char *rel, const char *s)
{
        put(rel, s, strlen(s));
}

static bool exists(const char *rel)
{
        struct stat st;
        return lstat(at(rel), &st) == 0;
}

/* The host file's content, or "" when it cannot be read. */
static const char *content(const char *rel)
{
        static char buf[256];
        int fd = open(at(rel), O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        if (fd >= 0)
                close(fd);
        return buf;
}

static int read_str(const char *path, size_t max, char **ret)
{
        struct cage_error err = {};
        void *data = NULL;
        size_t len = 0;
        int r = cage_files_read(root_fd, path, max, &data, &len, &err);
        *ret = data;
        return r;
}

static int write_str(const char *path, const char *s)
{
        struct cage_error err = {};
        return cage_files_write(root_fd, path, s, strlen(s), &err);
}

static const char *json_str(json_t *o, const char *key)
{
        return json_string_value(json_object_get(o, key));
}

TEST(check_path_normalises)
{
        static const char *const cases[][2] = {
                {"a/b", "a/b"},
                {"a//b/./c/", "a/b/c"},
                {"/workspace", ""},
                {"/workspace/", ""},
                {"/workspace//a/b", "a/b"},
                {"", ""},
                {".", ""},
                {"./x", "x"},
                {"..a/b..", "..a/b.."},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char out[CAGE_FILES_PATH_MAX + 1];
                struct cage_error err = {};
                CHECK(cage_files_check_path(cases[i][0], out, &err) == 0);
                CHECK_STREQ(out, cases[i][1]);
        }
}

TEST(check_path_rejects)
{
        char out[CAGE_FILES_PATH_MAX + 1], long_name[300], long_path[CAGE_FILES_PATH_MAX + 2];
        struct cage_error err = {};
        CHECK(cage_files_check_path("../etc/passwd", out, &err) == -EINVAL);
        CHECK(strstr(err.message, "../etc/passwd") && strstr(err.message, "\"..\" is not allowed"));
        CHECK(cage_files_check_path("a/../../b", out, &err) == -EINVAL);
        CHECK(cage_files_check_path("/workspace/..", out, &err) == -EINVAL);
        CHECK(cage_files_check_path("/etc/passwd", out, &err) == -EINVAL);
        CHECK(strstr(err.message, "/etc/passwd") && strstr(err.message, "under /workspace"));
        CHECK(cage_files_check_path("/workspacex/a", out, &err) == -EINVAL);
        CHECK(cage_files_check_path("/", out, &err) == -EINVAL);
        CHECK(cage_files_check_path(NULL, out, &err) == -EINVAL);
        memset(long_name, 'n', 256);
        long_name[256] = '\0';
        CHECK(cage_files_check_path(long_name, out, &err) == -EINVAL);
        long_name[255] = '\0';
        CHECK(cage_files_check_path(long_name, out, &err) == 0);
        memset(long_path, 'a', sizeof(long_path) - 1);
        for (size_t i = 100; i < sizeof(long_path) - 1; i += 100)
                long_path[i] = '/';
        long_path[sizeof(long_path) - 1] = '\0';
        CHECK(cage_files_check_path(long_path, out, &err) == -EINVAL);
        long_path[CAGE_FILES_PATH_MAX] = '\0';
        CHECK(cage_files_check_path(long_path, out, &err) == 0);
        /* Every operation checks first. */
        setup();
        CHECK(write_str("../outside/x", "x") == -EINVAL);
        CHECK(!exists("outside/x"));
        teardown();
}

TEST(write_read_roundtrip)
{
        setup();
        char *data;
        CHECK(write_str("a/b/c.txt", "hello") == 0);
        CHECK(read_str("/workspace/a/b/c.txt", 100, &data) == 0);
        CHECK_STREQ(data, "hello");
        free(data);
        CHECK(write_str("a/b/c.txt", "bye") == 0);
        CHECK(read_str("a//b/./c.txt", 100, &data) == 0);
        CHECK_STREQ(data, "bye");
        free(data);
        CHECK_STREQ(content("ws/a/b/c.txt"), "bye");

        struct cage_error err = {};
        void *bin;
        size_t len;
        CHECK(cage_files_write(root_fd, "bin", "x\0y", 3, &err) == 0);
        CHECK(cage_files_read(root_fd, "bin", 3, &bin, &len, &err) == 0 && len == 3 &&
              memcmp(bin, "x\0y", 4) == 0);
        free(bin);
        CHECK(cage_files_write(root_fd, "empty", NULL, 0, &err) == 0);
        CHECK(cage_files_read(root_fd, "empty", 0, &bin, &len, &err) == 0 && len == 0);
        free(bin);
        CHECK(read_str("missing", 100, &data) == -ENOENT);
        /* No temporary file left behind. */
        json_t *l = NULL;
        CHECK(cage_files_list(root_fd, "a/b", &l, &err) == 0);
        CHECK(json_array_size(json_object_get(l, "entries")) == 1);
        json_decref(l);
        teardown();
}

TEST(created_files_get_the_root_owner)
{
        if (geteuid() != 0)
                SKIP("needs root");
        setup();
        struct stat st;
        struct cage_error err = {};
        CHECK(write_str("d1/d2/f", "x") == 0);
        CHECK(cage_files_mkdir(root_fd, "m1/m2", &err) == 0);
        CHECK(stat(at("ws/d1/d2/f"), &st) == 0 && st.st_uid == OWNER && st.st_gid == OWNER &&
              (st.st_mode & 07777) == 0644);
        static const char *const dirs[] = {"ws/d1", "ws/d1/d2", "ws/m1", "ws/m1/m2"};
        for (size_t i = 0; i < 4; i++)
                CHECK(stat(at(dirs[i]), &st) == 0 && st.st_uid == OWNER && st.st_gid == OWNER &&
                      (st.st_mode & 07777) == 0755);
        teardown();
}

TEST(read_never_follows_a_link_to_the_host)
{
        setup();
        char *data = NULL;
        CHECK(symlink("/etc/passwd", at("ws/passwd")) == 0);
        CHECK(read_str("passwd", 1 << 20, &data) == -ELOOP && !data);
        /* Links in parents resolve inside the workspace, even "..". */
        CHECK(symlink("/etc", at("ws/hostetc")) == 0);
        CHECK(symlink("../../../../../etc", at("ws/up")) == 0);
        CHECK(read_str("hostetc/passwd", 1 << 20, &data) == -ENOENT && !data);
        CHECK(mkdir(at("ws/etc"), 0755) == 0);
        put_str("ws/etc/passwd", "inside\n");
        CHECK(read_str("hostetc/passwd", 1 << 20, &data) == 0);
        CHECK_STREQ(data, "inside\n");
        free(data);
        CHECK(read_str("up/passwd", 1 << 20, &data) == 0);
        CHECK_STREQ(data, "inside\n");
        free(data);
        /* stat does not follow either. */
        json_t *o = NULL;
        struct cage_error err = {};
        CHECK(cage_files_stat(root_fd, "passwd", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "type"), "symlink");
        CHECK(!json_object_get(o, "mime"));
        json_decref(o);
        teardown();
}

TEST(write_through_a_symlinked_parent_stays_inside)
{
        setup();
        struct cage_error err = {};
        CHECK(symlink(at("outside"), at("ws/abs")) == 0);
        CHECK(symlink("../outside", at("ws/rel")) == 0);
        static const char *const paths[] = {"abs/x", "abs/new/y", "rel/x", "rel/new/y"};
        for (size_t i = 0; i < 4; i++) {
                int r = write_str(paths[i], "pwned");
                char *data = NULL;
                /* Either refused or written inside, where it reads back. */
                CHECK(r < 0 || (read_str(paths[i], 100, &data) == 0 && !strcmp(data, "pwned")));
                free(data);
        }
        CHECK(cage_files_mkdir(root_fd, "abs/d", &err) < 0 || !exists("outside/d"));
        CHECK(cage_files_mkdir(root_fd, "rel/d", &err) < 0 || !exists("outside/d"));
        CHECK(!exists("outside/x") && !exists("outside/new") && !exists("outside/d"));
        teardown();
}

/* A symlink or hard link to a host file as the last component is replaced,
 * never written through. */
TEST(write_replaces_links_instead_of_writing_through_them)
{
        int (*const plant[])(const char *, const char *) = {symlink, link};
        for (size_t i = 0; i < 2; i++) {
                setup();
                put_str("outside/host", "keep");
                CHECK(plant[i](at("outside/host"), at("ws/victim")) == 0);
                CHECK(write_str("victim", "new") == 0);
                CHECK_STREQ(content("outside/host"), "keep");
                CHECK_STREQ(content("ws/victim"), "new");
                teardown();
        }
}

TEST(fifo_never_blocks)
{
        setup();
        CHECK(mkfifo(at("ws/fifo"), 0644) == 0);
        alarm(5); /* a hang kills the test */
        char *data = NULL;
        struct cage_error err = {};
        json_t *o = NULL;
        CHECK(read_str("fifo", 100, &data) == -EPERM && !data);
        CHECK(cage_files_stat(root_fd, "fifo", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "type"), "other");
        CHECK(!json_object_get(o, "mime"));
        json_decref(o);
        alarm(0);
        teardown();
}

TEST(device_node_refused)
{
        setup();
        if (mknod(at("ws/null"), S_IFCHR | 0666, makedev(1, 3)) < 0) {
                printf("  (skipped: mknod: %s)\n", strerror(errno));
                teardown();
                return;
        }
        char *data = NULL;
        struct cage_error err = {};
        void *p = NULL;
        size_t len;
        CHECK(cage_files_read(root_fd, "null", 100, &p, &len, &err) == -EPERM && !p);
        CHECK(strstr(err.message, "\"null\"") && strstr(err.message, "not a regular file"));
        CHECK(mkdir(at("ws/dir"), 0755) == 0);
        CHECK(read_str("dir", 100, &data) == -EISDIR);
        CHECK(read_str("", 100, &data) == -EISDIR);
        teardown();
}

TEST(read_enforces_max)
{
        setup();
        char big[100], *data = NULL;
        memset(big, 'x', sizeof(big));
        put("ws/big", big, sizeof(big));
        struct cage_error err = {};
        void *p = NULL;
        size_t len = 0;
        CHECK(cage_files_read(root_fd, "big", 99, &p, &len, &err) == -E2BIG && !p);
        CHECK(strstr(err.message, "99 bytes"));
        CHECK(read_str("big", 100, &data) == 0 && strlen(data) == 100);
        free(data);
        teardown();
}

TEST(write_onto_directory_or_root_refused)
{
        setup();
        CHECK(mkdir(at("ws/dir"), 0755) == 0);
        put_str("ws/dir/keep", "k");
        CHECK(write_str("dir", "x") == -EISDIR);
        CHECK(write_str("/workspace", "x") == -EISDIR);
        CHECK_STREQ(content("ws/dir/keep"), "k");
        put_str("ws/file", "f");
        CHECK(write_str("file/x", "x") == -ENOTDIR);
        teardown();
}

TEST(write_reports_a_full_workspace)
{
        setup();
        CHECK(mkdir(at("small"), 0755) == 0);
        if (mount("tmpfs", at("small"), "tmpfs", 0, "size=64k") < 0) {
                printf("  (skipped: mount: %s)\n", strerror(errno));
                teardown();
                return;
        }
        int fd = open(at("small"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        size_t len = 1 << 20;
        char *big = calloc(1, len);
        struct cage_error err = {};
        CHECK(cage_files_write(fd, "big", big, len, &err) == -ENOSPC);
        CHECK(strstr(err.message, "\"big\"") && strstr(err.message, "the workspace is full"));
        json_t *l = NULL;
        CHECK(cage_files_list(fd, "", &l, &err) == 0);
        CHECK(json_array_size(json_object_get(l, "entries")) == 0); /* temp file removed */
        json_decref(l);
        free(big);
        close(fd);
        umount2(at("small"), MNT_DETACH);
        teardown();
}

TEST(list_sorted_with_types)
{
        setup();
        CHECK(mkdir(at("ws/sub"), 0755) == 0);
        put_str("ws/sub/b", "bb");
        CHECK(mkdir(at("ws/sub/a"), 0755) == 0);
        CHECK(symlink("/etc", at("ws/sub/c")) == 0);
        CHECK(mkfifo(at("ws/sub/d"), 0644) == 0);
        json_t *l = NULL;
        struct cage_error err = {};
        CHECK(cage_files_list(root_fd, "/workspace/sub/", &l, &err) == 0);
        CHECK_STREQ(json_str(l, "path"), "sub");
        CHECK(json_is_false(json_object_get(l, "truncated")));
        json_t *e = json_object_get(l, "entries");
        static const char *const want[][3] = {
                {"a", "sub/a", "dir"},
                {"b", "sub/b", "file"},
                {"c", "sub/c", "symlink"},
                {"d", "sub/d", "other"},
        };
        CHECK(json_array_size(e) == 4);
        for (size_t i = 0; i < 4 && i < json_array_size(e); i++) {
                json_t *x = json_array_get(e, i);
                CHECK_STREQ(json_str(x, "name"), want[i][0]);
                CHECK_STREQ(json_str(x, "path"), want[i][1]);
                CHECK_STREQ(json_str(x, "type"), want[i][2]);
        }
        CHECK(json_integer_value(json_object_get(json_array_get(e, 1), "size")) == 2);
        CHECK(json_integer_value(json_object_get(json_array_get(e, 1), "mtime")) > 1600000000);
        json_decref(l);
        /* A link to a host directory is not listed through. */
        int r = cage_files_list(root_fd, "sub/c", &l, &err);
        CHECK(r == -ELOOP || r == -ENOTDIR); /* O_NOFOLLOW | O_DIRECTORY on a link */
        CHECK(cage_files_list(root_fd, "sub/b", &l, &err) == -ENOTDIR);
        /* Names that are not UTF-8 still make valid JSON. */
        put_str("ws/bad\xff", "");
        CHECK(cage_files_list(root_fd, "", &l, &err) == 0);
        CHECK(json_array_size(json_object_get(l, "entries")) == 2);
        json_decref(l);
        teardown();
}

TEST(list_is_bounded)
{
        setup();
        CHECK(mkdir(at("ws/many"), 0755) == 0);
        int dfd = open(at("ws/many"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        for (int i = 0; i < CAGE_FILES_LIST_MAX + 5; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%05d", i);
                int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                CHECK(fd >= 0);
                close(fd);
        }
        close(dfd);
        json_t *l = NULL;
        struct cage_error err = {};
        CHECK(cage_files_list(root_fd, "many", &l, &err) == 0);
        json_t *e = json_object_get(l, "entries");
        CHECK(json_array_size(e) == CAGE_FILES_LIST_MAX);
        CHECK(json_is_true(json_object_get(l, "truncated")));
        for (size_t i = 1; i < json_array_size(e); i++)
                CHECK(strcmp(json_str(json_array_get(e, i - 1), "name"),
                             json_str(json_array_get(e, i), "name")) < 0);
        json_decref(l);
        teardown();
}

TEST(delete_recursive_never_follows_links)
{
        setup();
        struct cage_error err = {};
        put_str("outside/keep", "k");
        CHECK(mkdir(at("outside/dir"), 0755) == 0);
        put_str("outside/dir/keep", "k");
        CHECK(mkdir(at("ws/tree"), 0755) == 0);
        CHECK(mkdir(at("ws/tree/sub"), 0755) == 0);
        CHECK(mkdir(at("ws/tree/sub/deep"), 0755) == 0);
        put_str("ws/tree/sub/deep/f", "f");
        put_str("ws/tree/f", "f");
        CHECK(symlink(at("outside"), at("ws/tree/link")) == 0);
        CHECK(symlink(at("outside/dir"), at("ws/tree/sub/link")) == 0);
        CHECK(symlink(at("outside/keep"), at("ws/tree/flink")) == 0);
        CHECK(mkfifo(at("ws/tree/fifo"), 0644) == 0);
        CHECK(cage_files_delete(root_fd, "tree", false, &err) == -ENOTEMPTY);
        CHECK(strstr(err.message, "recursively"));
        CHECK(cage_files_delete(root_fd, "tree", true, &err) == 0);
        CHECK(!exists("ws/tree"));
        CHECK(exists("outside/keep") && exists("outside/dir/keep"));
        /* A link as the target: the link goes, not what it points at. */
        CHECK(symlink(at("outside"), at("ws/l")) == 0);
        CHECK(cage_files_delete(root_fd, "l", true, &err) == 0);
        CHECK(!exists("ws/l") && exists("outside/keep") && exists("outside/dir/keep"));
        /* Through a linked parent, "outside" means the workspace's. */
        CHECK(symlink(at("outside"), at("ws/p")) == 0);
        CHECK(cage_files_delete(root_fd, "p/keep", false, &err) == -ENOENT);
        CHECK(exists("outside/keep"));
        put_str("ws/f", "f");
        CHECK(cage_files_delete(root_fd, "f", false, &err) == 0 && !exists("ws/f"));
        CHECK(cage_files_delete(root_fd, "f", false, &err) == -ENOENT);
        teardown();
}

TEST(delete_is_bounded_in_depth)
{
        setup();
        struct cage_error err = {};
        int fd = open(at("ws"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        for (int i = 0; i < 300 && fd >= 0; i++) {
                int sub = mkdirat(fd, "d", 0755) == 0
                                  ? openat(fd, "d", O_PATH | O_DIRECTORY | O_CLOEXEC)
                                  : -1;
                close(fd);
                fd = sub;
        }
        CHECK(fd >= 0);
        close(fd);
        CHECK(cage_files_delete(root_fd, "d", true, &err) == -E2BIG);
        CHECK(strstr(err.message, "levels"));
        /* Shallower trees go. */
        CHECK(cage_files_mkdir(root_fd, "e/e/e/e/e/e/e/e/e/e", &err) == 0);
        CHECK(cage_files_delete(root_fd, "e", true, &err) == 0 && !exists("ws/e"));
        teardown();
}

TEST(delete_refuses_the_root)
{
        setup();
        struct cage_error err = {};
        put_str("ws/f", "f");
        CHECK(cage_files_delete(root_fd, "", true, &err) == -EINVAL);
        CHECK(cage_files_delete(root_fd, "/workspace/", true, &err) == -EINVAL);
        CHECK(cage_files_delete(root_fd, ".", true, &err) == -EINVAL);
        CHECK(exists("ws/f"));
        teardown();
}

TEST(mkdir_creates_parents)
{
        setup();
        struct cage_error err = {};
        CHECK(cage_files_mkdir(root_fd, "x/y/z", &err) == 0);
        struct stat st;
        CHECK(stat(at("ws/x/y/z"), &st) == 0 && S_ISDIR(st.st_mode));
        CHECK(cage_files_mkdir(root_fd, "x/y/z", &err) == 0);
        CHECK(cage_files_mkdir(root_fd, "", &err) == 0);
        put_str("ws/x/file", "f");
        CHECK(cage_files_mkdir(root_fd, "x/file", &err) == -ENOTDIR);
        CHECK(cage_files_mkdir(root_fd, "x/file/sub", &err) == -ENOTDIR);
        teardown();
}

TEST(stat_reports_type_and_mime)
{
        setup();
        struct cage_error err = {};
        json_t *o = NULL;
        CHECK(cage_files_write(root_fd, "img/p.png", png, sizeof(png), &err) == 0);
        CHECK(write_str("notes.txt", "just some text\nin two lines\n") == 0);
        CHECK(cage_files_stat(root_fd, "img/p.png", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "name"), "p.png");
        CHECK_STREQ(json_str(o, "path"), "img/p.png");
        CHECK_STREQ(json_str(o, "type"), "file");
        CHECK_STREQ(json_str(o, "mime"), "image/png");
        CHECK(json_integer_value(json_object_get(o, "size")) == (json_int_t)sizeof(png));
        json_decref(o);
        CHECK(cage_files_stat(root_fd, "notes.txt", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "mime"), "text/plain");
        json_decref(o);
        CHECK(cage_files_stat(root_fd, "img", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "type"), "dir");
        CHECK(!json_object_get(o, "mime"));
        json_decref(o);
        CHECK(cage_files_stat(root_fd, "", &o, &err) == 0);
        CHECK_STREQ(json_str(o, "type"), "dir");
        json_decref(o);
        CHECK(cage_files_stat(root_fd, "nope", &o, &err) == -ENOENT);
        CHECK(strstr(err.message, "\"nope\""));
        teardown();
}

static void *mime_thread(void *arg)
{
        long bad = 0;
        for (int i = 0; i < 200; i++) {
                if (strcmp(cage_files_mime(png, sizeof(png)), "image/png") != 0)
                        bad++;
                if (strcmp(cage_files_mime("hello world\n", 12), "text/plain") != 0)
                        bad++;
        }
        return (void *)bad;
}

TEST(mime_from_many_threads)
{
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
                CHECK(pthread_create(&t[i], NULL, mime_thread, NULL) == 0);
        for (int i = 0; i < 4; i++) {
                void *bad;
                pthread_join(t[i], &bad);
                CHECK(bad == NULL);
        }
        CHECK_STREQ(cage_files_mime("\x00\x01\x02\xfe\xff\x00\x80", 7), "application/octet-stream");
}

TEST(artifacts_are_the_new_and_changed_regular_files)
{
        setup();
        struct cage_error err = {};
        CHECK(mkdir(at("ws/output"), 0755) == 0);
        put_str("ws/output/keep.txt", "unchanged\n");
        put_str("ws/output/changed.txt", "before\n");
        put_str("ws/output/replaced.txt", "same\n");
        put_str("ws/notoutput.txt", "x");
        struct cage_artifact_snapshot *snap = NULL;
        CHECK(cage_artifacts_snapshot(root_fd, &snap, &err) == 0);

        put_str("ws/output/changed.txt", "after, longer\n");
        put_str("ws/output/new-replaced", "same\n"); /* same size, new inode */
        CHECK(rename(at("ws/output/new-replaced"), at("ws/output/replaced.txt")) == 0);
        CHECK(mkdir(at("ws/output/sub"), 0755) == 0);
        put("ws/output/sub/pic.png", png, sizeof(png));
        put_str("ws/output/new.txt", "new text\n");
        CHECK(mkdir(at("ws/output/emptydir"), 0755) == 0);
        CHECK(symlink("/etc/passwd", at("ws/output/link.txt")) == 0);
        CHECK(mkfifo(at("ws/output/pipe"), 0644) == 0);
        put_str("ws/notoutput2.txt", "x");

        alarm(5);
        json_t *a = NULL;
        CHECK(cage_artifacts_collect(root_fd, snap, &a, &err) == 0);
        alarm(0);
        static const char *const want[][4] = {
                {"changed.txt", "output/changed.txt", "text/plain", "14"},
                {"new.txt", "output/new.txt", "text/plain", "9"},
                {"replaced.txt", "output/replaced.txt", "text/plain", "5"},
                {"pic.png", "output/sub/pic.png", "image/png", "67"},
        };
        CHECK(json_array_size(a) == 4);
        for (size_t i = 0; i < 4 && i < json_array_size(a); i++) {
                json_t *x = json_array_get(a, i);
                CHECK_STREQ(json_str(x, "name"), want[i][0]);
                CHECK_STREQ(json_str(x, "path"), want[i][1]);
                CHECK_STREQ(json_str(x, "mime"), want[i][2]);
                CHECK(json_integer_value(json_object_get(x, "size")) == atoi(want[i][3]));
        }
        json_decref(a);
        /* Without a snapshot: every regular file. */
        CHECK(cage_artifacts_collect(root_fd, NULL, &a, &err) == 0);
        CHECK(json_array_size(a) == 5);
        json_decref(a);
        cage_artifact_snapshot_free(snap);
        teardown();
}

TEST(artifacts_of_a_missing_or_linked_output_are_empty)
{
        setup();
        struct cage_error err = {};
        struct cage_artifact_snapshot *snap = NULL;
        json_t *a = NULL;
        CHECK(cage_artifacts_snapshot(root_fd, &snap, &err) == 0);
        CHECK(cage_artifacts_collect(root_fd, snap, &a, &err) == 0 && json_array_size(a) == 0);
        json_decref(a);
        put_str("outside/secret.txt", "host secret\n");
        CHECK(symlink(at("outside"), at("ws/output")) == 0);
        CHECK(cage_artifacts_collect(root_fd, snap, &a, &err) == 0 && json_array_size(a) == 0);
        json_decref(a);
        /* A link inside output/ to a host directory is not walked. */
        CHECK(unlink(at("ws/output")) == 0 && mkdir(at("ws/output"), 0755) == 0);
        CHECK(symlink(at("outside"), at("ws/output/host")) == 0);
        CHECK(cage_artifacts_collect(root_fd, snap, &a, &err) == 0 && json_array_size(a) == 0);
        json_decref(a);
        cage_artifact_snapshot_free(snap);
        teardown();
}

static int open_dir(const char *rel)
{
        if (mkdir(at(rel), 0755) < 0)
                abort();
        return open(at(rel), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* output/a.txt (5 bytes) and output/sub/b.txt (3 bytes). */
static void make_output_tree(void)
{
        CHECK(mkdir(at("ws/output"), 0755) == 0);
        CHECK(mkdir(at("ws/output/sub"), 0755) == 0);
        put_str("ws/output/a.txt", "aaaaa");
        put_str("ws/output/sub/b.txt", "bbb");
}

TEST(copy_tree_copies_files_and_dirs_only)
{
        setup();
        struct cage_error err = {};
        make_output_tree();
        put_str("outside/secret", "host secret");
        CHECK(symlink(at("outside/secret"), at("ws/output/link")) == 0);
        CHECK(symlink(at("outside"), at("ws/output/dirlink")) == 0);
        CHECK(mkfifo(at("ws/output/fifo"), 0644) == 0);
        int dst = open_dir("dst");
        alarm(5);
        CHECK(cage_files_copy_tree(root_fd, "output", dst, 1 << 20, 100, NULL, &err) == 0);
        alarm(0);
        CHECK_STREQ(content("dst/a.txt"), "aaaaa");
        CHECK_STREQ(content("dst/sub/b.txt"), "bbb");
        CHECK(!exists("dst/link") && !exists("dst/dirlink") && !exists("dst/fifo"));
        close(dst);
        /* A linked source is refused. */
        CHECK(symlink(at("outside"), at("ws/out2")) == 0);
        dst = open_dir("dst-link");
        int r = cage_files_copy_tree(root_fd, "out2", dst, 1 << 20, 100, NULL, &err);
        CHECK(r == -ELOOP || r == -ENOTDIR);
        CHECK(!exists("dst-link/secret"));
        close(dst);
        teardown();
}

TEST(copy_tree_stops_at_its_limits)
{
        setup();
        struct cage_error err = {};
        make_output_tree();
        int dst = open_dir("dst-bytes");
        CHECK(cage_files_copy_tree(root_fd, "output", dst, 6, 100, NULL, &err) == -E2BIG);
        CHECK(exists("dst-bytes/a.txt") != exists("dst-bytes/sub/b.txt")); /* one fits */
        close(dst);
        dst = open_dir("dst-entries");
        CHECK(cage_files_copy_tree(root_fd, "output", dst, 1 << 20, 2, NULL, &err) == -E2BIG);
        CHECK(!(exists("dst-entries/a.txt") && exists("dst-entries/sub/b.txt")));
        close(dst);
        dst = open_dir("dst-exact");
        CHECK(cage_files_copy_tree(root_fd, "output", dst, 8, 3, NULL, &err) == 0);
        close(dst);
        dst = open_dir("dst-missing");
        CHECK(cage_files_copy_tree(root_fd, "nothing", dst, 8, 3, NULL, &err) == -ENOENT);
        close(dst);
        teardown();
}

TEST(copy_tree_keeps_holes_and_charges_data)
{
        setup();
        struct cage_error err = {};
        CHECK(mkdir(at("ws/output"), 0755) == 0);
        int fd = open(at("ws/output/sparse"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, 250 << 20) == 0);
        CHECK(pwrite(fd, "data", 4, 100 << 20) == 4);
        close(fd);
        int dst = open_dir("dst");
        uint64_t kept = 0; /* a 250 MiB file with one block of data fits in 1 MiB */
        CHECK(cage_files_copy_tree(root_fd, "output", dst, 1 << 20, 10, &kept, &err) == 0);
        CHECK(kept >= 4 && kept <= 65536);
        struct stat st;
        CHECK(fstatat(dst, "sparse", &st, 0) == 0);
        CHECK(st.st_size == 250 << 20 && (uint64_t)st.st_blocks * 512 <= 1 << 20);
        char buf[4] = {0};
        fd = openat(dst, "sparse", O_RDONLY | O_CLOEXEC);
        CHECK(pread(fd, buf, 4, 100 << 20) == 4 && memcmp(buf, "data", 4) == 0);
        close(fd);
        close(dst);
        teardown();
}

RUN_TESTS(T(check_path_normalises), T(check_path_rejects), T(write_read_roundtrip),
          T(created_files_get_the_root_owner), T(read_never_follows_a_link_to_the_host),
          T(write_through_a_symlinked_parent_stays_inside),
          T(write_replaces_links_instead_of_writing_through_them), T(fifo_never_blocks),
          T(device_node_refused), T(read_enforces_max), T(write_onto_directory_or_root_refused),
          T(write_reports_a_full_workspace), T(list_sorted_with_types), T(list_is_bounded),
          T(delete_recursive_never_follows_links), T(delete_is_bounded_in_depth),
          T(delete_refuses_the_root), T(mkdir_creates_parents), T(stat_reports_type_and_mime),
          T(mime_from_many_threads), T(artifacts_are_the_new_and_changed_regular_files),
          T(artifacts_of_a_missing_or_linked_output_are_empty),
          T(copy_tree_copies_files_and_dirs_only), T(copy_tree_stops_at_its_limits),
          T(copy_tree_keeps_holes_and_charges_data))
