/* MCP over stdio: one JSON-RPC message per line on stdin and stdout
 * (stdout carries nothing else: logs go to stderr).
 *
 * The calling thread reads. Every message but tools/call is answered at
 * once, on that thread; a tools/call is registered in the session first
 * (so a notifications/cancelled that follows finds it) and then runs on
 * its own detached thread, at most MCP_CALLS_MAX at a time. The reader is
 * therefore always free to take the client's answers to our requests
 * (sampling for llm_query) and cancellations while tools run. Writes are
 * whole lines under one mutex, so messages of concurrent calls never
 * interleave.
 *
 * Bounds: a line longer than limits.max_body_bytes is discarded up to its
 * newline and answered with a parse error. At end of input the running
 * calls finish and answer (a request to the client fails at once: no
 * answer can come); a stop request (SIGINT/SIGTERM) cancels them.
 *
 * Both eras share the pipe: a request whose params._meta names its
 * protocol version (revision 2026-07-28) is checked (mcp_modern_check())
 * and served by the transport's stateless session, everything else by the
 * initialize-era session; a notifications/cancelled reaches both.
 *
 * subscriptions/listen (2026-07-28): every subscription shares stdout;
 * the client ends one with notifications/cancelled naming its listen
 * request. At the end (end of input or a stop request) each open one is
 * told so by a notifications/cancelled naming its request; none outlives
 * the process. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/mcp.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define READ_CHUNK (64 * 1024)

struct stdio_out {
        struct mcp_sink sink; /* first: the sink is the object */
        pthread_mutex_t lock;
        int fd;
        bool broken;
};

struct stdio_transport {
        struct mcp_server *srv;
        struct mcp_session *session; /* initialize era */
        struct mcp_session *modern;  /* 2026-07-28: stateless */
        struct stdio_out out;
        pthread_mutex_t lock;
        pthread_cond_t idle; /* a worker finished */
        size_t workers;      /* calls running */
        /* Threads are kept for the next call (creating one per call, and
         * freeing its stack after, cost more than the call itself). */
        pthread_cond_t work; /* a job was queued, or closing */
        pthread_cond_t gone; /* a thread ended */
        struct job *queue;   /* jobs for waiting threads */
        size_t threads, waiting;
        bool closing;
        /* the line being read */
        char *buf;
        size_t len, cap, max;
        bool discarding; /* inside a line that passed max */
};

/* ---- output ---------------------------------------------------------------------- */

static int stdio_send(struct mcp_sink *sink, const json_t *msg)
{
        struct stdio_out *out = (struct stdio_out *)sink;
        char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        text[n] = '\n'; /* compact JSON has no raw newline; the NUL is not sent */
        pthread_mutex_lock(&out->lock);
        int r = out->broken ? -EPIPE : 0;
        if (r == 0 && write_all(out->fd, text, n + 1) < 0) {
                out->broken = true;
                r = -EPIPE;
        }
        pthread_mutex_unlock(&out->lock);
        free(text);
        return r;
}

static void send_owned(struct stdio_transport *t, json_t *msg)
{
        if (msg)
                (void)stdio_send(&t->out.sink, msg);
        json_decref(msg);
}

/* ---- calls ---------------------------------------------------------------------------- */

#define THREAD_KEEP_S 30 /* an idle thread waits this long for another call */

struct job {
        struct stdio_transport *t;
        struct mcp_call *call;
        struct job *next;
};

static void run_job(struct job *job)
{
        struct stdio_transport *t = job->t;
        send_owned(t, mcp_call_run(job->call));
        mcp_call_free(job->call);
        free(job);
        pthread_mutex_lock(&t->lock);
        t->workers--;
        pthread_cond_broadcast(&t->idle);
        pthread_mutex_unlock(&t->lock);
}

/* With t->lock held: the next queued job, waiting a while for one. */
static struct job *next_job(struct stdio_transport *t)
{
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += THREAD_KEEP_S;
        t->waiting++;
        while (!t->queue && !t->closing)
                if (pthread_cond_timedwait(&t->work, &t->lock, &until) == ETIMEDOUT)
                        break;
        t->waiting--;
        struct job *job = t->queue;
        if (job)
                t->queue = job->next;
        return job;
}

static void *worker_main(void *arg)
{
        struct job *job = arg;
        struct stdio_transport *t = job->t;
        while (job) {
                run_job(job);
                pthread_mutex_lock(&t->lock);
                job = next_job(t);
                pthread_mutex_unlock(&t->lock);
        }
        pthread_mutex_lock(&t->lock);
        t->threads--;
        pthread_cond_broadcast(&t->gone);
        pthread_mutex_unlock(&t->lock);
        return NULL;
}

