/* The HTTP server of `codecage serve`: listeners, the libmicrohttpd
 * daemons, and the life cycle of one request (docs/API.md).
 *
 * Threading: each listener (TCP listen.http, Unix socket listen.unix) is one
 * MHD daemon in MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION
 * mode (with poll(), so fd numbers above FD_SETSIZE work). A connection owns
 * a thread, so a long exec blocks only its own connection and handlers can
 * simply call the (thread-safe) service; at most HTTP_CONNECTIONS_MAX
 * connections per listener bound the threads. While a handler runs a long
 * service call, the connection's idle timeout is switched off and re-armed
 * afterwards (re-arming restarts MHD's idle clock).
 *
 * A request, in order:
 *  1. the URI callback copies the raw request target (routing decodes it
 *     segment by segment: routes.c);
 *  2. headers: Host / Origin (403, every route, TCP only: http_guard.c),
 *     route (404 / 405 / 400), bearer token (401), operator routes (403),
 *     Content-Type of JSON routes (415), Content-Length against
 *     limits.max_body_bytes (413) -- all before a byte of the body is read;
 *  3. the body is buffered up to limits.max_body_bytes; past it, buffering
 *     stops and the rest is discarded until the 413 can be sent (take_body);
 *  4. the handler runs and its reply is queued;
 *  5. the completed callback cancels a live SSE stream (client gone), logs
 *     one line (method, path, tenant, status, duration_ms -- never bodies,
 *     queries or tokens; what the client sent is escaped) and frees the
 *     request.
 * Refusals are audited with the peer, the method and the path (never the
 * query): a missing or bad token, a foreign Host or Origin, and a 404 for
 * a sandbox or run that another tenant holds (tenancy.c).
 *
 * Stopping: a pipe becomes readable (running execs use it as their cancel
 * fd; SSE readers poll it), then every daemon is stopped, which waits for
 * its connection threads. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h> /* MCP: offsetof */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server/e2b.h" /* the E2B-compatible listener */
#include "server/http.h"
#include "server/mcp_http.h" /* MCP: /mcp */
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"

#define HTTP_CONNECTIONS_MAX CAGE_CONFIG_CONNECTIONS_MAX
#define HTTP_HEADERS_MAX     (64 * 1024) /* MHD's per-connection pool: URI + headers */
#define HTTP_BODY_INITIAL    4096
#define HTTP_DISCARD_MAX     (64ULL * 1024 * 1024) /* past the limit, then close */
#define HTTP_LOG_PATH_MAX    256 /* bytes of a path kept in logs and audit records */
#define HTTP_METHOD_MAX      16  /* bytes kept of a method, with its NUL */
#define DESCRIBE_MAX         (3 * 128 + 160)
#define LISTEN_GRACE_MS      1000 /* at shutdown, for MCP listen streams to end */

struct cage_http_server {
        struct http_context ctx;
        struct http_context metrics_ctx; /* listen.metrics */
        struct MHD_Daemon *daemons[3];
        bool api_daemon[3];  /* serves the API (not listen.metrics): quiesced on drain */
        int quiesced_fds[3]; /* listening sockets given back by MHD_quiesce_daemon */
        size_t n_daemons;
        _Atomic unsigned active; /* see cage_http_active() */
        int shutdown_pipe[2];
        char *unix_path;        /* the socket we created, removed at stop */
        struct mcp_http *mcp;   /* MCP: the /mcp endpoint (mcp_http.c) */
        struct e2b_server *e2b; /* e2b.listen (e2b_http.c), or NULL */
        char describe[DESCRIBE_MAX];
};

struct http_request {
        const struct http_context *ctx;
        char *raw_uri;
        bool uri_too_long;
        struct timespec start;
        char method[HTTP_METHOD_MAX];
        char tenant[CAGE_CONFIG_TENANT_NAME_MAX + 1];
        /* For logs and audit records: escaped, the path without the query. */
        char log_method[3 * HTTP_METHOD_MAX + 1], log_route[3 * HTTP_LOG_PATH_MAX + 1];
        char remote[HTTP_REMOTE_MAX]; /* the peer */
        bool unix_socket;
        const char *guard_message; /* why the Host / Origin policy refused it */
        unsigned status;
        bool started, responded;
        bool counted; /* in *ctx->active */
        struct http_match match;
        struct http_body body;
        struct sse_stream *stream;
        /* MCP: a request to /mcp, handled by mcp_http.c */
        bool mcp;
        struct mcp_http_request *mcp_req;
};

