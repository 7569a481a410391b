/* Handlers of the file routes: a sandbox's workspace (list, stat, download,
 * upload, write from JSON, mkdir, delete) and the artifacts of one-shot
 * runs.
 *
 * Paths reach the service as the client wrote them (decoded): the service
 * resolves them beneath the workspace and refuses ".." and absolute paths
 * outside /workspace. Downloads are bounded by limits.max_body_bytes (a
 * larger file is 413) and sent as raw bytes with the Content-Type that
 * content sniffing gives. JSON writes take `encoding` "utf-8" (default) or
 * "base64", decoded strictly. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"
#include "util/base64.h"
#include "services/config.h"
#include "services/files.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"

/* A 0/1 query flag; absent is false. */
static int query_flag(const char *query, const char *key, bool *ret, struct cage_error *err)
{
        _cleanup_free_ char *v = NULL;
        int r = http_query_get(query, key, &v);
        *ret = false;
        if (r == 0)
                return 0;
        if (r > 0 && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)) {
                *ret = true;
                return 0;
        }
        if (r > 0 && (strcmp(v, "0") == 0 || strcmp(v, "false") == 0))
                return 0;
        return cage_fail(err, -EINVAL, "%s: must be 1 or 0", key);
}

static int reply_path(struct http_reply *r, const char *key, const char *path, json_int_t size,
                      struct cage_error *err)
{
        json_t *doc = size >= 0 ? json_pack("{s:s,s:I}", key, path, "size", size)
                                : json_pack("{s:s}", key, path);
        if (!doc)
                return cage_fail(err, -ENOMEM, "reply");
        http_reply_json(r, 200, doc);
        return 0;
}

static void reply_bytes(struct http_reply *r, void *data, size_t len)
{
        r->status = 200;
        r->raw = data;
        r->raw_len = len;
        r->content_type = cage_files_mime(data, len);
}

int api_file_list(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        _cleanup_free_ char *dir = NULL;
        json_t *doc = NULL;
        int ret = http_query_get(c->query, "path", &dir);
        if (ret < 0)
                return cage_fail(err, -EINVAL, "path: bad percent-encoding or a NUL byte");
        ret = cage_service_file_list(c->ctx->svc, c->tenant, c->name, dir ? dir : "", &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

int api_file_get(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        bool want_stat;
        int ret = query_flag(c->query, "stat", &want_stat, err);
        if (ret < 0)
                return ret;
        if (want_stat) {
                json_t *doc = NULL;
                ret = cage_service_file_stat(c->ctx->svc, c->tenant, c->name, c->path, &doc, err);
                if (ret < 0)
                        return ret;
                http_reply_json(r, 200, doc);
                return 0;
        }
        void *data = NULL;
        size_t len = 0;
        ret = cage_service_file_read(c->ctx->svc, c->tenant, c->name, c->path,
                                     (size_t)c->ctx->cfg->limits.max_body_bytes, &data, &len, err);
        if (ret < 0)
                return ret;
        reply_bytes(r, data, len);
        return 0;
}

int api_file_put(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        int ret = cage_service_file_write(c->ctx->svc, c->tenant, c->name, c->path, c->body,
                                          c->body_len, err);
        if (ret < 0)
                return ret;
        return reply_path(r, "path", c->path, (json_int_t)c->body_len, err);
}

/* The bytes of {content, encoding}; *ret_owned is set when decoded. */
static int file_content(const json_t *body, const char **ret, size_t *ret_len, void **ret_owned,
                        struct cage_error *err)
{
        const json_t *content = json_object_get(body, "content");
        const json_t *encoding = json_object_get(body, "encoding");
        const char *enc = "utf-8";
        if (!json_is_string(content))
                return cage_fail(err, -EINVAL, "content: a string is required");
        if (encoding && !json_is_string(encoding))
                return cage_fail(err, -EINVAL, "encoding: must be \"utf-8\" or \"base64\"");
        if (encoding)
                enc = json_string_value(encoding);
        if (strcmp(enc, "utf-8") == 0) {
                *ret = json_string_value(content);
                *ret_len = json_string_length(content);
                return 0;
        }
        if (strcmp(enc, "base64") != 0)
                return cage_fail(err, -EINVAL, "encoding: must be \"utf-8\" or \"base64\"");
        if (cage_base64_decode(json_string_value(content), json_string_length(content), ret_owned,
                               ret_len) < 0)
                return cage_fail(err, -EINVAL,
                                 "content: not valid base64 (standard alphabet, padded, no "
                                 "whitespace)");
        *ret = *ret_owned;
        return 0;
}

static int check_keys(const json_t *body, const char *const *allowed, struct cage_error *err)
{
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)body, key, v)
        {
                bool known = false;
                for (size_t i = 0; allowed[i] && !known; i++)
                        known = strcmp(key, allowed[i]) == 0;
                if (!known)
                        return cage_fail(err, -EINVAL, "%.64s: unknown key", key);
        }
        return 0;
}

static int body_path(const json_t *body, const char **ret, struct cage_error *err)
{
        const json_t *p = json_object_get(body, "path");
        if (!json_is_string(p))
                return cage_fail(err, -EINVAL, "path: a string is required");
        *ret = json_string_value(p);
        return 0;
}

int api_file_write(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        static const char *const keys[] = {"path", "content", "encoding", "url", NULL};
        _cleanup_free_ void *owned = NULL;
        const char *path = NULL, *data = NULL;
        size_t len = 0;
        int ret;
        if ((ret = check_keys(c->json, keys, err)) < 0 ||
            (ret = body_path(c->json, &path, err)) < 0)
                return ret;
        const json_t *url = json_object_get(c->json, "url");
        if (url) { /* {path, url}: the server downloads it (docs/NETWORK.md) */
                if (!json_is_string(url) || json_object_size(c->json) != 2)
                        return cage_fail(err, -EINVAL, "url: a string, with path and nothing else");
                ret = cage_service_file_fetch(c->ctx->svc, c->tenant, c->name, path,
                                              json_string_value(url), "url", err);
                return ret < 0 ? ret : reply_path(r, "path", path, -1, err);
        }
        if ((ret = file_content(c->json, &data, &len, &owned, err)) < 0)
                return ret;
        ret = cage_service_file_write(c->ctx->svc, c->tenant, c->name, path, data, len, err);
        if (ret < 0)
                return ret;
        return reply_path(r, "path", path, (json_int_t)len, err);
}

int api_file_mkdir(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        static const char *const keys[] = {"path", NULL};
        const char *path = NULL;
        int ret;
        if ((ret = check_keys(c->json, keys, err)) < 0 ||
            (ret = body_path(c->json, &path, err)) < 0)
                return ret;
        if ((ret = cage_service_file_mkdir(c->ctx->svc, c->tenant, c->name, path, err)) < 0)
                return ret;
        return reply_path(r, "path", path, -1, err);
}

int api_file_delete(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        bool recursive;
        int ret = query_flag(c->query, "recursive", &recursive, err);
        if (ret < 0)
                return ret;
        ret = cage_service_file_delete(c->ctx->svc, c->tenant, c->name, c->path, recursive, err);
        if (ret < 0)
                return ret;
        return reply_path(r, "removed", c->path, -1, err);
}

int api_run_file(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        void *data = NULL;
        size_t len = 0;
        int ret = cage_service_run_file_read(c->ctx->svc, c->tenant, c->run_id, c->path,
                                             (size_t)c->ctx->cfg->limits.max_body_bytes, &data,
                                             &len, err);
        if (ret < 0)
                return ret;
        reply_bytes(r, data, len);
        return 0;
}
