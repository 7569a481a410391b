/* The MCP server of codecage (docs/MCP.md), shared by the files of
 * src/server that make it up; transports see only mcp_receive() and the
 * session and call life cycle:
 *   mcp_util.c       protocol errors, log level names, cursors and pages
 *   mcp_content.c    content blocks, tool results, base64, URIs
 *   mcp_session.c    a session: negotiated state, requests in flight
 *                    (cancellation), requests to the client (sampling)
 *   mcp_sampling.c   llm_query / llm_query_batched as sampling requests
 *                    (2026-07-28: as the input requests of a job)
 *   mcp_job.c        2026-07-28: each tools/call as a job on its own
 *                    thread: input-required results (a paused run, an
 *                    HMAC'd requestState) and tasks (tasks/get, update,
 *                    cancel)
 *   mcp_tools.c      codecage's provider: the tool table (mcp_tools.json)
 *   mcp_handlers.c   the sandbox_*, file_* and python_* tools
 *   mcp_run.c        run_python and run_shell: progress, cancellation,
 *                    artifacts as images and resource links
 *   mcp_resources.c  codecage's resources (codecage://): templates, read
 *   mcp_providers.c  the providers of a server (mcp_provider.h) and the
 *                    methods answered from them: tools, resources,
 *                    prompts, completion; argument checks
 *   mcp_server.c     the server object: options, providers
 *   mcp_protocol.c   the method table and dispatch: initialize, ping,
 *                    logging, notifications, the providers' methods;
 *                    revision 2026-07-28: server/discover, the checks of
 *                    a stateless request, its results and errors
 *   mcp_listen.c     2026-07-28: subscriptions/listen, its acknowledgement
 *                    and resource updates from the service's changes
 *   mcp_stdio.c      newline-delimited JSON-RPC on stdin/stdout
 *   mcp_http.c       Streamable HTTP at /mcp of `codecage serve` (its event
 *                    streams are util/sse_queue.h, as the API's)
 * (mcp_fixtures.c, the conformance suite's fixtures, is a provider the
 * command line adds for tests; nothing in the server names it.)
 * Dependencies point down: transports -> protocol -> server -> providers
 * -> session -> util; no file calls one above it. */
#ifndef CODECAGE_SERVER_MCP_H
#define CODECAGE_SERVER_MCP_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "server/jsonrpc.h"
#include "services/config.h"

struct cage_service;
struct cage_redactor;

#define MCP_VERSION_LATEST   "2025-11-25" /* the newest revision with initialize */
#define MCP_VERSION_MODERN   "2026-07-28" /* stateless: every request carries its _meta */
#define MCP_META_VERSION     "io.modelcontextprotocol/protocolVersion"
#define MCP_META_CAPS        "io.modelcontextprotocol/clientCapabilities"
#define MCP_META_LOG_LEVEL   "io.modelcontextprotocol/logLevel"
#define MCP_SERVER_NAME      "codecage"
#define MCP_CALLS_MAX        64           /* requests in flight per session */
#define MCP_CLIENT_WAIT_MS   (600 * 1000) /* for the client's answer to our request */
#define MCP_PAGE_SIZE        50           /* tools / resources per page */
#define MCP_CURSOR_MAX       64
#define MCP_IMAGE_MAX        (1024 * 1024) /* bytes of one image returned inline */
#define MCP_IMAGES_TOTAL_MAX (4 * 1024 * 1024)
#define MCP_IMAGES_MAX       8
#define MCP_READ_MAX         (8 * 1024 * 1024) /* bytes of one resources/read or file_read */
#define MCP_PROGRESS_MS      100               /* at most 10 progress notifications a second */
#define MCP_SESSION_ID_LEN   32
#define MCP_REMOTE_MAX       64 /* the peer of an HTTP session, as http_peer() gives it */

/* ---- the server ---------------------------------------------------------- */

/* What the command line chooses (codecage mcp / serve). */
#define MCP_UPSTREAMS_MAX 16
#define MCP_PROVIDERS_MAX 4 /* codecage's own and those of mcp_options */

struct mcp_provider;
struct mcp_listen;
struct mcp_subscription;
/* Makes a provider for a server of cfg (mcp_provider.h). */
typedef int (*mcp_provider_new_fn)(const struct cage_config *cfg, struct mcp_provider **ret,
                                   struct cage_error *err);

struct mcp_options {
        const char *tools;            /* "run_python,file_read": only these; NULL = all */
        const char *const *upstreams; /* code mode: "NAME=COMMAND ARGS...", added to the
                                         config's upstream_servers (mcp_options_apply) */
        size_t n_upstreams;
        /* Providers added after codecage's own, in order (tests: the
         * conformance suite's fixtures with --mcp-conformance). */
        mcp_provider_new_fn providers[MCP_PROVIDERS_MAX - 1];
        size_t n_providers;
};

