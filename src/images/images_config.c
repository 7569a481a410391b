/* The server config's `images` section (docs/IMAGES.md, "Configuration"):
 * which references may be used, registry credentials (inline, from a file,
 * or a Docker config.json's `auths`), mirrors, registries reached over
 * plain HTTP, the platform, the pull policy and the bounds of the store.
 * Parse -> validate -> immutable struct; unknown keys are errors and every
 * message names the key. Passwords never appear in a message. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "images/images.h"
#include "util/base64.h"
#include "util/cleanup.h"
#include "util/error.h"

#define HOST_MAX          255
#define SECRET_FILE_MAX   (64 * 1024)
#define DOCKER_CONFIG_MAX (4 * 1024 * 1024)
#define MIB               (1024ULL * 1024ULL)
/* References in the index: ~450 bytes each at most, so the index stays
 * well within the 64 MiB the store reads (store.c). */
#define REFS_MAX 100000

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#elif defined(__arm__)
#define HOST_ARCH "arm"
#elif defined(__i386__)
#define HOST_ARCH "386"
#elif defined(__powerpc64__)
#define HOST_ARCH "ppc64le"
#elif defined(__s390x__)
#define HOST_ARCH "s390x"
#elif defined(__riscv)
#define HOST_ARCH "riscv64"
#else
#define HOST_ARCH "unknown"
#endif

static int fail_key(struct cage_error *err, const char *key, const char *why)
{
        return cage_fail_plain(err, -EINVAL, "images.%s: %s", key, why);
}

static bool host_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > HOST_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]",
                            s[i]))
                        return false;
        return true;
}

static int string_array(json_t *v, const char *key, bool hosts, char ***ret, size_t *ret_n,
                        struct cage_error *err)
{
        if (!json_is_array(v))
                return fail_key(err, key, "must be a list of strings");
        size_t n = json_array_size(v);
        if (n > CAGE_IMAGES_PATTERNS_MAX)
                return fail_key(err, key, "more than 256 entries");
        char **list = calloc(n + 1, sizeof(char *));
        if (!list)
                return cage_fail(err, -ENOMEM, "images.%s", key);
        *ret = list;
        for (size_t i = 0; i < n; i++) {
                const char *s = json_string_value(json_array_get(v, i));
                if (!s || !s[0] || strlen(s) >= CAGE_IMAGE_REF_MAX || (hosts && !host_valid(s)))
                        return fail_key(err, key,
                                        hosts ? "entries are registry hosts (host[:port])"
                                              : "entries are non-empty patterns of at "
                                                "most 511 characters");
                if (!(list[i] = strdup(s)))
                        return cage_fail(err, -ENOMEM, "images.%s", key);
                *ret_n = i + 1;
        }
        return 0;
}

static int read_small_file(const char *path, size_t max, const char *key, char **ret,
                           struct cage_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "images.%s: %s", key, path);
        if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max)
                return cage_fail_plain(err, -EINVAL,
                                       "images.%s: %s is not a regular file of at "
                                       "most %zu bytes",
                                       key, path, max);
        char *buf = calloc(1, (size_t)st.st_size + 1);
        if (!buf)
                return cage_fail(err, -ENOMEM, "images.%s", key);
        if (read(fd, buf, (size_t)st.st_size) != st.st_size) {
                free(buf);
                return cage_fail(err, -EIO, "images.%s: %s", key, path);
        }
        buf[strcspn(buf, "\n")] = '\0';
        *ret = buf;
        return 0;
}

static int add_credential(struct cage_images_config *c, const char *registry, const char *user,
                          const char *password, struct cage_error *err)
{
        struct cage_registry_credential *more =
                realloc(c->credentials, (c->n_credentials + 1) * sizeof(*more));
        if (!more)
                return cage_fail(err, -ENOMEM, "images.credentials");
        c->credentials = more;
        struct cage_registry_credential *e = &c->credentials[c->n_credentials];
        *e = (struct cage_registry_credential){strdup(registry), strdup(user), strdup(password)};
        if (!e->registry || !e->username || !e->password) {
                free(e->registry);
                free(e->username);
                free(e->password);
                return cage_fail(err, -ENOMEM, "images.credentials");
        }
        c->n_credentials++;
        return 0;
}

