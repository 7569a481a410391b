/* The Connect protocol (connectrpc.com/docs/protocol) as the E2B SDKs
 * speak it to envd: HTTP/1.1, the JSON codec, no compression.
 *
 *  - unary calls: POST with Content-Type application/json and the request
 *    message as the body; the answer is the response message, or an error
 *    {"code": "not_found", "message": ...} with the code's HTTP status;
 *  - server streams: Content-Type application/connect+json; the request
 *    body is one envelope (1 byte of flags, 4 bytes of big-endian length,
 *    the JSON message), the answer a stream of envelopes ending with the
 *    end-of-stream envelope (flags 2): {} or {"error": {code, message}}.
 *    The response's HTTP status is 200 even for errors.
 * Envelopes are bounded by the request body limit; a compressed envelope
 * (flag 1) is refused: the SDKs never send one. */
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/e2b.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/sse_queue.h"

#define FLAG_END 0x02

static const struct {
        const char *name;
        unsigned status;
} codes[] = {
        [CONNECT_CANCELED] = {"canceled", 499},
        [CONNECT_UNKNOWN] = {"unknown", 500},
        [CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
        [CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
        [CONNECT_NOT_FOUND] = {"not_found", 404},
        [CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
        [CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
        [CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
        [CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
        [CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
        [CONNECT_INTERNAL] = {"internal", 500},
        [CONNECT_UNAVAILABLE] = {"unavailable", 503},
        [CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};

enum e2b_connect_code e2b_connect_code_of(int r)
{
        switch (r) {
        case -EINVAL:
        case -EISDIR:
        case -ENOTDIR:
        case -ENAMETOOLONG:
                return CONNECT_INVALID_ARGUMENT;
        case -ENOENT:
                return CONNECT_NOT_FOUND;
        case -EEXIST:
                return CONNECT_ALREADY_EXISTS;
        case -EPERM:
        case -ELOOP:
        case -EXDEV:
                return CONNECT_PERMISSION_DENIED;
        case -E2BIG:
        case -ENOSPC:
                return CONNECT_RESOURCE_EXHAUSTED;
        case -EBUSY:
        case -ENOTEMPTY:
                return CONNECT_FAILED_PRECONDITION;
        default:
                return CONNECT_INTERNAL;
        }
}

static json_t *error_json(enum e2b_connect_code code, const char *message)
{
        json_t *doc = json_object();
        if (!doc)
                return NULL;
        json_object_set_new(doc, "code", json_string(codes[code].name));
        /* Messages may quote client paths: only valid UTF-8 reaches JSON. */
        json_t *m = json_string(message ? message : "");
        json_object_set_new(doc, "message", m ? m : json_string("(a message that is not UTF-8)"));
        return doc;
}

void e2b_connect_error(struct e2b_reply *reply, enum e2b_connect_code code, const char *message)
{
        json_decref(reply->json);
        reply->json = error_json(code, message);
        reply->status = codes[code].status;
        reply->content_type = "application/json";
}

void e2b_connect_stream_error(struct e2b_reply *reply, enum e2b_connect_code code,
                              const char *message)
{
        json_auto_t *end = json_pack("{s:o}", "error", error_json(code, message));
        char *text = end ? json_dumps(end, JSON_COMPACT) : NULL;
        size_t n = text ? strlen(text) : 0;
        unsigned char *env = text ? malloc(n + 5) : NULL;
        json_decref(reply->json);
        reply->json = NULL;
        if (!env) {
                free(text);
                return e2b_connect_error(reply, code, message);
        }
        env[0] = FLAG_END;
        env[1] = (unsigned char)(n >> 24);
        env[2] = (unsigned char)(n >> 16);
        env[3] = (unsigned char)(n >> 8);
        env[4] = (unsigned char)n;
        memcpy(env + 5, text, n);
        free(text);
        free(reply->raw);
        reply->raw = env;
        reply->raw_len = n + 5;
        reply->status = 200;
        reply->content_type = "application/connect+json";
}

static int push_envelope(struct sse_queue *q, unsigned char flags, json_t *msg)
{
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        _cleanup_free_ unsigned char *env = malloc(n + 5);
        if (!env)
                return -ENOMEM;
        env[0] = flags;
        env[1] = (unsigned char)(n >> 24);
        env[2] = (unsigned char)(n >> 16);
        env[3] = (unsigned char)(n >> 8);
        env[4] = (unsigned char)n;
        memcpy(env + 5, text, n);
        return sse_queue_push_raw(q, env, n + 5);
}

int e2b_connect_push(struct sse_queue *q, json_t *msg)
{
        return push_envelope(q, 0, msg);
}

int e2b_connect_push_end(struct sse_queue *q, int code, const char *message)
{
        json_auto_t *end = json_object();
        if (!end)
                return -ENOMEM;
        if (code >= 0)
                json_object_set_new(end, "error", error_json((enum e2b_connect_code)code, message));
        return push_envelope(q, FLAG_END, end);
}

/* ---- streaming responses -------------------------------------------------- */

struct stream {
        struct sse_queue *q;
        void (*release)(void *arg);
        void *arg;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        (void)pos;
        struct stream *s = cls;
        ssize_t n = sse_queue_read(s->q, buf, max);
        if (n == SSE_QUEUE_END)
                return MHD_CONTENT_READER_END_OF_STREAM;
        return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

/* MHD is done with the response (sent, client gone, server stopping): the
 * queue closes, so a producer waiting for room returns at once, then the
 * owner's release runs. */
static void stream_free(void *cls)
{
        struct stream *s = cls;
        sse_queue_close(s->q);
        sse_queue_unref(s->q);
        if (s->release)
                s->release(s->arg);
        free(s);
}

struct MHD_Response *e2b_stream_response(struct sse_queue *q, const char *content_type,
                                         void (*release)(void *arg), void *arg)
{
        struct stream *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        *s = (struct stream){.q = sse_queue_ref(q), .release = release, .arg = arg};
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                                      stream_read, s, stream_free);
        if (!resp) {
                sse_queue_unref(s->q);
                free(s);
                return NULL;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return resp;
}

struct MHD_Response *e2b_connect_stream_response(struct sse_queue *q, json_t *keepalive)
{
        if (keepalive) {
                _cleanup_free_ char *text = json_dumps(keepalive, JSON_COMPACT);
                size_t n = text ? strlen(text) : 0;
                unsigned char env[256];
                if (text && n + 5 <= sizeof(env)) {
                        env[0] = 0;
                        env[1] = env[2] = 0;
                        env[3] = (unsigned char)(n >> 8);
                        env[4] = (unsigned char)n;
                        memcpy(env + 5, text, n);
                        (void)sse_queue_set_keepalive(q, env, n + 5);
                }
        }
        return e2b_stream_response(q, "application/connect+json", NULL, NULL);
}

void e2b_connect_fail(struct MHD_Connection *conn, struct e2b_reply *reply,
                      enum e2b_connect_code code, const char *message)
{
        if (e2b_connect_is_stream(conn))
                e2b_connect_stream_error(reply, code, message);
        else
                e2b_connect_error(reply, code, message);
}

int e2b_connect_dispatch(struct e2b_call *c, struct e2b_reply *reply, const char *prefix,
                         const struct e2b_method *methods, size_t n)
{
        size_t len = strlen(prefix);
        if (strncmp(c->path, prefix, len) != 0)
                return -ENOENT;
        const char *name = c->path + len;
        if (e2b_connect_refuse_codec(c->conn, reply))
                return 0;
        if (strcmp(c->method, "POST") != 0) {
                e2b_connect_error(reply, CONNECT_UNIMPLEMENTED, "Connect calls are POST requests");
                return 0;
        }
        for (size_t i = 0; i < n; i++) {
                if (strcmp(name, methods[i].name) != 0)
                        continue;
                if (methods[i].fn)
                        methods[i].fn(c, reply);
                else
                        e2b_connect_fail(c->conn, reply, CONNECT_UNIMPLEMENTED,
                                         methods[i].unoffered);
                return 0;
        }
        e2b_connect_fail(c->conn, reply, CONNECT_UNIMPLEMENTED, "no such method");
        return 0;
}

bool e2b_connect_refuse_codec(struct MHD_Connection *conn, struct e2b_reply *reply)
{
        const char *ct =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!ct || !strcasestr(ct, "proto"))
                return false;
        static const char msg[] = "codecage speaks the Connect protocol with the JSON codec only "
                                  "(application/json, application/connect+json)";
        if (strncasecmp(ct, "application/connect+", 20) == 0)
                e2b_connect_stream_error(reply, CONNECT_UNIMPLEMENTED, msg);
        else
                e2b_connect_error(reply, CONNECT_UNIMPLEMENTED, msg);
        return true;
}

bool e2b_connect_is_stream(struct MHD_Connection *conn)
{
        const char *ct =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        return ct && strncasecmp(ct, "application/connect+json", 24) == 0;
}

uint64_t e2b_connect_timeout_ms(struct MHD_Connection *conn)
{
        const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Connect-Timeout-Ms");
        if (!t || !*t || strspn(t, "0123456789") != strlen(t) || strlen(t) > 10)
                return 0;
        return strtoull(t, NULL, 10);
}
