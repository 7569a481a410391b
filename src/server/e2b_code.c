/* The code interpreter of an E2B sandbox (port 49999, e2b.h) on the
 * sandbox's codecage Python sessions, so state persists across calls:
 *
 *   POST /execute   {code, context_id?, language?} -> NDJSON, one object a
 *                   line: number_of_executions, stdout / stderr as the code
 *                   writes them, result (`text`: the repr of the last
 *                   expression, is_main_result; `png`: each matplotlib
 *                   figure left open by the code), error (name, value,
 *                   traceback), end_of_execution; a keepalive line after
 *                   15 s of silence. The client going away interrupts the
 *                   run.
 *   POST /contexts  a new context: an extra session (its own variables) in
 *                   the same sandbox; GET lists them ("default" is the main
 *                   session); DELETE /contexts/{id}; POST
 *                   /contexts/{id}/restart empties one.
 *   GET /health
 * Python only; env_vars are set in os.environ for that run only. The run's
 * own timeout is the config's limits.timeout_s_max: the client's timeout
 * ends the connection, which interrupts the run. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/output.h"
#include "server/e2b.h"
#include "services/config.h"
#include "services/redact.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/sse_queue.h"

#define QUEUE_MAX  (256 * 1024)
#define SLICE_MAX  (8 * 1024)
#define REPR_DEPTH 64
#define DEFAULT_ID "default"
#define CWD        "/workspace"

/* ---- Python's repr() of a JSON value --------------------------------------- */

struct buf {
        char *p;
        size_t len, cap;
        bool oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *np = realloc(b->p, cap);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
        put(b, s, strlen(s));
}

/* repr(float): the shortest text that reads back the same, as Python. */
static void repr_real(struct buf *b, double v)
{
        char text[40];
        if (isnan(v) || isinf(v)) {
                puts_(b, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
                return;
        }
        for (int prec = 1; prec <= 17; prec++) {
                snprintf(text, sizeof(text), "%.*g", prec, v);
                if (strtod(text, NULL) == v)
                        break;
        }
        puts_(b, text);
        if (!strpbrk(text, ".e"))
                puts_(b, ".0");
}

static void repr_str(struct buf *b, const char *s, size_t n)
{
        char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
        put(b, &quote, 1);
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                char esc[8];
                if (ch == '\\' || ch == (unsigned char)quote) {
                        esc[0] = '\\';
                        esc[1] = (char)ch;
                        put(b, esc, 2);
                } else if (ch == '\n' || ch == '\r' || ch == '\t') {
                        puts_(b, ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : "\\t");
                } else if (ch < 0x20 || ch == 0x7f) {
                        snprintf(esc, sizeof(esc), "\\x%02x", ch);
                        puts_(b, esc);
                } else {
                        put(b, (const char *)&ch, 1);
                }
        }
        put(b, &quote, 1);
}

static void repr(struct buf *b, const json_t *v, int depth)
{
        if (depth > REPR_DEPTH) {
                puts_(b, "...");
                return;
        }
        char num[32];
        size_t i;
        const char *k;
        json_t *e;
        switch (json_typeof(v)) {
        case JSON_NULL:
                puts_(b, "None");
                break;
        case JSON_TRUE:
                puts_(b, "True");
                break;
        case JSON_FALSE:
                puts_(b, "False");
                break;
        case JSON_INTEGER:
                snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                puts_(b, num);
                break;
        case JSON_REAL:
                repr_real(b, json_real_value(v));
                break;
        case JSON_STRING:
                repr_str(b, json_string_value(v), json_string_length(v));
                break;
        case JSON_ARRAY:
                puts_(b, "[");
                json_array_foreach((json_t *)v, i, e)
                {
                        if (i)
                                puts_(b, ", ");
                        repr(b, e, depth + 1);
                }
                puts_(b, "]");
                break;
        case JSON_OBJECT:
                puts_(b, "{");
                i = 0;
                json_object_foreach((json_t *)v, k, e)
                {
                        if (i++)
                                puts_(b, ", ");
                        repr_str(b, k, strlen(k));
                        puts_(b, ": ");
                        repr(b, e, depth + 1);
                }
                puts_(b, "}");
                break;
        }
}

/* ---- /execute --------------------------------------------------------------- */

