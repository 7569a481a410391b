/* Applying one layer (a tar, gzip/zstd-compressed or not) to an image's
 * root directory, never trusting the archive (docs/IMAGES.md, "Security of
 * unpacking"). libarchive only reads: every file is created here, beneath
 * the root's fd, so nothing the archive says decides where a write lands.
 *
 *  - entry names are relative, without ".." (image-path); every parent is
 *    opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), so no
 *    entry is written through a symlink, whoever made it (image-symlink);
 *    the last component is created with O_EXCL / O_NOFOLLOW semantics after
 *    what was there is removed;
 *  - hard links name a regular file made earlier in the same layer
 *    (image-hardlink);
 *  - device nodes, FIFOs and sockets are dropped (image-devices); setuid
 *    and setgid bits are stripped and no extended attribute is restored, so
 *    no file capability lands (image-setuid); files belong to the store's
 *    owner, not to the uids the archive names;
 *  - whiteouts `.wh.NAME` remove NAME from lower layers, `.wh..wh..opq`
 *    empties its directory, however deep, of lower layers' entries (this
 *    layer's, before or after it, stay); a whiteout naming ".",
 *    ".." or nothing, and a directory named like a whiteout, are refused
 *    (image-whiteout); AUFS's bookkeeping directories at the top
 *    (.wh..wh.plnk, .wh..wh.orph) are skipped, as Docker skips them;
 *  - entries, file bytes (logical sizes: a sparse file counts in full) and
 *    path lengths are bounded per layer, file bytes per image too
 *    (image-bounds);
 *  - the op's cancellation and the pull's deadline are checked as the work
 *    goes, every MiB of data or 256 entries.
 * A refused entry fails the whole layer; the caller then discards the root
 * it was building, so the store never sees a half-applied image. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <locale.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define OPAQUE_MARKER  ".wh..wh..opq"
#define DEPTH_MAX      256                 /* path components of an entry */
#define PATH_BYTES_MAX (256 * 1024 * 1024) /* all entry names of a layer */
#define READ_BLOCK     (64 * 1024)
#define STOP_EVERY     (1024 * 1024) /* bytes of work between cancellation checks */
#define ENTRY_WORK     4096          /* what one entry counts for in them */

/* ---- the set of paths this layer made (whiteouts and hard links) ---- */

struct path_set {
        char **slots;
        size_t cap, n, bytes;
};

