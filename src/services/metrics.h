/* The server's counters and histograms for Prometheus (docs/OPERATIONS.md):
 * one process-wide set, counted with relaxed atomics from any thread (no
 * lock on a request's path), rendered in the text exposition format
 * (version 0.0.4) by cage_service_metrics().
 *
 * What is counted here are events (runs ending, pool refills, egress,
 * pulls, audit write errors, quota refusals); what is a state at the time
 * of a scrape (sandboxes, sessions, pool shelves, store size, process fds)
 * is read then, by service_metrics.c. */
#ifndef CODECAGE_SERVICES_METRICS_H
#define CODECAGE_SERVICES_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* What ran: an exec in a named sandbox, a Python call in a named sandbox's
 * session, a one-shot shell (argv/command) run, a one-shot Python run. */
enum cage_metric_kind {
        CAGE_METRIC_EXEC,
        CAGE_METRIC_SESSION,
        CAGE_METRIC_RUN_SHELL,
        CAGE_METRIC_RUN_PYTHON,
        CAGE_METRIC_KINDS,
};

/* A call of `kind` began (execs_in_flight goes up). */
void cage_metrics_run_begin(enum cage_metric_kind kind);
/* It ended after ms milliseconds: status is the result's ("ok", "error",
 * "timeout", "oom", "output_limit", "cancelled", "internal_error"), or
 * "rejected" (refused before it ran: a bad request, a policy, a quota) or
 * "failed" (codecage could not run it). */
void cage_metrics_run_end(enum cage_metric_kind kind, const char *status, uint64_t ms);

/* A pool refill (one sandbox started or forked) took ms; ok or failed. */
void cage_metrics_pool_refill(uint64_t ms, bool ok);
/* A host call of Python code (llm_query, tools.*) was answered; ok: with a
 * value, not an error. */
void cage_metrics_host_call(bool ok);
/* An egress request or tunnel (or a `files` fetch) allowed, with its
 * bytes, or refused by the policy. */
void cage_metrics_egress(bool allowed, uint64_t sent, uint64_t received);
/* An image pull ended. */
void cage_metrics_image_pull(bool ok);
/* An audit record could not be written. */
void cage_metrics_audit_error(void);
/* A request refused over a quota: "sandboxes_running", "runs",
 * "sessions", "memory_mib", "sandboxes", "launch_queue". */
void cage_metrics_quota_refused(const char *quota);
/* A launch waited ms for a slot of limits.launches_max. */
void cage_metrics_launch_waited(uint64_t ms);
/* The launch gate's state, set by quota.c. */
void cage_metrics_launches(int64_t running_delta, int64_t waiting_delta);

/* Writes every counter and histogram above, HELP and TYPE lines included. */
void cage_metrics_render(FILE *out);

/* Text exposition helpers: a label value with \, " and newline escaped. */
void cage_metrics_label(FILE *out, const char *value);

#endif
