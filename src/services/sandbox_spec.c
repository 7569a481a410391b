/* Sandbox specs from the API; see sandbox_spec.h.
 *
 * One table lists the numeric fields with their config default and config
 * maximum, so the bounds of every request come from one place. The
 * normalised document (`doc`) holds every field with its effective value:
 * it is what the store keeps and what `get` shows, and parsing it again
 * gives the same spec. */
#include "sandbox_spec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec.h"
#include "services/config.h"
#include "services/egress.h"
#include "util/cleanup.h"
#include "util/error.h"

enum num_kind { NUM_INT, NUM_REAL };

struct num_field {
        const char *key;
        enum num_kind kind;
        double min;
        size_t default_off; /* offset in struct cage_config_spec_defaults, or -1 */
        size_t max_off;     /* offset in struct cage_config_limits */
};

#define DEF(f) offsetof(struct cage_config_spec_defaults, f)
#define LIM(f) offsetof(struct cage_config_limits, f)

static const struct num_field num_fields[] = {
        {"memory_mib", NUM_INT, 16, DEF(memory_mib), LIM(memory_mib_max)},
        {"cpus", NUM_REAL, 0.01, DEF(cpus), LIM(cpus_max)},
        {"pids", NUM_INT, 2, DEF(pids), LIM(pids_max)},
        {"disk_mib", NUM_INT, 8, DEF(disk_mib), LIM(disk_mib_max)},
        {"timeout_s", NUM_REAL, 0.001, DEF(timeout_s), LIM(timeout_s_max)},
        {"output_max_bytes", NUM_INT, 1024, DEF(output_max_bytes), LIM(output_max_bytes_max)},
};

static const char *const base_keys[] = {
        "name",     "image",     "memory_mib",       "cpus",           "pids",
        "disk_mib", "timeout_s", "output_max_bytes", "network",        "env",
        "secrets",  "mounts",    "labels",           "idle_timeout_s", "requirements"};

/* A field's value from the config, as a double (the defaults and limits
 * structs mix uint64_t, uint32_t and double). */
static double config_value(const void *base, const char *key, size_t off)
{
        const char *p = (const char *)base + off;
        if (strcmp(key, "cpus") == 0 || strcmp(key, "cpus_max") == 0)
                return *(const double *)p;
        if (strcmp(key, "pids") == 0)
                return *(const uint32_t *)p;
        return (double)*(const uint64_t *)p;
}

static double limit_of(const struct cage_config *cfg, const struct num_field *f)
{
        if (strcmp(f->key, "cpus") == 0)
                return cfg->limits.cpus_max;
        if (strcmp(f->key, "pids") == 0)
                return cfg->limits.pids_max;
        return (double)*(const uint64_t *)((const char *)&cfg->limits + f->max_off);
}

bool svc_name_valid(const char *name)
{
        size_t len = name ? strlen(name) : 0;
        if (len == 0 || len > SVC_NAME_MAX || !isalnum((unsigned char)name[0]))
                return false;
        for (size_t i = 1; i < len; i++)
                if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
                        return false;
        return true;
}

static bool key_allowed(const char *key, const char *const *extra)
{
        for (size_t i = 0; i < sizeof(base_keys) / sizeof(base_keys[0]); i++)
                if (strcmp(key, base_keys[i]) == 0)
                        return true;
        for (size_t i = 0; extra && extra[i]; i++)
                if (strcmp(key, extra[i]) == 0)
                        return true;
        return false;
}

static int parse_number(const struct cage_config *cfg, const json_t *in, const struct num_field *f,
                        double *ret, struct cage_error *err)
{
        const json_t *v = json_object_get(in, f->key);
        double max = limit_of(cfg, f);
        if (!v || json_is_null(v)) {
                *ret = config_value(&cfg->defaults, f->key, f->default_off);
                return 0;
        }
        if (f->kind == NUM_INT ? !json_is_integer(v) : !json_is_number(v))
                return cage_fail(err, -EINVAL, "%s: must be %s", f->key,
                                 f->kind == NUM_INT ? "an integer" : "a number");
        double d = json_number_value(v);
        if (!isfinite(d) || d < f->min)
                return cage_fail(err, -EINVAL, "%s: %g is below the minimum of %g", f->key, d,
                                 f->min);
        if (d > max)
                return cage_fail_plain(err, -EPERM, "%s: %g is above this server's maximum of %g",
                                       f->key, d, max);
        *ret = d;
        return 0;
}

