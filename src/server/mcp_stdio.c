/* MCP over stdio: one JSON-RPC message per line on stdin and stdout
 * (stdout carries nothing else: logs go to stderr).
 *
 * Input threads wait for input together, each in an epoll set of its own
 * that holds standard input as EPOLLEXCLUSIVE: a message wakes one of
 * them, which reads it (under read_lock) and answers at once every message
 * but tools/call. A tools/call is registered in the session first (so a
 * notifications/cancelled that follows finds it). When it is the last
 * message read and another input thread still waits, the thread that read
 * it runs it itself and then waits for input again: a call costs no
 * hand-over to another thread, and input is still read while it runs.
 * Otherwise a kept worker thread runs it. Either way the client's answers
 * to our requests (sampling for llm_query) and cancellations are read while
 * tools run. A standard input epoll cannot watch (a regular file,
 * /dev/null) is read by the calling thread alone, every call on a worker.
 * Writes are whole lines under one mutex, so messages of concurrent calls
 * never interleave.
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
#include <sys/epoll.h>
#include <sys/eventfd.h>
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
#include "util/kept_threads.h"

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
        pthread_cond_t idle;                /* a call finished */
        size_t workers;                     /* calls running, here or on a worker */
        struct kept_threads worker_threads; /* for calls the input threads do not run */
        /* Input threads (the calling one and those started beside it). */
        pthread_cond_t gone;  /* one ended */
        size_t threads;       /* started beside the calling one, alive */
        size_t input_waiting; /* in epoll_wait, or about to be */
        bool pollable;        /* standard input works with epoll */
        bool finishing;       /* a thread saw the end of input or a stop */
        bool ended;           /* every call has answered after that */
        int end_reason;       /* INPUT_END, INPUT_STOP or < 0 */
        int in_fd, stop_fd;
        int end_fd; /* eventfd: written when ended, every input thread wakes */
        /* the line being read, under read_lock */
        pthread_mutex_t read_lock;
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

/* ---- worker threads ------------------------------------------------------------------- */

#define THREAD_KEEP_S 30 /* an idle thread waits this long for another call */

struct job {
        struct stdio_transport *t;
        struct mcp_call *call;
};

/* Runs a call counted in t->workers, answers it and uncounts it. */
static void run_call(struct stdio_transport *t, struct mcp_call *call)
{
        send_owned(t, mcp_call_run(call));
        mcp_call_free(call);
        pthread_mutex_lock(&t->lock);
        t->workers--;
        pthread_cond_broadcast(&t->idle);
        pthread_mutex_unlock(&t->lock);
}

static void run_job(void *arg)
{
        struct job job = *(struct job *)arg;
        free(arg);
        run_call(job.t, job.call);
}

/* A call for a worker thread to run. */
static void start_call(struct stdio_transport *t, struct mcp_call *call)
{
        struct job *job = malloc(sizeof(*job));
        if (job) {
                *job = (struct job){.t = t, .call = call};
                pthread_mutex_lock(&t->lock);
                t->workers++;
                pthread_mutex_unlock(&t->lock);
                if (kept_threads_run(&t->worker_threads, run_job, job) == 0)
                        return;
                pthread_mutex_lock(&t->lock);
                t->workers--;
                pthread_mutex_unlock(&t->lock);
                free(job);
        }
        send_owned(t, jsonrpc_error(call->id, JSONRPC_INTERNAL_ERROR,
                                    "Internal error: cannot start a thread for the call"));
        mcp_call_free(call);
}

/* ---- reading ---------------------------------------------------------------------------- */

enum { INPUT_MORE = 1, INPUT_END = 0, INPUT_STOP = 2, INPUT_CALL = 3 };

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

/* Answers or starts what line asks; a call is returned instead of started
 * when keep (the reading thread may run it). */
