/* MCP's Streamable HTTP transport at /mcp (revision 2025-11-25; clients
 * of 2025-06-18 and 2025-03-26 too), on the listeners and threads of the
 * HTTP API (http.c authenticates the bearer token to a tenant first,
 * exactly as for /v1/ routes, and bounds the body).
 *
 *   POST    one JSON-RPC message. initialize without Mcp-Session-Id opens
 *           a session (the id comes back in that header); every other
 *           message needs the id. A tools/call of a client that accepts
 *           text/event-stream is answered with an SSE stream carrying its
 *           progress, log messages and sampling requests, then its
 *           response; the call runs on a worker thread while the
 *           connection's thread feeds the stream. Other requests get JSON
 *           at once; notifications and responses (the client's answers to
 *           our sampling requests) get 202.
 *   GET     the session's standalone SSE stream (one at a time: 409).
 *   DELETE  ends the session: its calls are cancelled; later requests
 *           with its id get 404.
 *
 * Sessions belong to the tenant that opened them (another tenant's id is
 * 404, as if it did not exist), at most SESSIONS_PER_TENANT per tenant
 * and SESSIONS_MAX in all; a session with no request, call or stream for
 * SESSION_IDLE_MS is closed, and when the table is full the least
 * recently used idle session makes room.
 *
 * Revision 2026-07-28 is stateless: a POST without Mcp-Session-Id whose
 * MCP-Protocol-Version header (or params._meta) names a version of no
 * initialize era is served on its own, by a session made for it and gone
 * with it (mcp_session_new_stateless()): its Mcp-Method and Mcp-Name
 * headers must repeat the body's method and name (or uri), its _meta is
 * checked (mcp_modern_check()), and the revision's errors get their HTTP
 * statuses (400, 404 for an unknown or removed method). State across
 * calls is a named sandbox. Its subscriptions/listen is an SSE response
 * that stays open (mcp_listen.c) until the client closes it or the
 * server stops, which ends it with the listen request's result.
 *
 * DNS rebinding: http.c applies the Host / Origin policy of every route
 * (http_guard.c) before this file sees a request. In a session, an
 * unsupported MCP-Protocol-Version header is 400.
 *
 * Locking: m->lock guards the session table, each entry's `users`,
 * `removed` and `get`; it may be held while taking a session's lock,
 * never the other way round. */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "server/http.h"
#include "server/mcp.h"
#include "server/mcp_http.h"
#include "server/mcp_provider.h"
#include "services/config.h"
#include "util/cleanup.h"
#include "util/base64.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/sse_queue.h"

#define SESSIONS_PER_TENANT 256
#define SESSIONS_MAX        4096
#define SESSION_IDLE_MS     (10 * 60 * 1000)
#define SESSION_HEADER      "Mcp-Session-Id"
#define VERSION_HEADER      "MCP-Protocol-Version"
#define METHOD_HEADER       "Mcp-Method"
#define NAME_HEADER         "Mcp-Name"
#define HEADER_VALUE_MAX    1024
#define STREAM_QUEUE_MAX    (4 * 1024 * 1024) /* bytes of events waiting on one stream */

struct http_session {
        struct mcp_session *s; /* a reference */
        char id[MCP_SESSION_ID_LEN + 1];
        uint64_t last_used_ms;
        size_t users; /* requests using the entry now */
        bool removed;
        struct sse_queue *get; /* the standalone GET stream (a reference) */
        struct http_session *next;
};

struct mcp_http {
        struct mcp_server *srv;
        const struct cage_config *cfg;
        int shutdown_fd;
        pthread_mutex_t lock;
        struct http_session *sessions;
        size_t n_sessions;
        size_t listening;           /* subscriptions/listen streams open */
        pthread_cond_t listen_gone; /* one ended */
};

struct mcp_http_request {
        struct mcp_http *m;
        struct http_session *hs;  /* a use of the entry */
        struct sse_queue *stream; /* its events (util/sse_queue.h) */
        struct mcp_sink sink;     /* into stream: `event: message` */
        pthread_mutex_t lock;
        struct mcp_call *call;           /* while it runs */
        struct mcp_subscription *listen; /* a subscriptions/listen stream */
        pthread_t worker;
        bool worker_started, is_get;
        bool listening; /* counted in m->listening */
};

/* A sink for calls answered in a plain JSON response: nothing can be
 * sent to the client before the response. */
static int discard_send(struct mcp_sink *sink, const json_t *msg)
{
        return -EPIPE;
}