static int parse_numbers(const struct cage_config *cfg, const json_t *in, struct svc_spec *s,
                         struct cage_error *err)
{
        double v[sizeof(num_fields) / sizeof(num_fields[0])];
        for (size_t i = 0; i < sizeof(num_fields) / sizeof(num_fields[0]); i++) {
                int r = parse_number(cfg, in, &num_fields[i], &v[i], err);
                if (r < 0)
                        return r;
        }
        s->memory_mib = (uint64_t)v[0];
        s->cpus = v[1];
        s->pids = (uint32_t)v[2];
        s->disk_mib = (uint64_t)v[3];
        s->timeout_s_ms = (uint64_t)llround(v[4] * 1000.0);
        s->output_max_bytes = (uint64_t)v[5];
        const json_t *idle = json_object_get(in, "idle_timeout_s");
        s->idle_timeout_s = cfg->idle_timeout_s;
        if (idle && !json_is_null(idle)) {
                if (!json_is_integer(idle) || json_integer_value(idle) < 0 ||
                    (uint64_t)json_integer_value(idle) > SVC_IDLE_TIMEOUT_MAX)
                        return cage_fail(err, -EINVAL,
                                         "idle_timeout_s: must be an integer 0..%llu (0 = never)",
                                         SVC_IDLE_TIMEOUT_MAX);
                s->idle_timeout_s = (uint64_t)json_integer_value(idle);
        }
        return 0;
}

static bool env_name_valid(const char *k)
{
        if (!k[0] || strlen(k) > 128 || !(isalpha((unsigned char)k[0]) || k[0] == '_'))
                return false;
        for (const char *p = k; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '_')
                        return false;
        return true;
}

static int parse_env(const json_t *in, struct svc_spec *s, struct cage_error *err)
{
        const json_t *env = json_object_get(in, "env");
        if (!env || json_is_null(env)) {
                s->env = json_object();
                return 0;
        }
        if (!json_is_object(env))
                return cage_fail(err, -EINVAL, "env: must be an object of strings");
        if (json_object_size(env) > SVC_ENV_MAX)
                return cage_fail(err, -EINVAL, "env: more than %d variables", SVC_ENV_MAX);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)env, k, v)
        {
                if (!env_name_valid(k))
                        return cage_fail(err, -EINVAL,
                                         "env: \"%.64s\" is not a valid variable name", k);
                if (!json_is_string(v) || json_string_length(v) > SVC_ENV_VALUE_MAX ||
                    strlen(json_string_value(v)) != json_string_length(v))
                        return cage_fail(err, -EINVAL,
                                         "env.%s: must be a string of at most %d bytes without "
                                         "NUL",
                                         k, SVC_ENV_VALUE_MAX);
        }
        s->env = json_deep_copy(env);
        return 0;
}

static int parse_secrets(const struct cage_config *cfg, const json_t *in, struct svc_spec *s,
                         struct cage_error *err)
{
        const json_t *sec = json_object_get(in, "secrets");
        s->secrets = json_array();
        if (!sec || json_is_null(sec))
                return 0;
        if (!json_is_array(sec) || json_array_size(sec) > SVC_SECRETS_MAX)
                return cage_fail(err, -EINVAL, "secrets: must be a list of at most %d names",
                                 SVC_SECRETS_MAX);
        size_t i;
        const json_t *v;
        json_array_foreach(sec, i, v)
        {
                const char *value;
                if (!json_is_string(v))
                        return cage_fail(err, -EINVAL, "secrets[%zu]: must be a string", i);
                if (cage_config_secret(cfg, json_string_value(v), &value, NULL) < 0)
                        return cage_fail(err, -EINVAL,
                                         "secrets[%zu]: this server has no secret named \"%.64s\"",
                                         i, json_string_value(v));
                json_array_append_new(s->secrets, json_string(json_string_value(v)));
        }
        return 0;
}

