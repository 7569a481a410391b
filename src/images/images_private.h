/* Internals shared by the files of src/images/: digests and the blob
 * store (blobs.c), manifests and image configs (manifest.c), unpacking
 * (unpack.c), the registry client (registry.c) and committing an image
 * whose blobs are all present (store.c). Nothing here is public. */
#ifndef CODECAGE_IMAGES_PRIVATE_H
#define CODECAGE_IMAGES_PRIVATE_H

#include <limits.h>
#include <locale.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>

#include "images/images.h"

struct archive;

#define MANIFEST_MAX      (4 * 1024 * 1024) /* bytes of a manifest or an index */
#define IMAGE_CONFIG_MAX  (8 * 1024 * 1024) /* bytes of an image config */
#define INDEX_ENTRIES_MAX 256               /* manifests in an index */
#define IMAGE_PATH_MAX    4096              /* bytes of a layer entry's path */

/* Protections the unsafe debug build can switch off (CODECAGE_DEBUG_DISABLE
 * naming them), so the security suite shows each is what stops its attack. */
enum image_guard {
        GUARD_PATH,     /* "image-path": absolute and ".." entry names refused */
        GUARD_SYMLINK,  /* "image-symlink": no entry written through a symlink */
        GUARD_HARDLINK, /* "image-hardlink": hard links only within the layer */
        GUARD_DEVICES,  /* "image-devices": device nodes, FIFOs, sockets dropped */
        GUARD_SETUID,   /* "image-setuid": setuid/setgid bits stripped */
        GUARD_WHITEOUT, /* "image-whiteout": whiteout names checked */
        GUARD_BOUNDS,   /* "image-bounds": per-layer bytes and entries */
        GUARD_DIGEST,   /* "image-digest": blobs verified by digest and size */
        GUARD_ACCOUNTS, /* "image-accounts": an image's passwd/group read inside its root */
};
bool image_guard_on(enum image_guard guard);

/* ---- digests and blobs (blobs.c) ---- */

struct blob_writer {
        int fd;
        char tmp_name[96]; /* beneath <store>/tmp */
        EVP_MD_CTX *md;
        uint64_t size, max;
        char expect[CAGE_IMAGE_DIGEST_LEN + 1]; /* "" when the digest is not known */
        int64_t expect_size;                    /* -1 when not known */
};

int digest_buffer(const void *buf, size_t len, char ret[CAGE_IMAGE_DIGEST_LEN + 1]);
int blob_writer_open(struct cage_image_store *store, const char *expect, int64_t expect_size,
                     uint64_t max, struct blob_writer *w, struct cage_error *err);