struct mcp_server {
        const struct cage_config *cfg;
        struct cage_service *svc;
        struct mcp_provider *providers[MCP_PROVIDERS_MAX]; /* codecage's first */
        size_t n_providers;
        struct mcp_listen *listen; /* subscriptions/listen (mcp_listen.c) */
};

int mcp_server_new(const struct cage_config *cfg, struct cage_service *svc,
                   const struct mcp_options *opts, struct mcp_server **ret, struct cage_error *err);
struct mcp_server *mcp_server_free(struct mcp_server *srv);

/* The process-wide options of `codecage serve` (set by the command line
 * before the server starts; read by mcp_http.c). */
void mcp_serve_options_set(const struct mcp_options *opts);
const struct mcp_options *mcp_serve_options(void);

/* ---- transports ------------------------------------------------------------ */

/* MCP over stdio (`codecage mcp`): newline-delimited JSON-RPC read from
 * in_fd and written to out_fd, as tenant "default", until end of input or
 * until stop_fd is readable. Each tools/call runs on its own thread;
 * running calls are cancelled and waited for before this returns. */
int mcp_stdio_run(struct mcp_server *srv, int in_fd, int out_fd, int stop_fd,
                  struct cage_error *err);

/* ---- errors of the protocol layer ---------------------------------------- */

struct mcp_error {
        int code; /* JSON-RPC error code */
        char message[512];
        json_t *data; /* the error's data, or NULL (taken by the dispatch) */
};