static struct mcp_call *handle_line(struct stdio_transport *t, const char *line, size_t len,
                                    bool keep)
{
        json_t *error = NULL, *answer = NULL;
        struct mcp_call *call = NULL;
        if (blank(line, len))
                return NULL;
        json_auto_t *msg = jsonrpc_parse(line, len, &error);
        if (!msg) {
                send_owned(t, error);
                return NULL;
        }
        struct mcp_session *s = t->session;
        if (cancels_subscription(t, msg))
                return NULL;
        if (mcp_is_modern(msg, NULL)) {
                if (mcp_modern_check(msg, NULL, &answer)) {
                        send_owned(t, answer);
                        return NULL;
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
                if (keep)
                        return call;
                start_call(t, call);
                break;
        case MCP_DONE:
                break;
        }
        return NULL;
}

static void too_large(struct stdio_transport *t)
{
        char msg[160];
        snprintf(msg, sizeof(msg), "Parse error: the message is larger than %zu bytes", t->max);
        send_owned(t, jsonrpc_error(NULL, JSONRPC_PARSE_ERROR, msg));
}

/* Takes the complete lines out of the buffer (from `scan` on). A call on
 * the last of them is returned when input threads can run it. */
static struct mcp_call *take_lines(struct stdio_transport *t, size_t scan)
{
        struct mcp_call *kept = NULL;
        size_t start = 0;
        for (size_t i = scan; i < t->len; i++) {
                if (t->buf[i] != '\n')
                        continue;
                if (t->discarding) {
                        t->discarding = false;
                } else {
                        bool last = !memchr(t->buf + i + 1, '\n', t->len - i - 1);
                        kept = handle_line(t, t->buf + start, i - start, t->pollable && last);
                }
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
        return kept;
}

/* One read: INPUT_MORE, INPUT_CALL (*call set), INPUT_END or < 0. */
static int read_some(struct stdio_transport *t, struct mcp_call **call)
{
        if (t->cap - t->len < READ_CHUNK) {
                size_t cap = t->cap ? t->cap * 2 : 2 * READ_CHUNK;
                char *nb = realloc(t->buf, cap);
                if (!nb)
                        return -ENOMEM;
                t->buf = nb;
                t->cap = cap;
        }
        ssize_t n = read(t->in_fd, t->buf + t->len, READ_CHUNK);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN ? INPUT_MORE : -errno;
        if (n == 0)
                return INPUT_END;
        size_t scan = t->len;
        t->len += (size_t)n;
        *call = take_lines(t, scan);
        return *call ? INPUT_CALL : INPUT_MORE;
}

static bool readable(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return fd >= 0 && poll(&p, 1, 0) > 0;
}

/* ---- the end ---------------------------------------------------------------------------- */

static void ms_from_now(struct timespec *until, long ms)
{
        clock_gettime(CLOCK_REALTIME, until);
        until->tv_nsec += ms * 1000000;
        if (until->tv_nsec >= 1000000000) {
                until->tv_sec++;
                until->tv_nsec -= 1000000000;
        }
}

/* With t->lock held: waits until every call has answered. After end of
 * input the running calls finish and answer (asking the client anything
 * fails at once); a stop request, then or later, cancels them. */
static void wait_calls_locked(struct stdio_transport *t, bool stopping)
{
        for (;;) {
                if (stopping) {
                        mcp_session_close(t->session);
                        mcp_session_close(t->modern);
                }
                if (t->workers == 0)
                        return;
                struct timespec until;
                ms_from_now(&until, 100);
                pthread_cond_timedwait(&t->idle, &t->lock, &until);
                stopping = stopping || readable(t->stop_fd);
        }
}

/* Run by the thread that saw the end of input, a stop request or a read
 * error (the first of them, if several do). Then the input has ended for
 * every thread. */
static void finish(struct stdio_transport *t, int reason)
{
        pthread_mutex_lock(&t->lock);
        bool first = !t->finishing;
        t->finishing = true;
        pthread_mutex_unlock(&t->lock);
        if (!first)
                return;
        bool stopping = reason != INPUT_END;
        /* Subscriptions end with the transport: the client is told. */
        mcp_listen_end_sink(t->srv, &t->out.sink,
                            stopping ? "server shutting down" : "end of input");
        mcp_session_deafen(t->session);
        mcp_session_deafen(t->modern);
        pthread_mutex_lock(&t->lock);
        wait_calls_locked(t, stopping);
        t->ended = true;
        t->end_reason = reason;
        pthread_mutex_unlock(&t->lock);
        (void)eventfd_write(t->end_fd, 1);
}

/* The other threads go: they use t, which is about to go. The input
 * threads leave once they see the end (end_fd). */
static void end_threads(struct stdio_transport *t)
{
        kept_threads_close(&t->worker_threads);
        pthread_mutex_lock(&t->lock);
        while (t->threads > 0)
                pthread_cond_wait(&t->gone, &t->lock);
        pthread_mutex_unlock(&t->lock);
}

/* ---- input threads ---------------------------------------------------------------------- */

enum { WOKE_INPUT = 1, WOKE_STOP = 2, WOKE_END = 4 };

/* This thread's epoll set: standard input (EPOLLEXCLUSIVE: a message wakes
 * one waiting thread), the stop request and the end (every thread wakes). */
static int input_epoll(struct stdio_transport *t)
{
        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
                return -errno;
        struct epoll_event in = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u32 = WOKE_INPUT};
        struct epoll_event stop = {.events = EPOLLIN, .data.u32 = WOKE_STOP};
        struct epoll_event end = {.events = EPOLLIN, .data.u32 = WOKE_END};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, t->in_fd, &in) < 0 ||
            (t->stop_fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, t->stop_fd, &stop) < 0) ||
            epoll_ctl(ep, EPOLL_CTL_ADD, t->end_fd, &end) < 0) {
                int r = -errno;
                close(ep);
                return r;
        }
        return ep;
}

