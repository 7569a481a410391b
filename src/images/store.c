/* The image store (docs/IMAGES.md, "Store layout"):
 *
 *   <dir>/lock                  flock: shared to read the index, exclusive to change it
 *   <dir>/index.json            {"refs": {REF: {"id", "manifest_digest"}}}
 *   <dir>/blobs/sha256/<hex>    verified blobs (blobs.c)
 *   <dir>/roots/<id-hex>/       an image's unpacked root, all layers applied
 *   <dir>/meta/<id-hex>.json    what the image is: layers, config, size
 *   <dir>/leases/<id-hex>       flock'ed (shared) by each user of the image;
 *                               its mtime is the image's last use
 *   <dir>/tmp/                  partial blobs, per-digest locks, work in progress
 *
 * An image is keyed by its config digest (its id). It becomes visible in
 * three atomic steps -- root renamed into place, meta renamed into place,
 * index rewritten and renamed -- so a crash at any point leaves either
 * nothing or leftovers that prune removes. Removal takes an exclusive,
 * non-blocking flock on the lease: an image a sandbox uses is never removed.
 * Pulls and imports hold gc.lock shared while they put blobs in; blob
 * collection runs only when it gets it exclusively. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define INDEX_MAX (64 * 1024 * 1024)
/* rm and prune read a larger index, so a store whose index outgrew
 * INDEX_MAX (before references were capped) can be repaired. */
#define INDEX_REPAIR_MAX (4 * INDEX_MAX)
#define META_MAX         (16 * 1024 * 1024)

struct cage_image_store {
        int dir_fd;
        char *dir;
        const struct cage_images_config *cfg;
};

const struct cage_images_config *store_config(const struct cage_image_store *store)
{
        return store->cfg;
}

int store_dir_fd(const struct cage_image_store *store)
{
        return store->dir_fd;
}

/* ---- small helpers ---- */

static int lock_file(struct cage_image_store *s, const char *rel, int op, struct cage_error *err)
{
        _cleanup_close_ int fd =
                openat(s->dir_fd, rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cage_fail(err, -errno, "image store %s", rel);
        while (flock(fd, op) < 0) {
                if (errno == EWOULDBLOCK)
                        return -EWOULDBLOCK;
                if (errno != EINTR)
                        return cage_fail(err, -errno, "image store %s", rel);
        }
        return TAKE_FD(fd);
}

/* Reads the whole of rel (at most max bytes) in one buffer and parses it:
 * jansson's json_loadfd() would make one read() per byte. */
static int load_json_at(int dfd, const char *rel, size_t max, json_t **ret, struct cage_error *err)
{
        _cleanup_close_ int fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || (size_t)st.st_size > max)
                return cage_fail_plain(err, -EFBIG, "image store %s: too large", rel);
        _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
        if (!buf)
                return cage_fail(err, -ENOMEM, "image store %s", rel);
        ssize_t n = read_full(fd, buf, (size_t)st.st_size);
        if (n != st.st_size)
                return cage_fail(err, n < 0 ? (int)n : -EIO, "reading image store %s", rel);
        json_error_t jerr;
        *ret = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
        return *ret ? 0 : cage_fail_plain(err, -EBADMSG, "image store %s: %s", rel, jerr.text);
}

/* Writes json to rel through a temporary file and a rename, in one write
 * (json_dumpfd() would make one per token). */