/* ---- logging ------------------------------------------------------------- */

static uint64_t elapsed_ms(const struct timespec *since)
{
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (int64_t)(now.tv_sec - since->tv_sec) * 1000 +
                     (now.tv_nsec - since->tv_nsec) / 1000000;
        return ms < 0 ? 0 : (uint64_t)ms;
}

/* What a client sent, for a log line or an audit record: printable ASCII
 * but '"' as it is, every other byte %XX (no terminal escape reaches the
 * log, and the text is valid UTF-8), up to the first byte of `stops` and at
 * most max bytes of input. out holds 3 * max + 1 bytes. */
static void log_escape(const char *in, const char *stops, size_t max, char *out)
{
        size_t w = 0, n = 0;
        for (const unsigned char *p = (const unsigned char *)(in ? in : "");
             *p && !strchr(stops, *p) && n < max; p++, n++) {
                if (*p > 0x20 && *p < 0x7f && *p != '"')
                        out[w++] = (char)*p;
                else
                        w += (size_t)snprintf(out + w, 4, "%%%02X", *p);
        }
        out[w] = '\0';
}

static const char *termination_text(enum MHD_RequestTerminationCode toe)
{
        switch (toe) {
        case MHD_REQUEST_TERMINATED_COMPLETED_OK:
                return "ok";
        case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
                return "timeout";
        case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
                return "shutdown";
        case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
                return "client_abort";
        default:
                return "error";
        }
}

