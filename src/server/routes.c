/* The route table of the HTTP API and the decoding of request targets.
 *
 * Routing works on the raw request target (MHD would decode it as a whole,
 * which turns "%2F" into a separator and cuts at "%00"): the path is split
 * at "/" first, literal segments are compared as sent, and only parameter
 * segments are percent-decoded, one by one. A decoded NUL, a bad escape, a
 * {name} or {run_id} outside [A-Za-z0-9][A-Za-z0-9_.-]{0,62}, or a ".."
 * component in a {path...} is a 400 before the service is called (the
 * service checks again); its message quotes a bad name with every byte
 * outside printable ASCII as %XX. A path no route has is a 404; a path some route
 * has with another method is a 405 with Allow. HEAD is served as GET. The
 * body of a JSON route is parsed here too (http_body_json). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"
#include "util/json_bounded.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/hex.h"

#define QUOTE_MAX 64 /* bytes of a bad parameter quoted in its error */

struct route {
        const char *method;
        const char *pattern; /* segments: literal, {name}, {run_id}, {path} (the rest) */
        http_handler_fn fn;
        unsigned flags;
};

static const struct route routes[] = {
        {"GET", "/healthz", api_healthz, ROUTE_PUBLIC},
        {"GET", "/readyz", api_readyz, ROUTE_PUBLIC},
        {"GET", "/metrics", api_metrics, ROUTE_OPERATOR}, /* every tenant's numbers */
        {"GET", "/v1/openapi.json", api_openapi, ROUTE_PUBLIC},
        {"POST", "/v1/sandboxes", api_sandbox_create, ROUTE_JSON_BODY},
        {"GET", "/v1/sandboxes", api_sandbox_list, 0},
        {"GET", "/v1/sandboxes/{name}", api_sandbox_get, 0},
        {"DELETE", "/v1/sandboxes/{name}", api_sandbox_remove, 0},
        {"POST", "/v1/sandboxes/{name}/stop", api_sandbox_stop, 0},
        {"POST", "/v1/sandboxes/{name}/start", api_sandbox_start, 0},
        {"POST", "/v1/sandboxes/{name}/kill", api_sandbox_kill, 0},
        {"GET", "/v1/sandboxes/{name}/logs", api_sandbox_logs, 0},
        {"POST", "/v1/sandboxes/{name}/exec", api_exec, ROUTE_JSON_BODY},
        {"GET", "/v1/sandboxes/{name}/files", api_file_list, 0},
        {"POST", "/v1/sandboxes/{name}/files", api_file_write, ROUTE_JSON_BODY},
        {"GET", "/v1/sandboxes/{name}/files/{path}", api_file_get, 0},
        {"PUT", "/v1/sandboxes/{name}/files/{path}", api_file_put, ROUTE_RAW_BODY},
        {"DELETE", "/v1/sandboxes/{name}/files/{path}", api_file_delete, 0},
        {"POST", "/v1/sandboxes/{name}/mkdir", api_file_mkdir, ROUTE_JSON_BODY},
        {"POST", "/v1/run", api_run, ROUTE_JSON_BODY},
        {"GET", "/v1/runs/{run_id}/files/{path}", api_run_file, 0},
        /* Python (api_python.c). {path} stands for {var} and {id}: one segment, checked by
         * the handler; POST .../variables/{path} is .../variables/{var}/load. */
        {"POST", "/v1/python", api_python_oneshot, ROUTE_JSON_BODY},
        {"POST", "/v1/sandboxes/{name}/python", api_python_run, ROUTE_JSON_BODY},
        {"POST", "/v1/sandboxes/{name}/python/reset", api_python_reset, 0},
        {"GET", "/v1/sandboxes/{name}/python/variables", api_python_var_list, 0},
        {"GET", "/v1/sandboxes/{name}/python/variables/{path}", api_python_var_get, 0},
        {"PUT", "/v1/sandboxes/{name}/python/variables/{path}", api_python_var_put, ROUTE_RAW_BODY},
        {"POST", "/v1/sandboxes/{name}/python/variables/{path}", api_python_var_load,
         ROUTE_JSON_BODY},
        {"GET", "/v1/pool", api_pool, ROUTE_OPERATOR}, /* counts every tenant's runs */
        /* Images (api_images.c): {path} is a reference, slashes and all. */
        {"GET", "/v1/images", api_images_list, 0},
        {"POST", "/v1/images/pull", api_image_pull, ROUTE_JSON_BODY},
        {"POST", "/v1/images/import", api_image_import, ROUTE_RAW_BODY | ROUTE_OPERATOR},
        {"GET", "/v1/images/{path}", api_image_inspect, 0},
        {"DELETE", "/v1/images/{path}", api_image_remove, ROUTE_OPERATOR},
        /* An answer's value goes on to the code as JSON: its strings may hold NUL. */
        {"POST", "/v1/host_calls/{path}", api_host_call_answer, ROUTE_JSON_BODY | ROUTE_JSON_NUL},
};