static int save_json_at(struct cage_image_store *s, const char *rel, json_t *json,
                        struct cage_error *err)
{
        char tmp[128];
        static unsigned counter;
        _cleanup_free_ char *text = json_dumps(json, JSON_COMPACT);
        if (!text)
                return cage_fail(err, -ENOMEM, "image store %s", rel);
        snprintf(tmp, sizeof(tmp), "tmp/json-%d-%u", getpid(),
                 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
        _cleanup_close_ int fd =
                openat(s->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cage_fail(err, -errno, "image store %s", rel);
        int r = write_all(fd, text, strlen(text));
        if (r == 0 && (fsync(fd) < 0 || renameat(s->dir_fd, tmp, s->dir_fd, rel) < 0))
                r = -errno;
        if (r < 0) {
                unlinkat(s->dir_fd, tmp, 0);
                return cage_fail(err, r, "image store %s", rel);
        }
        return 0;
}

/* The index, read whole if at most max bytes (INDEX_MAX, or
 * INDEX_REPAIR_MAX to shrink it). */
static int read_index(struct cage_image_store *s, size_t max, json_t **ret, struct cage_error *err)
{
        struct cage_error local = {};
        json_t *idx = NULL;
        if (!err)
                err = &local;
        int r = load_json_at(s->dir_fd, "index.json", max, &idx, err);
        if (r == -ENOENT) {
                *ret = json_pack("{s:{}}", "refs");
                return 0;
        }
        if (r < 0)
                return err->message[0] ? r : cage_fail(err, r, "image store index.json");
        if (!json_is_object(json_object_get(idx, "refs"))) {
                json_decref(idx);
                return cage_fail_plain(err, -EBADMSG, "image store index.json: no refs");
        }
        *ret = idx;
        return 0;
}

static void rel_of(char *buf, size_t size, const char *dir, const char *id, const char *suffix)
{
        snprintf(buf, size, "%s/%s%s", dir, id + 7, suffix);
}

static int read_meta(struct cage_image_store *s, const char *id, json_t **ret,
                     struct cage_error *err)
{
        struct cage_error local = {};
        char rel[128];
        if (!err)
                err = &local;
        rel_of(rel, sizeof(rel), "meta", id, ".json");
        int r = load_json_at(s->dir_fd, rel, META_MAX, ret, err);
        if (r == -ENOENT)
                return cage_fail_plain(err, -ENOENT, "image %s is not in the store", id);
        return r < 0 && !err->message[0] ? cage_fail(err, r, "image store %s", rel) : r;
}

/* ---- open / close ---- */

static int mkdir_p(const char *path, mode_t mode)
{
        char buf[PATH_MAX];
        if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
                return -ENAMETOOLONG;
        for (char *p = buf + 1;; p++) {
                if (*p == '/' || *p == '\0') {
                        char c = *p;
                        *p = '\0';
                        if (mkdir(buf, mode) < 0 && errno != EEXIST)
                                return -errno;
                        *p = c;
                        if (!c)
                                return 0;
                }
        }
}

int cage_image_store_open(const char *dir, const struct cage_images_config *cfg,
                          struct cage_image_store **ret, struct cage_error *err)
{
        static const char *const subdirs[] = {"blobs", "blobs/sha256", "roots",
                                              "meta",  "leases",       "tmp"};
        if (dir[0] != '/')
                return cage_fail_plain(err, -EINVAL, "image store: \"%s\" is not absolute", dir);
        int r = mkdir_p(dir, 0700);
        if (r < 0)
                return cage_fail(err, r, "image store %s", dir);
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return cage_fail(err, -errno, "image store %s", dir);
        for (size_t i = 0; i < ELEMENTSOF(subdirs); i++)
                if (mkdirat(fd, subdirs[i], 0700) < 0 && errno != EEXIST)
                        return cage_fail(err, -errno, "image store %s/%s", dir, subdirs[i]);
        struct cage_image_store *s = calloc(1, sizeof(*s));
        if (!s || !(s->dir = strdup(dir))) {
                free(s);
                return cage_fail(err, -ENOMEM, "image store");
        }
        s->dir_fd = TAKE_FD(fd);
        s->cfg = cfg;
        *ret = s;
        return 0;
}

struct cage_image_store *cage_image_store_close(struct cage_image_store *store)
{
        if (store) {
                close(store->dir_fd);
                free(store->dir);
                free(store);
        }
        return NULL;
}

/* ---- resolving a reference to an image id ---- */

/* The index key and id ref names: exact, else (for name@digest) any
 * reference of the same repository with that manifest digest. */
static int resolve_ref(json_t *refs, const char *ref, char *ret_key, size_t key_size,
                       char ret_id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        struct cage_image_ref r;
        int rc = cage_image_ref_parse(ref, &r, err);
        if (rc < 0)
                return rc;
        json_t *e = json_object_get(refs, r.full);
        const char *key = r.full;
        if (!e && r.digest[0]) {
                char repo[CAGE_IMAGE_REF_MAX];
                int n = snprintf(repo, sizeof(repo), "%s/%s", r.registry, r.repository);
                const char *k;
                json_t *v;
                json_object_foreach(refs, k, v)
                {
                        if (strncmp(k, repo, (size_t)n) == 0 && strchr(":@", k[n]) &&
                            strcmp(json_string_value(json_object_get(v, "manifest_digest")) ?: "",
                                   r.digest) == 0) {
                                e = v;
                                key = k;
                                break;
                        }
                }
        }
        const char *id = json_string_value(json_object_get(e, "id"));
        if (!id || !cage_image_digest_valid(id))
                return cage_fail_plain(err, -ENOENT, "no image %s in the store", r.full);
        snprintf(ret_key, key_size, "%s", key);
        memcpy(ret_id, id, CAGE_IMAGE_DIGEST_LEN + 1);
        return 0;
}

/* The image id ref names: an id itself, or a reference in refs; key gets
 * the index key ("" for an id). */
static int lookup(json_t *refs, const char *ref, char *key, size_t key_size,
                  char id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        key[0] = '\0';
        if (!cage_image_digest_valid(ref))
                return resolve_ref(refs, ref, key, key_size, id, err);
        memcpy(id, ref, CAGE_IMAGE_DIGEST_LEN + 1);
        return 0;
}

/* ---- get ---- */

static char **strv_from_json(json_t *arr)
{
        size_t n = json_array_size(arr);
        char **v = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; v && i < n; i++)
                v[i] = strdup(json_string_value(json_array_get(arr, i)) ?: "");
        return v;
}

static void strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

struct cage_image *cage_image_free(struct cage_image *image)
{
        if (!image)
                return NULL;
        if (image->lease_fd >= 0)
                close(image->lease_fd);
        free(image->rootfs);
        strv_free(image->env);
        strv_free(image->cmd);
        strv_free(image->entrypoint);
        free(image->working_dir);
        free(image->user);
        free(image);
        return NULL;
}

static int image_from_meta(struct cage_image_store *s, json_t *meta, const char *ref,
                           struct cage_image **ret, struct cage_error *err)
{
        struct cage_image *img = calloc(1, sizeof(*img));
        if (!img)
                return cage_fail(err, -ENOMEM, "image");
        img->lease_fd = -1;
        json_t *cfg = json_object_get(meta, "config");
        snprintf(img->ref, sizeof(img->ref), "%s", ref);
        snprintf(img->id, sizeof(img->id), "%s", json_string_value(json_object_get(meta, "id")));
        snprintf(img->manifest_digest, sizeof(img->manifest_digest), "%s",
                 json_string_value(json_object_get(meta, "manifest_digest")) ?: "");
        img->size = (uint64_t)json_integer_value(json_object_get(meta, "size"));
        img->env = strv_from_json(json_object_get(cfg, "Env"));
        img->cmd = strv_from_json(json_object_get(cfg, "Cmd"));
        img->entrypoint = strv_from_json(json_object_get(cfg, "Entrypoint"));
        img->working_dir = strdup(json_string_value(json_object_get(cfg, "WorkingDir")) ?: "");
        img->user = strdup(json_string_value(json_object_get(cfg, "User")) ?: "");
        if (asprintf(&img->rootfs, "%s/roots/%s", s->dir, img->id + 7) < 0)
                img->rootfs = NULL;
        if (!img->env || !img->cmd || !img->entrypoint || !img->working_dir || !img->user ||
            !img->rootfs) {
                cage_image_free(img);
                return cage_fail(err, -ENOMEM, "image");
        }
        *ret = img;
        return 0;
}

/* Takes a lease on id (shared flock) and marks its use. */
static int lease_take(struct cage_image_store *s, const char *id, struct cage_error *err)
{
        char rel[128];
        rel_of(rel, sizeof(rel), "leases", id, "");
        int fd = lock_file(s, rel, LOCK_SH, err);
        if (fd >= 0)
                futimens(fd, NULL);
        return fd;
}

static int get_locked(struct cage_image_store *s, const char *ref, struct cage_image **ret,
                      struct cage_error *err)
{
        char key[CAGE_IMAGE_REF_MAX], id[CAGE_IMAGE_DIGEST_LEN + 1];
        json_t *idx = NULL, *meta = NULL;
        int r = read_index(s, INDEX_MAX, &idx, err);
        if (r < 0)
                return r;
        r = lookup(json_object_get(idx, "refs"), ref, key, sizeof(key), id, err);
        json_decref(idx);
        if (r < 0 || (r = read_meta(s, id, &meta, err)) < 0)
                return r;
        struct cage_image *img = NULL;
        r = image_from_meta(s, meta, key, &img, err);
        json_decref(meta);
        if (r < 0)
                return r;
        if ((img->lease_fd = lease_take(s, id, err)) < 0) {
                r = img->lease_fd;
                cage_image_free(img);
                return r;
        }
        *ret = img;
        return 0;
}

int cage_image_get(struct cage_image_store *s, const char *ref, struct cage_image **ret,
                   struct cage_error *err)
{
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_SH, err);
        if (lock < 0)
                return lock;
        return get_locked(s, ref, ret, err);
}

