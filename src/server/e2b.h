/* The E2B-compatible API of `codecage serve` (docs/E2B.md): the stock E2B
 * SDKs, pointed at the `e2b.listen` address, create, use and kill codecage
 * sandboxes. Internal to src/server:
 *   e2b_http.c      the listener: its daemon, the request life cycle,
 *                   routing on E2b-Sandbox-Id / E2b-Sandbox-Port, API keys
 *                   (tenant tokens) and the per-sandbox access tokens
 *   e2b_registry.c  the sandboxes made through it: ids, tokens, lifetimes
 *                   (a reaper removes a sandbox when its timeout ends)
 *   e2b_control.c   the control plane: /sandboxes, /v2/sandboxes
 *   e2b_connect.c   the Connect protocol (JSON codec): unary replies,
 *                   stream envelopes, error codes
 *   e2b_process.c   process.Process: commands as execs of the service,
 *                   each sandbox's table of running commands
 *   e2b_fs.c        filesystem.Filesystem and GET/POST /files
 *   e2b_code.c      the code interpreter: /execute on Python sessions,
 *                   /contexts as extra sessions
 *   e2b_parse.c     the parsers of what clients send that is not JSON
 *                   (Connect envelopes, multipart bodies, list filters)
 * Everything reaches sandboxes through the service (cage_service_*), with
 * the tenant that made the sandbox. */
#ifndef CODECAGE_SERVER_E2B_H
#define CODECAGE_SERVER_E2B_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "server/http.h"

#define E2B_ENVD_VERSION "0.5.7" /* the envd features served (docs/E2B.md) */
#define E2B_ENVD_PORT    49983
#define E2B_CODE_PORT    49999
#define E2B_ID_LEN       20 /* sandbox ids: "i" + 19 lowercase hex */
#define E2B_TOKEN_LEN    64 /* access tokens: 256 random bits, hex */
#define E2B_TEMPLATE_MAX 255

struct cage_config;
struct cage_service;
struct e2b_server;
struct sse_queue;

/* e2b_http.c: the listener of cfg->e2b.listen (nothing when it is NULL). */
int e2b_start(const struct cage_config *cfg, struct cage_service *svc, int shutdown_fd,
              struct e2b_server **ret, struct cage_error *err);
/* "http://ADDR:PORT" of the bound listener. */
const char *e2b_describe(const struct e2b_server *srv);
/* Drain: no new connection is accepted (those open are served, a request
 * answers 503). Accepts NULL. */
void e2b_quiesce(struct e2b_server *srv);
/* Stops the listener, ends every command, removes every sandbox made
 * through it. Accepts NULL. */
struct e2b_server *e2b_stop(struct e2b_server *srv);

/* ---- the registry (e2b_registry.c) -------------------------------------- */

struct e2b_proc;

/* A sandbox made through the E2B API. Reference counted; the fixed fields
 * never change after registration, the others are under the registry's
 * lock (end_ms) or the box's (procs). */
struct e2b_box {
        int refs;
        char id[E2B_ID_LEN + 1]; /* also its codecage name */
        char tenant[64];
        char template_id[E2B_TEMPLATE_MAX + 1];
        char envd_token[E2B_TOKEN_LEN + 1];
        char traffic_token[E2B_TOKEN_LEN + 1];
        uint64_t started_ms;
        uint64_t end_ms; /* under the registry's lock */
        bool network;    /* it asked for the network and got it */
        double cpus;
        uint64_t memory_mib;
        json_t *metadata; /* {key: value} as asked */
        pthread_mutex_t lock;
        struct e2b_proc *procs; /* running commands (e2b_process.c) */
        uint32_t next_pid;
        unsigned executions; /* code interpreter runs, for number_of_executions */
};

struct e2b_registry;

struct e2b_registry *e2b_registry_new(struct cage_service *svc);
/* Removes every sandbox (ending its commands) and frees. Accepts NULL. */
void e2b_registry_free(struct e2b_registry *reg);
/* Creates the codecage sandbox of spec (its "name" is set here) and
 * registers it; *ret holds a reference. */
int e2b_registry_create(struct e2b_registry *reg, const char *tenant, json_t *spec,
                        const char *template_id, uint64_t timeout_s, json_t *metadata,
                        struct e2b_box **ret, struct cage_error *err);