static struct mcp_sink discard_sink = {.send = discard_send};

/* ---- the session table ------------------------------------------------------------ */

static void entry_free(struct http_session *hs)
{
        mcp_session_unref(hs->s);
        sse_queue_unref(hs->get);
        free(hs);
}

static void unlink_locked(struct mcp_http *m, struct http_session *hs)
{
        for (struct http_session **p = &m->sessions; *p; p = &(*p)->next)
                if (*p == hs) {
                        *p = hs->next;
                        m->n_sessions--;
                        break;
                }
        hs->removed = true;
        mcp_session_close(hs->s);
        if (hs->get)
                sse_queue_end(hs->get);
        if (hs->users == 0)
                entry_free(hs);
}

static bool idle(struct http_session *hs)
{
        return hs->users == 0 && !hs->get && mcp_session_calls(hs->s) == 0;
}

static void sweep_locked(struct mcp_http *m)
{
        uint64_t now = clock_mono_ms();
        for (struct http_session *hs = m->sessions, *next; hs; hs = next) {
                next = hs->next;
                if (idle(hs) && now - hs->last_used_ms >= SESSION_IDLE_MS)
                        unlink_locked(m, hs);
        }
}

static void release(struct mcp_http *m, struct http_session *hs)
{
        if (!hs)
                return;
        pthread_mutex_lock(&m->lock);
        hs->users--;
        hs->last_used_ms = clock_mono_ms();
        if (hs->removed && hs->users == 0)
                entry_free(hs);
        pthread_mutex_unlock(&m->lock);
}

static int acquire(struct mcp_http *m, const char *id, const char *tenant,
                   struct http_session **ret)
{
        pthread_mutex_lock(&m->lock);
        sweep_locked(m);
        struct http_session *hs = m->sessions;
        while (hs && !(strcmp(hs->id, id) == 0 && strcmp(hs->s->tenant, tenant) == 0))
                hs = hs->next;
        if (hs) {
                hs->users++;
                hs->last_used_ms = clock_mono_ms();
        }
        pthread_mutex_unlock(&m->lock);
        *ret = hs;
        return hs ? 0 : -ENOENT;
}

/* Makes room for a session of tenant: 0, or -EBUSY when every session in
 * the way is busy. */
static int make_room_locked(struct mcp_http *m, const char *tenant)
{
        size_t mine = 0;
        struct http_session *lru = NULL;
        for (struct http_session *hs = m->sessions; hs; hs = hs->next) {
                bool same = strcmp(hs->s->tenant, tenant) == 0;
                mine += same;
                if (idle(hs) && (same || m->n_sessions >= SESSIONS_MAX) &&
                    (!lru || hs->last_used_ms < lru->last_used_ms))
                        lru = hs;
        }
        if (mine < SESSIONS_PER_TENANT && m->n_sessions < SESSIONS_MAX)
                return 0;
        if (!lru)
                return -EBUSY;
        unlink_locked(m, lru);
        return 0;
}

static int new_id(char id[MCP_SESSION_ID_LEN + 1])
{
        unsigned char raw[MCP_SESSION_ID_LEN / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(id + 2 * i, 3, "%02x", raw[i]);
        return 0;
}

static int create(struct mcp_http *m, const char *tenant, struct http_session **ret)
{
        struct http_session *hs = calloc(1, sizeof(*hs));
        if (!hs || new_id(hs->id) < 0 || !(hs->s = mcp_session_new(m->srv, tenant))) {
                free(hs);
                return -ENOMEM;
        }
        hs->users = 1;
        hs->last_used_ms = clock_mono_ms();
        pthread_mutex_lock(&m->lock);
        sweep_locked(m);
        int r = make_room_locked(m, tenant);
        if (r == 0) {
                hs->next = m->sessions;
                m->sessions = hs;
                m->n_sessions++;
        }
        pthread_mutex_unlock(&m->lock);
        if (r < 0) {
                entry_free(hs);
                return r;
        }
        *ret = hs;
        return 0;
}

static void remove_session(struct mcp_http *m, struct http_session *hs)
{
        pthread_mutex_lock(&m->lock);
        if (!hs->removed)
                unlink_locked(m, hs);
        pthread_mutex_unlock(&m->lock);
}

/* ---- responses ---------------------------------------------------------------------- */

static int queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *resp,
                 const char *session_id, unsigned *out_status)
{
        if (!resp)
                return MHD_NO;
        if (session_id)
                MHD_add_response_header(resp, SESSION_HEADER, session_id);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        int r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        *out_status = status;
        return r;
}