/* ---- commit ---- */

int store_hold_blobs(struct cage_image_store *s, struct cage_error *err)
{
        return lock_file(s, "tmp/gc.lock", LOCK_SH, err);
}

struct commit {
        struct manifest manifest;
        struct image_config config;
        char id[CAGE_IMAGE_DIGEST_LEN + 1];
        const char *manifest_digest;
        uint64_t size;
        uint64_t deadline_ms; /* the pull's, or 0 */
};

static int load_image(struct cage_image_store *s, struct commit *c, struct cage_error *err)
{
        _cleanup_free_ char *m = NULL, *cfg = NULL;
        size_t m_len, cfg_len;
        int r = blob_read(s, c->manifest_digest, MANIFEST_MAX, &m, &m_len, err);
        if (r < 0 ||
            (r = manifest_parse(m, m_len, NULL, s->cfg->max_layers, &c->manifest, err)) < 0)
                return r;
        if (c->manifest.is_index)
                return cage_fail_plain(err, -EINVAL, "%s is an index, not a manifest",
                                       c->manifest_digest);
        if ((r = blob_read(s, c->manifest.config.digest, IMAGE_CONFIG_MAX, &cfg, &cfg_len, err)) <
                    0 ||
            (r = image_config_parse(cfg, cfg_len, &c->config, err)) < 0)
                return r;
        if (c->config.n_diff_ids != c->manifest.n_entries)
                return cage_fail_plain(err, -EBADMSG, "image %s: %zu layers but %zu diff_ids",
                                       c->manifest.config.digest, c->manifest.n_entries,
                                       c->config.n_diff_ids);
        memcpy(c->id, c->manifest.config.digest, sizeof(c->id));
        return 0;
}

/* A compressed layer's uncompressed content must be what the image's
 * config names (rootfs.diff_ids), as the manifest's digest pins only the
 * compressed bytes. Leaves the fd at its start. */
static int verify_diff_id(int fd, const char *digest, const char *diff_id,
                          const struct unpack_limits *limits, struct cage_error *err)
{
        char computed[CAGE_IMAGE_DIGEST_LEN + 1];
        if (strcmp(digest, diff_id) == 0 || !image_guard_on(GUARD_DIGEST))
                return 0;
        int r = layer_diff_id_within(fd, limits, computed, err);
        if (r == 0 && strcmp(computed, diff_id) != 0)
                r = cage_fail_plain(err, -EBADMSG,
                                    "layer %.19s uncompressed is %s, not the config's diff_id %s",
                                    digest, computed, diff_id);
        if (r == 0 && lseek(fd, 0, SEEK_SET) < 0)
                r = cage_fail(err, -errno, "layer %.19s", digest);
        return r;
}

