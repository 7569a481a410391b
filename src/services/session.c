/* Python sessions; see session.h and docs/SESSION-PROTOCOL.md.
 *
 * The channel is non-blocking on our side. Frames to the driver are
 * written whole (with a deadline); frames from it are assembled by a small
 * reader fed whenever the channel is readable, so one poll loop can serve
 * the channel, the driver's stdout and stderr, the cancel fd and the
 * deadline together. */
#include "session.h"
#include "session_frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/output.h"
#include "core/result_json.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define DRAIN_MAX (1 << 20) /* bytes of stray output dropped at once (drain_fd) */

extern const char cage_session_driver[];
extern const char cage_session_driver_end[];
extern const char cage_session_driver_pyc[];
extern const char cage_session_driver_pyc_end[];

/* What `python3 -I -c` runs: it reads the driver from the channel — its
 * bytecode (a .pyc header + marshal) and its source, each after a length —
 * and runs the bytecode when the header carries this interpreter's
 * MAGIC_NUMBER, else compiles the source. Compiling in the session costs
 * it ~2 MiB that stay (the parser's arenas), so the build compiles once. */
static const char driver_boot[] = "import marshal, os\n"
                                  "def boot_read(n):\n"
                                  "    b = bytearray()\n"
                                  "    while len(b) < n:\n"
                                  "        c = os.read(3, n - len(b))\n"
                                  "        if not c:\n"
                                  "            os._exit(2)\n"
                                  "        b += c\n"
                                  "    return bytes(b)\n"
                                  "h = boot_read(8)\n"
                                  "pyc = boot_read(int.from_bytes(h[:4], 'big'))\n"
                                  "src = boot_read(int.from_bytes(h[4:], 'big'))\n"
                                  "import _frozen_importlib_external as fie\n"
                                  "if pyc[:4] == fie.MAGIC_NUMBER:\n"
                                  "    code = marshal.loads(pyc[16:])\n"
                                  "else:\n"
                                  "    code = compile(src, '<string>', 'exec')\n"
                                  "del boot_read, h, pyc, src, fie, marshal\n"
                                  "exec(code)\n";

struct cage_session {
        struct cage_box *box;
        struct cage_box_proc *proc;
        int chan;
        uint32_t cell;
        bool dead;
        struct session_frame_reader rd;
        uint64_t cpu_ms;    /* the driver's CPU time at the end of the last call */
        uint64_t oom_kills; /* the sandbox's OOM kills when that was read last */
};

/* ---- frames ---- */

/* -E2BIG: larger than a frame; -ELOOP: a value in msg nests deeper than
 * the driver reads (SESSION_DEPTH_MAX). Either way nothing was written. */
static int send_frame(struct cage_session *s, json_t *msg, const void *blob, size_t blob_len,
                      uint64_t deadline)
{
        if (session_nests_deeper(msg, SESSION_DEPTH_MAX + 1)) /* + 1: the frame's own object */
                return -ELOOP;
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        if (len > SESSION_JSON_MAX || blob_len > SESSION_TEXT_MAX)
                return -E2BIG; /* nothing written: the channel is still fine */
        /* Header and JSON in one write: one wakeup of the driver, not two. */
        _cleanup_free_ char *head = malloc(8 + len);
        if (!head)
                return -ENOMEM;
        uint32_t hdr[2] = {htonl((uint32_t)len), htonl((uint32_t)blob_len)};
        memcpy(head, hdr, 8);
        memcpy(head + 8, text, len);
        int r = write_all_until(s->chan, head, 8 + len, deadline);
        if (r == 0 && blob_len)
                r = write_all_until(s->chan, blob, blob_len, deadline);
        if (r < 0)
                s->dead = true; /* a frame cut in half: the channel is unusable */
        return r;
}

/* Reads what is there. 1: *ret is a complete message; 0: not yet; < 0:
 * the channel is closed or broke the protocol (-E2BIG: a whole frame was
 * read but would take more than SESSION_PARSE_MAX to hold). */