/* Queues doc (stolen) as JSON. */
static int reply_json(struct MHD_Connection *conn, unsigned status, json_t *doc,
                      const char *session_id, unsigned *out_status)
{
        char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        json_decref(doc);
        if (!text)
                return MHD_NO;
        struct MHD_Response *resp =
                MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return queue(conn, status, resp, session_id, out_status);
}

static int reply_error(struct MHD_Connection *conn, unsigned status, int code, const char *message,
                       unsigned *out_status)
{
        return reply_json(conn, status, jsonrpc_error(NULL, code, message), NULL, out_status);
}

static int reply_empty(struct MHD_Connection *conn, unsigned status, unsigned *out_status)
{
        return queue(conn, status, MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT),
                     NULL, out_status);
}

/* ---- headers ------------------------------------------------------------------------ */

static const char *header(struct MHD_Connection *conn, const char *name)
{
        return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

static bool accepts(struct MHD_Connection *conn, const char *type)
{
        const char *accept = header(conn, MHD_HTTP_HEADER_ACCEPT);
        return accept && (strcasestr(accept, type) || strstr(accept, "*/*"));
}

static bool is_json(const char *ct)
{
        static const char json[] = "application/json";
        return ct && strncasecmp(ct, json, sizeof(json) - 1) == 0 &&
               strchr("; ", ct[sizeof(json) - 1]);
}

bool mcp_http_is_endpoint(const char *target)
{
        return strncmp(target, "/mcp", 4) == 0 && strchr("?#", target[4]);
}

unsigned mcp_http_precheck(const char *method, const char **message, const char **allow)
{
        if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0 &&
            strcmp(method, "DELETE") != 0) {
                *message = "/mcp accepts GET, POST and DELETE";
                *allow = "GET, POST, DELETE";
                return 405;
        }
        return 0;
}

/* 0, or the 400 already queued for an unsupported MCP-Protocol-Version. */
static int check_version(struct MHD_Connection *conn, unsigned *status, int *mhd)
{
        const char *v = header(conn, VERSION_HEADER);
        char msg[256];
        if (!v || mcp_version_supported(v))
                return 0;
        snprintf(msg, sizeof(msg),
                 "Bad Request: unsupported MCP-Protocol-Version \"%.32s\" (supported: "
                 "2025-11-25, 2025-06-18, 2025-03-26)",
                 v);
        *mhd = reply_error(conn, 400, JSONRPC_INVALID_REQUEST, msg, status);
        return -1;
}

/* ---- POST ---------------------------------------------------------------------------- */

/* The HTTP status of an answer: 200 in a session, by its error in
 * revision 2026-07-28. */
static unsigned answer_status(const struct http_session *hs, const json_t *answer)
{
        return hs->s->stateless ? mcp_modern_http_status(answer) : 200;
}

/* struct mcp_sink.send of a request's stream: one `event: message`. */
static int stream_send(struct mcp_sink *sink, const json_t *msg)
{
        struct mcp_http_request *r =
                (struct mcp_http_request *)((char *)sink - offsetof(struct mcp_http_request, sink));
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        return text ? sse_queue_push(r->stream, "message", text, strlen(text)) : -ENOMEM;
}

/* struct mcp_sink.send_nowait: a client that lets its stream fall behind
 * by the queue's whole size loses it (closed: the request ends). */
static int stream_send_nowait(struct mcp_sink *sink, const json_t *msg)
{
        struct mcp_http_request *r =
                (struct mcp_http_request *)((char *)sink - offsetof(struct mcp_http_request, sink));
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        int ret = text ? sse_queue_offer(r->stream, "message", text, strlen(text)) : -ENOMEM;
        if (ret == -EAGAIN) {
                sse_queue_close(r->stream);
                ret = -EPIPE;
        }
        return ret;
}

static struct mcp_http_request *request_new(struct mcp_http *m, struct http_session *hs,
                                            struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct mcp_http_request *r = calloc(1, sizeof(*r));
        if (!r)
                return NULL;
        r->m = m;
        r->hs = hs;
        pthread_mutex_init(&r->lock, NULL);
        r->sink.send = stream_send;
        r->sink.send_nowait = stream_send_nowait;
        r->stream = sse_queue_new(STREAM_QUEUE_MAX, ci ? ci->connect_fd : -1, m->shutdown_fd, -1);
        if (!r->stream) {
                pthread_mutex_destroy(&r->lock);
                free(r);
                return NULL;
        }
        return r;
}

