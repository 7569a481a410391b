/* The server configuration: parsing, defaults and validation of the JSON
 * file `codecage serve --config` reads (docs/CONFIG.md), and the lookups the
 * server makes against it (tenant by token, secret by name, mount
 * allowlist).
 *
 * Invariants of a struct cage_config that left this file: every field is
 * set (absent keys got their default), every value is within its documented
 * range, the request defaults lie within the request limits, tenant names
 * and tokens are unique, secrets and tokens are loaded, mounts_allowed
 * paths are resolved, and a non-loopback HTTP address implies tokens. It
 * is never modified again, so threads share it without locking.
 *
 * Secret values and tokens are never formatted into an error message; the
 * JSON parser's own messages are cut before the excerpt of input they
 * quote, which could be one. */
#include "config.h"
#include "config_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "core/spec.h"
#include "egress.h"
#include "redact.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define FIELD_MAX     192
#define HTTP_ADDR_MAX 64
#define RETENTION_MAX (365ULL * 24 * 3600)
#define DRAIN_MAX     3600 /* drain_timeout_s */
#define SUN_PATH_MAX  (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

static void config_freep(struct cage_config **p)
{
        cage_config_free(*p);
}

#define _cleanup_config_ __attribute__((cleanup(config_freep)))

/* ---- small validators ------------------------------------------------- */

static void wipe(void *p, size_t len)
{
        if (p)
                explicit_bzero(p, len);
}

static void field_name(char *buf, const char *where, const char *key)
{
        snprintf(buf, FIELD_MAX, "%.100s%s%.64s", where, *where ? "." : "", key);
}

/* Absolute, no "." / ".." / empty components, no trailing slash (except
 * "/" itself), at most CAGE_CONFIG_PATH_MAX bytes. */
static bool path_is_clean(const char *p)
{
        if (!p || p[0] != '/' || strlen(p) > CAGE_CONFIG_PATH_MAX)
                return false;
        if (p[1] == '\0')
                return true;
        for (const char *c = p + 1;;) {
                const char *end = strchrnul(c, '/');
                size_t n = (size_t)(end - c);
                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                if (!*end)
                        return true;
                c = end + 1;
        }
}

/* [A-Za-z_][A-Za-z0-9_]* of 1..max bytes; upper_only for secret names. */
static bool env_name_is_valid(const char *s, size_t max, bool upper_only)
{
        static const char upper[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_";
        static const char any[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_";
        const char *first = upper_only ? upper : any;
        size_t n = strlen(s);
        if (n == 0 || n > max || !strchr(first, s[0]))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!strchr(first, s[i]) && !(s[i] >= '0' && s[i] <= '9'))
                        return false;
        return true;
}

static bool tenant_name_is_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CAGE_CONFIG_TENANT_NAME_MAX)
                return false;
        if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* RFC 6750 b64token: what an Authorization: Bearer header can carry. */
static bool token_is_valid(const char *s, size_t n)
{
        if (n < CAGE_CONFIG_TOKEN_MIN || n > CAGE_CONFIG_TOKEN_MAX)
                return false;
        size_t body = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                "0123456789-._~+/");
        if (body == 0)
                return false;
        return body + strspn(s + body, "=") == n;
}

/* ---- generic JSON field access ----------------------------------------- */

/* Refuses any key of obj that is not in allowed[] (NULL-terminated). */
int config_check_keys(json_t *obj, const char *where, const char *const *allowed,
                      struct cage_error *err)
{
        const char *key;
        json_t *v;
        json_object_foreach(obj, key, v)
        {
                (void)v;
                bool known = false;
                for (size_t i = 0; allowed[i] && !known; i++)
                        known = strcmp(key, allowed[i]) == 0;
                if (known)
                        continue;
                char list[256] = "";
                for (size_t i = 0; allowed[i]; i++) {
                        size_t n = strlen(list);
                        snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", allowed[i]);
                }
                return cage_fail(err, -EINVAL, "%s%s%.64s: unknown key (allowed: %s)", where,
                                 *where ? "." : "", key, list);
        }
        return 0;
}

/* An optional object member: 0 absent, 1 present, < 0 wrong type. */
/* obj[key] with its field name in f ("where.key"); NULL when absent. */
static json_t *member(json_t *obj, const char *where, const char *key, char f[FIELD_MAX])
{
        json_t *v = json_object_get(obj, key);
        if (v)
                field_name(f, where, key);
        return v;
}

int config_get_object(json_t *obj, const char *where, const char *key, json_t **ret,
                      struct cage_error *err)
{
        char f[FIELD_MAX];
        json_t *v = member(obj, where, key, f);
        if (!v)
                return 0;
        if (!json_is_object(v))
                return cage_fail(err, -EINVAL, "%s: must be an object", f);
        *ret = v;
        return 1;
}

/* An optional string member of 1..max bytes: 0 absent, 1 present; *ret is
 * borrowed from the JSON tree. Never echoes the value (it may be secret). */
int config_get_string(json_t *obj, const char *where, const char *key, size_t max, const char **ret,
                      struct cage_error *err)
{
        char f[FIELD_MAX];
        json_t *v = member(obj, where, key, f);
        if (!v)
                return 0;
        if (!json_is_string(v))
                return cage_fail(err, -EINVAL, "%s: must be a string", f);
        size_t n = json_string_length(v);
        if (n == 0 || n > max)
                return cage_fail(err, -EINVAL, "%s: must be 1..%zu bytes long (is %zu)", f, max, n);
        *ret = json_string_value(v);
        return 1;
}

static int get_path(json_t *obj, const char *where, const char *key, const char **ret,
                    struct cage_error *err)
{
        int r = config_get_string(obj, where, key, CAGE_CONFIG_PATH_MAX, ret, err);
        if (r <= 0)
                return r;
        if (!path_is_clean(*ret)) {
                char f[FIELD_MAX];
                field_name(f, where, key);
                return cage_fail(err, -EINVAL,
                                 "%s: \"%s\" must be an absolute path without \".\", \"..\", "
                                 "empty components or a trailing slash",
                                 f, *ret);
        }
        return 1;
}

static int get_bool(json_t *obj, const char *where, const char *key, bool *ret,
                    struct cage_error *err)
{
        json_t *v = json_object_get(obj, key);
        if (!v)
                return 0;
        if (!json_is_boolean(v)) {
                char f[FIELD_MAX];
                field_name(f, where, key);
                return cage_fail(err, -EINVAL, "%s: must be true or false", f);
        }
        *ret = json_is_true(v);
        return 1;
}

/* ---- numbers: one table for limits, one for request defaults ---------- */

struct num_field {
        const char *key;
        size_t offset;
        enum num_kind kind;
        double lo, hi;
};

#define LIMIT(k, kind_, lo_, hi_)                                                                  \
        {                                                                                          \
                .key = #k, .offset = offsetof(struct cage_config_limits, k), .kind = kind_,        \
                .lo = lo_, .hi = hi_                                                               \
        }

static const struct num_field limit_fields[] = {
        LIMIT(memory_mib_max, NUM_U64, SPEC_MEMORY_MIN / MIB, SPEC_MEMORY_MAX / MIB),
        LIMIT(cpus_max, NUM_DOUBLE, SPEC_CPUS_MIN, SPEC_CPUS_MAX),
        LIMIT(pids_max, NUM_U32, SPEC_PIDS_MIN, SPEC_PIDS_MAX),
        LIMIT(disk_mib_max, NUM_U64, SPEC_DISK_MIN / MIB, SPEC_DISK_MAX / MIB),
        LIMIT(timeout_s_max, NUM_U64, 1, SPEC_TIMEOUT_MAX_MS / 1000),
        LIMIT(output_max_bytes_max, NUM_U64, 0, SPEC_OUTPUT_MAX_MAX),
        LIMIT(max_body_bytes, NUM_U64, 16 * MIB, 1 * GIB),
        LIMIT(max_sandboxes_per_tenant, NUM_U32, 0, 65536),
        LIMIT(launches_max, NUM_U32, 1, 1024),
};

