/* Workspace files and artifacts; the contract is in files.h.
 *
 * This file owns the checking of client paths, every file operation the
 * server (root, on the host) does inside a sandbox's workspace, content
 * sniffing (one libmagic cookie per thread) and the artifact scan of
 * output/.
 *
 * Invariants (the sandbox may plant anything in the workspace, at any time):
 * - A client path is opened only through openat2(root_fd, path,
 *   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): a planted
 *   symlink resolves as if root_fd were "/", so nothing outside is reached.
 * - The last component is acted on with *at() calls relative to its
 *   parent's fd and never followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW).
 * - Tree walks (delete, artifacts, copy) go from fd to fd, each step an
 *   openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV) of one
 *   name, never a path string, bounded in depth and entries.
 * - Files are opened O_NONBLOCK and their type is checked on the opened fd
 *   (no check-then-open race): a FIFO never blocks the server, only regular
 *   files are read, and never more than asked. (The sandbox user cannot
 *   create device nodes: it has no CAP_MKNOD over the host.)
 * - Writes go to a fresh O_EXCL temporary file, flushed to its disk
 *   (fdatasync) and then renamed over the name: an existing name (symlink,
 *   hard link, FIFO) is replaced, never written through; a write is
 *   reported only once its bytes are on the disk, so a full disk under a
 *   workspace (its image lives in the server's data_dir) fails the request
 *   instead of losing the file later, and a crash never leaves a torn file
 *   under the name. What the server creates is chowned to the root's owner.
 * - Messages name the client's path, never a host path. */
#include "services/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/output.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define WORKSPACE_PREFIX   "/workspace"
#define COMPONENT_MAX      255
#define JOINED_MAX         (CAGE_FILES_PATH_MAX + COMPONENT_MAX + 2)
#define TEMP_TRIES         16
#define DELETE_DEPTH_MAX   256
#define DELETE_ENTRIES_MAX 1000000
#define SCAN_DEPTH_MAX     64 /* artifacts and copy_tree */
#define SNIFF_BYTES        4096
#define COPY_CHUNK         65536
#define MIME_FALLBACK      "application/octet-stream"
#define WALK_STOP          1 /* a visitor's "enough", not an error */

/* The client path in messages, cut so the reason always fits. */
#define PATH_FMT "path \"%.300s\""

#define RESOLVE_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define RESOLVE_CHILD                                                                              \
        (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

/* --- paths ---------------------------------------------------------------- */

/* Appends one component of the client path to out; 0 or -EINVAL. */
static int add_component(const char *path, const char *c, size_t len, char *out, size_t *o,
                         struct cage_error *err)
{
        if (len == 1 && c[0] == '.')
                return 0;
        if (len == 2 && c[0] == '.' && c[1] == '.')
                return cage_fail(err, -EINVAL, PATH_FMT ": \"..\" is not allowed", path);
        if (len > COMPONENT_MAX)
                return cage_fail(err, -EINVAL, PATH_FMT ": a component is longer than %d bytes",
                                 path, COMPONENT_MAX);
        if (*o)
                out[(*o)++] = '/';
        memcpy(out + *o, c, len);
        *o += len;
        return 0;
}

int cage_files_check_path(const char *path, char out[CAGE_FILES_PATH_MAX + 1],
                          struct cage_error *err)
{
        if (!path)
                return cage_fail(err, -EINVAL, "path: missing");
        if (strnlen(path, CAGE_FILES_PATH_MAX + 1) > CAGE_FILES_PATH_MAX)
                return cage_fail(err, -EINVAL, PATH_FMT "...: longer than %d bytes", path,
                                 CAGE_FILES_PATH_MAX);
        const char *p = path;
        if (*p == '/') {
                size_t n = strlen(WORKSPACE_PREFIX);
                if (strncmp(p, WORKSPACE_PREFIX, n) != 0 || (p[n] != '\0' && p[n] != '/'))
                        return cage_fail(err, -EINVAL,
                                         PATH_FMT ": absolute paths must be under /workspace",
                                         path);
                p += n;
        }
        char buf[CAGE_FILES_PATH_MAX + 1];
        size_t o = 0;
        while (*p) {
                size_t len = strcspn(p, "/");
                int r = add_component(path, p, len, buf, &o, err);
                if (r < 0)
                        return r;
                p += len;
                p += strspn(p, "/");
        }
        buf[o] = '\0';
        memcpy(out, buf, o + 1);
        return 0;
}

/* "dir/name", or "name" in the root; the caller's buffer is JOINED_MAX. */
static void join_path(char *out, const char *dir, const char *name)
{
        snprintf(out, JOINED_MAX, "%s%s%s", dir, dir[0] ? "/" : "", name);
}

static const char *base_name(const char *rel)
{
        const char *slash = strrchr(rel, '/');
        return slash ? slash + 1 : rel;
}

/* --- opening -------------------------------------------------------------- */

/* The resolve flags that keep paths inside the workspace. Builds made with
 * -Dunsafe_debug=true can switch them off (CODECAGE_DEBUG_DISABLE naming
 * "files-resolve"), so the security suite can show that they are what stops
 * a planted symlink; normal builds have no such switch. */
static uint64_t resolve_root(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "files-resolve"))
                return 0;