/* The sandbox of id (any tenant: the caller checks), referenced; NULL. */
struct e2b_box *e2b_registry_get(struct e2b_registry *reg, const char *id);
/* The sandbox of id when `tenant` made it; NULL otherwise. */
struct e2b_box *e2b_registry_get_for(struct e2b_registry *reg, const char *tenant, const char *id);
/* Every live sandbox of tenant, oldest first, referenced; *ret malloc'ed. */
int e2b_registry_list(struct e2b_registry *reg, const char *tenant, struct e2b_box ***ret,
                      size_t *ret_n);
/* Ends the sandbox now: unregistered, commands ended, removed. 0, or
 * -ENOENT when it was gone already. */
int e2b_registry_kill(struct e2b_registry *reg, struct e2b_box *box);
void e2b_registry_set_end(struct e2b_registry *reg, struct e2b_box *box, uint64_t end_ms,
                          bool only_later);
uint64_t e2b_registry_end(struct e2b_registry *reg, struct e2b_box *box);
void e2b_box_unref(struct e2b_box *box);
/* Whether token equals the box's (constant time). */
bool e2b_token_equal(const char *given, const char *known);

/* ---- one request -------------------------------------------------------- */

struct e2b_call {
        const struct cage_config *cfg;
        struct cage_service *svc;
        struct cage_redactor *redactor;
        struct e2b_registry *reg;
        struct MHD_Connection *conn;
        int shutdown_fd;
        const char *method;
        const char *path;  /* decoded path, without the query */
        const char *query; /* raw query ("" when none) */
        const char *body;  /* NUL-terminated */
        size_t body_len;
        const char *tenant;                   /* control plane: the API key's tenant */
        struct e2b_box *box;                  /* sandbox plane: the sandbox addressed */
        const struct cage_service_peer *peer; /* for audit records: escaped method and path */
};

/* What a handler answers: status and body (JSON, raw bytes, or a ready
 * MHD response), and one extra header. */
struct e2b_reply {
        unsigned status;
        json_t *json;
        void *raw;
        size_t raw_len;
        const char *content_type;
        struct MHD_Response *response;
        const char *header_name;
        char header_value[128];
};

/* e2b_control.c: the control plane. 0 with reply filled, or -errno with
 * err filled (answered as {"code": status, "message": ...}). */
int e2b_control(struct e2b_call *c, struct e2b_reply *reply, struct cage_error *err);
/* The E2B error body {"code": status, "message": message}. */
json_t *e2b_error_doc(unsigned status, const char *message);

/* e2b_connect.c: the Connect protocol (JSON codec). */
enum e2b_connect_code {
        CONNECT_CANCELED,
        CONNECT_UNKNOWN,
        CONNECT_INVALID_ARGUMENT,
        CONNECT_DEADLINE_EXCEEDED,
        CONNECT_NOT_FOUND,
        CONNECT_ALREADY_EXISTS,
        CONNECT_PERMISSION_DENIED,
        CONNECT_RESOURCE_EXHAUSTED,
        CONNECT_FAILED_PRECONDITION,
        CONNECT_UNIMPLEMENTED,
        CONNECT_INTERNAL,
        CONNECT_UNAVAILABLE,
        CONNECT_UNAUTHENTICATED,
};
/* -errno of a service call -> the Connect code. */
enum e2b_connect_code e2b_connect_code_of(int r);
/* A unary error: the HTTP status of code, body {"code", "message"}. */
void e2b_connect_error(struct e2b_reply *reply, enum e2b_connect_code code, const char *message);
/* A stream that ends at once with an error (HTTP 200, one end-of-stream
 * envelope): how a server stream refuses. */
void e2b_connect_stream_error(struct e2b_reply *reply, enum e2b_connect_code code,
                              const char *message);
/* e2b_parse.c. The message of a stream request: its one envelope,
 * parsed; -EINVAL with err filled for anything else. */
int e2b_connect_stream_message(const char *body, size_t len, json_t **ret, struct cage_error *err);
/* The boundary of a multipart/form-data Content-Type, as it appears in the
 * body ("--" + boundary); false without a usable one. */