static int read_frame(struct cage_session *s, json_t **ret)
{
        struct session_frame_reader *rd = &s->rd;
        for (;;) {
                char *dst;
                size_t want = session_frame_want(rd, &dst);
                if (want == 0)
                        break;
                ssize_t n = recv(s->chan, dst, want, 0);
                if (n == 0)
                        return -EPIPE;
                if (n < 0)
                        return errno == EAGAIN ? 0 : errno == EINTR ? 0 : -errno;
                int r = session_frame_got(rd, (size_t)n);
                if (r < 0)
                        return r;
        }
        int r = session_frame_take(rd, ret);
        return r < 0 ? r : 1;
}

static const char *op_of(const json_t *msg)
{
        return json_string_value(json_object_get(msg, "op"));
}

/* Waits for one frame (no output handling: for short exchanges). */
static int wait_frame(struct cage_session *s, uint64_t deadline, json_t **ret)
{
        for (;;) {
                int r = read_frame(s, ret);
                if (r != 0)
                        return r;
                struct pollfd p = {.fd = s->chan, .events = POLLIN};
                int n = poll(&p, 1, clock_poll_ms_until(deadline));
                if (n == 0)
                        return -ETIMEDOUT;
        }
}

/* ---- start ---- */

/* Drops what the driver's stdout or stderr holds outside a run, at most
 * DRAIN_MAX bytes: a process of the sandbox writing without end must not
 * keep the caller (who holds the session) reading. */
static void drain_fd(int fd)
{
        char buf[4096];
        for (size_t n = 0; fd >= 0 && n < DRAIN_MAX / sizeof(buf); n++)
                if (read(fd, buf, sizeof(buf)) <= 0)
                        return;
}

/* Why the driver never said "ready": no python3 in the image is the
 * caller's to fix (-ENOEXEC); anything else is ours. */
static int start_failed(struct cage_session *s, int r, struct cage_error *err)
{
        int e = cage_box_proc_exec_errno(s->proc);
        if (e == ENOENT || e == EACCES || e == ENOEXEC)
                return cage_fail_plain(err, -ENOEXEC,
                                       "python3 is not in this sandbox's image (not found on its "
                                       "PATH): Python needs an image with python3 3.8 or newer");
        return cage_fail(err, r, "the Python session did not start");
}

/* The driver's bytecode and source, for driver_boot. */
static int send_driver(int chan, uint64_t deadline)
{
        size_t pyc_len = (size_t)(cage_session_driver_pyc_end - cage_session_driver_pyc);
        size_t src_len = (size_t)(cage_session_driver_end - cage_session_driver);
        uint32_t hdr[2] = {htonl((uint32_t)pyc_len), htonl((uint32_t)src_len)};
        int r = write_all_until(chan, hdr, sizeof(hdr), deadline);
        if (r == 0)
                r = write_all_until(chan, cage_session_driver_pyc, pyc_len, deadline);
        if (r == 0)
                r = write_all_until(chan, cage_session_driver, src_len, deadline);
        return r;
}

/* Waits for the driver's "ready", then takes the CPU time and OOM kills
 * so far as the session's starting point. Frees s on failure. */
static int wait_ready(struct cage_session *s, struct cage_session **ret, struct cage_error *err)
{
        json_t *ready = NULL;
        int r = wait_frame(s, clock_mono_ms() + SESSION_START_MS, &ready);
        if (r == 0 && strcmp(op_of(ready), "ready") != 0)
                r = -EPROTO;
        if (r < 0)
                r = start_failed(s, r, err);
        json_decref(ready);
        if (r < 0) {
                cage_session_free(s);
                return r;
        }
        drain_fd(cage_box_proc_stdout(s->proc));
        drain_fd(cage_box_proc_stderr(s->proc));
        struct cage_box_usage u;
        if (cage_box_proc_usage(s->proc, &u, true) == 0) {
                s->cpu_ms = u.cpu_ms;
                s->oom_kills = u.oom_kills;
        }
        *ret = s;
        return 0;
}

