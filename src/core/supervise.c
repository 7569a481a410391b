/* cage_run(): a one-shot sandbox. The launcher (launcher.c) prepares,
 * clones and places the child; pid 1 is init.c, which runs the program and
 * reports its wait status on the report pipe. The watch loop (watch.c)
 * follows the output, the report pipe, pid 1's pidfd, the deadline, the CPU
 * budget and the cancel fd; on timeout, cancel or flood the sandbox is
 * killed (pid 1 takes its whole pid namespace with it, then the cgroup).
 * The verdict (verdict.c) keeps launcher failures (internal_error) apart
 * from the program's own (error, timeout, oom, ...), and the release leaves
 * nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "launcher.h"
#include "plan.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"
#include "verdict.h"
#include "watch.h"

struct run_state {
        const struct cage_spec *spec;
        struct launcher l;
        struct watch w;
        bool exited, got_exit_report, setup_failed, exec_failed, bad_mount;
        int wait_status;             /* from REPORT_EXITED */
        struct child_report failure; /* the first setup/exec failure */
        struct rusage rusage;
        char launch_failure[256];
};

/* stdout and stderr pipes; stdin is the caller's fd or /dev/null. */
static int make_stdio(struct run_state *st, struct cage_error *err)
{
        int out[2], errp[2];
        struct launch_plan *plan = &st->l.plan;
        if (pipe2(out, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->w.out_r = out[0];
        plan->stdout_fd = out[1];
        if (pipe2(errp, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->w.err_r = errp[0];
        plan->stderr_fd = errp[1];
        st->l.stdin_borrowed = st->spec->stdin_fd >= 0;
        if (st->l.stdin_borrowed)
                plan->stdin_fd = st->spec->stdin_fd;
        else if ((plan->stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                return cage_fail(err, -errno, "open /dev/null");
        fd_set_nonblock(st->w.out_r, true);
        fd_set_nonblock(st->w.err_r, true);
        return 0;
}

/* ---- what the watch loop hears ---- */

static void on_report(void *ctx)
{
        struct run_state *st = ctx;
        struct child_report rep;
        ssize_t n = read(st->l.report_r, &rep, sizeof(rep));
        if (n <= 0) {
                if (n == 0 || errno != EINTR)
                        close_fd(&st->l.report_r);
                return;
        }
        if (n != sizeof(rep))
                return;
        rep.step[sizeof(rep.step) - 1] = '\0';
        bool failed = st->setup_failed || st->exec_failed || st->bad_mount;
        if (rep.kind == REPORT_EXITED) {
                st->got_exit_report = true;
                st->wait_status = rep.value;
        } else if (rep.kind == REPORT_BAD_MOUNT && !st->bad_mount) {
                st->failure = rep;
                st->bad_mount = true;
        } else if ((rep.kind == REPORT_SETUP_FAILED || rep.kind == REPORT_EXEC_FAILED) && !failed) {
                st->failure = rep;
                st->setup_failed = rep.kind == REPORT_SETUP_FAILED;
                st->exec_failed = rep.kind == REPORT_EXEC_FAILED;
        }
}

static void on_pid1_exit(void *ctx)
{
        struct run_state *st = ctx;
        launcher_reap(&st->l, &st->rusage);
        st->exited = true;
}

static bool pid1_exited(void *ctx)
{
        return ((struct run_state *)ctx)->exited;
}

/* Watch, kill what is left, drain. After pid 1 is gone every process of
 * the sandbox is dead, so the pipes reach EOF quickly. */
static void watch_run(struct run_state *st)
{
        const struct watch_fd fds[] = {{&st->l.report_r, on_report}, {&st->l.pidfd, on_pid1_exit}};
        watch_loop(&st->w, fds, 2, pid1_exited, st);
        launcher_kill(&st->l);
        if (!st->exited)
                on_pid1_exit(st);
        watch_drain(&st->w, fds, 1, st);
}

/* ---- the verdict ---- */

static uint64_t collect_usage(struct run_state *st, struct cage_result *res)
{
        struct cgroup_stats s = {0};
        const struct rusage *ru = &st->rusage;
        if (st->l.cg && cage_cgroup_stats(st->l.cg, &s) == 0 && s.cpu_usage_ns)
                res->cpu_ms = s.cpu_usage_ns / 1000000ULL;
        else
                res->cpu_ms = (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000 +
                              (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000;
        res->peak_memory_bytes =
                s.peak_memory_bytes ? s.peak_memory_bytes : (uint64_t)ru->ru_maxrss * 1024;
        return s.oom_kills;
}

static void judge(struct run_state *st, struct cage_result *res)
{
        const struct cage_spec *spec = st->spec;
        if (st->setup_failed)
                snprintf(st->launch_failure, sizeof(st->launch_failure),
                         "sandbox launch step \"%s\" failed: %s", st->failure.step,
                         strerror(st->failure.value));
        if (st->exec_failed) {
                char line[256];
                snprintf(line, sizeof(line), "codecage: cannot run \"%s\": %s (%s)\n",
                         spec->argv[0], strerror(st->failure.value), st->failure.step);
                watch_note(&st->w, line);
        }
        struct verdict_facts f = {
                .launch_failure = st->setup_failed ? st->launch_failure : NULL,
                .cancelled = st->w.cancelled,
                .timed_out = st->w.timed_out,
                .cpu_exceeded = st->w.cpu_exceeded,
                .flooded = st->w.flooded,
                .exited = st->got_exit_report,
                .wait_status = st->wait_status,
                .exec_failed = st->exec_failed,
                .exec_errno = st->failure.value,
                .argv0 = spec->argv[0],
                .oom_kills = collect_usage(st, res),
                .memory_bytes = spec->memory_bytes,
                .timeout_ms = spec->timeout_ms,
                .cpu_time_ms = spec->cpu_time_ms,
                .output_stop_bytes = spec->output_stop_bytes,
                .gone_status = CAGE_STATUS_INTERNAL_ERROR,
                .gone_reason = "the sandbox's init ended without reporting the program's exit",
        };
        verdict_judge(&f, res);
}

/* ---- one run ---- */

static int launch_and_watch(struct run_state *st, struct cage_result *res, struct cage_error *err)
{
        int r;
        if ((r = watch_capture(&st->w, st->spec->output_max_bytes)) < 0)
                return cage_fail(err, r, "output buffers");
        if ((r = launcher_prepare(&st->l, err)) < 0 || (r = make_stdio(st, err)) < 0)
                return r;
        if ((r = launcher_clone(&st->l, false, err)) < 0)
                return r;
        watch_start_clock(&st->w, st->spec->timeout_ms);
        r = launcher_enter_cgroup(&st->l, err);
        res->limits_backend = launcher_limits_backend(&st->l);
        if (r < 0)
                return r;
        st->w.cpu_cg = st->l.cg;
        watch_run(st);
        return 0;
}

static void internal_error(struct cage_result *res, const struct cage_error *err)
{
        res->status = CAGE_STATUS_INTERNAL_ERROR;
        res->exit_code = -1;
        snprintf(res->reason, sizeof(res->reason), "%s", err->message);
}

static void release(struct run_state *st)
{
        launcher_release(&st->l);
        watch_free(&st->w);
}

int cage_run(const struct cage_spec *spec, const struct cage_run_options *opts,
             struct cage_result *res, struct cage_error *err)
{
        struct run_state st = {.spec = spec};
        launcher_init(&st.l, spec);
        watch_init(&st.w, opts);
        st.w.output_stop_bytes = spec->output_stop_bytes;
        st.w.cpu_time_ms = spec->cpu_time_ms;
        memset(res, 0, sizeof(*res));
        uint64_t t0 = clock_mono_ns();
        int r = cage_spec_validate(spec, err);
        if (r == 0)
                r = plan_check_inputs(spec, err);
        if (r < 0)
                return r;
        struct cage_error launch_err = {0};
        r = launch_and_watch(&st, res, &launch_err);
        if (r == 0 && st.bad_mount) {
                r = launcher_report_error(&st.l, &st.failure, err);
                release(&st);
                cage_result_free(res);
                return r;
        }
        if (r < 0)
                internal_error(res, &launch_err);
        else
                judge(&st, res);
        r = watch_finish(&st.w, res);
        release(&st);
        res->duration_ms = (clock_mono_ns() - t0) / 1000000ULL;
        return r < 0 ? cage_fail(err, r, "collecting output") : 0;
}