static int parse_credential(struct cage_images_config *c, const char *registry, json_t *v,
                            struct cage_error *err)
{
        const char *user = json_string_value(json_object_get(v, "username"));
        const char *pass = json_string_value(json_object_get(v, "password"));
        const char *file = json_string_value(json_object_get(v, "password_file"));
        if (!host_valid(registry) || !json_is_object(v) || !user || (!pass == !file) ||
            json_object_size(v) != 2)
                return fail_key(err, "credentials",
                                "entries are REGISTRY: {\"username\", and \"password\" or "
                                "\"password_file\"}");
        _cleanup_free_ char *from_file = NULL;
        if (file) {
                if (file[0] != '/')
                        return fail_key(err, "credentials", "password_file must be absolute");
                int r = read_small_file(file, SECRET_FILE_MAX, "credentials", &from_file, err);
                if (r < 0)
                        return r;
        }
        return add_credential(c, registry, user, file ? from_file : pass, err);
}

/* Docker Hub's key in config.json is its v1 URL; other keys may carry a scheme. */
static void docker_host(const char *key, char *out, size_t size)
{
        if (strstr(key, "index.docker.io") || strcmp(key, "docker.io") == 0) {
                snprintf(out, size, "docker.io");
                return;
        }
        const char *p = strstr(key, "://") ? strstr(key, "://") + 3 : key;
        snprintf(out, size, "%.*s", (int)strcspn(p, "/"), p);
}

static int docker_auth(struct cage_images_config *c, const char *key, json_t *v,
                       struct cage_error *err)
{
        char host[HOST_MAX + 1];
        const char *auth = json_string_value(json_object_get(v, "auth"));
        docker_host(key, host, sizeof(host));
        if (!auth || !host_valid(host))
                return 0; /* credential helpers and identity tokens are not read */
        _cleanup_free_ char *plain = NULL;
        size_t len;
        if (cage_base64_decode(auth, strlen(auth), (void **)&plain, &len) < 0 ||
            !strchr(plain, ':'))
                return fail_key(err, "docker_config",
                                "an auths entry's auth is not base64 of "
                                "user:password");
        char *colon = strchr(plain, ':');
        *colon = '\0';
        return add_credential(c, host, plain, colon + 1, err);
}

static int parse_docker_config(struct cage_images_config *c, const char *path,
                               struct cage_error *err)
{
        _cleanup_free_ char *text = NULL;
        if (path[0] != '/')
                return fail_key(err, "docker_config", "must be an absolute path");
        int r = read_small_file(path, DOCKER_CONFIG_MAX, "docker_config", &text, err);
        if (r < 0)
                return r;
        json_t *root = json_loads(text, 0, NULL);
        json_t *auths = json_object_get(root, "auths");
        const char *k;
        json_t *v;
        if (!json_is_object(auths))
                r = fail_key(err, "docker_config", "not a Docker config.json with \"auths\"");
        json_object_foreach(auths, k, v)
        {
                if (r >= 0)
                        r = docker_auth(c, k, v, err);
        }
        json_decref(root);
        if (r >= 0 && !(c->docker_config = strdup(path)))
                r = cage_fail(err, -ENOMEM, "images.docker_config");
        return r;
}

