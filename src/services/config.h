/* Server configuration for `codecage serve --config FILE`: the JSON schema
 * (docs/CONFIG.md), its secure defaults and its validation.
 *
 * Loading is parse -> validate -> immutable struct: cage_config_load()
 * either returns a complete, consistent configuration or fails with a
 * message naming the offending key ("limits.cpus_max: ..."), and nothing is
 * created on the host. The only host access while loading is reading secret
 * and token files and resolving mounts_allowed paths with realpath().
 * Unknown keys and duplicate keys are errors, so a typo never silently
 * weakens a setting. Secret values and tokens never appear in an error
 * message. A loaded config is read-only: any thread may call the lookup
 * functions concurrently. */
#ifndef CODECAGE_SERVICES_CONFIG_H
#define CODECAGE_SERVICES_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "codecage/codecage.h"
#include "images/images.h"
#include "services/egress_policy.h"

struct cage_redactor;

/* Bounds on everything a config file can hold. */
#define CAGE_CONFIG_FILE_MAX         (1024 * 1024)
#define CAGE_CONFIG_PATH_MAX         4095
#define CAGE_CONFIG_SECRETS_MAX      256
#define CAGE_CONFIG_SECRET_NAME_MAX  64
#define CAGE_CONFIG_SECRET_MAX       (64 * 1024) /* bytes of one secret value */
#define CAGE_CONFIG_TENANTS_MAX      1024
#define CAGE_CONFIG_TENANT_NAME_MAX  63
#define CAGE_CONFIG_TOKEN_MIN        16
#define CAGE_CONFIG_TOKEN_MAX        1024
#define CAGE_CONFIG_ENV_ALLOW_MAX    256
#define CAGE_CONFIG_ENV_NAME_MAX     128
#define CAGE_CONFIG_MOUNTS_MAX       64
#define CAGE_CONFIG_POOL_MAX         256
#define CAGE_CONFIG_PER_TEMPLATE_MAX 1000000
#define CAGE_CONFIG_POOL_IMAGES_MAX  32 /* entries of `pool` */
#define CAGE_CONFIG_UPSTREAMS_MAX    32

/* Each TCP listener's connections at once, and the default share of one IP
 * address (listen.connections_per_ip). */
#define CAGE_CONFIG_CONNECTIONS_MAX            256
#define CAGE_CONFIG_CONNECTIONS_PER_IP_DEFAULT 64

/* The most a single request may ask for. */
struct cage_config_limits {
        uint64_t memory_mib_max;
        double cpus_max;
        uint32_t pids_max;
        uint64_t disk_mib_max;
        uint64_t timeout_s_max;
        uint64_t output_max_bytes_max;
        uint64_t max_body_bytes; /* HTTP request bodies; at least 16 MiB */
        uint32_t max_sandboxes_per_tenant;
        uint32_t launches_max; /* sandbox launches at once, server-wide; more wait */
};

/* What one tenant may hold at a time (`quotas`, `tenants[].quotas`); 0 is
 * "no quota". Going over one is answered 429 (docs/OPERATIONS.md), except
 * artifacts_mib: over it, the tenant's oldest kept runs go. */
#define QUOTA_ARTIFACTS_MIB_DEFAULT 1024
#define QUOTA_ARTIFACTS_MIB_MAX     1048576
struct cage_quotas {
        uint32_t sandboxes_running; /* named sandboxes running */
        uint32_t runs;              /* execs, Python calls and one-shot runs at once */
        uint32_t sessions;          /* live Python sessions of named sandboxes */
        uint64_t memory_mib;        /* memory_mib of running sandboxes and runs, summed */
        uint64_t artifacts_mib;     /* artifacts of one-shot runs kept (default 1024) */
};

/* What a request gets for a field it leaves out; always within the limits. */
struct cage_config_spec_defaults {
        uint64_t memory_mib;
        double cpus;
        uint32_t pids;
        uint64_t disk_mib;
        uint64_t timeout_s;
        uint64_t output_max_bytes;
};