static void *call_worker(void *arg)
{
        struct mcp_http_request *r = arg;
        json_t *response = mcp_call_run(r->call);
        pthread_mutex_lock(&r->lock);
        struct mcp_call *call = TAKE_PTR(r->call);
        pthread_mutex_unlock(&r->lock);
        mcp_call_free(call); /* its id may be used again once the answer is out */
        if (response)
                (void)r->sink.send(&r->sink, response);
        json_decref(response);
        sse_queue_end(r->stream);
        return NULL;
}

/* A tools/call answered on an SSE stream. The request takes over the
 * use of hs. */
static int post_stream(struct mcp_http *m, struct MHD_Connection *conn, struct http_session *hs,
                       const json_t *msg, unsigned *status, struct mcp_http_request **slot)
{
        struct mcp_http_request *r = request_new(m, hs, conn);
        json_t *answer = NULL;
        struct mcp_call *call = NULL;
        if (!r) {
                release(m, hs);
                return reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "out of memory", status);
        }
        *slot = r; /* mcp_http_request_done() cleans up from here on */
        if (mcp_receive(hs->s, &r->sink, msg, &answer, &call, NULL) != MCP_CALL)
                return reply_json(conn, answer_status(hs, answer), answer, NULL, status);
        r->call = call;
        if (pthread_create(&r->worker, NULL, call_worker, r) != 0)
                return reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "cannot start a thread",
                                   status);
        r->worker_started = true;
        return queue(conn, 200, sse_response(r->stream), NULL, status);
}

static bool is_listen(const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        return method && jsonrpc_id(msg) && strcmp(method, "subscriptions/listen") == 0;
}

/* 2026-07-28 subscriptions/listen: an SSE stream that starts with the
 * acknowledgement and stays open (keep-alive comments) until the client
 * closes it or the server stops; nothing else ends it. The request takes
 * over the use of hs. */
static int post_listen(struct mcp_http *m, struct MHD_Connection *conn, struct http_session *hs,
                       const json_t *msg, unsigned *status, struct mcp_http_request **slot)
{
        struct mcp_http_request *r = NULL;
        json_t *answer = NULL;
        struct mcp_call *call = NULL;
        if (!accepts(conn, "text/event-stream")) {
                release(m, hs);
                return reply_json(conn, 406,
                                  jsonrpc_error(jsonrpc_id(msg), JSONRPC_INVALID_REQUEST,
                                                "Not Acceptable: subscriptions/listen answers "
                                                "with an event stream; send Accept: "
                                                "text/event-stream"),
                                  NULL, status);
        }
        if (!(r = request_new(m, hs, conn))) {
                release(m, hs);
                return reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "out of memory", status);
        }
        *slot = r; /* mcp_http_request_done() cleans up from here on */
        if (mcp_receive(hs->s, &r->sink, msg, &answer, &call, &r->listen) != MCP_LISTEN)
                return reply_json(conn, answer_status(hs, answer), answer, NULL, status);
        /* When the server stops, the stream ends with the listen request's
         * result: the subscription ended gracefully. */
        json_auto_t *result = jsonrpc_result(
                jsonrpc_id(msg),
                json_pack("{s:s, s:{s:O}}", "resultType", "complete", "_meta",
                          "io.modelcontextprotocol/subscriptionId", jsonrpc_id(msg)));
        _cleanup_free_ char *text = result ? json_dumps(result, JSON_COMPACT) : NULL;
        if (text)
                (void)sse_queue_set_farewell(r->stream, "message", text, strlen(text));
        pthread_mutex_lock(&m->lock);
        m->listening++;
        r->listening = true;
        pthread_mutex_unlock(&m->lock);
        return queue(conn, 200, sse_response(r->stream), NULL, status);
}

/* A call answered in plain JSON runs on a worker while this thread
 * watches the server's shutdown pipe: stopping cancels it. */
struct watched {
        struct mcp_call *call;
        json_t *answer;
        bool done;
        pthread_mutex_t lock;
        pthread_cond_t cond;
};

static void *watched_main(void *arg)
{
        struct watched *w = arg;
        json_t *answer = mcp_call_run(w->call);
        pthread_mutex_lock(&w->lock);
        w->answer = answer;
        w->done = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

static bool readable(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, 0) > 0;
}

