/* The image store (docs/IMAGES.md): OCI images by reference, pulled from a
 * registry or imported from a `docker save` archive or an OCI layout, kept
 * in a content-addressed store under <data_dir>/images and handed to
 * sandboxes as a complete, read-only root directory.
 *
 * Everything here is thread-safe and safe to use from several processes on
 * the same store at once (the CLI while `codecage serve` runs): mutations
 * take a flock on the store, a blob or an image is downloaded and unpacked
 * once even when several threads or processes want it, and an image in use
 * (a lease: a shared flock held by its user) is never removed or pruned.
 * Every size a registry or an archive controls is bounded. Functions
 * return >= 0 or -errno with a message in err; the library never prints. */
#ifndef CODECAGE_IMAGES_IMAGES_H
#define CODECAGE_IMAGES_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "codecage/codecage.h"

#define CAGE_IMAGE_REF_MAX       512 /* bytes of a normalised reference */
#define CAGE_IMAGE_DIGEST_LEN    71  /* "sha256:" + 64 hex digits */
#define CAGE_IMAGES_PATTERNS_MAX 256 /* entries of images.allow, plain_http, ... */

/* ---- references (reference.c) ------------------------------------------- */

/* A parsed, normalised reference: docker.io/library/python:3.12-slim.
 * `registry` is the host[:port] as written ("docker.io" for Docker Hub);
 * `tag` is "latest" when neither a tag nor a digest was given; `digest` is
 * "" when absent. */
struct cage_image_ref {
        char registry[256];
        char repository[256];
        char tag[129];
        char digest[CAGE_IMAGE_DIGEST_LEN + 1];
        char full[CAGE_IMAGE_REF_MAX]; /* the normalised text */
};

/* Parses a reference with Docker's normalisation. -EINVAL with a message
 * naming the fault otherwise. */
int cage_image_ref_parse(const char *s, struct cage_image_ref *ret, struct cage_error *err);
/* True for "sha256:" followed by 64 lowercase hex digits. */
bool cage_image_digest_valid(const char *s);
/* Shell-style match of a normalised reference against an `allow` pattern
 * such as docker.io/library/ followed by '*'; '*' matches any run of
 * characters, including '/'. A pattern without a tag or digest part also
 * matches every tag and digest of the repositories it names. */
bool cage_image_ref_matches(const char *pattern, const char *ref);

/* ---- configuration (images_config.c) ------------------------------------ */

enum cage_pull_policy {
        CAGE_PULL_MISSING, /* pull a reference that is not in the store (default) */
        CAGE_PULL_NEVER,   /* never reach a registry (offline hosts) */
};

struct cage_registry_credential {
        char *registry; /* host[:port], "docker.io" for Docker Hub */
        char *username;
        char *password; /* never log it */
};

struct cage_registry_mirrors {
        char *registry;
        char **mirrors; /* host[:port] tried in order before the registry */
        size_t n_mirrors;
};

struct http_pin;

/* Where a registry request may connect (docs/IMAGES.md, "Private
 * addresses"): resolves host and checks every address against the server's
 * network policy, filling ret (util/http_pin.h) with the checked ones;
 * operator_listed: the host is named in this section (plain_http, mirrors,
 * credentials) and may be private. -EPERM or -EHOSTUNREACH with a sentence
 * in reason otherwise. */
typedef int (*cage_registry_resolve_fn)(const void *policy, const char *host, long port,
                                        bool operator_listed, struct http_pin *ret, char *reason,
                                        size_t reason_len);

/* The server config's `images` section (docs/IMAGES.md). Immutable once
 * parsed; any thread may read it. */
struct cage_images_config {
        char **allow; /* reference patterns; none = any reference */
        size_t n_allow;
        struct cage_registry_credential *credentials;
        size_t n_credentials;
        char *docker_config; /* a Docker config.json whose `auths` were read, or NULL */
        struct cage_registry_mirrors *mirrors;
        size_t n_mirrors;
        char **plain_http; /* registries reached over plain HTTP */
        size_t n_plain_http;
        char platform_os[32], platform_arch[32], platform_variant[32];
        enum cage_pull_policy pull_policy;
        uint64_t max_store_bytes;   /* budget of the store; 0 = none */
        uint64_t max_layer_bytes;   /* per layer: download size and unpacked size */
        uint64_t max_image_bytes;   /* per image: unpacked size of all its layers */
        uint64_t max_layer_entries; /* per layer */
        uint32_t max_layers;        /* per image */
        uint32_t max_refs;          /* references in the store's index */
        uint32_t pull_timeout_s;    /* of one whole pull */
        /* Set by the server config (not parsed): the network policy that
         * registry requests follow. NULL: no registry is ever reached. */
        cage_registry_resolve_fn resolve;
        const void *resolve_policy;
};

/* Fills *ret from a JSON object (the `images` section), or with every
 * default when section is NULL. Unknown keys are errors; messages name the
 * key ("images.platform: ..."). Reads docker_config when given. On failure
 * *ret is left empty (nothing to free). */
int cage_images_config_parse(const json_t *section, struct cage_images_config *ret,
                             struct cage_error *err);
/* Frees what parse allocated (passwords are wiped). Accepts a zeroed struct. */
void cage_images_config_done(struct cage_images_config *cfg);
/* Whether the config's `allow` patterns admit a normalised reference. */
bool cage_images_config_allows(const struct cage_images_config *cfg, const char *ref);

