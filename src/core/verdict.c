/* Verdicts shared by the runners; see verdict.h. */
#include "verdict.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

void verdict_set(struct cage_result *res, enum cage_status status, const char *fmt, ...)
{
        va_list ap;
        res->status = status;
        va_start(ap, fmt);
        vsnprintf(res->reason, sizeof(res->reason), fmt, ap);
        va_end(ap);
}

void verdict_from_wait_status(struct cage_result *res, int ws)
{
        if (WIFEXITED(ws)) {
                res->exit_code = WEXITSTATUS(ws);
                res->status = res->exit_code == 0 ? CAGE_STATUS_OK : CAGE_STATUS_ERROR;
        } else if (WIFSIGNALED(ws)) {
                res->signal = WTERMSIG(ws);
                verdict_set(res, CAGE_STATUS_ERROR, "killed by signal %d (%s)", res->signal,
                            strsignal(res->signal));
        }
}

void verdict_timeout(struct cage_result *res, uint64_t timeout_ms)
{
        verdict_set(res, CAGE_STATUS_TIMEOUT, "wall-clock timeout of %llu ms reached",
                    (unsigned long long)timeout_ms);
}

void verdict_output_limit(struct cage_result *res, uint64_t stop_bytes)
{
        verdict_set(res, CAGE_STATUS_OUTPUT_LIMIT,
                    "stopped after writing more than %llu bytes of output",
                    (unsigned long long)stop_bytes);
}

void verdict_oom(struct cage_result *res, uint64_t memory_bytes)
{
        verdict_set(res, CAGE_STATUS_OOM, "out of memory: the memory limit of %llu MiB was reached",
                    (unsigned long long)(memory_bytes >> 20));
}

void verdict_oom_if_killed(struct cage_result *res, uint64_t oom_kills, uint64_t memory_bytes)
{
        if (oom_kills && (res->status == CAGE_STATUS_OK || res->status == CAGE_STATUS_ERROR))
                verdict_oom(res, memory_bytes);
}

static void verdict_cpu_time(struct cage_result *res, uint64_t cpu_time_ms)
{
        verdict_set(res, CAGE_STATUS_TIMEOUT, "cpu time limit of %llu ms reached",
                    (unsigned long long)cpu_time_ms);
}

static void judge_exit(const struct verdict_facts *f, struct cage_result *res)
{
        verdict_from_wait_status(res, f->wait_status);
        verdict_oom_if_killed(res, f->oom_kills, f->memory_bytes);
        bool over_cpu = f->cpu_time_ms && res->cpu_ms >= f->cpu_time_ms;
        if (res->signal == SIGXCPU || (res->signal == SIGKILL && over_cpu))
                verdict_cpu_time(res, f->cpu_time_ms);
}

void verdict_judge(const struct verdict_facts *f, struct cage_result *res)
{
        res->exit_code = -1;
        if (f->launch_failure)
                verdict_set(res, CAGE_STATUS_INTERNAL_ERROR, "%s", f->launch_failure);
        else if (f->cancelled)
                verdict_cancelled(res);
        else if (f->timed_out)
                verdict_timeout(res, f->timeout_ms);
        else if (f->cpu_exceeded)
                verdict_cpu_time(res, f->cpu_time_ms);
        else if (f->flooded)
                verdict_output_limit(res, f->output_stop_bytes);
        else if (f->exited)
                judge_exit(f, res);
        else if (f->oom_kills) /* the OOM killer chose pid 1 (or init) itself */
                verdict_oom(res, f->memory_bytes);
        else
                verdict_set(res, f->gone_status, "%s", f->gone_reason);
        if (f->exec_failed && res->status == CAGE_STATUS_ERROR)
                verdict_set(res, CAGE_STATUS_ERROR, "cannot run \"%s\": %s", f->argv0,
                            strerror(f->exec_errno));
}

void verdict_cancelled(struct cage_result *res)
{
        verdict_set(res, CAGE_STATUS_CANCELLED, "cancelled");
}