/* Fills e; returns NULL so handlers can `return mcp_fail(...)`. */
json_t *mcp_fail(struct mcp_error *e, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* ---- sinks: where messages to the client go ------------------------------- */

/* stdout, or one SSE stream. send() is thread-safe, borrows msg, and
 * returns -EPIPE once the client is gone; it waits while the client is
 * behind. send_nowait (NULL: use send) never waits: a client too far
 * behind loses the stream, and it returns -EPIPE; for a thread that
 * serves many clients (subscriptions' updates). */
struct mcp_sink {
        int (*send)(struct mcp_sink *sink, const json_t *msg);
        int (*send_nowait)(struct mcp_sink *sink, const json_t *msg);
};

/* ---- sessions and calls ---------------------------------------------------- */

enum mcp_log_level {
        MCP_LOG_DEBUG,
        MCP_LOG_INFO,
        MCP_LOG_NOTICE,
        MCP_LOG_WARNING,
        MCP_LOG_ERROR,
        MCP_LOG_CRITICAL,
        MCP_LOG_ALERT,
        MCP_LOG_EMERGENCY,
        MCP_LOG_NONE, /* 2026-07-28: a request without a logLevel gets no log messages */
};
const char *mcp_log_level_to_string(enum mcp_log_level l);
int mcp_log_level_from_string(const char *s); /* -1 unknown */

struct mcp_call;
struct mcp_pending;
struct mcp_job;

/* One client's session. Fields below `lock` change under it. */
struct mcp_session {
        struct mcp_server *srv;
        char tenant[CAGE_CONFIG_TENANT_NAME_MAX + 1];
        pthread_mutex_t lock;
        pthread_cond_t cond; /* an answer arrived, a call was cancelled, closed */
        int refs;
        bool initialized, closed;
        bool stateless;   /* revision 2026-07-28: no initialize, each request has its _meta */
        bool deaf;        /* the client can send nothing more (stdin ended) */
        char version[16]; /* negotiated protocol revision */
        bool sampling, elicitation; /* client capabilities */
        enum mcp_log_level log_level;
        struct mcp_call *calls; /* requests in flight */
        size_t n_calls;
        struct mcp_pending *pending; /* our requests waiting for the client */
        json_int_t next_id;
        char remote[MCP_REMOTE_MAX]; /* HTTP: the peer of its latest request; "" over stdio */
};

struct mcp_session *mcp_session_new(struct mcp_server *srv, const char *tenant);
/* A session of revision 2026-07-28: initialized at once, its requests
 * checked by mcp_modern_check() first. */
struct mcp_session *mcp_session_new_stateless(struct mcp_server *srv, const char *tenant);
struct mcp_session *mcp_session_ref(struct mcp_session *s);
struct mcp_session *mcp_session_unref(struct mcp_session *s);
/* Cancels every call, fails every wait; later calls are refused. */
void mcp_session_close(struct mcp_session *s);
/* No more messages will come from the client: requests to it fail at once
 * (running calls go on and may still answer). */
void mcp_session_deafen(struct mcp_session *s);
size_t mcp_session_calls(struct mcp_session *s);
void mcp_session_set_remote(struct mcp_session *s, const char *remote);
/* A call (`call`: "tools/call NAME", "resources/read") naming a sandbox or
 * run the session's tenant does not have: audited as auth.deny
 * "forbidden" when another tenant has it (the client sees "not found"). */
void mcp_session_audit_foreign(struct mcp_session *s, const char *call, const char *sandbox,
                               const char *run_id);
enum mcp_log_level mcp_session_log_level(struct mcp_session *s);

/* A request being handled (tools/call), registered in its session so a
 * notifications/cancelled can reach it. */
struct mcp_call {
        struct mcp_session *session; /* a reference */
        struct mcp_sink *sink;       /* where its notifications and requests go */
        json_t *id;
        char key[JSONRPC_KEY_MAX];
        json_t *params;                 /* an object */
        const json_t *progress_token;   /* params._meta.progressToken or NULL */
        enum mcp_log_level log_level;   /* stateless sessions: the request's own */
        const char *missing_capability; /* mcp_call_has_capability() said no */
        int cancel_fd;                  /* an eventfd, readable once cancelled */
        bool cancelled;                 /* under session->lock */
        bool registered;
        struct mcp_job *job; /* 2026-07-28: the job this call runs in (mcp_job.c) */
        struct mcp_call *next;
};

/* Registers request msg as in flight: -EEXIST (its id is in flight
 * already), -EBUSY (MCP_CALLS_MAX), -ESHUTDOWN (closed), -ENOMEM. */
int mcp_call_new(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                 struct mcp_call **ret);
struct mcp_call *mcp_call_free(struct mcp_call *c);
/* Cancels the call of request id (notifications/cancelled); a no-op for
 * an id that is not in flight. */
void mcp_session_cancel(struct mcp_session *s, const json_t *id);
void mcp_call_cancel(struct mcp_call *c);
bool mcp_call_cancelled(struct mcp_call *c);

/* Whether the client of the call declared capability `name` ("sampling",
 * "elicitation"): in its initialize, or (2026-07-28) in the request's
 * own _meta. A tool that cannot work without it returns NULL after a
 * false: the call is answered MissingRequiredClientCapabilityError. */
bool mcp_call_has_capability(struct mcp_call *c, const char *name);
/* Sends a notification related to the call (progress, log). */
int mcp_call_notify(struct mcp_call *c, const char *method, json_t *params);
/* notifications/message when level passes the session's level. */
void mcp_call_log(struct mcp_call *c, enum mcp_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Sends request `method` to the client and waits (MCP_CLIENT_WAIT_MS,
 * cancellation, session end) for its answer: 0 with *result (new
 * reference), or -1 with *error (malloc'ed, says what went wrong). */
int mcp_call_ask(struct mcp_call *c, const char *method, json_t *params, json_t **result,
                 char **error);
/* A response the client sent: wakes the request waiting for it. */
void mcp_session_deliver(struct mcp_session *s, const json_t *response);

/* ---- the protocol ---------------------------------------------------------- */

enum mcp_route {
        MCP_DONE,   /* nothing to send */
        MCP_ANSWER, /* *answer is the response to send now */
        MCP_CALL,   /* *call is registered: run it (on its own thread), then free it */
        MCP_LISTEN, /* *sub is open and acknowledged on sink: keep the stream
                     * until the client or the transport ends it, then
                     * mcp_listen_close() it (stdio: owned by the server,
                     * ended by mcp_listen_cancel / mcp_listen_end_sink) */
};

/* One message from the client (msg is borrowed). sub may be NULL for a
 * transport that offers no subscriptions: subscriptions/listen is then
 * -32601. */
enum mcp_route mcp_receive(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                           json_t **answer, struct mcp_call **call, struct mcp_subscription **sub);
/* Runs a call: its response, or NULL when it was cancelled (no answer is
 * sent for a cancelled request). */
json_t *mcp_call_run(struct mcp_call *c);
/* Whether msg is a request that mcp_receive() turns into an MCP_CALL. */
bool mcp_is_call(const json_t *msg);
bool mcp_version_supported(const char *v);
bool mcp_method_known(const char *method);
/* Revision 2026-07-28 (stateless) rather than the initialize era: the
 * request names a protocol version in params._meta, or the transport's
 * version header (HTTP; NULL over stdio) names one that is not of the
 * initialize era. */
bool mcp_is_modern(const json_t *msg, const char *header_version);
/* The checks of a 2026-07-28 request before it is dispatched: its _meta
 * (protocolVersion, clientCapabilities, logLevel), the version header
 * against it, the version itself. 0, or the HTTP status (400) with
 * *answer the error response (UnsupportedProtocolVersionError -32022,
 * HeaderMismatch -32020, -32602). */
unsigned mcp_modern_check(const json_t *msg, const char *header_version, json_t **answer);
/* The HTTP status of a 2026-07-28 response: 404 for -32601, 400 for the
 * revision's own errors (-32020..-32022), else 200. */
unsigned mcp_modern_http_status(const json_t *answer);

/* ---- tools ----------------------------------------------------------------- */

/* Checks a --tools list ("run_python,file_read"): -EINVAL naming an
 * unknown tool. */
int mcp_tools_check(const char *list, struct cage_error *err);
/* Cursors of paginated lists: "" or NULL -> 0; -1 for a bad one. */
long mcp_cursor_parse(const json_t *params);
json_t *mcp_cursor_next(size_t offset);
/* One page of all (MCP_PAGE_SIZE items from params' cursor on) as
 * {key: [...], nextCursor?}; NULL with e for a bad cursor (method names
 * the request in the message). */
json_t *mcp_page(const json_t *all, const json_t *params, const char *key, const char *method,
                 struct mcp_error *e);

/* Tool handlers get their arguments checked against the inputSchema's
 * top level and return a complete CallToolResult (isError for failures a
 * model should see). */
typedef json_t *(*mcp_tool_fn)(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_run_python(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_run_shell(struct mcp_call *c, const json_t *args);
/* mcp_handlers.c */
json_t *mcp_tool_sandbox_create(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_sandbox_list(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_sandbox_remove(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_sandbox_stop(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_sandbox_logs(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_file_write(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_file_read(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_file_list(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_python_set(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_python_get(struct mcp_call *c, const json_t *args);
json_t *mcp_tool_python_list(struct mcp_call *c, const json_t *args);

/* ---- results and content (mcp_content.c) ----------------------------------- */

/* isError results whose text tells a model what to do. */
json_t *mcp_result_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
json_t *mcp_result_service_error(const char *tool, int r, const struct cage_error *err);
/* {content: [text], structuredContent: structured}; both stolen. */
json_t *mcp_result_structured(json_t *structured, char *text);
json_t *mcp_text_block(const char *text);
json_t *mcp_image_block(const void *data, size_t len, const char *mime);
char *mcp_base64(const void *data, size_t len);
bool mcp_utf8_valid(const void *data, size_t len);
/* A name the sandbox chose (a file's path), fit for one line of a result's
 * text: control characters as \n, \t or \xNN escapes (a backslash as \\),
 * so a planted name cannot add lines that read as other entries. Cut to
 * size - 1 bytes; returns buf. */
char *mcp_shown_name(const char *name, char *buf, size_t size);
#define MCP_SHOWN_NAME_MAX 1024
bool mcp_image_mime(const char *mime);
/* codecage://runs/<run_id>/<path> and codecage://sandboxes/<name>/files/<path>
 * with each path segment percent-encoded. */
char *mcp_uri_run(const char *run_id, const char *path);
char *mcp_uri_sandbox_file(const char *name, const char *path);
/* Such a URI taken apart (mcp_resources.c): which kind, the run id or
 * sandbox name (a valid name), the percent-decoded, non-empty path. */
struct mcp_resource_uri {
        bool run;
        char *id;
        char *path;
};
/* 0, or -1 for anything but one of the two URIs above (the fields then
 * hold what was decoded so far: clear them either way). */
int mcp_resource_uri_parse(const char *uri, struct mcp_resource_uri *ret);
void mcp_resource_uri_clear(struct mcp_resource_uri *u);
/* Appends resource_link or image blocks for the artifacts of a result. */
void mcp_add_artifacts(struct mcp_call *c, const char *sandbox, const json_t *result,
                       json_t *content);
/* For clients of 2025-03-26: resource_link blocks as text, no
 * structuredContent. */
void mcp_result_downgrade(json_t *result, const char *version);

/* ---- sampling (mcp_sampling.c) -------------------------------------------- */

struct cage_service_host;
/* The host functions of Python code run by this call: llm_query and
 * llm_query_batched through sampling/createMessage. */
void mcp_sampling_host(struct mcp_call *c, struct cage_service_host *ret);
/* One sampling request: 0 with *text, or -1 with *error (both malloc'ed). */
int mcp_sample(struct mcp_call *c, const char *prompt, const json_t *kwargs, char **text,
               char **error);

/* Asks the client of the call for input: requests is an object of
 * {method, params} keyed by names of the caller's choice (taken). In the
 * session era each goes to the client as a request, one after the other;
 * in revision 2026-07-28 they travel together in an InputRequiredResult
 * (mcp_job.c). 0 with *responses (an object: key -> the client's result),
 * or -1 with *error (malloc'ed). */
int mcp_call_input(struct mcp_call *c, json_t *requests, json_t **responses, char **error);
/* Whether the client of the call declared capability name, without
 * recording a missing one (mcp_call_has_capability does). */
bool mcp_call_declares(struct mcp_call *c, const char *name);

/* ---- jobs: input-required results and tasks (mcp_job.c) --------------------- */

#define MCP_TASKS_EXTENSION           "io.modelcontextprotocol/tasks"
#define MCP_JOBS_PER_TENANT_MAX       64                 /* running, paused and kept tool calls */
#define MCP_TASK_BYTES_PER_TENANT_MAX (64 * 1024 * 1024) /* kept results of ended tasks */
#define MCP_TASK_TTL_MS               (10 * 60 * 1000)   /* an ended task is kept so long */
#define MCP_TASK_POLL_MS              500

struct mcp_job;
/* A tools/call of revision 2026-07-28 (new, or a retry with
 * requestState): runs it as a job and answers its result, an
 * InputRequiredResult or a CreateTaskResult; NULL when c was cancelled. */
json_t *mcp_job_call(struct mcp_call *c);
/* The job's tool asks for input (mcp_call_input): waits for the client's
 * retry or tasks/update. */
int mcp_job_input(struct mcp_job *j, json_t *requests, json_t **responses, char **error);
/* A tool that runs as a task only from now on (mcp_provider.h,
 * task_later) says so; a no-op unless the call's request declared the
 * tasks extension. Returns once the client was told about the task. */
void mcp_call_escalate(struct mcp_call *c);
/* Output of the job's run, for tasks/get. */
void mcp_job_output(struct mcp_job *j, const void *buf, size_t len);
json_t *mcp_tasks_get(struct mcp_session *s, const json_t *params, struct mcp_error *e);
json_t *mcp_tasks_update(struct mcp_session *s, const json_t *params, struct mcp_error *e);
json_t *mcp_tasks_cancel(struct mcp_session *s, const json_t *params, struct mcp_error *e);
/* Cancels the jobs of srv and waits until they are gone. */
void mcp_jobs_stop(struct mcp_server *srv);

/* ---- subscriptions/listen (mcp_listen.c) ------------------------------------ */

#define MCP_LISTEN_PER_TENANT_MAX 32   /* open subscriptions of one tenant */
#define MCP_LISTEN_URIS_MAX       64   /* resourceSubscriptions of one */
#define MCP_LISTEN_URI_MAX        8192 /* bytes of one of them */

struct mcp_subscription;
/* The subscriptions of a server; told by svc (may be NULL) of workspace
 * changes. */
int mcp_listen_new(struct cage_service *svc, struct mcp_listen **ret);
/* Accepts NULL; the transports must have closed their subscriptions. */
struct mcp_listen *mcp_listen_free(struct mcp_listen *l);
/* A subscriptions/listen request msg of session s whose messages go to
 * sink: checks its filter, registers it and sends its acknowledgement.
 * NULL with e filled (-32602 a bad filter, -32600 its id names an open
 * subscription of sink, -32603 MCP_LISTEN_PER_TENANT_MAX). */
struct mcp_subscription *mcp_listen_open(struct mcp_session *s, struct mcp_sink *sink,
                                         const json_t *msg, struct mcp_error *e);
/* Ends sub (its stream closed); nothing is sent on its sink after this
 * returns. Accepts NULL. */
void mcp_listen_close(struct mcp_server *srv, struct mcp_subscription *sub);
/* The client cancelled the subscription of sink whose listen request
 * had id (stdio): true when there was one. */
bool mcp_listen_cancel(struct mcp_server *srv, const struct mcp_sink *sink, const json_t *id);
/* The transport of sink ends (stdio): each of its subscriptions gets
 * notifications/cancelled naming its listen request, then ends. */
void mcp_listen_end_sink(struct mcp_server *srv, struct mcp_sink *sink, const char *reason);

/* ---- code mode --------------------------------------------------------------- */

/* The command line's upstreams go into the config before the service opens
 * (the service is code mode's MCP client: src/services/upstream.c). */
int mcp_options_apply(const struct mcp_options *opts, struct cage_config *cfg,
                      struct cage_error *err);

#endif
