/* envd's process.Process over Connect (e2b.h): E2B commands as execs of
 * the service in the sandbox, and each sandbox's table of the commands
 * still running.
 *
 * A command is one cage_service_exec() on a worker thread of its own, so
 * it outlives the request that started it: the SDK's background commands
 * are listed (List), killed (SendSignal) and reattached (Connect) from
 * other requests. Its output goes to every attached stream as data events
 * (raw bytes in base64, secret values redacted per chunk); a stream whose
 * client went away is dropped, the command goes on. Killing is the exec's
 * cancellation (its processes are killed), so SIGTERM and SIGKILL both end
 * it at once. pids are the table's own numbers (from 1000 up), not the
 * sandbox's: codecage does not expose its process ids.
 *
 * A command started with `stdin: true` reads its stdin from a pipe whose
 * writing end the table keeps: SendInput writes to it (waiting at most
 * STDIN_WAIT_MS for a command that does not read), CloseStdin closes it (the
 * command reads EOF). Without it, its stdin is empty.
 *
 * What is not served answers `unimplemented` with a message saying so:
 * PTYs (Start with pty, Update, pty input), the client stream StreamInput.
 *
 * Workers are counted (e2b_process_wait_idle) so the listener can stop
 * only after every command ended. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/e2b.h"
#include "server/mcp.h"
#include "services/config.h"
#include "services/redact.h"
#include "services/service.h"
#include "util/json_bounded.h"
#include "util/base64.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"
#include "util/sse_queue.h"

#define SUBS_MAX      8            /* streams attached to one command */
#define QUEUE_MAX     (256 * 1024) /* bytes of envelopes waiting per stream */
#define PROCS_MAX     256          /* running commands per sandbox */
#define TAG_MAX       256
#define STDIN_WAIT_MS 10000 /* SendInput waits this long for a command to read */

struct e2b_proc {
        struct e2b_proc *next; /* the box's table, under box->lock */
        int refs;              /* atomic */
        uint32_t pid;
        char *tag;
        json_t *config; /* {cmd, args, envs, cwd} as asked */
        json_t *req;    /* the exec request */
        int cancel[2];
        int stdin_r, stdin_w;       /* the command's stdin pipe, or -1 (stdin: false) */
        pthread_mutex_t stdin_lock; /* stdin_w, held while input is written */
        pthread_mutex_t lock;       /* subs, done; never held while blocking */
        struct sse_queue *subs[SUBS_MAX];
        bool done; /* the worker ended every stream: none may attach */
        struct e2b_box *box;
        struct cage_service *svc;
        struct cage_redactor *redactor;
};

/* ---- workers ---------------------------------------------------------- */

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_idle = PTHREAD_COND_INITIALIZER;
static unsigned workers;

void e2b_worker_add(void)
{
        pthread_mutex_lock(&workers_lock);
        workers++;
        pthread_mutex_unlock(&workers_lock);
}

void e2b_worker_done(void)
{
        pthread_mutex_lock(&workers_lock);
        if (--workers == 0)
                pthread_cond_broadcast(&workers_idle);
        pthread_mutex_unlock(&workers_lock);
}

void e2b_process_wait_idle(void)
{
        pthread_mutex_lock(&workers_lock);
        while (workers > 0)
                pthread_cond_wait(&workers_idle, &workers_lock);
        pthread_mutex_unlock(&workers_lock);
}

/* ---- commands ------------------------------------------------------------ */

static void proc_unref(struct e2b_proc *p)
{
        if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        for (size_t i = 0; i < SUBS_MAX; i++)
                sse_queue_unref(p->subs[i]);
        for (int i = 0; i < 2; i++)
                if (p->cancel[i] >= 0)
                        close(p->cancel[i]);
        if (p->stdin_r >= 0)
                close(p->stdin_r);
        if (p->stdin_w >= 0)
                close(p->stdin_w);
        json_decref(p->config);
        json_decref(p->req);
        free(p->tag);
        cage_redactor_unref(p->redactor);
        e2b_box_unref(p->box);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->stdin_lock);
        free(p);
}