/* What woke this thread (WOKE_*), 0 on timeout, < 0 on error. */
static int wait_woken(int ep, int timeout_ms)
{
        struct epoll_event ev[3];
        int n = epoll_wait(ep, ev, 3, timeout_ms);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        int woke = 0;
        for (int i = 0; i < n; i++)
                woke |= (int)ev[i].data.u32;
        return woke;
}

/* Reads what is there, if another thread has not already: INPUT_MORE,
 * INPUT_CALL (*call set), INPUT_END or < 0. */
static int read_input(struct stdio_transport *t, struct mcp_call **call)
{
        pthread_mutex_lock(&t->read_lock);
        int r = INPUT_MORE;
        if (readable(t->in_fd))
                r = read_some(t, call);
        pthread_mutex_unlock(&t->read_lock);
        return r;
}

static void *input_main(void *arg);

struct input_start {
        struct stdio_transport *t;
        int ep; /* the thread's epoll set, made before it starts */
};

/* Another input thread; false when none could start (its epoll set is made
 * here, so a thread that started waits for input). */
static bool start_input_thread(struct stdio_transport *t)
{
        struct input_start *start = malloc(sizeof(*start));
        if (!start)
                return false;
        *start = (struct input_start){.t = t, .ep = input_epoll(t)};
        pthread_t thread;
        if (start->ep >= 0) {
                pthread_mutex_lock(&t->lock);
                t->threads++;
                pthread_mutex_unlock(&t->lock);
                if (pthread_create(&thread, NULL, input_main, start) == 0) {
                        pthread_detach(thread);
                        return true;
                }
                pthread_mutex_lock(&t->lock);
                t->threads--;
                pthread_mutex_unlock(&t->lock);
                close(start->ep);
        }
        free(start);
        return false;
}

/* Runs call on this thread when another input thread waits meanwhile (one
 * is started if none does) and nothing more is to be read yet; otherwise
 * a worker runs it. */
static void run_here(struct stdio_transport *t, struct mcp_call *call)
{
        pthread_mutex_lock(&t->lock);
        bool here = !readable(t->in_fd);
        bool start = here && t->input_waiting == 0;
        if (here)
                t->workers++;
        pthread_mutex_unlock(&t->lock);
        if (start && !start_input_thread(t)) {
                pthread_mutex_lock(&t->lock);
                t->workers--;
                pthread_mutex_unlock(&t->lock);
                here = false;
        }
        if (here)
                run_call(t, call);
        else
                start_call(t, call);
}

/* With t->lock held: whether this input thread leaves. The calling thread
 * and one more stay to the end (the first call then finds a thread to
 * read while it runs); another leaves after THREAD_KEEP_S idle. */
static bool input_thread_leaves(struct stdio_transport *t, bool calling, int woke)
{
        if (t->ended)
                return true;
        return !calling && woke == 0 && t->input_waiting > 1;
}

