/* One exec in a long-lived sandbox (see box.h, box_proto.h): send the
 * request, place the new process in a cgroup of its own, then watch it
 * (watch.c: output, stdin, deadline, cancellation, as for a one-shot run)
 * and judge the result (verdict.c, the same rules). The exec's cgroup is removed at the end, which
 * kills whatever the exec left running. Without a cgroup backend its session's process group is
 * killed instead (a process that calls setsid() escapes that; doctor says so). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "box_private.h"
#include "box_proto.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdpark.h"
#include "util/fdutil.h"
#include "verdict.h"
#include "watch.h"

#define STARTED_TIMEOUT_MS 10000
#define PEAK_MARGIN_BYTES  (1u << 20)

_Static_assert(BOX_FD_MAX <= FD_SEND_MAX, "an exec's fds go in one fd_send()");

struct exec_state {
        struct cage_box *box;
        const struct cage_exec *ex;
        uint32_t id;
        struct watch w;        /* stdout, stderr, stdin and the limits */
        int status_r, go_w;    /* our ends of init's status and go pipes */
        int child[BOX_FD_MAX]; /* the exec's ends, sent to init */
        int n_child;           /* BOX_FD_COUNT, or BOX_FD_MAX with a channel */
        struct cage_cgroup *cg;
        pid_t inner_pid, host_pid;
        uint64_t oom_before;
        bool exited, exec_failed, setup_failed, box_died;
        bool adopted; /* a zygote's driver: in the box's own cgroup */
        int wait_status, fail_errno;
        struct cgroup_stats stats;
};

/* The exec's own cgroup (NULL: none), opened again when it was parked
 * (cage_box_proc_park). */
static struct cage_cgroup *exec_cgroup(struct exec_state *st)
{
        pthread_mutex_lock(&st->box->lock);
        (void)cage_cgroup_unpark(st->cg);
        pthread_mutex_unlock(&st->box->lock);
        return st->cg;
}

/* ---- the request ---- */

static bool env_key_in(char *const *env, const char *entry)
{
        size_t klen = strcspn(entry, "=") + 1;
        for (size_t i = 0; env && env[i]; i++)
                if (strncmp(env[i], entry, klen) == 0)
                        return true;
        return false;
}

static bool append(char *buf, size_t *len, const char *s)
{
        size_t n = strlen(s) + 1;
        if (*len + n > BOX_EXEC_BLOB_MAX)
                return false;
        memcpy(buf + *len, s, n);
        *len += n;
        return true;
}

/* Header + argv + env (the sandbox's, with the exec's winning) + cwd. */
static int build_request(struct exec_state *st, char *msg, size_t *ret_len, struct cage_error *err)
{
        struct box_exec_request h = {.kind = BOX_REQ_EXEC, .exec_id = st->id};
        char *blob = msg + sizeof(h);
        size_t len = 0;
        bool ok = true;
        for (char *const *a = st->ex->argv; *a && ok; a++, h.argc++)
                ok = append(blob, &len, *a);
        for (char *const *e = st->box->envp; *e && ok; e++)
                if (!env_key_in(st->ex->env, *e))
                        ok = append(blob, &len, *e), h.envc++;
        for (size_t i = 0; st->ex->env && st->ex->env[i] && ok; i++, h.envc++)
                ok = append(blob, &len, st->ex->env[i]);
        ok = ok && append(blob, &len, st->ex->cwd ? st->ex->cwd : st->box->workdir);
        if (!ok || h.argc + h.envc > BOX_EXEC_ARGS_MAX)
                return cage_fail(err, -E2BIG, "argv and env together exceed %d bytes or %d entries",
                                 BOX_EXEC_BLOB_MAX, BOX_EXEC_ARGS_MAX);
        h.blob_len = (uint32_t)len;
        memcpy(msg, &h, sizeof(h));
        *ret_len = sizeof(h) + len;
        return 0;
}