/* The client closed its side of the connection (or it broke). */
static bool hung_up(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        return fd >= 0 && poll(&p, 1, 0) > 0 &&
               (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static json_t *run_watched(struct mcp_http *m, struct mcp_call *call, int client_fd)
{
        struct watched w = {.call = call};
        pthread_t worker;
        pthread_mutex_init(&w.lock, NULL);
        pthread_cond_init(&w.cond, NULL);
        if (pthread_create(&worker, NULL, watched_main, &w) != 0)
                watched_main(&w); /* no thread to spare: run it here */
        else {
                pthread_mutex_lock(&w.lock);
                while (!w.done) {
                        struct timespec until;
                        clock_gettime(CLOCK_REALTIME, &until);
                        until.tv_sec += 1;
                        pthread_cond_timedwait(&w.cond, &w.lock, &until);
                        if (!w.done && (readable(m->shutdown_fd) || hung_up(client_fd)))
                                mcp_call_cancel(call);
                }
                pthread_mutex_unlock(&w.lock);
                pthread_join(worker, NULL);
        }
        pthread_cond_destroy(&w.cond);
        pthread_mutex_destroy(&w.lock);
        return w.answer;
}

static int connection_fd(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        return ci ? ci->connect_fd : -1;
}

/* Anything else of a session: answered in the HTTP response. */
static int post_plain(struct mcp_http *m, struct MHD_Connection *conn, struct http_session *hs,
                      const json_t *msg, unsigned *status)
{
        json_t *answer = NULL;
        struct mcp_call *call = NULL;
        switch (mcp_receive(hs->s, &discard_sink, msg, &answer, &call, NULL)) {
        case MCP_ANSWER:
                return reply_json(conn, answer_status(hs, answer), answer, NULL, status);
        case MCP_CALL: /* a client that takes no SSE (or, 2026-07-28, asked for
                        * no progress and no logs): nothing to send first */
                answer = run_watched(m, call, connection_fd(conn));
                mcp_call_free(call);
                return answer ? reply_json(conn, answer_status(hs, answer), answer, NULL, status)
                              : reply_empty(conn, 202, status);
        default:
                return reply_empty(conn, 202, status);
        }
}

static int post_initialize(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                           const json_t *msg, unsigned *status)
{
        struct http_session *hs = NULL;
        json_t *answer = NULL;
        struct mcp_call *call = NULL;
        int r = create(m, tenant, &hs);
        if (r < 0)
                return reply_error(conn, r == -EBUSY ? 503 : 500, JSONRPC_INTERNAL_ERROR,
                                   r == -EBUSY ? "too many MCP sessions are open; end some "
                                                 "(DELETE /mcp) and try again"
                                               : "cannot create a session",
                                   status);
        (void)mcp_receive(hs->s, &discard_sink, msg, &answer, &call, NULL);
        bool ok = answer && json_object_get(answer, "result");
        if (!ok)
                remove_session(m, hs);
        r = reply_json(conn, 200, answer, ok ? hs->id : NULL, status);
        release(m, hs);
        return r;
}

static int post_without_session(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                                const json_t *msg, unsigned *status)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        bool request = method && jsonrpc_id(msg);
        if (request && strcmp(method, "initialize") == 0)
                return post_initialize(m, conn, tenant, msg, status);
        if (request && !mcp_method_known(method)) /* e.g. a server/discover probe */
                return reply_json(conn, 200,
                                  jsonrpc_errorf(jsonrpc_id(msg), JSONRPC_METHOD_NOT_FOUND,
                                                 "Method not found: %.200s", method),
                                  NULL, status);
        return reply_error(conn, 400, JSONRPC_INVALID_REQUEST,
                           "Bad Request: the Mcp-Session-Id header is required (send initialize "
                           "first)",
                           status);
}

/* The value of header name without the whitespace around it, copied
 * into out (HEADER_VALUE_MAX + 1 bytes); false when absent or too long. */
static bool header_trimmed(struct MHD_Connection *conn, const char *name, char *out)
{
        const char *v = header(conn, name);
        if (!v)
                return false;
        while (*v == ' ' || *v == '\t')
                v++;
        size_t n = strnlen(v, HEADER_VALUE_MAX + 1);
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
        if (n > HEADER_VALUE_MAX)
                return false;
        memcpy(out, v, n);
        out[n] = '\0';
        return true;
}

/* Whether header `name`, without the whitespace around it, is want. */
static bool header_is(struct MHD_Connection *conn, const char *name, const char *want)
{
        char v[HEADER_VALUE_MAX + 1];
        return header_trimmed(conn, name, v) && strcmp(v, want) == 0;
}

/* 2026-07-28: Mcp-Method repeats the request's method, Mcp-Name its
 * params.name (tools/call, prompts/get) or params.uri (resources/read).
 * 0, or 400 with *answer the HeaderMismatch error. */
static unsigned check_mcp_headers(struct MHD_Connection *conn, const json_t *msg, json_t **answer)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        const json_t *params = json_object_get(msg, "params");
        const json_t *id = jsonrpc_id(msg);
        if (!method || !id)
                return 0;
        const char *name = json_string_value(json_object_get(params, "name"));
        if (strcmp(method, "resources/read") == 0)
                name = json_string_value(json_object_get(params, "uri"));
        else if (strcmp(method, "tasks/get") == 0 || strcmp(method, "tasks/update") == 0 ||
                 strcmp(method, "tasks/cancel") == 0)
                name = json_string_value(json_object_get(params, "taskId"));
        else if (strcmp(method, "tools/call") != 0 && strcmp(method, "prompts/get") != 0)
                name = NULL;
        bool method_ok = header_is(conn, METHOD_HEADER, method);
        if (method_ok && (!name || header_is(conn, NAME_HEADER, name)))
                return 0;
        *answer = jsonrpc_errorf(
                id, -32020, "Header mismatch: the %s header must repeat the request's %s",
                method_ok ? NAME_HEADER : METHOD_HEADER, method_ok ? "name" : "method");
        return 400;
}