/* Each request default and the limit that bounds it; its own range is
 * that limit's range. */
struct default_field {
        const char *key;
        size_t offset;
        const char *limit;
};

#define DEFAULT(k, limit_)                                                                         \
        {                                                                                          \
                .key = #k, .offset = offsetof(struct cage_config_spec_defaults, k),                \
                .limit = #limit_                                                                   \
        }

static const struct default_field default_fields[] = {
        DEFAULT(memory_mib, memory_mib_max),
        DEFAULT(cpus, cpus_max),
        DEFAULT(pids, pids_max),
        DEFAULT(disk_mib, disk_mib_max),
        DEFAULT(timeout_s, timeout_s_max),
        DEFAULT(output_max_bytes, output_max_bytes_max),
};

static const struct num_field *limit_field(const char *key)
{
        for (size_t i = 0; i < ELEMENTSOF(limit_fields); i++)
                if (strcmp(limit_fields[i].key, key) == 0)
                        return &limit_fields[i];
        return NULL;
}

static double num_load(const void *base, size_t offset, enum num_kind kind)
{
        const char *p = (const char *)base + offset;
        switch (kind) {
        case NUM_U64:
                return (double)*(const uint64_t *)p;
        case NUM_U32:
                return (double)*(const uint32_t *)p;
        default:
                return *(const double *)p;
        }
}

static void num_store(void *base, size_t offset, enum num_kind kind, double v)
{
        char *p = (char *)base + offset;
        switch (kind) {
        case NUM_U64:
                *(uint64_t *)p = (uint64_t)v;
                break;
        case NUM_U32:
                *(uint32_t *)p = (uint32_t)v;
                break;
        default:
                *(double *)p = v;
        }
}

static void num_format(char *buf, size_t size, enum num_kind kind, double v)
{
        if (kind == NUM_DOUBLE)
                snprintf(buf, size, "%g", v);
        else
                snprintf(buf, size, "%llu", (unsigned long long)v);
}

/* Reads obj[key] as a number of `kind` within [lo, hi]: 0 absent, 1 set. */
int config_get_number(json_t *obj, const char *where, const char *key, enum num_kind kind,
                      double lo, double hi, double *ret, struct cage_error *err)
{
        char f[FIELD_MAX], los[32], his[32];
        json_t *v = member(obj, where, key, f);
        if (!v)
                return 0;
        num_format(los, sizeof(los), kind, lo);
        num_format(his, sizeof(his), kind, hi);
        double x;
        if (kind == NUM_DOUBLE ? !json_is_number(v) : !json_is_integer(v))
                return cage_fail(err, -EINVAL, "%s: must be %s (allowed %s..%s)", f,
                                 kind == NUM_DOUBLE ? "a number" : "an integer", los, his);
        if (json_is_integer(v)) {
                json_int_t i = json_integer_value(v);
                if (i < 0 || (double)i < lo || (double)i > hi)
                        return cage_fail(err, -EINVAL, "%s: %lld is out of range (allowed %s..%s)",
                                         f, (long long)i, los, his);
                x = (double)i;
        } else {
                x = json_real_value(v);
                if (!isfinite(x) || x < lo || x > hi)
                        return cage_fail(err, -EINVAL, "%s: %g is out of range (allowed %s..%s)", f,
                                         x, los, his);
        }
        *ret = x;
        return 1;
}

static unsigned host_cpus(void)
{
        cpu_set_t set;
        long n = 0;
        if (sched_getaffinity(0, sizeof(set), &set) == 0)
                n = CPU_COUNT(&set);
        if (n <= 0)
                n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
                n = 1;
        return n > (long)SPEC_CPUS_MAX ? (unsigned)SPEC_CPUS_MAX : (unsigned)n;
}

