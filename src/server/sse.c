/* Exec and run output as Server-Sent Events (Accept: text/event-stream).
 *
 *   event: stdout            (or stderr), as output arrives
 *   data: {"data":"<text>"}
 *
 *   event: result            once, at the end: the result contract
 *   data: {...}
 *
 * An error after the stream has started is one `event: error` with the
 * API's error document; an error before any output (bad request, unknown
 * sandbox) is the plain JSON error response with its HTTP status, since the
 * handler waits up to SSE_FIRST_WAIT_MS for the first event before it
 * commits to a 200. Comment lines (": keepalive") are sent every
 * SSE_KEEPALIVE_MS of silence, which also keeps MHD's idle timeout away.
 *
 * A worker thread runs the service call. Its output callback redacts
 * secret values (per chunk: a secret split across two writes of the
 * program is not caught live; the final result is redacted whole), makes
 * the bytes valid UTF-8 with control characters neutralised (the text
 * sanitiser of core/output.c, which carries an incomplete UTF-8 sequence
 * to the next chunk of the same stream), cuts it into events of at most
 * SSE_SLICE_MAX input bytes and pushes them into the stream's bounded
 * queue (util/sse_queue.h, SSE_QUEUE_MAX bytes). Slow client: the producer
 * BLOCKS until the reader makes room -- nothing is dropped, the program
 * stalls on its full pipe (its wall-clock timeout still runs), and a
 * client that stops reading altogether is cut by MHD's idle timeout, which
 * cancels the call.
 *
 * The MHD response pulls from the queue on the connection's thread
 * (sse_response(), which MCP's streams use too). Client gone or server
 * stopping -> the queue closes, which writes to the call's cancel pipe
 * (cage_service_io.cancel_fd), the reader ends the stream with an error,
 * and the request-completed callback (sse_stream_finish) closes the queue
 * (waking a blocked producer) and joins the worker. The MHD response holds
 * a reference to the queue; the request owns the stream.
 *
 * Python runs (SSE_PYTHON) stream the same way. With host functions on,
 * each host call of the code (llm_query, tools.x, ...) becomes
 *
 *   event: host_call
 *   data: {"id":"<opaque>","fn":"llm_query","args":[...],"kwargs":{...}}
 *
 * and the worker waits (host_calls.c) until the client answers with
 * POST /v1/host_calls/{id}, HOST_CALL_WAIT_MS pass, or the stream ends.
 * Without them, host calls fail in Python with a message on how to enable
 * them (host_call_disabled). */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/output.h"
#include "server/host_calls.h"
#include "server/http.h"
#include "services/redact.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/sse_queue.h"

#define SSE_QUEUE_MAX     (256 * 1024) /* bytes of encoded events waiting */
#define SSE_SLICE_MAX     (8 * 1024)   /* input bytes per output event */
#define SSE_BLOCK_SIZE    (32 * 1024)
#define SSE_FIRST_WAIT_MS 500

struct sse_stream {
        pthread_mutex_t lock;
        pthread_cond_t cond; /* something produced, done */
        bool done, produced;
        struct sse_queue *queue;
        int cancel[2]; /* -> the service call; written when the queue closes */
        int shutdown_fd;
        pthread_t worker;
        bool worker_started;

        enum sse_kind kind;
        struct cage_service *svc;
        struct cage_redactor *redactor;
        char *tenant, *name;
        json_t *req;
        bool host_calls;   /* SSE_PYTHON: host calls become host_call events */
        json_t *functions; /* SSE_PYTHON: extra host function names, or NULL */
        struct text_sanitizer san[2];
        int result;
        struct cage_error err;
};

static void close_pair(int p[2])
{
        for (int i = 0; i < 2; i++)
                if (p[i] >= 0)
                        close(p[i]);
}

static void stream_free(struct sse_stream *s)
{
        if (!s)
                return;
        sse_queue_unref(s->queue);
        close_pair(s->cancel);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        cage_redactor_unref(s->redactor);
        json_decref(s->req);
        json_decref(s->functions);
        free(s->tenant);
        free(s->name);
        free(s);
}

/* ---- the queue ------------------------------------------------------------- */