static int parse_mount(const struct cage_config *cfg, size_t i, const json_t *m, struct svc_spec *s,
                       struct cage_error *err)
{
        const char *src = NULL, *dst = NULL;
        int writable = 0;
        json_error_t jerr;
        if (json_unpack_ex((json_t *)m, &jerr, JSON_STRICT, "{s:s, s:s, s?b}", "source", &src,
                           "target", &dst, "writable", &writable) < 0)
                return cage_fail(err, -EINVAL,
                                 "mounts[%zu]: must be {source, target, writable?}: %s", i,
                                 jerr.text);
        if (dst[0] != '/' || strcmp(dst, "/") == 0 || strncmp(dst, "/workspace", 10) == 0 ||
            strstr(dst, "/..") || strstr(dst, "//") || strlen(dst) > 255)
                return cage_fail(err, -EINVAL,
                                 "mounts[%zu].target: \"%.255s\" must be a clean absolute path "
                                 "other than / and /workspace",
                                 i, dst);
        struct cage_error merr = {0};
        int r = cage_config_mount_allowed(cfg, src, writable, &s->resolved_mounts[i], &merr);
        if (r < 0)
                return cage_fail(err, r == -ENOENT ? -EINVAL : -EPERM, "mounts[%zu].source: %s", i,
                                 merr.message);
        json_array_append_new(s->mounts, json_pack("{s:s,s:s,s:b}", "source", src, "target", dst,
                                                   "writable", writable));
        return 0;
}

static int parse_mounts(const struct cage_config *cfg, const json_t *in, struct svc_spec *s,
                        struct cage_error *err)
{
        const json_t *mounts = json_object_get(in, "mounts");
        s->mounts = json_array();
        if (!mounts || json_is_null(mounts))
                return 0;
        /* Two mounts are kept: /workspace and the requirements layer. */
        if (!json_is_array(mounts) || json_array_size(mounts) > CAGE_MOUNTS_MAX - 2)
                return cage_fail(err, -EINVAL, "mounts: must be a list of at most %d mounts",
                                 CAGE_MOUNTS_MAX - 2);
        size_t i;
        const json_t *m;
        json_array_foreach(mounts, i, m)
        {
                int r = parse_mount(cfg, i, m, s, err);
                if (r < 0)
                        return r;
                s->n_mounts = i + 1;
        }
        return 0;
}

static int parse_labels(const json_t *in, struct svc_spec *s, struct cage_error *err)
{
        const json_t *labels = json_object_get(in, "labels");
        if (!labels || json_is_null(labels)) {
                s->labels = json_object();
                return 0;
        }
        if (!json_is_object(labels) || json_object_size(labels) > SVC_LABELS_MAX)
                return cage_fail(err, -EINVAL,
                                 "labels: must be an object of at most %d string values",
                                 SVC_LABELS_MAX);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)labels, k, v)
        {
                if (!k[0] || strlen(k) > SVC_NAME_MAX || strchr(k, '='))
                        return cage_fail(err, -EINVAL,
                                         "labels: key \"%.64s\" must be 1..%d bytes without '='", k,
                                         SVC_NAME_MAX);
                if (!json_is_string(v) || json_string_length(v) > SVC_LABEL_VALUE_MAX)
                        return cage_fail(err, -EINVAL,
                                         "labels.%s: must be a string of at most %d bytes", k,
                                         SVC_LABEL_VALUE_MAX);
        }
        s->labels = json_deep_copy(labels);
        return 0;
}

static int parse_simple(const json_t *in, bool named, const char *const *extra, struct svc_spec *s,
                        struct cage_error *err)
{
        if (!json_is_object(in))
                return cage_fail(err, -EINVAL, "the request body must be a JSON object");
        const char *k;
        const json_t *v;
        json_object_foreach(
                (json_t *)in, k,
                v) if (!key_allowed(k, extra) ||
                       (!named &&
                        strcmp(k, "name") == 0)) return cage_fail(err, -EINVAL,
                                                                  "unknown field \"%.64s\"", k);
        const json_t *name = json_object_get(in, "name");
        if (named && (!json_is_string(name) || !svc_name_valid(json_string_value(name))))
                return cage_fail(err, -EINVAL,
                                 "name: required, 1..63 characters of letters, digits, '_', '.' "
                                 "and '-', starting with a letter or digit");
        if (named)
                snprintf(s->name, sizeof(s->name), "%s", json_string_value(name));
        return 0;
}