/* One /execute: referenced by its worker and by its response, so the
 * cancel pipe (the queue's close_fd) outlives both. */
struct run {
        int refs;
        struct sse_queue *q;
        int cancel[2];
        struct cage_service *svc;
        struct cage_redactor *redactor;
        struct e2b_box *box;
        json_t *req;
        struct text_sanitizer san[2];
};

static void run_unref(void *arg)
{
        struct run *run = arg;
        if (__atomic_sub_fetch(&run->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        sse_queue_unref(run->q);
        for (int i = 0; i < 2; i++)
                if (run->cancel[i] >= 0)
                        close(run->cancel[i]);
        cage_redactor_unref(run->redactor);
        e2b_box_unref(run->box);
        json_decref(run->req);
        free(run);
}

/* One NDJSON line onto the stream; takes msg. */
static int line(struct sse_queue *q, json_t *msg)
{
        if (!msg)
                return -ENOMEM;
        char *text = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        text[n] = '\n';
        int r = sse_queue_push_raw(q, text, n + 1);
        free(text);
        return r;
}

static void emit_text(struct run *run, int stream, const char *text, size_t len)
{
        _cleanup_free_ char *clean = NULL;
        size_t clean_len = len;
        if (run->redactor && cage_redact_needed(run->redactor, text, len) &&
            cage_redact(run->redactor, text, len, &clean, &clean_len) == 0)
                text = clean;
        if (clean_len)
                (void)line(run->q,
                           json_pack("{s:s, s:s%, s:b}", "type", stream == 2 ? "stderr" : "stdout",
                                     "text", text, clean_len, "error", stream == 2));
}

static int on_output(void *ctx, int stream, const void *buf, size_t len)
{
        struct run *run = ctx;
        const char *data = buf;
        char out[3 * (SLICE_MAX + 4)];
        for (size_t off = 0; off < len;) {
                size_t n = len - off < SLICE_MAX ? len - off : SLICE_MAX;
                size_t w = text_sanitizer_feed(&run->san[stream == 2], data + off, n, out, false);
                emit_text(run, stream, out, w);
                off += n;
        }
        return 0;
}

static void flush(struct run *run)
{
        char out[64];
        for (int i = 0; i < 2; i++) {
                size_t w = text_sanitizer_feed(&run->san[i], NULL, 0, out, true);
                if (w)
                        emit_text(run, i ? 2 : 1, out, w);
        }
}

/* The result and error lines of a finished run: its figures first (as a
 * notebook shows them), then the error or the last expression's value. */
static void emit_result(struct run *run, const json_t *res)
{
        const json_t *error = json_object_get(res, "error");
        size_t i;
        json_t *png;
        json_array_foreach(json_object_get(res, "images"), i, png)(void)
                line(run->q, json_pack("{s:s, s:O, s:b}", "type", "result", "png", png,
                                       "is_main_result", false));
        const char *status = json_string_value(json_object_get(res, "status"));
        if (json_is_object(error)) {
                (void)line(run->q, json_pack("{s:s, s:O, s:O, s:O}", "type", "error", "name",
                                             json_object_get(error, "type"), "value",
                                             json_object_get(error, "message"), "traceback",
                                             json_object_get(error, "traceback")));
                return;
        }
        if (status && strcmp(status, "ok") != 0) {
                const char *reason = json_string_value(json_object_get(res, "reason"));
                (void)line(run->q, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
                                             strcmp(status, "timeout") == 0 ? "TimeoutError"
                                                                            : "ExecutionError",
                                             "value", reason ? reason : status, "traceback", ""));
                return;
        }
        const json_t *rv = json_object_get(res, "return_value");
        const char *rr = json_string_value(json_object_get(res, "return_repr"));
        if (!rr && (!rv || json_is_null(rv)))
                return; /* a statement, or None: no result, as in Jupyter */
        struct buf b = {0};
        if (rr)
                puts_(&b, rr);
        else
                repr(&b, rv, 0);
        if (!b.oom)
                (void)line(run->q, json_pack("{s:s, s:s, s:b}", "type", "result", "text", b.p,
                                             "is_main_result", true));
        free(b.p);
}

static void *run_main(void *arg)
{
        struct run *run = arg;
        struct cage_error err = {0};
        struct cage_service_io io = {
                .on_output = on_output, .on_output_ctx = run, .cancel_fd = run->cancel[0]};
        json_auto_t *res = NULL;
        int r = cage_service_python_run(run->svc, run->box->tenant, run->box->id, run->req, &io,
                                        NULL, &res, &err);
        flush(run);
        if (r < 0)
                (void)line(run->q,
                           json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
                                     "CodecageError", "value", err.message, "traceback", ""));
        else
                emit_result(run, res);
        (void)line(run->q, json_pack("{s:s}", "type", "end_of_execution"));
        sse_queue_end(run->q);
        run_unref(run);
        e2b_worker_done();
        return NULL;
}