static struct e2b_proc *proc_ref(struct e2b_proc *p)
{
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
        return p;
}

/* Sends msg to every attached stream; drops the streams that are gone. */
static void broadcast(struct e2b_proc *p, json_t *msg)
{
        struct sse_queue *subs[SUBS_MAX] = {0};
        pthread_mutex_lock(&p->lock);
        for (size_t i = 0; i < SUBS_MAX; i++)
                subs[i] = p->subs[i] ? sse_queue_ref(p->subs[i]) : NULL;
        pthread_mutex_unlock(&p->lock);
        for (size_t i = 0; i < SUBS_MAX; i++) {
                if (!subs[i])
                        continue;
                if (e2b_connect_push(subs[i], msg) == -EPIPE) {
                        pthread_mutex_lock(&p->lock);
                        if (p->subs[i] == subs[i])
                                p->subs[i] = sse_queue_unref(p->subs[i]);
                        pthread_mutex_unlock(&p->lock);
                }
                sse_queue_unref(subs[i]);
        }
}

/* {"event": {kind: value}}: a StartResponse / ConnectResponse. */
static json_t *event_of(const char *kind, json_t *value)
{
        return json_pack("{s:{s:o}}", "event", kind, value);
}

static int on_output(void *ctx, int stream, const void *buf, size_t len)
{
        struct e2b_proc *p = ctx;
        _cleanup_free_ char *clean = NULL;
        size_t clean_len = len;
        const char *data = buf;
        if (p->redactor && cage_redact_needed(p->redactor, buf, len) &&
            cage_redact(p->redactor, buf, len, &clean, &clean_len) == 0)
                data = clean;
        _cleanup_free_ char *b64 = mcp_base64(data, clean_len);
        if (!b64)
                return 0;
        json_t *msg = event_of("data", json_pack("{s:s}", stream == 2 ? "stderr" : "stdout", b64));
        if (msg)
                broadcast(p, msg);
        json_decref(msg);
        return 0;
}

static const char *signal_name(int sig)
{
        switch (sig) {
        case 9:
                return "killed";
        case 15:
                return "terminated";
        case 6:
                return "aborted";
        case 11:
                return "segmentation fault";
        default:
                return "signal";
        }
}

/* The end event of an exec's result, as envd words it. */
static json_t *end_event(const json_t *res)
{
        const char *status = json_string_value(json_object_get(res, "status"));
        const json_t *code = json_object_get(res, "exit_code");
        const json_t *sig = json_object_get(res, "signal");
        const char *reason = json_string_value(json_object_get(res, "reason"));
        char text[128];
        json_t *end = json_object();
        if (!end)
                return NULL;
        bool exited = json_is_integer(code) && !json_is_integer(sig);
        if (exited)
                snprintf(text, sizeof(text), "exit status %lld", json_integer_value(code));
        else if (json_is_integer(sig))
                snprintf(text, sizeof(text), "signal: %s",
                         signal_name((int)json_integer_value(sig)));
        else
                snprintf(text, sizeof(text), "%s", status ? status : "ended");
        json_object_set_new(end, "exitCode", json_integer(exited ? json_integer_value(code) : -1));
        json_object_set_new(end, "exited", json_boolean(exited));
        json_object_set_new(end, "status", json_string(text));
        if (status && strcmp(status, "ok") != 0 && strcmp(status, "error") != 0)
                json_object_set_new(end, "error", json_string(reason ? reason : status));
        return event_of("end", end);
}

static void unlist(struct e2b_proc *p)
{
        struct e2b_box *box = p->box;
        pthread_mutex_lock(&box->lock);
        for (struct e2b_proc **pp = &box->procs; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        proc_unref(p); /* the table's reference */
                        break;
                }
        pthread_mutex_unlock(&box->lock);
}