static void log_request(const struct http_request *req, enum MHD_RequestTerminationCode toe)
{
        char status[16], line[1024];
        if (req->status)
                snprintf(status, sizeof(status), "%u", req->status);
        else
                snprintf(status, sizeof(status), "-");
        int n = snprintf(line, sizeof(line),
                         "codecage: http method=%s path=\"%s\" tenant=%s status=%s "
                         "duration_ms=%llu end=%s\n",
                         req->log_method[0] ? req->log_method : "-", req->log_route,
                         req->tenant[0] ? req->tenant : "-", status,
                         (unsigned long long)elapsed_ms(&req->start), termination_text(toe));
        if (n > 0)
                (void)!write(STDERR_FILENO, line,
                             (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* MHD's own messages may quote a client's bytes: only printable ASCII
 * reaches the log. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
        char msg[512];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        msg[strcspn(msg, "\n")] = '\0';
        for (unsigned char *p = (unsigned char *)msg; *p; p++)
                if (*p < 0x20 || *p >= 0x7f)
                        *p = '?';
        fprintf(stderr, "codecage: http: %s\n", msg);
}

/* ---- request life cycle -------------------------------------------------- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
        struct http_request *req = calloc(1, sizeof(*req));
        if (!req)
                return NULL;
        req->ctx = cls;
        clock_gettime(CLOCK_MONOTONIC, &req->start);
        size_t len = strnlen(uri, HTTP_URI_MAX + 1);
        req->uri_too_long = len > HTTP_URI_MAX;
        req->raw_uri = strndup(uri, HTTP_URI_MAX);
        if (!req->raw_uri) {
                free(req);
                return NULL;
        }
        log_escape(req->raw_uri, "?#", HTTP_LOG_PATH_MAX, req->log_route);
        return req;
}

bool http_peer(struct MHD_Connection *conn, char out[HTTP_REMOTE_MAX])
{
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ci ? ci->client_addr : NULL;
        char host[INET6_ADDRSTRLEN] = "?";
        out[0] = '\0';
        if (sa && sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
                snprintf(out, HTTP_REMOTE_MAX, "%s:%u", host, ntohs(in->sin_port));
        } else if (sa && sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                snprintf(out, HTTP_REMOTE_MAX, "[%s]:%u", host, ntohs(in6->sin6_port));
        } else if (sa && sa->sa_family == AF_UNIX) {
                ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
                struct ucred cred;
                socklen_t len = sizeof(cred);
                if (ci && getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
                        snprintf(out, HTTP_REMOTE_MAX, "unix:uid=%u", (unsigned)cred.uid);
                else
                        snprintf(out, HTTP_REMOTE_MAX, "unix");
        }
        return sa && sa->sa_family == AF_UNIX;
}

static struct cage_service_peer peer_record(const struct http_request *req)
{
        return (struct cage_service_peer){.remote = req->remote[0] ? req->remote : NULL,
                                          .method = req->log_method,
                                          .route = req->log_route};
}

static enum MHD_Result respond_error(struct http_request *req, struct MHD_Connection *conn,
                                     unsigned status, const char *message, const char *allow)
{
        req->status = status;
        req->responded = true;
        http_body_clear(&req->body);
        return (enum MHD_Result)http_queue_error(conn, status, message, allow, status == 401);
}

static enum MHD_Result refuse_too_large(struct http_request *req, struct MHD_Connection *conn)
{
        char msg[160];
        snprintf(msg, sizeof(msg), "the body is larger than limits.max_body_bytes (%llu bytes)",
                 (unsigned long long)req->ctx->cfg->limits.max_body_bytes);
        return respond_error(req, conn, 413, msg, NULL);
}

static const struct cage_tenant *authenticate(const struct http_context *ctx,
                                              struct MHD_Connection *conn)
{
        const char *h =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!h || strncasecmp(h, "Bearer ", 7) != 0)
                return NULL;
        h += 7;
        while (*h == ' ')
                h++;
        return cage_config_tenant_for_token(ctx->cfg, h);
}

static bool is_json_type(const char *ct)
{
        static const char json[] = "application/json";
        if (!ct || strncasecmp(ct, json, sizeof(json) - 1) != 0)
                return false;
        char next = ct[sizeof(json) - 1];
        return next == '\0' || next == ';' || next == ' ';
}

/* An operator route (the server's own state, e.g. the pool shared by every
 * tenant) asked for by a tenant without "operator": true. */
static enum MHD_Result refuse_not_operator(struct http_request *req, struct MHD_Connection *conn)
{
        struct cage_service_peer peer = peer_record(req);
        cage_service_audit_forbidden(req->ctx->svc, req->tenant, NULL, &peer);
        return respond_error(req, conn, 403,
                             "this route shows the whole server's state: only a tenant with "
                             "\"operator\": true in the server's config may use it",
                             NULL);
}

/* Step 2: everything that can be refused before the body is read. */
static enum MHD_Result check_headers(struct http_request *req, struct MHD_Connection *conn)
{
        const struct http_context *ctx = req->ctx;
        uint64_t max = ctx->cfg->limits.max_body_bytes;

        const struct cage_tenant *t = NULL;
        if (!cage_config_auth_required(ctx->cfg) || (req->match.flags & ROUTE_PUBLIC) ||
            ctx->metrics_only) {
                snprintf(req->tenant, sizeof(req->tenant), "%s", CAGE_SERVICE_DEFAULT_TENANT);
        } else {
                t = authenticate(ctx, conn);
                if (!t) {
                        const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                    MHD_HTTP_HEADER_AUTHORIZATION);
                        cage_service_audit_auth_deny(ctx->svc, h ? "bad_token" : "missing_token",
                                                     req->remote[0] ? req->remote : NULL,
                                                     req->log_method, req->log_route);
                        return respond_error(req, conn, 401,
                                             "a valid \"Authorization: Bearer TOKEN\" header is "
                                             "required",
                                             NULL);
                }
                snprintf(req->tenant, sizeof(req->tenant), "%s", t->name);
        }
        if ((req->match.flags & ROUTE_OPERATOR) && t && !t->operator)
                return refuse_not_operator(req, conn);
        if ((req->match.flags & ROUTE_JSON_BODY) &&
            !is_json_type(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_TYPE)))
                return respond_error(req, conn, 415,
                                     "the body must be JSON sent with Content-Type: "
                                     "application/json",
                                     NULL);
        const char *cl =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > max)
                return refuse_too_large(req, conn);
        return MHD_YES;
}

/* Step 1 for every route: the Host / Origin policy (http_guard.c). A
 * refusal is audited like a missing token: it is what a web page that
 * rebound its name to this server gets. */
