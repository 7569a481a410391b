/* Handlers of the Python routes: one-shot runs (POST /v1/python), runs in
 * a sandbox's persistent session, the session's variables and reset, the
 * warm pool's statistics, and the answers of host calls
 * (POST /v1/host_calls/{id}).
 *
 * As in api_sandbox.c, handlers translate and the service validates the
 * documents (unknown fields, identifiers, limits). This layer owns what
 * only HTTP has:
 *  - `host_functions` of a run, taken out of the body before the service
 *    sees it: host calls travel as SSE events, so it needs
 *    Accept: text/event-stream (sse.c, host_calls.c);
 *  - the Content-Type of a variable upload: application/json (any JSON
 *    value) or text/plain (the raw body becomes a str, never parsed: a
 *    large `context` of up to limits.max_body_bytes);
 *  - the JSON size of what goes to the session in one frame of its
 *    channel (docs/SESSION-PROTOCOL.md: at most 16 MiB), refused with 413
 *    here rather than breaking the session.
 * Routes with a {var} or {id} get it as the {path} parameter (routes.c
 * has no single-segment kind for them); a '/' in it is no such route. */
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/host_calls.h"
#include "server/http.h"
#include "services/service.h"
#include "util/json_bounded.h"
#include "util/cleanup.h"
#include "util/error.h"

#define HOST_FUNCTIONS_MAX 64
#define FUNCTION_NAME_MAX  64
#define VAR_JSON_MAX       (16 * 1024 * 1024 - 4096) /* a frame's JSON, less the envelope */

/* ---- helpers ---------------------------------------------------------------- */

static int reply_doc(struct http_reply *r, unsigned status, json_t *doc, struct cage_error *err)
{
        if (!doc)
                return cage_fail(err, -ENOMEM, "reply");
        http_reply_json(r, status, doc);
        return 0;
}

static int no_route(struct cage_error *err)
{
        return cage_fail(err, -ENOENT, "no such route");
}

/* Unknown keys of a small request document are refused, as the service
 * does for its own. */
static int only_keys(const json_t *doc, const char *const *keys, struct cage_error *err)
{
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)doc, k, v)
        {
                size_t i = 0;
                while (keys[i] && strcmp(keys[i], k) != 0)
                        i++;
                if (!keys[i])
                        return cage_fail(err, -EINVAL, "unknown field \"%.64s\"", k);
        }
        return 0;
}

/* Bytes of the compact JSON text of v (without writing it). */
static size_t json_size(const json_t *v)
{
        return json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* An ASCII Python identifier (keywords are refused by the session). */
static bool identifier(const char *s, size_t max)
{
        size_t n = strlen(s);
        if (n == 0 || n > max || (s[0] >= '0' && s[0] <= '9'))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                      (s[i] >= '0' && s[i] <= '9')))
                        return false;
        return true;
}