struct cage_tenant {
        char *name;  /* [a-z0-9][a-z0-9_-]{0,62} */
        char *token; /* bearer token, >= 16 characters; never log it */
        size_t token_len;
        bool operator;       /* may use operator routes (GET /v1/pool) */
        bool secrets_listed; /* tenants[].secrets was given: only those */
        char **secrets;      /* names of config secrets (borrowed from cfg->secrets) */
        size_t n_secrets;
        struct cage_quotas quotas; /* the config's `quotas` with this tenant's own on top */
};

struct cage_secret {
        char *name;  /* [A-Z_][A-Z0-9_]{0,63}: also the env var it becomes */
        char *value; /* non-empty, no NUL bytes; never log it */
        size_t len;
};

struct cage_mount_rule {
        char *path;       /* realpath() of the configured path, resolved at load */
        char *configured; /* the path as written in the config */
        bool writable;
};

/* Network egress (docs/NETWORK.md): what sandboxes may ever reach through
 * codecage's proxy, and its limits per sandbox. */
struct cage_config_network {
        struct egress_allowlist allow;         /* a spec's `network` must lie within it */
        struct egress_allowlist allow_private; /* ADDR ranges of special addresses allowed */
        uint32_t max_connections;              /* concurrent proxy connections per sandbox */
        uint64_t max_bytes;                    /* bytes through the proxy per running sandbox */
        uint32_t connect_timeout_s, idle_timeout_s;
};

/* pip requirements: the index, the hosts the install phase may reach. */
struct cage_config_pip {
        char *index_url;               /* http(s)://host[:port]/path */
        struct egress_allowlist hosts; /* the index's host + extra_hosts */
        char *trusted_host;            /* the index's host[:port] when it is plain http */
        uint64_t timeout_s;            /* of one install */
        uint64_t max_mib;              /* size of one cached layer */
};

/* `files` by URL, fetched by the server. */
struct cage_config_fetch {
        uint64_t max_bytes;
        uint64_t timeout_s;
        uint32_t max_redirects;
};

/* An entry of `pool`: keep `size` warm sandboxes of `image` ("host" or a
 * normalised reference). */
struct cage_pool_image {
        char *image;
        uint32_t size;
};

/* The `e2b` section: the E2B-compatible listener (docs/E2B.md). */
struct cage_config_e2b {
        char *listen; /* NULL: off */
        struct sockaddr_storage addr;
        socklen_t addr_len;
        bool loopback;
        uint64_t timeout_s_max; /* the longest lifetime a sandbox may ask for */
        bool internet_access;   /* false: every sandbox made through it is offline */
};

struct cage_config {
        char *data_dir;

        /* listen.http: NULL when HTTP is off. http_addr is ready for bind(). */
        char *listen_http;
        struct sockaddr_storage http_addr;
        socklen_t http_addr_len;
        bool http_loopback;
        /* listen.unix: NULL when the Unix socket is off. */
        char *listen_unix;
        /* listen.metrics: an unauthenticated loopback listener for /metrics,
         * /healthz and /readyz only; NULL when off (the default). */
        char *listen_metrics;
        struct sockaddr_storage metrics_addr;
        socklen_t metrics_addr_len;
        /* listen.connections_per_ip: connections open at once from one IP
         * address on each TCP listener (0: no limit). */
        uint32_t connections_per_ip;

        struct cage_config_limits limits;
        struct cage_config_spec_defaults defaults;

        char **env_allowlist;
        size_t n_env_allowlist;
        struct cage_secret *secrets;
        size_t n_secrets;
        struct cage_tenant *tenants;
        size_t n_tenants;
        struct cage_mount_rule *mounts_allowed;
        size_t n_mounts_allowed;