static void http_error(struct e2b_reply *reply, unsigned status, const char *message)
{
        reply->status = status;
        reply->json = e2b_error_doc(status, message);
}

static bool context_exists(struct e2b_call *c, const char *id)
{
        struct cage_error err = {0};
        json_auto_t *ids = NULL;
        if (cage_service_python_context_list(c->svc, c->box->tenant, c->box->id, &ids, &err) < 0)
                return false;
        size_t i;
        json_t *e;
        json_array_foreach(ids, i, e) if (strcmp(json_string_value(e), id) == 0) return true;
        return false;
}

/* The service request of an /execute body; 0, or an HTTP status with
 * *message set. */
static unsigned execute_request(struct e2b_call *c, const json_t *body, json_t **ret,
                                const char **message)
{
        const json_t *code = json_object_get(body, "code");
        const json_t *lang = json_object_get(body, "language");
        const json_t *ctx = json_object_get(body, "context_id");
        const json_t *env = json_object_get(body, "env_vars");
        if (!json_is_string(code))
                return *message = "code: required, a string of Python", 400;
        if (lang && !json_is_null(lang) &&
            (!json_is_string(lang) || strcmp(json_string_value(lang), "python") != 0))
                return *message = "codecage's code interpreter runs Python only", 400;
        if (env && !json_is_null(env) && !json_is_object(env))
                return *message = "env_vars: must be an object of strings", 400;
        if (ctx && !json_is_null(ctx) && !json_is_string(ctx))
                return *message = "context_id: must be a string", 400;
        const char *id = json_string_value(ctx);
        if (id && strcmp(id, DEFAULT_ID) != 0 && !context_exists(c, id))
                return *message = "no such context", 404;
        json_t *req = json_pack("{s:O, s:f}", "code", code, "timeout_s",
                                (double)c->cfg->limits.timeout_s_max);
        if (req && id && strcmp(id, DEFAULT_ID) != 0)
                json_object_set_new(req, "context", json_string(id));
        if (req && json_object_size(env) > 0)
                json_object_set(req, "env", (json_t *)env);
        *ret = req;
        return req ? 0 : (*message = "out of memory", 500);
}

static void execute(struct e2b_call *c, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_auto_t *body = NULL;
        const char *message = NULL;
        json_t *req = NULL;
        if (http_body_json(c->body, c->body_len, false, &body, &err) < 0)
                return http_error(reply, 400, err.message);
        unsigned status = execute_request(c, body, &req, &message);
        if (status)
                return http_error(reply, status, message);
        struct run *run = calloc(1, sizeof(*run));
        if (!run) {
                json_decref(req);
                return http_error(reply, 500, "out of memory");
        }
        run->refs = 1;
        run->cancel[0] = run->cancel[1] = -1;
        run->req = req;
        run->svc = c->svc;
        run->redactor = c->redactor ? cage_redactor_ref(c->redactor) : NULL;
        run->box = c->box;
        __atomic_add_fetch(&c->box->refs, 1, __ATOMIC_ACQ_REL);
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (pipe2(run->cancel, O_CLOEXEC | O_NONBLOCK) < 0 ||
            !(run->q = sse_queue_new(QUEUE_MAX, ci ? ci->connect_fd : -1, c->shutdown_fd,
                                     run->cancel[1]))) {
                run_unref(run);
                return http_error(reply, 500, "cannot start the run");
        }
        static const char keepalive[] = "{\"type\":\"keepalive\"}\n";
        (void)sse_queue_set_keepalive(run->q, keepalive, sizeof(keepalive) - 1);
        pthread_mutex_lock(&c->box->lock);
        unsigned count = ++c->box->executions;
        pthread_mutex_unlock(&c->box->lock);
        (void)line(run->q, json_pack("{s:s, s:i}", "type", "number_of_executions",
                                     "execution_count", (int)count));
        run->refs = 2; /* the response's and the worker's */
        reply->response = e2b_stream_response(run->q, "application/x-ndjson", run_unref, run);
        if (!reply->response) {
                run->refs = 1;
                run_unref(run);
                return http_error(reply, 500, "cannot start the run");
        }
        pthread_t t;
        e2b_worker_add();
        if (pthread_create(&t, NULL, run_main, run) != 0) {
                e2b_worker_done();
                MHD_destroy_response(reply->response); /* its release drops one */
                reply->response = NULL;
                run_unref(run);
                return http_error(reply, 500, "cannot start the run");
        }
        pthread_detach(t);
        reply->status = 200;
}

