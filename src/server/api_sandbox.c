/* Handlers of the sandbox routes: health, the OpenAPI document, create /
 * list / get / remove / stop / start / kill / logs, exec and one-shot runs.
 *
 * Each handler only translates: HTTP parameters to a service call, the
 * service's JSON to a reply. Validation of documents is the service's
 * (one set of messages for every front end); this layer checks what only
 * it sees: query parameters. A plain (non-streaming) exec or run runs on
 * the connection's own thread (http.c switches the idle timeout off while
 * a handler runs) and is cancelled when the server stops. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"

int api_healthz(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = json_pack("{s:s,s:s}", "status", "ok", "version", CODECAGE_VERSION);
        if (!doc)
                return cage_fail(err, -ENOMEM, "healthz");
        http_reply_json(r, 200, doc);
        return 0;
}

int api_openapi(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        size_t len = (size_t)(cage_openapi_json_end - cage_openapi_json);
        r->raw = malloc(len);
        if (!r->raw)
                return cage_fail(err, -ENOMEM, "openapi");
        memcpy(r->raw, cage_openapi_json, len);
        r->raw_len = len;
        r->content_type = "application/json";
        r->status = 200;
        return 0;
}

int api_sandbox_create(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *info = NULL;
        int ret = cage_service_sandbox_create(c->ctx->svc, c->tenant, c->json, &info, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 201, info);
        return 0;
}

int api_sandbox_list(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        _cleanup_free_ char *label = NULL;
        json_t *doc = NULL;
        int ret = http_query_get(c->query, "label", &label);
        if (ret < 0)
                return cage_fail(err, -EINVAL, "label: bad percent-encoding or a NUL byte");
        if (label && !strchr(label, '='))
                return cage_fail(err, -EINVAL, "label: must be KEY=VALUE");
        if ((ret = cage_service_sandbox_list(c->ctx->svc, c->tenant, label, &doc, err)) < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

int api_sandbox_get(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *info = NULL;
        int ret = cage_service_sandbox_get(c->ctx->svc, c->tenant, c->name, &info, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, info);
        return 0;
}

int api_sandbox_remove(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        int ret = cage_service_sandbox_remove(c->ctx->svc, c->tenant, c->name, err);
        if (ret < 0)
                return ret;
        json_t *doc = json_pack("{s:s}", "removed", c->name);
        if (!doc)
                return cage_fail(err, -ENOMEM, "remove");
        http_reply_json(r, 200, doc);
        return 0;
}

typedef int (*lifecycle_fn)(struct cage_service *svc, const char *tenant, const char *name,
                            json_t **ret, struct cage_error *err);

static int lifecycle(struct http_call *c, struct http_reply *r, lifecycle_fn fn,
                     struct cage_error *err)
{
        json_t *info = NULL;
        int ret = fn(c->ctx->svc, c->tenant, c->name, &info, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, info);
        return 0;
}

int api_sandbox_stop(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return lifecycle(c, r, cage_service_sandbox_stop, err);
}

int api_sandbox_start(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return lifecycle(c, r, cage_service_sandbox_start, err);
}

int api_sandbox_kill(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        return lifecycle(c, r, cage_service_sandbox_kill, err);
}

/* ?tail=N: decimal digits only, 0..HTTP_LOGS_TAIL_MAX. */
static int parse_tail(const char *query, size_t *ret, struct cage_error *err)
{
        _cleanup_free_ char *v = NULL;
        int r = http_query_get(query, "tail", &v);
        *ret = 0;
        if (r == 0)
                return 0;
        if (r < 0 || !v[0] || strlen(v) > 6 || strspn(v, "0123456789") != strlen(v) ||
            strtoul(v, NULL, 10) > HTTP_LOGS_TAIL_MAX)
                return cage_fail(err, -EINVAL, "tail: must be an integer from 0 to %d",
                                 HTTP_LOGS_TAIL_MAX);
        *ret = strtoul(v, NULL, 10);
        return 0;
}

int api_sandbox_logs(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        size_t tail;
        json_t *doc = NULL;
        int ret = parse_tail(c->query, &tail, err);
        if (ret < 0)
                return ret;
        if ((ret = cage_service_sandbox_logs(c->ctx->svc, c->tenant, c->name, tail, &doc, err)) < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

/* A plain exec or run: the whole result at the end. */
static int run_plain(struct http_call *c, enum sse_kind kind, struct http_reply *r,
                     struct cage_error *err)
{
        struct cage_service_io io = {.cancel_fd = c->ctx->shutdown_fd};
        json_t *result = NULL;
        int ret;
        if (kind == SSE_EXEC)
                ret = cage_service_exec(c->ctx->svc, c->tenant, c->name, c->json, &io, &result,
                                        err);
        else
                ret = cage_service_run(c->ctx->svc, c->tenant, c->json, &io, &result, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, result);
        return 0;
}

int api_exec(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        if (c->wants_sse)
                return sse_start(c, SSE_EXEC, r, err);
        return run_plain(c, SSE_EXEC, r, err);
}

int api_run(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        if (c->wants_sse)
                return sse_start(c, SSE_RUN, r, err);
        return run_plain(c, SSE_RUN, r, err);
}