/* ---- the store (store.c) ------------------------------------------------ */

struct cage_image_store;

/* A local image handed to a user. Owned by the caller; free with
 * cage_image_free(), which also releases the lease. */
struct cage_image {
        char ref[CAGE_IMAGE_REF_MAX];       /* normalised reference ("" for an id) */
        char id[CAGE_IMAGE_DIGEST_LEN + 1]; /* the config digest */
        char manifest_digest[CAGE_IMAGE_DIGEST_LEN + 1];
        char *rootfs;      /* absolute path of the root directory */
        char **env;        /* "K=V", NULL-terminated (never NULL) */
        char *working_dir; /* "" when unset */
        char *user;        /* "" when unset */
        char **cmd;        /* NULL-terminated (never NULL) */
        char **entrypoint; /* NULL-terminated (never NULL) */
        uint64_t size;     /* bytes of the unpacked root */
        int lease_fd;      /* holds the image in the store */
};

/* Progress of a pull or an import: bytes done of total (0 when unknown)
 * and what is happening ("pulling sha256:ab12...", "unpacking layer 2/5").
 * Called from the calling thread only. */
typedef void (*cage_image_progress_fn)(void *userdata, uint64_t done, uint64_t total,
                                       const char *status);

/* How a long operation reports and is stopped. Everything may be zero. */
struct cage_image_op {
        cage_image_progress_fn progress;
        void *userdata;
        int cancel_fd;                 /* readable (or hung up) = cancel; -1 for none */
        const volatile int *cancelled; /* non-zero = cancel; NULL for none */
};

/* Opens (creating it, mode 0700) the store at dir (<data_dir>/images). cfg
 * is copied by reference: it must outlive the store. */
int cage_image_store_open(const char *dir, const struct cage_images_config *cfg,
                          struct cage_image_store **ret, struct cage_error *err);
struct cage_image_store *cage_image_store_close(struct cage_image_store *store);

/* The local image `ref` (a reference, normalised here, or an image id
 * "sha256:<hex>"), leased: it stays in the store until freed. -ENOENT when
 * absent. */
int cage_image_get(struct cage_image_store *store, const char *ref, struct cage_image **ret,
                   struct cage_error *err);
/* get, or pull when absent and the pull policy allows. */
int cage_image_ensure(struct cage_image_store *store, const char *ref,
                      const struct cage_image_op *op, struct cage_image **ret,
                      struct cage_error *err);
/* Pulls ref from its registry (again, if present: a moved tag moves) and
 * returns it leased (ret may be NULL). */
int cage_image_pull(struct cage_image_store *store, const char *ref, const struct cage_image_op *op,
                    struct cage_image **ret, struct cage_error *err);
/* Imports a `docker save` archive or an OCI image layout, as a tar or a
 * directory. tag (may be NULL) names the image, which must then be the only
 * one in the archive; otherwise the archive's own names are used. *ret_ids
 * (may be NULL) gets a JSON array of {"id","ref","manifest_digest"}. */
int cage_image_import(struct cage_image_store *store, const char *path, const char *tag,
                      const struct cage_image_op *op, json_t **ret_ids, struct cage_error *err);
/* A JSON array of {"ref","id","manifest_digest","size","created","last_used","in_use"}. */
int cage_image_list(struct cage_image_store *store, json_t **ret, struct cage_error *err);
/* A JSON object: the list entry plus "refs", "layers", "config" (Env,
 * WorkingDir, User, Cmd, Entrypoint), "platform", "rootfs". */
int cage_image_inspect(struct cage_image_store *store, const char *ref, json_t **ret,
                       struct cage_error *err);
/* Removes a reference; the image goes with its last reference unless it is
 * in use (then -EBUSY and nothing changes). *ret_id (may be NULL) gets the
 * id of the image the reference named. */
int cage_image_remove(struct cage_image_store *store, const char *ref,
                      char ret_id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err);
/* Removes images no reference names, leftovers of interrupted pulls, blobs
 * no image uses and, with a budget, the least recently used images not in
 * use until the store fits. *ret_report (may be NULL) gets
 * {"removed":[ids],"bytes_freed":N,"size":N}. */
int cage_image_prune(struct cage_image_store *store, json_t **ret_report, struct cage_error *err);
/* Bytes the store uses (blobs and unpacked roots). */
int cage_image_store_size(struct cage_image_store *store, uint64_t *ret, struct cage_error *err);

struct cage_image *cage_image_free(struct cage_image *image);

/* ---- what an image gives a launch (launch.c) ----------------------------- */

/* The image's User as ids inside the sandbox: resolved in the image's own
 * /etc/passwd and /etc/group; unset means 0:0 (root, as image authors
 * expect — still an unprivileged host id of the sandbox's own). -EINVAL
 * naming the user when the image does not have it. */
int cage_image_user(const struct cage_image *image, uint32_t *ret_uid, uint32_t *ret_gid,
                    struct cage_error *err);
/* The name the program runs as, for USER and LOGNAME: "root" when User is
 * unset, its name part, or the name of its uid in the image's passwd; ""
 * when none is known. */
void cage_image_user_name(const struct cage_image *image, char *buf, size_t size);
/* Its WorkingDir when that is a clean absolute path of a directory the
 * image has; NULL otherwise (a read-only root cannot get one). */
const char *cage_image_workdir(const struct cage_image *image);

#endif