int blob_writer_write(struct blob_writer *w, const void *buf, size_t len, struct cage_error *err);
/* Verifies, then moves the blob into the store; ret_digest may be NULL. */
int blob_writer_commit(struct cage_image_store *store, struct blob_writer *w,
                       char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
void blob_writer_abort(struct cage_image_store *store, struct blob_writer *w);
/* Copies fd into the store, verified against expect (may be NULL). */
int blob_put_fd(struct cage_image_store *store, int fd, const char *expect, int64_t expect_size,
                uint64_t max, char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
int blob_put_buffer(struct cage_image_store *store, const void *buf, size_t len,
                    char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
bool blob_exists(struct cage_image_store *store, const char *digest);
int blob_open(struct cage_image_store *store, const char *digest, struct cage_error *err);
/* Reads a blob of at most max bytes into memory (NUL-terminated). */
int blob_read(struct cage_image_store *store, const char *digest, size_t max, char **ret,
              size_t *ret_len, struct cage_error *err);
/* Takes <store>/tmp/<kind>-<hex>.lock exclusively, waiting (cancellably)
 * while another thread or process holds it. Returns the fd. */
int store_lock_named(struct cage_image_store *store, const char *kind, const char *digest,
                     const struct cage_image_op *op, struct cage_error *err);
bool op_cancelled(const struct cage_image_op *op);
void op_progress(const struct cage_image_op *op, uint64_t done, uint64_t total, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

/* ---- manifests and image configs (manifest.c, pure) ---- */

#define MEDIA_OCI_INDEX       "application/vnd.oci.image.index.v1+json"
#define MEDIA_OCI_MANIFEST    "application/vnd.oci.image.manifest.v1+json"
#define MEDIA_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define MEDIA_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MEDIA_OCI_CONFIG      "application/vnd.oci.image.config.v1+json"
#define MEDIA_OCI_LAYER       "application/vnd.oci.image.layer.v1.tar"
#define MEDIA_OCI_LAYER_GZ    "application/vnd.oci.image.layer.v1.tar+gzip"

struct descriptor {
        char media_type[128];
        char digest[CAGE_IMAGE_DIGEST_LEN + 1];
        uint64_t size;
        char os[32], arch[32], variant[32]; /* index entries only */
        char ref_name[CAGE_IMAGE_REF_MAX];  /* OCI layout annotation, or "" */
};

struct manifest {
        bool is_index;
        struct descriptor config;   /* manifests */
        struct descriptor *entries; /* layers of a manifest, manifests of an index */
        size_t n_entries;
};

struct image_config {
        char **env, **cmd, **entrypoint; /* NULL-terminated, never NULL */
        char *working_dir, *user;        /* never NULL */
        char os[32], arch[32], variant[32];
        char **diff_ids;
        size_t n_diff_ids;
};

/* Parses a manifest or an index; content_type (may be NULL) is the
 * registry's Content-Type, the body's mediaType wins when present. */
int manifest_parse(const char *buf, size_t len, const char *content_type, uint32_t max_layers,
                   struct manifest *ret, struct cage_error *err);
void manifest_done(struct manifest *m);
/* The entry of an index for os/arch/variant (variant "" matches any). */
int manifest_select(const struct manifest *index, const char *os, const char *arch,
                    const char *variant, struct descriptor *ret, struct cage_error *err);
int image_config_parse(const char *buf, size_t len, struct image_config *ret,
                       struct cage_error *err);
void image_config_done(struct image_config *c);
/* The {Env, WorkingDir, User, Cmd, Entrypoint} object of a config. */
json_t *image_config_json(const struct image_config *c);

/* ---- unpacking (unpack.c) ---- */

struct unpack_limits {
        uint64_t max_bytes;             /* file bytes (logical sizes) of one layer */
        uint64_t max_entries;           /* entries of one layer */
        uint64_t max_image_bytes;       /* file bytes of all the image's layers; 0 = none */
        uint64_t image_bytes;           /* file bytes of the layers applied before this one */
        const struct cage_image_op *op; /* its cancellation stops the work; may be NULL */
        uint64_t deadline_ms;           /* clock_mono_ms() the work stops at; 0 = none */
};

/* Applies one layer (a tar, compressed or not, read from blob_fd) to the
 * directory root_fd: whiteouts remove what lower layers made, entries are
 * created beneath root_fd and never through a symlink. *ret_bytes gets the
 * file bytes written. The op's cancellation (-ECANCELED) and the deadline
 * (-ETIMEDOUT) are checked before the first entry, then after every MiB of
 * data or 256 entries. The caller discards root_fd's tree on failure. */
int unpack_layer(int root_fd, int blob_fd, const struct unpack_limits *limits, uint64_t *ret_bytes,
                 struct cage_error *err);
/* Lets a reads the compressions images use (gzip, zstd, bzip2, xz), each
 * only when libarchive decodes it itself: a filter it would run an
 * external program for (lzop, lrzip, grzip, or any of these on a build
 * without its library) would feed a hostile registry's bytes to that
 * program as root, outside every sandbox. */
void unpack_support_filters(struct archive *a);
/* Turns a layer entry's name into a clean relative path ("./a//b/" ->
 * "a/b", "" for the root itself) in out (size bytes): -EPERM for an
 * absolute path or a ".." component, -ENAMETOOLONG past IMAGE_PATH_MAX
 * bytes or 256 components (the guards of image-path and
 * image-bounds; unpack.c). */
int unpack_clean_path(const char *name, char *out, size_t size, struct cage_error *err);
/* libarchive converts entry names through the calling thread's LC_CTYPE,
 * and image layers name their files in UTF-8 whatever locale codecage runs
 * in (often "C", where any non-ASCII name fails to convert): readers put
 * the thread in C.UTF-8 while they read (unpack.c). */
locale_t images_utf8_enter(void);
void images_utf8_leave(locale_t old);
/* Removes name (any type, recursively) from the directory dfd. */
int remove_tree_at(int dfd, const char *name);
/* The sha256 of the uncompressed tar in blob_fd (a layer's diff id), of
 * at most limits->max_bytes, stopped by the op's cancellation and the
 * deadline as unpack_layer is (-ECANCELED, -ETIMEDOUT). */
int layer_diff_id_within(int blob_fd, const struct unpack_limits *limits,
                         char ret[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
/* layer_diff_id_within with no bound but max_bytes. */
int layer_diff_id(int blob_fd, uint64_t max_bytes, char ret[CAGE_IMAGE_DIGEST_LEN + 1],
                  struct cage_error *err);

/* ---- the registry (registry.c) ---- */

/* Fetches ref's manifest (through an index, for the configured platform),
 * its config and layers into the blob store. *ret_manifest gets the
 * manifest's digest. */
int registry_pull(struct cage_image_store *store, const struct cage_image_ref *ref,
                  const struct cage_image_op *op, char ret_manifest[CAGE_IMAGE_DIGEST_LEN + 1],
                  struct cage_error *err);

/* ---- the store (store.c) ---- */

const struct cage_images_config *store_config(const struct cage_image_store *store);
int store_dir_fd(const struct cage_image_store *store);
/* Holds off blob collection while a pull or an import puts blobs in. */
int store_hold_blobs(struct cage_image_store *store, struct cage_error *err);
/* Removes blobs no image uses, unless a pull or import is in progress. */
void store_collect_blobs(struct cage_image_store *store);
/* Unpacks the image of a manifest whose blobs are present (once, however
 * many ask) and points refs (NULL-terminated, may be empty) at it. */
int store_commit(struct cage_image_store *store, const char *manifest_digest,
                 const char *const *refs, const struct cage_image_op *op,
                 char ret_id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
/* store_commit, stopped (-ETIMEDOUT, the image not made) once
 * clock_mono_ms() reaches deadline_ms (a pull's; 0 = none) while the
 * layers are hashed and unpacked. */
int store_commit_until(struct cage_image_store *store, const char *manifest_digest,
                       const char *const *refs, const struct cage_image_op *op,
                       uint64_t deadline_ms, char ret_id[CAGE_IMAGE_DIGEST_LEN + 1],
                       struct cage_error *err);

#endif