static void *worker_main(void *arg)
{
        struct e2b_proc *p = arg;
        struct cage_error err = {0};
        struct cage_service_io io = {.on_output = on_output,
                                     .on_output_ctx = p,
                                     .cancel_fd = p->cancel[0],
                                     .stdin_stream = p->stdin_r >= 0,
                                     .stdin_fd = p->stdin_r};
        json_auto_t *res = NULL;
        int r = cage_service_exec(p->svc, p->box->tenant, p->box->id, p->req, &io, &res, &err);
        json_auto_t *end = r == 0 ? end_event(res) : NULL;
        if (end)
                broadcast(p, end);
        unlist(p); /* no new stream attaches now */
        pthread_mutex_lock(&p->lock);
        for (size_t i = 0; i < SUBS_MAX; i++) {
                if (!p->subs[i])
                        continue;
                (void)e2b_connect_push_end(p->subs[i], r < 0 ? (int)e2b_connect_code_of(r) : -1,
                                           err.message);
                sse_queue_end(p->subs[i]);
        }
        p->done = true;
        pthread_mutex_unlock(&p->lock);
        proc_unref(p);
        e2b_worker_done();
        return NULL;
}

/* ---- requests ------------------------------------------------------------ */

static void fail(struct e2b_reply *reply, enum e2b_connect_code code, const char *message)
{
        e2b_connect_error(reply, code, message);
}

static void fail_stream(struct e2b_reply *reply, enum e2b_connect_code code, const char *message)
{
        e2b_connect_stream_error(reply, code, message);
}

/* The exec request of a StartRequest's process config. */
static int exec_request(const struct e2b_call *c, const json_t *proc, json_t **ret,
                        struct cage_error *err)
{
        const json_t *cmd = json_object_get(proc, "cmd");
        const json_t *args = json_object_get(proc, "args");
        const json_t *envs = json_object_get(proc, "envs");
        const json_t *cwd = json_object_get(proc, "cwd");
        if (!json_is_string(cmd) || !json_string_length(cmd))
                return cage_fail(err, -EINVAL, "process.cmd: required, the program to run");
        if (args && !json_is_array(args))
                return cage_fail(err, -EINVAL, "process.args: must be a list of strings");
        json_auto_t *argv = json_array();
        json_auto_t *req = json_object();
        if (!argv || !req)
                return -ENOMEM;
        json_array_append(argv, (json_t *)cmd);
        size_t i;
        json_t *a;
        json_array_foreach((json_t *)args, i, a)
        {
                if (!json_is_string(a))
                        return cage_fail(err, -EINVAL, "process.args[%zu]: must be a string", i);
                json_array_append(argv, a);
        }
        json_object_set(req, "argv", argv);
        if (json_is_object(envs) && json_object_size(envs))
                json_object_set(req, "env", (json_t *)envs);
        if (json_is_string(cwd) && json_string_length(cwd))
                json_object_set(req, "cwd", (json_t *)cwd);
        uint64_t max_s = c->cfg->limits.timeout_s_max, ms = e2b_connect_timeout_ms(c->conn);
        double t = ms ? (double)ms / 1000.0 : (double)max_s;
        json_object_set_new(req, "timeout_s", json_real(t < (double)max_s ? t : (double)max_s));
        *ret = TAKE_PTR(req);
        return 0;
}

static struct e2b_proc *proc_new(const struct e2b_call *c, json_t *config, json_t *req,
                                 const char *tag, bool with_stdin)
{
        struct e2b_proc *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->refs = 1;
        p->cancel[0] = p->cancel[1] = -1;
        p->stdin_r = p->stdin_w = -1;
        pthread_mutex_init(&p->lock, NULL);
        pthread_mutex_init(&p->stdin_lock, NULL);
        p->box = c->box;
        __atomic_add_fetch(&c->box->refs, 1, __ATOMIC_ACQ_REL);
        p->svc = c->svc;
        p->redactor = c->redactor ? cage_redactor_ref(c->redactor) : NULL;
        p->config = json_incref(config);
        p->req = json_incref(req);
        p->tag = tag ? strndup(tag, TAG_MAX) : NULL;
        int in[2] = {-1, -1};
        if (pipe2(p->cancel, O_CLOEXEC | O_NONBLOCK) < 0 || (tag && !p->tag) ||
            (with_stdin && pipe2(in, O_CLOEXEC) < 0)) {
                proc_unref(p);
                return NULL;
        }
        p->stdin_r = in[0];
        p->stdin_w = in[1];
        if (p->stdin_w >= 0)
                fd_set_nonblock(p->stdin_w, true);
        return p;
}

