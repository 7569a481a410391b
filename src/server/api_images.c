/* Route handlers for /v1/images (docs/API.md): list, inspect, pull, import
 * by upload and remove. Images are the server's, shared by every tenant;
 * importing and removing are for operators (their routes say so), pulling
 * is for anyone whose request the config's images.allow admits, as using
 * an image in a sandbox pulls it too. A reference is the rest of the path:
 * /v1/images/docker.io/library/python:3.12-slim. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codecage/service.h"
#include "server/http.h"
#include "util/cleanup.h"
#include "util/error.h"

int api_images_list(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        int ret = cage_service_images_list(c->ctx->svc, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, json_pack("{s:o}", "images", doc));
        return 0;
}

int api_image_inspect(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        int ret = cage_service_image_inspect(c->ctx->svc, c->path, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

int api_image_pull(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        int ret = cage_service_image_pull(c->ctx->svc, c->tenant, c->json, NULL, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}

/* The body is the archive; ?tag=REF names its one image. */
int api_image_import(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        _cleanup_free_ char *tag = NULL;
        if (http_query_get(c->query, "tag", &tag) < 0)
                return cage_fail(err, -EINVAL, "tag: bad percent-encoding");
        if (!c->body_len)
                return cage_fail(err, -EINVAL,
                                 "the body must be a `docker save` archive or an OCI layout (tar)");
        json_t *doc = NULL;
        int ret = cage_service_image_import(c->ctx->svc, c->tenant, c->body, c->body_len, tag, &doc,
                                            err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 201, json_pack("{s:o}", "imported", doc));
        return 0;
}

int api_image_remove(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        int ret = cage_service_image_remove(c->ctx->svc, c->tenant, c->path, &doc, err);
        if (ret < 0)
                return ret;
        http_reply_json(r, 200, doc);
        return 0;
}