static int parse_limits(json_t *root, struct cage_config_limits *l, struct cage_error *err)
{
        *l = (struct cage_config_limits){
                .memory_mib_max = 4096,
                .cpus_max = host_cpus(),
                .pids_max = 4096,
                .disk_mib_max = 16384,
                .timeout_s_max = 3600,
                .output_max_bytes_max = 16 * MIB,
                .max_body_bytes = 16 * MIB,
                .max_sandboxes_per_tenant = 64,
                .launches_max = 2 * host_cpus() < 4 ? 4 : 2 * host_cpus(),
        };
        json_t *obj = NULL;
        int r = config_get_object(root, "", "limits", &obj, err);
        if (r <= 0)
                return r;
        const char *keys[ELEMENTSOF(limit_fields) + 1] = {NULL};
        for (size_t i = 0; i < ELEMENTSOF(limit_fields); i++)
                keys[i] = limit_fields[i].key;
        if ((r = config_check_keys(obj, "limits", keys, err)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(limit_fields); i++) {
                const struct num_field *nf = &limit_fields[i];
                double v;
                r = config_get_number(obj, "limits", nf->key, nf->kind, nf->lo, nf->hi, &v, err);
                if (r < 0)
                        return r;
                if (r > 0)
                        num_store(l, nf->offset, nf->kind, v);
        }
        return 0;
}

/* Request defaults. An explicit default above its limit is an error; a
 * built-in default above a lowered limit becomes that limit. */
static int parse_defaults(json_t *root, const struct cage_config_limits *l,
                          struct cage_config_spec_defaults *d, struct cage_error *err)
{
        *d = (struct cage_config_spec_defaults){
                .memory_mib = 512,
                .cpus = 1.0,
                .pids = 256,
                .disk_mib = 1024,
                .timeout_s = 30,
                .output_max_bytes = 65536,
        };
        json_t *obj = NULL;
        int r = config_get_object(root, "", "defaults", &obj, err);
        if (r < 0)
                return r;
        const char *keys[ELEMENTSOF(default_fields) + 1] = {NULL};
        for (size_t i = 0; i < ELEMENTSOF(default_fields); i++)
                keys[i] = default_fields[i].key;
        if (obj && (r = config_check_keys(obj, "defaults", keys, err)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(default_fields); i++) {
                const struct default_field *df = &default_fields[i];
                const struct num_field *lf = limit_field(df->limit);
                if (!lf) /* the two tables disagree: a programming error */
                        return cage_fail(err, -EINVAL, "defaults.%s: no limit %s", df->key,
                                         df->limit);
                double v = num_load(d, df->offset, lf->kind);
                bool explicit = false;
                if (obj) {
                        r = config_get_number(obj, "defaults", df->key, lf->kind, lf->lo, lf->hi,
                                              &v, err);
                        if (r < 0)
                                return r;
                        explicit = r > 0;
                }
                double max = num_load(l, lf->offset, lf->kind);
                if (v > max && explicit) {
                        char vs[32], ms[32];
                        num_format(vs, sizeof(vs), lf->kind, v);
                        num_format(ms, sizeof(ms), lf->kind, max);
                        return cage_fail(err, -EINVAL,
                                         "defaults.%s: %s is above limits.%s (%s); a default "
                                         "must lie within the limits",
                                         df->key, vs, lf->key, ms);
                }
                num_store(d, df->offset, lf->kind, v > max ? max : v);
        }
        return 0;
}

/* ---- files: secrets and tokens ---------------------------------------- */

/* Reads a whole regular file (symlinks followed) of at most max bytes, with
 * one trailing "\n" or "\r\n" removed. Errors name `field` and the path,
 * never the content. */
static int read_secret_file(const char *path, size_t max, const char *field, char **ret,
                            size_t *ret_len, struct cage_error *err)
{
        /* O_NONBLOCK: a FIFO at the path must not hang the server's start. */
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return cage_fail(err, -errno, "%s: cannot open \"%s\"", field, path);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "%s: cannot stat \"%s\"", field, path);
        if (!S_ISREG(st.st_mode))
                return cage_fail(err, -EINVAL, "%s: \"%s\" is not a regular file", field, path);
        if ((uint64_t)st.st_size > max)
                return cage_fail(err, -EINVAL, "%s: \"%s\" is larger than %zu bytes", field, path,
                                 max);
        _cleanup_free_ char *buf = malloc(max + 2);
        if (!buf)
                return cage_fail(err, -ENOMEM, "%s: reading \"%s\"", field, path);
        ssize_t n = read_full(fd, buf, max + 1); /* one more, to catch a growing file */
        if (n < 0) {
                explicit_bzero(buf, max + 2);
                return cage_fail(err, (int)n, "%s: cannot read \"%s\"", field, path);
        }
        if ((size_t)n > max) {
                explicit_bzero(buf, max + 2);
                return cage_fail(err, -EINVAL, "%s: \"%s\" is larger than %zu bytes", field, path,
                                 max);
        }
        size_t len = (size_t)n;
        if (len > 0 && buf[len - 1] == '\n')
                len--;
        if (len > 0 && buf[len - 1] == '\r' && (size_t)n > len)
                len--;
        buf[len] = '\0';
        if (memchr(buf, '\0', len)) {
                explicit_bzero(buf, max + 2);
                return cage_fail(err, -EINVAL, "%s: \"%s\" contains a NUL byte", field, path);
        }
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

static int strdup_to(char **dst, const char *src)
{
        *dst = strdup(src);
        return *dst ? 0 : -ENOMEM;
}

/* One secret: exactly one of {"value"}, {"file"}, {"env"}. */
static int load_secret(json_t *entry, const char *name, struct cage_secret *ret,
                       struct cage_error *err)
{
        char where[FIELD_MAX];
        snprintf(where, sizeof(where), "secrets.%s", name);
        if (!json_is_object(entry))
                return cage_fail(err, -EINVAL,
                                 "%s: must be an object with one of \"value\", \"file\" or \"env\"",
                                 where);
        static const char *const keys[] = {"value", "file", "env", NULL};
        int r = config_check_keys(entry, where, keys, err);
        if (r < 0)
                return r;
        if (json_object_size(entry) != 1)
                return cage_fail(err, -EINVAL,
                                 "%s: must have exactly one of \"value\", \"file\" or \"env\"",
                                 where);
        const char *value = NULL, *path = NULL, *var = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if ((r = config_get_string(entry, where, "value", CAGE_CONFIG_SECRET_MAX, &value, err)) <
                    0 ||
            (r = get_path(entry, where, "file", &path, err)) < 0 ||
            (r = config_get_string(entry, where, "env", CAGE_CONFIG_ENV_NAME_MAX, &var, err)) < 0)
                return r;
        if (value) {
                len = strlen(value);
        } else if (path) {
                char f[FIELD_MAX];
                field_name(f, where, "file");
                if ((r = read_secret_file(path, CAGE_CONFIG_SECRET_MAX, f, &buf, &len, err)) < 0)
                        return r;
                value = buf;
        } else {
                if (!env_name_is_valid(var, CAGE_CONFIG_ENV_NAME_MAX, false))
                        return cage_fail(err, -EINVAL,
                                         "%s.env: \"%s\" is not a variable name "
                                         "([A-Za-z_][A-Za-z0-9_]*)",
                                         where, var);
                value = getenv(var);
                if (!value)
                        return cage_fail(err, -EINVAL,
                                         "%s.env: variable %s is not set in the server's "
                                         "environment",
                                         where, var);
                len = strlen(value);
                if (len > CAGE_CONFIG_SECRET_MAX)
                        return cage_fail(err, -EINVAL, "%s.env: %s is longer than %d bytes", where,
                                         var, CAGE_CONFIG_SECRET_MAX);
        }
        if (len == 0)
                return cage_fail(err, -EINVAL, "%s: the value is empty", where);
        char *copy = malloc(len + 1);
        char *name_copy = strdup(name);
        if (copy)
                memcpy(copy, value, len + 1);
        wipe(buf, len);
        if (!copy || !name_copy) {
                free(copy);
                free(name_copy);
                return cage_fail(err, -ENOMEM, "%s", where);
        }
        *ret = (struct cage_secret){name_copy, copy, len};
        return 0;
}

static int parse_secrets(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *obj = NULL;
        int r = config_get_object(root, "", "secrets", &obj, err);
        if (r <= 0)
                return r;
        size_t n = json_object_size(obj);
        if (n > CAGE_CONFIG_SECRETS_MAX)
                return cage_fail(err, -EINVAL, "secrets: %zu entries (allowed at most %d)", n,
                                 CAGE_CONFIG_SECRETS_MAX);
        cfg->secrets = calloc(n ? n : 1, sizeof(*cfg->secrets));
        if (!cfg->secrets)
                return cage_fail(err, -ENOMEM, "secrets");
        const char *name;
        json_t *entry;
        json_object_foreach(obj, name, entry)
        {
                if (!env_name_is_valid(name, CAGE_CONFIG_SECRET_NAME_MAX, true))
                        return cage_fail(err, -EINVAL,
                                         "secrets.%.64s: a secret name must match "
                                         "[A-Z_][A-Z0-9_]* (at most %d characters): it becomes "
                                         "an environment variable",
                                         name, CAGE_CONFIG_SECRET_NAME_MAX);
                if ((r = load_secret(entry, name, &cfg->secrets[cfg->n_secrets], err)) < 0)
                        return r;
                cfg->n_secrets++;
        }
        return 0;
}

/* ---- tenants ----------------------------------------------------------- */

static int load_tenant(json_t *entry, size_t i, struct cage_tenant *ret, struct cage_error *err)
{
        char where[FIELD_MAX];
        snprintf(where, sizeof(where), "tenants[%zu]", i);
        if (!json_is_object(entry))
                return cage_fail(err, -EINVAL,
                                 "%s: must be an object {\"name\", \"token\" or \"token_file\"}",
                                 where);
        static const char *const keys[] = {"name",    "token",  "token_file", "operator",
                                           "secrets", "quotas", NULL};
        int r = config_check_keys(entry, where, keys, err);
        if (r < 0)
                return r;
        const char *name = NULL, *token = NULL, *path = NULL;
        if ((r = config_get_string(entry, where, "name", CAGE_CONFIG_TENANT_NAME_MAX + 1, &name,
                                   err)) < 0 ||
            (r = config_get_string(entry, where, "token", CAGE_CONFIG_TOKEN_MAX, &token, err)) <
                    0 ||
            (r = get_path(entry, where, "token_file", &path, err)) < 0)
                return r;
        if (!name)
                return cage_fail(err, -EINVAL, "%s.name: required", where);
        if (!tenant_name_is_valid(name))
                return cage_fail(err, -EINVAL,
                                 "%s.name: \"%s\" must match [a-z0-9][a-z0-9_-]* (at most %d "
                                 "characters)",
                                 where, name, CAGE_CONFIG_TENANT_NAME_MAX);
        if (!token == !path)
                return cage_fail(err, -EINVAL,
                                 "%s: needs exactly one of \"token\" or \"token_file\"", where);
        _cleanup_free_ char *buf = NULL;
        size_t len;
        char f[FIELD_MAX];
        if (path) {
                field_name(f, where, "token_file");
                if ((r = read_secret_file(path, CAGE_CONFIG_SECRET_MAX, f, &buf, &len, err)) < 0)
                        return r;
                token = buf;
        } else {
                field_name(f, where, "token");
                len = strlen(token);
        }
        if (!token_is_valid(token, len)) {
                wipe(buf, len);
                return cage_fail(err, -EINVAL,
                                 "%s: a token must be %d..%d characters of A-Z a-z 0-9 - . _ ~ + "
                                 "/ (then optional '=' padding); this one has %zu",
                                 f, CAGE_CONFIG_TOKEN_MIN, CAGE_CONFIG_TOKEN_MAX, len);
        }
        char *name_copy = strdup(name);
        char *token_copy = strdup(token);
        wipe(buf, len);
        if (!name_copy || !token_copy) {
                free(name_copy);
                wipe(token_copy, len);
                free(token_copy);
                return cage_fail(err, -ENOMEM, "%s", where);
        }
        *ret = (struct cage_tenant){.name = name_copy, .token = token_copy, .token_len = len};
        return 0;
}

/* tenants[i].secrets: names of the config's secrets (borrowed from it). */
static int load_tenant_secrets(const struct cage_config *cfg, json_t *entry, const char *where,
                               struct cage_tenant *t, struct cage_error *err)
{
        json_t *arr = json_object_get(entry, "secrets");
        if (!arr)
                return 0;
        if (!json_is_array(arr) || json_array_size(arr) > CAGE_CONFIG_SECRETS_MAX)
                return cage_fail(err, -EINVAL, "%s.secrets: must be an array of at most %d names",
                                 where, CAGE_CONFIG_SECRETS_MAX);
        t->secrets_listed = true;
        t->secrets = calloc(json_array_size(arr) + 1, sizeof(*t->secrets));
        if (!t->secrets)
                return cage_fail(err, -ENOMEM, "%s.secrets", where);
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
        {
                size_t k = 0;
                while (k < cfg->n_secrets &&
                       (!json_is_string(v) || strcmp(cfg->secrets[k].name, json_string_value(v))))
                        k++;
                if (k == cfg->n_secrets)
                        return cage_fail(err, -EINVAL,
                                         "%s.secrets[%zu]: \"%.64s\" is not one of the config's "
                                         "secrets",
                                         where, i, json_is_string(v) ? json_string_value(v) : "");
                t->secrets[t->n_secrets++] = cfg->secrets[k].name;
        }
        return 0;
}

/* The keys of a tenant besides its name and token. */
static int load_tenant_rights(const struct cage_config *cfg, json_t *entry, size_t i,
                              struct cage_tenant *t, struct cage_error *err)
{
        char where[FIELD_MAX];
        snprintf(where, sizeof(where), "tenants[%zu]", i);
        int r = get_bool(entry, where, "operator", &t->operator, err);
        return r < 0 ? r : load_tenant_secrets(cfg, entry, where, t, err);
}

/* The array root[key] with at most max entries, and a zeroed allocation of
 * one element of `size` per entry (at least one) in *ret. 0 with *ret_arr
 * NULL when the key is absent. */
static int bounded_array(json_t *root, const char *key, size_t max, size_t size, json_t **ret_arr,
                         void **ret, struct cage_error *err)
{
        json_t *arr = json_object_get(root, key);
        *ret_arr = NULL;
        if (!arr)
                return 0;
        if (!json_is_array(arr))
                return cage_fail(err, -EINVAL, "%s: must be an array", key);
        size_t n = json_array_size(arr);
        if (n > max)
                return cage_fail(err, -EINVAL, "%s: %zu entries (allowed at most %zu)", key, n,
                                 max);
        if (!(*ret = calloc(n ? n : 1, size)))
                return cage_fail(err, -ENOMEM, "%s", key);
        *ret_arr = arr;
        return 0;
}

static int parse_tenants(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *arr;
        int r = bounded_array(root, "tenants", CAGE_CONFIG_TENANTS_MAX, sizeof(*cfg->tenants), &arr,
                              (void **)&cfg->tenants, err);
        if (r < 0 || !arr)
                return r;
        size_t n = json_array_size(arr);
        for (size_t i = 0; i < n; i++) {
                struct cage_tenant *t = &cfg->tenants[i];
                r = load_tenant(json_array_get(arr, i), i, t, err);
                if (r < 0)
                        return r;
                cfg->n_tenants++;
                if ((r = load_tenant_rights(cfg, json_array_get(arr, i), i, t, err)) < 0)
                        return r;
                for (size_t j = 0; j < i; j++) {
                        const struct cage_tenant *o = &cfg->tenants[j];
                        if (strcmp(o->name, t->name) == 0)
                                return cage_fail(err, -EINVAL,
                                                 "tenants[%zu].name: \"%s\" is already used by "
                                                 "tenants[%zu]",
                                                 i, t->name, j);
                        if (o->token_len == t->token_len &&
                            memcmp(o->token, t->token, t->token_len) == 0)
                                return cage_fail(err, -EINVAL,
                                                 "tenants[%zu].token: the same token as "
                                                 "tenants[%zu] (\"%s\"); every tenant needs its "
                                                 "own token",
                                                 i, j, o->name);
                }
        }
        return 0;
}

/* ---- env allowlist, mounts --------------------------------------------- */

static int parse_env_allowlist(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *arr;
        int r = bounded_array(root, "env_allowlist", CAGE_CONFIG_ENV_ALLOW_MAX, sizeof(char *),
                              &arr, (void **)&cfg->env_allowlist, err);
        if (r < 0 || !arr)
                return r;
        size_t n = json_array_size(arr);
        for (size_t i = 0; i < n; i++) {
                json_t *v = json_array_get(arr, i);
                const char *s = json_string_value(v);
                if (!s || !env_name_is_valid(s, CAGE_CONFIG_ENV_NAME_MAX, false))
                        return cage_fail(err, -EINVAL,
                                         "env_allowlist[%zu]: must be a variable name "
                                         "([A-Za-z_][A-Za-z0-9_]*, at most %d characters)",
                                         i, CAGE_CONFIG_ENV_NAME_MAX);
                if (strdup_to(&cfg->env_allowlist[i], s) < 0)
                        return cage_fail(err, -ENOMEM, "env_allowlist");
                cfg->n_env_allowlist++;
        }
        return 0;
}

static int parse_mounts(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *arr;
        int r = bounded_array(root, "mounts_allowed", CAGE_CONFIG_MOUNTS_MAX,
                              sizeof(*cfg->mounts_allowed), &arr, (void **)&cfg->mounts_allowed,
                              err);
        if (r < 0 || !arr)
                return r;
        size_t n = json_array_size(arr);
        static const char *const keys[] = {"path", "writable", NULL};
        for (size_t i = 0; i < n; i++) {
                char where[FIELD_MAX];
                snprintf(where, sizeof(where), "mounts_allowed[%zu]", i);
                json_t *e = json_array_get(arr, i);
                struct cage_mount_rule *m = &cfg->mounts_allowed[i];
                const char *path = NULL;
                if (!json_is_object(e))
                        return cage_fail(err, -EINVAL,
                                         "%s: must be an object {\"path\", \"writable\"}", where);
                if ((r = config_check_keys(e, where, keys, err)) < 0 ||
                    (r = get_path(e, where, "path", &path, err)) < 0 ||
                    (r = get_bool(e, where, "writable", &m->writable, err)) < 0)
                        return r;
                if (!path)
                        return cage_fail(err, -EINVAL, "%s.path: required", where);
                if (strcmp(path, "/") == 0)
                        return cage_fail(err, -EINVAL,
                                         "%s.path: \"/\" would let sandboxes mount the whole host",
                                         where);
                _cleanup_free_ char *resolved = realpath(path, NULL);
                if (!resolved)
                        return cage_fail(err, -errno, "%s.path: cannot resolve \"%s\"", where,
                                         path);
                if (strcmp(resolved, "/") == 0)
                        return cage_fail(err, -EINVAL,
                                         "%s.path: \"%s\" resolves to \"/\", which would let "
                                         "sandboxes mount the whole host",
                                         where, path);
                if (strdup_to(&m->configured, path) < 0)
                        return cage_fail(err, -ENOMEM, "%s", where);
                m->path = TAKE_PTR(resolved);
                cfg->n_mounts_allowed++;
        }
        return 0;
}

/* upstream_servers: MCP servers whose tools Python code may call as
 * tools.<name>(...) ("code mode"). Each: {name, command: [absolute program,
 * args...], allow?: [tool names]}. Kept as validated JSON. */
static bool upstream_name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
                        return false;
        return true;
}

static int parse_upstream(json_t *e, const char *where, struct cage_error *err)
{
        static const char *const keys[] = {"name", "command", "allow", NULL};
        const char *name = NULL;
        int r;
        if (!json_is_object(e))
                return cage_fail(err, -EINVAL, "%s: must be an object {name, command, allow}",
                                 where);
        if ((r = config_check_keys(e, where, keys, err)) < 0 ||
            (r = config_get_string(e, where, "name", 64, &name, err)) < 0)
                return r;
        if (!name || !upstream_name_ok(name))
                return cage_fail(err, -EINVAL, "%s.name: required, 1..64 of [a-z0-9_]", where);
        json_t *cmd = json_object_get(e, "command");
        if (!json_is_array(cmd) || json_array_size(cmd) < 1 || json_array_size(cmd) > 64)
                return cage_fail(err, -EINVAL,
                                 "%s.command: required, a list of 1..64 strings (program first)",
                                 where);
        size_t i;
        json_t *a;
        json_array_foreach(
                cmd, i,
                a) if (!json_is_string(a) || json_string_length(a) > CAGE_CONFIG_PATH_MAX ||
                       (i == 0 &&
                        json_string_value(a)[0] !=
                                '/')) return cage_fail(err, -EINVAL,
                                                       "%s.command[%zu]: must be a string%s", where,
                                                       i,
                                                       i == 0 ? " with the program's absolute path"
                                                              : "");
        json_t *allow = json_object_get(e, "allow");
        if (allow && (!json_is_array(allow) || json_array_size(allow) > 1024))
                return cage_fail(err, -EINVAL, "%s.allow: a list of at most 1024 tool names",
                                 where);
        json_array_foreach(allow, i,
                           a) if (!json_is_string(a) || !json_string_length(a) ||
                                  json_string_length(a) >
                                          128) return cage_fail(err, -EINVAL,
                                                                "%s.allow[%zu]: a tool name", where,
                                                                i);
        return 0;
}

/* One `pool` entry: {"image": "host" or a reference images.allow admits,
 * "size": 0..CAGE_CONFIG_POOL_MAX (default 1)}. */
static int parse_pool_image(json_t *e, const char *where, const struct cage_config *cfg,
                            struct cage_pool_image *ret, struct cage_error *err)
{
        static const char *const keys[] = {"image", "size", NULL};
        double size;
        int r = json_is_object(e) ? config_check_keys(e, where, keys, err)
                                  : cage_fail(err, -EINVAL, "%s: must be {image, size}", where);
        if (r < 0)
                return r;
        const char *image = json_string_value(json_object_get(e, "image"));
        if (!image)
                return cage_fail(err, -EINVAL, "%s.image: required, \"host\" or a reference",
                                 where);
        struct cage_image_ref ref;
        if (strcmp(image, "host") != 0) {
                if ((r = cage_image_ref_parse(image, &ref, err)) < 0)
                        return r;
                if (!cage_images_config_allows(&cfg->images, ref.full))
                        return cage_fail(err, -EINVAL, "%s.image: not allowed by images.allow",
                                         where);
                image = ref.full;
        }
        r = config_get_number(e, where, "size", NUM_U64, 0, CAGE_CONFIG_POOL_MAX, &size, err);
        if (r < 0)
                return r;
        ret->size = r ? (uint32_t)size : 1;
        ret->image = strdup(image);
        return ret->image ? 0 : cage_fail(err, -ENOMEM, "pool");
}

static int parse_pool(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *arr;
        int r = bounded_array(root, "pool", CAGE_CONFIG_POOL_IMAGES_MAX, sizeof(*cfg->pool_images),
                              &arr, (void **)&cfg->pool_images, err);
        if (r < 0 || !arr)
                return r;
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e)
        {
                char where[FIELD_MAX];
                snprintf(where, sizeof(where), "pool[%zu]", i);
                r = parse_pool_image(e, where, cfg, &cfg->pool_images[i], err);
                if (r < 0)
                        return r;
                cfg->n_pool_images++;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(cfg->pool_images[j].image, cfg->pool_images[i].image) == 0)
                                return cage_fail(err, -EINVAL, "%s.image: listed twice", where);
        }
        return 0;
}

