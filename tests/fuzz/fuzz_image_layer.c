/* libFuzzer target for src/images/unpack.c, the layer unpacker: the bytes
 * are a layer blob (a tar, or a compressed one) applied to an empty root
 * directory, and, cut at the first NUL, an entry name for the path check
 * alone. Aborts on a broken invariant:
 *  - a name the path check accepts comes out relative, without ".", ".."
 *    or empty components, at most 256 of them, within IMAGE_PATH_MAX bytes,
 *    and checking it again gives it back unchanged;
 *  - whatever the layer holds, nothing is created beside the root (its
 *    parent holds only the root and a sentinel file, unchanged), and the
 *    root holds no device node, FIFO or socket, no setuid / setgid file,
 *    no whiteout file, and no more than 256 files (an entry and its
 *    missing parents) per entry the layer may have. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "images/images_private.h"

#define ENTRIES_MAX 64
#define SENTINEL    "sentinel: nothing of a layer may land here\n"

static char top[64];
static int top_fd = -1, blob_fd = -1;

static void cleanup(void)
{
        if (top_fd >= 0) {
                remove_tree_at(top_fd, "root");
                unlinkat(top_fd, "sentinel", 0);
                rmdir(top);
        }
}

static void setup(void)
{
        if (top_fd >= 0)
                return;
        /* tmpfs when there is one: on a disk file system inode allocation,
         * not the unpacker, sets the pace. */
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(top, sizeof(top), "%s/codecage-fuzz-layer-XXXXXX", dir);
        FUZZ_CHECK(mkdtemp(top));
        top_fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        FUZZ_CHECK(top_fd >= 0);
        int fd = openat(top_fd, "sentinel", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        FUZZ_CHECK(fd >= 0 && write(fd, SENTINEL, strlen(SENTINEL)) == (ssize_t)strlen(SENTINEL));
        close(fd);
        blob_fd = memfd_create("layer", MFD_CLOEXEC);
        FUZZ_CHECK(blob_fd >= 0);
        atexit(cleanup);
}

static void check_name(const char *name)
{
        char out[IMAGE_PATH_MAX + 1], again[IMAGE_PATH_MAX + 1];
        struct cage_error err = {0};
        int r = unpack_clean_path(name, out, sizeof(out), &err);
        if (r < 0) {
                FUZZ_CHECK(r == -EPERM || r == -ENAMETOOLONG);
                FUZZ_CHECK(err.message[0]);
                return;
        }
        size_t len = strlen(out), depth = 0;
        FUZZ_CHECK(len <= IMAGE_PATH_MAX && out[0] != '/');
        for (const char *p = out; *p;) {
                size_t n = strcspn(p, "/");
                FUZZ_CHECK(n > 0);
                FUZZ_CHECK(!(n == 1 && p[0] == '.') && !(n == 2 && p[0] == '.' && p[1] == '.'));
                depth++;
                p += n + (p[n] == '/');
                FUZZ_CHECK(p[-1] != '/' || *p); /* no trailing "/" */
        }
        FUZZ_CHECK(depth <= 256);
        FUZZ_CHECK(unpack_clean_path(out, again, sizeof(again), NULL) == 0);
        FUZZ_CHECK(strcmp(out, again) == 0);
}

/* Walks dir (depth-first); counts what is in it. */
static void check_tree(int dfd, size_t *count)
{
        DIR *d = fdopendir(dfd);
        FUZZ_CHECK(d);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                FUZZ_CHECK(fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0);
                FUZZ_CHECK(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode));
                FUZZ_CHECK(!(st.st_mode & (S_ISUID | S_ISGID)));
                FUZZ_CHECK(strncmp(de->d_name, ".wh.", 4) != 0);
                (*count)++;
                if (S_ISDIR(st.st_mode)) {
                        int sub = openat(dirfd(d), de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        FUZZ_CHECK(sub >= 0);
                        check_tree(sub, count);
                }
        }
        closedir(d);
}

static void check_beside(void)
{
        int dup_fd = openat(top_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        FUZZ_CHECK(dup_fd >= 0);
        DIR *d = fdopendir(dup_fd);
        FUZZ_CHECK(d);
        struct dirent *de;
        size_t n = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                FUZZ_CHECK(strcmp(de->d_name, "root") == 0 || strcmp(de->d_name, "sentinel") == 0);
                n++;
        }
        closedir(d);
        FUZZ_CHECK(n == 2);
        char buf[sizeof(SENTINEL) + 1];
        int fd = openat(top_fd, "sentinel", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        FUZZ_CHECK(fd >= 0);
        ssize_t got = read(fd, buf, sizeof(buf));
        close(fd);
        FUZZ_CHECK(got == (ssize_t)strlen(SENTINEL) &&
                   memcmp(buf, SENTINEL, strlen(SENTINEL)) == 0);
}

static void check_layer(const uint8_t *data, size_t size)
{
        setup();
        FUZZ_CHECK(mkdirat(top_fd, "root", 0755) == 0);
        int root_fd = openat(top_fd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        FUZZ_CHECK(root_fd >= 0);
        FUZZ_CHECK(ftruncate(blob_fd, 0) == 0);
        FUZZ_CHECK(pwrite(blob_fd, data, size, 0) == (ssize_t)size);
        FUZZ_CHECK(lseek(blob_fd, 0, SEEK_SET) == 0);
        struct unpack_limits limits = {.max_bytes = 1 << 20, .max_entries = ENTRIES_MAX};
        struct cage_error err = {0};
        uint64_t bytes = 0;
        int r = unpack_layer(root_fd, blob_fd, &limits, &bytes, &err);
        FUZZ_CHECK(r <= 0);
        FUZZ_CHECK(r == 0 || err.message[0]);
        FUZZ_CHECK(r < 0 || bytes <= limits.max_bytes);
        check_beside();
        size_t count = 0;
        check_tree(root_fd, &count); /* closes root_fd */
        FUZZ_CHECK(count <= ENTRIES_MAX * 256);
        FUZZ_CHECK(remove_tree_at(top_fd, "root") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char name[IMAGE_PATH_MAX + 64];
        size_t n = strnlen((const char *)data, size < sizeof(name) - 1 ? size : sizeof(name) - 1);
        memcpy(name, data, n);
        name[n] = '\0';
        check_name(name);
        check_layer(data, size);
        return 0;
}