#endif
        return RESOLVE_ROOT;
}

/* Opens a checked workspace-relative path ("" is the root) inside the root. */
static int open_in_root(int root_fd, const char *rel, uint64_t flags, mode_t mode)
{
        return openat2_retry(root_fd, rel[0] ? rel : ".", flags, mode, resolve_root());
}

/* Opens the entry `name` of the directory dfd: no link, no other mount. */
static int open_child(int dfd, const char *name, uint64_t flags, mode_t mode)
{
        return openat2_retry(dfd, name, flags, mode, RESOLVE_CHILD);
}

/* Opens the parent directory of a checked, non-root path (O_PATH). */
static int open_parent(int root_fd, const char *rel, const char **ret_name)
{
        char parent[CAGE_FILES_PATH_MAX + 1] = "";
        const char *name = base_name(rel);
        if (name != rel) {
                memcpy(parent, rel, (size_t)(name - 1 - rel));
                parent[name - 1 - rel] = '\0';
        }
        int fd = open_in_root(root_fd, parent, O_PATH | O_DIRECTORY, 0);
        if (fd >= 0)
                *ret_name = name;
        return fd;
}

/* Opens a file for reading without ever blocking (O_NONBLOCK: a FIFO opens
 * at once) and checks, on the opened fd, that it is a regular file. */
static int open_regular(int root_fd, const char *rel, struct stat *ret_st)
{
        _cleanup_close_ int fd = open_in_root(root_fd, rel, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
        if (fd < 0)
                return fd;
        if (fstat(fd, ret_st) < 0)
                return -errno;
        if (S_ISDIR(ret_st->st_mode))
                return -EISDIR;
        if (!S_ISREG(ret_st->st_mode))
                return -EPERM;
        return TAKE_FD(fd);
}

/* Fills err for an operation that failed on the client's path. */
static int fail_path(struct cage_error *err, int r, const char *path, const char *what)
{
        switch (r) {
        case -ENOSPC:
        case -EDQUOT:
                return cage_fail(err, r, PATH_FMT ": the workspace is full", path);
        case -EIO: /* the workspace's image could not be written: its disk is full */
                return cage_fail(err, r,
                                 PATH_FMT
                                 ": %s: the disk under the workspace failed the write "
                                 "(the server's data_dir may be full); nothing was written",
                                 path, what);
        case -ELOOP:
                return cage_fail(err, r, PATH_FMT ": %s: a symbolic link is in the way", path,
                                 what);
        case -EXDEV:
                return cage_fail(err, r, PATH_FMT ": %s: it leads out of the workspace", path,
                                 what);
        case -EPERM:
                return cage_fail(err, r, PATH_FMT ": %s: not a regular file", path, what);
        default:
                return cage_fail(err, r, PATH_FMT ": %s", path, what);
        }
}

/* Makes room for one more element in the array *v of n used, *cap
 * allocated elements (doubling). */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
        if (n < *cap)
                return 0;
        size_t ncap = *cap ? *cap * 2 : 32;
        void *nv = reallocarray(*v, ncap, size);
        if (!nv)
                return -ENOMEM;
        *v = nv;
        *cap = ncap;
        return 0;
}

/* --- directory walks ------------------------------------------------------ */

typedef int (*visit_fn)(int dfd, const char *name, unsigned char type, void *userdata);

/* Calls visit for each entry of the directory fd (taken over; "." and ".."
 * skipped) until it returns non-zero, which is then returned. getdents64
 * into a small buffer on the stack rather than readdir: no fstat, fcntl or
 * 32 KiB allocation per directory, which a run's artifact scan of an empty
 * output/ paid twice per call. Each level of a walk holds its buffer: a
 * removal DELETE_DEPTH_MAX deep uses ~600 KiB of the thread's stack. */
