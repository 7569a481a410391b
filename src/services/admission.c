/* Admission: what each tenant holds now (running sandboxes, live sessions,
 * calls in flight, memory reserved) against its quotas (docs/CONFIG.md,
 * `quotas`), the server-wide gate on concurrent launches
 * (limits.launches_max), and the metrics of every call (metrics.h).
 *
 * The usage table is guarded by its own lock, a leaf: it is taken with or
 * without an sb->lock or svc->lock held, and nothing is taken under it.
 * Entries are made on a tenant's first use and kept (tenants are bounded
 * by the config; without tenants there is one, "default").
 *
 * Over a quota a call fails with -EUSERS (HTTP 429 with Retry-After, an MCP
 * tool error) naming the quota, the limit and what the tenant holds. The
 * quotas are read from the config at each check, so a reload applies to
 * the next call; what a tenant already holds is never taken away.
 *
 * The launch gate is first come, first served (tickets): a burst of cold
 * starts waits for a slot instead of making the machine thrash; a launch
 * that waits longer than LAUNCH_WAIT_MAX_MS, or whose client goes away,
 * gives up with -EUSERS. Pool refills do not pass the gate: they are
 * bounded by their own threads. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service_private.h"
#include "services/metrics.h"
#include "util/clock.h"
#include "util/error.h"

#define LAUNCH_WAIT_MAX_MS 60000
#define LAUNCH_POLL_MS     100 /* how often a waiting launch looks at its cancel fd */

struct svc_usage {
        char tenant[CAGE_STORE_TENANT_MAX + 1];
        uint32_t running, sessions, runs;
        uint64_t memory_mib;
        struct svc_usage *next;
};

int svc_admission_init(struct cage_service *svc)
{
        pthread_mutex_init(&svc->usage_lock, NULL);
        pthread_cond_init(&svc->launch_cond, NULL);
        return 0;
}

void svc_admission_done(struct cage_service *svc)
{
        for (struct svc_usage *u = svc->usage, *next; u; u = next) {
                next = u->next;
                free(u);
        }
        svc->usage = NULL;
        pthread_mutex_destroy(&svc->usage_lock);
        pthread_cond_destroy(&svc->launch_cond);
}

/* With usage_lock held: the tenant's entry, made on first use. */
static struct svc_usage *usage_locked(struct cage_service *svc, const char *tenant)
{
        for (struct svc_usage *u = svc->usage; u; u = u->next)
                if (strcmp(u->tenant, tenant) == 0)
                        return u;
        struct svc_usage *u = calloc(1, sizeof(*u));
        if (!u)
                return NULL;
        snprintf(u->tenant, sizeof(u->tenant), "%s", tenant);
        u->next = svc->usage;
        svc->usage = u;
        return u;
}

static int refuse(struct cage_error *err, const char *quota, const char *tenant, uint64_t limit,
                  uint64_t held, const char *what)
{
        cage_metrics_quota_refused(quota);
        return cage_fail_plain(err, -EUSERS,
                               "quota %s: tenant \"%s\" may have at most %llu %s and has %llu; "
                               "try again when one ends",
                               quota, tenant, (unsigned long long)limit, what,
                               (unsigned long long)held);
}

/* Adds (or removes, with negative deltas) to the tenant's usage; with
 * check, refuses what would go over a quota and changes nothing then. */
static int change(struct cage_service *svc, const char *tenant, int running, int sessions, int runs,
                  int64_t memory_mib, bool check, struct cage_error *err)
{
        const struct cage_quotas *q = cage_config_quotas(svc->cfg, tenant);
        int r = 0;
        pthread_mutex_lock(&svc->usage_lock);
        struct svc_usage *u = usage_locked(svc, tenant);
        if (!u)
                r = cage_fail(err, -ENOMEM, "usage");
        else if (check && running > 0 && q->sandboxes_running &&
                 u->running + (uint32_t)running > q->sandboxes_running)
                r = refuse(err, "sandboxes_running", tenant, q->sandboxes_running, u->running,
                           "running sandboxes");
        else if (check && sessions > 0 && q->sessions &&
                 u->sessions + (uint32_t)sessions > q->sessions)
                r = refuse(err, "sessions", tenant, q->sessions, u->sessions, "Python sessions");
        else if (check && runs > 0 && q->runs && u->runs + (uint32_t)runs > q->runs)
                r = refuse(err, "runs", tenant, q->runs, u->runs, "calls running at once");
        else if (check && memory_mib > 0 && q->memory_mib &&
                 u->memory_mib + (uint64_t)memory_mib > q->memory_mib)
                r = refuse(err, "memory_mib", tenant, q->memory_mib, u->memory_mib,
                           "MiB of memory reserved by running sandboxes and runs");
        if (u && r == 0) {
                u->running += (uint32_t)running;
                u->sessions += (uint32_t)sessions;
                u->runs += (uint32_t)runs;
                u->memory_mib += (uint64_t)memory_mib;
        }
        pthread_mutex_unlock(&svc->usage_lock);
        return r;
}

int svc_quota_sandbox_start(struct cage_service *svc, const char *tenant, uint64_t memory_mib,
                            struct cage_error *err)
{
        return change(svc, tenant, 1, 0, 0, (int64_t)memory_mib, true, err);
}