/* `image`: "host" (the default) or an OCI reference, normalised, that the
 * config's images.allow admits. "dir:" images belong to the server's
 * config only: a client may not name a host directory as a root. */
static int parse_image(const struct cage_config *cfg, const json_t *in, struct svc_spec *s,
                       struct cage_error *err)
{
        const json_t *image = json_object_get(in, "image");
        snprintf(s->image, sizeof(s->image), "host");
        if (!image || json_is_null(image))
                return 0;
        const char *text = json_string_value(image);
        if (!text || !text[0])
                return cage_fail(err, -EINVAL, "image: must be \"host\" or an image reference");
        if (strcmp(text, "host") == 0)
                return 0;
        if (strncmp(text, "dir:", 4) == 0)
                return cage_fail_plain(err, -EPERM,
                                       "image: \"dir:\" images are for the server's config only");
        struct cage_image_ref ref;
        int r = cage_image_ref_parse(text, &ref, err);
        if (r < 0)
                return r;
        if (!cage_images_config_allows(&cfg->images, ref.full))
                return cage_fail_plain(err, -EPERM,
                                       "image: \"%.300s\" is not allowed by this server "
                                       "(images.allow in its config)",
                                       ref.full);
        snprintf(s->image, sizeof(s->image), "%s", ref.full);
        return 0;
}

/* `network`: allowlist entries within the server's network.allow. */
static int parse_network(const struct cage_config *cfg, const json_t *in, struct svc_spec *s,
                         struct cage_error *err)
{
        int r = egress_allowlist_parse(json_object_get(in, "network"), "network", false,
                                       &s->network, err);
        if (r == 0)
                r = egress_allowlist_within(&s->network, &cfg->network.allow, "network", err);
        return r;
}

static int compare_strings(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A requirement as pip reads it from a requirements file line: printable
 * ASCII, not an option ("-r file", "--index-url ..."), not a path or URL
 * (packages come from the configured index only). */
static bool requirement_valid(const char *r, size_t len)
{
        if (len == 0 || len > SVC_REQUIREMENT_MAX || r[0] == '-' || r[0] == '.' || r[0] == '/' ||
            strstr(r, "://") || strchr(r, '@'))
                return false;
        for (size_t i = 0; i < len; i++)
                if (r[i] < 0x20 || r[i] > 0x7e || r[i] == '\\')
                        return false;
        return isalnum((unsigned char)r[0]);
}

static int parse_requirements(const json_t *in, struct svc_spec *s, struct cage_error *err)
{
        const json_t *req = json_object_get(in, "requirements");
        s->requirements = json_array();
        if (!req || json_is_null(req))
                return 0;
        if (!json_is_array(req) || json_array_size(req) > SVC_REQUIREMENTS_MAX)
                return cage_fail(err, -EINVAL,
                                 "requirements: must be a list of at most %d requirement strings",
                                 SVC_REQUIREMENTS_MAX);
        const char *sorted[SVC_REQUIREMENTS_MAX];
        size_t i, n = 0;
        const json_t *v;
        json_array_foreach(req, i, v)
        {
                if (!json_is_string(v) ||
                    !requirement_valid(json_string_value(v), json_string_length(v)))
                        return cage_fail(err, -EINVAL,
                                         "requirements[%zu]: must be a requirement such as "
                                         "\"numpy==2.1.0\" or \"requests>=2\" (1..%d printable "
                                         "characters; no options, paths or URLs)",
                                         i, SVC_REQUIREMENT_MAX);
                sorted[n++] = json_string_value(v);
        }
        qsort(sorted, n, sizeof(sorted[0]), compare_strings);
        for (i = 0; i < n; i++)
                if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0)
                        json_array_append_new(s->requirements, json_string(sorted[i]));
        return 0;
}

static int build_doc(struct svc_spec *s)
{
        s->doc = json_pack("{s:s, s:I, s:f, s:i, s:I, s:f, s:I, s:O, s:O, s:O, s:O, s:I}", "image",
                           s->image, "memory_mib", (json_int_t)s->memory_mib, "cpus", s->cpus,
                           "pids", (int)s->pids, "disk_mib", (json_int_t)s->disk_mib, "timeout_s",
                           (double)s->timeout_s_ms / 1000.0, "output_max_bytes",
                           (json_int_t)s->output_max_bytes, "env", s->env, "secrets", s->secrets,
                           "mounts", s->mounts, "labels", s->labels, "idle_timeout_s",
                           (json_int_t)s->idle_timeout_s);
        if (s->doc && s->name[0])
                json_object_set_new(s->doc, "name", json_string(s->name));
        if (s->doc) {
                json_object_set_new(s->doc, "network", egress_allowlist_to_json(&s->network));
                json_object_set(s->doc, "requirements", s->requirements);
        }
        return s->doc ? 0 : -ENOMEM;
}

