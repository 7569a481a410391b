/* Unit tests for src/images/: reference parsing and normalisation, allow
 * patterns, the images config section, manifests and image configs, and
 * the unpacking rules on layers built here with libarchive (paths,
 * symlinks, hard links, devices, setuid bits, whiteouts, bounds,
 * cancellation and the deadline). The
 * unpacking cases run against a fresh directory under /tmp each. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "harness.h"
#include "images/images_private.h"

/* ---- references ---- */

static const char *norm(const char *s)
{
        static struct cage_image_ref r;
        return cage_image_ref_parse(s, &r, NULL) == 0 ? r.full : "(error)";
}

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

TEST(ref_normalisation)
{
        CHECK_STREQ(norm("python"), "docker.io/library/python:latest");
        CHECK_STREQ(norm("python:3.12-slim"), "docker.io/library/python:3.12-slim");
        CHECK_STREQ(norm("library/python:3"), "docker.io/library/python:3");
        CHECK_STREQ(norm("docker.io/python"), "docker.io/library/python:latest");
        CHECK_STREQ(norm("index.docker.io/user/app:1"), "docker.io/user/app:1");
        CHECK_STREQ(norm("user/app"), "docker.io/user/app:latest");
        CHECK_STREQ(norm("ghcr.io/o/r:tag"), "ghcr.io/o/r:tag");
        CHECK_STREQ(norm("localhost/app"), "localhost/app:latest");
        CHECK_STREQ(norm("localhost:5000/a/b/c:v1.0_x"), "localhost:5000/a/b/c:v1.0_x");
        CHECK_STREQ(norm("127.0.0.1:5000/app"), "127.0.0.1:5000/app:latest");
        CHECK_STREQ(norm("[::1]:5000/app:1"), "[::1]:5000/app:1");
        CHECK_STREQ(norm("name@sha256:" HEX64), "docker.io/library/name@sha256:" HEX64);
        CHECK_STREQ(norm("name:tag@sha256:" HEX64), "docker.io/library/name:tag@sha256:" HEX64);
        CHECK_STREQ(norm("u/a_b__c-d--e.f"), "docker.io/u/a_b__c-d--e.f:latest");
        /* a first component with '.', ':' or uppercase is a registry, as in Docker */
        CHECK_STREQ(norm("UPPER/case"), "UPPER/case:latest");
}

TEST(ref_parts)
{
        struct cage_image_ref r;
        CHECK(cage_image_ref_parse("ghcr.io/o/r:t@sha256:" HEX64, &r, NULL) == 0);
        CHECK_STREQ(r.registry, "ghcr.io");
        CHECK_STREQ(r.repository, "o/r");
        CHECK_STREQ(r.tag, "t");
        CHECK_STREQ(r.digest, "sha256:" HEX64);
        CHECK(cage_image_ref_parse("busybox@sha256:" HEX64, &r, NULL) == 0);
        CHECK_STREQ(r.tag, "");
}

TEST(ref_refusals)
{
        static const char *const bad[] = {
                "",
                "UPPER",
                "Python",
                "a.b_c/d",
                "host:0/x",
                "a//b",
                "/abs",
                "trail/",
                "a:",
                "a:-tag",
                "a:.tag",
                "a@sha256:abc",
                "a@sha512:" HEX64,
                "a@sha256:" HEX64 "0",
                "a@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
                "a..b",
                "a.-b",
                "-a",
                "a-",
                "a b",
                "host:99999/x",
                "host:/x",
                "ho_st:5/x",
                "a:"
                "0123456789012345678901234567890123456789012345678901234567890123456789"
                "01234567890123456789012345678901234567890123456789012345678",
        };
        struct cage_error err = {};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct cage_image_ref r;
                int rc = cage_image_ref_parse(bad[i], &r, &err);
                if (rc != -EINVAL)
                        fprintf(stderr, "  accepted: \"%s\"\n", bad[i]);
                CHECK(rc == -EINVAL);
        }
        CHECK(cage_image_ref_parse("Python", &(struct cage_image_ref){}, &err) == -EINVAL);
        CHECK(strstr(err.message, "\"Python\"") != NULL);
        char long_name[600];
        memset(long_name, 'a', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = '\0';
        CHECK(cage_image_ref_parse(long_name, &(struct cage_image_ref){}, NULL) == -EINVAL);
        memset(long_name, 'a', 300);
        long_name[300] = '\0';
        CHECK(cage_image_ref_parse(long_name, &(struct cage_image_ref){}, NULL) == -EINVAL);
}