static int make_pipes(struct exec_state *st, struct cage_error *err)
{
        int p[2];
        if (st->ex->stdin_stream) {
                st->child[BOX_FD_STDIN] = fcntl(st->ex->stdin_fd, F_DUPFD_CLOEXEC, 3);
                if (st->child[BOX_FD_STDIN] < 0)
                        return cage_fail(err, -errno, "stdin");
        } else if (st->ex->stdin_data) {
                if (pipe2(p, O_CLOEXEC) < 0)
                        return cage_fail(err, -errno, "pipe");
                st->child[BOX_FD_STDIN] = p[0];
                st->w.in_w = p[1];
                fd_set_nonblock(st->w.in_w, true);
        } else if ((st->child[BOX_FD_STDIN] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
                return cage_fail(err, -errno, "open /dev/null");
        }
        int *ours[] = {[BOX_FD_STDOUT] = &st->w.out_r,
                       [BOX_FD_STDERR] = &st->w.err_r,
                       [BOX_FD_STATUS] = &st->status_r,
                       [BOX_FD_GO] = &st->go_w};
        for (int i = BOX_FD_STDOUT; i < BOX_FD_COUNT; i++) {
                if (pipe2(p, O_CLOEXEC) < 0)
                        return cage_fail(err, -errno, "pipe");
                bool we_write = i == BOX_FD_GO;
                *ours[i] = p[we_write ? 1 : 0];
                st->child[i] = p[we_write ? 0 : 1];
        }
        fd_set_nonblock(st->w.out_r, true);
        fd_set_nonblock(st->w.err_r, true);
        return 0;
}

static int send_request(struct exec_state *st, const char *msg, size_t len, struct cage_error *err)
{
        ssize_t n = fd_send(st->box->ctl_fd, msg, len, st->child, (size_t)st->n_child);
        if (n < 0)
                return cage_fail(err, n == -EPIPE || n == -ECONNRESET ? -ESRCH : (int)n,
                                 "sending the exec to the sandbox's init");
        return 0;
}

static void signal_exec(struct exec_state *st, int sig)
{
        struct box_signal_request r = {.kind = BOX_REQ_SIGNAL, .exec_id = st->id, .signal = sig};
        pthread_mutex_lock(&st->box->lock);
        (void)!send(st->box->ctl_fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
        pthread_mutex_unlock(&st->box->lock);
}

static int submit(struct exec_state *st, struct cage_error *err)
{
        _cleanup_free_ char *msg = malloc(sizeof(struct box_exec_request) + BOX_EXEC_BLOB_MAX);
        size_t len = 0;
        if (!msg)
                return cage_fail(err, -ENOMEM, "exec request");
        int r = make_pipes(st, err);
        pthread_mutex_lock(&st->box->lock);
        st->id = ++st->box->next_exec;
        if (r == 0 && st->box->killed)
                r = cage_fail(err, -ESRCH, "the sandbox is stopped");
        if (r == 0)
                r = build_request(st, msg, &len, err);
        if (r == 0)
                r = send_request(st, msg, len, err);
        pthread_mutex_unlock(&st->box->lock);
        for (int i = 0; i < BOX_FD_MAX; i++)
                close_fd(&st->child[i]);
        return r;
}

/* ---- placing the exec ---- */

/* The innermost pid of NSpid in /proc/PID/status. */
static pid_t inner_pid_of(pid_t pid)
{
        char path[64], buf[2048];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
        char *line = n > 0 ? strstr(buf, "\nNSpid:") : NULL;
        if (!line)
                return -1;
        char *end = strchr(line + 1, '\n');
        if (end)
                *end = '\0';
        char *last = strrchr(line, '\t');
        return last ? (pid_t)strtol(last + 1, NULL, 10) : -1;
}

/* The host pid of init's child whose pid inside is `inner`. */
static pid_t find_host_pid(pid_t init, pid_t inner)
{
        char path[64], buf[16384];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)init, (int)init);
        ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
        if (n <= 0)
                return -1;
        for (char *p = buf, *end; *p; p = end) {
                long pid = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (pid > 0 && inner_pid_of((pid_t)pid) == inner)
                        return (pid_t)pid;
        }
        return -1;
}

static int read_status(struct exec_state *st, struct box_status *s)
{
        ssize_t n;
        do
                n = read(st->status_r, s, sizeof(*s));
        while (n < 0 && errno == EINTR);
        if (n == sizeof(*s))
                return 1;
        return n == 0 ? 0 : -EIO;
}