static int parse_mirrors(struct cage_images_config *c, json_t *v, struct cage_error *err)
{
        if (!json_is_object(v) || json_object_size(v) > CAGE_IMAGES_PATTERNS_MAX)
                return fail_key(err, "mirrors", "must be an object REGISTRY: [MIRROR HOSTS]");
        c->mirrors = calloc(json_object_size(v) + 1, sizeof(*c->mirrors));
        if (!c->mirrors)
                return cage_fail(err, -ENOMEM, "images.mirrors");
        const char *k;
        json_t *list;
        json_object_foreach(v, k, list)
        {
                struct cage_registry_mirrors *m = &c->mirrors[c->n_mirrors];
                if (!host_valid(k))
                        return fail_key(err, "mirrors", "keys are registry hosts");
                if (!(m->registry = strdup(k)))
                        return cage_fail(err, -ENOMEM, "images.mirrors");
                c->n_mirrors++;
                int r = string_array(list, "mirrors", true, &m->mirrors, &m->n_mirrors, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_platform(struct cage_images_config *c, const char *s, struct cage_error *err)
{
        char os[32] = "", arch[32] = "", variant[32] = "";
        if (!s || sscanf(s, "%31[a-z0-9]/%31[a-z0-9_]/%31[a-z0-9]", os, arch, variant) < 2 ||
            strlen(s) != strlen(os) + strlen(arch) + 1 + (variant[0] ? strlen(variant) + 1 : 0))
                return fail_key(err, "platform", "must be OS/ARCH[/VARIANT], e.g. linux/amd64");
        snprintf(c->platform_os, sizeof(c->platform_os), "%s", os);
        snprintf(c->platform_arch, sizeof(c->platform_arch), "%s", arch);
        snprintf(c->platform_variant, sizeof(c->platform_variant), "%s", variant);
        return 0;
}

static int parse_number(json_t *v, const char *key, uint64_t lo, uint64_t hi, uint64_t *ret,
                        struct cage_error *err)
{
        if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)lo ||
            (uint64_t)json_integer_value(v) > hi)
                return cage_fail_plain(err, -EINVAL, "images.%s: must be an integer in %llu..%llu",
                                       key, (unsigned long long)lo, (unsigned long long)hi);
        *ret = (uint64_t)json_integer_value(v);
        return 0;
}

static int parse_numbers(struct cage_images_config *c, const json_t *section,
                         struct cage_error *err)
{
        uint64_t v;
        int r;
        json_t *j;
        if ((j = json_object_get(section, "max_store_mib"))) {
                if ((r = parse_number(j, "max_store_mib", 0, 1ULL << 30, &v, err)) < 0)
                        return r;
                c->max_store_bytes = v * MIB;
        }
        if ((j = json_object_get(section, "max_layer_mib"))) {
                if ((r = parse_number(j, "max_layer_mib", 1, 1ULL << 24, &v, err)) < 0)
                        return r;
                c->max_layer_bytes = v * MIB;
        }
        if ((j = json_object_get(section, "max_image_mib"))) {
                if ((r = parse_number(j, "max_image_mib", 1, 1ULL << 24, &v, err)) < 0)
                        return r;
                c->max_image_bytes = v * MIB;
        }
        if ((j = json_object_get(section, "max_layer_entries")) &&
            (r = parse_number(j, "max_layer_entries", 1, 100000000, &c->max_layer_entries, err)) <
                    0)
                return r;
        if ((j = json_object_get(section, "max_layers"))) {
                if ((r = parse_number(j, "max_layers", 1, 1024, &v, err)) < 0)
                        return r;
                c->max_layers = (uint32_t)v;
        }
        if ((j = json_object_get(section, "max_refs"))) {
                if ((r = parse_number(j, "max_refs", 1, REFS_MAX, &v, err)) < 0)
                        return r;
                c->max_refs = (uint32_t)v;
        }
        if ((j = json_object_get(section, "pull_timeout_s"))) {
                if ((r = parse_number(j, "pull_timeout_s", 1, 86400, &v, err)) < 0)
                        return r;
                c->pull_timeout_s = (uint32_t)v;
        }
        return 0;
}

static void set_defaults(struct cage_images_config *c)
{
        *c = (struct cage_images_config){
                .pull_policy = CAGE_PULL_MISSING,
                .max_layer_bytes = 16384 * MIB,
                .max_image_bytes = 32768 * MIB,
                .max_layer_entries = 500000,
                .max_layers = 128,
                .max_refs = REFS_MAX,
                .pull_timeout_s = 1800,
        };
        snprintf(c->platform_os, sizeof(c->platform_os), "linux");
        snprintf(c->platform_arch, sizeof(c->platform_arch), "%s", HOST_ARCH);
}

static int check_keys(const json_t *section, struct cage_error *err)
{
        static const char *const keys[] = {"allow",         "credentials",       "docker_config",
                                           "mirrors",       "plain_http",        "platform",
                                           "pull_policy",   "max_store_mib",     "max_layer_mib",
                                           "max_image_mib", "max_layer_entries", "max_layers",
                                           "max_refs",      "pull_timeout_s"};
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)section, k, v)
        {
                size_t i = 0;
                while (i < ELEMENTSOF(keys) && strcmp(keys[i], k) != 0)
                        i++;
                if (i == ELEMENTSOF(keys))
                        return cage_fail_plain(err, -EINVAL, "images.%.64s: unknown key", k);
        }
        return 0;
}

