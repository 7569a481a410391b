/* MCP resources: the files codecage can hand out by URI.
 *
 *   codecage://runs/<run_id>/<path>           an artifact of a one-shot run
 *                                             (path relative to its /workspace,
 *                                             e.g. output/plot.png), for the
 *                                             config's retention period
 *   codecage://sandboxes/<name>/files/<path>  a workspace file of a named sandbox
 *
 * Part of codecage's provider (mcp_tools.c): its resource templates
 * announce both; its read serves them (UTF-8 text as text, anything else
 * as a base64 blob, at most MCP_READ_MAX bytes) through the service, as
 * the session's tenant. It lists no resources: files come and go with
 * every call, so tool results announce them as resource_link blocks
 * instead of a listing that would be stale at once (docs/MCP.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http.h"
#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "services/service.h"
#include "util/cleanup.h"

static const char run_prefix[] = "codecage://runs/";
static const char sandbox_prefix[] = "codecage://sandboxes/";

/* ---- templates ---------------------------------------------------------------------- */

json_t *mcp_codecage_resource_templates(void)
{
        return json_pack(
                "[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]", "uriTemplate",
                "codecage://runs/{run_id}/{+path}", "name", "run-artifact", "title",
                "Artifact of a one-shot run", "description",
                "A file a one-shot run_python / run_shell wrote to /workspace/output/ (path "
                "relative to /workspace, e.g. output/plot.png); kept for the server's retention "
                "period.",
                "uriTemplate", "codecage://sandboxes/{name}/files/{+path}", "name", "sandbox-file",
                "title", "File of a named sandbox", "description",
                "A file in the /workspace of a named sandbox (path relative to /workspace).");
}

/* ---- read --------------------------------------------------------------------------- */

static const char *mime_by_name(const char *path, bool text)
{
        static const struct {
                const char *ext, *mime;
        } types[] = {
                {".png", "image/png"},         {".jpg", "image/jpeg"},
                {".jpeg", "image/jpeg"},       {".gif", "image/gif"},
                {".webp", "image/webp"},       {".svg", "image/svg+xml"},
                {".json", "application/json"}, {".csv", "text/csv"},
                {".html", "text/html"},        {".md", "text/markdown"},
                {".pdf", "application/pdf"},   {".txt", "text/plain"},
        };
        const char *dot = strrchr(path, '.');
        for (size_t i = 0; dot && i < ELEMENTSOF(types); i++)
                if (strcasecmp(dot, types[i].ext) == 0)
                        return types[i].mime;
        return text ? "text/plain" : "application/octet-stream";
}

void mcp_resource_uri_clear(struct mcp_resource_uri *t)
{
        free(t->id);
        free(t->path);
}

/* Splits "<id>/<rest>" after prefix; for sandboxes rest must start with
 * "files/". */
int mcp_resource_uri_parse(const char *uri, struct mcp_resource_uri *t)
{
        const char *rest;
        if (strncmp(uri, run_prefix, sizeof(run_prefix) - 1) == 0) {
                t->run = true;
                rest = uri + sizeof(run_prefix) - 1;
        } else if (strncmp(uri, sandbox_prefix, sizeof(sandbox_prefix) - 1) == 0) {
                rest = uri + sizeof(sandbox_prefix) - 1;
        } else {
                return -1;
        }
        const char *slash = strchr(rest, '/');
        if (!slash || slash == rest || strpbrk(rest, "?#"))
                return -1;
        t->id = strndup(rest, (size_t)(slash - rest));
        if (!t->id || !http_name_is_valid(t->id))
                return -1;
        const char *path = slash + 1;
        if (!t->run) {
                if (strncmp(path, "files/", 6) != 0)
                        return -1;
                path += 6;
        }
        if (!*path || http_decode(path, strlen(path), false, &t->path) < 0)
                return -1;
        return 0;
}

static json_t *read_error(const char *uri, int r, const struct cage_error *err, struct mcp_error *e)
{
        if (r == -ENOENT)
                return mcp_fail(e, JSONRPC_RESOURCE_NOT_FOUND, "Resource not found: %.300s (%s)",
                                uri, err->message);
        if (r == -E2BIG)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "%.300s is larger than %d bytes; read a part of it with run_shell "
                                "(head, tail) instead",
                                uri, MCP_READ_MAX);
        if (r == -EINVAL || r == -EISDIR || r == -ELOOP || r == -EXDEV || r == -EPERM)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS, "%.300s: %s", uri, err->message);
        return mcp_fail(e, JSONRPC_INTERNAL_ERROR, "%.300s: %s", uri, err->message);
}

static json_t *contents(const char *uri, const char *path, const void *data, size_t len)
{
        bool text = mcp_utf8_valid(data, len);
        const char *mime = mime_by_name(path, text);
        if (text)
                return json_pack("{s:[{s:s, s:s, s:s%}]}", "contents", "uri", uri, "mimeType", mime,
                                 "text", (const char *)data, len);
        _cleanup_free_ char *b64 = mcp_base64(data, len);
        return b64 ? json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType", mime,
                               "blob", b64)
                   : NULL;
}

/* Reads uri, which mcp_resource_uri_parse() took apart into t. */
static json_t *read_target(struct mcp_session *s, const char *uri, const struct mcp_resource_uri *t,
                           struct mcp_error *e)
{
        struct cage_error err = {0};
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        int r = t->run ? cage_service_run_file_read(s->srv->svc, s->tenant, t->id, t->path,
                                                    MCP_READ_MAX, &data, &len, &err)
                       : cage_service_file_read(s->srv->svc, s->tenant, t->id, t->path,
                                                MCP_READ_MAX, &data, &len, &err);
        if (r == -ENOENT)
                mcp_session_audit_foreign(s, "resources/read", t->run ? NULL : t->id,
                                          t->run ? t->id : NULL);
        return r < 0 ? read_error(uri, r, &err, e) : contents(uri, t->path, data, len);
}

int mcp_codecage_resource_read(const struct mcp_provider *p, struct mcp_session *s, const char *uri,
                               json_t **ret, struct mcp_error *e)
{
        struct mcp_resource_uri t = {0};
        int r = mcp_resource_uri_parse(uri, &t) < 0 ? 0
                                                    : 1; /* not ours: the dispatch's "not found" */
        if (r)
                *ret = read_target(s, uri, &t, e);
        mcp_resource_uri_clear(&t);
        return r;
}