/* Waits for STARTED: the exec's pid inside. */
static int wait_started(struct exec_state *st, struct cage_error *err)
{
        struct pollfd p[2] = {{.fd = st->status_r, .events = POLLIN},
                              {.fd = st->box->l.pidfd, .events = POLLIN}};
        int n;
        do
                n = poll(p, 2, STARTED_TIMEOUT_MS);
        while (n < 0 && errno == EINTR);
        struct box_status s;
        if (n == 0)
                return cage_fail(err, -ETIMEDOUT, "the sandbox's init did not start the exec");
        if (!p[0].revents || read_status(st, &s) <= 0)
                return cage_fail(err, -ESRCH, "the sandbox's init is gone");
        if (s.kind == BOX_STATUS_SETUP_FAILED)
                return cage_fail(err, s.value == EAGAIN ? -EBUSY : -EIO,
                                 "the sandbox's init could not start the exec: %s",
                                 strerror(s.value));
        if (s.kind != BOX_STATUS_STARTED || s.value <= 1)
                return cage_fail(err, -EPROTO, "unexpected answer from the sandbox's init");
        st->inner_pid = s.value;
        return 0;
}

static int place(struct exec_state *st, struct cage_error *err)
{
        int r = wait_started(st, err);
        if (r < 0)
                return r;
        struct cage_cgroup *parent = box_cgroup(st->box);
        if (parent) {
                char leaf[32];
                st->host_pid = find_host_pid(st->box->l.pid, st->inner_pid);
                if (st->host_pid <= 0)
                        return cage_fail(err, -ESRCH, "finding the exec's process");
                snprintf(leaf, sizeof(leaf), "e%u", st->id);
                if ((r = cage_cgroup_create_child(parent, leaf, &st->cg, err)) < 0 ||
                    (r = cage_cgroup_attach(st->cg, st->host_pid, err)) < 0)
                        return r;
        }
        watch_start_clock(&st->w, st->ex->timeout_ms);
        char go = 'g';
        if (write_all(st->go_w, &go, 1) < 0)
                return cage_fail(err, -errno, "starting the exec");
        close_fd(&st->go_w);
        return 0;
}

/* ---- watching ---- */

static void on_status(struct exec_state *st)
{
        struct box_status s;
        int r = read_status(st, &s);
        if (r <= 0) {
                close_fd(&st->status_r);
                if (!st->exited) /* init closed it without a word: init is gone */
                        st->box_died = true;
                return;
        }
        if (s.kind == BOX_STATUS_EXITED) {
                st->exited = true;
                st->wait_status = s.value;
        } else if (s.kind == BOX_STATUS_EXEC_FAILED && !st->exec_failed) {
                st->exec_failed = true;
                st->fail_errno = s.value;
        } else if (s.kind == BOX_STATUS_SETUP_FAILED && !st->setup_failed) {
                st->setup_failed = true;
                st->fail_errno = s.value;
        }
}

static void on_status_ready(void *ctx)
{
        on_status(ctx);
}

static void on_box_exit(void *ctx)
{
        struct exec_state *st = ctx;
        if (!st->exited)
                st->box_died = true;
}

static bool exec_done(void *ctx)
{
        struct exec_state *st = ctx;
        return st->exited || st->box_died;
}

/* Watches until the exec ends or a limit trips; then ends whatever the
 * exec left running and reads its pipes to the end. */
static void watch_exec(struct exec_state *st)
{
        const struct watch_fd fds[] = {{&st->status_r, on_status_ready},
                                       {&st->box->l.pidfd, on_box_exit}};
        watch_loop(&st->w, fds, 2, exec_done, st);
        if (exec_cgroup(st)) {
                (void)cage_cgroup_stats(st->cg, &st->stats);
                (void)cage_cgroup_kill(st->cg);
        } else {
                signal_exec(st, SIGKILL);
        }
        watch_drain(&st->w, fds, 1, st);
}

/* ---- the verdict ---- */

/* The sandbox's OOM kills so far. Counting them is a walk of the memory
 * group's subtree on v1, so while the group's peak use is below its limit
 * (no limit OOM kill can have happened) the first count stands. A kill by
 * the host's own OOM killer (the machine out of memory) in a sandbox that
 * never reached its limit is therefore not seen. known_peak: the box's
 * peak when the caller has just read it (NULL: read it here). */