static int unpack_all(struct cage_image_store *s, struct commit *c, int root_fd,
                      const struct cage_image_op *op, struct cage_error *err)
{
        struct unpack_limits limits = {.max_bytes = s->cfg->max_layer_bytes,
                                       .max_entries = s->cfg->max_layer_entries,
                                       .max_image_bytes = s->cfg->max_image_bytes,
                                       .op = op,
                                       .deadline_ms = c->deadline_ms};
        for (size_t i = 0; i < c->manifest.n_entries; i++) {
                const struct descriptor *d = &c->manifest.entries[i];
                if (op_cancelled(op))
                        return cage_fail_plain(err, -ECANCELED, "cancelled");
                op_progress(op, i, c->manifest.n_entries, "unpacking layer %zu/%zu (%.19s)", i + 1,
                            c->manifest.n_entries, d->digest);
                _cleanup_close_ int fd = blob_open(s, d->digest, err);
                uint64_t bytes = 0;
                if (fd < 0)
                        return fd;
                limits.image_bytes = c->size;
                int r = verify_diff_id(fd, d->digest, c->config.diff_ids[i], &limits, err);
                if (r == 0)
                        r = unpack_layer(root_fd, fd, &limits, &bytes, err);
                if (r < 0) {
                        char inner[CAGE_ERROR_MESSAGE_MAX];
                        snprintf(inner, sizeof(inner), "%s", err->message);
                        return cage_fail_plain(err, r, "layer %zu (%.19s): %s", i + 1, d->digest,
                                               inner);
                }
                c->size += bytes;
        }
        return 0;
}

static json_t *meta_json(const struct commit *c)
{
        json_t *layers = json_array(), *blobs = json_array();
        json_array_append_new(blobs, json_string(c->manifest_digest));
        json_array_append_new(blobs, json_string(c->id));
        for (size_t i = 0; i < c->manifest.n_entries; i++) {
                json_array_append_new(layers, json_string(c->manifest.entries[i].digest));
                json_array_append_new(blobs, json_string(c->manifest.entries[i].digest));
        }
        char platform[100];
        snprintf(platform, sizeof(platform), "%s/%s%s%s", c->config.os, c->config.arch,
                 c->config.variant[0] ? "/" : "", c->config.variant);
        return json_pack("{s:s,s:s,s:o,s:o,s:o,s:s,s:I,s:I}", "id", c->id, "manifest_digest",
                         c->manifest_digest, "layers", layers, "blobs", blobs, "config",
                         image_config_json(&c->config), "platform", platform, "size",
                         (json_int_t)c->size, "created", (json_int_t)clock_wall_ms());
}

/* The files codecage binds over in every sandbox (its hosts, resolv.conf
 * and hostname) need something to be bound over, and a sandbox's root is
 * read-only: an image without them gets empty ones, as container runtimes
 * do. An etc that is no plain directory is left alone. */
static void add_cover_points(int root_fd)
{
        static const char *const names[] = {"hosts", "resolv.conf", "hostname"};
        if (mkdirat(root_fd, "etc", 0755) < 0 && errno != EEXIST)
                return;
        _cleanup_close_ int etc =
                openat(root_fd, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        for (size_t i = 0; etc >= 0 && i < sizeof(names) / sizeof(names[0]); i++) {
                int fd = openat(etc, names[i], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                0644);
                if (fd >= 0)
                        close(fd);
        }
}

/* Unpacks into roots/.new-..., then renames the root and writes the meta. */
static int build_image(struct cage_image_store *s, struct commit *c, const struct cage_image_op *op,
                       struct cage_error *err)
{
        char work[128], final[128], meta_rel[128];
        snprintf(work, sizeof(work), "roots/.new-%.12s-%d-%lld", c->id + 7, getpid(),
                 (long long)clock_mono_ns());
        rel_of(final, sizeof(final), "roots", c->id, "");
        rel_of(meta_rel, sizeof(meta_rel), "meta", c->id, ".json");
        if (mkdirat(s->dir_fd, work, 0755) < 0)
                return cage_fail(err, -errno, "image store %s", work);
        int root_fd = openat(s->dir_fd, work, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        int r = root_fd < 0 ? cage_fail(err, -errno, "image store %s", work)
                            : unpack_all(s, c, root_fd, op, err);
        if (r >= 0)
                add_cover_points(root_fd);
        if (root_fd >= 0)
                close(root_fd);
        if (r >= 0) {
                remove_tree_at(s->dir_fd, final); /* a leftover of a crash */
                if (renameat(s->dir_fd, work, s->dir_fd, final) < 0)
                        r = cage_fail(err, -errno, "image store %s", final);
        }
        if (r < 0) {
                remove_tree_at(s->dir_fd, work);
                return r;
        }
        json_t *meta = meta_json(c);
        r = meta ? save_json_at(s, meta_rel, meta, err) : cage_fail(err, -ENOMEM, "meta");
        json_decref(meta);
        return r;
}

/* Whether adding refs to the index's refs keeps it within max_refs. */
static int check_ref_cap(struct cage_image_store *s, json_t *all, const char *const *refs,
                         struct cage_error *err)
{
        size_t total = json_object_size(all);
        for (size_t i = 0; refs[i]; i++)
                if (!json_object_get(all, refs[i]))
                        total++;
        if (total <= s->cfg->max_refs)
                return 0;
        return cage_fail_plain(err, -ENOSPC,
                               "image store: %zu references, more than images.max_refs (%u); "
                               "remove some with `codecage image rm`",
                               total, s->cfg->max_refs);
}

static int point_refs(struct cage_image_store *s, const char *const *refs, const char *id,
                      const char *manifest_digest, struct cage_error *err)
{
        if (!refs || !refs[0])
                return 0;
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_EX, err);
        json_t *idx = NULL;
        int r = lock < 0 ? lock : read_index(s, INDEX_MAX, &idx, err);
        if (r < 0)
                return r;
        json_t *all = json_object_get(idx, "refs");
        r = check_ref_cap(s, all, refs, err);
        for (size_t i = 0; r >= 0 && refs[i]; i++)
                json_object_set_new(
                        all, refs[i],
                        json_pack("{s:s,s:s}", "id", id, "manifest_digest", manifest_digest));
        if (r >= 0)
                r = save_json_at(s, "index.json", idx, err);
        json_decref(idx);
        return r;
}

/* Whether refs would fit in the index now; checked before an image is
 * built so a refused commit leaves nothing (point_refs checks again). */
static int refs_fit(struct cage_image_store *s, const char *const *refs, struct cage_error *err)
{
        if (!refs || !refs[0])
                return 0;
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_SH, err);
        json_t *idx = NULL;
        int r = lock < 0 ? lock : read_index(s, INDEX_MAX, &idx, err);
        if (r >= 0)
                r = check_ref_cap(s, json_object_get(idx, "refs"), refs, err);
        json_decref(idx);
        return r;
}