/* Adds p to its box's table with the next pid; -EAGAIN when full. */
static int list_add(struct e2b_proc *p)
{
        struct e2b_box *box = p->box;
        size_t n = 0;
        pthread_mutex_lock(&box->lock);
        for (struct e2b_proc *q = box->procs; q; q = q->next)
                n++;
        if (n >= PROCS_MAX) {
                pthread_mutex_unlock(&box->lock);
                return -EAGAIN;
        }
        p->pid = box->next_pid++;
        p->next = box->procs;
        box->procs = proc_ref(p);
        pthread_mutex_unlock(&box->lock);
        return 0;
}

/* Puts q in a free slot of p: -EAGAIN when every slot is taken, -ENOENT
 * when the command ended (its worker would never end q). */
static int subscribe(struct e2b_proc *p, struct sse_queue *q)
{
        int r = -EAGAIN;
        pthread_mutex_lock(&p->lock);
        if (p->done)
                r = -ENOENT;
        for (size_t i = 0; i < SUBS_MAX && r == -EAGAIN; i++)
                if (!p->subs[i]) {
                        p->subs[i] = q; /* the table keeps the creation reference */
                        r = 0;
                }
        pthread_mutex_unlock(&p->lock);
        return r;
}

/* A new stream for p, the start event first: 0, or -EAGAIN (SUBS_MAX
 * streams attached), -ENOENT (the command ended), -ENOMEM. */
static int attach(const struct e2b_call *c, struct e2b_proc *p, struct e2b_reply *reply)
{
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct sse_queue *q =
                sse_queue_new(QUEUE_MAX, ci ? ci->connect_fd : -1, c->shutdown_fd, -1);
        if (!q)
                return -ENOMEM;
        json_auto_t *start = event_of("start", json_pack("{s:i}", "pid", (int)p->pid));
        json_auto_t *keepalive = event_of("keepalive", json_object());
        int r = !start || !keepalive || e2b_connect_push(q, start) < 0 ? -ENOMEM : subscribe(p, q);
        if (r < 0) {
                sse_queue_unref(q);
                return r;
        }
        reply->response = e2b_connect_stream_response(q, keepalive);
        reply->status = 200;
        return reply->response ? 0 : -ENOMEM;
}

static void start(struct e2b_call *c, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_auto_t *msg = NULL, *req = NULL;
        if (!e2b_connect_is_stream(c->conn))
                return fail(reply, CONNECT_INVALID_ARGUMENT, "Start is a server stream");
        if (e2b_connect_stream_message(c->body, c->body_len, &msg, &err) < 0)
                return fail_stream(reply, CONNECT_INVALID_ARGUMENT, err.message);
        if (json_is_object(json_object_get(msg, "pty")))
                return fail_stream(reply, CONNECT_UNIMPLEMENTED,
                                   "codecage does not offer PTYs: run commands without one");
        const json_t *proc = json_object_get(msg, "process");
        int r = exec_request(c, proc, &req, &err);
        if (r < 0)
                return fail_stream(reply, e2b_connect_code_of(r), err.message);
        const char *tag = json_string_value(json_object_get(msg, "tag"));
        struct e2b_proc *p =
                proc_new(c, (json_t *)proc, req, tag, json_is_true(json_object_get(msg, "stdin")));
        if (!p)
                return fail_stream(reply, CONNECT_INTERNAL, "out of memory");
        if (list_add(p) < 0) {
                proc_unref(p);
                return fail_stream(reply, CONNECT_RESOURCE_EXHAUSTED,
                                   "too many commands run in this sandbox at once");
        }
        pthread_t t;
        int started = attach(c, p, reply);
        if (started == 0) {
                e2b_worker_add();
                started = -pthread_create(&t, NULL, worker_main, proc_ref(p));
                if (started < 0) {
                        proc_unref(p); /* the worker's */
                        e2b_worker_done();
                } else {
                        pthread_detach(t);
                }
        }
        if (started < 0) {
                if (reply->response)
                        MHD_destroy_response(reply->response);
                reply->response = NULL;
                unlist(p);
                proc_unref(p);
                return fail_stream(reply, CONNECT_INTERNAL, "cannot start the command");
        }
        proc_unref(p);
}