static int parse_upstreams(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *arr = json_object_get(root, "upstream_servers");
        if (!arr)
                return 0;
        if (!json_is_array(arr) || json_array_size(arr) > CAGE_CONFIG_UPSTREAMS_MAX)
                return cage_fail(err, -EINVAL, "upstream_servers: a list of at most %d servers",
                                 CAGE_CONFIG_UPSTREAMS_MAX);
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e)
        {
                char where[FIELD_MAX];
                snprintf(where, sizeof(where), "upstream_servers[%zu]", i);
                int r = parse_upstream(e, where, err);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < i; j++)
                        if (json_equal(json_object_get(e, "name"),
                                       json_object_get(json_array_get(arr, j), "name")))
                                return cage_fail(err, -EINVAL, "%s.name: used twice", where);
        }
        cfg->upstream_servers = json_deep_copy(arr);
        return cfg->upstream_servers ? 0 : cage_fail(err, -ENOMEM, "upstream_servers");
}

int cage_config_add_upstream(struct cage_config *cfg, const char *spec, struct cage_error *err)
{
        const char *eq = strchr(spec, '=');
        if (!eq || eq == spec)
                return cage_fail(err, -EINVAL, "upstream \"%.64s\": NAME=COMMAND ARGS...", spec);
        json_auto_t *cmd = json_array();
        _cleanup_free_ char *copy = strdup(eq + 1);
        if (!cmd || !copy)
                return cage_fail(err, -ENOMEM, "upstream");
        char *save = NULL;
        for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save))
                json_array_append_new(cmd, json_string(w));
        json_auto_t *entry =
                json_pack("{s:s%, s:O}", "name", spec, (size_t)(eq - spec), "command", cmd);
        if (!entry)
                return cage_fail(err, -EINVAL, "upstream \"%.64s\": not valid UTF-8", spec);
        if (!cfg->upstream_servers && !(cfg->upstream_servers = json_array()))
                return cage_fail(err, -ENOMEM, "upstream");
        json_array_append(cfg->upstream_servers, entry);
        json_auto_t *all = json_object();
        json_object_set(all, "upstream_servers", cfg->upstream_servers);
        json_t *checked = cfg->upstream_servers;
        cfg->upstream_servers = NULL;
        int r = parse_upstreams(all, cfg, err); /* the same checks as the file's */
        if (r < 0) {
                json_array_remove(checked, json_array_size(checked) - 1);
                cfg->upstream_servers = checked;
                return r;
        }
        json_decref(checked);
        return 0;
}

