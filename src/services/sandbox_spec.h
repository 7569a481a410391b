/* Sandbox specs as the API receives them (JSON, DESIGN section 2): parsing,
 * defaults from the server config, limits, and the normalised document
 * that is stored and shown back. Parsing touches nothing on the host except
 * resolving mount sources against the config's mounts_allowed.
 *
 * Every problem is -EINVAL (or -EPERM for what the server's policy
 * refuses) with a message naming the field: "memory_mib: 99999 is above
 * this server's maximum of 8192". Unknown fields are errors. */
#ifndef CODECAGE_SERVICES_SANDBOX_SPEC_H
#define CODECAGE_SERVICES_SANDBOX_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "images/images.h"
#include "services/egress_policy.h"

struct cage_config;

#define SVC_NAME_MAX         63
#define SVC_ENV_MAX          256
#define SVC_ENV_VALUE_MAX    (32 * 1024)
#define SVC_SECRETS_MAX      64
#define SVC_LABELS_MAX       64
#define SVC_LABEL_VALUE_MAX  256
#define SVC_IDLE_TIMEOUT_MAX (30ULL * 24 * 3600)
#define SVC_REQUIREMENTS_MAX 64
#define SVC_REQUIREMENT_MAX  200 /* bytes of one requirement */
/* Where a requirements layer appears in a sandbox (read-only). */
#define SVC_REQUIREMENTS_DIR "/run/codecage/requirements"

/* What an image gives a launch, set by the caller (svc_box_start). */
struct svc_image_launch {
        struct cage_image *image; /* leased; NULL for the host image */
        const char *workdir;      /* its WorkingDir when that is a directory of it, or NULL */
        char user_name[64];       /* USER and LOGNAME, or "" */
        uint32_t uid, gid;        /* the image's User, resolved in its passwd */
};

struct svc_spec {
        char name[SVC_NAME_MAX + 1];    /* "" for one-shot runs */
        char image[CAGE_IMAGE_REF_MAX]; /* "host" or a normalised reference */
        uint64_t memory_mib, disk_mib, timeout_s_ms, output_max_bytes, idle_timeout_s;
        double cpus;
        uint32_t pids;
        json_t *env;     /* object of strings */
        json_t *secrets; /* array of names the config knows */
        json_t *mounts;  /* array of {source, target, writable}, source as given */
        char *resolved_mounts[CAGE_MOUNTS_MAX];
        size_t n_mounts;
        json_t *labels;                  /* object of strings */
        struct egress_allowlist network; /* empty: no network */
        json_t *requirements;            /* sorted array of pip requirement strings */
        json_t *doc;                     /* the normalised spec: every field, defaults filled in */
        /* Set by the caller before launching, not part of the spec: the
         * host directory of the installed requirements layer, or NULL. */
        const char *requirements_dir;
};

/* Whether name is a valid sandbox name: [A-Za-z0-9][A-Za-z0-9_.-]{0,62}. */
bool svc_name_valid(const char *name);

/* Parses a spec document. With named, "name" is required; without, it is
 * refused (one-shot runs). `allowed_extra` lists further top-level keys the
 * caller handles itself (NULL-terminated; e.g. "code", "files"). */
int svc_spec_parse(const struct cage_config *cfg, const json_t *in, bool named,
                   const char *const *allowed_extra, struct svc_spec **ret, struct cage_error *err);
struct svc_spec *svc_spec_free(struct svc_spec *s);

/* What a spec may hold depends on who asks: -EPERM naming the field when
 * tenant may not use one of its secrets (the config's tenants[].secrets).
 * Checked when a sandbox is created and again before every launch. */
int svc_spec_check_tenant(const struct svc_spec *s, const struct cage_config *cfg,
                          const char *tenant, struct cage_error *err);

/* Fills a struct cage_spec for launching (pointers into s and env_storage;
 * both must outlive the launch): limits, the mounts, the workspace (when
 * workspace_dir is not NULL) and the environment: the spec's env, the
 * server variables the config's env_allowlist passes through, and each
 * secret as NAME=value. *env_storage is malloc'ed; free() it. */
int svc_spec_to_cage(const struct svc_spec *s, const struct cage_config *cfg,
                     const char *workspace_dir, const struct svc_image_launch *image,
                     struct cage_spec *out, char **env_storage, struct cage_error *err);

#endif
