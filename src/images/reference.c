/* Image references (docs/IMAGES.md): the grammar of the distribution
 * project's reference package with Docker's normalisation, and the
 * patterns of images.allow. Pure functions, fuzzed (tests/fuzz).
 *
 *   python                 -> docker.io/library/python:latest
 *   python:3.12-slim       -> docker.io/library/python:3.12-slim
 *   ghcr.io/o/r:tag        -> ghcr.io/o/r:tag
 *   name@sha256:<hex>      -> docker.io/library/name@sha256:<hex>
 *   name:tag@sha256:<hex>  -> docker.io/library/name:tag@sha256:<hex>
 *
 * A first component is a registry when it holds '.' or ':' or is
 * "localhost"; index.docker.io is docker.io. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "images/images.h"
#include "util/error.h"

#define NAME_MAX_LEN 255 /* registry/path, as the distribution spec bounds it */
#define TAG_MAX_LEN  128

static bool is_lower_alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
        return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

bool cage_image_digest_valid(const char *s)
{
        if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != CAGE_IMAGE_DIGEST_LEN)
                return false;
        for (const char *p = s + 7; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

/* [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* over s[0..n). */
static bool path_component_valid(const char *s, size_t n)
{
        size_t i = 0;
        while (i < n) {
                if (!is_lower_alnum(s[i]))
                        return false;
                while (i < n && is_lower_alnum(s[i]))
                        i++;
                if (i == n)
                        return true;
                size_t sep = i;
                while (i < n && (s[i] == '-' || s[i] == '_' || s[i] == '.'))
                        i++;
                size_t len = i - sep;
                bool dashes = strspn(s + sep, "-") >= len;
                bool ok = (len == 1) || (len == 2 && s[sep] == '_' && s[sep + 1] == '_') || dashes;
                if (!ok || i == n)
                        return false;
        }
        return n > 0;
}

/* host[:port]: labels of [A-Za-z0-9-] separated by '.', or "[v6]". */
static bool registry_valid(const char *s, size_t n)
{
        const char *colon = memchr(s, ':', n);
        size_t host_len = colon && s[0] != '[' ? (size_t)(colon - s) : n;
        if (s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close)
                        return false;
                host_len = (size_t)(close - s) + 1;
                colon = host_len < n ? s + host_len : NULL;
                if (colon && *colon != ':')
                        return false;
        } else {
                for (size_t i = 0; i < host_len; i++)
                        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '.')
                                return false;
                if (host_len == 0 || s[0] == '.' || s[0] == '-' || s[host_len - 1] == '.')
                        return false;
        }
        if (!colon)
                return true;
        size_t port_len = n - host_len - 1;
        if (port_len == 0 || port_len > 5)
                return false;
        unsigned port = 0;
        for (size_t i = host_len + 1; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                port = port * 10 + (unsigned)(s[i] - '0');
        }
        return port > 0 && port <= 65535;
}