int svc_spec_parse(const struct cage_config *cfg, const json_t *in, bool named,
                   const char *const *allowed_extra, struct svc_spec **ret, struct cage_error *err)
{
        struct svc_spec *s = calloc(1, sizeof(*s));
        if (!s)
                return cage_fail(err, -ENOMEM, "spec");
        int r = parse_simple(in, named, allowed_extra, s, err);
        if (r == 0)
                r = parse_image(cfg, in, s, err);
        if (r == 0)
                r = parse_numbers(cfg, in, s, err);
        if (r == 0)
                r = parse_env(in, s, err);
        if (r == 0)
                r = parse_secrets(cfg, in, s, err);
        if (r == 0)
                r = parse_mounts(cfg, in, s, err);
        if (r == 0)
                r = parse_labels(in, s, err);
        if (r == 0)
                r = parse_network(cfg, in, s, err);
        if (r == 0)
                r = parse_requirements(in, s, err);
        if (r == 0 && (!s->env || !s->labels || !s->requirements || build_doc(s) < 0))
                r = cage_fail(err, -ENOMEM, "spec");
        if (r < 0) {
                svc_spec_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

struct svc_spec *svc_spec_free(struct svc_spec *s)
{
        if (!s)
                return NULL;
        json_decref(s->env);
        json_decref(s->secrets);
        json_decref(s->mounts);
        json_decref(s->labels);
        json_decref(s->requirements);
        egress_allowlist_clear(&s->network);
        json_decref(s->doc);
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                free(s->resolved_mounts[i]);
        free(s);
        return NULL;
}

/* ---- launching ---- */

/* The variables every client library reads to find a proxy; loopback
 * itself is not proxied. */
static const char *const proxy_vars[] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                         "http_proxy", "https_proxy", "all_proxy"};
#define NO_PROXY_HOSTS  "localhost,127.0.0.1,::1"
#define ENV_EXTRA_BYTES 1024 /* the proxy variables, PYTHONPATH, an image's USER/LOGNAME */

static size_t env_bytes(const struct svc_spec *s, const struct cage_config *cfg)
{
        size_t bytes = ENV_EXTRA_BYTES;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)s->env, k, v) bytes += strlen(k) + json_string_length(v) + 2;
        for (size_t i = 0; i < cfg->n_env_allowlist; i++) {
                const char *val = getenv(cfg->env_allowlist[i]);
                if (val)
                        bytes += strlen(cfg->env_allowlist[i]) + strlen(val) + 2;
        }
        size_t i;
        json_array_foreach(s->secrets, i, v)
        {
                const char *val;
                if (cage_config_secret(cfg, json_string_value(v), &val, NULL) == 0)
                        bytes += json_string_length(v) + strlen(val) + 2;
        }
        return bytes;
}

static bool add_env(struct cage_spec *out, char **pos, const char *k, const char *v)
{
        if (out->n_env >= CAGE_ENV_MAX)
                return false;
        int n = sprintf(*pos, "%s=%s", k, v);
        out->env[out->n_env++] = *pos;
        *pos += n + 1;
        return true;
}

/* Order matters: later entries win, so secrets and the spec's own variables
 * override what the allowlist passes through, and everything overrides the
 * image's Env. */
