/* The HTTP API of `codecage serve` (docs/API.md), on libmicrohttpd.
 *
 * The first part of this header is what `codecage serve` uses: start the
 * server on the listeners of a loaded config, stop it. The second part is
 * shared by the files of src/server only:
 *   http.c          listeners, daemons, the request life cycle (body limits,
 *                   auth, logging), the request-completed callback
 *   http_guard.c    the Host / Origin policy against DNS rebinding
 *   routes.c        URI decoding, the route table, dispatch
 *   reply.c         JSON, error and raw responses
 *   api_sandbox.c   sandbox, exec and run handlers
 *   api_files.c     workspace files and run artifacts handlers
 *   api_python.c    Python runs, session variables, the pool, host-call answers
 *   api_ops.c       /metrics and /readyz
 *   host_calls.c    host calls of Python runs waiting for a client's answer
 *   sse.c           exec/run/Python output (and host calls) as Server-Sent Events;
 *                   the streaming response of every event queue
 *   openapi.json    embedded at build time (tools/embed-binary.sh)
 * Nothing here is visible to the service layer: dependencies point down. */
#ifndef CODECAGE_SERVER_HTTP_H
#define CODECAGE_SERVER_HTTP_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "codecage/codecage.h"

struct cage_config;
struct cage_service;
struct cage_http_server;

/* Binds every listener of cfg (TCP listen.http, Unix socket listen.unix)
 * and starts serving. cfg and svc must outlive the server. Call only after
 * cage_service_open(): this starts threads. */
int cage_http_start(const struct cage_config *cfg, struct cage_service *svc,
                    struct cage_http_server **ret, struct cage_error *err);
/* "http://127.0.0.1:8080 and unix:/path" (the bound addresses). */
const char *cage_http_describe(const struct cage_http_server *srv);
/* Draining (SIGTERM): stops accepting connections on the API's listeners
 * (the Unix socket's file is removed; the metrics listener stays) and
 * answers new requests on open connections with 503, but /healthz,
 * /readyz and /metrics. Running calls go on. */
void cage_http_quiesce(struct cage_http_server *srv);
/* Requests doing work now: every request but health, readiness, metrics
 * and MCP's listening streams, from its headers until its response is
 * sent. */
unsigned cage_http_active(struct cage_http_server *srv);
/* Cancels every running call (they end "cancelled" and their responses are
 * sent); cage_http_stop does it too, without waiting for the responses. */
void cage_http_cancel(struct cage_http_server *srv);
/* SIGHUP, after cage_service_reload(): cfg from now on (tokens, tenants,
 * limits; secrets through the service's redactor); its listeners must be
 * the running ones. cfg must outlive the server. */
void cage_http_reload(struct cage_http_server *srv, const struct cage_config *cfg);
/* Cancels running execs, stops the listeners, waits for every connection,
 * removes the Unix socket. Accepts NULL. */
struct cage_http_server *cage_http_stop(struct cage_http_server *srv);

/* ---- internal to src/server -------------------------------------------- */

struct MHD_Connection;
struct MHD_Response;

#define HTTP_NAME_MAX       63     /* [A-Za-z0-9][A-Za-z0-9_.-]{0,62} */
#define HTTP_URI_MAX        8192   /* raw request target */
#define HTTP_SEGMENTS_MAX   256    /* path segments of one request */
#define HTTP_LOGS_TAIL_MAX  100000 /* ?tail= of /logs */
#define HTTP_IDLE_TIMEOUT_S 60     /* idle connections are closed */
#define HTTP_HOST_MAX       255    /* a host name in Host / Origin */
#define HTTP_REMOTE_MAX     64     /* "[v6]:port", "unix:uid=N" */
#define HTTP_RETRY_AFTER_S  "1"    /* Retry-After of a 429 (over a quota) */

/* http_guard.c: the Host / Origin policy (DNS rebinding). */
struct http_guard {
        char listen_host[HTTP_HOST_MAX + 1]; /* the host of listen.http, "" without */
        bool loopback;                       /* listen.http is a loopback address */
        bool off;                            /* unsafe debug builds only ("http-host") */
};
/* What the policy looks at in one request; NULL for an absent header. */
struct http_guard_request {
        bool unix_socket; /* it came over the Unix socket */
        bool health;      /* GET /healthz or /readyz */
        const char *host, *origin;
};
void http_guard_init(struct http_guard *g, const char *listen_http, bool loopback);
/* 0 when the request may go on; otherwise 403 with *message (for the
 * client) and *reason (for the audit log: "bad_host", "bad_origin") set. */
