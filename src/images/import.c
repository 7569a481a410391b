/* Importing images (docs/IMAGES.md, "Importing"): a `docker save` archive
 * (manifest.json, a config and layer tars) or an OCI image layout
 * (oci-layout, index.json, blobs/sha256/...), given as a tar (compressed
 * or not) or as a directory.
 *
 * Nothing in the archive is trusted. A tar is read as a stream and each of
 * its regular files goes straight into the blob store, named by the digest
 * computed while it is copied (bounded in count and size); its names are
 * only keys of a table, never paths. A directory is read with openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), regular files only. OCI blobs
 * must hash to the digest in their name and descriptor; docker layers must
 * hash (uncompressed) to the config's diff_ids. A docker image gets an OCI
 * manifest written for it, so every image in the store has one. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define MEMBERS_MAX     10000 /* regular files in an archive */
#define MEMBER_NAME_MAX 1024
#define IMAGES_MAX      64  /* images in one archive */
#define REPO_TAGS_MAX   256 /* names of one image in an archive */
#define READ_BLOCK      (128 * 1024)

struct source {
        struct cage_image_store *store;
        int dir_fd;     /* a directory source, or -1 */
        json_t *staged; /* a tar source: member name -> digest */
        const struct cage_image_op *op;
};

/* ---- reading a tar into the blob store ---- */

static int stage_member(struct source *src, struct archive *a, struct archive_entry *e,
                        struct cage_error *err)
{
        const struct cage_images_config *cfg = store_config(src->store);
        const char *name = archive_entry_pathname(e);
        while (name && strncmp(name, "./", 2) == 0)
                name += 2;
        if (!name || strlen(name) > MEMBER_NAME_MAX)
                return cage_fail_plain(err, -EBADMSG, "archive: a member name is too long");
        if (json_object_size(src->staged) >= MEMBERS_MAX)
                return cage_fail_plain(err, -E2BIG, "archive: more than %d files", MEMBERS_MAX);
        struct blob_writer w;
        int r = blob_writer_open(src->store, NULL, -1, cfg->max_layer_bytes, &w, err);
        if (r < 0)
                return r;
        op_progress(src->op, 0, (uint64_t)archive_entry_size(e), "reading %.200s", name);
        char buf[READ_BLOCK];
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof(buf))) > 0)
                if ((r = blob_writer_write(&w, buf, (size_t)n, err)) < 0)
                        break;
        if (r >= 0 && n < 0)
                r = cage_fail_plain(err, -EBADMSG, "archive: %s", archive_error_string(a));
        if (r < 0) {
                blob_writer_abort(src->store, &w);
                return r;
        }
        char digest[CAGE_IMAGE_DIGEST_LEN + 1];
        if ((r = blob_writer_commit(src->store, &w, digest, err)) < 0)
                return r;
        json_object_set_new(src->staged, name, json_string(digest));
        return 0;
}

static int stage_tar_utf8(struct source *src, int fd, struct cage_error *err);

/* Names in image archives are UTF-8 whatever the locale (images_private.h). */
static int stage_tar(struct source *src, int fd, struct cage_error *err)
{
        locale_t old = images_utf8_enter();
        int r = stage_tar_utf8(src, fd, err);
        images_utf8_leave(old);
        return r;
}

static int stage_tar_utf8(struct source *src, int fd, struct cage_error *err)
{
        struct archive *a = archive_read_new();
        struct archive_entry *e;
        if (!a)
                return cage_fail(err, -ENOMEM, "archive");
        unpack_support_filters(a);
        archive_read_support_format_tar(a);
        int r = 0, ar = archive_read_open_fd(a, fd, READ_BLOCK);
        while (ar == ARCHIVE_OK && r >= 0 && (ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
                if (op_cancelled(src->op))
                        r = cage_fail_plain(err, -ECANCELED, "cancelled");
                else if (archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e))
                        r = stage_member(src, a, e, err);
        }
        if (r >= 0 && ar != ARCHIVE_EOF)
                r = cage_fail_plain(err, -EBADMSG, "archive: not a tar (%s)",
                                    archive_error_string(a));
        archive_read_free(a);
        return r;
}

/* ---- members as blobs ---- */

static int open_member(struct source *src, const char *name, struct cage_error *err)
{
        struct stat st;
        int fd = openat2_retry(src->dir_fd, name, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0,
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        if (fd < 0)
                return cage_fail(err, fd, "image layout: %.200s", name);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return cage_fail_plain(err, -EINVAL, "image layout: %.200s is not a regular file",
                                       name);
        }
        return fd;
}

/* Puts member name into the blob store, checked against expect (may be
 * NULL) when its digest is known, and gives its digest. */