int store_commit(struct cage_image_store *s, const char *manifest_digest, const char *const *refs,
                 const struct cage_image_op *op, char ret_id[CAGE_IMAGE_DIGEST_LEN + 1],
                 struct cage_error *err)
{
        return store_commit_until(s, manifest_digest, refs, op, 0, ret_id, err);
}

int store_commit_until(struct cage_image_store *s, const char *manifest_digest,
                       const char *const *refs, const struct cage_image_op *op,
                       uint64_t deadline_ms, char ret_id[CAGE_IMAGE_DIGEST_LEN + 1],
                       struct cage_error *err)
{
        struct commit c = {.manifest_digest = manifest_digest, .deadline_ms = deadline_ms};
        int r = load_image(s, &c, err);
        if (r >= 0)
                r = refs_fit(s, refs, err);
        if (r >= 0) {
                char meta_rel[128];
                struct stat st;
                rel_of(meta_rel, sizeof(meta_rel), "meta", c.id, ".json");
                _cleanup_close_ int lock = store_lock_named(s, "image", c.id, op, err);
                if (lock < 0)
                        r = lock;
                else if (fstatat(s->dir_fd, meta_rel, &st, 0) < 0)
                        r = build_image(s, &c, op, err);
        }
        if (r >= 0)
                r = point_refs(s, refs, c.id, manifest_digest, err);
        if (r >= 0 && ret_id)
                memcpy(ret_id, c.id, sizeof(c.id));
        manifest_done(&c.manifest);
        image_config_done(&c.config);
        return r;
}

/* ---- list / inspect ---- */

static bool names_id(json_t *entry, const char *id)
{
        const char *v = json_string_value(json_object_get(entry, "id"));
        return v && strcmp(v, id) == 0;
}

/* The references (a JSON array) that name image id. */
static json_t *names_of(json_t *refs, const char *id)
{
        json_t *names = json_array(), *v;
        const char *k;
        json_object_foreach(refs, k, v)
        {
                if (names_id(v, id))
                        json_array_append_new(names, json_string(k));
        }
        return names;
}

/* Whether someone holds a lease on id. Opens without creating the lease
 * file: its mtime is the image's last use, which a look must not change. */
static bool lease_busy(struct cage_image_store *s, const char *id)
{
        char rel[128];
        rel_of(rel, sizeof(rel), "leases", id, "");
        _cleanup_close_ int fd = openat(s->dir_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return false;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0)
                return errno == EWOULDBLOCK;
        return false;
}