int cage_session_adopt(struct cage_box *box, struct cage_box_proc *driver, int chan,
                       struct cage_session **ret, struct cage_error *err)
{
        struct cage_session *s = calloc(1, sizeof(*s));
        if (!s) {
                cage_box_proc_free(driver);
                close(chan);
                return cage_fail(err, -ENOMEM, "session");
        }
        s->box = box;
        s->proc = driver;
        s->chan = chan;
        fd_set_nonblock(s->chan, true);
        return wait_ready(s, ret, err);
}

int cage_session_start(struct cage_box *box, char *const *env, struct cage_session **ret,
                       struct cage_error *err)
{
        char *argv[] = {"python3", "-I", "-c", (char *)driver_boot, NULL};
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return cage_fail(err, -errno, "session channel");
        struct cage_session *s = calloc(1, sizeof(*s));
        if (!s) {
                close(sv[0]);
                close(sv[1]);
                return cage_fail(err, -ENOMEM, "session");
        }
        s->box = box;
        s->chan = sv[0];
        fd_set_nonblock(s->chan, true);
        struct cage_exec ex = {.argv = argv, .env = env, .timeout_ms = SESSION_START_MS};
        int r = cage_box_spawn(box, &ex, sv[1], &s->proc, err);
        close(sv[1]);
        if (r == 0 && (r = send_driver(s->chan, clock_mono_ms() + SESSION_START_MS)) < 0)
                r = start_failed(s, r, err);
        if (r < 0) {
                cage_session_free(s);
                return r;
        }
        return wait_ready(s, ret, err);
}

const char *cage_session_driver_source(size_t *len)
{
        *len = (size_t)(cage_session_driver_end - cage_session_driver);
        return cage_session_driver;
}

const void *cage_session_driver_bytecode(size_t *len)
{
        *len = (size_t)(cage_session_driver_pyc_end - cage_session_driver_pyc);
        return cage_session_driver_pyc;
}

void cage_session_park(struct cage_session *s)
{
        if (s)
                cage_box_proc_park(s->proc, &s->chan);
}

/* Every use of a session starts here: a parked session takes its fds back
 * (its channel with them); one that cannot is gone. */
bool cage_session_alive(struct cage_session *s)
{
        if (cage_box_proc_unpark(s->proc) < 0 || s->chan < 0)
                s->dead = true;
        return !s->dead && !cage_box_proc_exited(s->proc, NULL);
}

struct cage_session *cage_session_free(struct cage_session *s)
{
        if (!s)
                return NULL;
        (void)cage_box_proc_unpark(s->proc); /* the channel back, to be closed below */
        cage_box_proc_free(s->proc);
        if (s->chan >= 0)
                close(s->chan);
        session_frame_reset(&s->rd);
        free(s);
        return NULL;
}

/* ---- request / answer ---- */

int cage_session_request(struct cage_session *s, json_t *msg, const void *blob, size_t blob_len,
                         uint64_t timeout_ms, json_t **ret, struct cage_error *err)
{
        uint64_t deadline = clock_mono_ms() + timeout_ms;
        json_t *answer = NULL;
        if (!cage_session_alive(s))
                return cage_fail(err, -ESRCH, "the Python session is gone");
        int r = send_frame(s, msg, blob, blob_len, deadline);
        if (r == -E2BIG)
                return cage_fail(err, r, "the value is larger than %d bytes of JSON",
                                 SESSION_JSON_MAX);
        if (r == -ELOOP)
                return cage_fail(err, -EINVAL,
                                 "the value nests arrays and objects more than %d deep",
                                 SESSION_DEPTH_MAX);
        if (r == 0)
                r = wait_frame(s, deadline, &answer);
        if (r == -E2BIG) /* read whole and dropped: the channel is still in step */
                return cage_fail(err, -E2BIG,
                                 "the Python session's answer would take more than %d MiB of "
                                 "memory to read (a value made of millions of small objects)",
                                 SESSION_PARSE_MAX >> 20);
        if (r < 0) {
                s->dead = true;
                return cage_fail(err, r == -ETIMEDOUT ? -ETIMEDOUT : -ESRCH,
                                 "the Python session did not answer");
        }
        drain_fd(cage_box_proc_stdout(s->proc));
        drain_fd(cage_box_proc_stderr(s->proc));
        if (strcmp(op_of(answer), "error") == 0) {
                const char *m = json_string_value(json_object_get(answer, "message"));
                const char *type = json_string_value(json_object_get(answer, "type"));
                bool missing = type && strcmp(type, "FileNotFoundError") == 0;
                r = cage_fail(err, missing ? -ENOENT : -EINVAL, "%s", m ? m : "error");
                json_decref(answer);
                return r;
        }
        *ret = answer;
        return 0;
}