static void start_call(struct stdio_transport *t, struct mcp_call *call)
{
        struct job *job = malloc(sizeof(*job));
        pthread_attr_t attr;
        pthread_t thread;
        int r = job ? 0 : ENOMEM;
        if (job) {
                *job = (struct job){.t = t, .call = call};
                pthread_mutex_lock(&t->lock);
                t->workers++;
                if (t->waiting > 0) { /* a kept thread takes it */
                        struct job **end = &t->queue;
                        while (*end)
                                end = &(*end)->next;
                        *end = job;
                        /* Signalled after the unlock: the woken thread does
                         * not wake only to wait for the lock we hold. */
                        pthread_mutex_unlock(&t->lock);
                        pthread_cond_signal(&t->work);
                        return;
                }
                t->threads++;
                pthread_mutex_unlock(&t->lock);
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&thread, &attr, worker_main, job);
                pthread_attr_destroy(&attr);
        }
        if (r == 0)
                return;
        if (job) {
                pthread_mutex_lock(&t->lock);
                t->workers--;
                t->threads--;
                pthread_mutex_unlock(&t->lock);
        }
        send_owned(t, jsonrpc_error(call->id, JSONRPC_INTERNAL_ERROR,
                                    "Internal error: cannot start a thread for the call"));
        mcp_call_free(call);
        free(job);
}

/* ---- input ------------------------------------------------------------------------------ */

static bool blank(const char *s, size_t len)
{
        for (size_t i = 0; i < len; i++)
                if (!strchr(" \t\r", s[i]))
                        return false;
        return true;
}

static bool is_cancellation(const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        return json_is_object(msg) && !jsonrpc_id(msg) && method &&
               strcmp(method, "notifications/cancelled") == 0;
}

/* notifications/cancelled naming an open subscription (of either era's
 * look: the client may add _meta) ends it and nothing else. */
static bool cancels_subscription(struct stdio_transport *t, const json_t *msg)
{
        return is_cancellation(msg) &&
               mcp_listen_cancel(t->srv, &t->out.sink,
                                 json_object_get(json_object_get(msg, "params"), "requestId"));
}

static void handle_line(struct stdio_transport *t, const char *line, size_t len)
{
        json_t *error = NULL, *answer = NULL;
        struct mcp_call *call = NULL;
        if (blank(line, len))
                return;
        json_auto_t *msg = jsonrpc_parse(line, len, &error);
        if (!msg) {
                send_owned(t, error);
                return;
        }
        struct mcp_session *s = t->session;
        if (cancels_subscription(t, msg))
                return;
        if (mcp_is_modern(msg, NULL)) {
                if (mcp_modern_check(msg, NULL, &answer)) {
                        send_owned(t, answer);
                        return;
                }
                s = t->modern;
        } else if (is_cancellation(msg)) { /* a cancellation may be of either */
                mcp_session_cancel(t->modern,
                                   json_object_get(json_object_get(msg, "params"), "requestId"));
        }
        struct mcp_subscription *sub = NULL;
        switch (mcp_receive(s, &t->out.sink, msg, &answer, &call, &sub)) {
        case MCP_LISTEN: /* the server keeps it until cancelled or the end */
        case MCP_ANSWER:
                send_owned(t, answer);
                break;
        case MCP_CALL:
                start_call(t, call);
                break;
        case MCP_DONE:
                break;
        }
}

static void too_large(struct stdio_transport *t)
{
        char msg[160];
        snprintf(msg, sizeof(msg), "Parse error: the message is larger than %zu bytes", t->max);
        send_owned(t, jsonrpc_error(NULL, JSONRPC_PARSE_ERROR, msg));
}

/* Takes the complete lines out of the buffer (from `scan` on). */
static void take_lines(struct stdio_transport *t, size_t scan)
{
        size_t start = 0;
        for (size_t i = scan; i < t->len; i++) {
                if (t->buf[i] != '\n')
                        continue;
                if (t->discarding)
                        t->discarding = false;
                else
                        handle_line(t, t->buf + start, i - start);
                start = i + 1;
        }
        memmove(t->buf, t->buf + start, t->len - start);
        t->len -= start;
        if (t->len > t->max) { /* a line past the limit: drop it up to its newline */
                if (!t->discarding)
                        too_large(t);
                t->discarding = true;
                t->len = 0;
        }
}