static uint64_t oom_kills_now(struct cage_box *box, const uint64_t *known_peak)
{
        struct cgroup_stats s = {0};
        uint64_t peak = 0;
        struct cage_cgroup *cg = box_cgroup(box);
        if (!cg)
                return 0;
        int got = 0;
        if (known_peak)
                peak = *known_peak;
        else
                got = cage_cgroup_memory_peak(cg, &peak);
        /* The margin covers the kernel's rounding of the limit to pages. */
        bool below = box->memory_bytes && got == 0 && peak + PEAK_MARGIN_BYTES < box->memory_bytes;
        pthread_mutex_lock(&box->lock);
        bool known = below && box->oom_counted;
        uint64_t kills = box->oom_kills;
        pthread_mutex_unlock(&box->lock);
        if (known)
                return kills;
        (void)cage_cgroup_stats(cg, &s);
        pthread_mutex_lock(&box->lock);
        box->oom_counted = true;
        box->oom_kills = s.oom_kills;
        pthread_mutex_unlock(&box->lock);
        return s.oom_kills;
}

/* The sandbox's peak memory use. It stands for an exec's on cgroup v2,
 * where sub-groups have no memory controller (the sandbox's group holds
 * its init, so it cannot enable controllers below it). */
static uint64_t box_peak_memory(struct cage_box *box, bool *ok)
{
        uint64_t peak = 0;
        struct cage_cgroup *cg = box_cgroup(box);
        bool read = cg && cage_cgroup_memory_peak(cg, &peak) == 0;
        if (ok)
                *ok = read;
        return peak;
}

static void collect_usage(struct exec_state *st, struct cage_result *res)
{
        res->cpu_ms = st->stats.cpu_usage_ns / 1000000ULL;
        res->peak_memory_bytes = st->stats.peak_memory_bytes;
        if (!res->peak_memory_bytes)
                res->peak_memory_bytes = box_peak_memory(st->box, NULL);
        res->limits_backend = launcher_limits_backend(&st->box->l);
}

static void judge(struct exec_state *st, struct cage_result *res)
{
        char launch_failure[256];
        if (st->setup_failed)
                snprintf(launch_failure, sizeof(launch_failure),
                         "the sandbox's init could not set up the exec: %s",
                         strerror(st->fail_errno));
        if (st->exec_failed) {
                char line[512];
                snprintf(line, sizeof(line), "codecage: cannot run \"%s\": %s\n", st->ex->argv[0],
                         strerror(st->fail_errno));
                watch_note(&st->w, line);
        }
        uint64_t now = oom_kills_now(st->box, NULL);
        struct verdict_facts f = {
                .launch_failure = st->setup_failed ? launch_failure : NULL,
                .cancelled = st->w.cancelled,
                .timed_out = st->w.timed_out,
                .flooded = st->w.flooded,
                .exited = st->exited,
                .wait_status = st->wait_status,
                .exec_failed = st->exec_failed,
                .exec_errno = st->fail_errno,
                .argv0 = st->ex->argv[0],
                .oom_kills = now > st->oom_before ? now - st->oom_before : 0,
                .memory_bytes = st->box->memory_bytes,
                .timeout_ms = st->ex->timeout_ms,
                .cpu_time_ms = st->box->cpu_time_ms,
                .output_stop_bytes = st->ex->output_stop_bytes,
                .gone_status = st->box->killed ? CAGE_STATUS_CANCELLED : CAGE_STATUS_INTERNAL_ERROR,
                .gone_reason =
                        st->box->killed ? "the sandbox was stopped" : "the sandbox's init ended",
        };
        collect_usage(st, res);
        verdict_judge(&f, res);
}

static void cleanup(struct exec_state *st)
{
        cage_cgroup_destroy(exec_cgroup(st));
        st->cg = NULL;
        for (int i = 0; i < BOX_FD_MAX; i++)
                close_fd(&st->child[i]);
        close_fd(&st->status_r);
        close_fd(&st->go_w);
        watch_free(&st->w);
}

static int check_exec(const struct cage_exec *ex, struct cage_error *err)
{
        if (!ex->argv || !ex->argv[0] || !ex->argv[0][0])
                return cage_fail(err, -EINVAL, "argv: at least the program is required");
        if (ex->cwd && ex->cwd[0] != '/')
                return cage_fail(err, -EINVAL, "cwd: \"%s\" is not an absolute path", ex->cwd);
        for (size_t i = 0; ex->env && ex->env[i]; i++)
                if (!strchr(ex->env[i], '=') || ex->env[i][0] == '=')
                        return cage_fail(err, -EINVAL, "env[%zu]: not NAME=VALUE", i);
        if (!ex->timeout_ms)
                return cage_fail(err, -EINVAL, "timeout: must be positive");
        return 0;
}