static int for_each_entry(int fd, visit_fn visit, void *userdata)
{
        _cleanup_close_ int dfd = fd;
        char buf[2048] __attribute__((aligned(8)));
        for (;;) {
                ssize_t n = getdents64(dfd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : 0;
                for (ssize_t off = 0; off < n;) {
                        struct dirent64 *de = (struct dirent64 *)(buf + off);
                        off += de->d_reclen;
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        int r = visit(dfd, de->d_name, de->d_type, userdata);
                        if (r != 0)
                                return r;
                }
        }
}

/* --- content sniffing ----------------------------------------------------- */

static pthread_key_t magic_key;
static pthread_once_t magic_once = PTHREAD_ONCE_INIT;
static bool magic_key_ok;
static __thread char mime_buf[128];

static void magic_destroy(void *cookie)
{
        magic_close(cookie);
}

static void magic_key_init(void)
{
        magic_key_ok = pthread_key_create(&magic_key, magic_destroy) == 0;
}

/* This thread's cookie (a magic_t is not thread-safe), loaded on first use;
 * closed when the thread exits. */
static magic_t thread_magic(void)
{
        pthread_once(&magic_once, magic_key_init);
        if (!magic_key_ok)
                return NULL;
        magic_t m = pthread_getspecific(magic_key);
        if (m)
                return m;
        m = magic_open(MAGIC_MIME_TYPE | MAGIC_NO_CHECK_COMPRESS | MAGIC_NO_CHECK_ELF);
        if (!m)
                return NULL;
        if (magic_load(m, NULL) < 0 || pthread_setspecific(magic_key, m) != 0) {
                magic_close(m);
                return NULL;
        }
        return m;
}

const char *cage_files_mime(const void *data, size_t len)
{
        magic_t m = thread_magic();
        const char *type = m ? magic_buffer(m, data, len) : NULL;
        if (!type || !type[0] || strlen(type) >= sizeof(mime_buf))
                return MIME_FALLBACK;
        memcpy(mime_buf, type, strlen(type) + 1);
        return mime_buf;
}

/* The mime type of the first 4 KiB of a regular file (safe open; *ret_st is
 * the opened file's); NULL if it is not, or no longer, a regular file. */
static const char *sniff_file(int root_fd, const char *rel, struct stat *ret_st)
{
        _cleanup_close_ int fd = open_regular(root_fd, rel, ret_st);
        if (fd < 0)
                return NULL;
        char buf[SNIFF_BYTES];
        ssize_t n = read_full(fd, buf, sizeof(buf));
        return n < 0 ? NULL : cage_files_mime(buf, (size_t)n);
}

/* --- JSON ----------------------------------------------------------------- */

/* A JSON string of bytes from the file system, which need not be UTF-8:
 * invalid sequences become U+FFFD. */
static json_t *text_json(const char *s)
{
        json_t *j = json_string(s);
        if (j)
                return j;
        _cleanup_free_ char *clean = NULL;
        size_t len = 0;
        if (cage_sanitize_text(s, strlen(s), &clean, &len) < 0)
                return NULL;
        return json_stringn(clean, len);
}

static const char *type_name(mode_t mode)
{
        if (S_ISREG(mode))
                return "file";
        if (S_ISDIR(mode))
                return "dir";
        if (S_ISLNK(mode))
                return "symlink";
        return "other";
}

static json_t *entry_json(const char *name, const char *rel, const struct stat *st)
{
        return json_pack("{s:o, s:o, s:s, s:I, s:I}", "name", text_json(name), "path",
                         text_json(rel), "type", type_name(st->st_mode), "size",
                         (json_int_t)st->st_size, "mtime", (json_int_t)st->st_mtim.tv_sec);
}

/* --- read ----------------------------------------------------------------- */

/* read(2) retried on EINTR: bytes read, 0 at end of file, or -errno. */
static ssize_t read_retry(int fd, void *buf, size_t len)
{
        for (;;) {
                ssize_t n = read(fd, buf, len);
                if (n >= 0 || errno != EINTR)
                        return n < 0 ? -errno : n;
        }
}

/* Reads at most max bytes into a NUL-terminated buffer: -E2BIG if there is
 * more, even when the file grew since fstat (hint is its size then). */
static int read_bounded(int fd, size_t hint, size_t max, char **ret, size_t *ret_len)
{
        if (max > SIZE_MAX / 2)
                max = SIZE_MAX / 2;
        size_t limit = max + 1, cap = (hint < max ? hint : max) + 1, len = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len == cap) {
                        if (cap >= limit)
                                break;
                        size_t ncap = cap > limit / 2 ? limit : cap * 2;
                        char *b = realloc(buf, ncap + 1);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        cap = ncap;
                }
                ssize_t n = read_retry(fd, buf + len, cap - len);
                if (n < 0)
                        return (int)n;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        if (len > max)
                return -E2BIG;
        buf[len] = '\0';
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

int cage_files_read(int root_fd, const char *path, size_t max, void **ret_data, size_t *ret_len,
                    struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        int r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        struct stat st;
        _cleanup_close_ int fd = open_regular(root_fd, rel, &st);
        if (fd < 0)
                return fail_path(err, fd, path, "cannot read");
        if ((uint64_t)st.st_size > max)
                return cage_fail(err, -E2BIG, PATH_FMT ": the file is larger than %zu bytes", path,
                                 max);
        char *data = NULL;
        size_t len = 0;
        r = read_bounded(fd, (size_t)st.st_size, max, &data, &len);
        if (r == -E2BIG)
                return cage_fail(err, r, PATH_FMT ": the file is larger than %zu bytes", path, max);
        if (r < 0)
                return fail_path(err, r, path, "cannot read");
        *ret_data = data;
        *ret_len = len;
        return 0;
}

/* --- mkdir and write ------------------------------------------------------ */

/* Creates the directory `name` in dfd (prefix: its path from the root) and
 * opens it. What is chowned is the fd reopened without following links, so
 * a name swapped meanwhile never gets a directory of the sandbox's choosing
 * outside the root, nor a file, chowned. */
static int make_dir(int root_fd, int dfd, const char *prefix, const char *name,
                    const struct stat *owner)
{
        if (mkdirat(dfd, name, 0755) < 0) {
                if (errno != EEXIST)
                        return -errno;
                /* Made meanwhile, or a link: resolve it the safe way. */
                return open_in_root(root_fd, prefix, O_PATH | O_DIRECTORY, 0);
        }
        _cleanup_close_ int fd = open_child(dfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0)
                return fd;
        if (fchown(fd, owner->st_uid, owner->st_gid) < 0 || fchmod(fd, 0755) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* Opens the directory rel, creating it and its missing parents one
 * component at a time, each resolved from the root. */
static int mkdir_parents(int root_fd, const char *rel, const struct stat *owner)
{
        int fd = open_in_root(root_fd, rel, O_PATH | O_DIRECTORY, 0);
        if (fd != -ENOENT)
                return fd;
        _cleanup_close_ int dfd = open_in_root(root_fd, "", O_PATH | O_DIRECTORY, 0);
        if (dfd < 0)
                return dfd;
        char prefix[CAGE_FILES_PATH_MAX + 1];
        size_t start = 0;
        for (size_t i = 0;; i++) {
                if (rel[i] != '/' && rel[i] != '\0')
                        continue;
                memcpy(prefix, rel, i);
                prefix[i] = '\0';
                int sub = open_in_root(root_fd, prefix, O_PATH | O_DIRECTORY, 0);
                if (sub == -ENOENT)
                        sub = make_dir(root_fd, dfd, prefix, prefix + start, owner);
                if (sub < 0)
                        return sub;
                close(dfd);
                dfd = sub;
                if (rel[i] == '\0')
                        return TAKE_FD(dfd);
                start = i + 1;
        }
}

static int root_owner(int root_fd, struct stat *ret, struct cage_error *err)
{
        if (fstat(root_fd, ret) < 0)
                return cage_fail(err, -errno, "workspace root");
        return 0;
}

int cage_files_mkdir(int root_fd, const char *path, struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        struct stat owner;
        int r = cage_files_check_path(path, rel, err);
        if (r < 0 || (r = root_owner(root_fd, &owner, err)) < 0)
                return r;
        _cleanup_close_ int fd = mkdir_parents(root_fd, rel, &owner);
        if (fd < 0)
                return fail_path(err, fd, path, "cannot create the directory");
        return 0;
}

/* Creates an unused temporary name in dfd, owned like the root, 0644. */
static int create_temp(int dfd, char name[static 64], const struct stat *owner)
{
        for (int i = 0; i < TEMP_TRIES; i++) {
                uint64_t rnd;
                if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                        return -errno;
                snprintf(name, 64, ".codecage-tmp-%016" PRIx64, rnd);
                _cleanup_close_ int fd =
                        open_child(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
                if (fd == -EEXIST)
                        continue;
                if (fd < 0)
                        return fd;
                if (fchown(fd, owner->st_uid, owner->st_gid) < 0 || fchmod(fd, 0644) < 0) {
                        int r = -errno;
                        unlinkat(dfd, name, 0);
                        return r;
                }
                return TAKE_FD(fd);
        }
        return -EEXIST;
}

/* Writes data to a fresh temporary file next to name, then renames it over
 * name: an existing link or hard link is replaced, never written through. */
static int write_replace(int dfd, const char *name, const void *data, size_t len,
                         const struct stat *owner)
{
        char tmp[64];
        _cleanup_close_ int fd = create_temp(dfd, tmp, owner);
        if (fd < 0)
                return fd;
        int r = write_all(fd, data, len);
        if (r == 0 && fdatasync(fd) < 0)
                r = -errno;
        if (r == 0 && renameat2(dfd, tmp, dfd, name, 0) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(dfd, tmp, 0);
        return r;
}

int cage_files_write(int root_fd, const char *path, const void *data, size_t len,
                     struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1], parent[CAGE_FILES_PATH_MAX + 1];
        struct stat owner;
        int r = cage_files_check_path(path, rel, err);
        if (r < 0 || (r = root_owner(root_fd, &owner, err)) < 0)
                return r;
        if (!rel[0])
                return cage_fail(err, -EISDIR, PATH_FMT ": the workspace root", path);
        const char *name = base_name(rel);
        snprintf(parent, sizeof(parent), "%.*s", (int)(name == rel ? 0 : name - 1 - rel), rel);
        _cleanup_close_ int dfd = mkdir_parents(root_fd, parent, &owner);
        if (dfd < 0)
                return fail_path(err, dfd, path, "cannot create the parent directory");
        r = write_replace(dfd, name, data, len, &owner);
        if (r < 0)
                return fail_path(err, r, path, "cannot write");
        return 0;
}

/* --- list and stat -------------------------------------------------------- */

struct entry {
        char *name;
        struct stat st;
};

struct entry_list {
        struct entry *v;
        size_t n, cap, max;
        bool truncated;
};

static void entry_list_free(struct entry_list *l)
{
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i].name);
        free(l->v);
}

/* Adds an entry, lstat'ed on the directory fd (a name gone meanwhile is
 * left out); stops at l->max. */
static int collect_entry(int dfd, const char *name, unsigned char type, void *userdata)
{
        struct entry_list *l = userdata;
        struct stat st;
        if (l->n == l->max) {
                l->truncated = true;
                return WALK_STOP;
        }
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
                return -ENOMEM;
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        l->v[l->n++] = (struct entry){copy, st};
        return 0;
}

static int cmp_entries(const void *a, const void *b)
{
        return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* {"path", "entries", "truncated"} of the collected entries, sorted. */
static json_t *list_json(const char *rel, struct entry_list *l)
{
        json_t *entries = json_array();
        if (l->n > 1) /* v may be NULL when empty */
                qsort(l->v, l->n, sizeof(*l->v), cmp_entries);
        for (size_t i = 0; entries && i < l->n; i++) {
                char path[JOINED_MAX];
                join_path(path, rel, l->v[i].name);
                if (json_array_append_new(entries, entry_json(l->v[i].name, path, &l->v[i].st)) <
                    0) {
                        json_decref(entries);
                        entries = NULL;
                }
        }
        return json_pack("{s:o, s:o, s:b}", "path", text_json(rel), "entries", entries, "truncated",
                         l->truncated);
}

int cage_files_list(int root_fd, const char *path, json_t **ret, struct cage_error *err)
{
        return cage_files_list_max(root_fd, path, CAGE_FILES_LIST_MAX, ret, err);
}

int cage_files_list_max(int root_fd, const char *path, size_t max, json_t **ret,
                        struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        int r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        int fd = open_in_root(root_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK, 0);
        if (fd < 0)
                return fail_path(err, fd, path, "cannot list");
        struct entry_list l = {.max = max < CAGE_FILES_LIST_MAX ? max : CAGE_FILES_LIST_MAX};
        json_t *o = NULL;
        r = for_each_entry(fd, collect_entry, &l);
        if (r >= 0 && !(o = list_json(rel, &l)))
                r = -ENOMEM;
        entry_list_free(&l);
        if (r < 0)
                return fail_path(err, r, path, "cannot list");
        *ret = o;
        return 0;
}

/* lstat of a checked path; the root itself is fstat'ed. */
static int stat_nofollow(int root_fd, const char *rel, struct stat *ret)
{
        if (!rel[0])
                return fstat(root_fd, ret) < 0 ? -errno : 0;
        const char *name;
        _cleanup_close_ int dfd = open_parent(root_fd, rel, &name);
        if (dfd < 0)
                return dfd;
        return fstatat(dfd, name, ret, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

int cage_files_stat(int root_fd, const char *path, json_t **ret, struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        struct stat st, opened;
        int r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        r = stat_nofollow(root_fd, rel, &st);
        if (r < 0)
                return fail_path(err, r, path, "cannot stat");
        json_t *o = entry_json(base_name(rel), rel, &st);
        const char *mime = S_ISREG(st.st_mode) ? sniff_file(root_fd, rel, &opened) : NULL;
        if (o && mime && json_object_set_new(o, "mime", json_string(mime)) < 0) {
                json_decref(o);
                o = NULL;
        }
        if (!o)
                return cage_fail(err, -ENOMEM, PATH_FMT ": cannot stat", path);
        *ret = o;
        return 0;
}

/* --- delete --------------------------------------------------------------- */

struct rm_level {
        unsigned depth;
        uint32_t *budget; /* entries left to remove */
};

static int rm_visit(int dfd, const char *name, unsigned char type, void *userdata);

/* Removes everything inside the directory `name` of dfd. */
static int rm_children(int dfd, const char *name, const struct rm_level *up)
{
        if (up->depth + 1 >= DELETE_DEPTH_MAX)
                return -E2BIG;
        int fd = open_child(dfd, name, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
        if (fd < 0)
                return fd;
        struct rm_level level = {up->depth + 1, up->budget};
        return for_each_entry(fd, rm_visit, &level);
}

static int rm_visit(int dfd, const char *name, unsigned char type, void *userdata)
{
        const struct rm_level *level = userdata;
        if (*level->budget == 0)
                return -E2BIG;
        (*level->budget)--;
        if (type == DT_UNKNOWN) {
                struct stat st;
                if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return errno == ENOENT ? 0 : -errno;
                type = S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
        }
        if (type == DT_DIR) {
                int r = rm_children(dfd, name, level);
                if (r < 0)
                        return r == -ENOENT ? 0 : r;
        }
        /* unlinkat never follows a link: it removes the link itself. */
        if (unlinkat(dfd, name, type == DT_DIR ? AT_REMOVEDIR : 0) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

int cage_files_delete(int root_fd, const char *path, bool recursive, struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        int r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        if (!rel[0])
                return cage_fail(err, -EINVAL, PATH_FMT ": the workspace root cannot be deleted",
                                 path);
        const char *name;
        struct stat st;
        _cleanup_close_ int dfd = open_parent(root_fd, rel, &name);
        if (dfd < 0)
                return fail_path(err, dfd, path, "cannot delete");
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return fail_path(err, -errno, path, "cannot delete");
        if (S_ISDIR(st.st_mode) && recursive) {
                uint32_t budget = DELETE_ENTRIES_MAX;
                struct rm_level top = {0, &budget};
                r = rm_children(dfd, name, &top);
                if (r == -E2BIG)
                        return cage_fail(err, r,
                                         PATH_FMT ": more than %d entries or %d levels to delete",
                                         path, DELETE_ENTRIES_MAX, DELETE_DEPTH_MAX);
                if (r < 0)
                        return fail_path(err, r, path, "cannot delete");
        }
        if (unlinkat(dfd, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0) {
                if (errno == ENOTEMPTY)
                        return cage_fail(err, -errno,
                                         PATH_FMT ": the directory is not empty (delete it "
                                                  "recursively)",
                                         path);
                return fail_path(err, -errno, path, "cannot delete");
        }
        return 0;
}

/* The parent directory of rel, created when missing, and the last name. */
static int open_parent_made(int root_fd, const char *rel, const struct stat *owner,
                            const char **ret_name)
{
        char parent[CAGE_FILES_PATH_MAX + 1] = "";
        const char *name = base_name(rel);
        if (name != rel) {
                memcpy(parent, rel, (size_t)(name - 1 - rel));
                parent[name - 1 - rel] = '\0';
        }
        int fd = mkdir_parents(root_fd, parent, owner);
        if (fd >= 0)
                *ret_name = name;
        return fd;
}

int cage_files_move(int root_fd, const char *from, const char *to, struct cage_error *err)
{
        char src[CAGE_FILES_PATH_MAX + 1], dst[CAGE_FILES_PATH_MAX + 1];
        struct stat owner;
        const char *sname, *dname;
        int r = cage_files_check_path(from, src, err);
        if (r < 0 || (r = cage_files_check_path(to, dst, err)) < 0 ||
            (r = root_owner(root_fd, &owner, err)) < 0)
                return r;
        if (!src[0] || !dst[0])
                return cage_fail(err, -EINVAL, PATH_FMT ": the workspace root cannot be moved",
                                 src[0] ? to : from);
        _cleanup_close_ int sfd = open_parent(root_fd, src, &sname);
        if (sfd < 0)
                return fail_path(err, sfd, from, "cannot move");
        _cleanup_close_ int dfd = open_parent_made(root_fd, dst, &owner, &dname);
        if (dfd < 0)
                return fail_path(err, dfd, to, "cannot move to");
        /* Both names are single components of directories resolved beneath
         * the root: the rename can neither follow nor leave through a link. */
        if (renameat(sfd, sname, dfd, dname) < 0)
                return fail_path(err, -errno, from, "cannot move");
        return 0;
}

/* --- artifacts ------------------------------------------------------------ */

struct file_rec {
        char *path; /* "output/..." */
        uint64_t size;
        int64_t mtime_ns;
        ino_t ino;
};

struct cage_artifact_snapshot {
        struct file_rec *v; /* sorted by path */
        size_t n, cap;
        uint32_t seen; /* entries looked at, bounded by CAGE_ARTIFACTS_SCAN_MAX */
};

struct scan_level {
        struct cage_artifact_snapshot *s;
        unsigned depth;
        const char *prefix;
};

struct cage_artifact_snapshot *cage_artifact_snapshot_free(struct cage_artifact_snapshot *s)
{
        if (s) {
                for (size_t i = 0; i < s->n; i++)
                        free(s->v[i].path);
                free(s->v);
                free(s);
        }
        return NULL;
}

static int add_rec(struct cage_artifact_snapshot *s, const char *path, const struct stat *st)
{
        if (grow((void **)&s->v, &s->cap, s->n, sizeof(*s->v)) < 0)
                return -ENOMEM;
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        s->v[s->n++] = (struct file_rec){p, (uint64_t)st->st_size,
                                         st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
                                         st->st_ino};
        return 0;
}

static int scan_visit(int dfd, const char *name, unsigned char type, void *userdata)
{
        const struct scan_level *level = userdata;
        struct stat st;
        char path[JOINED_MAX];
        if (level->s->seen++ >= CAGE_ARTIFACTS_SCAN_MAX)
                return WALK_STOP;
        join_path(path, level->prefix, name);
        if (strlen(path) > CAGE_FILES_PATH_MAX)
                return 0; /* no client could name it */
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (S_ISREG(st.st_mode))
                return add_rec(level->s, path, &st);
        if (!S_ISDIR(st.st_mode) || level->depth + 1 >= SCAN_DEPTH_MAX)
                return 0;
        int fd = open_child(dfd, name, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
        if (fd < 0)
                return 0; /* replaced meanwhile */
        struct scan_level sub = {level->s, level->depth + 1, path};
        return for_each_entry(fd, scan_visit, &sub);
}

static int cmp_recs(const void *a, const void *b)
{
        return strcmp(((const struct file_rec *)a)->path, ((const struct file_rec *)b)->path);
}

int cage_artifacts_snapshot(int root_fd, struct cage_artifact_snapshot **ret,
                            struct cage_error *err)
{
        struct cage_artifact_snapshot *s = calloc(1, sizeof(*s));
        if (!s)
                return cage_fail(err, -ENOMEM, "artifacts snapshot");
        int r = 0, fd = open_in_root(root_fd, "output",
                                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK, 0);
        if (fd >= 0) {
                struct scan_level top = {s, 0, "output"};
                r = for_each_entry(fd, scan_visit, &top);
        } else if (fd != -ENOENT && fd != -ENOTDIR && fd != -ELOOP) {
                r = fd; /* missing, not a directory or a link: no artifacts */
        }
        if (r < 0) {
                cage_artifact_snapshot_free(s);
                return fail_path(err, r, "output", "cannot scan");
        }
        if (s->n > 1) /* v may be NULL when empty */
                qsort(s->v, s->n, sizeof(*s->v), cmp_recs);
        *ret = s;
        return 0;
}

static bool rec_changed(const struct cage_artifact_snapshot *before, const struct file_rec *f)
{
        if (!before || before->n == 0) /* v may be NULL when empty */
                return true;
        const struct file_rec *old = bsearch(f, before->v, before->n, sizeof(*f), cmp_recs);
        return !old || old->size != f->size || old->mtime_ns != f->mtime_ns || old->ino != f->ino;
}

/* The artifact for f, or NULL in *ret when it is no longer a regular file. */
static int artifact_json(int root_fd, const struct file_rec *f, json_t **ret)
{
        struct stat st;
        const char *mime = sniff_file(root_fd, f->path, &st);
        *ret = NULL;
        if (!mime)
                return 0;
        *ret = json_pack("{s:o, s:o, s:I, s:s}", "name", text_json(base_name(f->path)), "path",
                         text_json(f->path), "size", (json_int_t)st.st_size, "mime", mime);
        return *ret ? 0 : -ENOMEM;
}

int cage_artifacts_collect(int root_fd, const struct cage_artifact_snapshot *before, json_t **ret,
                           struct cage_error *err)
{
        struct cage_artifact_snapshot *now = NULL;
        int r = cage_artifacts_snapshot(root_fd, &now, err);
        if (r < 0)
                return r;
        json_t *list = json_array();
        for (size_t i = 0; list && i < now->n && json_array_size(list) < CAGE_ARTIFACTS_MAX; i++) {
                json_t *a;
                if (!rec_changed(before, &now->v[i]))
                        continue;
                if (artifact_json(root_fd, &now->v[i], &a) < 0 ||
                    (a && json_array_append_new(list, a) < 0)) {
                        json_decref(list);
                        list = NULL;
                }
        }
        cage_artifact_snapshot_free(now);
        if (!list)
                return cage_fail(err, -ENOMEM, "artifacts");
        *ret = list;
        return 0;
}

/* --- copy_tree ------------------------------------------------------------ */

struct copy {
        uint64_t bytes_left;
        uint32_t entries_left;
        char *buf; /* COPY_CHUNK bytes */
};

struct copy_level {
        struct copy *c;
        unsigned depth;
        int dst_fd;
};

static int copy_visit(int dfd, const char *name, unsigned char type, void *userdata);

/* Copies the data of [from, to) of src to the same offsets of dst, charging
 * every byte to the copy's budget: -E2BIG past it. */
static int copy_range(struct copy *c, int src, int dst, uint64_t from, uint64_t to)
{
        if (lseek(src, (off_t)from, SEEK_SET) < 0 || lseek(dst, (off_t)from, SEEK_SET) < 0)
                return -errno;
        for (uint64_t left = to - from; left > 0;) {
                ssize_t n = read_retry(src, c->buf, left < COPY_CHUNK ? (size_t)left : COPY_CHUNK);
                if (n <= 0)
                        return (int)n; /* 0: the file shrank meanwhile */
                if ((uint64_t)n > c->bytes_left)
                        return -E2BIG;
                c->bytes_left -= (uint64_t)n;
                int r = write_all(dst, c->buf, (size_t)n);
                if (r < 0)
                        return r;
                left -= (uint64_t)n;
        }
        return 0;
}

/* Copies the data extents of src up to size (its size when the copy
 * started: a file that grows meanwhile cannot exceed it), leaving its holes
 * as holes in dst: a sparse file costs the host what it holds, not its
 * size. A filesystem without SEEK_DATA reports one extent, the whole file. */
static int copy_sparse(struct copy *c, int src, int dst, uint64_t size)
{
        for (uint64_t pos = 0; pos < size;) {
                off_t data = lseek(src, (off_t)pos, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : -errno; /* ENXIO: a hole to the end */
                if ((uint64_t)data >= size)
                        break;
                off_t hole = lseek(src, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                uint64_t end = (uint64_t)hole < size ? (uint64_t)hole : size;
                int r = copy_range(c, src, dst, (uint64_t)data, end);
                if (r < 0)
                        return r;
                pos = end;
        }
        return 0;
}

/* The bytes a file really holds: a sparse file's size is no measure. */
static uint64_t allocated_bytes(const struct stat *st)
{
        uint64_t blocks = (uint64_t)st->st_blocks * 512;
        return blocks < (uint64_t)st->st_size ? blocks : (uint64_t)st->st_size;
}

static int copy_file(const struct copy_level *level, int dfd, const char *name)
{
        struct stat st;
        _cleanup_close_ int src = open_child(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
        if (src < 0)
                return src == -ENOENT || src == -ELOOP ? 0 : src; /* replaced meanwhile */
        if (fstat(src, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return 0;
        if (allocated_bytes(&st) > level->c->bytes_left) /* early: copy_range checks again */
                return -E2BIG;
        _cleanup_close_ int dst =
                open_child(level->dst_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
        if (dst < 0)
                return dst;
        int r = copy_sparse(level->c, src, dst, (uint64_t)st.st_size);
        return r == 0 && ftruncate(dst, st.st_size) < 0 ? -errno : r; /* the trailing hole */
}

static int copy_dir(const struct copy_level *level, int dfd, const char *name)
{
        if (level->depth + 1 >= SCAN_DEPTH_MAX)
                return -E2BIG;
        int src = open_child(dfd, name, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
        if (src < 0)
                return src == -ENOENT || src == -ELOOP || src == -ENOTDIR ? 0 : src;
        if (mkdirat(level->dst_fd, name, 0755) < 0 && errno != EEXIST) {
                int r = -errno;
                close(src);
                return r;
        }
        _cleanup_close_ int dst = open_child(level->dst_fd, name, O_RDONLY | O_DIRECTORY, 0);
        if (dst < 0) {
                close(src);
                return dst;
        }
        struct copy_level sub = {level->c, level->depth + 1, dst};
        return for_each_entry(src, copy_visit, &sub);
}

static int copy_visit(int dfd, const char *name, unsigned char type, void *userdata)
{
        const struct copy_level *level = userdata;
        struct stat st;
        if (level->c->entries_left == 0)
                return -E2BIG;
        level->c->entries_left--;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (S_ISDIR(st.st_mode))
                return copy_dir(level, dfd, name);
        if (S_ISREG(st.st_mode))
                return copy_file(level, dfd, name);
        return 0; /* links, FIFOs, sockets, devices: skipped */
}

int cage_files_copy_tree(int src_root_fd, const char *src_path, int dst_dir_fd, uint64_t max_bytes,
                         uint32_t max_entries, uint64_t *ret_bytes, struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1];
        int r = cage_files_check_path(src_path, rel, err);
        if (r < 0)
                return r;
        int fd =
                open_in_root(src_root_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK, 0);
        if (fd < 0)
                return fail_path(err, fd, src_path, "cannot copy");
        _cleanup_free_ char *buf = malloc(COPY_CHUNK);
        if (!buf) {
                close(fd);
                return cage_fail(err, -ENOMEM, PATH_FMT ": cannot copy", src_path);
        }
        struct copy c = {max_bytes, max_entries, buf};
        struct copy_level top = {&c, 0, dst_dir_fd};
        r = for_each_entry(fd, copy_visit, &top);
        if (ret_bytes)
                *ret_bytes = max_bytes - c.bytes_left;
        if (r == -E2BIG)
                return cage_fail(err, r,
                                 PATH_FMT ": more than %" PRIu64 " bytes, %" PRIu32
                                          " entries or %d levels to copy",
                                 src_path, max_bytes, max_entries, SCAN_DEPTH_MAX);
        if (r < 0)
                return fail_path(err, r, src_path, "cannot copy");
        return 0;
}