static int fill_env(const struct svc_spec *s, const struct cage_config *cfg,
                    const struct svc_image_launch *launch, struct cage_spec *out,
                    char **env_storage, struct cage_error *err)
{
        char *pos = *env_storage = malloc(env_bytes(s, cfg) + 1);
        if (!pos)
                return cage_fail(err, -ENOMEM, "environment");
        const struct cage_image *image = launch ? launch->image : NULL;
        bool ok = true;
        if (image && launch->user_name[0])
                ok = add_env(out, &pos, "USER", launch->user_name) &&
                     add_env(out, &pos, "LOGNAME", launch->user_name);
        for (size_t i = 0; image && image->env[i] && ok; i++) {
                ok = out->n_env < CAGE_ENV_MAX;
                if (ok)
                        out->env[out->n_env++] = image->env[i];
        }
        for (size_t i = 0; i < cfg->n_env_allowlist && ok; i++) {
                const char *val = getenv(cfg->env_allowlist[i]);
                if (val && !json_object_get(s->env, cfg->env_allowlist[i]))
                        ok = add_env(out, &pos, cfg->env_allowlist[i], val);
        }
        size_t i;
        const json_t *v;
        json_array_foreach(s->secrets, i, v)
        {
                const char *val;
                if (ok && cage_config_secret(cfg, json_string_value(v), &val, NULL) == 0 &&
                    !json_object_get(s->env, json_string_value(v)))
                        ok = add_env(out, &pos, json_string_value(v), val);
        }
        for (i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]) && ok && s->network.n; i++)
                ok = add_env(out, &pos, proxy_vars[i], CAGE_EGRESS_PROXY_URL);
        if (ok && s->network.n)
                ok = add_env(out, &pos, "NO_PROXY", NO_PROXY_HOSTS) &&
                     add_env(out, &pos, "no_proxy", NO_PROXY_HOSTS);
        if (ok && s->requirements_dir)
                ok = add_env(out, &pos, "PYTHONPATH", SVC_REQUIREMENTS_DIR "/site-packages");
        const char *k;
        json_object_foreach((json_t *)s->env, k, v) if (ok) ok =
                add_env(out, &pos, k, json_string_value(v));
        out->env[out->n_env] = NULL;
        return ok ? 0 : cage_fail(err, -EINVAL, "env: more than %d variables in all", CAGE_ENV_MAX);
}

int svc_spec_check_tenant(const struct svc_spec *s, const struct cage_config *cfg,
                          const char *tenant, struct cage_error *err)
{
        size_t i;
        const json_t *v;
        json_array_foreach(s->secrets, i, v)
        {
                if (!cage_config_tenant_may_use_secret(cfg, tenant, json_string_value(v)))
                        return cage_fail_plain(err, -EPERM,
                                               "secrets[%zu]: \"%s\" is not a secret this tenant "
                                               "may use (tenants[].secrets in the server's config)",
                                               i, json_string_value(v));
        }
        return 0;
}

/* The image's root, its working directory (else /workspace) and its user. */
static void apply_image(const struct svc_image_launch *launch, struct cage_spec *out)
{
        const struct cage_image *image = launch->image;
        /* image->rootfs outlives the launch: the lease holds it. */
        out->image = image->rootfs;
        if (launch->workdir)
                out->workdir = launch->workdir;
        out->uid = launch->uid;
        out->gid = launch->gid;
}

int svc_spec_to_cage(const struct svc_spec *s, const struct cage_config *cfg,
                     const char *workspace_dir, const struct svc_image_launch *image,
                     struct cage_spec *out, char **env_storage, struct cage_error *err)
{
        cage_spec_init(out);
        if (image && image->image)
                apply_image(image, out);
        out->memory_bytes = s->memory_mib * MIB;
        out->cpus = s->cpus;
        out->pids = s->pids;
        out->disk_bytes = s->disk_mib * MIB;
        out->timeout_ms = s->timeout_s_ms;
        out->output_max_bytes = s->output_max_bytes;
        for (size_t i = 0; i < s->n_mounts; i++) {
                const json_t *m = json_array_get(s->mounts, i);
                out->mounts[out->n_mounts++] = (struct cage_mount){
                        .source = s->resolved_mounts[i],
                        .target = json_string_value(json_object_get(m, "target")),
                        .writable = json_is_true(json_object_get(m, "writable"))};
        }
        if (workspace_dir)
                out->mounts[out->n_mounts++] = (struct cage_mount){
                        .source = workspace_dir, .target = "/workspace", .writable = true};
        if (s->requirements_dir)
                out->mounts[out->n_mounts++] = (struct cage_mount){.source = s->requirements_dir,
                                                                   .target = SVC_REQUIREMENTS_DIR};
        return fill_env(s, cfg, image, out, env_storage, err);
}
