/* cage_run(): the supervisor side of a one-shot sandbox. It prepares the
 * launch (seccomp program, host uid slot, cgroup, plan, pipes), clones the
 * child, writes its id maps and moves it into its cgroup, then watches it:
 * output pipes, the child's report pipe, its pidfd, the wall-clock deadline,
 * the tree's CPU time and a cancel fd. On timeout, cancel or output flood it
 * kills pid 1 of the sandbox (which takes the whole pid namespace with it)
 * and the cgroup. Finally it decides the status, keeping launcher failures
 * (internal_error) apart from the program's own (error, timeout, oom, ...),
 * and removes the cgroup so nothing is left behind. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "idmap.h"
#include "output.h"
#include "plan.h"
#include "sandbox.h"
#include "seccomp.h"
#include "userns.h"
#include "util/cleanup.h"
#include "verdict.h"
#include "util/error.h"
#include "util/fdutil.h"

#define CPU_POLL_MS 50
#define DRAIN_MS    2000

struct run_state {
        const struct cage_spec *spec;
        const struct cage_run_options *opts;
        struct launch_plan plan;
        struct id_slot slot;
        struct cgroup_host cg_host;
        struct cage_cgroup *cg;
        pid_t pid;
        int pidfd;
        int out_r, err_r, report_r, sync_w;
        struct output_capture cap_out, cap_err;
        uint64_t start_ns, deadline_ns;
        bool exited, timed_out, cpu_exceeded, cancelled, flooded;
        bool got_exit_report, setup_failed, exec_failed, bad_mount;
        int wait_status;             /* from REPORT_EXITED */
        struct child_report failure; /* first setup/exec failure */
        struct rusage rusage;
        uint64_t oom_kills;
};

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static void kill_sandbox(struct run_state *st)
{
        /* SIGKILL to pid 1 tears down the whole pid namespace; the cgroup
         * kill also catches anything outside it (debug builds without pidns). */
        if (st->pidfd >= 0 && !st->exited)
                syscall(SYS_pidfd_send_signal, st->pidfd, SIGKILL, NULL, 0);
        if (st->cg)
                cage_cgroup_kill(st->cg);
}

/* ---- preparation ---- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static struct cgroup_host cached_host;
static int cached_host_r;
static struct cage_error cached_host_err;

static void detect_host_once(void)
{
        cached_host_r = cage_cgroup_host_detect(&cached_host, &cached_host_err);
        if (cached_host_r == 0)
                cage_cgroup_sweep_stale(&cached_host, 0);
}

/* Host detection does a few filesystem probes (and sweeps groups of dead
 * supervisors): once per process, safe from any thread. */
int launch_detect_cgroups(struct cgroup_host *ret, struct cage_error *err)
{
        pthread_once(&host_once, detect_host_once);
        if (cached_host_r < 0) {
                if (err)
                        *err = cached_host_err;
                return cached_host_r;
        }
        *ret = cached_host;
        return 0;
}

void launch_sweep_stale_cgroups(unsigned wait_ms)
{
        struct cgroup_host host;
        if (launch_detect_cgroups(&host, NULL) == 0)
                cage_cgroup_sweep_stale(&host, wait_ms);
}

