/* The process-wide counters and histograms of the server and their text
 * exposition (see metrics.h). Every counter is a relaxed atomic: a scrape
 * may see one counter a step ahead of another, never a torn value.
 * Histogram buckets are kept per bucket and summed into Prometheus's
 * cumulative `le` buckets when rendered. */
#include <stdatomic.h>
#include <string.h>

#include "services/metrics.h"

#define ELEMS(a) (sizeof(a) / sizeof((a)[0]))

typedef _Atomic uint64_t counter_t;

/* Upper bounds of the duration buckets, in ms (+Inf is implied). */
static const uint64_t bounds_ms[] = {5,    10,   25,   50,    100,   250,   500,
                                     1000, 2500, 5000, 10000, 30000, 60000, 300000};
#define BUCKETS (ELEMS(bounds_ms) + 1)

struct histogram {
        counter_t bucket[BUCKETS];
        counter_t count, sum_ms;
};

static const char *const kind_names[CAGE_METRIC_KINDS] = {
        [CAGE_METRIC_EXEC] = "exec",
        [CAGE_METRIC_SESSION] = "session",
        [CAGE_METRIC_RUN_SHELL] = "run_shell",
        [CAGE_METRIC_RUN_PYTHON] = "run_python",
};

static const char *const statuses[] = {"ok",           "error",     "timeout",        "oom",
                                       "output_limit", "cancelled", "internal_error", "rejected",
                                       "failed"};
#define STATUSES ELEMS(statuses)

static const char *const quotas[] = {"sandboxes", "sandboxes_running", "runs",
                                     "sessions",  "memory_mib",        "launch_queue"};
#define QUOTAS ELEMS(quotas)

static struct {
        counter_t runs[CAGE_METRIC_KINDS][STATUSES];
        struct histogram run_seconds[CAGE_METRIC_KINDS];
        _Atomic int64_t in_flight;
        struct histogram refill;
        counter_t refill_failed;
        counter_t host_calls[2];   /* ok, error */
        counter_t egress[2];       /* allowed, denied */
        counter_t egress_bytes[2]; /* sent, received */
        counter_t pulls[2];        /* ok, failed */
        counter_t audit_errors;
        counter_t quota_refused[QUOTAS];
        struct histogram launch_wait;
        _Atomic int64_t launches_running, launches_waiting;
} m;