/* ---- contexts ------------------------------------------------------------------ */

static json_t *context_doc(const char *id)
{
        return json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd", CWD);
}

static void context_create(struct e2b_call *c, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_auto_t *body = NULL;
        char id[CAGE_CONTEXT_ID_LEN + 1];
        if (c->body_len && http_body_json(c->body, c->body_len, false, &body, &err) < 0)
                return http_error(reply, 400, err.message);
        const json_t *lang = json_object_get(body, "language");
        if (lang && !json_is_null(lang) &&
            (!json_is_string(lang) || strcmp(json_string_value(lang), "python") != 0))
                return http_error(reply, 400, "codecage's code interpreter runs Python only");
        int r = cage_service_python_context_create(c->svc, c->box->tenant, c->box->id, id, &err);
        if (r < 0)
                return http_error(reply, (unsigned)cage_service_http_status(r), err.message);
        reply->status = 200;
        reply->json = context_doc(id);
}

static void context_list(struct e2b_call *c, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_auto_t *ids = NULL;
        int r = cage_service_python_context_list(c->svc, c->box->tenant, c->box->id, &ids, &err);
        if (r < 0)
                return http_error(reply, (unsigned)cage_service_http_status(r), err.message);
        json_t *out = json_array();
        json_array_append_new(out, context_doc(DEFAULT_ID));
        size_t i;
        json_t *e;
        json_array_foreach(ids, i, e) json_array_append_new(out, context_doc(json_string_value(e)));
        reply->status = 200;
        reply->json = out;
}

/* DELETE /contexts/{id}, POST /contexts/{id}/restart. */
static void context_one(struct e2b_call *c, const char *rest, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        char id[CAGE_CONTEXT_ID_LEN + 2];
        size_t n = strcspn(rest, "/");
        if (n == 0 || n > CAGE_CONTEXT_ID_LEN)
                return http_error(reply, 404, "no such context");
        memcpy(id, rest, n);
        id[n] = '\0';
        bool dflt = strcmp(id, DEFAULT_ID) == 0;
        int r;
        if (strcmp(rest + n, "/restart") == 0 && strcmp(c->method, "POST") == 0)
                r = cage_service_python_context_restart(c->svc, c->box->tenant, c->box->id,
                                                        dflt ? NULL : id, &err);
        else if (!rest[n] && strcmp(c->method, "DELETE") == 0 && !dflt)
                r = cage_service_python_context_remove(c->svc, c->box->tenant, c->box->id, id,
                                                       &err);
        else if (!rest[n] && strcmp(c->method, "DELETE") == 0)
                return http_error(reply, 400, "the default context cannot be removed");
        else
                return http_error(reply, 404, "no such route");
        if (r < 0)
                return http_error(reply, (unsigned)cage_service_http_status(r), err.message);
        reply->status = 204;
}

int e2b_code(struct e2b_call *c, struct e2b_reply *reply)
{
        bool post = strcmp(c->method, "POST") == 0, get = strcmp(c->method, "GET") == 0;
        if (strcmp(c->path, "/health") == 0 && get)
                reply->status = 204;
        else if (strcmp(c->path, "/execute") == 0 && post)
                execute(c, reply);
        else if (strcmp(c->path, "/contexts") == 0 && post)
                context_create(c, reply);
        else if (strcmp(c->path, "/contexts") == 0 && get)
                context_list(c, reply);
        else if (strncmp(c->path, "/contexts/", 10) == 0)
                context_one(c, c->path + 10, reply);
        else
                return -ENOENT;
        return 0;
}