/* ---- data_dir, listen, audit_log -------------------------------------- */

/* /var/lib/codecage as root, else $XDG_DATA_HOME/codecage, else
 * ~/.local/share/codecage. */
static int default_data_dir(char **ret, struct cage_error *err)
{
        if (geteuid() == 0)
                return strdup_to(ret, "/var/lib/codecage") < 0 ? cage_fail(err, -ENOMEM, "data_dir")
                                                               : 0;
        const char *xdg = getenv("XDG_DATA_HOME");
        const char *home = getenv("HOME");
        char pwbuf[4096];
        struct passwd pw, *pwp = NULL;
        const char *base, *suffix;
        if (xdg && xdg[0] == '/') { /* the XDG spec: ignore relative values */
                base = xdg;
                suffix = "/codecage";
        } else {
                if ((!home || home[0] != '/') &&
                    getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
                        home = pwp->pw_dir;
                if (!home || home[0] != '/')
                        return cage_fail(err, -EINVAL,
                                         "data_dir: no default (HOME is unset and the user has "
                                         "no home directory); set data_dir");
                base = home;
                suffix = "/.local/share/codecage";
        }
        size_t n = strlen(base);
        while (n > 1 && base[n - 1] == '/')
                n--;
        if (n == 1)
                n = 0; /* base "/" */
        char *s;
        if (asprintf(&s, "%.*s%s", (int)n, base, suffix) < 0)
                return cage_fail(err, -ENOMEM, "data_dir");
        if (!path_is_clean(s)) {
                int r = cage_fail(err, -EINVAL,
                                  "data_dir: the default \"%.256s\" is not a clean absolute path; "
                                  "set data_dir",
                                  s);
                free(s);
                return r;
        }
        *ret = s;
        return 0;
}

static bool addr_is_loopback(const struct sockaddr_storage *ss)
{
        if (ss->ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
                return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        }
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
                return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
}

/* "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" (= 127.0.0.1) into *ss,
 * ready for bind(); field names the key in the message. */
int config_parse_addr(const char *field, const char *s, struct sockaddr_storage *ss,
                      socklen_t *ss_len, bool *loopback, struct cage_error *err)
{
        char host[HTTP_ADDR_MAX + 1];
        const char *port;
        bool v6 = s[0] == '[';
        if (v6) {
                const char *close = strchr(s, ']');
                if (!close || close[1] != ':')
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(close - s - 1), s + 1);
                port = close + 2;
        } else {
                const char *colon = strrchr(s, ':');
                if (!colon)
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
                port = colon + 1;
        }
        size_t nport = strlen(port);
        if (nport == 0 || nport > 5 || strspn(port, "0123456789") != nport || atoi(port) > 65535)
                goto bad;
        if (!v6 && strcmp(host, "localhost") == 0)
                snprintf(host, sizeof(host), "127.0.0.1");
        memset(ss, 0, sizeof(*ss));
        if (v6) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
                if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
                        goto bad;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)atoi(port));
                *ss_len = sizeof(*in6);
        } else {
                struct sockaddr_in *in = (struct sockaddr_in *)ss;
                if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
                        goto bad;
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)atoi(port));
                *ss_len = sizeof(*in);
        }
        *loopback = addr_is_loopback(ss);
        return 0;
