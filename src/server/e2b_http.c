/* The E2B listener (e2b.h, docs/E2B.md): one libmicrohttpd daemon on
 * e2b.listen, thread per connection like the main API (http.c), serving
 * both of E2B's planes on one address:
 *
 *  - a request with an `E2b-Sandbox-Id` header is for a sandbox: the
 *    registry finds it (502 when it is gone, which the SDKs read as "not
 *    running"); `E2b-Sandbox-Port` picks the service inside: 49983 (envd:
 *    commands, files, health) needs the sandbox's envd access token in
 *    `X-Access-Token`, 49999 (the code interpreter) its traffic token in
 *    `E2B-Traffic-Access-Token`; any other port is refused;
 *  - any other request is the control plane: `X-API-Key` is a tenant's
 *    token (without tenants in the config, any key is tenant "default").
 *
 * A request, in order: the Host / Origin policy (http_guard.c, as on the
 * main listener), Content-Length against limits.max_body_bytes, the body
 * buffered up to that limit (413 past it), then the plane's handler runs
 * and its reply is queued. Refused keys and tokens are audited as
 * auth.deny. One log line per request, like the main API's, tagged
 * `e2b`; never bodies, queries, keys or tokens.
 *
 * In the unsafe debug build (-Dunsafe_debug=true) only, the access-token
 * check is switched off when CODECAGE_DEBUG_DISABLE names "e2b-tokens", so
 * the security suite can show that it is what stops one sandbox's token
 * (or a traffic token) from reaching another sandbox's commands. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/output.h"
#include "server/e2b.h"
#include "services/config.h"
#include "services/redact.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define E2B_CONNECTIONS_MAX CAGE_CONFIG_CONNECTIONS_MAX
#define E2B_HEADERS_MAX     (64 * 1024)
#define E2B_IDLE_TIMEOUT_S  60
#define E2B_URI_MAX         8192
#define E2B_LOG_PATH_MAX    256
#define E2B_DESCRIBE_MAX    96
#define E2B_METHOD_MAX      16

struct e2b_server {
        struct cage_service *svc; /* its config and redactor: the latest reload's */
        struct e2b_registry *reg;
        struct http_guard guard;
        int shutdown_fd;
        struct MHD_Daemon *daemon;
        int quiesced_fd; /* the listening socket MHD_quiesce_daemon gave back, or -1 */
        char describe[E2B_DESCRIBE_MAX];
};

struct e2b_request {
        struct e2b_server *srv;
        char *raw_uri;
        uint64_t start_ms;
        char method[E2B_METHOD_MAX];
        char log_method[3 * E2B_METHOD_MAX + 1];
        char tenant[64];
        char log_path[3 * E2B_LOG_PATH_MAX + 1];
        char remote[HTTP_REMOTE_MAX];
        unsigned status;
        bool started, responded;
        struct http_body body;
};

/* ---- logging -------------------------------------------------------------- */

/* What a client sent, for a log line or an audit record (as http.c's):
 * printable ASCII but '"', every other byte %XX, up to the first byte of
 * `stops` and at most max bytes of input. out holds 3 * max + 1 bytes. */
static void log_escape(const char *in, const char *stops, size_t max, char *out)
{
        size_t w = 0, n = 0;
        for (const unsigned char *p = (const unsigned char *)in;
             *p && !strchr(stops, *p) && n < max; p++, n++) {
                if (*p > 0x20 && *p < 0x7f && *p != '"')
                        out[w++] = (char)*p;
                else
                        w += (size_t)snprintf(out + w, 4, "%%%02X", *p);
        }
        out[w] = '\0';
}