static bool guard_passes(struct http_request *req, struct MHD_Connection *conn)
{
        size_t path_len = strcspn(req->raw_uri, "?#");
        struct http_guard_request rq = {
                .unix_socket = req->unix_socket,
                .health = path_len == 8 && (strncmp(req->raw_uri, "/healthz", 8) == 0 ||
                                            strncmp(req->raw_uri, "/readyz", 7) == 0),
                .host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
                .origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"),
        };
        const char *reason = NULL;
        req->status = http_guard_check(&req->ctx->guard, &rq, &req->guard_message, &reason);
        if (!req->status)
                return true;
        cage_service_audit_auth_deny(req->ctx->svc, reason, req->remote[0] ? req->remote : NULL,
                                     req->log_method, req->log_route);
        return false;
}

/* ---- MCP: /mcp is served by mcp_http.c, after this file's auth ---------- */

static struct mcp_http *mcp_of(const struct http_request *req)
{
        const char *ctx = (const char *)req->ctx;
        return ((const struct cage_http_server *)(ctx - offsetof(struct cage_http_server, ctx)))
                ->mcp;
}

static enum MHD_Result begin_mcp(struct http_request *req, struct MHD_Connection *conn,
                                 const char *method)
{
        const char *msg = NULL, *allow = NULL;
        unsigned status = mcp_http_precheck(method, &msg, &allow);
        if (status)
                return respond_error(req, conn, status, msg, allow);
        req->mcp = true;
        req->match.flags = ROUTE_RAW_BODY;
        return check_headers(req, conn);
}

static enum MHD_Result finish_mcp(struct http_request *req, struct MHD_Connection *conn)
{
        req->responded = true;
        return (enum MHD_Result)mcp_http_handle(mcp_of(req), conn, req->method, req->tenant,
                                                req->body.data ? req->body.data : "", req->body.len,
                                                &req->status, &req->mcp_req);
}

/* ---- (end of MCP) ---------------------------------------------------------- */

/* Unsafe debug builds serve every route on the metrics listener when
 * CODECAGE_DEBUG_DISABLE names "metrics-routes", so the security suite can
 * show that the route check is what keeps the API off that token-less
 * listener; normal builds have no such switch. */
static bool metrics_routes_off(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        return off && strstr(off, "metrics-routes");
#else
        return false;
#endif
}

/* What the unauthenticated metrics listener serves. */
static bool metrics_route(const char *raw_uri)
{
        size_t n = strcspn(raw_uri, "?#");
        static const char *const paths[] = {"/metrics", "/healthz", "/readyz"};
        for (size_t i = 0; i < 3; i++)
                if (n == strlen(paths[i]) && strncmp(raw_uri, paths[i], n) == 0)
                        return true;
        return false;
}

static enum MHD_Result begin(struct http_request *req, struct MHD_Connection *conn,
                             const char *method)
{
        struct cage_error msg = {0};
        char allow[64];

        req->started = true;
        snprintf(req->method, sizeof(req->method), "%s", method);
        log_escape(req->method, "", sizeof(req->method), req->log_method);
        req->unix_socket = http_peer(conn, req->remote);
        if (req->uri_too_long)
                return respond_error(req, conn, 414, "the request target is too long", NULL);
        if (!guard_passes(req, conn))
                return respond_error(req, conn, req->status, req->guard_message, NULL);
        /* Draining: no new work; a host call's answer belongs to a running
         * call, which may still finish. */
        if (cage_service_draining(req->ctx->svc) && !metrics_route(req->raw_uri) &&
            strncmp(req->raw_uri, "/v1/host_calls/", 15) != 0)
                return respond_error(req, conn, 503,
                                     "the server is shutting down; send this request to another "
                                     "instance or try again when it is back",
                                     NULL);
        if (req->ctx->metrics_only && !metrics_route(req->raw_uri) && !metrics_routes_off())
                return respond_error(req, conn, 404,
                                     "this listener (listen.metrics) serves /metrics, /healthz "
                                     "and /readyz only",
                                     NULL);
        if (!metrics_route(req->raw_uri) &&
            !(mcp_http_is_endpoint(req->raw_uri) && strcmp(method, "GET") == 0)) {
                req->counted = true;
                atomic_fetch_add(req->ctx->active, 1);
        }
        if (mcp_http_is_endpoint(req->raw_uri)) /* MCP */
                return begin_mcp(req, conn, method);
        char *q = strchr(req->raw_uri, '?');
        char *frag = strchr(req->raw_uri, '#');
        if (frag)
                *frag = '\0';
        if (q)
                *q = '\0';
        unsigned status = http_route_match(method, req->raw_uri, &req->match, allow, &msg);
        if (q)
                *q = '?';
        if (status)
                return respond_error(req, conn, status, msg.message, status == 405 ? allow : NULL);
        return check_headers(req, conn);
}