unsigned http_guard_check(const struct http_guard *g, const struct http_guard_request *rq,
                          const char **message, const char **reason);
/* The host of "host[:port]" or "[v6]:port"; false when malformed. */
bool http_host_part(const char *hostport, char out[HTTP_HOST_MAX + 1]);

/* What every request handler may reach; read-only after start but for cfg,
 * which a reload swaps (every earlier one stays alive). Live output is
 * redacted with the service's redactor (cage_service_redactor()). */
struct http_context {
        const struct cage_config *_Atomic cfg;
        struct cage_service *svc;
        int shutdown_fd; /* readable once the server is stopping */
        struct http_guard guard;
        bool metrics_only;        /* listen.metrics: /metrics, /healthz, /readyz, no token */
        _Atomic unsigned *active; /* requests doing work now (drain waits for them) */
};

/* One decoded request, as the route handlers see it. */
struct http_call {
        const struct http_context *ctx;
        struct MHD_Connection *conn;
        const char *tenant;
        const char *method;
        const char *name;   /* {name} of the route, validated */
        const char *run_id; /* {run_id} of the route, validated */
        const char *path;   /* {path...}: decoded segments joined by "/" */
        const char *query;  /* raw query string ("" when none) */
        const char *body;   /* NUL-terminated; body_len bytes */
        size_t body_len;
        json_t *json;               /* parsed body of JSON routes, else NULL */
        bool wants_sse;             /* Accept: text/event-stream */
        struct sse_stream **stream; /* where a streaming handler parks its stream */
};

/* What a handler answers: JSON (status + document), raw bytes, or a ready
 * MHD response (SSE). Exactly one of json / raw / response is set. */
struct http_reply {
        unsigned status;
        json_t *json;
        void *raw; /* malloc'ed */
        size_t raw_len;
        const char *content_type;
        struct MHD_Response *response;
};

/* Handlers return 0 with *reply filled, or -errno with err filled (the
 * status then comes from cage_service_http_status()). */
typedef int (*http_handler_fn)(struct http_call *call, struct http_reply *reply,
                               struct cage_error *err);

/* http.c: the peer of a connection, for audit records: "ADDR:PORT",
 * "[V6]:PORT", or over the Unix socket "unix:uid=N" (its credentials;
 * "unix" when they cannot be read); "" when unknown. Returns whether the
 * connection came over the Unix socket. */
bool http_peer(struct MHD_Connection *conn, char out[HTTP_REMOTE_MAX]);

/* A request body buffered up to a limit: past it the bytes are counted and
 * dropped (too_large) so the 413 can go out once the client is done. */
struct http_body {
        char *data; /* NUL-terminated after len bytes, or NULL */
        size_t len, cap;
        bool too_large;
        uint64_t discarded; /* bytes past the limit, counted, not kept */
};
/* Appends n bytes within max; false when the connection should close
 * (out of memory, or more than 64 MiB discarded). */
bool http_body_take(struct http_body *b, uint64_t max, const char *data, size_t n);
void http_body_clear(struct http_body *b);

/* A listening TCP socket on addr (SO_REUSEADDR; IPv6 only for IPv6);
 * field and text name it in errors ("listen.http", "127.0.0.1:8080"). */
int http_listen_tcp(const struct sockaddr_storage *addr, socklen_t addr_len, const char *field,
                    const char *text, int *ret, struct cage_error *err);
/* "http://ADDR:PORT" of a bound socket. */
void http_describe_tcp(int fd, char *out, size_t out_len);

/* routes.c */
enum http_route_flags {
        ROUTE_PUBLIC = 1 << 0,    /* no token needed */
        ROUTE_JSON_BODY = 1 << 1, /* Content-Type: application/json, body parsed */
        ROUTE_RAW_BODY = 1 << 2,  /* body taken as it is (uploads) */
        ROUTE_OPERATOR = 1 << 3,  /* with tenants: only those with "operator": true */
        ROUTE_JSON_NUL = 1 << 4,  /* with ROUTE_JSON_BODY: strings may hold NUL ("\u0000") */
};

struct http_match {
        http_handler_fn fn;
        unsigned flags;
        char *name, *run_id, *path; /* decoded parameters, malloc'ed */
};

/* Finds the route of method + raw path. 0 on a match; otherwise the HTTP
 * status to answer (400 bad encoding or name, 404, 405 with *allow set to
 * the methods the path accepts) with msg filled. */