/* "event: NAME\ndata: JSON\n\n" (compact JSON has no newline). */
static int push_event(struct sse_stream *s, const char *event, const json_t *doc)
{
        _cleanup_free_ char *text = json_dumps(doc, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        return sse_queue_push(s->queue, event, text, strlen(text));
}

/* ---- the producer ---------------------------------------------------------- */

/* Wakes the responder waiting for the first event (wait_first). */
static void mark_produced(struct sse_stream *s)
{
        pthread_mutex_lock(&s->lock);
        s->produced = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

static int push_text(struct sse_stream *s, int stream, const char *text, size_t len)
{
        if (len == 0)
                return 0;
        json_auto_t *doc = json_pack("{s:s%}", "data", text, len);
        if (!doc)
                return -ENOMEM;
        int r = push_event(s, stream == 2 ? "stderr" : "stdout", doc);
        if (r >= 0)
                mark_produced(s);
        return r;
}

static int push_slices(struct sse_stream *s, int stream, const char *data, size_t len)
{
        char out[3 * (SSE_SLICE_MAX + 4)];
        struct text_sanitizer *san = &s->san[stream == 2];
        for (size_t off = 0; off < len; off += SSE_SLICE_MAX) {
                size_t n = len - off < SSE_SLICE_MAX ? len - off : SSE_SLICE_MAX;
                size_t w = text_sanitizer_feed(san, data + off, n, out, false);
                int r = push_text(s, stream, out, w);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* cage_output_fn: non-zero cancels the call (the reader is gone). */
static int on_output(void *ctx, int stream, const void *buf, size_t len)
{
        struct sse_stream *s = ctx;
        _cleanup_free_ char *redacted = NULL;
        size_t n = len;
        if (s->redactor && cage_redact_needed(s->redactor, buf, len)) {
                if (cage_redact(s->redactor, buf, len, &redacted, &n) < 0)
                        return 1;
                buf = redacted;
        }
        return push_slices(s, stream, buf, n) < 0 ? 1 : 0;
}

/* What a long preparation is doing (pulling the run's image) as a
 * `status` event. */
static void on_status(void *ctx, const char *status)
{
        struct sse_stream *s = ctx;
        json_auto_t *doc = json_pack("{s:s}", "message", status);
        if (doc)
                (void)push_event(s, "status", doc);
}

/* ---- host calls (Python runs) --------------------------------------------- */

static int push_host_call(struct sse_stream *s, const char *id, const char *fn, json_t *args,
                          json_t *kwargs)
{
        json_auto_t *no_args = args ? NULL : json_array();
        json_auto_t *no_kwargs = kwargs ? NULL : json_object();
        json_auto_t *doc = json_pack("{s:s, s:s, s:O, s:O}", "id", id, "fn", fn, "args",
                                     args ? args : no_args, "kwargs", kwargs ? kwargs : no_kwargs);
        if (!doc)
                return -ENOMEM;
        int r = push_event(s, "host_call", doc);
        if (r >= 0)
                mark_produced(s);
        return r;
}

static char *wait_failure(const char *fn, const char *id, int r)
{
        char *msg = NULL;
        if (r == -ETIMEDOUT)
                r = asprintf(&msg, "%s: the client did not answer host call %s within %d s", fn, id,
                             HOST_CALL_WAIT_MS / 1000);
        else if (r == -ECANCELED)
                r = asprintf(&msg, "%s: the client left before answering", fn);
        else
                r = asprintf(&msg, "%s: the host call could not be sent to the client", fn);
        return r < 0 ? NULL : msg;
}

/* cage_service_host fn of a streamed Python run with host functions. */
static int on_host_call(void *ctx, const char *fn, json_t *args, json_t *kwargs, json_t **value,
                        char **error)
{
        struct sse_stream *s = ctx;
        struct host_call *c = NULL;
        int r = host_call_open(s->tenant, &c);
        if (r < 0) {
                *error = strdup(r == -EAGAIN ? "too many host calls of this tenant are waiting "
                                               "for an answer"
                                             : "host call failed");
                return 0;
        }
        r = push_host_call(s, host_call_id(c), fn, args, kwargs);
        if (r >= 0) {
                const int fds[2] = {s->cancel[0], s->shutdown_fd};
                r = host_call_wait(c, HOST_CALL_WAIT_MS, fds, 2, value, error);
        }
        if (r < 0)
                *error = wait_failure(fn, host_call_id(c), r);
        host_call_close(c);
        return *error || *value ? 0 : -ENOMEM;
}

static int run_python(struct sse_stream *s, const struct cage_service_io *io, json_t **result)
{
        struct cage_service_host host = {.fn = host_call_disabled};
        if (s->host_calls)
                host = (struct cage_service_host){
                        .fn = on_host_call, .ctx = s, .functions = s->functions};
        return cage_service_python_run(s->svc, s->tenant, s->name, s->req, io, &host, result,
                                       &s->err);
}

static void flush_sanitizers(struct sse_stream *s)
{
        char out[16];
        for (int i = 0; i < 2; i++) {
                size_t w = text_sanitizer_feed(&s->san[i], NULL, 0, out, true);
                if (push_text(s, i + 1, out, w) < 0)
                        return;
        }
}

static void push_final(struct sse_stream *s, int r, json_t *result)
{
        if (r >= 0) {
                push_event(s, "result", result);
                return;
        }
        json_auto_t *doc = http_error_doc((unsigned)cage_service_http_status(r), s->err.message);
        if (doc)
                push_event(s, "error", doc);
}

static void *worker_main(void *arg)
{
        struct sse_stream *s = arg;
        struct cage_service_io io = {.on_output = on_output,
                                     .on_output_ctx = s,
                                     .cancel_fd = s->cancel[0],
                                     .on_status = on_status,
                                     .on_status_ctx = s};
        json_auto_t *result = NULL;
        int r;
        if (s->kind == SSE_EXEC)
                r = cage_service_exec(s->svc, s->tenant, s->name, s->req, &io, &result, &s->err);
        else if (s->kind == SSE_PYTHON)
                r = run_python(s, &io, &result);
        else
                r = cage_service_run(s->svc, s->tenant, s->req, &io, &result, &s->err);
        flush_sanitizers(s);
        push_final(s, r, result);
        pthread_mutex_lock(&s->lock);
        s->result = r;
        s->done = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        sse_queue_end(s->queue);
        return NULL;
}

/* ---- the consumer (MHD response) ---------------------------------------- */

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
        ssize_t n = sse_queue_read(cls, buf, max);
        if (n == SSE_QUEUE_END)
                return MHD_CONTENT_READER_END_OF_STREAM;
        return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

static void response_free(void *cls)
{
        sse_queue_unref(cls);
}

struct MHD_Response *sse_response(struct sse_queue *q)
{
        struct MHD_Response *resp = MHD_create_response_from_callback(
                MHD_SIZE_UNKNOWN, SSE_BLOCK_SIZE, reader, q, response_free);
        if (!resp)
                return NULL;
        sse_queue_ref(q);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return resp;
}

/* ---- start / finish -------------------------------------------------------- */

static int stream_new(struct http_call *call, enum sse_kind kind, struct sse_stream **ret)
{
        struct sse_stream *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cancel[0] = s->cancel[1] = -1;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        *ret = s; /* from here on, stream_free() cleans up */
        s->kind = kind;
        s->svc = call->ctx->svc;
        s->shutdown_fd = call->ctx->shutdown_fd;
        struct cage_redactor *red = cage_service_redactor(call->ctx->svc);
        s->redactor = red ? cage_redactor_ref(red) : NULL;
        s->req = json_incref(call->json);
        s->tenant = strdup(call->tenant);
        s->name = call->name ? strdup(call->name) : NULL;
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(call->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!s->tenant || (call->name && !s->name))
                return -ENOMEM;
        if (pipe2(s->cancel, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        s->queue = sse_queue_new(SSE_QUEUE_MAX, ci ? ci->connect_fd : -1, s->shutdown_fd,
                                 s->cancel[1]);
        return s->queue ? 0 : -errno;
}

/* Waits until the worker produced something or finished, at most ms. */
static void wait_first(struct sse_stream *s, int ms)
{
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += ms / 1000;
        deadline.tv_nsec += (long)(ms % 1000) * 1000000;
        if (deadline.tv_nsec >= 1000000000) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&s->lock);
        while (!s->done && !s->produced)
                if (pthread_cond_timedwait(&s->cond, &s->lock, &deadline) != 0)
                        break;
        pthread_mutex_unlock(&s->lock);
}

static struct MHD_Response *stream_response(struct sse_stream *s)
{
        struct MHD_Response *resp = sse_response(s->queue);
        if (!resp)
                return NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        return resp;
}

/* Starts the worker and commits to a stream, or answers its early error. */
static int stream_run(struct sse_stream *s, struct http_reply *reply, struct cage_error *err)
{
        int r;
        if ((r = pthread_create(&s->worker, NULL, worker_main, s)) != 0)
                return cage_fail(err, -r, "event stream: worker thread");
        s->worker_started = true;
        wait_first(s, SSE_FIRST_WAIT_MS);
        pthread_mutex_lock(&s->lock);
        bool failed_early = s->done && s->result < 0 && !s->produced;
        pthread_mutex_unlock(&s->lock);
        if (failed_early) {
                *err = s->err;
                return s->result;
        }
        reply->response = stream_response(s);
        if (!reply->response)
                return cage_fail(err, -ENOMEM, "event stream");
        reply->status = 200;
        return 0;
}

int sse_start(struct http_call *call, enum sse_kind kind, struct http_reply *reply,
              struct cage_error *err)
{
        struct sse_stream *s = NULL;
        int r = stream_new(call, kind, &s);
        *call->stream = s; /* sse_stream_finish() owns it from now on */
        if (r < 0)
                return cage_fail(err, r, "event stream");
        return stream_run(s, reply, err);
}

int sse_start_python(struct http_call *call, const struct sse_python *py, struct http_reply *reply,
                     struct cage_error *err)
{
        struct sse_stream *s = NULL;
        int r = stream_new(call, SSE_PYTHON, &s);
        *call->stream = s;
        if (r < 0)
                return cage_fail(err, r, "event stream");
        s->host_calls = py->host_calls;
        s->functions = json_incref(py->functions);
        return stream_run(s, reply, err);
}

void sse_stream_finish(struct sse_stream *s)
{
        if (!s)
                return;
        if (s->queue)
                sse_queue_close(s->queue); /* cancels the call, wakes a waiting producer */
        if (s->worker_started)
                pthread_join(s->worker, NULL);
        stream_free(s);
}