/* Step 3: buffering with the body limit. MHD (0.9.75) can only queue a
 * response before the body or after all of it, so a body that passes the
 * limit without a Content-Length (chunked) is freed at once, the rest is
 * counted and discarded, and the 413 goes out when it ends -- or the
 * connection is closed if the client goes on past HTTP_DISCARD_MAX. */
bool http_body_take(struct http_body *b, uint64_t max, const char *data, size_t n)
{
        if (b->too_large || b->len + (uint64_t)n > max) {
                free(b->data);
                b->data = NULL;
                b->cap = 0;
                b->too_large = true;
                b->discarded += n;
                return b->discarded <= HTTP_DISCARD_MAX;
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : HTTP_BODY_INITIAL;
                while (cap < b->len + n + 1)
                        cap *= 2;
                if (cap > max + 1)
                        cap = (size_t)max + 1;
                char *nb = realloc(b->data, cap);
                if (!nb)
                        return false;
                b->data = nb;
                b->cap = cap;
        }
        memcpy(b->data + b->len, data, n);
        b->len += n;
        b->data[b->len] = '\0';
        return true;
}

void http_body_clear(struct http_body *b)
{
        free(b->data);
        *b = (struct http_body){0};
}

static enum MHD_Result take_body(struct http_request *req, const char *data, size_t *size)
{
        size_t n = *size;
        *size = 0;
        return http_body_take(&req->body, req->ctx->cfg->limits.max_body_bytes, data, n) ? MHD_YES
                                                                                         : MHD_NO;
}

static bool wants_sse(struct MHD_Connection *conn)
{
        const char *accept =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        return accept && strcasestr(accept, "text/event-stream");
}

static int call_handler(struct http_request *req, struct MHD_Connection *conn,
                        struct http_reply *reply, struct cage_error *err)
{
        json_auto_t *json = NULL;
        int r;
        if ((req->match.flags & ROUTE_JSON_BODY) &&
            (r = http_body_json(req->body.data, req->body.len, req->match.flags & ROUTE_JSON_NUL,
                                &json, err)) < 0)
                return r;
        char *q = strchr(req->raw_uri, '?');
        struct http_call call = {
                .ctx = req->ctx,
                .conn = conn,
                .tenant = req->tenant,
                .method = req->method,
                .name = req->match.name,
                .run_id = req->match.run_id,
                .path = req->match.path,
                .query = q ? q + 1 : "",
                .body = req->body.data ? req->body.data : "",
                .body_len = req->body.len,
                .json = json,
                .wants_sse = wants_sse(conn),
                .stream = &req->stream,
        };
        return req->match.fn(&call, reply, err);
}

/* A sandbox or run the tenant does not have: if another tenant has it,
 * the attempt is audited (the client still gets 404). */
static void audit_foreign(const struct http_request *req)
{
        struct cage_service_peer peer = peer_record(req);
        if (req->match.name || req->match.run_id)
                (void)cage_service_audit_foreign(req->ctx->svc, req->tenant, req->match.name,
                                                 req->match.run_id, &peer);
}