static uint64_t hash_path(const char *s)
{
        uint64_t h = 1469598103934665603ULL;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

static char **set_slot(const struct path_set *set, const char *s)
{
        size_t i = hash_path(s) & (set->cap - 1);
        while (set->slots[i] && strcmp(set->slots[i], s) != 0)
                i = (i + 1) & (set->cap - 1);
        return &set->slots[i];
}

static bool set_has(const struct path_set *set, const char *s)
{
        return set->cap && *set_slot(set, s);
}

static int set_grow(struct path_set *set)
{
        struct path_set bigger = {
                .cap = set->cap ? set->cap * 2 : 1024, .n = set->n, .bytes = set->bytes};
        bigger.slots = calloc(bigger.cap, sizeof(char *));
        if (!bigger.slots)
                return -ENOMEM;
        for (size_t i = 0; i < set->cap; i++)
                if (set->slots[i])
                        *set_slot(&bigger, set->slots[i]) = set->slots[i];
        free(set->slots);
        *set = bigger;
        return 0;
}

static int set_add(struct path_set *set, const char *s)
{
        if ((set->n + 1) * 2 > set->cap && set_grow(set) < 0)
                return -ENOMEM;
        char **slot = set_slot(set, s);
        if (*slot)
                return 0;
        if (!(*slot = strdup(s)))
                return -ENOMEM;
        set->n++;
        set->bytes += strlen(s) + 1;
        return 0;
}

static void set_free(struct path_set *set)
{
        for (size_t i = 0; i < set->cap; i++)
                free(set->slots[i]);
        free(set->slots);
}

/* ---- stopping: cancellation and the deadline ---- */

struct stop_check {
        const struct unpack_limits *limits;
        uint64_t work, next; /* bytes of work done, and when to look next */
};

/* Counts work done; every STOP_EVERY bytes of it (and at the first call)
 * sees whether the op was cancelled or the deadline passed. */
static int stop_check(struct stop_check *s, uint64_t work, struct cage_error *err)
{
        s->work += work;
        if (s->work < s->next)
                return 0;
        s->next = s->work + STOP_EVERY;
        if (op_cancelled(s->limits->op))
                return cage_fail_plain(err, -ECANCELED, "cancelled");
        if (s->limits->deadline_ms && clock_mono_ms() >= s->limits->deadline_ms)
                return cage_fail_plain(err, -ETIMEDOUT,
                                       "past the pull's deadline (pull_timeout_s)");
        return 0;
}

/* ---- resolving beneath the root ---- */

struct layer {
        int root_fd;
        struct archive *a;
        const struct unpack_limits *limits;
        uint64_t bytes, entries;
        struct path_set made;    /* entries of this layer */
        struct path_set parents; /* directories on the way to them */
        struct stop_check stop;
        struct cage_error *err;
};

static uint64_t resolve_flags(void)
{
        if (!image_guard_on(GUARD_SYMLINK))
                return 0;
        return RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
}

static int openat2_dir(int dfd, const char *path)
{
        return openat2_retry(dfd, path, O_PATH | O_DIRECTORY, 0, resolve_flags());
}

/* Opens the directory rel (a clean relative path, "" for the root) beneath
 * root_fd, creating missing components (mode 0755) on the way. */
static int open_dir_p(int root_fd, const char *rel)
{
        int fd = openat2_dir(root_fd, rel[0] ? rel : ".");
        if (fd != -ENOENT)
                return fd;
        _cleanup_close_ int cur = openat2_dir(root_fd, ".");
        char comp[NAME_MAX + 1];
        for (const char *p = rel; *p;) {
                size_t n = strcspn(p, "/");
                if (cur < 0 || n > NAME_MAX)
                        return cur < 0 ? cur : -ENAMETOOLONG;
                memcpy(comp, p, n);
                comp[n] = '\0';
                if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
                        return -errno;
                int next = openat2_dir(cur, comp);
                close(cur);
                cur = next;
                p += n + (p[n] == '/');
        }
        return TAKE_FD(cur);
}

/* ---- removing ---- */

static int remove_children(int dir_fd);

int remove_tree_at(int dfd, const char *name)
{
        if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return -errno;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = remove_children(fd);
        if (r < 0)
                return r;
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

static bool is_dot(const char *name)
{
        return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Removes the entries of dir_fd (takes it over). */
static int remove_children(int dir_fd)
{
        _cleanup_closedir_ DIR *d = fdopendir(dir_fd);
        if (!d) {
                close(dir_fd);
                return -errno;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (!is_dot(de->d_name)) {
                        int r = remove_tree_at(dirfd(d), de->d_name);
                        if (r < 0)
                                return r;
                }
        return 0;
}

/* An opaque directory's walk: path is where it is, beneath the root. */
struct opaque_walk {
        const struct path_set *made, *parents;
        char path[IMAGE_PATH_MAX + 1];
};

static int empty_of_lower(struct opaque_walk *w, int dir_fd);

/* What an opaque walk does with the entry name of dir_fd at w->path: a
 * directory this layer made or went through is kept and walked into, any
 * other entry this layer made is kept, the rest goes. */
static int empty_entry_of_lower(struct opaque_walk *w, int dir_fd, const char *name)
{
        bool made = set_has(w->made, w->path), through = set_has(w->parents, w->path);
        struct stat st;
        if (!made && !through)
                return remove_tree_at(dir_fd, name);
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return 0;
        int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : empty_of_lower(w, fd);
}

/* Removes, beneath dir_fd (taken over, at w->path), everything lower
 * layers made: every entry but this layer's and the directories on the way
 * to them, however deep. */
static int empty_of_lower(struct opaque_walk *w, int dir_fd)
{
        _cleanup_closedir_ DIR *d = fdopendir(dir_fd);
        if (!d) {
                close(dir_fd);
                return -errno;
        }
        size_t len = strlen(w->path);
        struct dirent *de;
        int r = 0;
        while (r >= 0 && (de = readdir(d))) {
                if (is_dot(de->d_name))
                        continue;
                if (len + 1 + strlen(de->d_name) >= sizeof(w->path)) {
                        r = remove_tree_at(dirfd(d), de->d_name); /* no entry's path */
                        continue;
                }
                snprintf(w->path + len, sizeof(w->path) - len, "%s%s", len ? "/" : "", de->d_name);
                r = empty_entry_of_lower(w, dirfd(d), de->d_name);
                w->path[len] = '\0';
        }
        return r;
}

/* ---- entry names ---- */

static int fail_name(struct cage_error *err, int code, const char *name, const char *why)
{
        return cage_fail_plain(err, code, "layer entry \"%.200s\": %s", name, why);
}

static int fail_entry(struct layer *l, int code, const char *name, const char *why)
{
        return fail_name(l->err, code, name, why);
}

/* Turns an archive name into a clean relative path ("./a//b/" -> "a/b"). */
int unpack_clean_path(const char *name, char *out, size_t size, struct cage_error *err)
{
        size_t depth = 0, o = 0;
        if (name[0] == '/')
                out[o++] = '/'; /* kept only when the path guard is off */
        if (strlen(name) > IMAGE_PATH_MAX && image_guard_on(GUARD_BOUNDS))
                return fail_name(err, -ENAMETOOLONG, "(long)", "path longer than 4096 bytes");
        if (name[0] == '/' && image_guard_on(GUARD_PATH))
                return fail_name(err, -EPERM, name, "absolute path refused");
        for (const char *p = name; *p;) {
                size_t n = strcspn(p, "/");
                bool dotdot = n == 2 && p[0] == '.' && p[1] == '.';
                if (dotdot && image_guard_on(GUARD_PATH))
                        return fail_name(err, -EPERM, name, "\"..\" refused");
                if (n > 0 && !(n == 1 && p[0] == '.')) {
                        if (o + n + 2 > size || ++depth > DEPTH_MAX)
                                return fail_name(err, -ENAMETOOLONG, name, "path too deep");
                        if (o && out[o - 1] != '/')
                                out[o++] = '/';
                        memcpy(out + o, p, n);
                        o += n;
                }
                p += n + (p[n] == '/');
        }
        out[o] = '\0';
        return 0;
}

static void split_parent(char *path, const char **ret_parent, const char **ret_base)
{
        char *slash = strrchr(path, '/');
        if (!slash) {
                *ret_parent = "";
                *ret_base = path;
                return;
        }
        *slash = '\0';
        *ret_parent = path;
        *ret_base = slash + 1;
}

/* ---- entries ---- */

static mode_t entry_mode(struct archive_entry *e)
{
        mode_t mode = archive_entry_perm(e) & 07777;
        if (image_guard_on(GUARD_SETUID))
                mode &= ~(mode_t)(S_ISUID | S_ISGID);
        return mode;
}

static void set_times(int parent_fd, const char *base, struct archive_entry *e)
{
        struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                                 {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
        utimensat(parent_fd, base, ts, AT_SYMLINK_NOFOLLOW);
}

static int write_data(struct layer *l, int fd, const char *name, int64_t size)
{
        const void *buf;
        size_t len;
        la_int64_t off;
        int r;
        while ((r = archive_read_data_block(l->a, &buf, &len, &off)) == ARCHIVE_OK) {
                if (off < 0 || (int64_t)len > size || off > size - (int64_t)len)
                        return fail_entry(l, -EBADMSG, name, "data beyond the entry's size");
                if ((r = stop_check(&l->stop, len, l->err)) < 0)
                        return r;
                for (size_t done = 0; done < len;) {
                        ssize_t n =
                                pwrite(fd, (const char *)buf + done, len - done, off + (off_t)done);
                        if (n < 0 && errno != EINTR)
                                return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
                        done += n > 0 ? (size_t)n : 0;
                }
        }
        if (r != ARCHIVE_EOF)
                return cage_fail_plain(l->err, -EBADMSG, "layer entry \"%.200s\": %s", name,
                                       archive_error_string(l->a));
        return ftruncate(fd, size) < 0 ? cage_fail(l->err, -errno, "layer entry \"%.200s\"", name)
                                       : 0;
}

/* Counts size bytes of files against the layer's and the image's bounds. */
static int count_bytes(struct layer *l, uint64_t size, const char *name)
{
        const struct unpack_limits *lim = l->limits;
        l->bytes += size;
        if (!image_guard_on(GUARD_BOUNDS))
                return 0;
        if (l->bytes > lim->max_bytes)
                return cage_fail_plain(l->err, -EFBIG,
                                       "layer: more than %llu bytes of files "
                                       "(at \"%.200s\")",
                                       (unsigned long long)lim->max_bytes, name);
        if (lim->max_image_bytes && lim->image_bytes + l->bytes > lim->max_image_bytes)
                return cage_fail_plain(l->err, -EFBIG,
                                       "image: more than %llu bytes of files in all its layers "
                                       "(max_image_mib; at \"%.200s\")",
                                       (unsigned long long)lim->max_image_bytes, name);
        return 0;
}

static int make_file(struct layer *l, struct archive_entry *e, int parent_fd, const char *base,
                     const char *name)
{
        int64_t size = archive_entry_size(e);
        if (size < 0)
                return fail_entry(l, -EBADMSG, name, "negative size");
        int r = count_bytes(l, (uint64_t)size, name);
        if (r < 0)
                return r;
        _cleanup_close_ int fd =
                openat(parent_fd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
        r = write_data(l, fd, name, size);
        if (r < 0)
                return r;
        return fchmod(fd, entry_mode(e)) < 0 ? -errno : 0;
}

static int make_hardlink(struct layer *l, const char *target, int parent_fd, const char *base,
                         const char *name)
{
        char clean[IMAGE_PATH_MAX + 1];
        if (!image_guard_on(GUARD_HARDLINK))
                return linkat(l->root_fd, target, parent_fd, base, 0) < 0 ? -errno : 0;
        int r = unpack_clean_path(target, clean, sizeof(clean), l->err);
        if (r < 0)
                return r;
        if (!clean[0] || !set_has(&l->made, clean))
                return fail_entry(l, -EPERM, name,
                                  "hard link to a file that is not earlier in the same layer");
        const char *tparent, *tbase;
        split_parent(clean, &tparent, &tbase);
        _cleanup_close_ int tfd = open_dir_p(l->root_fd, tparent);
        struct stat st;
        if (tfd < 0 || fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                return fail_entry(l, -EPERM, name, "hard link to something not a regular file");
        return linkat(tfd, tbase, parent_fd, base, 0) < 0 ? -errno : 0;
}

static int make_node(struct layer *l, struct archive_entry *e, int parent_fd, const char *base,
                     const char *name)
{
        mode_t type = archive_entry_filetype(e);
        if (image_guard_on(GUARD_DEVICES))
                return 0; /* dropped: a sandbox gets its own minimal /dev */
        if (mknodat(parent_fd, base, type | entry_mode(e), archive_entry_rdev(e)) < 0)
                return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
        return 0;
}

static int make_dir(struct layer *l, struct archive_entry *e, int parent_fd, const char *base,
                    const char *name)
{
        struct stat st;
        if (fstatat(parent_fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
                int r = remove_tree_at(parent_fd, base);
                if (r < 0)
                        return cage_fail(l->err, r, "layer entry \"%.200s\"", name);
        }
        if (mkdirat(parent_fd, base, 0700) < 0 && errno != EEXIST)
                return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
        _cleanup_close_ int fd =
                openat(parent_fd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* A store owned by a user other than root keeps its own access to
         * every directory, so later entries and removals are not refused. */
        mode_t mode = entry_mode(e) | (geteuid() != 0 ? S_IRWXU : 0);
        if (fd < 0 || fchmod(fd, mode) < 0)
                return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
        return 0;
}

static int make_entry(struct layer *l, struct archive_entry *e, int parent_fd, const char *base,
                      const char *name)
{
        mode_t type = archive_entry_filetype(e);
        const char *hardlink = archive_entry_hardlink(e);
        if (type == AE_IFDIR)
                return make_dir(l, e, parent_fd, base, name);
        int r = remove_tree_at(parent_fd, base);
        if (r < 0)
                return cage_fail(l->err, r, "layer entry \"%.200s\"", name);
        if (hardlink)
                return make_hardlink(l, hardlink, parent_fd, base, name);
        if (type == AE_IFREG)
                return make_file(l, e, parent_fd, base, name);
        if (type == AE_IFLNK) {
                const char *target = archive_entry_symlink(e);
                if (!target || strlen(target) > IMAGE_PATH_MAX)
                        return fail_entry(l, -EBADMSG, name, "symlink without a valid target");
                return symlinkat(target, parent_fd, base) < 0
                               ? cage_fail(l->err, -errno, "layer entry \"%.200s\"", name)
                               : 0;
        }
        if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFIFO || type == AE_IFSOCK)
                return make_node(l, e, parent_fd, base, name);
        return fail_entry(l, -EBADMSG, name, "unknown entry type");
}

static int apply_whiteout(struct layer *l, int parent_fd, const char *parent, const char *base,
                          const char *name)
{
        if (strcmp(base, OPAQUE_MARKER) == 0) {
                struct opaque_walk w = {.made = &l->made, .parents = &l->parents};
                snprintf(w.path, sizeof(w.path), "%s", parent);
                int dfd = openat(parent_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0)
                        return cage_fail(l->err, -errno, "layer entry \"%.200s\"", name);
                int r = empty_of_lower(&w, dfd);
                return r < 0 ? cage_fail(l->err, r, "layer entry \"%.200s\"", name) : 0;
        }
        const char *victim = base + 4;
        bool bad = !victim[0] || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0;
        if (bad && image_guard_on(GUARD_WHITEOUT))
                return fail_entry(l, -EPERM, name, "whiteout of \".\", \"..\" or nothing");
        char path[IMAGE_PATH_MAX + 2];
        snprintf(path, sizeof(path), "%s%s%s", parent, parent[0] ? "/" : "", victim);
        if (set_has(&l->made, path))
                return 0; /* a whiteout hides lower layers only */
        int r = remove_tree_at(parent_fd, victim);
        return r < 0 ? cage_fail(l->err, r, "layer entry \"%.200s\"", name) : 0;
}

/* AUFS's bookkeeping at the top of a layer (.wh..wh.plnk, .wh..wh.orph
 * and what is in them), which Docker skips when it applies a layer; the
 * opaque marker is not bookkeeping. */
static bool aufs_metadata(const char *path)
{
        return strncmp(path, ".wh..wh.", 8) == 0 && strcmp(path, OPAQUE_MARKER) != 0;
}

/* A directory component named like a whiteout: opening the entry's parents
 * would make a directory no image may hold (OCI whiteouts are files). */
static bool whiteout_in_parent(const char *parent)
{
        for (const char *p = parent; *p;) {
                if (strncmp(p, ".wh.", 4) == 0)
                        return true;
                const char *slash = strchr(p, '/');
                if (!slash)
                        break;
                p = slash + 1;
        }
        return false;
}

/* Notes the directories on the way to path, which this layer made or
 * went through (an opaque marker keeps them); stops at one already noted,
 * as its own parents are. */
static int add_parents(struct layer *l, const char *path)
{
        char dir[IMAGE_PATH_MAX + 1];
        snprintf(dir, sizeof(dir), "%s", path);
        for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
                *slash = '\0';
                if (set_has(&l->parents, dir))
                        return 0;
                if (set_add(&l->parents, dir) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int count_entry(struct layer *l)
{
        if (!image_guard_on(GUARD_BOUNDS))
                return 0;
        if (++l->entries > l->limits->max_entries)
                return cage_fail_plain(l->err, -E2BIG, "layer: more than %llu entries",
                                       (unsigned long long)l->limits->max_entries);
        if (l->made.bytes + l->parents.bytes > PATH_BYTES_MAX)
                return cage_fail_plain(l->err, -E2BIG, "layer: more than %d bytes of names",
                                       PATH_BYTES_MAX);
        return 0;
}

static int unpack_entry(struct layer *l, struct archive_entry *e)
{
        char path[IMAGE_PATH_MAX + 1], name[IMAGE_PATH_MAX + 1];
        int r = stop_check(&l->stop, ENTRY_WORK, l->err);
        if (r < 0 || (r = count_entry(l)) < 0 ||
            (r = unpack_clean_path(archive_entry_pathname(e), path, sizeof(path), l->err)) < 0)
                return r;
        if (!path[0])
                return 0; /* the root itself: its mode is the store's */
        if (aufs_metadata(path))
                return 0;
        memcpy(name, path, sizeof(name));
        const char *parent, *base;
        split_parent(path, &parent, &base);
        if (whiteout_in_parent(parent) && image_guard_on(GUARD_WHITEOUT))
                return fail_entry(l, -EPERM, name, "a whiteout name (\".wh.\") as a directory");
        _cleanup_close_ int parent_fd = open_dir_p(l->root_fd, parent);
        if (parent_fd < 0)
                return cage_fail(l->err, parent_fd, "layer entry \"%.200s\"%s", name,
                                 parent_fd == -ELOOP || parent_fd == -EXDEV
                                         ? ": its path goes through a symbolic link"
                                         : "");
        if (strncmp(base, ".wh.", 4) == 0)
                return apply_whiteout(l, parent_fd, parent, base, name);
        if ((r = make_entry(l, e, parent_fd, base, name)) < 0)
                return l->err->message[0] ? r
                                          : cage_fail(l->err, r, "layer entry \"%.200s\"", name);
        if (archive_entry_filetype(e) != AE_IFLNK)
                set_times(parent_fd, base, e);
        if (set_add(&l->made, name) < 0 || add_parents(l, name) < 0)
                return cage_fail(l->err, -ENOMEM, "layer");
        return 0;
}

/* Whether libarchive decodes with support itself (ARCHIVE_WARN: through an
 * external program), tried on an archive of its own. */
static bool decoded_inside(int (*support)(struct archive *))
{
        struct archive *a = archive_read_new();
        bool inside = a && support(a) == ARCHIVE_OK;
        archive_read_free(a);
        return inside;
}

void unpack_support_filters(struct archive *a)
{
        static int (*const filters[])(struct archive *) = {
                archive_read_support_filter_gzip,
                archive_read_support_filter_zstd,
                archive_read_support_filter_bzip2,
                archive_read_support_filter_xz,
        };
        for (size_t i = 0; i < ELEMENTSOF(filters); i++)
                if (decoded_inside(filters[i]))
                        (void)filters[i](a);
}

static struct archive *open_archive(int fd, bool raw, struct cage_error *err)
{
        struct archive *a = archive_read_new();
        if (!a)
                return NULL;
        unpack_support_filters(a);
        if (raw)
                archive_read_support_format_raw(a);
        else
                archive_read_support_format_tar(a);
        if (archive_read_open_fd(a, fd, READ_BLOCK) != ARCHIVE_OK) {
                cage_fail_plain(err, -EBADMSG, "layer: %s", archive_error_string(a));
                archive_read_free(a);
                return NULL;
        }
        return a;
}

static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_ctype;

static void utf8_init(void)
{
        utf8_ctype = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

locale_t images_utf8_enter(void)
{
        pthread_once(&utf8_once, utf8_init);
        return utf8_ctype ? uselocale(utf8_ctype) : (locale_t)0;
}

void images_utf8_leave(locale_t old)
{
        if (old)
                uselocale(old);
}

static int unpack_layer_utf8(int root_fd, int blob_fd, const struct unpack_limits *limits,
                             uint64_t *ret_bytes, struct cage_error *err);

int unpack_layer(int root_fd, int blob_fd, const struct unpack_limits *limits, uint64_t *ret_bytes,
                 struct cage_error *err)
{
        locale_t old = images_utf8_enter();
        int r = unpack_layer_utf8(root_fd, blob_fd, limits, ret_bytes, err);
        images_utf8_leave(old);
        return r;
}

static int unpack_layer_utf8(int root_fd, int blob_fd, const struct unpack_limits *limits,
                             uint64_t *ret_bytes, struct cage_error *err)
{
        struct layer l = {
                .root_fd = root_fd, .limits = limits, .stop = {.limits = limits}, .err = err};
        cage_error_clear(err);
        l.a = open_archive(blob_fd, false, err);
        if (!l.a)
                return err->code ? err->code : -ENOMEM;
        struct archive_entry *e;
        int r = 0, ar;
        while (r >= 0 && (ar = archive_read_next_header(l.a, &e)) == ARCHIVE_OK)
                r = unpack_entry(&l, e);
        if (r >= 0 && ar != ARCHIVE_EOF)
                r = cage_fail_plain(err, -EBADMSG, "layer: not a valid tar (%s)",
                                    archive_error_string(l.a));
        archive_read_free(l.a);
        set_free(&l.made);
        set_free(&l.parents);
        if (r >= 0 && ret_bytes)
                *ret_bytes = l.bytes;
        return r < 0 ? r : 0;
}

static int layer_diff_id_utf8(int blob_fd, const struct unpack_limits *limits,
                              char ret[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);

int layer_diff_id_within(int blob_fd, const struct unpack_limits *limits,
                         char ret[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        locale_t old = images_utf8_enter();
        int r = layer_diff_id_utf8(blob_fd, limits, ret, err);
        images_utf8_leave(old);
        return r;
}

int layer_diff_id(int blob_fd, uint64_t max_bytes, char ret[CAGE_IMAGE_DIGEST_LEN + 1],
                  struct cage_error *err)
{
        const struct unpack_limits limits = {.max_bytes = max_bytes};
        return layer_diff_id_within(blob_fd, &limits, ret, err);
}

static int layer_diff_id_utf8(int blob_fd, const struct unpack_limits *limits,
                              char ret[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        struct stop_check stop = {.limits = limits};
        int r = stop_check(&stop, 0, err);
        if (r < 0)
                return r;
        struct archive *a = open_archive(blob_fd, true, err);
        struct archive_entry *e;
        if (!a)
                return err && err->code ? err->code : -ENOMEM;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        r = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) ? 0 : -ENOMEM;
        uint64_t total = 0;
        if (r == 0 && archive_read_next_header(a, &e) != ARCHIVE_OK)
                r = cage_fail_plain(err, -EBADMSG, "layer: %s", archive_error_string(a));
        char buf[READ_BLOCK];
        la_ssize_t n = 0;
        while (r == 0 && (n = archive_read_data(a, buf, sizeof(buf))) > 0) {
                total += (uint64_t)n;
                if (total > limits->max_bytes)
                        r = cage_fail_plain(err, -EFBIG, "layer: more than %llu bytes",
                                            (unsigned long long)limits->max_bytes);
                else if ((r = stop_check(&stop, (uint64_t)n, err)) == 0)
                        EVP_DigestUpdate(md, buf, (size_t)n);
        }
        if (r == 0 && n < 0)
                r = cage_fail_plain(err, -EBADMSG, "layer: %s", archive_error_string(a));
        unsigned char d[32];
        unsigned int dl;
        if (r == 0 && EVP_DigestFinal_ex(md, d, &dl)) {
                memcpy(ret, "sha256:", 7);
                for (int i = 0; i < 32; i++)
                        snprintf(ret + 7 + 2 * i, 3, "%02x", d[i]);
        }
        EVP_MD_CTX_free(md);
        archive_read_free(a);
        return r;
}