static int parse_section(struct cage_images_config *c, const json_t *section,
                         struct cage_error *err)
{
        json_t *v;
        int r;
        if (!json_is_object(section))
                return cage_fail_plain(err, -EINVAL, "images: must be an object");
        if ((r = check_keys(section, err)) < 0 || (r = parse_numbers(c, section, err)) < 0)
                return r;
        if ((v = json_object_get(section, "allow")) &&
            (r = string_array(v, "allow", false, &c->allow, &c->n_allow, err)) < 0)
                return r;
        if ((v = json_object_get(section, "plain_http")) &&
            (r = string_array(v, "plain_http", true, &c->plain_http, &c->n_plain_http, err)) < 0)
                return r;
        if ((v = json_object_get(section, "mirrors")) && (r = parse_mirrors(c, v, err)) < 0)
                return r;
        if ((v = json_object_get(section, "platform")) &&
            (r = parse_platform(c, json_string_value(v), err)) < 0)
                return r;
        if ((v = json_object_get(section, "pull_policy"))) {
                const char *p = json_string_value(v);
                if (!p || (strcmp(p, "missing") != 0 && strcmp(p, "never") != 0))
                        return fail_key(err, "pull_policy", "must be \"missing\" or \"never\"");
                c->pull_policy = strcmp(p, "never") == 0 ? CAGE_PULL_NEVER : CAGE_PULL_MISSING;
        }
        json_t *creds = json_object_get(section, "credentials");
        const char *k;
        if (creds && (!json_is_object(creds) || json_object_size(creds) > CAGE_IMAGES_PATTERNS_MAX))
                return fail_key(err, "credentials", "must be an object REGISTRY: {...}");
        json_object_foreach(creds, k, v)
        {
                if ((r = parse_credential(c, k, v, err)) < 0)
                        return r;
        }
        if ((v = json_object_get(section, "docker_config"))) {
                if (!json_is_string(v))
                        return fail_key(err, "docker_config", "must be a path");
                return parse_docker_config(c, json_string_value(v), err);
        }
        return 0;
}

int cage_images_config_parse(const json_t *section, struct cage_images_config *ret,
                             struct cage_error *err)
{
        struct cage_images_config c;
        set_defaults(&c);
        int r = section ? parse_section(&c, section, err) : 0;
        if (r < 0) {
                cage_images_config_done(&c);
                set_defaults(ret);
                return r;
        }
        *ret = c;
        return 0;
}

static void free_strv(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

void cage_images_config_done(struct cage_images_config *c)
{
        free_strv(c->allow, c->n_allow);
        free_strv(c->plain_http, c->n_plain_http);
        for (size_t i = 0; i < c->n_credentials; i++) {
                struct cage_registry_credential *e = &c->credentials[i];
                if (e->password)
                        explicit_bzero(e->password, strlen(e->password));
                free(e->registry);
                free(e->username);
                free(e->password);
        }
        free(c->credentials);
        for (size_t i = 0; i < c->n_mirrors; i++) {
                free(c->mirrors[i].registry);
                free_strv(c->mirrors[i].mirrors, c->n_mirrors ? c->mirrors[i].n_mirrors : 0);
        }
        free(c->mirrors);
        free(c->docker_config);
        c->allow = c->plain_http = NULL;
        c->n_allow = c->n_plain_http = c->n_credentials = c->n_mirrors = 0;
        c->credentials = NULL;
        c->mirrors = NULL;
        c->docker_config = NULL;
}

bool cage_images_config_allows(const struct cage_images_config *cfg, const char *ref)
{
        if (cfg->n_allow == 0)
                return true;
        for (size_t i = 0; i < cfg->n_allow; i++)
                if (cage_image_ref_matches(cfg->allow[i], ref))
                        return true;
        return false;
}