/* Whether the Mcp-Param header value (=?base64?...?= decoded, else as it
 * is) equals the argument's value (a string, or a number or boolean as
 * JSON writes it). */
static bool param_matches(const char *value, const json_t *arg)
{
        _cleanup_free_ void *decoded = NULL;
        _cleanup_free_ char *text = NULL;
        size_t len = strlen(value), dlen = 0;
        const char *want = json_string_value(arg);
        if (!want && (json_is_number(arg) || json_is_boolean(arg)))
                want = text = json_dumps(arg, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!want)
                return false;
        if (len >= 11 && strncmp(value, "=?base64?", 9) == 0 &&
            strcmp(value + len - 2, "?=") == 0) {
                if (cage_base64_decode(value + 9, len - 11, &decoded, &dlen) < 0)
                        return false;
                return dlen == strlen(want) && memcmp(decoded, want, dlen) == 0;
        }
        return strcmp(value, want) == 0;
}

/* 2026-07-28 (SEP-2243): a tools/call argument whose inputSchema property
 * names an `x-mcp-header` must be repeated in the header Mcp-Param-<that
 * name>; a missing, undecodable or different header is HeaderMismatch.
 * 0, or 400 with *answer. */
static unsigned check_param_headers(struct mcp_http *m, struct MHD_Connection *conn,
                                    const json_t *msg, json_t **answer)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        const json_t *params = json_object_get(msg, "params");
        if (!method || strcmp(method, "tools/call") != 0)
                return 0;
        const char *tool = json_string_value(json_object_get(params, "name"));
        const json_t *def = tool ? mcp_providers_tool(m->srv, tool) : NULL;
        const json_t *props = json_object_get(json_object_get(def, "inputSchema"), "properties");
        const json_t *args = json_object_get(params, "arguments");
        const char *key;
        const json_t *prop;
        json_object_foreach((json_t *)props, key, prop)
        {
                const char *suffix = json_string_value(json_object_get(prop, "x-mcp-header"));
                const json_t *arg = json_object_get(args, key);
                char name[128], value[HEADER_VALUE_MAX + 1];
                if (!suffix ||
                    snprintf(name, sizeof(name), "Mcp-Param-%s", suffix) >= (int)sizeof(name))
                        continue;
                bool present = header_trimmed(conn, name, value);
                if ((!arg || json_is_null(arg)) && !present)
                        continue;
                if (present && arg && param_matches(value, arg))
                        continue;
                *answer = jsonrpc_errorf(jsonrpc_id(msg), -32020,
                                         "Header mismatch: the %.100s header must repeat the "
                                         "argument %.100s (=?base64?...?= for values that are "
                                         "not plain header text)",
                                         name, key);
                return 400;
        }
        return 0;
}

/* 2026-07-28 has no requests to the client: a call's stream would carry
 * only the progress and log messages the request asked for. Without them
 * the answer is plain JSON, whose HTTP status can still say 400 (a
 * missing client capability); closing the connection cancels it all the
 * same. */
static bool streams_something(const json_t *msg)
{
        const json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
        return json_object_get(meta, "progressToken") || json_object_get(meta, MCP_META_LOG_LEVEL);
}