static int member_blob(struct source *src, const char *name, const char *expect,
                       int64_t expect_size, char ret[CAGE_IMAGE_DIGEST_LEN + 1],
                       struct cage_error *err)
{
        if (src->staged) {
                const char *d = json_string_value(json_object_get(src->staged, name));
                if (!d)
                        return cage_fail_plain(err, -ENOENT, "archive: no member %.200s", name);
                if (expect && strcmp(d, expect) != 0 && image_guard_on(GUARD_DIGEST))
                        return cage_fail_plain(err, -EBADMSG,
                                               "archive: %.200s has digest %s, "
                                               "not %s",
                                               name, d, expect);
                snprintf(ret, CAGE_IMAGE_DIGEST_LEN + 1, "%s", d);
                return 0;
        }
        _cleanup_close_ int fd = open_member(src, name, err);
        if (fd < 0)
                return fd;
        return blob_put_fd(src->store, fd, expect, expect_size,
                           store_config(src->store)->max_layer_bytes, ret, err);
}

static int member_read(struct source *src, const char *name, size_t max, char **ret,
                       size_t *ret_len, struct cage_error *err)
{
        char digest[CAGE_IMAGE_DIGEST_LEN + 1];
        int r = member_blob(src, name, NULL, -1, digest, err);
        return r < 0 ? r : blob_read(src->store, digest, max, ret, ret_len, err);
}