static int read_some(struct stdio_transport *t, int fd)
{
        if (t->cap - t->len < READ_CHUNK) {
                size_t cap = t->cap ? t->cap * 2 : 2 * READ_CHUNK;
                char *nb = realloc(t->buf, cap);
                if (!nb)
                        return -ENOMEM;
                t->buf = nb;
                t->cap = cap;
        }
        ssize_t n = read(fd, t->buf + t->len, READ_CHUNK);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN ? 1 : -errno;
        if (n == 0)
                return 0;
        size_t scan = t->len;
        t->len += (size_t)n;
        take_lines(t, scan);
        return 1;
}

enum { INPUT_MORE = 1, INPUT_END = 0, INPUT_STOP = 2 };

/* INPUT_MORE: readable; INPUT_STOP: stop_fd fired; < 0: error. */
static int wait_input(int in_fd, int stop_fd)
{
        struct pollfd p[2] = {{.fd = in_fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
        int n = poll(p, stop_fd >= 0 ? 2 : 1, -1);
        if (n < 0)
                return errno == EINTR ? INPUT_MORE : -errno;
        if (stop_fd >= 0 && p[1].revents)
                return INPUT_STOP;
        return INPUT_MORE;
}

/* INPUT_END, INPUT_STOP or < 0. */
static int read_loop(struct stdio_transport *t, int in_fd, int stop_fd)
{
        for (;;) {
                int r = wait_input(in_fd, stop_fd);
                if (r != INPUT_MORE)
                        return r;
                if ((r = read_some(t, in_fd)) <= 0)
                        return r;
        }
}

static bool readable(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return fd >= 0 && poll(&p, 1, 0) > 0;
}

/* After end of input the running calls finish and answer (asking the
 * client anything fails at once); a stop request cancels them. */
static void wait_workers(struct stdio_transport *t, int stop_fd, bool stopping)
{
        /* Subscriptions end with the transport: the client is told. */
        mcp_listen_end_sink(t->srv, &t->out.sink,
                            stopping ? "server shutting down" : "end of input");
        if (stopping) {
                mcp_session_close(t->session);
                mcp_session_close(t->modern);
        } else {
                mcp_session_deafen(t->session);
                mcp_session_deafen(t->modern);
        }
        pthread_mutex_lock(&t->lock);
        while (t->workers > 0) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 100 * 1000000;
                if (until.tv_nsec >= 1000000000) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&t->idle, &t->lock, &until);
                if (!stopping && readable(stop_fd)) {
                        stopping = true;
                        mcp_session_close(t->session);
                        mcp_session_close(t->modern);
                }
        }
        /* The kept threads go too: they use t, which is about to go. */
        t->closing = true;
        pthread_cond_broadcast(&t->work);
        while (t->threads > 0)
                pthread_cond_wait(&t->gone, &t->lock);
        pthread_mutex_unlock(&t->lock);
}

int mcp_stdio_run(struct mcp_server *srv, int in_fd, int out_fd, int stop_fd,
                  struct cage_error *err)
{
        struct stdio_transport t = {
                .srv = srv,
                .out = {.sink = {.send = stdio_send}, .fd = out_fd},
                .max = srv->cfg->limits.max_body_bytes,
        };
        t.session = mcp_session_new(srv, CAGE_SERVICE_DEFAULT_TENANT);
        t.modern = mcp_session_new_stateless(srv, CAGE_SERVICE_DEFAULT_TENANT);
        if (!t.session || !t.modern) {
                mcp_session_unref(t.session);
                mcp_session_unref(t.modern);
                return cage_fail(err, -ENOMEM, "mcp session");
        }
        pthread_mutex_init(&t.out.lock, NULL);
        pthread_mutex_init(&t.lock, NULL);
        pthread_cond_init(&t.idle, NULL);
        pthread_cond_init(&t.work, NULL);
        pthread_cond_init(&t.gone, NULL);
        int r = read_loop(&t, in_fd, stop_fd);
        wait_workers(&t, stop_fd, r != INPUT_END);
        mcp_session_unref(t.session);
        mcp_session_unref(t.modern);
        pthread_cond_destroy(&t.idle);
        pthread_cond_destroy(&t.work);
        pthread_cond_destroy(&t.gone);
        pthread_mutex_destroy(&t.lock);
        pthread_mutex_destroy(&t.out.lock);
        free(t.buf);
        return r < 0 ? cage_fail(err, r, "reading standard input") : 0;
}