static void observe(struct histogram *h, uint64_t ms)
{
        size_t i = 0;
        while (i < ELEMS(bounds_ms) && ms > bounds_ms[i])
                i++;
        atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->sum_ms, ms, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

static void bump(counter_t *c, uint64_t n)
{
        atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static size_t status_index(const char *status)
{
        for (size_t i = 0; status && i < STATUSES; i++)
                if (strcmp(statuses[i], status) == 0)
                        return i;
        return 6; /* internal_error: a status this table does not know */
}

void cage_metrics_run_begin(enum cage_metric_kind kind)
{
        (void)kind;
        atomic_fetch_add_explicit(&m.in_flight, 1, memory_order_relaxed);
}

void cage_metrics_run_end(enum cage_metric_kind kind, const char *status, uint64_t ms)
{
        atomic_fetch_sub_explicit(&m.in_flight, 1, memory_order_relaxed);
        if (kind >= CAGE_METRIC_KINDS)
                return;
        bump(&m.runs[kind][status_index(status)], 1);
        observe(&m.run_seconds[kind], ms);
}

void cage_metrics_pool_refill(uint64_t ms, bool ok)
{
        if (ok)
                observe(&m.refill, ms);
        else
                bump(&m.refill_failed, 1);
}

void cage_metrics_host_call(bool ok)
{
        bump(&m.host_calls[ok ? 0 : 1], 1);
}

void cage_metrics_egress(bool allowed, uint64_t sent, uint64_t received)
{
        bump(&m.egress[allowed ? 0 : 1], 1);
        bump(&m.egress_bytes[0], sent);
        bump(&m.egress_bytes[1], received);
}

void cage_metrics_image_pull(bool ok)
{
        bump(&m.pulls[ok ? 0 : 1], 1);
}

void cage_metrics_audit_error(void)
{
        bump(&m.audit_errors, 1);
}

void cage_metrics_quota_refused(const char *quota)
{
        for (size_t i = 0; i < QUOTAS; i++)
                if (strcmp(quotas[i], quota) == 0)
                        bump(&m.quota_refused[i], 1);
}

void cage_metrics_launch_waited(uint64_t ms)
{
        observe(&m.launch_wait, ms);
}

void cage_metrics_launches(int64_t running_delta, int64_t waiting_delta)
{
        atomic_fetch_add_explicit(&m.launches_running, running_delta, memory_order_relaxed);
        atomic_fetch_add_explicit(&m.launches_waiting, waiting_delta, memory_order_relaxed);
}

/* ---- exposition ---- */

void cage_metrics_label(FILE *out, const char *value)
{
        for (const char *p = value ? value : ""; *p; p++) {
                if (*p == '\\' || *p == '"')
                        fputc('\\', out);
                if (*p == '\n')
                        fputs("\\n", out);
                else
                        fputc(*p, out);
        }
}

static uint64_t get(counter_t *c)
{
        return atomic_load_explicit(c, memory_order_relaxed);
}

static void head(FILE *out, const char *name, const char *type, const char *help)
{
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series; labels: "" or `kind="exec",` (with the comma). */
static void render_histogram(FILE *out, const char *name, const char *labels, struct histogram *h)
{
        uint64_t cumulative = 0;
        for (size_t i = 0; i < BUCKETS; i++) {
                cumulative += get(&h->bucket[i]);
                if (i < ELEMS(bounds_ms))
                        fprintf(out, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels,
                                (double)bounds_ms[i] / 1000.0, (unsigned long long)cumulative);
                else
                        fprintf(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                                (unsigned long long)cumulative);
        }
        /* The count is the +Inf bucket, so the two never disagree. */
        size_t n = strlen(labels);
        const char *open = n ? "{" : "", *close = n ? "}" : "";
        fprintf(out, "%s_sum%s%.*s%s %.3f\n", name, open, n ? (int)n - 1 : 0, labels, close,
                (double)get(&h->sum_ms) / 1000.0);
        fprintf(out, "%s_count%s%.*s%s %llu\n", name, open, n ? (int)n - 1 : 0, labels, close,
                (unsigned long long)cumulative);
}

static void render_runs(FILE *out)
{
        head(out, "codecage_runs_total", "counter",
             "Calls that ended, by kind (exec, session, run_shell, run_python) and status.");
        for (size_t k = 0; k < CAGE_METRIC_KINDS; k++)
                for (size_t s = 0; s < STATUSES; s++)
                        fprintf(out, "codecage_runs_total{kind=\"%s\",status=\"%s\"} %llu\n",
                                kind_names[k], statuses[s], (unsigned long long)get(&m.runs[k][s]));
        head(out, "codecage_run_duration_seconds", "histogram",
             "Wall time of a call as the client sees it, launch included.");
        for (size_t k = 0; k < CAGE_METRIC_KINDS; k++) {
                char labels[64];
                snprintf(labels, sizeof(labels), "kind=\"%s\",", kind_names[k]);
                render_histogram(out, "codecage_run_duration_seconds", labels, &m.run_seconds[k]);
        }
        head(out, "codecage_execs_in_flight", "gauge", "Calls running now.");
        fprintf(out, "codecage_execs_in_flight %lld\n",
                (long long)atomic_load_explicit(&m.in_flight, memory_order_relaxed));
}

static void render_pair(FILE *out, const char *name, const char *type, const char *help,
                        const char *label, const char *a, const char *b, counter_t c[2])
{
        head(out, name, type, help);
        fprintf(out, "%s{%s=\"%s\"} %llu\n", name, label, a, (unsigned long long)get(&c[0]));
        fprintf(out, "%s{%s=\"%s\"} %llu\n", name, label, b, (unsigned long long)get(&c[1]));
}

static void render_launches(FILE *out)
{
        head(out, "codecage_launches_running", "gauge",
             "Sandbox launches for requests under way (at most limits.launches_max).");
        fprintf(out, "codecage_launches_running %lld\n",
                (long long)atomic_load_explicit(&m.launches_running, memory_order_relaxed));
        head(out, "codecage_launches_waiting", "gauge",
             "Requests waiting for a launch slot (limits.launches_max).");
        fprintf(out, "codecage_launches_waiting %lld\n",
                (long long)atomic_load_explicit(&m.launches_waiting, memory_order_relaxed));
        head(out, "codecage_launch_wait_seconds", "histogram",
             "How long a launch waited for a slot.");
        render_histogram(out, "codecage_launch_wait_seconds", "", &m.launch_wait);
        head(out, "codecage_quota_refusals_total", "counter",
             "Requests refused with 429 over a tenant quota or the launch queue.");
        for (size_t i = 0; i < QUOTAS; i++)
                fprintf(out, "codecage_quota_refusals_total{quota=\"%s\"} %llu\n", quotas[i],
                        (unsigned long long)get(&m.quota_refused[i]));
}

void cage_metrics_render(FILE *out)
{
        render_runs(out);
        head(out, "codecage_pool_refill_seconds", "histogram",
             "Time to start (or fork) one warm sandbox with its session.");
        render_histogram(out, "codecage_pool_refill_seconds", "", &m.refill);
        head(out, "codecage_pool_refill_failures_total", "counter",
             "Warm sandboxes that failed to start.");
        fprintf(out, "codecage_pool_refill_failures_total %llu\n",
                (unsigned long long)get(&m.refill_failed));
        render_pair(out, "codecage_host_calls_total", "counter",
                    "Host calls (llm_query, tools.*) of Python code, by result.", "result", "ok",
                    "error", m.host_calls);
        render_pair(out, "codecage_egress_requests_total", "counter",
                    "Egress requests, tunnels and URL fetches, by the policy's decision.",
                    "decision", "allowed", "denied", m.egress);
        render_pair(out, "codecage_egress_bytes_total", "counter",
                    "Bytes through the egress proxy and URL fetches.", "direction", "sent",
                    "received", m.egress_bytes);
        render_pair(out, "codecage_image_pulls_total", "counter", "Image pulls, by result.",
                    "result", "ok", "failed", m.pulls);
        head(out, "codecage_audit_write_errors_total", "counter",
             "Audit records that could not be written.");
        fprintf(out, "codecage_audit_write_errors_total %llu\n",
                (unsigned long long)get(&m.audit_errors));
        render_launches(out);
}