static bool tag_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > TAG_MAX_LEN || !(is_alnum(s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
                        return false;
        return true;
}

static bool first_is_registry(const char *name, size_t first_len, bool more)
{
        if (!more)
                return false;
        for (size_t i = 0; i < first_len; i++)
                if (name[i] == '.' || name[i] == ':' || (name[i] >= 'A' && name[i] <= 'Z'))
                        return true;
        return first_len == 9 && strncmp(name, "localhost", 9) == 0;
}

static int fail_ref(struct cage_error *err, const char *s, const char *why)
{
        return cage_fail_plain(err, -EINVAL, "image reference \"%.200s\": %s", s, why);
}

/* Splits name into registry and repository, checking both. */
static int split_name(const char *s, const char *name, struct cage_image_ref *r,
                      struct cage_error *err)
{
        const char *slash = strchr(name, '/');
        size_t first_len = slash ? (size_t)(slash - name) : strlen(name);
        const char *path = name;
        if (first_is_registry(name, first_len, slash != NULL)) {
                if (!registry_valid(name, first_len) || first_len >= sizeof(r->registry))
                        return fail_ref(err, s, "invalid registry host");
                memcpy(r->registry, name, first_len);
                r->registry[first_len] = '\0';
                path = slash + 1;
        } else {
                strcpy(r->registry, "docker.io");
        }
        if (strcmp(r->registry, "index.docker.io") == 0)
                strcpy(r->registry, "docker.io");
        for (const char *p = path;;) {
                const char *end = strchr(p, '/');
                size_t n = end ? (size_t)(end - p) : strlen(p);
                if (!path_component_valid(p, n))
                        return fail_ref(err, s,
                                        "repository names are lowercase letters, digits "
                                        "and separators (. _ __ -)");
                if (!end)
                        break;
                p = end + 1;
        }
        bool library = strcmp(r->registry, "docker.io") == 0 && !strchr(path, '/');
        int n = snprintf(r->repository, sizeof(r->repository), "%s%s", library ? "library/" : "",
                         path);
        if (n < 0 || (size_t)n >= sizeof(r->repository) ||
            strlen(r->registry) + 1 + (size_t)n > NAME_MAX_LEN)
                return fail_ref(err, s, "name longer than 255 characters");
        return 0;
}

/* Takes "@digest" and ":tag" off the end of buf (in place). */
static int split_suffixes(const char *s, char *buf, struct cage_image_ref *r,
                          struct cage_error *err)
{
        char *at = strchr(buf, '@');
        if (at) {
                *at = '\0';
                if (!cage_image_digest_valid(at + 1))
                        return fail_ref(err, s, "a digest is sha256: and 64 lowercase hex digits");
                strcpy(r->digest, at + 1);
        }
        char *colon = strrchr(buf, ':');
        char *slash = strrchr(buf, '/');
        if (colon && (!slash || colon > slash)) {
                *colon = '\0';
                if (!tag_valid(colon + 1))
                        return fail_ref(err, s,
                                        "a tag is at most 128 of [A-Za-z0-9_.-], not "
                                        "starting with . or -");
                strcpy(r->tag, colon + 1);
        }
        return 0;
}

int cage_image_ref_parse(const char *s, struct cage_image_ref *ret, struct cage_error *err)
{
        struct cage_image_ref r = {};
        char buf[CAGE_IMAGE_REF_MAX];
        size_t len = strlen(s);
        if (len == 0)
                return fail_ref(err, s, "empty");
        if (len >= sizeof(buf))
                return fail_ref(err, s, "longer than 511 characters");
        memcpy(buf, s, len + 1);
        int rc = split_suffixes(s, buf, &r, err);
        if (rc < 0)
                return rc;
        if (buf[0] == '\0' || buf[0] == '/' || buf[strlen(buf) - 1] == '/' || strstr(buf, "//"))
                return fail_ref(err, s, "missing name");
        if ((rc = split_name(s, buf, &r, err)) < 0)
                return rc;
        if (!r.tag[0] && !r.digest[0])
                strcpy(r.tag, "latest");
        int n = snprintf(r.full, sizeof(r.full), "%s/%s%s%s%s%s", r.registry, r.repository,
                         r.tag[0] ? ":" : "", r.tag, r.digest[0] ? "@" : "", r.digest);
        if (n < 0 || (size_t)n >= sizeof(r.full))
                return fail_ref(err, s, "longer than 511 characters");
        *ret = r;
        return 0;
}

/* '*' matches any run of characters (iterative, no backtracking blow-up). */
static bool glob_match(const char *p, const char *s)
{
        const char *star = NULL, *resume = NULL;
        while (*s) {
                if (*p == '*') {
                        star = p++;
                        resume = s;
                } else if (*p == *s) {
                        p++;
                        s++;
                } else if (star) {
                        p = star + 1;
                        s = ++resume;
                } else {
                        return false;
                }
        }
        while (*p == '*')
                p++;
        return *p == '\0';
}

bool cage_image_ref_matches(const char *pattern, const char *ref)
{
        if (glob_match(pattern, ref))
                return true;
        /* A pattern naming repositories only covers their tags and digests. */
        const char *slash = strrchr(pattern, '/');
        if (strchr(slash ? slash : pattern, ':') || strchr(pattern, '@'))
                return false;
        char name[CAGE_IMAGE_REF_MAX];
        size_t n = strcspn(ref, "@");
        const char *rslash = memrchr(ref, '/', n);
        const char *colon =
                memchr(rslash ? rslash : ref, ':', n - (size_t)((rslash ? rslash : ref) - ref));
        if (colon)
                n = (size_t)(colon - ref);
        if (n >= sizeof(name))
                return false;
        memcpy(name, ref, n);
        name[n] = '\0';
        return glob_match(pattern, name);
}