/* A request of revision 2026-07-28: served by a session of its own. */
static int post_modern(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                       const json_t *msg, unsigned *status, struct mcp_http_request **slot)
{
        json_t *answer = NULL;
        unsigned code = check_mcp_headers(conn, msg, &answer);
        if (!code)
                code = check_param_headers(m, conn, msg, &answer);
        if (!code)
                code = mcp_modern_check(msg, header(conn, VERSION_HEADER), &answer);
        if (code)
                return answer ? reply_json(conn, code, answer, NULL, status)
                              : reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "out of memory",
                                            status);
        struct http_session *hs = calloc(1, sizeof(*hs));
        if (hs)
                hs->s = mcp_session_new_stateless(m->srv, tenant);
        if (!hs || !hs->s) {
                free(hs);
                return reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "out of memory", status);
        }
        hs->removed = true; /* in no table: the last release() frees it */
        hs->users = 1;
        char remote[HTTP_REMOTE_MAX];
        (void)http_peer(conn, remote);
        mcp_session_set_remote(hs->s, remote);
        if (is_listen(msg))
                return post_listen(m, conn, hs, msg, status, slot);
        if (mcp_is_call(msg) && accepts(conn, "text/event-stream") && streams_something(msg))
                return post_stream(m, conn, hs, msg, status, slot);
        int mhd = post_plain(m, conn, hs, msg, status);
        release(m, hs);
        return mhd;
}

static int post(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                const char *body, size_t len, unsigned *status, struct mcp_http_request **slot)
{
        json_t *error = NULL;
        int mhd = MHD_NO;
        if (!is_json(header(conn, MHD_HTTP_HEADER_CONTENT_TYPE)))
                return reply_error(conn, 415, JSONRPC_INVALID_REQUEST,
                                   "Unsupported Media Type: send JSON with Content-Type: "
                                   "application/json",
                                   status);
        json_auto_t *msg = jsonrpc_parse(body, len, &error);
        if (!msg)
                return reply_json(conn, 400, error, NULL, status);
        const char *id = header(conn, SESSION_HEADER);
        struct http_session *hs = NULL;
        if (!id && mcp_is_modern(msg, header(conn, VERSION_HEADER)))
                return post_modern(m, conn, tenant, msg, status, slot);
        if (check_version(conn, status, &mhd) < 0)
                return mhd;
        if (!id)
                return post_without_session(m, conn, tenant, msg, status);
        if (acquire(m, id, tenant, &hs) < 0)
                return reply_error(conn, 404, -32001,
                                   "Session not found: it ended or never existed; initialize a "
                                   "new one",
                                   status);
        char remote[HTTP_REMOTE_MAX];
        (void)http_peer(conn, remote);
        mcp_session_set_remote(hs->s, remote); /* for audit records of its calls */
        if (mcp_is_call(msg) && accepts(conn, "text/event-stream"))
                return post_stream(m, conn, hs, msg, status, slot);
        mhd = post_plain(m, conn, hs, msg, status);
        release(m, hs);
        return mhd;
}

/* ---- GET and DELETE ------------------------------------------------------------------ */

static int session_of_request(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                              struct http_session **hs, unsigned *status, int *mhd)
{
        const char *id = header(conn, SESSION_HEADER);
        if (check_version(conn, status, mhd) < 0)
                return -1;
        if (!id) {
                *mhd = reply_error(conn, 400, JSONRPC_INVALID_REQUEST,
                                   "Bad Request: the Mcp-Session-Id header is required", status);
                return -1;
        }
        if (acquire(m, id, tenant, hs) < 0) {
                *mhd = reply_error(conn, 404, -32001, "Session not found", status);
                return -1;
        }
        return 0;
}

static int get(struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
               unsigned *status, struct mcp_http_request **slot)
{
        struct http_session *hs = NULL;
        int mhd = MHD_NO;
        if (!accepts(conn, "text/event-stream"))
                return reply_error(conn, 406, JSONRPC_INVALID_REQUEST,
                                   "Not Acceptable: GET /mcp is an event stream; send Accept: "
                                   "text/event-stream",
                                   status);
        if (session_of_request(m, conn, tenant, &hs, status, &mhd) < 0)
                return mhd;
        struct mcp_http_request *r = request_new(m, hs, conn);
        if (!r) {
                release(m, hs);
                return reply_error(conn, 500, JSONRPC_INTERNAL_ERROR, "out of memory", status);
        }
        *slot = r;
        pthread_mutex_lock(&m->lock);
        bool busy = hs->get != NULL;
        if (!busy) {
                hs->get = sse_queue_ref(r->stream);
                r->is_get = true;
        }
        pthread_mutex_unlock(&m->lock);
        if (busy)
                return reply_error(conn, 409, JSONRPC_INVALID_REQUEST,
                                   "Conflict: this session has an event stream open already",
                                   status);
        return queue(conn, 200, sse_response(r->stream), NULL, status);
}