unsigned http_route_match(const char *method, const char *raw_path, struct http_match *ret,
                          char allow[64], struct cage_error *msg);
void http_match_clear(struct http_match *m);
/* Percent-decodes s[0..len) into a new string; plus_is_space for query
 * values. -EINVAL for a bad escape or a decoded NUL. */
int http_decode(const char *s, size_t len, bool plus_is_space, char **ret);
/* The decoded value of query parameter key: 1 found, 0 absent, -EINVAL. */
int http_query_get(const char *query, const char *key, char **ret);
/* The body of a JSON route: one JSON object (duplicate keys refused), or
 * -EINVAL with err saying what is wrong. allow_nul: its strings may hold
 * NUL, for a route that reads them with their length (or only passes them
 * on as JSON). */
int http_body_json(const char *body, size_t len, bool allow_nul, json_t **ret,
                   struct cage_error *err);
/* -E2BIG for a body of len bytes whose JSON is over json_load_request()'s
 * budget (413). */
int http_body_too_complex(size_t len, struct cage_error *err);
bool http_name_is_valid(const char *s);

/* reply.c */
void http_reply_json(struct http_reply *reply, unsigned status, json_t *doc);
const char *http_error_code(unsigned status);
json_t *http_error_doc(unsigned status, const char *message);
/* Builds the MHD response of a reply (taking what it owns); NULL on ENOMEM. */
struct MHD_Response *http_reply_response(struct http_reply *reply);
void http_reply_clear(struct http_reply *reply);
/* Queues a JSON error; returns the MHD result of queueing it. */
int http_queue_error(struct MHD_Connection *conn, unsigned status, const char *message,
                     const char *allow, bool auth_challenge);
int http_queue_reply(struct MHD_Connection *conn, struct http_reply *reply);

/* api_sandbox.c / api_files.c: handlers named in the route table. */
int api_healthz(struct http_call *c, struct http_reply *r, struct cage_error *err);
/* api_ops.c */
int api_readyz(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_metrics(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_openapi(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_create(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_list(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_get(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_remove(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_stop(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_start(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_kill(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_sandbox_logs(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_exec(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_run(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_run_file(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_list(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_get(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_put(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_write(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_delete(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_file_mkdir(struct http_call *c, struct http_reply *r, struct cage_error *err);

/* api_python.c. Routes with a {var} or {id} use the {path} parameter for it
 * (one segment; the handler checks). */
int api_python_oneshot(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_run(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_reset(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_var_list(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_var_get(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_var_put(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_python_var_load(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_pool(struct http_call *c, struct http_reply *r, struct cage_error *err);
/* api_images.c */
int api_images_list(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_image_inspect(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_image_pull(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_image_import(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_image_remove(struct http_call *c, struct http_reply *r, struct cage_error *err);
int api_host_call_answer(struct http_call *c, struct http_reply *r, struct cage_error *err);

/* sse.c */
/* The streaming response of an event queue (util/sse_queue.h), for the
 * API's streams and MCP's alike: Content-Type text/event-stream, no proxy
 * buffering; it holds a reference to q until MHD is done with it. */
struct sse_queue;
struct MHD_Response *sse_response(struct sse_queue *q);
struct sse_stream;
enum sse_kind {
        SSE_EXEC,
        SSE_RUN,
        SSE_PYTHON, /* cage_service_python_run, named (call->name) or one-shot */
};
/* Starts the service call on a worker thread and fills reply: a streaming
 * response, or the plain JSON error when the call failed before producing
 * anything. The stream is parked in *call->stream for sse_stream_finish(). */
int sse_start(struct http_call *call, enum sse_kind kind, struct http_reply *reply,
              struct cage_error *err);
/* From the request-completed callback: cancels the call if it still runs,
 * waits for the worker and drops the request's reference. Accepts NULL. */
void sse_stream_finish(struct sse_stream *s);
/* What a streamed Python run adds to the call. */
struct sse_python {
        bool host_calls;   /* host calls become host_call events, answered by the client */
        json_t *functions; /* extra host function names (array, borrowed) or NULL */
};
int sse_start_python(struct http_call *call, const struct sse_python *py, struct http_reply *reply,
                     struct cage_error *err);

/* openapi.json, embedded by the build between these two symbols. */
extern const char cage_openapi_json[];
extern const char cage_openapi_json_end[];

#endif