bad:
        return cage_fail(err, -EINVAL,
                         "%s: \"%s\" must be IPV4:PORT, [IPV6]:PORT or localhost:PORT "
                         "(port 0..65535)",
                         field, s);
}

/* listen.metrics: unauthenticated, so loopback only. */
static int parse_metrics_addr(const char *s, struct cage_config *cfg, struct cage_error *err)
{
        bool loopback = false;
        int r = config_parse_addr("listen.metrics", s, &cfg->metrics_addr, &cfg->metrics_addr_len,
                                  &loopback, err);
        if (r < 0)
                return r;
        if (!loopback)
                return cage_fail(err, -EINVAL,
                                 "listen.metrics: \"%s\" is not a loopback address; the metrics "
                                 "listener asks for no token, so it may only listen on "
                                 "127.0.0.0/8 or [::1] (scrape /metrics of listen.http with an "
                                 "operator's token from elsewhere)",
                                 s);
        return strdup_to(&cfg->listen_metrics, s) < 0 ? cage_fail(err, -ENOMEM, "listen.metrics")
                                                      : 0;
}

/* A listen member: a string, or null for "off". 0 absent, 1 set/null. */
static int get_listen_member(json_t *obj, const char *key, size_t max, const char **ret,
                             struct cage_error *err)
{
        json_t *v = json_object_get(obj, key);
        if (!v)
                return 0;
        *ret = NULL;
        if (json_is_null(v))
                return 1;
        return config_get_string(obj, "listen", key, max, ret, err);
}

static int parse_listen(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        const char *http = "127.0.0.1:8080", *unix_path = NULL;
        bool unix_set = false;
        json_t *obj = NULL;
        cfg->connections_per_ip = CAGE_CONFIG_CONNECTIONS_PER_IP_DEFAULT;
        int r = config_get_object(root, "", "listen", &obj, err);
        if (r < 0)
                return r;
        if (obj) {
                static const char *const keys[] = {"http", "unix", "metrics", "connections_per_ip",
                                                   NULL};
                const char *metrics = NULL;
                double per_ip = cfg->connections_per_ip;
                if ((r = config_check_keys(obj, "listen", keys, err)) < 0 ||
                    (r = config_get_number(obj, "listen", "connections_per_ip", NUM_U32, 0,
                                           CAGE_CONFIG_CONNECTIONS_MAX, &per_ip, err)) < 0 ||
                    (r = get_listen_member(obj, "http", HTTP_ADDR_MAX, &http, err)) < 0 ||
                    (r = get_listen_member(obj, "metrics", HTTP_ADDR_MAX, &metrics, err)) < 0)
                        return r;
                cfg->connections_per_ip = (uint32_t)per_ip;
                if (metrics && (r = parse_metrics_addr(metrics, cfg, err)) < 0)
                        return r;
                if ((r = get_listen_member(obj, "unix", CAGE_CONFIG_PATH_MAX, &unix_path, err)) < 0)
                        return r;
                unix_set = r > 0;
        }
        if (http) {
                if ((r = config_parse_addr("listen.http", http, &cfg->http_addr,
                                           &cfg->http_addr_len, &cfg->http_loopback, err)) < 0)
                        return r;
                if (strdup_to(&cfg->listen_http, http) < 0)
                        return cage_fail(err, -ENOMEM, "listen.http");
        }
        if (!unix_set) {
                if (asprintf(&cfg->listen_unix, "%s/codecage.sock", cfg->data_dir) < 0) {
                        cfg->listen_unix = NULL;
                        return cage_fail(err, -ENOMEM, "listen.unix");
                }
        } else if (unix_path && strdup_to(&cfg->listen_unix, unix_path) < 0) {
                return cage_fail(err, -ENOMEM, "listen.unix");
        }
        if (cfg->listen_unix) {
                if (!path_is_clean(cfg->listen_unix))
                        return cage_fail(err, -EINVAL,
                                         "listen.unix: \"%s\" must be an absolute path without "
                                         "\".\", \"..\" or empty components",
                                         cfg->listen_unix);
                if (strlen(cfg->listen_unix) > SUN_PATH_MAX)
                        return cage_fail(err, -EINVAL,
                                         "listen.unix: \"%s\" is %zu bytes, longer than the %zu a "
                                         "Unix socket path may have; set a shorter listen.unix",
                                         cfg->listen_unix, strlen(cfg->listen_unix), SUN_PATH_MAX);
        }
        if (!cfg->listen_http && !cfg->listen_unix)
                return cage_fail(err, -EINVAL,
                                 "listen: both http and unix are null; the server needs somewhere "
                                 "to listen");
        return 0;
}

/* DESIGN: without tokens, serve only on loopback or the Unix socket. */
static int check_auth_exposure(const struct cage_config *cfg, struct cage_error *err)
{
        if (!cfg->listen_http || cfg->http_loopback || cfg->n_tenants > 0)
                return 0;
        return cage_fail(err, -EINVAL,
                         "listen.http: \"%s\" is not a loopback address, and no tenants with "
                         "tokens are configured; codecage refuses to serve unauthenticated "
                         "requests beyond this machine: add tenants, or listen on 127.0.0.1, "
                         "[::1] or the Unix socket",
                         cfg->listen_http);
}

static int parse_scalars(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        double v;
        int r = config_get_number(root, "", "retention_s", NUM_U64, 0, RETENTION_MAX, &v, err);
        if (r < 0)
                return r;
        cfg->retention_s = r ? (uint64_t)v : 3600;
        r = config_get_number(root, "", "idle_timeout_s", NUM_U64, 0, RETENTION_MAX, &v, err);
        if (r < 0)
                return r;
        cfg->idle_timeout_s = r ? (uint64_t)v : 0;
        r = config_get_number(root, "", "pool_size", NUM_U64, 0, CAGE_CONFIG_POOL_MAX, &v, err);
        if (r < 0)
                return r;
        cfg->pool_size = r ? (uint32_t)v : 2;
        cfg->fork_sandboxes = true;
        if ((r = get_bool(root, "", "fork_sandboxes", &cfg->fork_sandboxes, err)) < 0)
                return r;
        r = config_get_number(root, "", "sandboxes_per_template", NUM_U64, 1,
                              CAGE_CONFIG_PER_TEMPLATE_MAX, &v, err);
        if (r < 0)
                return r;
        cfg->sandboxes_per_template = r ? (uint32_t)v : 500;
        r = config_get_number(root, "", "drain_timeout_s", NUM_U64, 0, DRAIN_MAX, &v, err);
        if (r < 0)
                return r;
        cfg->drain_timeout_s = r ? (uint64_t)v : 30;
        return 0;
}