static int delete (struct mcp_http *m, struct MHD_Connection *conn, const char *tenant,
                   unsigned *status)
{
        struct http_session *hs = NULL;
        int mhd = MHD_NO;
        if (session_of_request(m, conn, tenant, &hs, status, &mhd) < 0)
                return mhd;
        remove_session(m, hs);
        release(m, hs);
        return reply_empty(conn, 200, status);
}

int mcp_http_handle(struct mcp_http *m, struct MHD_Connection *conn, const char *method,
                    const char *tenant, const char *body, size_t body_len, unsigned *status,
                    struct mcp_http_request **slot)
{
        /* A call answered in plain JSON may run as long as its timeout:
         * no idle timeout meanwhile (re-arming restarts MHD's clock). */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        int r;
        if (strcmp(method, "POST") == 0)
                r = post(m, conn, tenant, body, body_len, status, slot);
        else if (strcmp(method, "GET") == 0)
                r = get(m, conn, tenant, status, slot);
        else
                r = delete (m, conn, tenant, status);
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)HTTP_IDLE_TIMEOUT_S);
        return r;
}

void mcp_http_request_done(struct mcp_http_request *r)
{
        if (!r)
                return;
        sse_queue_close(r->stream);
        mcp_listen_close(r->m->srv, r->listen); /* the stream closed: it ends */
        pthread_mutex_lock(&r->lock);
        if (r->call)
                mcp_call_cancel(r->call); /* the client is gone before the answer */
        pthread_mutex_unlock(&r->lock);
        if (r->worker_started)
                pthread_join(r->worker, NULL);
        mcp_call_free(r->call); /* a call whose worker never started */
        if (r->listening) {
                pthread_mutex_lock(&r->m->lock);
                r->m->listening--;
                pthread_cond_broadcast(&r->m->listen_gone);
                pthread_mutex_unlock(&r->m->lock);
        }
        if (r->is_get) {
                pthread_mutex_lock(&r->m->lock);
                if (r->hs->get == r->stream)
                        r->hs->get = sse_queue_unref(r->hs->get);
                pthread_mutex_unlock(&r->m->lock);
        }
        sse_queue_unref(r->stream);
        release(r->m, r->hs);
        pthread_mutex_destroy(&r->lock);
        free(r);
}

/* ---- the endpoint ---------------------------------------------------------------------- */

int mcp_http_new(const struct cage_config *cfg, struct cage_service *svc, int shutdown_fd,
                 struct mcp_http **ret, struct cage_error *err)
{
        struct mcp_http *m = calloc(1, sizeof(*m));
        if (!m)
                return cage_fail(err, -ENOMEM, "mcp");
        m->cfg = cfg;
        m->shutdown_fd = shutdown_fd;
        pthread_mutex_init(&m->lock, NULL);
        pthread_cond_init(&m->listen_gone, NULL);
        int r = mcp_server_new(cfg, svc, mcp_serve_options(), &m->srv, err);
        if (r < 0) {
                mcp_http_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

void mcp_http_quiesce(struct mcp_http *m, int timeout_ms)
{
        if (!m)
                return;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&m->lock);
        while (m->listening > 0)
                if (pthread_cond_timedwait(&m->listen_gone, &m->lock, &until) == ETIMEDOUT)
                        break;
        pthread_mutex_unlock(&m->lock);
}

unsigned mcp_http_listening(struct mcp_http *m)
{
        if (!m)
                return 0;
        pthread_mutex_lock(&m->lock);
        unsigned n = (unsigned)m->listening;
        pthread_mutex_unlock(&m->lock);
        return n;
}

struct mcp_http *mcp_http_free(struct mcp_http *m)
{
        if (!m)
                return NULL;
        pthread_mutex_lock(&m->lock);
        while (m->sessions)
                unlink_locked(m, m->sessions);
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_destroy(&m->lock);
        pthread_cond_destroy(&m->listen_gone);
        mcp_server_free(m->srv);
        free(m);
        return NULL;
}
