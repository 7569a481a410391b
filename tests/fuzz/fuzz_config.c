/* libFuzzer target for the server config (src/services/config.c,
 * config_network.c, src/images/images_config.c): the bytes are a config
 * file's text, parsed by cage_config_parse(), the same path as
 * cage_config_load() after reading the file. While the config code runs,
 * open() and realpath() see only tests/fuzz/data/config-root as "/" (a
 * read-only chroot of this process alone, which libFuzzer's own file I/O
 * does not go through), so the files a config names (secrets, token_file,
 * password_file, mounts_allowed) are only the few there.
 * Aborts on a broken invariant of an accepted config:
 *  - the defaults lie within the limits; bodies may be at least 16 MiB;
 *  - every list is within its bound; tenant names match
 *    [a-z0-9][a-z0-9_-]{0,62}, tokens have their recorded length (16..1024)
 *    and each token and name finds its own tenant; every secret has a valid
 *    name and a non-empty value without NUL, found again by name; a
 *    tenant's secrets are secrets of the config;
 *  - auth is required exactly when tenants are configured; every
 *    env_allowlist name is allowed; every mounts_allowed rule allows its
 *    own resolved path; the redactor builds;
 *  - parsing the same text again gives the same shape. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "services/config.h"
#include "services/redact.h"

#define INPUT_MAX 65536

static bool confined;
static char root[PATH_MAX];
static size_t root_len;
static char *(*real_realpath)(const char *, char *);
static int (*real_open)(const char *, int, ...);

static void setup(void)
{
        if (real_open)
                return;
        real_realpath = (char *(*)(const char *, char *))dlsym(RTLD_NEXT, "realpath");
        real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
        FUZZ_CHECK(real_realpath && real_open);
        FUZZ_CHECK(real_realpath(FUZZ_DATA_DIR "/config-root", root));
        root_len = strlen(root);
        unsetenv("XDG_DATA_HOME");
        setenv("HOME", "/home/fuzz", 1);
}

/* The host path of `path` as seen from the root: 0, or -errno (-ENOENT
 * for anything that resolves outside it). */
static int host_path(const char *path, char out[PATH_MAX])
{
        char joined[2 * PATH_MAX];
        if (path[0] != '/' ||
            (size_t)snprintf(joined, sizeof(joined), "%s%s", root, path) >= sizeof(joined))
                return -ENOENT;
        char *r = real_realpath(joined, NULL);
        if (!r)
                return -errno;
        bool inside = strncmp(r, root, root_len) == 0 && (!r[root_len] || r[root_len] == '/');
        if (inside)
                snprintf(out, PATH_MAX, "%s", r);
        free(r);
        return inside ? 0 : -ENOENT;
}

char *realpath(const char *path, char *resolved)
{
        if (!confined)
                return real_realpath(path, resolved);
        char host[PATH_MAX];
        int r = host_path(path, host);
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        const char *inside = host[root_len] ? host + root_len : "/";
        if (!resolved)
                return strdup(inside);
        snprintf(resolved, PATH_MAX, "%s", inside);
        return resolved;
}

int open(const char *path, int flags, ...)
{
        mode_t mode = 0;
        if (flags & (O_CREAT | __O_TMPFILE)) {
                va_list ap;
                va_start(ap, flags);
                mode = va_arg(ap, mode_t);
                va_end(ap);
        }
        if (!confined)
                return real_open(path, flags, mode);
        if ((flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) || (flags & __O_TMPFILE)) {
                errno = EROFS;
                return -1;
        }
        char host[PATH_MAX];
        int r = host_path(path, host);
        if (r < 0) {
                errno = -r;
                return -1;
        }
        return real_open(host, flags);
}

static bool name_ok(const char *s, const char *first, const char *rest, size_t max)
{
        size_t n = strlen(s);
        return n > 0 && n <= max && strchr(first, s[0]) && strspn(s, rest) == n;
}

static void check_limits(const struct cage_config *c)
{
        const struct cage_config_limits *l = &c->limits;
        const struct cage_config_spec_defaults *d = &c->defaults;
        FUZZ_CHECK(d->memory_mib <= l->memory_mib_max);
        FUZZ_CHECK(d->cpus <= l->cpus_max);
        FUZZ_CHECK(d->pids <= l->pids_max);
        FUZZ_CHECK(d->disk_mib <= l->disk_mib_max);
        FUZZ_CHECK(d->timeout_s <= l->timeout_s_max);
        FUZZ_CHECK(d->output_max_bytes <= l->output_max_bytes_max);
        FUZZ_CHECK(l->max_body_bytes >= 16u * 1024 * 1024);
}