/* ---- quotas ------------------------------------------------------------ */

/* obj (`quotas` or `tenants[i].quotas`) over *q: what it sets replaces. */
static int parse_quota_object(json_t *obj, const char *where, struct cage_quotas *q,
                              struct cage_error *err)
{
        static const char *const keys[] = {"sandboxes_running", "runs",          "sessions",
                                           "memory_mib",        "artifacts_mib", NULL};
        static const double max[] = {65536, 65536, 65536, SPEC_MEMORY_MAX / MIB,
                                     QUOTA_ARTIFACTS_MIB_MAX};
        int r = config_check_keys(obj, where, keys, err);
        double v;
        for (size_t i = 0; r >= 0 && keys[i]; i++) {
                r = config_get_number(obj, where, keys[i], i >= 3 ? NUM_U64 : NUM_U32, 0, max[i],
                                      &v, err);
                if (r <= 0)
                        continue;
                if (i == 0)
                        q->sandboxes_running = (uint32_t)v;
                else if (i == 1)
                        q->runs = (uint32_t)v;
                else if (i == 2)
                        q->sessions = (uint32_t)v;
                else if (i == 3)
                        q->memory_mib = (uint64_t)v;
                else
                        q->artifacts_mib = (uint64_t)v;
        }
        return r < 0 ? r : 0;
}

/* `quotas`, then every tenant's own on top of it. */
static int parse_quotas(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        json_t *obj = NULL;
        cfg->quotas.artifacts_mib = QUOTA_ARTIFACTS_MIB_DEFAULT;
        int r = config_get_object(root, "", "quotas", &obj, err);
        if (r < 0 || (obj && (r = parse_quota_object(obj, "quotas", &cfg->quotas, err)) < 0))
                return r;
        json_t *arr = json_object_get(root, "tenants");
        for (size_t i = 0; i < cfg->n_tenants; i++) {
                char where[FIELD_MAX];
                snprintf(where, sizeof(where), "tenants[%zu]", i);
                cfg->tenants[i].quotas = cfg->quotas;
                json_t *own = NULL;
                r = config_get_object(json_array_get(arr, i), where, "quotas", &own, err);
                snprintf(where, sizeof(where), "tenants[%zu].quotas", i);
                if (r < 0 ||
                    (own && (r = parse_quota_object(own, where, &cfg->tenants[i].quotas, err)) < 0))
                        return r;
        }
        return 0;
}

static int parse_paths(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        const char *s = NULL;
        int r = get_path(root, "", "data_dir", &s, err);
        if (r < 0)
                return r;
        if (s && strdup_to(&cfg->data_dir, s) < 0)
                return cage_fail(err, -ENOMEM, "data_dir");
        if (!s && (r = default_data_dir(&cfg->data_dir, err)) < 0)
                return r;
        s = NULL;
        if ((r = get_path(root, "", "audit_log", &s, err)) < 0)
                return r;
        if (s)
                r = strdup_to(&cfg->audit_log, s);
        else if ((r = asprintf(&cfg->audit_log, "%s/audit.jsonl", cfg->data_dir)) < 0)
                cfg->audit_log = NULL;
        if (r < 0 || !cfg->audit_log)
                return cage_fail(err, -ENOMEM, "audit_log");
        if (strlen(cfg->audit_log) > CAGE_CONFIG_PATH_MAX)
                return cage_fail(err, -EINVAL, "audit_log: longer than %d bytes",
                                 CAGE_CONFIG_PATH_MAX);
        return 0;
}

/* root may be NULL: the defaults. */
static int config_from_json(json_t *root, struct cage_config **ret, struct cage_error *err)
{
        static const char *const keys[] = {"data_dir",
                                           "listen",
                                           "limits",
                                           "defaults",
                                           "env_allowlist",
                                           "secrets",
                                           "tenants",
                                           "mounts_allowed",
                                           "retention_s",
                                           "idle_timeout_s",
                                           "audit_log",
                                           "pool_size",
                                           "fork_sandboxes",
                                           "sandboxes_per_template",
                                           "upstream_servers",
                                           "network",
                                           "pip",
                                           "fetch",
                                           "images",
                                           "pool",
                                           "quotas",
                                           "drain_timeout_s",
                                           "e2b",
                                           NULL};
        json_auto_t *empty = NULL;
        int r;
        if (!root) {
                root = empty = json_object();
                if (!root)
                        return cage_fail(err, -ENOMEM, "config");
        }
        if (!json_is_object(root))
                return cage_fail(err, -EINVAL, "config: the top level must be a JSON object");
        if ((r = config_check_keys(root, "", keys, err)) < 0)
                return r;
        _cleanup_config_ struct cage_config *cfg = calloc(1, sizeof(*cfg));
        if (!cfg)
                return cage_fail(err, -ENOMEM, "config");
        if ((r = parse_paths(root, cfg, err)) < 0 ||
            (r = parse_limits(root, &cfg->limits, err)) < 0 ||
            (r = parse_defaults(root, &cfg->limits, &cfg->defaults, err)) < 0 ||
            (r = parse_env_allowlist(root, cfg, err)) < 0 ||
            (r = parse_secrets(root, cfg, err)) < 0 || (r = parse_tenants(root, cfg, err)) < 0 ||
            (r = parse_mounts(root, cfg, err)) < 0 || (r = parse_scalars(root, cfg, err)) < 0 ||
            (r = parse_upstreams(root, cfg, err)) < 0 || (r = parse_listen(root, cfg, err)) < 0 ||
            (r = check_auth_exposure(cfg, err)) < 0 ||
            (r = config_parse_network(root, cfg, err)) < 0 ||
            (r = cage_images_config_parse(json_object_get(root, "images"), &cfg->images, err)) <
                    0 ||
            (r = parse_pool(root, cfg, err)) < 0 || (r = parse_quotas(root, cfg, err)) < 0 ||
            (r = config_parse_e2b(root, cfg, err)) < 0)
                return r;
        cfg->images.resolve = egress_registry_resolve;
        cfg->images.resolve_policy = &cfg->network;
        *ret = TAKE_PTR(cfg);
        return 0;
}

int cage_config_defaults(struct cage_config **ret, struct cage_error *err)
{
        return config_from_json(NULL, ret, err);
}

/* Parses text as JSON; the parser's message is cut before " near '...'",
 * which quotes input and could quote a secret. */
static int parse_json(const char *text, size_t len, const char *origin, json_t **ret,
                      struct cage_error *err)
{
        json_error_t jerr;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                char *near = strstr(jerr.text, " near ");
                if (near)
                        *near = '\0';
                return cage_fail(err, -EINVAL, "%s:%d:%d: %s", origin, jerr.line, jerr.column,
                                 jerr.text);
        }
        *ret = root;
        return 0;
}

int cage_config_parse(const char *text, size_t len, struct cage_config **ret,
                      struct cage_error *err)
{
        if (len > CAGE_CONFIG_FILE_MAX)
                return cage_fail(err, -EINVAL, "config: larger than %d bytes",
                                 CAGE_CONFIG_FILE_MAX);
        json_auto_t *root = NULL;
        int r = parse_json(text, len, "config", &root, err);
        if (r < 0)
                return r;
        return config_from_json(root, ret, err);
}

int cage_config_load(const char *path, struct cage_config **ret, struct cage_error *err)
{
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = read_secret_file(path, CAGE_CONFIG_FILE_MAX, "config", &text, &len, err);
        if (r < 0)
                return r;
        json_auto_t *root = NULL;
        r = parse_json(text, len, path, &root, err);
        explicit_bzero(text, len); /* it may hold secret values and tokens */
        if (r < 0)
                return r;
        return config_from_json(root, ret, err);
}