int launch_create_cgroup(const struct cgroup_host *host, const struct cage_spec *spec,
                         struct cage_cgroup **ret, struct cage_error *err)
{
        static unsigned counter;
        char name[64];
        *ret = NULL;
        if (host->backend == CGROUP_BACKEND_NONE || (spec->debug_disable & CAGE_DEBUG_NO_LIMITS))
                return 0;
        snprintf(name, sizeof(name), CGROUP_RUN_PREFIX "%d-%u", (int)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        struct cgroup_limits lim = {
                .memory_bytes = spec->memory_bytes, .cpus = spec->cpus, .pids = spec->pids};
        return cage_cgroup_create(host, name, &lim, ret, err);
}

static int make_pipes(struct run_state *st, struct cage_error *err)
{
        int out[2], errp[2], rep[2], sync[2];
        if (pipe2(out, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->out_r = out[0];
        st->plan.stdout_fd = out[1];
        if (pipe2(errp, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->err_r = errp[0];
        st->plan.stderr_fd = errp[1];
        if (pipe2(rep, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->report_r = rep[0];
        st->plan.report_fd = rep[1];
        if (pipe2(sync, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->plan.sync_fd = sync[0];
        st->sync_w = sync[1];
        if (st->spec->stdin_fd >= 0)
                st->plan.stdin_fd = st->spec->stdin_fd;
        else if ((st->plan.stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                return cage_fail(err, -errno, "open /dev/null");
        fd_set_nonblock(st->out_r, true);
        fd_set_nonblock(st->err_r, true);
        return 0;
}

static void close_child_ends(struct run_state *st)
{
        close_fd(&st->plan.stdout_fd);
        close_fd(&st->plan.stderr_fd);
        close_fd(&st->plan.report_fd);
        close_fd(&st->plan.sync_fd);
        if (st->spec->stdin_fd < 0)
                close_fd(&st->plan.stdin_fd);
}

/* As root, user mounts are idmapped so their owner is the sandbox user
 * (whose host uid is a per-run slot); where the kernel or filesystem cannot
 * idmap, a plain bind is used and the directory's own permissions apply. */
void launch_open_mounts(struct launch_plan *plan, const struct cage_spec *spec,
                        const struct id_slot *slot)
{
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                plan->mount_fds[i] = -1;
        if (!slot->privileged)
                return;
        for (size_t i = 0; i < spec->n_mounts; i++) {
                const struct cage_mount *m = &spec->mounts[i];
                int fd = idmap_mount_open(m->source, slot->host_uid, slot->host_gid, m->writable,
                                          NULL);
                plan->mount_fds[i] = fd >= 0 ? fd : -1;
        }
}

static void close_mount_fds(struct run_state *st)
{
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                close_fd(&st->plan.mount_fds[i]);
}

static int prepare(struct run_state *st, struct cage_error *err)
{
        int r;
        uint64_t out_cap = st->opts->keep_output ? st->spec->output_max_bytes : 0;
        if ((r = output_capture_init(&st->cap_out, out_cap)) < 0 ||
            (r = output_capture_init(&st->cap_err, out_cap)) < 0)
                return cage_fail(err, r, "output buffers");
        if ((r = cage_seccomp_program(&st->plan.seccomp, err)) < 0)
                return r;
        if ((r = cage_id_slot_acquire(&st->slot, err)) < 0)
                return r;
        st->plan.privileged = st->slot.privileged;
        if ((r = launch_detect_cgroups(&st->cg_host, err)) < 0)
                return r;
        st->plan.rlimit_memory =
                st->cg_host.backend == CGROUP_BACKEND_NONE || !st->cg_host.has_memory;
        if ((r = plan_build(&st->plan, st->spec, err)) < 0)
                return r;
        launch_open_mounts(&st->plan, st->spec, &st->slot);
        return make_pipes(st, err);
}

/* A child that already failed a launch step has exited and closed its end
 * (EPIPE): that is no error of ours, its report on the report pipe says
 * which step failed, and the watch loop reads it. */
static int send_sync(struct run_state *st, char what, struct cage_error *err)
{
        if (write_all(st->sync_w, &what, 1) < 0 && errno != EPIPE)
                return cage_fail(err, -errno, "waking the sandbox");
        return 0;
}

/* Id maps first, so the child can build its filesystem while we create its
 * cgroup; the second byte lets it go on once it is inside that cgroup. */
static int start_child(struct run_state *st, struct cage_error *err)
{
        int r = cage_userns_write_maps(st->pid, &st->slot, err);
        if (r == 0)
                r = send_sync(st, SYNC_MAPS_WRITTEN, err);
        if (r == 0)
                r = launch_create_cgroup(&st->cg_host, st->spec, &st->cg, err);
        if (r == 0 && st->cg)
                r = cage_cgroup_attach(st->cg, st->pid, err);
        if (r == 0)
                r = send_sync(st, SYNC_IN_CGROUP, err);
        close_fd(&st->sync_w);
        return r;
}

/* ---- the watch loop ---- */

static int deliver(struct run_state *st, int stream, const char *buf, size_t len)
{
        struct output_capture *c = stream == 1 ? &st->cap_out : &st->cap_err;
        output_capture_feed(c, buf, len);
        if (st->opts->on_output && st->opts->on_output(st->opts->on_output_ctx, stream, buf, len))
                st->cancelled = true;
        uint64_t stop = st->spec->output_stop_bytes;
        if (stop && st->cap_out.total + st->cap_err.total > stop)
                st->flooded = true;
        return 0;
}

static void read_stream(struct run_state *st, int *fd, int stream)
{
        char buf[65536];
        for (int i = 0; i < 16; i++) {
                ssize_t n = read(*fd, buf, sizeof(buf));
                if (n > 0) {
                        deliver(st, stream, buf, (size_t)n);
                        continue;
                }
                if (n < 0 && (errno == EINTR))
                        continue;
                if (n == 0 || errno != EAGAIN)
                        close_fd(fd);
                return;
        }
}

static void read_reports(struct run_state *st)
{
        struct child_report rep;
        ssize_t n = read(st->report_r, &rep, sizeof(rep));
        if (n <= 0) {
                if (n == 0 || errno != EINTR)
                        close_fd(&st->report_r);
                return;
        }
        if (n != sizeof(rep))
                return;
        rep.step[sizeof(rep.step) - 1] = '\0';
        if (rep.kind == REPORT_EXITED) {
                st->got_exit_report = true;
                st->wait_status = rep.value;
        } else if (rep.kind == REPORT_BAD_MOUNT && !st->bad_mount) {
                st->failure = rep;
                st->bad_mount = true;
        } else if ((rep.kind == REPORT_SETUP_FAILED || rep.kind == REPORT_EXEC_FAILED) &&
                   !st->setup_failed && !st->exec_failed && !st->bad_mount) {
                st->failure = rep;
                if (rep.kind == REPORT_SETUP_FAILED)
                        st->setup_failed = true;
                else
                        st->exec_failed = true;
        }
}

static void reap(struct run_state *st)
{
        int status;
        while (wait4(st->pid, &status, 0, &st->rusage) < 0 && errno == EINTR)
                ;
        st->exited = true;
}

static bool cpu_over_budget(struct run_state *st)
{
        struct cgroup_stats s = {0};
        if (!st->spec->cpu_time_ms || !st->cg || cage_cgroup_stats(st->cg, &s) < 0)
                return false;
        return s.cpu_usage_ns / 1000000ULL >= st->spec->cpu_time_ms;
}

static int poll_timeout_ms(struct run_state *st)
{
        uint64_t now = now_ns();
        if (now >= st->deadline_ns)
                return 0;
        uint64_t ms = (st->deadline_ns - now + 999999) / 1000000;
        if (st->spec->cpu_time_ms && ms > CPU_POLL_MS)
                ms = CPU_POLL_MS;
        return ms > 60000 ? 60000 : (int)ms;
}

static void watch(struct run_state *st)
{
        while (!st->exited) {
                struct pollfd p[5] = {
                        {.fd = st->pidfd, .events = POLLIN},
                        {.fd = st->out_r, .events = POLLIN},
                        {.fd = st->err_r, .events = POLLIN},
                        {.fd = st->report_r, .events = POLLIN},
                        {.fd = st->opts->cancel_fd, .events = POLLIN},
                };
                int n = poll(p, 5, poll_timeout_ms(st));
                if (n < 0 && errno != EINTR)
                        break;
                if (p[1].revents)
                        read_stream(st, &st->out_r, 1);
                if (p[2].revents)
                        read_stream(st, &st->err_r, 2);
                if (p[3].revents)
                        read_reports(st);
                if (p[4].revents)
                        st->cancelled = true;
                if (now_ns() >= st->deadline_ns)
                        st->timed_out = true;
                else if (cpu_over_budget(st))
                        st->cpu_exceeded = true;
                if (st->timed_out || st->cpu_exceeded || st->cancelled || st->flooded)
                        kill_sandbox(st);
                if (p[0].revents)
                        reap(st);
        }
}

/* After pid 1 is gone every process of the sandbox is dead, so the pipes
 * reach EOF quickly; the bound only guards against a broken kernel. */
static void drain(struct run_state *st)
{
        if (st->cg)
                cage_cgroup_kill(st->cg);
        uint64_t until = now_ns() + DRAIN_MS * 1000000ULL;
        while ((st->out_r >= 0 || st->err_r >= 0 || st->report_r >= 0) && now_ns() < until) {
                struct pollfd p[3] = {{.fd = st->out_r, .events = POLLIN},
                                      {.fd = st->err_r, .events = POLLIN},
                                      {.fd = st->report_r, .events = POLLIN}};
                if (poll(p, 3, 100) < 0 && errno != EINTR)
                        break;
                if (p[0].revents)
                        read_stream(st, &st->out_r, 1);
                if (p[1].revents)
                        read_stream(st, &st->err_r, 2);
                if (p[2].revents)
                        read_reports(st);
        }
}

/* ---- the verdict ---- */

static void note_exec_failure(struct run_state *st)
{
        char msg[256];
        int n = snprintf(msg, sizeof(msg), "codecage: cannot run \"%s\": %s (%s)\n",
                         st->spec->argv[0], strerror(st->failure.value), st->failure.step);
        if (n > 0)
                deliver(st, 2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

static void collect_usage(struct run_state *st, struct cage_result *res)
{
        struct cgroup_stats s = {0};
        if (st->cg && cage_cgroup_stats(st->cg, &s) == 0 && s.cpu_usage_ns)
                res->cpu_ms = s.cpu_usage_ns / 1000000ULL;
        else
                res->cpu_ms =
                        (uint64_t)(st->rusage.ru_utime.tv_sec + st->rusage.ru_stime.tv_sec) * 1000 +
                        (uint64_t)(st->rusage.ru_utime.tv_usec + st->rusage.ru_stime.tv_usec) /
                                1000;
        res->peak_memory_bytes =
                s.peak_memory_bytes ? s.peak_memory_bytes : (uint64_t)st->rusage.ru_maxrss * 1024;
        st->oom_kills = s.oom_kills;
}

static void judge_exit(struct run_state *st, struct cage_result *res)
{
        verdict_from_wait_status(res, st->wait_status);
        verdict_oom_if_killed(res, st->oom_kills, st->spec->memory_bytes);
        if (res->signal == SIGXCPU || (res->signal == SIGKILL && st->spec->cpu_time_ms &&
                                       res->cpu_ms >= st->spec->cpu_time_ms)) {
                res->status = CAGE_STATUS_TIMEOUT;
                snprintf(res->reason, sizeof(res->reason), "cpu time limit of %llu ms reached",
                         (unsigned long long)st->spec->cpu_time_ms);
        }
}

static void judge(struct run_state *st, struct cage_result *res)
{
        res->exit_code = -1;
        if (st->setup_failed) {
                res->status = CAGE_STATUS_INTERNAL_ERROR;
                snprintf(res->reason, sizeof(res->reason), "sandbox launch step \"%s\" failed: %s",
                         st->failure.step, strerror(st->failure.value));
        } else if (st->cancelled) {
                verdict_cancelled(res);
        } else if (st->timed_out) {
                verdict_timeout(res, st->spec->timeout_ms);
        } else if (st->cpu_exceeded) {
                res->status = CAGE_STATUS_TIMEOUT;
                snprintf(res->reason, sizeof(res->reason), "cpu time limit of %llu ms reached",
                         (unsigned long long)st->spec->cpu_time_ms);
        } else if (st->flooded) {
                verdict_output_limit(res, st->spec->output_stop_bytes);
        } else if (st->got_exit_report) {
                judge_exit(st, res);
        } else if (st->oom_kills) {
                /* The OOM killer chose pid 1 itself. */
                verdict_oom(res, st->spec->memory_bytes);
        } else {
                res->status = CAGE_STATUS_INTERNAL_ERROR;
                snprintf(res->reason, sizeof(res->reason),
                         "the sandbox's init ended without reporting the program's exit");
        }
        if (st->exec_failed && res->status == CAGE_STATUS_ERROR)
                snprintf(res->reason, sizeof(res->reason), "cannot run \"%s\": %s",
                         st->spec->argv[0], strerror(st->failure.value));
}

static int bad_mount_error(const struct run_state *st, struct cage_error *err)
{
        int i = -1;
        sscanf(st->failure.step, "mounts[%d]", &i);
        const char *target =
                i >= 0 && (size_t)i < st->spec->n_mounts ? st->spec->mounts[i].target : "?";
        return cage_fail(err, -EINVAL,
                         "%s \"%s\": cannot make the mount point in this image (%s); mount "
                         "at a new path or in a writable directory",
                         st->failure.step, target, strerror(st->failure.value));
}

static void teardown(struct run_state *st)
{
        if (st->pid > 0 && !st->exited) {
                kill_sandbox(st);
                reap(st);
        }
        cage_cgroup_destroy(st->cg);
        st->cg = NULL;
        close_fd(&st->pidfd);
        close_fd(&st->out_r);
        close_fd(&st->err_r);
        close_fd(&st->report_r);
        close_fd(&st->sync_w);
        close_child_ends(st);
        close_mount_fds(st);
        plan_free(&st->plan);
        cage_id_slot_release(&st->slot);
        output_capture_free(&st->cap_out);
        output_capture_free(&st->cap_err);
}

static void internal_error(struct cage_result *res, const struct cage_error *err)
{
        res->status = CAGE_STATUS_INTERNAL_ERROR;
        res->exit_code = -1;
        snprintf(res->reason, sizeof(res->reason), "%s", err->message);
}

static int finish_streams(struct run_state *st, struct cage_result *res)
{
        int r = output_capture_finish(&st->cap_out, &res->out);
        if (r == 0)
                r = output_capture_finish(&st->cap_err, &res->err);
        return r;
}

static int launch_and_watch(struct run_state *st, struct cage_result *res, struct cage_error *err)
{
        int r = prepare(st, err);
        if (r < 0)
                return r;
        st->pid = sandbox_clone(&st->plan, &st->pidfd);
        if (st->pid < 0) {
                r = (int)st->pid;
                st->pid = 0;
                return cage_fail(err, r, "clone into new namespaces");
        }
        close_child_ends(st);
        close_mount_fds(st);
        st->start_ns = now_ns();
        st->deadline_ns = st->start_ns + st->spec->timeout_ms * 1000000ULL;
        r = start_child(st, err);
        res->limits_backend = cgroup_backend_to_string(st->cg ? cage_cgroup_backend(st->cg)
                                                              : CGROUP_BACKEND_NONE);
        if (r < 0)
                return r;
        watch(st);
        drain(st);
        return 0;
}

int cage_run(const struct cage_spec *spec, const struct cage_run_options *opts,
             struct cage_result *res, struct cage_error *err)
{
        static const struct cage_run_options no_opts = {.keep_output = true, .cancel_fd = -1};
        struct run_state st = {.spec = spec,
                               .opts = opts ? opts : &no_opts,
                               .pidfd = -1,
                               .out_r = -1,
                               .err_r = -1,
                               .report_r = -1,
                               .sync_w = -1,
                               .slot = {.lock_fd = -1},
                               .plan = {.stdin_fd = -1,
                                        .stdout_fd = -1,
                                        .stderr_fd = -1,
                                        .report_fd = -1,
                                        .sync_fd = -1,
                                        .box_init_fd = -1,
                                        .box_ctl_fd = -1}};
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                st.plan.mount_fds[i] = -1;
        memset(res, 0, sizeof(*res));
        uint64_t t0 = now_ns();
        int r = cage_spec_validate(spec, err);
        if (r == 0)
                r = plan_check_inputs(spec, err);
        if (r < 0)
                return r;
        struct cage_error launch_err = {0};
        r = launch_and_watch(&st, res, &launch_err);
        if (r == 0 && st.bad_mount) {
                r = bad_mount_error(&st, err);
                teardown(&st);
                cage_result_free(res);
                return r;
        }
        if (r < 0) {
                internal_error(res, &launch_err);
        } else {
                if (st.exec_failed)
                        note_exec_failure(&st);
                collect_usage(&st, res);
                judge(&st, res);
        }
        r = finish_streams(&st, res);
        teardown(&st);
        res->duration_ms = (now_ns() - t0) / 1000000ULL;
        if (r < 0)
                return cage_fail(err, r, "collecting output");
        return 0;
}