static void log_request(const struct e2b_request *req, enum MHD_RequestTerminationCode toe)
{
        char line[1024];
        int n = snprintf(line, sizeof(line),
                         "codecage: e2b method=%s path=\"%s\" tenant=%s status=%u duration_ms=%llu "
                         "end=%s\n",
                         req->log_method[0] ? req->log_method : "-", req->log_path,
                         req->tenant[0] ? req->tenant : "-", req->status,
                         (unsigned long long)(clock_mono_ms() - req->start_ms),
                         toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "ok" : "aborted");
        if (n > 0)
                (void)!write(STDERR_FILENO, line,
                             (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* ---- replies -------------------------------------------------------------- */

json_t *e2b_error_doc(unsigned status, const char *message)
{
        _cleanup_free_ char *clean = NULL;
        size_t len = 0;
        if (cage_sanitize_text(message ? message : "", message ? strlen(message) : 0, &clean,
                               &len) < 0)
                return NULL;
        return json_pack("{s:i, s:s%}", "code", (int)status, "message", clean, len);
}

static void common_headers(struct MHD_Response *resp, const char *content_type)
{
        if (content_type)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
}

static struct MHD_Response *reply_response(struct e2b_reply *reply)
{
        struct MHD_Response *resp = NULL;
        if (reply->response) {
                resp = reply->response;
                reply->response = NULL;
                return resp;
        }
        if (reply->raw || !reply->json) {
                resp = MHD_create_response_from_buffer_with_free_callback(
                        reply->raw_len, reply->raw ? reply->raw : strdup(""), free);
                if (resp) {
                        reply->raw = NULL;
                        common_headers(resp, reply->raw_len ? reply->content_type : NULL);
                }
                return resp;
        }
        char *text = json_dumps(reply->json, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
                return NULL;
        resp = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
        if (!resp) {
                free(text);
                return NULL;
        }
        common_headers(resp, reply->content_type ? reply->content_type : "application/json");
        return resp;
}

static void reply_clear(struct e2b_reply *reply)
{
        json_decref(reply->json);
        free(reply->raw);
        if (reply->response)
                MHD_destroy_response(reply->response);
        *reply = (struct e2b_reply){0};
}

static enum MHD_Result queue(struct e2b_request *req, struct MHD_Connection *conn,
                             struct e2b_reply *reply)
{
        req->status = reply->status;
        req->responded = true;
        struct MHD_Response *resp = reply_response(reply);
        if (!resp) {
                reply_clear(reply);
                return MHD_NO;
        }
        if (reply->header_name)
                MHD_add_response_header(resp, reply->header_name, reply->header_value);
        enum MHD_Result r = MHD_queue_response(conn, reply->status, resp);
        MHD_destroy_response(resp);
        reply_clear(reply);
        return r;
}

/* An error in the E2B shape {"code": status, "message": ...}. */
static enum MHD_Result refuse(struct e2b_request *req, struct MHD_Connection *conn, unsigned status,
                              const char *message)
{
        struct e2b_reply reply = {.status = status, .json = e2b_error_doc(status, message)};
        http_body_clear(&req->body);
        return queue(req, conn, &reply);
}

/* ---- the request life cycle ---------------------------------------------- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
        (void)conn;
        struct e2b_request *req = calloc(1, sizeof(*req));
        if (!req)
                return NULL;
        req->srv = cls;
        req->start_ms = clock_mono_ms();
        req->raw_uri = strndup(uri, E2B_URI_MAX);
        if (!req->raw_uri) {
                free(req);
                return NULL;
        }
        log_escape(req->raw_uri, "?", E2B_LOG_PATH_MAX, req->log_path);
        return req;
}

static const char *header(struct MHD_Connection *conn, const char *name)
{
        return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

static void audit_deny(struct e2b_request *req, const char *reason)
{
        cage_service_audit_auth_deny(req->srv->svc, reason, req->remote[0] ? req->remote : NULL,
                                     req->log_method, req->log_path);
}

static enum MHD_Result begin(struct e2b_request *req, struct MHD_Connection *conn,
                             const char *method)
{
        req->started = true;
        snprintf(req->method, sizeof(req->method), "%s", method);
        log_escape(req->method, "", sizeof(req->method), req->log_method);
        bool unix_socket = http_peer(conn, req->remote);
        if (strlen(req->raw_uri) >= E2B_URI_MAX)
                return refuse(req, conn, 414, "the request target is too long");
        struct http_guard_request rq = {
                .unix_socket = unix_socket,
                .health = false,
                .host = header(conn, MHD_HTTP_HEADER_HOST),
                .origin = header(conn, "Origin"),
        };
        const char *message = NULL, *reason = NULL;
        unsigned status = http_guard_check(&req->srv->guard, &rq, &message, &reason);
        if (status) {
                audit_deny(req, reason);
                return refuse(req, conn, status, message);
        }
        if (cage_service_draining(req->srv->svc))
                return refuse(req, conn, 503,
                              "the server is shutting down; send this request to another "
                              "instance or try again when it is back");
        const char *cl = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl &&
            strtoull(cl, NULL, 10) > cage_service_config(req->srv->svc)->limits.max_body_bytes)
                return refuse(req, conn, 413, "the body is larger than limits.max_body_bytes");
        return MHD_YES;
}

/* The control plane: the API key names the tenant. */
static int control(struct e2b_request *req, struct e2b_call *c, struct e2b_reply *reply,
                   struct cage_error *err)
{
        const struct cage_config *cfg = cage_service_config(req->srv->svc);
        const char *key = header(c->conn, "X-API-Key");
        const struct cage_tenant *t = NULL;
        if (cage_config_auth_required(cfg)) {
                t = key ? cage_config_tenant_for_token(cfg, key) : NULL;
                if (!t) {
                        audit_deny(req, key ? "bad_token" : "missing_token");
                        return cage_fail_plain(err, -EACCES,
                                               "a valid API key (X-API-Key: a tenant's token) is "
                                               "required");
                }
        }
        snprintf(req->tenant, sizeof(req->tenant), "%s", t ? t->name : CAGE_SERVICE_DEFAULT_TENANT);
        c->tenant = req->tenant;
        return e2b_control(c, reply, err);
}

static bool token_valid(const char *given, const char *known)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "e2b-tokens"))
                return true;
#endif
        return e2b_token_equal(given, known);
}

/* The sandbox plane: the sandbox of E2b-Sandbox-Id, its token, its port. */
static enum MHD_Result sandbox(struct e2b_request *req, struct e2b_call *c, const char *id)
{
        struct e2b_reply reply = {0};
        const char *port = header(c->conn, "E2b-Sandbox-Port");
        struct e2b_box *box = e2b_registry_get(c->reg, id);
        if (!box)
                return refuse(req, c->conn, 502,
                              "the sandbox was not found: it was killed or its timeout ended");
        c->box = box;
        enum MHD_Result ret;
        bool envd = port && strcmp(port, "49983") == 0, code = port && strcmp(port, "49999") == 0;
        const char *token = envd   ? header(c->conn, "X-Access-Token")
                            : code ? header(c->conn, "E2B-Traffic-Access-Token")
                                   : NULL;
        if (!envd && !code) {
                ret = refuse(req, c->conn, 502,
                             "codecage serves ports 49983 (envd) and 49999 (the code "
                             "interpreter) of a sandbox only: port URLs are not offered");
        } else if (!token_valid(token, envd ? box->envd_token : box->traffic_token)) {
                audit_deny(req, token ? "bad_token" : "missing_token");
                ret = refuse(req, c->conn, 401,
                             envd ? "a valid X-Access-Token (the sandbox's envd access token) is "
                                    "required"
                                  : "a valid E2B-Traffic-Access-Token is required");
        } else {
                /* Only now: a refused token's line names no tenant. */
                snprintf(req->tenant, sizeof(req->tenant), "%s", box->tenant);
                int r = envd ? e2b_process(c, &reply) : e2b_code(c, &reply);
                if (r == -ENOENT && envd)
                        r = e2b_fs(c, &reply);
                ret = r == -ENOENT ? refuse(req, c->conn, 404, "no such route")
                                   : queue(req, c->conn, &reply);
        }
        e2b_box_unref(box);
        return ret;
}

static enum MHD_Result finish(struct e2b_request *req, struct MHD_Connection *conn)
{
        struct e2b_server *srv = req->srv;
        struct cage_service_peer peer = {.remote = req->remote[0] ? req->remote : NULL,
                                         .method = req->log_method,
                                         .route = req->log_path};
        char *q = strchr(req->raw_uri, '?');
        if (q)
                *q++ = '\0';
        struct e2b_call c = {.cfg = cage_service_config(srv->svc),
                             .svc = srv->svc,
                             .redactor = cage_service_redactor(srv->svc),
                             .reg = srv->reg,
                             .conn = conn,
                             .shutdown_fd = srv->shutdown_fd,
                             .method = req->method,
                             .path = req->raw_uri,
                             .query = q ? q : "",
                             .body = req->body.data ? req->body.data : "",
                             .body_len = req->body.len,
                             .peer = &peer};
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        const char *id = header(conn, "E2b-Sandbox-Id");
        enum MHD_Result ret;
        if (id) {
                ret = sandbox(req, &c, id);
        } else {
                struct e2b_reply reply = {0};
                struct cage_error err = {0};
                int r = control(req, &c, &reply, &err);
                if (r < 0) {
                        reply_clear(&reply);
                        unsigned status = r == -EACCES   ? 401
                                          : r == -ENOSYS ? 501
                                                         : (unsigned)cage_service_http_status(r);
                        ret = refuse(req, conn, status, err.message);
                } else {
                        ret = queue(req, conn, &reply);
                }
        }
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)E2B_IDLE_TIMEOUT_S);
        return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
        (void)cls;
        (void)url;
        (void)version;
        struct e2b_request *req = *con_cls;
        if (!req)
                return MHD_NO;
        if (!req->started)
                return begin(req, conn, method);
        if (req->responded) {
                *upload_size = 0;
                return MHD_YES;
        }
        if (*upload_size) {
                size_t n = *upload_size;
                *upload_size = 0;
                return http_body_take(&req->body,
                                      cage_service_config(req->srv->svc)->limits.max_body_bytes,
                                      upload, n)
                               ? MHD_YES
                               : MHD_NO;
        }
        if (req->body.too_large)
                return refuse(req, conn, 413, "the body is larger than limits.max_body_bytes");
        return finish(req, conn);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        (void)cls;
        (void)conn;
        struct e2b_request *req = *con_cls;
        if (!req)
                return;
        *con_cls = NULL;
        log_request(req, toe);
        http_body_clear(&req->body);
        free(req->raw_uri);
        free(req);
}