static json_int_t last_used(struct cage_image_store *s, const char *id, json_t *meta)
{
        char rel[128];
        struct stat st;
        rel_of(rel, sizeof(rel), "leases", id, "");
        if (fstatat(s->dir_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return (json_int_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        return json_integer_value(json_object_get(meta, "created"));
}

static json_t *list_entry(struct cage_image_store *s, const char *ref, json_t *meta)
{
        const char *id = json_string_value(json_object_get(meta, "id"));
        return json_pack("{s:s?,s:s,s:O,s:O,s:O,s:I,s:b}", "ref", ref, "id", id, "manifest_digest",
                         json_object_get(meta, "manifest_digest"), "size",
                         json_object_get(meta, "size"), "created", json_object_get(meta, "created"),
                         "last_used", last_used(s, id, meta), "in_use", lease_busy(s, id));
}

/* Calls fn for each image in meta/ (id, its meta). */
static int each_meta(struct cage_image_store *s, int (*fn)(void *, const char *, json_t *),
                     void *data, struct cage_error *err)
{
        int fd = openat(s->dir_fd, "meta", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d)
                return cage_fail(err, -errno, "image store meta");
        struct dirent *de;
        while ((de = readdir(d))) {
                char id[CAGE_IMAGE_DIGEST_LEN + 1];
                size_t n = strlen(de->d_name);
                if (n != 69 || strcmp(de->d_name + 64, ".json") != 0)
                        continue;
                snprintf(id, sizeof(id), "sha256:%.64s", de->d_name);
                json_t *meta = NULL;
                if (!cage_image_digest_valid(id) || read_meta(s, id, &meta, err) < 0)
                        continue;
                int r = fn(data, id, meta);
                json_decref(meta);
                if (r < 0)
                        return r;
        }
        return 0;
}

struct list_ctx {
        struct cage_image_store *s;
        json_t *refs, *out;
};

static int list_one(void *data, const char *id, json_t *meta)
{
        struct list_ctx *l = data;
        json_t *names = names_of(l->refs, id), *v;
        size_t i;
        json_array_foreach(names, i, v)
                json_array_append_new(l->out, list_entry(l->s, json_string_value(v), meta));
        if (json_array_size(names) == 0)
                json_array_append_new(l->out, list_entry(l->s, NULL, meta));
        json_decref(names);
        return 0;
}

int cage_image_list(struct cage_image_store *s, json_t **ret, struct cage_error *err)
{
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_SH, err);
        json_t *idx = NULL;
        int r = lock < 0 ? lock : read_index(s, INDEX_MAX, &idx, err);
        if (r < 0)
                return r;
        struct list_ctx l = {.s = s, .refs = json_object_get(idx, "refs"), .out = json_array()};
        r = each_meta(s, list_one, &l, err);
        json_decref(idx);
        if (r < 0) {
                json_decref(l.out);
                return r;
        }
        *ret = l.out;
        return 0;
}

/* With the store's lock held: the index, the key ref has in it (or "" for
 * an id), the image's id and its meta. On failure nothing is returned. */
static int find_image(struct cage_image_store *s, const char *ref, size_t index_max,
                      json_t **ret_idx, char key[CAGE_IMAGE_REF_MAX],
                      char id[CAGE_IMAGE_DIGEST_LEN + 1], json_t **ret_meta, struct cage_error *err)
{
        json_t *idx = NULL;
        int r = read_index(s, index_max, &idx, err);
        if (r >= 0)
                r = lookup(json_object_get(idx, "refs"), ref, key, CAGE_IMAGE_REF_MAX, id, err);
        if (r >= 0)
                r = read_meta(s, id, ret_meta, err);
        if (r < 0) {
                json_decref(idx);
                return r;
        }
        *ret_idx = idx;
        return 0;
}

int cage_image_inspect(struct cage_image_store *s, const char *ref, json_t **ret,
                       struct cage_error *err)
{
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_SH, err);
        char key[CAGE_IMAGE_REF_MAX] = "", id[CAGE_IMAGE_DIGEST_LEN + 1];
        json_t *idx = NULL, *meta = NULL;
        int r = lock < 0 ? lock : find_image(s, ref, INDEX_MAX, &idx, key, id, &meta, err);
        if (r < 0)
                return r;
        json_t *refs = json_object_get(idx, "refs");
        json_t *out = list_entry(s, key[0] ? key : NULL, meta), *names = names_of(refs, id);
        char *root = NULL;
        if (asprintf(&root, "%s/roots/%s", s->dir, id + 7) < 0)
                root = NULL;
        json_object_set_new(out, "refs", names);
        json_object_set(out, "layers", json_object_get(meta, "layers"));
        json_object_set(out, "config", json_object_get(meta, "config"));
        json_object_set(out, "platform", json_object_get(meta, "platform"));
        json_object_set_new(out, "rootfs", root ? json_string(root) : json_null());
        free(root);
        json_decref(meta);
        json_decref(idx);
        *ret = out;
        return 0;
}

/* ---- removing ---- */

/* Deletes image id's root, meta and lease; the caller holds the store lock
 * and the lease exclusively. The root is renamed away first so a reader
 * never sees a half-deleted root. */
static void delete_image(struct cage_image_store *s, const char *id)
{
        char rel[128], trash[128];
        rel_of(rel, sizeof(rel), "meta", id, ".json");
        unlinkat(s->dir_fd, rel, 0);
        rel_of(rel, sizeof(rel), "roots", id, "");
        snprintf(trash, sizeof(trash), "tmp/trash-%.12s-%lld", id + 7, (long long)clock_mono_ns());
        if (renameat(s->dir_fd, rel, s->dir_fd, trash) == 0)
                remove_tree_at(s->dir_fd, trash);
        rel_of(rel, sizeof(rel), "leases", id, "");
        unlinkat(s->dir_fd, rel, 0);
}

static bool id_named(json_t *refs, const char *id)
{
        json_t *names = names_of(refs, id);
        bool named = json_array_size(names) > 0;
        json_decref(names);
        return named;
}

/* Deletes every reference to id from refs. */
static void unname(json_t *refs, const char *id)
{
        json_t *names = names_of(refs, id), *v;
        size_t i;
        json_array_foreach(names, i, v) json_object_del(refs, json_string_value(v));
        json_decref(names);
}

/* Removes the image id unless it is in use (-EBUSY). */
static int drop_image(struct cage_image_store *s, const char *id, struct cage_error *err)
{
        char rel[128];
        rel_of(rel, sizeof(rel), "leases", id, "");
        _cleanup_close_ int lease = lock_file(s, rel, LOCK_EX | LOCK_NB, err);
        if (lease == -EWOULDBLOCK)
                return cage_fail_plain(err, -EBUSY, "image %s is in use", id);
        if (lease < 0)
                return lease;
        delete_image(s, id);
        return 0;
}

static int collect_blobs(struct cage_image_store *s, struct cage_error *err);

int cage_image_remove(struct cage_image_store *s, const char *ref,
                      char ret_id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_EX, err);
        char key[CAGE_IMAGE_REF_MAX] = "", id[CAGE_IMAGE_DIGEST_LEN + 1];
        json_t *idx = NULL, *meta = NULL;
        int r = lock < 0 ? lock : find_image(s, ref, INDEX_REPAIR_MAX, &idx, key, id, &meta, err);
        if (r < 0)
                return r;
        json_decref(meta);
        bool by_id = cage_image_digest_valid(ref);
        json_t *kept = json_deep_copy(json_object_get(idx, "refs"));
        if (r >= 0 && by_id) {
                unname(kept, id);
        } else if (r >= 0) {
                json_object_del(kept, key);
        }
        if (r >= 0 && !id_named(kept, id))
                r = drop_image(s, id, err);
        if (r >= 0) {
                json_object_set(idx, "refs", kept);
                r = save_json_at(s, "index.json", idx, err);
        }
        json_decref(kept);
        json_decref(idx);
        if (r >= 0 && ret_id)
                memcpy(ret_id, id, sizeof(id));
        if (r >= 0)
                collect_blobs(s, NULL);
        return r;
}