        uint64_t retention_s;
        uint64_t idle_timeout_s;             /* 0 = never */
        uint64_t drain_timeout_s;            /* SIGTERM: how long running calls may go on */
        struct cage_quotas quotas;           /* every tenant's, unless its entry says otherwise */
        uint32_t pool_size;                  /* warm sandboxes kept for one-shot Python runs */
        bool fork_sandboxes;                 /* named sandboxes forked from their image's zygote */
        uint32_t sandboxes_per_template;     /* forks before a fresh template takes over */
        struct cage_pool_image *pool_images; /* the `pool` section: warm sandboxes per image */
        size_t n_pool_images;
        json_t *upstream_servers; /* validated [{name, command, allow?}] or NULL */
        char *audit_log;
        struct cage_config_network network;
        struct cage_config_pip pip;
        struct cage_config_fetch fetch;
        struct cage_images_config images; /* the `images` section (docs/IMAGES.md) */
        struct cage_config_e2b e2b;
};

/* The configuration used when no file is given: every default, validated. */
int cage_config_defaults(struct cage_config **ret, struct cage_error *err);
/* Reads and validates a config file (a regular file of at most 1 MiB). */
int cage_config_load(const char *path, struct cage_config **ret, struct cage_error *err);
/* Same, from a JSON text in memory (tests, fuzzing). */
int cage_config_parse(const char *text, size_t len, struct cage_config **ret,
                      struct cage_error *err);
/* Adds an upstream MCP server for code mode from "NAME=COMMAND ARGS..."
 * (the program's absolute path, arguments split at spaces), with the checks
 * of the file's upstream_servers. Only before the config is shared. */
int cage_config_add_upstream(struct cage_config *cfg, const char *spec, struct cage_error *err);
/* Wipes secret values and tokens from memory and frees. Accepts NULL. */
struct cage_config *cage_config_free(struct cage_config *cfg);

/* True when requests must carry a bearer token (some tenant is configured). */
bool cage_config_auth_required(const struct cage_config *cfg);
/* The tenant owning `token`, or NULL. Every tenant's token is compared in
 * time that depends only on its length, never on where bytes differ, and
 * the scan does not stop at a match. */
const struct cage_tenant *cage_config_tenant_for_token(const struct cage_config *cfg,
                                                       const char *token);
const struct cage_tenant *cage_config_tenant(const struct cage_config *cfg, const char *name);
/* The quotas of tenant `name` (the config's `quotas` for a tenant the
 * config does not name, e.g. "default" without tenants). */
const struct cage_quotas *cage_config_quotas(const struct cage_config *cfg, const char *name);

/* The value of secret `name`; -ENOENT with an error naming it when the
 * server does not know it. *value stays owned by cfg. */
int cage_config_secret(const struct cage_config *cfg, const char *name, const char **value,
                       struct cage_error *err);

/* Whether `tenant` may have secret `name` injected: every secret without
 * tenants (the single tenant "default") or for a tenant whose entry lists
 * no `secrets`; otherwise only those it lists. A tenant the config does
 * not name may have none. */
bool cage_config_tenant_may_use_secret(const struct cage_config *cfg, const char *tenant,
                                       const char *name);

/* Whether a sandbox may pass the server's variable `name` through. */
bool cage_config_env_allowed(const struct cage_config *cfg, const char *name);

/* Whether a spec may mount host_path (writable or not). host_path must be
 * absolute without "." or ".." components; it is resolved with realpath()
 * and must be a mounts_allowed path or beneath one (component-wise, so
 * /data2 is not beneath /data), with writable only where the rule allows.
 * On success *ret_resolved (if not NULL) is the resolved path, which is
 * what the caller must mount. -EPERM / -ENOENT / -EINVAL otherwise; the
 * message shows only the path the client gave, never where it resolves. */
int cage_config_mount_allowed(const struct cage_config *cfg, const char *host_path, bool writable,
                              char **ret_resolved, struct cage_error *err);

/* A redactor holding every secret value (marker name = secret name) and
 * every tenant token (marker name "token:TENANT"). */
int cage_config_redactor(const struct cage_config *cfg, struct cage_redactor **ret,
                         struct cage_error *err);

#endif