bool http_name_is_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > HTTP_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool alnum =
                        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
                        return false;
        }
        return true;
}

int http_decode(const char *s, size_t len, bool plus_is_space, char **ret)
{
        _cleanup_free_ char *out = malloc(len + 1);
        size_t w = 0;
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == '%') {
                        int hi = i + 2 < len ? hex_digit_value((unsigned char)s[i + 1]) : -1;
                        int lo = i + 2 < len ? hex_digit_value((unsigned char)s[i + 2]) : -1;
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        c = (char)(hi << 4 | lo);
                        if (c == '\0')
                                return -EINVAL;
                        i += 2;
                } else if (c == '+' && plus_is_space) {
                        c = ' ';
                }
                out[w++] = c;
        }
        out[w] = '\0';
        *ret = TAKE_PTR(out);
        return 0;
}

int http_query_get(const char *query, const char *key, char **ret)
{
        size_t klen = strlen(key);
        for (const char *p = query; p && *p;) {
                const char *end = strchrnul(p, '&');
                const char *eq = memchr(p, '=', (size_t)(end - p));
                const char *kend = eq ? eq : end;
                _cleanup_free_ char *k = NULL;
                int r = http_decode(p, (size_t)(kend - p), true, &k);
                if (r < 0)
                        return r;
                if (strlen(k) == klen && memcmp(k, key, klen) == 0) {
                        if (!eq)
                                return http_decode("", 0, true, ret) < 0 ? -ENOMEM : 1;
                        r = http_decode(eq + 1, (size_t)(end - eq - 1), true, ret);
                        return r < 0 ? r : 1;
                }
                p = *end ? end + 1 : end;
        }
        return 0;
}

int http_body_too_complex(size_t len, struct cage_error *err)
{
        return cage_fail(err, -E2BIG,
                         "body: the JSON would take more than %zu MiB of the server's memory to "
                         "hold (each array, object or number costs it tens of bytes): send "
                         "fewer, larger values",
                         (JSON_REQUEST_BASE + 4 * len) >> 20);
}

int http_body_json(const char *body, size_t len, bool allow_nul, json_t **ret,
                   struct cage_error *err)
{
        json_error_t jerr;
        if (len == 0)
                return cage_fail(err, -EINVAL, "body: a JSON object is required");
        bool too_large = false;
        json_t *doc = json_load_request(body, len,
                                        JSON_REJECT_DUPLICATES | (allow_nul ? JSON_ALLOW_NUL : 0),
                                        &jerr, &too_large);
        if (too_large)
                return http_body_too_complex(len, err);
        if (!doc)
                return cage_fail(err, -EINVAL, "body: invalid JSON at line %d, column %d: %s",
                                 jerr.line, jerr.column, jerr.text);
        if (!json_is_object(doc)) {
                json_decref(doc);
                return cage_fail(err, -EINVAL, "body: must be a JSON object");
        }
        *ret = doc;
        return 0;
}

/* The raw segments of a path ("/a/b" -> "a", "b"), pointing into path. */
struct segments {
        const char *start[HTTP_SEGMENTS_MAX];
        size_t len[HTTP_SEGMENTS_MAX];
        size_t n;
};

static int split(const char *path, struct segments *s)
{
        s->n = 0;
        if (path[0] != '/')
                return -EINVAL;
        for (const char *p = path + 1;;) {
                const char *end = strchrnul(p, '/');
                if (s->n == HTTP_SEGMENTS_MAX)
                        return -EINVAL;
                s->start[s->n] = p;
                s->len[s->n++] = (size_t)(end - p);
                if (!*end)
                        return 0;
                p = end + 1;
        }
}

static bool segment_is(const struct segments *s, size_t i, const char *text)
{
        return s->len[i] == strlen(text) && memcmp(s->start[i], text, s->len[i]) == 0;
}

/* Whether the raw segments fit the route's pattern (parameters unchecked). */
static bool pattern_fits(const char *pattern, const struct segments *s)
{
        struct segments pat;
        if (split(pattern, &pat) < 0)
                return false;
        for (size_t i = 0; i < pat.n; i++) {
                bool rest = segment_is(&pat, i, "{path}");
                if (rest)
                        return s->n > i;
                if (i >= s->n)
                        return false;
                if (pat.start[i][0] == '{' && s->len[i] > 0)
                        continue;
                if (pat.len[i] != s->len[i] || memcmp(pat.start[i], s->start[i], s->len[i]) != 0)
                        return false;
        }
        return pat.n == s->n;
}