TEST(ref_patterns)
{
        CHECK(cage_image_ref_matches("docker.io/library/*", "docker.io/library/python:3"));
        CHECK(!cage_image_ref_matches("docker.io/library/*", "docker.io/evil/python:3"));
        CHECK(cage_image_ref_matches("ghcr.io/o/r", "ghcr.io/o/r:1"));
        CHECK(cage_image_ref_matches("ghcr.io/o/r", "ghcr.io/o/r@sha256:" HEX64));
        CHECK(!cage_image_ref_matches("ghcr.io/o/r", "ghcr.io/o/rr:1"));
        CHECK(cage_image_ref_matches("ghcr.io/o/r:1", "ghcr.io/o/r:1"));
        CHECK(!cage_image_ref_matches("ghcr.io/o/r:1", "ghcr.io/o/r:2"));
        CHECK(cage_image_ref_matches("localhost:5000/*", "localhost:5000/a/b:c"));
        CHECK(!cage_image_ref_matches("localhost:5000/*", "localhost:5001/a:c"));
        CHECK(cage_image_ref_matches("*", "anything/at:all"));
        CHECK(!cage_image_ref_matches("*.io/x", "ghcr.io/y:1"));
}

TEST(digests)
{
        CHECK(cage_image_digest_valid("sha256:" HEX64));
        CHECK(!cage_image_digest_valid("sha256:" HEX64 "a"));
        CHECK(!cage_image_digest_valid("sha256:0123"));
        CHECK(!cage_image_digest_valid("md5:" HEX64));
        char d[CAGE_IMAGE_DIGEST_LEN + 1];
        CHECK(digest_buffer("", 0, d) == 0);
        CHECK_STREQ(d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* ---- config ---- */

static int parse_config(const char *text, struct cage_images_config *c, struct cage_error *err)
{
        json_t *j = json_loads(text, 0, NULL);
        int r = cage_images_config_parse(j, c, err);
        json_decref(j);
        return r;
}

TEST(config_defaults_and_values)
{
        struct cage_images_config c;
        struct cage_error err = {};
        CHECK(cage_images_config_parse(NULL, &c, &err) == 0);
        CHECK(c.pull_policy == CAGE_PULL_MISSING && c.n_allow == 0);
        CHECK_STREQ(c.platform_os, "linux");
        CHECK(c.max_layer_entries == 500000 && c.max_store_bytes == 0);
        CHECK(c.max_image_bytes == 32768ULL << 20);
        CHECK(c.max_refs == 100000);
        CHECK(cage_images_config_allows(&c, "docker.io/x/y:z"));
        cage_images_config_done(&c);
        CHECK(parse_config("{\"allow\":[\"docker.io/library/*\"],\"platform\":\"linux/arm/v7\","
                           "\"pull_policy\":\"never\",\"max_store_mib\":10,\"max_image_mib\":3,"
                           "\"max_refs\":5,"
                           "\"plain_http\":[\"127.0.0.1:5000\"],"
                           "\"mirrors\":{\"docker.io\":[\"m1:5000\",\"m2\"]},"
                           "\"credentials\":{\"ghcr.io\":{\"username\":\"u\",\"password\":\"p\"}}}",
                           &c, &err) == 0);
        CHECK_STREQ(c.platform_arch, "arm");
        CHECK_STREQ(c.platform_variant, "v7");
        CHECK(c.pull_policy == CAGE_PULL_NEVER && c.max_store_bytes == 10 << 20);
        CHECK(c.max_image_bytes == 3 << 20);
        CHECK(c.n_mirrors == 1 && c.mirrors[0].n_mirrors == 2 && c.max_refs == 5);
        CHECK(c.n_credentials == 1);
        CHECK_STREQ(c.credentials[0].password, "p");
        CHECK(cage_images_config_allows(&c, "docker.io/library/python:3"));
        CHECK(!cage_images_config_allows(&c, "ghcr.io/o/r:1"));
        cage_images_config_done(&c);
}

TEST(config_refusals_name_the_key)
{
        static const char *const bad[][2] = {
                {"{\"nope\":1}", "images.nope"},
                {"{\"allow\":\"x\"}", "images.allow"},
                {"{\"platform\":\"linux\"}", "images.platform"},
                {"{\"platform\":\"linux/amd64/v1/x\"}", "images.platform"},
                {"{\"pull_policy\":\"always\"}", "images.pull_policy"},
                {"{\"max_layer_entries\":0}", "images.max_layer_entries"},
                {"{\"max_image_mib\":0}", "images.max_image_mib"},
                {"{\"max_refs\":100001}", "images.max_refs"},
                {"{\"plain_http\":[\"a b\"]}", "images.plain_http"},
                {"{\"credentials\":{\"r\":{\"username\":\"u\"}}}", "images.credentials"},
                {"{\"credentials\":{\"r\":{\"username\":\"u\",\"password\":\"SECRET\","
                 "\"password_file\":\"/x\"}}}",
                 "images.credentials"},
                {"{\"docker_config\":\"/nonexistent/config.json\"}", "images.docker_config"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct cage_images_config c;
                struct cage_error err = {};
                CHECK(parse_config(bad[i][0], &c, &err) < 0);
                CHECK(strstr(err.message, bad[i][1]) != NULL);
                CHECK(strstr(err.message, "SECRET") == NULL);
                cage_images_config_done(&c);
        }
}

/* ---- manifests ---- */

#define DESC(type, n) "{\"mediaType\":\"" type "\",\"digest\":\"sha256:" HEX64 "\",\"size\":" n "}"

TEST(manifest_and_index)
{
        static const char manifest[] =
                "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST "\",\"config\":" DESC(
                        "c", "7") ",\"layers\":[" DESC("l", "9") "," DESC("l", "10") "]}";
        static const char list[] =
                "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:" HEX64
                "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\","
                "\"variant\":\"v8\"}},{\"digest\":\"sha256:" HEX64
                "\",\"size\":2,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
        struct manifest m;
        struct descriptor d;
        struct cage_error err = {};
        CHECK(manifest_parse(manifest, strlen(manifest), NULL, 16, &m, &err) == 0);
        CHECK(!m.is_index && m.n_entries == 2 && m.config.size == 7 && m.entries[1].size == 10);
        manifest_done(&m);
        CHECK(manifest_parse(manifest, strlen(manifest), NULL, 1, &m, &err) == -E2BIG);
        CHECK(manifest_parse(list, strlen(list), MEDIA_DOCKER_LIST, 16, &m, &err) == 0);
        CHECK(m.is_index && m.n_entries == 2);
        CHECK(manifest_select(&m, "linux", "amd64", "", &d, &err) == 0 && d.size == 2);
        CHECK(manifest_select(&m, "linux", "arm64", "v8", &d, &err) == 0 && d.size == 1);
        CHECK(manifest_select(&m, "linux", "arm64", "v7", &d, &err) == -ENOENT);
        CHECK(manifest_select(&m, "linux", "s390x", "", &d, &err) == -ENOENT);
        manifest_done(&m);
}

TEST(manifest_refusals)
{
        static const char *const bad[] = {
                "",
                "[]",
                "{\"schemaVersion\":1}",
                "{\"schemaVersion\":2}",
                "{\"schemaVersion\":2,\"mediaType\":\"text/plain\"}",
                "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:x\",\"size\":1},"
                "\"layers\":[]}",
                "{\"schemaVersion\":2,\"config\":" DESC("c", "-1") ",\"layers\":[]}",
                "{\"schemaVersion\":2,\"config\":" DESC("c", "1") ",\"layers\":{}}",
                "{\"schemaVersion\":2,\"schemaVersion\":2}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct manifest m;
                CHECK(manifest_parse(bad[i], strlen(bad[i]), NULL, 16, &m, NULL) < 0);
        }
}

TEST(image_config)
{
        static const char text[] = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
                                   "\"Env\":[\"A=1\",\"B=2\"],\"Cmd\":[\"sh\"],\"Entrypoint\":"
                                   "null,\"WorkingDir\":\"/w\",\"User\":\"1:2\"},\"rootfs\":{"
                                   "\"diff_ids\":[\"sha256:" HEX64 "\"]}}";
        struct image_config c;
        CHECK(image_config_parse(text, strlen(text), &c, NULL) == 0);
        CHECK_STREQ(c.env[1], "B=2");
        CHECK(c.env[2] == NULL && c.entrypoint[0] == NULL);
        CHECK_STREQ(c.cmd[0], "sh");
        CHECK_STREQ(c.working_dir, "/w");
        CHECK_STREQ(c.user, "1:2");
        CHECK(c.n_diff_ids == 1);
        image_config_done(&c);
        static const char bad[] = "{\"config\":{\"Env\":[1]}}";
        CHECK(image_config_parse(bad, strlen(bad), &c, NULL) == -EBADMSG);
        static const char bad_diff[] = "{\"rootfs\":{\"diff_ids\":[\"md5:1\"]}}";
        CHECK(image_config_parse(bad_diff, strlen(bad_diff), &c, NULL) == -EBADMSG);
}

/* ---- unpacking ---- */

struct ent {
        const char *name;
        mode_t type; /* AE_IF* */
        mode_t mode;
        const char *data; /* file content, or link target */
        int64_t size;     /* -1: strlen(data) */
};

/* A tar of ents in a memfd, rewound. */
static int make_layer(const struct ent *ents, size_t n)
{
        int fd = memfd_create("layer", MFD_CLOEXEC);
        struct archive *a = archive_write_new();
        archive_write_set_format_pax_restricted(a);
        archive_write_open_fd(a, fd);
        for (size_t i = 0; i < n; i++) {
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, ents[i].name);
                archive_entry_set_filetype(e, ents[i].type ? ents[i].type : AE_IFREG);
                archive_entry_set_perm(e, ents[i].mode ? ents[i].mode : 0644);
                archive_entry_set_mtime(e, 1700000000, 0);
                if (ents[i].type == AE_IFLNK)
                        archive_entry_set_symlink(e, ents[i].data);
                if (ents[i].type == 1) { /* a hard link */
                        archive_entry_set_filetype(e, AE_IFREG);
                        archive_entry_set_hardlink(e, ents[i].data);
                }
                if (ents[i].type == AE_IFCHR)
                        archive_entry_set_rdev(e, makedev(1, 3));
                size_t len = ents[i].data && (!ents[i].type || ents[i].type == AE_IFREG)
                                     ? strlen(ents[i].data)
                                     : 0;
                archive_entry_set_size(e, ents[i].size >= 0 && ents[i].size ? ents[i].size
                                                                            : (int64_t)len);
                archive_write_header(a, e);
                if (len)
                        archive_write_data(a, ents[i].data, len);
                archive_entry_free(e);
        }
        archive_write_close(a);
        archive_write_free(a);
        lseek(fd, 0, SEEK_SET);
        return fd;
}

static char root_path[64];

static int fresh_root(void)
{
        snprintf(root_path, sizeof(root_path), "/tmp/test-images-XXXXXX");
        if (!mkdtemp(root_path))
                return -1;
        return open(root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void drop_root(int fd)
{
        close(fd);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root_path);
        if (system(cmd) != 0)
                fprintf(stderr, "  could not remove %s\n", root_path);
}

static const struct unpack_limits limits = {.max_bytes = 1 << 20, .max_entries = 100};

static int apply(int root, const struct ent *ents, size_t n, struct cage_error *err)
{
        int fd = make_layer(ents, n);
        int r = unpack_layer(root, fd, &limits, NULL, err);
        close(fd);
        return r;
}

#define APPLY(root, err, ...)                                                                      \
        ({                                                                                         \
                const struct ent ents_[] = {__VA_ARGS__};                                          \
                apply(root, ents_, sizeof(ents_) / sizeof(ents_[0]), err);                         \
        })

static bool exists_at(int root, const char *p)
{
        struct stat st;
        return fstatat(root, p, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

TEST(unpack_files_dirs_links)
{
        int root = fresh_root();
        struct cage_error err = {};
        CHECK(APPLY(root, &err, {"./a/b/file", 0, 0640, "hello", -1},
                    {"a/link", AE_IFLNK, 0777, "b/file", -1}, {"a/hard", 1, 0, "a/b/file", -1},
                    {"d/", AE_IFDIR, 01777, NULL, -1}) == 0);
        struct stat st, st2;
        CHECK(fstatat(root, "a/b/file", &st, 0) == 0 && (st.st_mode & 07777) == 0640 &&
              st.st_size == 5 && st.st_mtime == 1700000000);
        CHECK(fstatat(root, "a/hard", &st2, 0) == 0 && st.st_ino == st2.st_ino);
        CHECK(fstatat(root, "d", &st, 0) == 0 && (st.st_mode & 07777) == 01777);
        char target[32] = "";
        CHECK(readlinkat(root, "a/link", target, sizeof(target)) == 6);
        drop_root(root);
}

TEST(unpack_refuses_escapes)
{
        int root = fresh_root();
        struct cage_error err = {};
        CHECK(APPLY(root, &err, {"../x", 0, 0, "x", -1}) == -EPERM);
        CHECK(strstr(err.message, "\"..\" refused") != NULL);
        CHECK(APPLY(root, &err, {"/etc/x", 0, 0, "x", -1}) == -EPERM);
        CHECK(APPLY(root, &err, {"a/../../x", 0, 0, "x", -1}) == -EPERM);
        CHECK(APPLY(root, &err, {"esc", AE_IFLNK, 0777, "/tmp", -1}, {"esc/x", 0, 0, "x", -1}) < 0);
        CHECK(strstr(err.message, "symbolic link") != NULL);
        CHECK(APPLY(root, &err, {"h", 1, 0, "/etc/passwd", -1}) == -EPERM);
        CHECK(APPLY(root, &err, {"h", 1, 0, "esc", -1}) == -EPERM); /* not a file of this layer */
        CHECK(!exists_at(root, "x") && !exists_at(root, "h"));
        drop_root(root);
}

TEST(unpack_drops_devices_and_setuid)
{
        int root = fresh_root();
        struct cage_error err = {};
        CHECK(APPLY(root, &err, {"null", AE_IFCHR, 0666, NULL, -1},
                    {"fifo", AE_IFIFO, 0666, NULL, -1}, {"su", 0, 04755, "x", -1},
                    {"sg", AE_IFDIR, 02775, NULL, -1}) == 0);
        struct stat st;
        CHECK(!exists_at(root, "null") && !exists_at(root, "fifo"));
        CHECK(fstatat(root, "su", &st, 0) == 0 && (st.st_mode & 07777) == 0755);
        CHECK(fstatat(root, "sg", &st, 0) == 0 && (st.st_mode & 07777) == 0775);
        drop_root(root);
}

TEST(unpack_whiteouts)
{
        int root = fresh_root();
        struct cage_error err = {};
        CHECK(APPLY(root, &err, {"gone", 0, 0, "x", -1}, {"dir/a", 0, 0, "x", -1},
                    {"dir/sub/b", 0, 0, "x", -1}, {"keep", 0, 0, "x", -1}) == 0);
        /* the opaque marker comes after an entry of its own layer: that entry stays */
        CHECK(APPLY(root, &err, {".wh.gone", 0, 0, NULL, -1}, {"dir/new", 0, 0, "y", -1},
                    {"dir/.wh..wh..opq", 0, 0, NULL, -1}, {"made", 0, 0, "z", -1},
                    {".wh.made", 0, 0, NULL, -1}, {".wh.nothere", 0, 0, NULL, -1}) == 0);
        CHECK(!exists_at(root, "gone") && !exists_at(root, "dir/a") && !exists_at(root, "dir/sub"));
        CHECK(exists_at(root, "dir/new") && exists_at(root, "keep"));
        CHECK(exists_at(root, "made")); /* a whiteout hides lower layers only */
        CHECK(!exists_at(root, ".wh.gone") && !exists_at(root, "dir/.wh..wh..opq"));
        CHECK(APPLY(root, &err, {".wh...", 0, 0, NULL, -1}) == -EPERM);
        CHECK(APPLY(root, &err, {"dir/.wh..", 0, 0, NULL, -1}) == -EPERM);
        CHECK(exists_at(root, "keep"));
        drop_root(root);
}

TEST(unpack_replaces_by_type)
{
        int root = fresh_root();
        struct cage_error err = {};
        CHECK(APPLY(root, &err, {"x/f", 0, 0, "x", -1}, {"l", AE_IFLNK, 0777, "x", -1}) == 0);
        CHECK(APPLY(root, &err, {"x", 0, 0, "file now", -1}, {"l", AE_IFDIR, 0755, NULL, -1},
                    {"l/in", 0, 0, "y", -1}) == 0);
        struct stat st;
        CHECK(fstatat(root, "x", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode));
        CHECK(fstatat(root, "l", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode));
        CHECK(exists_at(root, "l/in"));
        drop_root(root);
}

TEST(unpack_bounds)
{
        int root = fresh_root();
        struct cage_error err = {};
        struct ent many[101];
        char names[101][8];
        for (int i = 0; i < 101; i++) {
                snprintf(names[i], sizeof(names[i]), "f%d", i);
                many[i] = (struct ent){names[i], 0, 0, "", -1};
        }
        CHECK(apply(root, many, 101, &err) == -E2BIG);
        CHECK(strstr(err.message, "more than 100 entries") != NULL);
        CHECK(apply(root, many, 100, &err) == 0);
        static char big[600000];
        memset(big, 'a', sizeof(big) - 1);
        CHECK(APPLY(root, &err, {"b1", 0, 0, big, -1}, {"b2", 0, 0, big, -1}) == -EFBIG);
        CHECK(strstr(err.message, "bytes of files") != NULL);
        char deep[IMAGE_PATH_MAX + 100];
        memset(deep, 'a', sizeof(deep) - 1);
        deep[sizeof(deep) - 1] = '\0';
        CHECK(APPLY(root, &err, {deep, 0, 0, "x", -1}) == -ENAMETOOLONG);
        drop_root(root);
}

TEST(unpack_refuses_garbage)
{
        int root = fresh_root();
        int fd = memfd_create("junk", MFD_CLOEXEC);
        char junk[4096];
        memset(junk, 'j', sizeof(junk));
        CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
        lseek(fd, 0, SEEK_SET);
        struct cage_error err = {};
        CHECK(unpack_layer(root, fd, &limits, NULL, &err) == -EBADMSG);
        close(fd);
        drop_root(root);
}

TEST(unpack_image_bounds_all_layers)
{
        int root = fresh_root();
        struct cage_error err = {};
        static char half[500001];
        memset(half, 'a', sizeof(half) - 1);
        struct unpack_limits image = limits;
        image.max_image_bytes = 1 << 20;
        image.image_bytes = 600000; /* what the layers beneath hold */
        int fd = make_layer((const struct ent[]){{"big", 0, 0, half, -1}}, 1);
        CHECK(unpack_layer(root, fd, &image, NULL, &err) == -EFBIG);
        CHECK(strstr(err.message, "in all its layers") != NULL);
        image.image_bytes = 0;
        lseek(fd, 0, SEEK_SET);
        CHECK(unpack_layer(root, fd, &image, NULL, &err) == 0);
        close(fd);
        drop_root(root);
}

TEST(unpack_and_hashing_stop_on_cancel_and_deadline)
{
        int root = fresh_root();
        struct cage_error err = {};
        char diff_id[CAGE_IMAGE_DIGEST_LEN + 1];
        volatile int cancelled = 1;
        struct cage_image_op op = {.cancel_fd = -1, .cancelled = &cancelled};
        struct unpack_limits stopped = limits;
        int fd = make_layer((const struct ent[]){{"f", 0, 0, "x", -1}}, 1);
        stopped.op = &op;
        CHECK(unpack_layer(root, fd, &stopped, NULL, &err) == -ECANCELED);
        lseek(fd, 0, SEEK_SET);
        CHECK(layer_diff_id_within(fd, &stopped, diff_id, &err) == -ECANCELED);
        stopped.op = NULL;
        stopped.deadline_ms = 1; /* long past */
        lseek(fd, 0, SEEK_SET);
        CHECK(unpack_layer(root, fd, &stopped, NULL, &err) == -ETIMEDOUT);
        CHECK(strstr(err.message, "pull_timeout_s") != NULL);
        lseek(fd, 0, SEEK_SET);
        CHECK(layer_diff_id_within(fd, &stopped, diff_id, &err) == -ETIMEDOUT);
        CHECK(!exists_at(root, "f"));
        close(fd);
        drop_root(root);
}

/* Feeds a layer through a pipe, cancelling once half of it has gone in. */
struct half_feed {
        int layer_fd, pipe_fd;
        volatile int cancelled;
};

static void *feed_then_cancel(void *arg)
{
        struct half_feed *h = arg;
        off_t size = lseek(h->layer_fd, 0, SEEK_END), sent = 0;
        char buf[65536];
        ssize_t n = 1;
        while (n > 0 && (n = pread(h->layer_fd, buf, sizeof(buf), sent)) > 0) {
                if (sent >= size / 2)
                        h->cancelled = 1;
                n = write(h->pipe_fd, buf, (size_t)n);
                sent += n > 0 ? n : 0;
        }
        close(h->pipe_fd);
        return NULL;
}

TEST(unpack_stops_inside_a_large_file)
{
        int root = fresh_root();
        int pipe_fds[2];
        struct cage_error err = {};
        static char data[4 << 20 | 1];
        memset(data, 'a', sizeof(data) - 1);
        struct half_feed h = {.layer_fd =
                                      make_layer((const struct ent[]){{"f", 0, 0, data, -1}}, 1)};
        struct cage_image_op op = {.cancel_fd = -1, .cancelled = &h.cancelled};
        struct unpack_limits big = limits;
        big.max_bytes = sizeof(data);
        big.op = &op;
        signal(SIGPIPE, SIG_IGN);
        CHECK(pipe(pipe_fds) == 0);
        h.pipe_fd = pipe_fds[1];
        pthread_t feeder;
        CHECK(pthread_create(&feeder, NULL, feed_then_cancel, &h) == 0);
        /* the cancellation comes with 2 MiB of the file still to read */
        CHECK(unpack_layer(root, pipe_fds[0], &big, NULL, &err) == -ECANCELED);
        close(pipe_fds[0]);
        pthread_join(feeder, NULL);
        close(h.layer_fd);
        drop_root(root);
}

RUN_TESTS(T(ref_normalisation), T(ref_parts), T(ref_refusals), T(ref_patterns), T(digests),
          T(config_defaults_and_values), T(config_refusals_name_the_key), T(manifest_and_index),
          T(manifest_refusals), T(image_config), T(unpack_files_dirs_links),
          T(unpack_refuses_escapes), T(unpack_drops_devices_and_setuid), T(unpack_whiteouts),
          T(unpack_replaces_by_type), T(unpack_bounds), T(unpack_refuses_garbage),
          T(unpack_image_bounds_all_layers), T(unpack_and_hashing_stop_on_cancel_and_deadline),
          T(unpack_stops_inside_a_large_file))
