/* Responses of the HTTP API: JSON documents, the one error format
 * {"error": {"code": "...", "message": "..."}}, and raw bytes.
 *
 * Every response carries X-Content-Type-Options: nosniff and
 * Cache-Control: no-store; raw downloads (bytes a sandbox wrote) also get
 * Content-Security-Policy: sandbox, so a browser never runs them as a page
 * of the API's origin. Error messages may quote what the client sent (a
 * name, a path): they are made valid UTF-8 with control characters
 * neutralised before encoding, so an error can always be sent. */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "core/output.h"
#include "server/http.h"
#include "util/cleanup.h"

static const struct {
        unsigned status;
        const char *code;
} error_codes[] = {
        {400, "invalid_request"},   {401, "unauthorized"},       {403, "forbidden"},
        {404, "not_found"},         {405, "method_not_allowed"}, {409, "conflict"},
        {413, "too_large"},         {414, "invalid_request"},    {415, "unsupported_media_type"},
        {429, "too_many_requests"}, {431, "invalid_request"},    {502, "bad_gateway"},
        {503, "unavailable"},       {504, "gateway_timeout"},    {507, "insufficient_storage"},
};

const char *http_error_code(unsigned status)
{
        for (size_t i = 0; i < sizeof(error_codes) / sizeof(error_codes[0]); i++)
                if (error_codes[i].status == status)
                        return error_codes[i].code;
        return "internal";
}

json_t *http_error_doc(unsigned status, const char *message)
{
        _cleanup_free_ char *clean = NULL;
        size_t len;
        if (cage_sanitize_text(message ? message : "", message ? strlen(message) : 0, &clean,
                               &len) < 0)
                return NULL;
        return json_pack("{s:{s:s,s:s%}}", "error", "code", http_error_code(status), "message",
                         clean, len);
}

void http_reply_json(struct http_reply *reply, unsigned status, json_t *doc)
{
        reply->status = status;
        reply->json = doc;
}

void http_reply_clear(struct http_reply *reply)
{
        json_decref(reply->json);
        free(reply->raw);
        if (reply->response)
                MHD_destroy_response(reply->response);
        *reply = (struct http_reply){0};
}

static void add_common_headers(struct MHD_Response *resp, const char *content_type)
{
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
}

static struct MHD_Response *json_response(json_t *doc)
{
        char *text = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
                return NULL;
        size_t len = strlen(text);
        text[len] = '\n'; /* replaces the NUL: the body is len + 1 bytes */
        struct MHD_Response *resp =
                MHD_create_response_from_buffer_with_free_callback(len + 1, text, free);
        if (!resp) {
                free(text);
                return NULL;
        }
        add_common_headers(resp, "application/json");
        return resp;
}

static struct MHD_Response *raw_response(struct http_reply *reply)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(
                reply->raw_len, reply->raw, free);
        if (!resp)
                return NULL;
        reply->raw = NULL;
        add_common_headers(resp,
                           reply->content_type ? reply->content_type : "application/octet-stream");
        MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
        return resp;
}

struct MHD_Response *http_reply_response(struct http_reply *reply)
{
        if (reply->response) {
                struct MHD_Response *resp = reply->response;
                reply->response = NULL;
                return resp;
        }
        if (reply->raw)
                return raw_response(reply);
        if (!reply->json)
                reply->json = json_object();
        return reply->json ? json_response(reply->json) : NULL;
}

int http_queue_reply(struct MHD_Connection *conn, struct http_reply *reply)
{
        struct MHD_Response *resp = http_reply_response(reply);
        if (!resp)
                return MHD_NO;
        enum MHD_Result r = MHD_queue_response(conn, reply->status, resp);
        MHD_destroy_response(resp);
        return r;
}

int http_queue_error(struct MHD_Connection *conn, unsigned status, const char *message,
                     const char *allow, bool auth_challenge)
{
        json_t *doc = http_error_doc(status, message);
        if (!doc)
                return MHD_NO;
        struct MHD_Response *resp = json_response(doc);
        json_decref(doc);
        if (!resp)
                return MHD_NO;
        if (allow)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        if (auth_challenge)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                        "Bearer realm=\"codecage\"");
        if (status == 429) /* a quota or the launch queue: calls end in seconds */
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, HTTP_RETRY_AFTER_S);
        enum MHD_Result r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}