/* Every fd closed (-1), no channel: five fds go to init. */
static void exec_state_init(struct exec_state *st, struct cage_box *box, const struct cage_exec *ex,
                            const struct cage_run_options *opts)
{
        *st = (struct exec_state){
                .box = box, .ex = ex, .status_r = -1, .go_w = -1, .n_child = BOX_FD_COUNT};
        watch_init(&st->w, opts);
        for (int i = 0; i < BOX_FD_MAX; i++)
                st->child[i] = -1;
}

int cage_box_exec(struct cage_box *box, const struct cage_exec *ex,
                  const struct cage_run_options *opts, struct cage_result *res,
                  struct cage_error *err)
{
        struct exec_state st;
        exec_state_init(&st, box, ex, opts);
        memset(res, 0, sizeof(*res));
        int r = check_exec(ex, err);
        if (r < 0)
                return r;
        uint64_t t0 = clock_mono_ns();
        st.w.in_data = ex->stdin_stream ? NULL : ex->stdin_data;
        st.w.in_left = ex->stdin_data && !ex->stdin_stream ? ex->stdin_len : 0;
        st.w.output_stop_bytes = ex->output_stop_bytes;
        st.oom_before = oom_kills_now(box, NULL);
        if ((r = watch_capture(&st.w, ex->output_max_bytes)) < 0) {
                cleanup(&st);
                return cage_fail(err, r, "output buffers");
        }
        r = submit(&st, err);
        if (r == 0 && (r = place(&st, err)) < 0)
                signal_exec(&st, SIGKILL);
        if (r == 0)
                watch_exec(&st);
        else if (exec_cgroup(&st))
                (void)cage_cgroup_kill(st.cg);
        if (r < 0) {
                cleanup(&st);
                return r;
        }
        judge(&st, res);
        r = watch_finish(&st.w, res);
        cleanup(&st);
        res->duration_ms = (clock_mono_ns() - t0) / 1000000ULL;
        return r < 0 ? cage_fail(err, r, "collecting output") : 0;
}

/* ---- execs that outlive the call (sessions) ---- */

struct cage_box_proc {
        struct exec_state st;
        int park_fd; /* >= 0 while parked: its pipes (and *extra) are in it (fdpark.h) */
        int *extra;  /* the caller's fd parked with them, or NULL */
};

/* Takes the parked pipes back (see cage_box_proc_park); when that fails
 * they are closed, and the process counts as gone (status_r is -1). */
int cage_box_proc_unpark(struct cage_box_proc *p)
{
        if (p->park_fd < 0)
                return 0;
        int none = -1;
        int *const fds[] = {&p->st.w.out_r, &p->st.w.err_r, &p->st.status_r,
                            p->extra ? p->extra : &none};
        int r = fd_unpark(&p->park_fd, fds, 4);
        p->extra = NULL;
        return r;
}

int cage_box_spawn(struct cage_box *box, const struct cage_exec *ex, int channel_fd,
                   struct cage_box_proc **ret, struct cage_error *err)
{
        int r = check_exec(ex, err);
        if (r < 0)
                return r;
        struct cage_box_proc *p = calloc(1, sizeof(*p));
        if (!p)
                return cage_fail(err, -ENOMEM, "exec");
        p->park_fd = -1;
        struct exec_state *st = &p->st;
        exec_state_init(st, box, NULL, NULL);
        if (channel_fd >= 0) {
                st->child[BOX_FD_CHANNEL] = fcntl(channel_fd, F_DUPFD_CLOEXEC, 3);
                st->n_child = BOX_FD_MAX;
                if (st->child[BOX_FD_CHANNEL] < 0)
                        r = cage_fail(err, -errno, "dup channel");
        }
        st->ex = ex; /* only while spawning */
        if (r == 0)
                r = submit(st, err);
        if (r == 0 && (r = place(st, err)) < 0)
                signal_exec(st, SIGKILL);
        st->ex = NULL;
        close_fd(&st->w.in_w); /* stdin is /dev/null for spawned execs */
        if (r < 0) {
                cage_box_proc_free(p);
                return r;
        }
        *ret = p;
        return 0;
}