/* Step 4. */
static enum MHD_Result finish(struct http_request *req, struct MHD_Connection *conn)
{
        struct http_reply reply = {0};
        struct cage_error err = {0};
        if (req->mcp) /* MCP */
                return finish_mcp(req, conn);
        /* A service call may take as long as an exec's timeout: no idle
         * timeout meanwhile; re-arming it restarts MHD's idle clock. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        int r = call_handler(req, conn, &reply, &err);
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)HTTP_IDLE_TIMEOUT_S);
        if (r == -ENOENT || (r == 0 && reply.status == 404))
                audit_foreign(req);
        if (r < 0) {
                http_reply_clear(&reply);
                unsigned status = (unsigned)cage_service_http_status(r);
                return respond_error(req, conn, status, err.message, NULL);
        }
        req->status = reply.status;
        req->responded = true;
        enum MHD_Result ret = (enum MHD_Result)http_queue_reply(conn, &reply);
        http_reply_clear(&reply);
        return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
        struct http_request *req = *con_cls;
        if (!req)
                return MHD_NO;
        if (!req->started)
                return begin(req, conn, method);
        if (req->responded) {
                *upload_size = 0; /* refused: discard what still arrives */
                return MHD_YES;
        }
        if (*upload_size)
                return take_body(req, upload, upload_size);
        if (req->body.too_large)
                return refuse_too_large(req, conn);
        return finish(req, conn);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        struct http_request *req = *con_cls;
        if (!req)
                return;
        *con_cls = NULL;
        sse_stream_finish(req->stream);
        mcp_http_request_done(req->mcp_req); /* MCP */
        log_request(req, toe);
        if (req->counted)
                atomic_fetch_sub(req->ctx->active, 1);
        http_match_clear(&req->match);
        http_body_clear(&req->body);
        free(req->raw_uri);
        free(req);
}

/* ---- listeners ------------------------------------------------------------ */

int http_listen_tcp(const struct sockaddr_storage *addr, socklen_t addr_len, const char *field,
                    const char *text, int *ret, struct cage_error *err)
{
        int family = addr->ss_family, one = 1;
        _cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return cage_fail(err, -errno, "%s: socket", field);
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            (family == AF_INET6 &&
             setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0))
                return cage_fail(err, -errno, "%s: setsockopt", field);
        if (bind(fd, (const struct sockaddr *)addr, addr_len) < 0)
                return cage_fail(err, -errno, "%s: cannot bind %s", field, text);
        if (listen(fd, 128) < 0)
                return cage_fail(err, -errno, "%s: listen", field);
        *ret = TAKE_FD(fd);
        return 0;
}

/* A leftover socket file is removed only when it is a socket nobody answers
 * on; anything else at that path is an error, never deleted. */
static int clear_stale_socket(const char *path, const struct sockaddr_un *sa,
                              struct cage_error *err)
{
        struct stat st;
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : cage_fail(err, -errno, "listen.unix: %s", path);
        if (!S_ISSOCK(st.st_mode))
                return cage_fail(err, -EEXIST, "listen.unix: %s exists and is not a socket", path);
        _cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
                return cage_fail(err, -EADDRINUSE,
                                 "listen.unix: %s: another server is listening there", path);
        if (unlink(path) < 0 && errno != ENOENT)
                return cage_fail(err, -errno, "listen.unix: cannot remove stale %s", path);
        return 0;
}

struct bind_job {
        int fd;
        const struct sockaddr_un *sa;
        int r;
};

static void *bind_job_main(void *arg)
{
        struct bind_job *j = arg;
        /* A fs struct (so a umask) of this thread's own: umask is shared by
         * the process's threads, and sandboxes cloned meanwhile (the warm
         * pool fills from the start) would inherit 0177. */
        if (unshare(CLONE_FS) < 0) {
                j->r = -errno;
                return NULL;
        }
        umask(0177);
        j->r = bind(j->fd, (const struct sockaddr *)j->sa, sizeof(*j->sa)) < 0 ? -errno : 0;
        return NULL;
}

/* Binds fd to sa so that the socket is created with mode 0600, on a
 * short-lived thread whose umask no other thread sees. */
static int bind_private_umask(int fd, const struct sockaddr_un *sa)
{
        struct bind_job j = {.fd = fd, .sa = sa};
        pthread_t t;
        int r = pthread_create(&t, NULL, bind_job_main, &j);
        if (r != 0)
                return -r;
        pthread_join(t, NULL);
        return j.r;
}