void svc_quota_sandbox_stop(struct cage_service *svc, const char *tenant, uint64_t memory_mib)
{
        (void)change(svc, tenant, -1, 0, 0, -(int64_t)memory_mib, false, NULL);
}

int svc_quota_session_start(struct cage_service *svc, const char *tenant, struct cage_error *err)
{
        return change(svc, tenant, 0, 1, 0, 0, true, err);
}

void svc_quota_session_end(struct cage_service *svc, const char *tenant)
{
        (void)change(svc, tenant, 0, -1, 0, 0, false, NULL);
}

int svc_quota_memory(struct cage_service *svc, const char *tenant, int64_t memory_mib,
                     struct cage_error *err)
{
        return change(svc, tenant, 0, 0, 0, memory_mib, memory_mib > 0, err);
}

unsigned svc_calls_in_flight(struct cage_service *svc)
{
        unsigned n = 0;
        pthread_mutex_lock(&svc->usage_lock);
        for (struct svc_usage *u = svc->usage; u; u = u->next)
                n += u->runs;
        pthread_mutex_unlock(&svc->usage_lock);
        return n;
}

/* ---- calls ---- */

int svc_call_begin(struct cage_service *svc, const char *tenant, enum cage_metric_kind kind,
                   struct svc_call *call, struct cage_error *err)
{
        *call = (struct svc_call){
                .svc = svc, .tenant = tenant, .kind = kind, .start_ms = clock_mono_ms()};
        cage_metrics_run_begin(kind);
        int r = change(svc, tenant, 0, 0, 1, 0, true, err);
        call->admitted = r == 0;
        return r;
}

/* The status a call ended with, for codecage_runs_total. */
static const char *call_status(int r, const json_t *result)
{
        if (r < 0)
                return cage_service_http_status(r) < 500 ? "rejected" : "failed";
        const char *s = json_string_value(json_object_get(result, "status"));
        return s ? s : "internal_error";
}

void svc_call_end(struct svc_call *call, int r, const json_t *result)
{
        if (call->admitted)
                (void)change(call->svc, call->tenant, 0, 0, -1, 0, false, NULL);
        cage_metrics_run_end(call->kind, call_status(r, result), clock_mono_ms() - call->start_ms);
}

/* ---- the launch gate ---- */

static bool cancelled(const struct cage_service_io *io)
{
        struct pollfd p = {.fd = io ? io->cancel_fd : -1, .events = POLLIN};
        return p.fd >= 0 && poll(&p, 1, 0) > 0;
}

int svc_launch_acquire(struct cage_service *svc, const struct cage_service_io *io,
                       struct cage_error *err)
{
        uint64_t t0 = clock_mono_ms();
        int r = 0;
        cage_metrics_launches(0, 1);
        pthread_mutex_lock(&svc->usage_lock);
        while (r == 0 && svc->launches_running >= svc->cfg->limits.launches_max) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += LAUNCH_POLL_MS * 1000000L;
                if (until.tv_nsec >= 1000000000L) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&svc->launch_cond, &svc->usage_lock, &until);
                if (svc->launches_running >= svc->cfg->limits.launches_max &&
                    (clock_mono_ms() - t0 > LAUNCH_WAIT_MAX_MS || cancelled(io)))
                        r = -EUSERS;
        }
        if (r == 0)
                svc->launches_running++;
        pthread_mutex_unlock(&svc->usage_lock);
        cage_metrics_launches(r == 0 ? 1 : 0, -1);
        if (r < 0) {
                cage_metrics_quota_refused("launch_queue");
                return cage_fail_plain(err, r,
                                       "the server is busy: this launch waited for one of the %u "
                                       "launch slots (limits.launches_max) and gave up after %d "
                                       "s or when its client left; try again",
                                       svc->cfg->limits.launches_max, LAUNCH_WAIT_MAX_MS / 1000);
        }
        cage_metrics_launch_waited(clock_mono_ms() - t0);
        return 0;
}

void svc_launch_release(struct cage_service *svc)
{
        pthread_mutex_lock(&svc->usage_lock);
        svc->launches_running--;
        pthread_cond_signal(&svc->launch_cond);
        pthread_mutex_unlock(&svc->usage_lock);
        cage_metrics_launches(-1, 0);
}

/* ---- the scrape ---- */

void svc_usage_render(struct cage_service *svc, FILE *out)
{
        static const char *const names[] = {"codecage_sandboxes_running", "codecage_sessions",
                                            "codecage_tenant_runs_in_flight",
                                            "codecage_memory_reserved_bytes"};
        static const char *const help[] = {
                "Named sandboxes running, per tenant.", "Live Python sessions, per tenant.",
                "Calls running now, per tenant.",
                "memory_mib of running sandboxes and runs, summed, per tenant (bytes)."};
        pthread_mutex_lock(&svc->usage_lock);
        for (size_t i = 0; i < 4; i++) {
                fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", names[i], help[i], names[i]);
                for (struct svc_usage *u = svc->usage; u; u = u->next) {
                        uint64_t v = i == 0   ? u->running
                                     : i == 1 ? u->sessions
                                     : i == 2 ? u->runs
                                              : u->memory_mib * 1024 * 1024;
                        fprintf(out, "%s{tenant=\"", names[i]);
                        cage_metrics_label(out, u->tenant);
                        fprintf(out, "\"} %llu\n", (unsigned long long)v);
                }
        }
        pthread_mutex_unlock(&svc->usage_lock);
}
