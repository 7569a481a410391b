/* The verdicts every runner gives (one-shot runs in supervise.c, execs in
 * box_exec.c): one place for each status's rule and the wording of its
 * reason, so a timeout or an OOM reads the same whatever ran it. */
#ifndef CODECAGE_CORE_VERDICT_H
#define CODECAGE_CORE_VERDICT_H

#include <stdint.h>

#include "codecage/codecage.h"

/* status + a formatted reason. */
void verdict_set(struct cage_result *res, enum cage_status status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* ok / error from the program's wait status (exit code, or the signal with
 * its name in the reason). */
void verdict_from_wait_status(struct cage_result *res, int wait_status);
void verdict_timeout(struct cage_result *res, uint64_t timeout_ms);
void verdict_output_limit(struct cage_result *res, uint64_t stop_bytes);
void verdict_oom(struct cage_result *res, uint64_t memory_bytes);
/* The kernel's OOM killer killed oom_kills processes of the sandbox during
 * the call: the verdict becomes oom unless a stronger one (internal error,
 * cancelled, timeout, output limit) was given. The exit code and signal the
 * program ended with are kept. */
void verdict_oom_if_killed(struct cage_result *res, uint64_t oom_kills, uint64_t memory_bytes);
void verdict_cancelled(struct cage_result *res);

/* What a runner observed about one program; verdict_judge() turns it into
 * the status and reason, in one order of precedence for every runner. */
struct verdict_facts {
        const char *launch_failure; /* codecage's own failure: internal_error */
        bool cancelled, timed_out, cpu_exceeded, flooded;
        bool exited; /* wait_status is the program's */
        int wait_status;
        bool exec_failed; /* execve failed with exec_errno */
        int exec_errno;
        const char *argv0;
        uint64_t oom_kills; /* during the call */
        uint64_t memory_bytes, timeout_ms, cpu_time_ms, output_stop_bytes;
        /* Neither an exit nor an OOM kill: what ended it. */
        enum cage_status gone_status;
        const char *gone_reason;
};

/* res->cpu_ms must already be set (a SIGKILL past the CPU budget is a
 * timeout). */
void verdict_judge(const struct verdict_facts *f, struct cage_result *res);

#endif