/* The command a ProcessSelector ({"pid": N} or {"tag": T}) names, referenced. */
static struct e2b_proc *find(struct e2b_box *box, const json_t *sel)
{
        const json_t *pid = json_object_get(sel, "pid");
        const char *tag = json_string_value(json_object_get(sel, "tag"));
        struct e2b_proc *found = NULL;
        pthread_mutex_lock(&box->lock);
        for (struct e2b_proc *p = box->procs; p && !found; p = p->next)
                if ((json_is_integer(pid) && json_integer_value(pid) == p->pid) ||
                    (tag && p->tag && strcmp(tag, p->tag) == 0))
                        found = proc_ref(p);
        pthread_mutex_unlock(&box->lock);
        return found;
}

static int unary_message(struct e2b_call *c, struct e2b_reply *reply, json_t **ret)
{
        json_error_t jerr;
        json_t *msg = json_load_request(c->body, c->body_len, JSON_REJECT_DUPLICATES, &jerr, NULL);
        if (!json_is_object(msg)) {
                json_decref(msg);
                fail(reply, CONNECT_INVALID_ARGUMENT, "the request must be a JSON object");
                return -EINVAL;
        }
        *ret = msg;
        return 0;
}

static void list(struct e2b_call *c, struct e2b_reply *reply)
{
        json_t *procs = json_array();
        pthread_mutex_lock(&c->box->lock);
        for (struct e2b_proc *p = c->box->procs; procs && p; p = p->next) {
                json_t *info = json_pack("{s:O, s:i}", "config", p->config, "pid", (int)p->pid);
                if (info && p->tag)
                        json_object_set_new(info, "tag", json_string(p->tag));
                json_array_append_new(procs, info);
        }
        pthread_mutex_unlock(&c->box->lock);
        reply->status = 200;
        reply->json = json_pack("{s:o}", "processes", procs ? procs : json_array());
}

/* The command a unary request's "process" selector names, referenced; or
 * NULL with the error answered. */
static struct e2b_proc *proc_of_message(struct e2b_call *c, struct e2b_reply *reply,
                                        json_t **ret_msg)
{
        json_t *msg = NULL;
        if (unary_message(c, reply, &msg) < 0)
                return NULL;
        struct e2b_proc *p = find(c->box, json_object_get(msg, "process"));
        if (!p) {
                json_decref(msg);
                fail(reply, CONNECT_NOT_FOUND, "no such process");
                return NULL;
        }
        *ret_msg = msg;
        return p;
}

static void send_signal(struct e2b_call *c, struct e2b_reply *reply)
{
        json_auto_t *msg = NULL;
        struct e2b_proc *p = proc_of_message(c, reply, &msg);
        if (!p)
                return;
        (void)!write(p->cancel[1], "k", 1);
        proc_unref(p);
        reply->status = 200;
        reply->json = json_object();
}

/* CloseStdin: the command reads EOF (a command without stdin has it already). */
static void close_stdin(struct e2b_call *c, struct e2b_reply *reply)
{
        json_auto_t *msg = NULL;
        struct e2b_proc *p = proc_of_message(c, reply, &msg);
        if (!p)
                return;
        pthread_mutex_lock(&p->stdin_lock);
        if (p->stdin_w >= 0) {
                close(p->stdin_w);
                p->stdin_w = -1;
        }
        pthread_mutex_unlock(&p->stdin_lock);
        proc_unref(p);
        reply->status = 200;
        reply->json = json_object();
}

/* Writes all of data to fd (non-blocking), waiting up to STDIN_WAIT_MS for
 * room: 0, -EAGAIN (the command does not read), -EPIPE (it closed its stdin). */
static int write_input(int fd, const char *data, size_t len)
{
        int r = write_all_until(fd, data, len, clock_mono_ms() + STDIN_WAIT_MS);
        return r == -ETIMEDOUT ? -EAGAIN : r;
}