/* ---- run ---- */

struct run_state {
        struct cage_session *s;
        const struct cage_session_run *run;
        struct output_capture out, errc;
        uint64_t deadline, grace_deadline;
        json_t *done;
        bool interrupted, flooded, cancelled, lost;
        bool oversized; /* lost to a frame too costly to read */
        uint32_t host_calls;
};

static void read_output(struct run_state *st, int fd, int stream)
{
        char buf[65536];
        for (int i = 0; i < 16 && fd >= 0; i++) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0)
                        return;
                output_capture_feed(stream == 1 ? &st->out : &st->errc, buf, (size_t)n);
                if (st->run->on_output &&
                    st->run->on_output(st->run->on_output_ctx, stream, buf, (size_t)n))
                        st->cancelled = true;
                uint64_t stop = st->run->output_stop_bytes;
                if (stop && st->out.total + st->errc.total > stop)
                        st->flooded = true;
        }
}

/* Whether the run offers host function fn: llm_query, llm_query_batched,
 * tools.NAME (the driver's `tools` object) or a name the run lists. */
static bool offered(const struct cage_session_run *run, const char *fn)
{
        size_t i;
        json_t *name;
        if (strcmp(fn, "llm_query") == 0 || strcmp(fn, "llm_query_batched") == 0)
                return true;
        if (strncmp(fn, "tools.", 6) == 0 && fn[6])
                return true;
        json_array_foreach(run->functions, i, name)
        {
                if (json_is_string(name) && strcmp(json_string_value(name), fn) == 0)
                        return true;
        }
        return false;
}

/* Whether the host must not see this call: then why is the message for
 * the code's HostCallError. The driver checks all of it before it sends a
 * call; the code can write frames of its own, so the server checks again.
 * A call within the budget counts against it, granted or not, as in the
 * driver. */
static bool refused(struct run_state *st, const json_t *call, char *why, size_t size)
{
        const json_t *fnj = json_object_get(call, "fn");
        const char *fn = json_string_value(fnj);
        const json_t *args = json_object_get(call, "args");
        const json_t *kwargs = json_object_get(call, "kwargs");
        uint32_t budget = st->run->host_budget ? st->run->host_budget : SESSION_HOST_BUDGET;
        if (!fn || strlen(fn) != json_string_length(fnj) ||
            !json_is_integer(json_object_get(call, "id")) || (args && !json_is_array(args)) ||
            (kwargs && !json_is_object(kwargs)))
                snprintf(why, size, "malformed host call");
        else if (json_string_length(fnj) > SESSION_FN_MAX)
                snprintf(why, size, "a host function's name has at most %d bytes", SESSION_FN_MAX);
        else if (st->host_calls >= budget)
                snprintf(why, size, "host call budget of %u calls for this run is spent", budget);
        else if (st->host_calls++, !offered(st->run, fn))
                snprintf(why, size, "%s is not a host function of this run", fn);
        else if (session_nests_deeper(call, SESSION_DEPTH_MAX)) /* the frame is one level */
                snprintf(why, size, "%s: the arguments nest arrays and objects more than %d deep",
                         fn, SESSION_DEPTH_MAX);
        else if (!st->run->host)
                snprintf(why, size, "no host functions are available to this session");
        else
                return false;
        return true;
}

/* How long a reply may take to write: the driver reads it at once, so not
 * past the run's end (its deadline and grace) and at most 10 s. */