/* ---- prune ---- */

struct blob_set {
        json_t *used; /* digest -> true */
        uint64_t images_size;
};

static int note_blobs(void *data, const char *id, json_t *meta)
{
        struct blob_set *b = data;
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(meta, "blobs"), i, v)
                json_object_set_new(b->used, json_string_value(v) ?: "", json_true());
        b->images_size += (uint64_t)json_integer_value(json_object_get(meta, "size"));
        (void)id;
        return 0;
}

/* Bytes of blobs (removing those no image uses when collect). */
static int scan_blobs(struct cage_image_store *s, json_t *used, bool collect, uint64_t *ret_size,
                      uint64_t *ret_freed)
{
        int fd = openat(s->dir_fd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                char digest[CAGE_IMAGE_DIGEST_LEN + 8];
                struct stat st;
                if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, 0) < 0)
                        continue;
                snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
                if (collect && !json_object_get(used, digest) &&
                    unlinkat(dirfd(d), de->d_name, 0) == 0) {
                        *ret_freed += (uint64_t)st.st_size;
                        continue;
                }
                *ret_size += (uint64_t)st.st_size;
        }
        return 0;
}

/* Removes blobs no image uses; the caller holds gc.lock exclusively. */
static int collect_blobs_locked(struct cage_image_store *s, struct cage_error *err)
{
        struct blob_set b = {.used = json_object()};
        uint64_t size = 0, freed = 0;
        int r = each_meta(s, note_blobs, &b, err);
        if (r >= 0)
                r = scan_blobs(s, b.used, true, &size, &freed);
        json_decref(b.used);
        return r;
}

/* Removes blobs no image uses, when no pull or import is putting blobs in. */
static int collect_blobs(struct cage_image_store *s, struct cage_error *err)
{
        _cleanup_close_ int gc = lock_file(s, "tmp/gc.lock", LOCK_EX | LOCK_NB, err);
        return gc < 0 ? gc : collect_blobs_locked(s, err);
}

void store_collect_blobs(struct cage_image_store *s)
{
        collect_blobs(s, NULL);
}

int cage_image_store_size(struct cage_image_store *s, uint64_t *ret, struct cage_error *err)
{
        struct blob_set b = {.used = json_object()};
        uint64_t size = 0, freed = 0;
        int r = each_meta(s, note_blobs, &b, err);
        if (r >= 0)
                r = scan_blobs(s, b.used, false, &size, &freed);
        json_decref(b.used);
        if (r < 0)
                return cage_fail(err, r, "image store size");
        *ret = size + b.images_size;
        return 0;
}

/* Removes leftovers of interrupted work: roots without meta, partial blobs,
 * trash, work directories. Only with gc.lock held exclusively. */
static void sweep_leftovers(struct cage_image_store *s)
{
        static const char *const dirs[] = {"roots", "tmp"};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                int fd = openat(s->dir_fd, dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                _cleanup_closedir_ DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                struct dirent *de;
                while (d && (de = readdir(d))) {
                        char meta[128], id[CAGE_IMAGE_DIGEST_LEN + 8];
                        struct stat st;
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (i == 1 && strstr(de->d_name, ".lock"))
                                continue;
                        snprintf(id, sizeof(id), "sha256:%.64s", de->d_name);
                        rel_of(meta, sizeof(meta), "meta", id, ".json");
                        if (i == 0 && cage_image_digest_valid(id) &&
                            fstatat(s->dir_fd, meta, &st, 0) == 0)
                                continue;
                        remove_tree_at(dirfd(d), de->d_name);
                }
        }
}

struct lru_ctx {
        struct cage_image_store *s;
        json_t *refs;
        char id[CAGE_IMAGE_DIGEST_LEN + 1];
        json_int_t oldest;
        bool unnamed_only;
};

static int pick_victim(void *data, const char *id, json_t *meta)
{
        struct lru_ctx *l = data;
        json_int_t used = last_used(l->s, id, meta);
        if ((l->unnamed_only && id_named(l->refs, id)) || lease_busy(l->s, id))
                return 0;
        if (!l->id[0] || used < l->oldest) {
                memcpy(l->id, id, sizeof(l->id));
                l->oldest = used;
        }
        return 0;
}

/* Removes one image chosen by pick_victim (and its refs); false when none. */
static bool prune_one(struct cage_image_store *s, json_t *refs, bool unnamed_only, json_t *removed)
{
        struct lru_ctx l = {.s = s, .refs = refs, .unnamed_only = unnamed_only};
        if (each_meta(s, pick_victim, &l, NULL) < 0 || !l.id[0] || drop_image(s, l.id, NULL) < 0)
                return false;
        unname(refs, l.id);
        json_array_append_new(removed, json_string(l.id));
        return true;
}