static bool has_dotdot(const char *path)
{
        for (const char *p = path;;) {
                const char *end = strchrnul(p, '/');
                if (end - p == 2 && p[0] == '.' && p[1] == '.')
                        return true;
                if (!*end)
                        return false;
                p = end + 1;
        }
}

/* The decoded {path}: raw segments from index `from` on, joined by "/". */
static int decode_rest(const struct segments *s, size_t from, char **ret, struct cage_error *msg)
{
        size_t total = 0;
        for (size_t i = from; i < s->n; i++)
                total += s->len[i] + 1;
        _cleanup_free_ char *raw = malloc(total + 1);
        if (!raw)
                return cage_fail(msg, -ENOMEM, "path");
        size_t w = 0;
        for (size_t i = from; i < s->n; i++) {
                if (i > from)
                        raw[w++] = '/';
                memcpy(raw + w, s->start[i], s->len[i]);
                w += s->len[i];
        }
        if (http_decode(raw, w, false, ret) < 0)
                return cage_fail(msg, -EINVAL, "path: bad percent-encoding or a NUL byte");
        if (has_dotdot(*ret)) {
                free(TAKE_PTR(*ret));
                return cage_fail(msg, -EINVAL, "path: \"..\" components are not allowed");
        }
        return 0;
}

/* The first bytes of a decoded parameter for an error message: printable
 * ASCII as it is, anything else (e.g. a byte that is not UTF-8) as %XX. */
static void quote_param(const char *s, char out[QUOTE_MAX * 3 + 1])
{
        size_t w = 0;
        for (const unsigned char *p = (const unsigned char *)s; *p && w < QUOTE_MAX * 3 - 2; p++) {
                if (*p >= 0x20 && *p < 0x7f && *p != '%' && *p != '"')
                        out[w++] = (char)*p;
                else
                        w += (size_t)snprintf(out + w, 4, "%%%02X", *p);
        }
        out[w] = '\0';
}

static int decode_name(const struct segments *s, size_t i, const char *what, char **ret,
                       struct cage_error *msg)
{
        if (http_decode(s->start[i], s->len[i], false, ret) < 0)
                return cage_fail(msg, -EINVAL, "%s: bad percent-encoding or a NUL byte", what);
        if (!http_name_is_valid(*ret)) {
                char quoted[QUOTE_MAX * 3 + 1];
                quote_param(*ret, quoted);
                int r = cage_fail(msg, -EINVAL,
                                  "%s: \"%s\" is not valid (1 to 63 of A-Z a-z 0-9 _ . -, "
                                  "starting with a letter or digit)",
                                  what, quoted);
                free(TAKE_PTR(*ret));
                return r;
        }
        return 0;
}

static int decode_params(const char *pattern, const struct segments *s, struct http_match *m,
                         struct cage_error *msg)
{
        struct segments pat;
        int r = 0;
        split(pattern, &pat);
        for (size_t i = 0; i < pat.n && r >= 0; i++) {
                if (pat.start[i][0] != '{')
                        continue;
                if (strncmp(pat.start[i], "{name}", 6) == 0)
                        r = decode_name(s, i, "name", &m->name, msg);
                else if (strncmp(pat.start[i], "{run_id}", 8) == 0)
                        r = decode_name(s, i, "run_id", &m->run_id, msg);
                else
                        r = decode_rest(s, i, &m->path, msg);
        }
        return r;
}

static void allow_add(char allow[64], const char *method)
{
        if (strstr(allow, method))
                return;
        size_t n = strlen(allow);
        snprintf(allow + n, 64 - n, "%s%s", n ? ", " : "", method);
}

unsigned http_route_match(const char *method, const char *raw_path, struct http_match *ret,
                          char allow[64], struct cage_error *msg)
{
        struct segments s;
        const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
        allow[0] = '\0';
        *ret = (struct http_match){0};
        if (split(raw_path, &s) < 0) {
                cage_fail(msg, -EINVAL, "no such route");
                return 404;
        }
        const struct route *found = NULL;
        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
                if (!pattern_fits(routes[i].pattern, &s))
                        continue;
                allow_add(allow, routes[i].method);
                if (!found && strcmp(routes[i].method, m) == 0)
                        found = &routes[i];
        }
        if (!found) {
                if (allow[0]) {
                        cage_fail(msg, -EINVAL, "method %.16s is not allowed here (allowed: %s)",
                                  method, allow);
                        return 405;
                }
                cage_fail(msg, -EINVAL, "no such route");
                return 404;
        }
        if (decode_params(found->pattern, &s, ret, msg) < 0) {
                http_match_clear(ret);
                return 400;
        }
        ret->fn = found->fn;
        ret->flags = found->flags;
        return 0;
}

void http_match_clear(struct http_match *m)
{
        free(m->name);
        free(m->run_id);
        free(m->path);
        *m = (struct http_match){0};
}