int cage_box_proc_stdout(struct cage_box_proc *p)
{
        (void)cage_box_proc_unpark(p);
        return p->st.w.out_r;
}

int cage_box_proc_stderr(struct cage_box_proc *p)
{
        (void)cage_box_proc_unpark(p);
        return p->st.w.err_r;
}

int cage_box_proc_status_fd(struct cage_box_proc *p)
{
        (void)cage_box_proc_unpark(p);
        return p->st.status_r;
}

bool cage_box_proc_exited(struct cage_box_proc *p, int *ret_wait_status)
{
        struct exec_state *st = &p->st;
        (void)cage_box_proc_unpark(p);
        struct pollfd pfd = {.fd = st->status_r, .events = POLLIN};
        while (!st->exited && !st->box_died && st->status_r >= 0 && poll(&pfd, 1, 0) == 1) {
                on_status(st);
                pfd.fd = st->status_r;
        }
        if (ret_wait_status)
                *ret_wait_status = st->wait_status;
        return st->exited || st->box_died || st->status_r < 0;
}

int cage_box_proc_exec_errno(struct cage_box_proc *p)
{
        (void)cage_box_proc_exited(p, NULL);
        return p->st.exec_failed ? p->st.fail_errno : 0;
}

void cage_box_proc_signal(struct cage_box_proc *p, int sig)
{
        signal_exec(&p->st, sig);
}

int cage_box_proc_usage(struct cage_box_proc *p, struct cage_box_usage *ret, bool with_oom)
{
        uint64_t cpu_ns = 0;
        memset(ret, 0, sizeof(*ret));
        /* A zygote's driver has no exec group: it is in the box's own. */
        struct cage_cgroup *cg = p->st.adopted ? box_cgroup(p->st.box) : exec_cgroup(&p->st);
        if (!cg)
                return 0;
        int r = cage_cgroup_cpu_usage(cg, &cpu_ns);
        ret->cpu_ms = cpu_ns / 1000000ULL;
        /* A read of the box's own group's peak serves the OOM check too
         * (one read of each file, not two); a failed one does not. */
        int q = cage_cgroup_memory_peak(cg, &ret->memory_bytes);
        bool box_peak = q == 0 && p->st.adopted;
        if (q == -ENOENT) /* v2 before 5.19: no peak, the use now */
                (void)cage_cgroup_memory_now(cg, &ret->memory_bytes);
        if (!ret->memory_bytes && !p->st.adopted)
                ret->memory_bytes = box_peak_memory(p->st.box, &box_peak);
        if (with_oom)
                ret->oom_kills = oom_kills_now(p->st.box, box_peak ? &ret->memory_bytes : NULL);
        return r;
}

struct cage_box_proc *cage_box_proc_free(struct cage_box_proc *p)
{
        if (!p)
                return NULL;
        struct exec_state *st = &p->st;
        if (exec_cgroup(st))
                (void)cage_cgroup_kill(st->cg);
        else if (st->id)
                signal_exec(st, SIGKILL);
        (void)cage_box_proc_unpark(p); /* the caller's extra fd is its own to close */
        cleanup(st);
        free(p);
        return NULL;
}

void cage_box_proc_park(struct cage_box_proc *p, int *extra)
{
        pthread_mutex_lock(&p->st.box->lock);
        cage_cgroup_park(p->st.cg);
        pthread_mutex_unlock(&p->st.box->lock);
        if (p->park_fd >= 0)
                return;
        int none = -1;
        int *const fds[] = {&p->st.w.out_r, &p->st.w.err_r, &p->st.status_r, extra ? extra : &none};
        int park = fd_park(fds, 4);
        if (park < 0)
                return; /* still holding them: nothing lost */
        p->park_fd = park;
        p->extra = extra;
}

struct cage_box_proc *box_proc_adopt(struct cage_box *box, int out_r, int err_r, int status_r)
{
        struct cage_box_proc *p = calloc(1, sizeof(*p));
        if (p)
                p->park_fd = -1;
        if (!p) {
                close(out_r);
                close(err_r);
                close(status_r);
                return NULL;
        }
        exec_state_init(&p->st, box, NULL, NULL);
        p->st.adopted = true;
        p->st.w.out_r = out_r;
        p->st.w.err_r = err_r;
        p->st.status_r = status_r;
        fd_set_nonblock(out_r, true);
        fd_set_nonblock(err_r, true);
        return p;
}