static void send_input(struct e2b_call *c, struct e2b_reply *reply)
{
        json_auto_t *msg = NULL;
        if (unary_message(c, reply, &msg) < 0)
                return;
        const json_t *input = json_object_get(msg, "input");
        const json_t *data = json_object_get(input, "stdin");
        if (json_object_get(input, "pty"))
                return fail(reply, CONNECT_UNIMPLEMENTED, "codecage does not offer PTYs");
        _cleanup_free_ void *bytes = NULL;
        size_t len = 0;
        if (!json_is_string(data) ||
            (json_string_length(data) &&
             cage_base64_decode(json_string_value(data), json_string_length(data), &bytes, &len) <
                     0))
                return fail(reply, CONNECT_INVALID_ARGUMENT, "input.stdin: base64 bytes");
        struct e2b_proc *p = find(c->box, json_object_get(msg, "process"));
        if (!p)
                return fail(reply, CONNECT_NOT_FOUND, "no such process");
        /* Not p->lock: the command's output is broadcast under it, and a
         * command blocked writing its output reads no more input. */
        pthread_mutex_lock(&p->stdin_lock);
        int r = p->stdin_w < 0 ? -EBADF : write_input(p->stdin_w, bytes, len);
        pthread_mutex_unlock(&p->stdin_lock);
        proc_unref(p);
        if (r == -EBADF)
                return fail(reply, CONNECT_FAILED_PRECONDITION,
                            "the command has no stdin: start it with stdin, and before "
                            "closing it");
        if (r == -EAGAIN)
                return fail(reply, CONNECT_RESOURCE_EXHAUSTED,
                            "the command does not read its stdin: its pipe is full");
        if (r < 0)
                return fail(reply, CONNECT_FAILED_PRECONDITION, "the command closed its stdin");
        reply->status = 200;
        reply->json = json_object();
}

static void connect_proc(struct e2b_call *c, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_auto_t *msg = NULL;
        if (!e2b_connect_is_stream(c->conn))
                return fail(reply, CONNECT_INVALID_ARGUMENT, "Connect is a server stream");
        if (e2b_connect_stream_message(c->body, c->body_len, &msg, &err) < 0)
                return fail_stream(reply, CONNECT_INVALID_ARGUMENT, err.message);
        struct e2b_proc *p = find(c->box, json_object_get(msg, "process"));
        if (!p)
                return fail_stream(reply, CONNECT_NOT_FOUND, "no such process");
        int r = attach(c, p, reply);
        if (r == -EAGAIN)
                fail_stream(reply, CONNECT_RESOURCE_EXHAUSTED,
                            "too many streams are attached to this command already");
        else if (r == -ENOENT)
                fail_stream(reply, CONNECT_NOT_FOUND, "no such process: it has ended");
        else if (r < 0)
                fail_stream(reply, CONNECT_INTERNAL, "cannot attach to the command");
        proc_unref(p);
}

int e2b_process(struct e2b_call *c, struct e2b_reply *reply)
{
        static const struct e2b_method methods[] = {
                {"Start", start, NULL},
                {"List", list, NULL},
                {"SendSignal", send_signal, NULL},
                {"CloseStdin", close_stdin, NULL},
                {"Connect", connect_proc, NULL},
                {"SendInput", send_input, NULL},
                {"StreamInput", NULL,
                 "codecage does not offer StreamInput: send input with "
                 "SendInput"},
                {"Update", NULL, "codecage does not offer PTYs"},
        };
        if (strcmp(c->path, "/health") == 0 && strcmp(c->method, "GET") == 0) {
                reply->status = 204;
                return 0;
        }
        return e2b_connect_dispatch(c, reply, "/process.Process/", methods,
                                    sizeof(methods) / sizeof(methods[0]));
}

void e2b_process_end_all(struct e2b_box *box)
{
        pthread_mutex_lock(&box->lock);
        for (struct e2b_proc *p = box->procs; p; p = p->next)
                (void)!write(p->cancel[1], "k", 1);
        pthread_mutex_unlock(&box->lock);
}