#define E2B_BOUNDARY_MAX 200
bool e2b_multipart_boundary(const char *content_type, char *out, size_t out_len);
/* One part of a multipart body: its bytes (borrowed from the body) and the
 * filename of its Content-Disposition (NULL without one). */
struct e2b_part {
        const char *data;
        size_t len;
        char *filename;
};
/* The part at *pos (0 at first): 1 with *ret filled and *pos moved on, 0 at
 * the closing boundary, -EINVAL for a malformed body. */
int e2b_multipart_next(const char *body, size_t len, const char *boundary, size_t *pos,
                       struct e2b_part *ret);
void e2b_part_clear(struct e2b_part *part);
/* Whether metadata ({key: value}) has every pair of filter ("k=v&k2=v2",
 * keys and values percent-encoded); -EINVAL for a malformed filter. */
int e2b_metadata_matches(const char *filter, const json_t *metadata, bool *ret);
/* Pushes msg as a data envelope (flags 0) onto q. */
int e2b_connect_push(struct sse_queue *q, json_t *msg);
/* Pushes the end-of-stream envelope (flags 2): {} or {"error": {...}}. */
int e2b_connect_push_end(struct sse_queue *q, int code, const char *message);
/* A streaming response reading q (it takes a reference); when MHD is done
 * with it the queue is closed (a waiting producer returns) and
 * release(arg) runs, if given. NULL on ENOMEM (release not run). */
struct MHD_Response *e2b_stream_response(struct sse_queue *q, const char *content_type,
                                         void (*release)(void *arg), void *arg);
/* A streaming Connect response reading q; keepalive: the envelope sent
 * after a silence. */
struct MHD_Response *e2b_connect_stream_response(struct sse_queue *q, json_t *keepalive);
/* An error in the shape the request came in: a stream's end-of-stream
 * envelope, or a unary error. */
void e2b_connect_fail(struct MHD_Connection *conn, struct e2b_reply *reply,
                      enum e2b_connect_code code, const char *message);
/* A service's method table: fn, or (fn NULL) what answers that codecage
 * does not offer it. */
struct e2b_method {
        const char *name;
        void (*fn)(struct e2b_call *c, struct e2b_reply *reply);
        const char *unoffered;
};
/* Serves the call when its path is prefix + a method name: the protobuf
 * codec, a method other than POST and an unknown name are refused in
 * Connect's shape. -ENOENT for another path. */
int e2b_connect_dispatch(struct e2b_call *c, struct e2b_reply *reply, const char *prefix,
                         const struct e2b_method *methods, size_t n);
/* A request in the protobuf codec: answers it (unimplemented, in the
 * stream or unary shape it came in) and returns true. */
bool e2b_connect_refuse_codec(struct MHD_Connection *conn, struct e2b_reply *reply);
/* Whether the request is a Connect stream (Content-Type
 * application/connect+json) or a unary JSON call. */
bool e2b_connect_is_stream(struct MHD_Connection *conn);
/* The deadline the client asked for (Connect-Timeout-Ms), in ms; 0: none. */
uint64_t e2b_connect_timeout_ms(struct MHD_Connection *conn);

/* e2b_process.c, e2b_fs.c, e2b_code.c: the sandbox plane. Each fills reply
 * (errors in their own shape) and returns 0, or -ENOENT for a path it
 * does not serve. */
int e2b_process(struct e2b_call *c, struct e2b_reply *reply);
int e2b_fs(struct e2b_call *c, struct e2b_reply *reply);
int e2b_code(struct e2b_call *c, struct e2b_reply *reply);
/* Ends every command of box and waits for them (its removal). */
void e2b_process_end_all(struct e2b_box *box);
/* Worker threads (commands, code runs) are counted: the listener stops
 * only once none runs (e2b_process_wait_idle). */
void e2b_worker_add(void);
void e2b_worker_done(void);
void e2b_process_wait_idle(void);

/* Paths as the E2B SDKs send them ("/workspace/x", "x", "~/x") -> the
 * service's workspace-relative form; -EINVAL with err filled for a path
 * outside /workspace. */
int e2b_workspace_path(const char *path, char *out, size_t out_len, struct cage_error *err);

#endif