static int open_unix(const char *path, int *ret, struct cage_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
                return cage_fail(err, -EINVAL, "listen.unix: path too long");
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int r = clear_stale_socket(path, &sa, err);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return cage_fail(err, -errno, "listen.unix: socket");
        /* The socket must never exist with a wider mode, even briefly. */
        if ((r = bind_private_umask(fd, &sa)) < 0)
                return cage_fail(err, r, "listen.unix: cannot bind %s", path);
        if (chmod(path, 0600) < 0 || listen(fd, 128) < 0) {
                r = cage_fail(err, -errno, "listen.unix: %s", path);
                unlink(path);
                return r;
        }
        *ret = TAKE_FD(fd);
        return 0;
}

static int start_daemon(struct cage_http_server *srv, struct http_context *ctx, int fd,
                        struct cage_error *err)
{
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC; /* ITC: quiesce */
        struct MHD_Daemon *d = MHD_start_daemon(
                flags, 0, NULL, NULL, on_request, ctx, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
                MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                (unsigned)HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
                (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                (size_t)HTTP_HEADERS_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                (unsigned)ctx->cfg->connections_per_ip, MHD_OPTION_URI_LOG_CALLBACK, on_uri, ctx,
                MHD_OPTION_NOTIFY_COMPLETED, on_completed, ctx, MHD_OPTION_END);
        if (!d) {
                close(fd);
                return cage_fail(err, -EIO, "cannot start the HTTP daemon");
        }
        srv->api_daemon[srv->n_daemons] = !ctx->metrics_only;
        srv->quiesced_fds[srv->n_daemons] = -1;
        srv->daemons[srv->n_daemons++] = d;
        return 0;
}

void http_describe_tcp(int fd, char *out, size_t out_len)
{
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
                if (ss.ss_family == AF_INET6) {
                        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
                        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                        port = ntohs(in6->sin6_port);
                } else {
                        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
                        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
                        port = ntohs(in->sin_port);
                }
        }
        bool v6 = ss.ss_family == AF_INET6;
        snprintf(out, out_len, "http://%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* Appends "PREFIXhttp://ADDR:PORT" of a listener to srv->describe. */
static void describe_listener(struct cage_http_server *srv, int fd, const char *prefix)
{
        char url[160];
        http_describe_tcp(fd, url, sizeof(url));
        size_t n = strlen(srv->describe);
        snprintf(srv->describe + n, sizeof(srv->describe) - n, "%s%s", prefix, url);
}

static int start_listeners(struct cage_http_server *srv, struct cage_error *err)
{
        const struct cage_config *cfg = srv->ctx.cfg;
        int fd = -1, r;
        if (cfg->listen_http) {
                if ((r = http_listen_tcp(&cfg->http_addr, cfg->http_addr_len, "listen.http",
                                         cfg->listen_http, &fd, err)) < 0)
                        return r;
                describe_listener(srv, fd, "");
                if ((r = start_daemon(srv, &srv->ctx, fd, err)) < 0)
                        return r;
        }
        if (cfg->listen_unix) {
                if ((r = open_unix(cfg->listen_unix, &fd, err)) < 0)
                        return r;
                srv->unix_path = strdup(cfg->listen_unix);
                if (!srv->unix_path) {
                        close(fd);
                        unlink(cfg->listen_unix);
                        return cage_fail(err, -ENOMEM, "listen.unix");
                }
                size_t n = strlen(srv->describe);
                snprintf(srv->describe + n, sizeof(srv->describe) - n, "%sunix:%s",
                         n ? " and " : "", cfg->listen_unix);
                if ((r = start_daemon(srv, &srv->ctx, fd, err)) < 0)
                        return r;
        }
        if (cfg->listen_metrics) {
                if ((r = http_listen_tcp(&cfg->metrics_addr, cfg->metrics_addr_len,
                                         "listen.metrics", cfg->listen_metrics, &fd, err)) < 0)
                        return r;
                describe_listener(srv, fd, " and metrics on ");
                if ((r = start_daemon(srv, &srv->metrics_ctx, fd, err)) < 0)
                        return r;
        }
        return 0;
}

static void server_freep(struct cage_http_server **p)
{
        cage_http_stop(*p);
}

int cage_http_start(const struct cage_config *cfg, struct cage_service *svc,
                    struct cage_http_server **ret, struct cage_error *err)
{
        __attribute__((cleanup(server_freep))) struct cage_http_server *srv =
                calloc(1, sizeof(*srv));
        if (!srv)
                return cage_fail(err, -ENOMEM, "http server");
        srv->shutdown_pipe[0] = srv->shutdown_pipe[1] = -1;
        srv->ctx.cfg = cfg;
        srv->ctx.svc = svc;
        http_guard_init(&srv->ctx.guard, cfg->listen_http, cfg->http_loopback);
        if (pipe2(srv->shutdown_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return cage_fail(err, -errno, "http server: pipe");
        srv->ctx.shutdown_fd = srv->shutdown_pipe[0];
        srv->ctx.active = &srv->active;
        srv->metrics_ctx = srv->ctx;
        srv->metrics_ctx.metrics_only = true;
        http_guard_init(&srv->metrics_ctx.guard, cfg->listen_metrics, true);
        int r;
        if ((r = mcp_http_new(cfg, svc, srv->ctx.shutdown_fd, &srv->mcp, err)) < 0) /* MCP */
                return r;
        if ((r = start_listeners(srv, err)) < 0)
                return r;
        if ((r = e2b_start(cfg, svc, srv->ctx.shutdown_fd, &srv->e2b, err)) < 0)
                return r;
        if (srv->e2b) {
                size_t n = strlen(srv->describe);
                snprintf(srv->describe + n, sizeof(srv->describe) - n, " and e2b %s",
                         e2b_describe(srv->e2b));
        }
        *ret = TAKE_PTR(srv);
        return 0;
}

const char *cage_http_describe(const struct cage_http_server *srv)
{
        return srv->describe;
}

/* Removes the socket file only while it is still a socket (the path could
 * have been replaced since). */
static void remove_socket(const char *path)
{
        struct stat st;
        if (path && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
}

void cage_http_quiesce(struct cage_http_server *srv)
{
        for (size_t i = 0; i < srv->n_daemons; i++) {
                if (!srv->api_daemon[i] || srv->quiesced_fds[i] >= 0)
                        continue;
                /* MHD no longer accepts; the socket is ours but must stay
                 * open until MHD_stop_daemon. shutdown() makes the kernel
                 * refuse new connections instead of queueing them. */
                int fd = MHD_quiesce_daemon(srv->daemons[i]);
                srv->quiesced_fds[i] = fd;
                if (fd >= 0)
                        shutdown(fd, SHUT_RDWR);
        }
        e2b_quiesce(srv->e2b);
        remove_socket(srv->unix_path);
}

unsigned cage_http_active(struct cage_http_server *srv)
{
        /* An open subscriptions/listen stream is a counted POST, but no work:
         * it ends when the server stops, so a drain must not wait for it. */
        unsigned active = atomic_load(&srv->active), listening = mcp_http_listening(srv->mcp);
        return active > listening ? active - listening : 0;
}

void cage_http_cancel(struct cage_http_server *srv)
{
        if (srv->shutdown_pipe[1] >= 0)
                (void)!write(srv->shutdown_pipe[1], "x", 1);
}

void cage_http_reload(struct cage_http_server *srv, const struct cage_config *cfg)
{
        srv->ctx.cfg = cfg;
        srv->metrics_ctx.cfg = cfg;
}

struct cage_http_server *cage_http_stop(struct cage_http_server *srv)
{
        if (!srv)
                return NULL;
        if (srv->shutdown_pipe[1] >= 0)
                (void)!write(srv->shutdown_pipe[1], "x", 1);
        mcp_http_quiesce(srv->mcp, LISTEN_GRACE_MS); /* listen streams end cleanly */
        for (size_t i = 0; i < srv->n_daemons; i++) {
                MHD_stop_daemon(srv->daemons[i]);
                if (srv->quiesced_fds[i] >= 0)
                        close(srv->quiesced_fds[i]);
        }
        srv->e2b = e2b_stop(srv->e2b);
        mcp_http_free(srv->mcp); /* MCP: after every connection is gone */
        remove_socket(srv->unix_path);
        free(srv->unix_path);
        for (int i = 0; i < 2; i++)
                if (srv->shutdown_pipe[i] >= 0)
                        close(srv->shutdown_pipe[i]);
        free(srv);
        return NULL;
}