/* Whether Content-Type ct is `type`, with or without parameters. */
static bool media_is(const char *ct, const char *type)
{
        size_t n = strlen(type);
        return ct && strncasecmp(ct, type, n) == 0 &&
               (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static const char *content_type(const struct http_call *c)
{
        return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
}

static int reply_unsupported(struct http_reply *r, const char *message, struct cage_error *err)
{
        return reply_doc(r, 415, http_error_doc(415, message), err);
}

/* ---- runs ------------------------------------------------------------------- */

static int check_host_functions(const json_t *hf, struct cage_error *err)
{
        static const char what[] = "host_functions: true, false (or null) or a list of up to 64 "
                                   "extra function names (Python identifiers of at most 64 "
                                   "characters)";
        size_t i;
        const json_t *v;
        if (json_is_boolean(hf) || json_is_null(hf))
                return 0;
        if (!json_is_array(hf) || json_array_size(hf) > HOST_FUNCTIONS_MAX)
                return cage_fail(err, -EINVAL, "%s", what);
        json_array_foreach(hf, i, v)
        {
                if (!json_is_string(v) || !identifier(json_string_value(v), FUNCTION_NAME_MAX))
                        return cage_fail(err, -EINVAL, "%s", what);
        }
        return 0;
}

/* Takes `host_functions` out of the body: whether host calls go to the
 * client, and the extra names (new reference or NULL). */
static int take_host_functions(struct http_call *c, struct sse_python *py, json_t **functions,
                               struct cage_error *err)
{
        json_t *hf = json_object_get(c->json, "host_functions");
        *py = (struct sse_python){0};
        *functions = NULL;
        if (!hf)
                return 0;
        int r = check_host_functions(hf, err);
        if (r < 0)
                return r;
        py->host_calls = json_is_true(hf) || json_is_array(hf);
        if (py->host_calls && !c->wants_sse)
                return cage_fail(err, -EINVAL,
                                 "host_functions: host calls are sent to the client as "
                                 "`host_call` events: send the request with \"Accept: "
                                 "text/event-stream\"");
        if (json_is_array(hf) && json_array_size(hf) > 0)
                *functions = py->functions = json_incref(hf);
        json_object_del(c->json, "host_functions");
        return 0;
}

/* A run in c->name's session, or a one-shot run without a name. */
static int python_run(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        struct sse_python py;
        json_auto_t *functions = NULL;
        int ret = take_host_functions(c, &py, &functions, err);
        if (ret < 0)
                return ret;
        if (c->wants_sse)
                return sse_start_python(c, &py, r, err);
        struct cage_service_io io = {.cancel_fd = c->ctx->shutdown_fd};
        struct cage_service_host host = {.fn = host_call_disabled};
        json_t *result = NULL;
        ret = cage_service_python_run(c->ctx->svc, c->tenant, c->name, c->json, &io, &host, &result,
                                      err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, result);
        return 0;
}

int api_python_oneshot(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return python_run(c, r, err);
}

int api_python_run(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return python_run(c, r, err);
}

int api_python_reset(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        int ret = cage_service_python_reset(c->ctx->svc, c->tenant, c->name, err);
        if (ret < 0)
                return ret;
        return reply_doc(r, 200, json_pack("{s:b}", "reset", 1), err);
}

int api_pool(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return reply_doc(r, 200, cage_service_pool_stats(c->ctx->svc), err);
}

/* ---- variables -------------------------------------------------------------- */

int api_python_var_list(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        int ret = cage_service_python_list(c->ctx->svc, c->tenant, c->name, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

int api_python_var_get(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        if (strchr(c->path, '/'))
                return no_route(err);
        int ret = cage_service_python_get(c->ctx->svc, c->tenant, c->name, c->path, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

static int var_put_json(struct http_call *c, struct cage_error *err)
{
        json_error_t jerr;
        if (c->body_len == 0)
                return cage_fail(err, -EINVAL, "body: a JSON value is required");
        /* The value only travels on as JSON: its strings may hold NUL. */
        bool too_large = false;
        json_auto_t *value = json_load_request(
                c->body, c->body_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                &jerr, &too_large);
        if (too_large)
                return http_body_too_complex(c->body_len, err);
        if (!value)
                return cage_fail(err, -EINVAL, "body: invalid JSON at line %d, column %d: %s",
                                 jerr.line, jerr.column, jerr.text);
        if (json_size(value) > VAR_JSON_MAX)
                return cage_fail(err, -E2BIG,
                                 "body: a JSON value of more than %d bytes; send a large text "
                                 "with Content-Type: text/plain, or load it from a file",
                                 VAR_JSON_MAX);
        return cage_service_python_set(c->ctx->svc, c->tenant, c->name, c->path, value, err);
}

/* text/plain is UTF-8; a charset parameter may only say so. */
static bool utf8_text(const char *ct)
{
        const char *cs = strcasestr(ct, "charset=");
        if (!cs)
                return true;
        cs += strlen("charset=");
        if (*cs == '"')
                cs++;
        return strncasecmp(cs, "utf-8", 5) == 0 || strncasecmp(cs, "us-ascii", 8) == 0;
}

int api_python_var_put(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        const char *ct = content_type(c);
        int ret;
        if (strchr(c->path, '/'))
                return no_route(err);
        if (media_is(ct, "application/json"))
                ret = var_put_json(c, err);
        else if (media_is(ct, "text/plain") && utf8_text(ct))
                ret = cage_service_python_set_text(c->ctx->svc, c->tenant, c->name, c->path,
                                                   c->body, c->body_len, err);
        else
                return reply_unsupported(r,
                                         "a variable is sent as Content-Type: application/json "
                                         "(any JSON value) or text/plain (UTF-8 text, kept as a "
                                         "str)",
                                         err);
        if (ret < 0)
                return ret;
        return reply_doc(r, 200, json_pack("{s:s}", "name", c->path), err);
}

/* POST .../variables/{var}/load: {path} is "VAR/load". */
static int load_target(const char *path, char **ret_var, struct cage_error *err)
{
        const char *slash = strchr(path, '/');
        if (!slash || strcmp(slash, "/load") != 0)
                return no_route(err);
        *ret_var = strndup(path, (size_t)(slash - path));
        return *ret_var ? 0 : cage_fail(err, -ENOMEM, "variable");
}

int api_python_var_load(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        static const char *const keys[] = {"path", NULL};
        _cleanup_free_ char *var = NULL;
        int ret = load_target(c->path, &var, err);
        if (ret == 0)
                ret = only_keys(c->json, keys, err);
        if (ret < 0)
                return ret;
        const char *file = json_string_value(json_object_get(c->json, "path"));
        if (!file)
                return cage_fail(err, -EINVAL,
                                 "path: required, a file of the workspace (relative to "
                                 "/workspace)");
        ret = cage_service_python_load_file(c->ctx->svc, c->tenant, c->name, var, file, err);
        if (ret < 0)
                return ret;
        return reply_doc(r, 200, json_pack("{s:s, s:s}", "name", var, "path", file), err);
}

/* ---- host calls ------------------------------------------------------------- */

static bool host_call_id_valid(const char *id)
{
        return strlen(id) == HOST_CALL_ID_LEN && strspn(id, "0123456789abcdef") == HOST_CALL_ID_LEN;
}

/* {value: any JSON} or {error: "message"}, exactly one. */
static int parse_answer(const json_t *doc, json_t **value, const char **error,
                        struct cage_error *err)
{
        static const char *const keys[] = {"value", "error", NULL};
        int r = only_keys(doc, keys, err);
        if (r < 0)
                return r;
        *value = json_object_get(doc, "value");
        json_t *e = json_object_get(doc, "error");
        if (!*value == !e)
                return cage_fail(err, -EINVAL,
                                 "body: exactly one of value (any JSON) and error (a string)");
        if (e && (!json_is_string(e) || json_string_length(e) > HOST_CALL_ERROR_MAX ||
                  strlen(json_string_value(e)) != json_string_length(e)))
                return cage_fail(err, -EINVAL, "error: a string of at most %d bytes, without NUL",
                                 HOST_CALL_ERROR_MAX);
        if (*value && json_size(*value) > HOST_CALL_VALUE_MAX)
                return cage_fail(err, -E2BIG, "value: more than %d bytes of JSON",
                                 HOST_CALL_VALUE_MAX);
        *error = e ? json_string_value(e) : NULL;
        return 0;
}

int api_host_call_answer(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *value = NULL;
        const char *error = NULL;
        if (!host_call_id_valid(c->path))
                return cage_fail(err, -ENOENT, "no host call %.40s is waiting", c->path);
        int ret = parse_answer(c->json, &value, &error, err);
        if (ret == 0)
                ret = host_call_answer(c->tenant, c->path, value, error, err);
        if (ret < 0)
                return ret;
        return reply_doc(r, 200, json_pack("{s:s}", "answered", c->path), err);
}