static void check_tenants(const struct cage_config *c)
{
        static const char lower[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        FUZZ_CHECK(c->n_tenants <= CAGE_CONFIG_TENANTS_MAX);
        FUZZ_CHECK(cage_config_auth_required(c) == (c->n_tenants > 0));
        for (size_t i = 0; i < c->n_tenants; i++) {
                const struct cage_tenant *t = &c->tenants[i];
                FUZZ_CHECK(name_ok(t->name, lower, "abcdefghijklmnopqrstuvwxyz0123456789_-",
                                   CAGE_CONFIG_TENANT_NAME_MAX));
                FUZZ_CHECK(strlen(t->token) == t->token_len);
                FUZZ_CHECK(t->token_len >= CAGE_CONFIG_TOKEN_MIN &&
                           t->token_len <= CAGE_CONFIG_TOKEN_MAX);
                FUZZ_CHECK(cage_config_tenant_for_token(c, t->token) == t);
                FUZZ_CHECK(cage_config_tenant(c, t->name) == t);
                for (size_t j = 0; j < t->n_secrets; j++) {
                        const char *v = NULL;
                        FUZZ_CHECK(cage_config_secret(c, t->secrets[j], &v, NULL) == 0);
                        FUZZ_CHECK(cage_config_tenant_may_use_secret(c, t->name, t->secrets[j]));
                }
        }
}

static void check_secrets(const struct cage_config *c)
{
        static const char upper[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_";
        FUZZ_CHECK(c->n_secrets <= CAGE_CONFIG_SECRETS_MAX);
        for (size_t i = 0; i < c->n_secrets; i++) {
                const struct cage_secret *s = &c->secrets[i];
                const char *v = NULL;
                FUZZ_CHECK(name_ok(s->name, upper, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                                   CAGE_CONFIG_SECRET_NAME_MAX));
                FUZZ_CHECK(s->len > 0 && strlen(s->value) == s->len);
                FUZZ_CHECK(s->len <= CAGE_CONFIG_SECRET_MAX);
                FUZZ_CHECK(cage_config_secret(c, s->name, &v, NULL) == 0 && v == s->value);
        }
}

static void check_rest(const struct cage_config *c)
{
        FUZZ_CHECK(c->n_env_allowlist <= CAGE_CONFIG_ENV_ALLOW_MAX);
        for (size_t i = 0; i < c->n_env_allowlist; i++)
                FUZZ_CHECK(cage_config_env_allowed(c, c->env_allowlist[i]));
        FUZZ_CHECK(c->n_mounts_allowed <= CAGE_CONFIG_MOUNTS_MAX);
        for (size_t i = 0; i < c->n_mounts_allowed; i++) {
                const struct cage_mount_rule *m = &c->mounts_allowed[i];
                char *resolved = NULL;
                FUZZ_CHECK(m->path[0] == '/' && strcmp(m->path, "/") != 0);
                FUZZ_CHECK(cage_config_mount_allowed(c, m->path, m->writable, &resolved, NULL) ==
                           0);
                FUZZ_CHECK(strcmp(resolved, m->path) == 0);
                free(resolved);
        }
        FUZZ_CHECK(c->n_pool_images <= CAGE_CONFIG_POOL_IMAGES_MAX);
        FUZZ_CHECK(c->data_dir && c->data_dir[0] == '/');
        FUZZ_CHECK(c->listen_http || c->listen_unix);
        struct cage_redactor *rd = NULL;
        FUZZ_CHECK(cage_config_redactor(c, &rd, NULL) == 0);
        cage_redactor_unref(rd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > INPUT_MAX)
                return 0;
        setup();
        struct cage_config *c = NULL, *again = NULL;
        struct cage_error err = {0};
        confined = true;
        int r = cage_config_parse((const char *)data, size, &c, &err);
        if (r < 0) {
                confined = false;
                FUZZ_CHECK(!c);
                FUZZ_CHECK(err.message[0]);
                return 0;
        }
        check_limits(c);
        check_tenants(c);
        check_secrets(c);
        check_rest(c);
        FUZZ_CHECK(cage_config_parse((const char *)data, size, &again, NULL) == 0);
        confined = false;
        FUZZ_CHECK(again->n_tenants == c->n_tenants && again->n_secrets == c->n_secrets &&
                   again->n_mounts_allowed == c->n_mounts_allowed &&
                   again->n_env_allowlist == c->n_env_allowlist &&
                   again->n_pool_images == c->n_pool_images);
        cage_config_free(again);
        cage_config_free(c);
        return 0;
}