static uint64_t reply_deadline(const struct run_state *st)
{
        uint64_t now = clock_mono_ms();
        uint64_t grace = st->run->grace_ms ? st->run->grace_ms : SESSION_GRACE_MS;
        uint64_t end = st->interrupted ? st->grace_deadline : st->deadline + grace;
        if (end < now + grace)
                end = now + grace;
        return end < now + 10000 ? end : now + 10000;
}

/* Sends the host_reply to call id: value (taken; NULL: null) or error. */
static void send_reply(struct run_state *st, json_t *id, json_t *value, const char *error)
{
        json_t *reply;
        if (error)
                reply = json_pack("{s:s, s:O, s:s}", "op", "host_reply", "id", id, "error", error);
        else
                reply = json_pack("{s:s, s:O, s:o}", "op", "host_reply", "id", id, "value",
                                  value ? value : json_null());
        int r = reply ? send_frame(st->s, reply, NULL, 0, reply_deadline(st)) : -ENOMEM;
        if (r == -E2BIG || r == -ELOOP) { /* the code gets an error instead */
                json_decref(reply);
                reply = json_pack("{s:s, s:O, s:s}", "op", "host_reply", "id", id, "error",
                                  r == -E2BIG ? "the host's answer is larger than the session "
                                                "channel allows"
                                              : "the host's answer nests arrays and objects deeper "
                                                "than the session channel allows");
                r = reply ? send_frame(st->s, reply, NULL, 0, reply_deadline(st)) : -ENOMEM;
        }
        if (r < 0)
                st->lost = true;
        json_decref(reply);
}

/* Answers one host_call; returns the milliseconds the host took, which do
 * not count against the code (writing the reply does). A call without an
 * integer id cannot be answered: the session is lost. */
static uint64_t answer_host_call(struct run_state *st, json_t *call)
{
        json_t *value = NULL;
        char *error = NULL, why[SESSION_FN_MAX + 128];
        uint64_t t0 = clock_mono_ms();
        if (refused(st, call, why, sizeof(why))) {
                error = strdup(why);
        } else {
                const char *fn = json_string_value(json_object_get(call, "fn"));
                json_t *args = json_object_get(call, "args");
                json_t *kwargs = json_object_get(call, "kwargs");
                if (st->run->host(st->run->host_ctx, fn, args, kwargs, &value, &error) < 0 &&
                    !error)
                        error = strdup("host call failed");
        }
        uint64_t spent = clock_mono_ms() - t0;
        json_t *id = json_object_get(call, "id");
        if (error || !json_is_integer(id)) {
                json_decref(value);
                value = NULL;
        }
        if (json_is_integer(id))
                send_reply(st, id, value, error); /* takes value */
        else
                st->lost = true;
        free(error);
        return spent;
}

static void on_channel(struct run_state *st)
{
        json_t *msg = NULL;
        int r = read_frame(st->s, &msg);
        if (r < 0) {
                st->lost = true;
                st->oversized = r == -E2BIG;
                return;
        }
        if (r == 0)
                return;
        const char *op = op_of(msg);
        if (strcmp(op, "done") == 0) {
                st->done = msg;
                return;
        }
        if (strcmp(op, "host_call") == 0)
                st->deadline += answer_host_call(st, msg); /* the host's time is not the code's */
        else
                st->lost = true; /* nothing else is allowed during a run */
        json_decref(msg);
}

static void interrupt(struct run_state *st)
{
        if (st->interrupted)
                return;
        st->interrupted = true;
        cage_box_proc_signal(st->s->proc, SIGINT);
        uint64_t grace = st->run->grace_ms ? st->run->grace_ms : SESSION_GRACE_MS;
        st->grace_deadline = clock_mono_ms() + grace;
}