/* ---- start / stop ---------------------------------------------------------- */

int e2b_start(const struct cage_config *cfg, struct cage_service *svc, int shutdown_fd,
              struct e2b_server **ret, struct cage_error *err)
{
        *ret = NULL;
        if (!cfg->e2b.listen)
                return 0;
        struct e2b_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return cage_fail(err, -ENOMEM, "e2b listener");
        srv->svc = svc;
        srv->shutdown_fd = shutdown_fd;
        srv->quiesced_fd = -1;
        http_guard_init(&srv->guard, cfg->e2b.listen, cfg->e2b.loopback);
        int fd = -1, r = http_listen_tcp(&cfg->e2b.addr, cfg->e2b.addr_len, "e2b.listen",
                                         cfg->e2b.listen, &fd, err);
        if (r < 0) {
                free(srv);
                return r;
        }
        http_describe_tcp(fd, srv->describe, sizeof(srv->describe));
        srv->reg = e2b_registry_new(svc);
        if (!srv->reg) {
                close(fd);
                free(srv);
                return cage_fail(err, -ENOMEM, "e2b registry");
        }
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC; /* ITC: quiesce */
        srv->daemon = MHD_start_daemon(
                flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_LISTEN_SOCKET, fd,
                MHD_OPTION_CONNECTION_LIMIT, (unsigned)E2B_CONNECTIONS_MAX,
                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)E2B_IDLE_TIMEOUT_S,
                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)E2B_HEADERS_MAX,
                MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->connections_per_ip,
                MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                srv, MHD_OPTION_END);
        if (!srv->daemon) {
                close(fd);
                e2b_registry_free(srv->reg);
                free(srv);
                return cage_fail(err, -EIO, "cannot start the e2b listener");
        }
        *ret = srv;
        return 0;
}

const char *e2b_describe(const struct e2b_server *srv)
{
        return srv ? srv->describe : "";
}

void e2b_quiesce(struct e2b_server *srv)
{
        if (!srv || srv->quiesced_fd >= 0)
                return;
        /* As the main listener's (http.c): MHD accepts no more, the kernel
         * refuses new connections, the socket is closed after the daemon. */
        srv->quiesced_fd = MHD_quiesce_daemon(srv->daemon);
        if (srv->quiesced_fd >= 0)
                shutdown(srv->quiesced_fd, SHUT_RDWR);
}

struct e2b_server *e2b_stop(struct e2b_server *srv)
{
        if (!srv)
                return NULL;
        MHD_stop_daemon(srv->daemon);
        if (srv->quiesced_fd >= 0)
                close(srv->quiesced_fd);
        e2b_registry_free(srv->reg);
        free(srv);
        return NULL;
}