static int prune_locked(struct cage_image_store *s, json_t *idx, json_t *removed,
                        uint64_t *ret_size, struct cage_error *err)
{
        json_t *refs = json_object_get(idx, "refs");
        while (prune_one(s, refs, true, removed))
                ;
        uint64_t size = 0;
        int r = save_json_at(s, "index.json", idx, err);
        if (r < 0 || (r = collect_blobs_locked(s, err)) < 0 ||
            (r = cage_image_store_size(s, &size, err)) < 0)
                return r;
        while (s->cfg->max_store_bytes && size > s->cfg->max_store_bytes &&
               prune_one(s, refs, false, removed)) {
                if ((r = save_json_at(s, "index.json", idx, err)) < 0 ||
                    (r = collect_blobs_locked(s, err)) < 0 ||
                    (r = cage_image_store_size(s, &size, err)) < 0)
                        return r;
        }
        *ret_size = size;
        return 0;
}

int cage_image_prune(struct cage_image_store *s, json_t **ret_report, struct cage_error *err)
{
        _cleanup_close_ int lock = lock_file(s, "lock", LOCK_EX, err);
        if (lock < 0)
                return lock;
        _cleanup_close_ int gc = lock_file(s, "tmp/gc.lock", LOCK_EX | LOCK_NB, err);
        if (gc == -EWOULDBLOCK)
                return cage_fail_plain(err, -EBUSY,
                                       "a pull or an import is in progress; prune "
                                       "again when it is done");
        if (gc < 0)
                return gc;
        uint64_t before = 0, after = 0;
        json_t *idx = NULL, *removed = json_array();
        int r = cage_image_store_size(s, &before, err);
        if (r >= 0)
                r = read_index(s, INDEX_REPAIR_MAX, &idx, err);
        if (r >= 0) {
                sweep_leftovers(s);
                r = prune_locked(s, idx, removed, &after, err);
        }
        json_decref(idx);
        if (r < 0) {
                json_decref(removed);
                return r;
        }
        json_t *report = json_pack("{s:o,s:I,s:I}", "removed", removed, "bytes_freed",
                                   (json_int_t)(before > after ? before - after : 0), "size",
                                   (json_int_t)after);
        if (ret_report)
                *ret_report = report;
        else
                json_decref(report);
        return 0;
}

/* ---- ensure / pull ---- */

int cage_image_pull(struct cage_image_store *s, const char *ref, const struct cage_image_op *op,
                    struct cage_image **ret, struct cage_error *err)
{
        struct cage_image_ref r;
        char manifest[CAGE_IMAGE_DIGEST_LEN + 1], id[CAGE_IMAGE_DIGEST_LEN + 1];
        int rc = cage_image_ref_parse(ref, &r, err);
        if (rc < 0)
                return rc;
        if (!cage_images_config_allows(s->cfg, r.full))
                return cage_fail_plain(err, -EPERM, "image %s is not allowed by images.allow",
                                       r.full);
        if (s->cfg->pull_policy == CAGE_PULL_NEVER)
                return cage_fail_plain(err, -EPERM,
                                       "image %s: pulling is off (pull_policy "
                                       "\"never\")",
                                       r.full);
        const char *const refs[] = {r.full, NULL};
        {
                /* registry_pull's own deadline starts at the same time */
                uint64_t deadline_ms = clock_mono_ms() + s->cfg->pull_timeout_s * 1000ULL;
                _cleanup_close_ int hold = store_hold_blobs(s, err);
                if (hold < 0)
                        return hold;
                rc = registry_pull(s, &r, op, manifest, err);
                if (rc >= 0)
                        rc = store_commit_until(s, manifest, refs, op, deadline_ms, id, err);
        }
        if (rc < 0) {
                store_collect_blobs(s); /* a failed pull leaves no blob nothing uses */
                return rc;
        }
        if (s->cfg->max_store_bytes) {
                struct cage_image *pin = NULL;
                /* Leased while pruning, so the budget never takes what we just pulled. */
                if (cage_image_get(s, r.full, &pin, NULL) == 0)
                        cage_image_prune(s, NULL, NULL);
                cage_image_free(pin);
        }
        op_progress(op, 1, 1, "pulled %s (%s)", r.full, id);
        return ret ? cage_image_get(s, r.full, ret, err) : 0;
}

int cage_image_ensure(struct cage_image_store *s, const char *ref, const struct cage_image_op *op,
                      struct cage_image **ret, struct cage_error *err)
{
        struct cage_image_ref r;
        if (!cage_image_digest_valid(ref)) {
                int rc = cage_image_ref_parse(ref, &r, err);
                if (rc < 0)
                        return rc;
                if (!cage_images_config_allows(s->cfg, r.full))
                        return cage_fail_plain(err, -EPERM,
                                               "image %s is not allowed by images.allow", r.full);
        }
        int rc = cage_image_get(s, ref, ret, err);
        if (rc != -ENOENT || cage_image_digest_valid(ref))
                return rc;
        if (s->cfg->pull_policy == CAGE_PULL_NEVER)
                return cage_fail_plain(err, -ENOENT,
                                       "image %s is not in the store and "
                                       "pull_policy is \"never\"",
                                       r.full);
        cage_error_clear(err);
        return cage_image_pull(s, ref, op, ret, err);
}