static void watch(struct run_state *st)
{
        struct cage_session *s = st->s;
        int cancel_fd = st->run->cancel_fd;
        while (!st->done && !st->lost) {
                uint64_t until = st->interrupted ? st->grace_deadline : st->deadline;
                struct pollfd p[5] = {
                        {.fd = s->chan, .events = POLLIN},
                        {.fd = cage_box_proc_stdout(s->proc), .events = POLLIN},
                        {.fd = cage_box_proc_stderr(s->proc), .events = POLLIN},
                        {.fd = cage_box_proc_status_fd(s->proc), .events = POLLIN},
                        {.fd = st->cancelled ? -1 : cancel_fd, .events = POLLIN},
                };
                int n = poll(p, 5, clock_poll_ms_until(until));
                if (n < 0 && errno != EINTR)
                        break;
                if (p[1].revents)
                        read_output(st, p[1].fd, 1);
                if (p[2].revents)
                        read_output(st, p[2].fd, 2);
                if (p[0].revents)
                        on_channel(st);
                if (p[4].revents)
                        st->cancelled = true;
                if (p[3].revents && cage_box_proc_exited(s->proc, NULL) && !st->done)
                        st->lost = true;
                if (st->cancelled || st->flooded || clock_mono_ms() >= st->deadline)
                        interrupt(st);
                if (st->interrupted && clock_mono_ms() >= st->grace_deadline && !st->done)
                        st->lost = true;
        }
        /* What the code wrote before `done` is in the pipes already. */
        read_output(st, cage_box_proc_stdout(s->proc), 1);
        read_output(st, cage_box_proc_stderr(s->proc), 2);
}

static enum cage_status verdict(const struct run_state *st, char *reason, size_t size)
{
        if (st->cancelled) {
                snprintf(reason, size, "cancelled");
                return CAGE_STATUS_CANCELLED;
        }
        if (st->flooded) {
                snprintf(reason, size, "stopped after writing more than %llu bytes of output",
                         (unsigned long long)st->run->output_stop_bytes);
                return CAGE_STATUS_OUTPUT_LIMIT;
        }
        if (st->interrupted) {
                snprintf(reason, size, "wall-clock timeout of %llu ms reached%s",
                         (unsigned long long)st->run->timeout_ms,
                         st->lost ? "; the code ignored the interrupt, so the session was "
                                    "restarted and its variables are lost"
                                  : "; the code was interrupted and the session's variables "
                                    "are kept");
                return CAGE_STATUS_TIMEOUT;
        }
        if (st->lost && st->oversized) {
                snprintf(reason, size,
                         "the Python process sent a message that would take more than %d MiB "
                         "of the server's memory to read (millions of small objects): the "
                         "session was restarted and its variables are lost",
                         SESSION_PARSE_MAX >> 20);
                return CAGE_STATUS_ERROR;
        }
        if (st->lost) {
                snprintf(reason, size,
                         "the Python process ended (os._exit, a crash, or out "
                         "of memory): the session was restarted and its "
                         "variables are lost");
                return CAGE_STATUS_ERROR;
        }
        const char *status = json_string_value(json_object_get(st->done, "status"));
        return status && strcmp(status, "ok") == 0 ? CAGE_STATUS_OK : CAGE_STATUS_ERROR;
}

/* The kernel's OOM killer killed something in the sandbox during the call:
 * the run is oom, whether the driver itself died (its variables are lost)
 * or only a process it started did. */
static void judge_oom(struct run_state *st, struct cage_result *res, uint64_t oom_kills)
{
        struct cage_session *s = st->s;
        uint64_t killed = oom_kills > s->oom_kills ? oom_kills - s->oom_kills : 0;
        s->oom_kills = oom_kills;
        if (!killed || (res->status != CAGE_STATUS_OK && res->status != CAGE_STATUS_ERROR))
                return;
        res->status = CAGE_STATUS_OOM;
        snprintf(res->reason, sizeof(res->reason), "%s",
                 st->lost ? "out of memory: the session was restarted and its variables are lost"
                          : "out of memory: the kernel killed a process the code started; the "
                            "session's variables are kept");
}

/* The driver's exit_code (what python3 running the cell as a script would
 * exit with), 0..255; null when the driver did not finish the run itself: a
 * timeout's interrupt or a lost process ends it the way a killed process
 * ends, without an exit status. */