static bool member_exists(struct source *src, const char *name)
{
        if (src->staged)
                return json_object_get(src->staged, name) != NULL;
        struct stat st;
        return fstatat(src->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- naming ---- */

struct import {
        struct source src;
        const char *tag;
        json_t *out;
};

/* Commits manifest under names (n of them, NULL and "" skipped; --tag's
 * instead when given), all in one update of the store's index. */
static int commit_named(struct import *im, const char *manifest, const char *const *names, size_t n,
                        struct cage_error *err)
{
        if (im->tag) {
                names = &im->tag;
                n = 1;
        }
        _cleanup_free_ struct cage_image_ref *parsed = calloc(n + 1, sizeof(*parsed));
        _cleanup_free_ const char **refs = calloc(n + 1, sizeof(*refs));
        size_t k = 0;
        if (!parsed || !refs)
                return cage_fail(err, -ENOMEM, "import");
        for (size_t i = 0; i < n; i++) {
                if (!names[i] || !names[i][0])
                        continue;
                int r = cage_image_ref_parse(names[i], &parsed[k], err);
                if (r < 0)
                        return r;
                refs[k] = parsed[k].full;
                k++;
        }
        char id[CAGE_IMAGE_DIGEST_LEN + 1];
        int r = store_commit(im->src.store, manifest, refs, im->src.op, id, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < (k ? k : 1); i++)
                json_array_append_new(im->out, json_pack("{s:s,s:s?,s:s}", "id", id, "ref", refs[i],
                                                         "manifest_digest", manifest));
        return 0;
}

/* ---- OCI layout ---- */

static int blob_member(struct source *src, const struct descriptor *d, struct cage_error *err)
{
        char name[96], got[CAGE_IMAGE_DIGEST_LEN + 1];
        snprintf(name, sizeof(name), "blobs/sha256/%s", d->digest + 7);
        return member_blob(src, name, d->digest, (int64_t)d->size, got, err);
}

/* The manifest (or, from index.json, an index) d names, committed under
 * name. As for a pull (registry.c), an index may hold manifests only: an
 * index inside an index inside index.json is refused, so a chain of them
 * cannot run the importer's stack out. */
static int oci_manifest(struct import *im, const struct descriptor *d, const char *name,
                        bool index_allowed, struct cage_error *err)
{
        const struct cage_images_config *cfg = store_config(im->src.store);
        _cleanup_free_ char *buf = NULL;
        size_t len;
        struct manifest m = {};
        int r = blob_member(&im->src, d, err);
        if (r < 0 || (r = blob_read(im->src.store, d->digest, MANIFEST_MAX, &buf, &len, err)) < 0 ||
            (r = manifest_parse(buf, len, d->media_type, cfg->max_layers, &m, err)) < 0)
                return r;
        if (m.is_index) {
                struct descriptor pick;
                r = index_allowed ? manifest_select(&m, cfg->platform_os, cfg->platform_arch,
                                                    cfg->platform_variant, &pick, err)
                                  : cage_fail_plain(err, -EBADMSG,
                                                    "image layout: %s is an index inside an index",
                                                    d->digest);
                manifest_done(&m);
                if (r < 0)
                        return r;
                pick.media_type[0] = '\0';
                return oci_manifest(im, &pick, name, false, err);
        }
        r = blob_member(&im->src, &m.config, err);
        for (size_t i = 0; r >= 0 && i < m.n_entries; i++)
                r = blob_member(&im->src, &m.entries[i], err);
        manifest_done(&m);
        return r < 0 ? r : commit_named(im, d->digest, &name, name ? 1 : 0, err);
}

static int import_oci(struct import *im, struct cage_error *err)
{
        _cleanup_free_ char *layout = NULL, *index = NULL;
        size_t len;
        struct manifest idx = {};
        int r = member_read(&im->src, "oci-layout", 4096, &layout, &len, err);
        if (r < 0)
                return r;
        if (!strstr(layout, "\"imageLayoutVersion\""))
                return cage_fail_plain(err, -EBADMSG,
                                       "image layout: oci-layout has no "
                                       "imageLayoutVersion");
        if ((r = member_read(&im->src, "index.json", MANIFEST_MAX, &index, &len, err)) < 0 ||
            (r = manifest_parse(index, len, MEDIA_OCI_INDEX, 0, &idx, err)) < 0)
                return r;
        if (!idx.is_index || idx.n_entries == 0 || (im->tag && idx.n_entries > 1))
                r = cage_fail_plain(err, -EINVAL, "image layout: index.json lists %zu images%s",
                                    idx.n_entries, im->tag ? "; --tag needs exactly one" : "");
        for (size_t i = 0; r >= 0 && i < idx.n_entries; i++) {
                const char *name = idx.entries[i].ref_name;
                /* A bare tag ("latest") names no repository: only --tag names it. */
                r = oci_manifest(im, &idx.entries[i], strchr(name, '/') ? name : NULL, true, err);
        }
        manifest_done(&idx);
        return r;
}

/* ---- docker save ---- */

static int check_diff_id(struct import *im, const char *digest, const char *diff_id,
                         struct cage_error *err)
{
        char computed[CAGE_IMAGE_DIGEST_LEN + 1];
        if (strcmp(digest, diff_id) == 0 || !image_guard_on(GUARD_DIGEST))
                return 0;
        _cleanup_close_ int fd = blob_open(im->src.store, digest, err);
        int r = fd < 0 ? fd
                       : layer_diff_id(fd, store_config(im->src.store)->max_layer_bytes, computed,
                                       err);
        if (r < 0)
                return r;
        if (strcmp(computed, diff_id) != 0)
                return cage_fail_plain(err, -EBADMSG,
                                       "archive: layer %s does not match the "
                                       "config's diff_id %s",
                                       computed, diff_id);
        return 0;
}

static json_t *descriptor_json(const char *type, const char *digest, struct cage_image_store *s)
{
        struct stat st = {};
        _cleanup_close_ int fd = blob_open(s, digest, NULL);
        if (fd >= 0)
                fstat(fd, &st);
        return json_pack("{s:s,s:s,s:I}", "mediaType", type, "digest", digest, "size",
                         (json_int_t)st.st_size);
}

/* Writes an OCI manifest for a docker image; gives its digest. */
static int docker_manifest(struct import *im, const char *config, json_t *layers,
                           char ret[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        json_t *m = json_pack(
                "{s:i,s:s,s:o,s:o}", "schemaVersion", 2, "mediaType", MEDIA_OCI_MANIFEST, "config",
                descriptor_json(MEDIA_OCI_CONFIG, config, im->src.store), "layers", json_array());
        size_t i;
        json_t *v;
        json_array_foreach(layers, i, v) json_array_append_new(
                json_object_get(m, "layers"),
                descriptor_json(MEDIA_OCI_LAYER, json_string_value(v), im->src.store));
        _cleanup_free_ char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
        json_decref(m);
        if (!text)
                return cage_fail(err, -ENOMEM, "manifest");
        return blob_put_buffer(im->src.store, text, strlen(text), ret, err);
}

static int docker_layers(struct import *im, json_t *names, const struct image_config *cfg,
                         json_t *digests, struct cage_error *err)
{
        if (!json_is_array(names) || json_array_size(names) != cfg->n_diff_ids ||
            json_array_size(names) > store_config(im->src.store)->max_layers)
                return cage_fail_plain(err, -EBADMSG,
                                       "archive: manifest.json's Layers do not "
                                       "match the config's diff_ids");
        for (size_t i = 0; i < json_array_size(names); i++) {
                const char *name = json_string_value(json_array_get(names, i));
                char digest[CAGE_IMAGE_DIGEST_LEN + 1];
                int r = name ? member_blob(&im->src, name, NULL, -1, digest, err)
                             : cage_fail_plain(err, -EBADMSG, "archive: a layer is not a name");
                if (r < 0 || (r = check_diff_id(im, digest, cfg->diff_ids[i], err)) < 0)
                        return r;
                json_array_append_new(digests, json_string(digest));
        }
        return 0;
}

/* Commits a docker image under its RepoTags, at most REPO_TAGS_MAX. */
static int commit_tags(struct import *im, const char *manifest, json_t *tags,
                       struct cage_error *err)
{
        size_t n = json_array_size(tags);
        if (n > REPO_TAGS_MAX && !im->tag)
                return cage_fail_plain(err, -E2BIG,
                                       "archive: an image has %zu RepoTags, more than %d", n,
                                       REPO_TAGS_MAX);
        const char *names[REPO_TAGS_MAX];
        for (size_t i = 0; i < n && i < REPO_TAGS_MAX; i++)
                names[i] = json_string_value(json_array_get(tags, i));
        return commit_named(im, manifest, names, n < REPO_TAGS_MAX ? n : REPO_TAGS_MAX, err);
}

static int docker_image(struct import *im, json_t *entry, struct cage_error *err)
{
        const char *config_name = json_string_value(json_object_get(entry, "Config"));
        char config[CAGE_IMAGE_DIGEST_LEN + 1], manifest[CAGE_IMAGE_DIGEST_LEN + 1];
        _cleanup_free_ char *buf = NULL;
        size_t len;
        struct image_config cfg = {};
        if (!config_name)
                return cage_fail_plain(err, -EBADMSG, "archive: manifest.json has no Config");
        int r = member_blob(&im->src, config_name, NULL, -1, config, err);
        if (r < 0 ||
            (r = blob_read(im->src.store, config, IMAGE_CONFIG_MAX, &buf, &len, err)) < 0 ||
            (r = image_config_parse(buf, len, &cfg, err)) < 0)
                return r;
        json_t *digests = json_array();
        r = docker_layers(im, json_object_get(entry, "Layers"), &cfg, digests, err);
        image_config_done(&cfg);
        if (r >= 0)
                r = docker_manifest(im, config, digests, manifest, err);
        json_decref(digests);
        return r < 0 ? r : commit_tags(im, manifest, json_object_get(entry, "RepoTags"), err);
}

static int import_docker(struct import *im, struct cage_error *err)
{
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = member_read(&im->src, "manifest.json", MANIFEST_MAX, &text, &len, err);
        if (r < 0)
                return r;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
        size_t n = json_array_size(root);
        if (!json_is_array(root) || n == 0 || n > IMAGES_MAX || (im->tag && n > 1))
                r = cage_fail_plain(err, -EBADMSG,
                                    "archive: manifest.json must list 1..%d "
                                    "images%s",
                                    IMAGES_MAX, im->tag ? " (exactly one with --tag)" : "");
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = docker_image(im, json_array_get(root, i), err);
        json_decref(root);
        return r;
}

/* ---- entry point ---- */

static int import_source(struct import *im, const char *path, struct cage_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "import %s", path);
        if (S_ISDIR(st.st_mode)) {
                im->src.dir_fd = fd;
        } else if (S_ISREG(st.st_mode)) {
                im->src.staged = json_object();
                int r = stage_tar(&im->src, fd, err);
                if (r < 0)
                        return r;
        } else {
                return cage_fail_plain(err, -EINVAL, "import %s: not a file or a directory", path);
        }
        if (member_exists(&im->src, "oci-layout") && member_exists(&im->src, "index.json"))
                return import_oci(im, err);
        if (member_exists(&im->src, "manifest.json"))
                return import_docker(im, err);
        return cage_fail_plain(err, -EINVAL,
                               "import %s: neither a docker save archive "
                               "(manifest.json) nor an OCI layout (oci-layout)",
                               path);
}

int cage_image_import(struct cage_image_store *store, const char *path, const char *tag,
                      const struct cage_image_op *op, json_t **ret_ids, struct cage_error *err)
{
        struct import im = {
                .src = {.store = store, .dir_fd = -1, .op = op}, .tag = tag, .out = json_array()};
        int r;
        {
                _cleanup_close_ int hold = store_hold_blobs(store, err);
                r = hold < 0 ? hold : import_source(&im, path, err);
        }
        json_decref(im.src.staged);
        /* The archive's own files (manifest.json, ...) and, after a failure,
         * everything this import put in: no image uses them. */
        store_collect_blobs(store);
        if (r < 0) {
                json_decref(im.out);
                return r;
        }
        if (ret_ids)
                *ret_ids = im.out;
        else
                json_decref(im.out);
        return 0;
}