static void wipe_free(char *s, size_t len)
{
        if (s) {
                explicit_bzero(s, len);
                free(s);
        }
}

struct cage_config *cage_config_free(struct cage_config *cfg)
{
        if (!cfg)
                return NULL;
        for (size_t i = 0; i < cfg->n_secrets; i++) {
                wipe_free(cfg->secrets[i].value, cfg->secrets[i].len);
                free(cfg->secrets[i].name);
        }
        free(cfg->secrets);
        for (size_t i = 0; i < cfg->n_tenants; i++) {
                wipe_free(cfg->tenants[i].token, cfg->tenants[i].token_len);
                free(cfg->tenants[i].name);
                free(cfg->tenants[i].secrets);
        }
        free(cfg->tenants);
        for (size_t i = 0; i < cfg->n_env_allowlist; i++)
                free(cfg->env_allowlist[i]);
        free(cfg->env_allowlist);
        for (size_t i = 0; i < cfg->n_mounts_allowed; i++) {
                free(cfg->mounts_allowed[i].path);
                free(cfg->mounts_allowed[i].configured);
        }
        free(cfg->mounts_allowed);
        json_decref(cfg->upstream_servers);
        config_free_network(cfg);
        cage_images_config_done(&cfg->images);
        for (size_t i = 0; i < cfg->n_pool_images; i++)
                free(cfg->pool_images[i].image);
        free(cfg->pool_images);
        free(cfg->data_dir);
        free(cfg->listen_http);
        free(cfg->e2b.listen);
        free(cfg->listen_unix);
        free(cfg->listen_metrics);
        free(cfg->audit_log);
        free(cfg);
        return NULL;
}

/* ---- lookups ----------------------------------------------------------- */

bool cage_config_auth_required(const struct cage_config *cfg)
{
        return cfg->n_tenants > 0;
}

/* Time depends on the lengths only, never on where the bytes differ. */
static bool token_equal(const char *given, size_t given_len, const char *known, size_t known_len)
{
        volatile unsigned char diff = given_len != known_len;
        for (size_t i = 0; i < known_len; i++) {
                unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
                diff |= g ^ (unsigned char)known[i];
        }
        return diff == 0;
}

const struct cage_tenant *cage_config_tenant_for_token(const struct cage_config *cfg,
                                                       const char *token)
{
        if (!cfg || !token)
                return NULL;
        size_t len = strnlen(token, CAGE_CONFIG_TOKEN_MAX + 1);
        if (len < CAGE_CONFIG_TOKEN_MIN || len > CAGE_CONFIG_TOKEN_MAX)
                return NULL;
        const struct cage_tenant *found = NULL;
        for (size_t i = 0; i < cfg->n_tenants; i++) {
                const struct cage_tenant *t = &cfg->tenants[i];
                /* No early exit: which tenant matched must not show in the time. */
                if (token_equal(token, len, t->token, t->token_len))
                        found = t;
        }
        return found;
}

const struct cage_tenant *cage_config_tenant(const struct cage_config *cfg, const char *name)
{
        for (size_t i = 0; cfg && name && i < cfg->n_tenants; i++)
                if (strcmp(cfg->tenants[i].name, name) == 0)
                        return &cfg->tenants[i];
        return NULL;
}

const struct cage_quotas *cage_config_quotas(const struct cage_config *cfg, const char *name)
{
        const struct cage_tenant *t = cage_config_tenant(cfg, name);
        return t ? &t->quotas : &cfg->quotas;
}

int cage_config_secret(const struct cage_config *cfg, const char *name, const char **value,
                       struct cage_error *err)
{
        for (size_t i = 0; cfg && name && i < cfg->n_secrets; i++)
                if (strcmp(cfg->secrets[i].name, name) == 0) {
                        *value = cfg->secrets[i].value;
                        return 0;
                }
        return cage_fail(err, -ENOENT, "secrets: the server has no secret named \"%.64s\"",
                         name ? name : "");
}

bool cage_config_tenant_may_use_secret(const struct cage_config *cfg, const char *tenant,
                                       const char *name)
{
        if (!cage_config_auth_required(cfg))
                return true;
        const struct cage_tenant *t = cage_config_tenant(cfg, tenant);
        if (!t)
                return false;
        if (!t->secrets_listed)
                return true;
        for (size_t i = 0; i < t->n_secrets; i++)
                if (strcmp(t->secrets[i], name) == 0)
                        return true;
        return false;
}

bool cage_config_env_allowed(const struct cage_config *cfg, const char *name)
{
        for (size_t i = 0; cfg && name && i < cfg->n_env_allowlist; i++)
                if (strcmp(cfg->env_allowlist[i], name) == 0)
                        return true;
        return false;
}

/* Whether path is root or beneath it, component-wise. */
static bool path_is_beneath(const char *path, const char *root)
{
        size_t n = strlen(root);
        return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int cage_config_mount_allowed(const struct cage_config *cfg, const char *host_path, bool writable,
                              char **ret_resolved, struct cage_error *err)
{
        if (!host_path || !path_is_clean(host_path))
                return cage_fail(err, -EINVAL,
                                 "mounts: \"%.256s\" must be an absolute host path without \".\", "
                                 "\"..\" or empty components",
                                 host_path ? host_path : "");
        /* Refuse paths outside every rule before touching the filesystem, so
         * a client cannot probe which host paths exist. */
        bool lexical = false;
        for (size_t i = 0; i < cfg->n_mounts_allowed && !lexical; i++)
                lexical = path_is_beneath(host_path, cfg->mounts_allowed[i].path) ||
                          path_is_beneath(host_path, cfg->mounts_allowed[i].configured);
        if (!lexical)
                return cage_fail(err, -EPERM,
                                 "mounts: \"%.256s\" is not within the paths the server allows "
                                 "(mounts_allowed)",
                                 host_path);
        _cleanup_free_ char *resolved = realpath(host_path, NULL);
        if (!resolved)
                return cage_fail(err, -errno, "mounts: \"%.256s\"", host_path);
        bool inside = false, may_write = false;
        for (size_t i = 0; i < cfg->n_mounts_allowed; i++)
                if (path_is_beneath(resolved, cfg->mounts_allowed[i].path)) {
                        inside = true;
                        may_write |= cfg->mounts_allowed[i].writable;
                }
        /* The message never shows `resolved`: where a link points is host
         * information the client has no business learning. */
        if (!inside)
                return cage_fail(err, -EPERM,
                                 "mounts: \"%.256s\" is not within the paths the server allows "
                                 "(mounts_allowed)",
                                 host_path);
        if (writable && !may_write)
                return cage_fail(err, -EPERM,
                                 "mounts: \"%.256s\" may only be mounted read-only "
                                 "(mounts_allowed)",
                                 host_path);
        if (ret_resolved)
                *ret_resolved = TAKE_PTR(resolved);
        return 0;
}

int cage_config_redactor(const struct cage_config *cfg, struct cage_redactor **ret,
                         struct cage_error *err)
{
        struct cage_redactor *red = NULL;
        int r = cage_redactor_new(&red);
        if (r < 0)
                return cage_fail(err, r, "redactor");
        for (size_t i = 0; r >= 0 && i < cfg->n_secrets; i++)
                r = cage_redactor_add(red, cfg->secrets[i].name, cfg->secrets[i].value,
                                      cfg->secrets[i].len);
        for (size_t i = 0; r >= 0 && i < cfg->n_tenants; i++) {
                char name[CAGE_REDACT_NAME_MAX + 1];
                snprintf(name, sizeof(name), "token:%s", cfg->tenants[i].name);
                r = cage_redactor_add(red, name, cfg->tenants[i].token, cfg->tenants[i].token_len);
        }
        if (r < 0) {
                cage_redactor_unref(red);
                return cage_fail(err, r, "redactor: adding the secrets");
        }
        *ret = red;
        return 0;
}