static json_t *exit_code_of(const struct run_state *st)
{
        const json_t *code = st->done ? json_object_get(st->done, "exit_code") : NULL;
        if (st->interrupted || st->lost || !json_is_integer(code))
                return json_null();
        json_int_t v = json_integer_value(code);
        return v >= 0 && v <= 255 ? json_integer(v) : json_null();
}

static json_t *build_result(struct run_state *st, uint64_t t0)
{
        struct cage_result res = {.exit_code = -1};
        struct cage_box_usage u = {0};
        struct cage_session *s = st->s;
        res.status = verdict(st, res.reason, sizeof(res.reason));
        (void)cage_box_proc_usage(s->proc, &u, true);
        res.cpu_ms = u.cpu_ms >= s->cpu_ms ? u.cpu_ms - s->cpu_ms : 0;
        s->cpu_ms = u.cpu_ms;
        res.peak_memory_bytes = u.memory_bytes;
        res.limits_backend = cage_box_limits_backend(s->box);
        judge_oom(st, &res, u.oom_kills);
        res.duration_ms = clock_mono_ms() - t0;
        if (output_capture_finish(&st->out, &res.out) < 0 ||
            output_capture_finish(&st->errc, &res.err) < 0) {
                cage_result_free(&res);
                return NULL;
        }
        json_t *o = cage_result_to_json_object(&res);
        cage_result_free(&res);
        if (!o)
                return NULL;
        json_object_set_new(o, "exit_code", exit_code_of(st));
        json_object_set_new(o, "state_lost", json_boolean(st->lost));
        json_object_set_new(o, "host_calls", json_integer(st->host_calls));
        session_copy_done(o, st->done, SESSION_RETURN_MAX);
        if (st->interrupted && !st->lost && json_is_null(json_object_get(o, "error")))
                json_object_set_new(o, "error",
                                    json_pack("{s:s,s:s,s:s}", "type", "KeyboardInterrupt",
                                              "message", "interrupted", "traceback", ""));
        return o;
}

static json_t *run_message(struct cage_session *s, const struct cage_session_run *run)
{
        json_t *msg = json_pack("{s:s, s:s%, s:i, s:i, s:i}", "op", "run", "code", run->code,
                                run->code_len, "cell", (int)++s->cell, "return_max",
                                SESSION_RETURN_MAX, "host_budget",
                                (int)(run->host_budget ? run->host_budget : SESSION_HOST_BUDGET));
        if (msg && run->functions)
                json_object_set(msg, "functions", run->functions);
        if (msg && run->env)
                json_object_set(msg, "env", run->env);
        return msg;
}

int cage_session_run(struct cage_session *s, const struct cage_session_run *run, json_t **ret,
                     struct cage_error *err)
{
        struct run_state st = {.s = s, .run = run};
        if (run->code_len > SESSION_CODE_MAX)
                return cage_fail(err, -E2BIG, "code: more than %d bytes", SESSION_CODE_MAX);
        if (!cage_session_alive(s))
                return cage_fail(err, -ESRCH, "the Python session is gone");
        uint64_t t0 = clock_mono_ms();
        st.deadline = t0 + run->timeout_ms;
        if (output_capture_init(&st.out, run->output_max_bytes) < 0 ||
            output_capture_init(&st.errc, run->output_max_bytes) < 0) {
                output_capture_free(&st.out);
                return cage_fail(err, -ENOMEM, "output buffers");
        }
        json_t *msg = run_message(s, run);
        int r = msg ? send_frame(s, msg, NULL, 0, st.deadline) : -ENOMEM;
        json_decref(msg);
        if (r < 0)
                st.lost = true;
        else
                watch(&st);
        if (st.lost)
                s->dead = true;
        *ret = build_result(&st, t0);
        json_decref(st.done);
        output_capture_free(&st.out);
        output_capture_free(&st.errc);
        return *ret ? 0 : cage_fail(err, -ENOMEM, "result");
}