static void input_loop(struct stdio_transport *t, int ep, bool calling)
{
        for (;;) {
                pthread_mutex_lock(&t->lock);
                t->input_waiting++;
                pthread_mutex_unlock(&t->lock);
                int woke = wait_woken(ep, calling ? -1 : THREAD_KEEP_S * 1000);
                pthread_mutex_lock(&t->lock);
                t->input_waiting--;
                bool leave = input_thread_leaves(t, calling, woke);
                bool finishing = t->finishing;
                pthread_mutex_unlock(&t->lock);
                if (leave)
                        return;
                if (finishing) { /* input at its end stays readable: wait for the end alone */
                        (void)epoll_ctl(ep, EPOLL_CTL_DEL, t->in_fd, NULL);
                        if (t->stop_fd >= 0)
                                (void)epoll_ctl(ep, EPOLL_CTL_DEL, t->stop_fd, NULL);
                        continue;
                }
                struct mcp_call *call = NULL;
                int r = woke < 0 ? woke : INPUT_MORE;
                if (r == INPUT_MORE && (woke & WOKE_STOP))
                        r = INPUT_STOP;
                if (r == INPUT_MORE && (woke & WOKE_INPUT))
                        r = read_input(t, &call);
                if (r == INPUT_CALL)
                        run_here(t, call);
                else if (r != INPUT_MORE)
                        finish(t, r);
        }
}

static void input_thread_ends(struct stdio_transport *t)
{
        pthread_mutex_lock(&t->lock);
        t->threads--;
        pthread_cond_broadcast(&t->gone);
        pthread_mutex_unlock(&t->lock);
}

static void *input_main(void *arg)
{
        struct input_start start = *(struct input_start *)arg;
        free(arg);
        input_loop(start.t, start.ep, false);
        close(start.ep);
        input_thread_ends(start.t);
        return NULL;
}

/* ---- the calling thread ----------------------------------------------------------------- */

/* Standard input epoll cannot watch: this thread alone reads, until the
 * end; every call goes to a worker. INPUT_END, INPUT_STOP or < 0. */
static int read_alone(struct stdio_transport *t)
{
        for (;;) {
                struct pollfd p[2] = {{.fd = t->in_fd, .events = POLLIN},
                                      {.fd = t->stop_fd, .events = POLLIN}};
                if (poll(p, t->stop_fd >= 0 ? 2 : 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (t->stop_fd >= 0 && p[1].revents)
                        return INPUT_STOP;
                struct mcp_call *call = NULL;
                int r = read_some(t, &call);
                if (r != INPUT_MORE)
                        return r;
        }
}

static int serve(struct stdio_transport *t)
{
        int ep = input_epoll(t);
        t->pollable = ep >= 0;
        if (ep >= 0) {
                (void)start_input_thread(t); /* else the first call starts one */
                input_loop(t, ep, true);
                close(ep);
        } else {
                finish(t, read_alone(t));
        }
        end_threads(t);
        return t->end_reason;
}

int mcp_stdio_run(struct mcp_server *srv, int in_fd, int out_fd, int stop_fd,
                  struct cage_error *err)
{
        struct stdio_transport t = {
                .srv = srv,
                .out = {.sink = {.send = stdio_send}, .fd = out_fd},
                .max = srv->cfg->limits.max_body_bytes,
                .in_fd = in_fd,
                .stop_fd = stop_fd,
        };
        t.end_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        t.session = mcp_session_new(srv, CAGE_SERVICE_DEFAULT_TENANT);
        t.modern = mcp_session_new_stateless(srv, CAGE_SERVICE_DEFAULT_TENANT);
        if (t.end_fd < 0 || !t.session || !t.modern) {
                mcp_session_unref(t.session);
                mcp_session_unref(t.modern);
                if (t.end_fd >= 0)
                        close(t.end_fd);
                return cage_fail(err, -ENOMEM, "mcp session");
        }
        pthread_mutex_init(&t.out.lock, NULL);
        pthread_mutex_init(&t.lock, NULL);
        pthread_mutex_init(&t.read_lock, NULL);
        pthread_cond_init(&t.idle, NULL);
        pthread_cond_init(&t.gone, NULL);
        kept_threads_init(&t.worker_threads, THREAD_KEEP_S);
        int r = serve(&t);
        mcp_session_unref(t.session);
        mcp_session_unref(t.modern);
        pthread_cond_destroy(&t.idle);
        pthread_cond_destroy(&t.gone);
        pthread_mutex_destroy(&t.read_lock);
        pthread_mutex_destroy(&t.lock);
        pthread_mutex_destroy(&t.out.lock);
        close(t.end_fd);
        free(t.buf);
        return r < 0 ? cage_fail(err, r, "reading standard input") : 0;
}
