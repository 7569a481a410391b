/* The warm pool; see pool.h. One refill thread keeps `size` entries ready,
 * starting one at a time (a start is a few tens of milliseconds: the
 * sandbox, then python3 loading the session driver). */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "services/config.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define RETRY_AFTER_FAILURE_S 1
#define POOL_WARMING_WEIGHT   1   /* cpu weight while a sandbox warms up */
#define POOL_SERVING_WEIGHT   100 /* the default, once it serves a run */

struct pool_entry {
        struct cage_box *box;
        struct cage_session *session;
        struct pool_entry *next;
};

struct cage_pool {
        const struct cage_config *cfg;
        /* Used sandboxes waiting to be destroyed off the request path. */
        struct pool_entry *dead;
        unsigned n_dead;
        bool disposer_running;
        pthread_t disposer;
        pthread_cond_t dead_cond;
        unsigned size;
        struct svc_spec *spec;
        char *policy; /* the spec's doc without per-run fields, serialised */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct pool_entry *ready;
        unsigned n_ready;
        bool stop, thread_running;
        pthread_t thread;
        uint64_t hits, misses, cold, started, failed, start_ms_total;
};

/* The policy of a spec: everything but what may differ per run. */
static char *policy_of(const struct svc_spec *spec)
{
        json_t *doc = json_deep_copy(spec->doc);
        if (!doc)
                return NULL;
        json_object_del(doc, "timeout_s");
        json_object_del(doc, "output_max_bytes");
        json_object_del(doc, "name");
        char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(doc);
        return s;
}

static void destroy_entry(struct pool_entry *e)
{
        cage_session_free(e->session);
        cage_box_destroy(e->box);
        free(e);
}

/* One run of nothing, so the first real run does not pay for what the
 * interpreter does once (compiling the run path, first page faults). It
 * runs no user code and leaves the namespace as it was. */
static int warm_up(struct cage_session *s)
{
        struct cage_session_run run = {
                .code = "None", .code_len = 4, .timeout_ms = 10000, .cancel_fd = -1};
        json_t *res = NULL;
        int r = cage_session_run(s, &run, &res, NULL);
        bool ok = r == 0 && json_is_false(json_object_get(res, "state_lost")) &&
                  strcmp(json_string_value(json_object_get(res, "status")), "ok") == 0;
        json_decref(res);
        return ok ? 0 : -EIO;
}

static int start_entry(struct cage_pool *p, struct pool_entry **ret)
{
        _cleanup_free_ char *env = NULL;
        struct cage_spec spec;
        struct pool_entry *e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        int r = svc_spec_to_cage(p->spec, p->cfg, NULL, NULL, &spec, &env, NULL);
        if (r == 0)
                r = cage_box_start(&spec, &e->box, NULL);
        /* Warming up yields the CPU to runs in progress. */
        if (r == 0)
                (void)cage_box_set_cpu_weight(e->box, POOL_WARMING_WEIGHT);
        if (r == 0)
                r = cage_session_start(e->box, NULL, &e->session, NULL);
        if (r == 0)
                r = warm_up(e->session);
        if (r < 0) {
                destroy_entry(e);
                return r;
        }
        *ret = e;
        return 0;
}

static void *dispose_main(void *arg)
{
        struct cage_pool *p = arg;
        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (!p->dead && !p->stop)
                        pthread_cond_wait(&p->dead_cond, &p->lock);
                struct pool_entry *e = p->dead;
                if (!e)
                        break; /* stopping, nothing left */
                p->dead = e->next;
                p->n_dead--;
                pthread_mutex_unlock(&p->lock);
                destroy_entry(e);
                pthread_mutex_lock(&p->lock);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

void cage_pool_dispose(struct cage_pool *p, struct cage_box *box, struct cage_session *session)
{
        struct pool_entry *e = calloc(1, sizeof(*e));
        if (!e || !p->disposer_running) {
                free(e);
                cage_session_free(session);
                cage_box_destroy(box);
                return;
        }
        /* Nothing of it may run on: kill now, tear down later. */
        cage_box_kill_init(box);
        e->box = box;
        e->session = session;
        pthread_mutex_lock(&p->lock);
        e->next = p->dead;
        p->dead = e;
        p->n_dead++;
        pthread_cond_signal(&p->dead_cond);
        pthread_mutex_unlock(&p->lock);
}

static void *refill_main(void *arg)
{
        struct cage_pool *p = arg;
        pthread_mutex_lock(&p->lock);
        while (!p->stop) {
                if (p->n_ready >= p->size) {
                        pthread_cond_wait(&p->cond, &p->lock);
                        continue;
                }
                pthread_mutex_unlock(&p->lock);
                uint64_t t0 = clock_mono_ms();
                struct pool_entry *e = NULL;
                int r = start_entry(p, &e);
                pthread_mutex_lock(&p->lock);
                if (r < 0) {
                        p->failed++;
                        struct timespec until;
                        clock_gettime(CLOCK_REALTIME, &until);
                        until.tv_sec += RETRY_AFTER_FAILURE_S;
                        pthread_cond_timedwait(&p->cond, &p->lock, &until);
                        continue;
                }
                p->started++;
                p->start_ms_total += clock_mono_ms() - t0;
                e->next = p->ready;
                p->ready = e;
                p->n_ready++;
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

int cage_pool_open(const struct cage_config *cfg, unsigned size, struct cage_pool **ret,
                   struct cage_error *err)
{
        struct cage_pool *p = calloc(1, sizeof(*p));
        json_t *empty = json_object();
        if (!p || !empty) {
                free(p);
                json_decref(empty);
                return cage_fail(err, -ENOMEM, "pool");
        }
        p->cfg = cfg;
        p->size = size;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        pthread_cond_init(&p->dead_cond, NULL);
        int r = svc_spec_parse(cfg, empty, false, NULL, &p->spec, err);
        if (r == 0) {
                r = -pthread_create(&p->disposer, NULL, dispose_main, p);
                p->disposer_running = r == 0;
                if (r < 0)
                        cage_fail(err, r, "starting the pool's disposer thread");
        }
        json_decref(empty);
        if (r == 0 && !(p->policy = policy_of(p->spec)))
                r = cage_fail(err, -ENOMEM, "pool");
        if (r == 0 && size > 0) {
                r = -pthread_create(&p->thread, NULL, refill_main, p);
                p->thread_running = r == 0;
                if (r < 0)
                        cage_fail(err, r, "starting the pool's refill thread");
        }
        if (r < 0) {
                cage_pool_close(p);
                return r;
        }
        *ret = p;
        return 0;
}

struct cage_pool *cage_pool_close(struct cage_pool *p)
{
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_broadcast(&p->cond);
        pthread_cond_broadcast(&p->dead_cond);
        pthread_mutex_unlock(&p->lock);
        if (p->thread_running)
                pthread_join(p->thread, NULL);
        if (p->disposer_running)
                pthread_join(p->disposer, NULL);
        for (struct pool_entry *e = p->ready, *next; e; e = next) {
                next = e->next;
                destroy_entry(e);
        }
        svc_spec_free(p->spec);
        free(p->policy);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        pthread_cond_destroy(&p->dead_cond);
        free(p);
        return NULL;
}

bool cage_pool_serves(const struct cage_pool *p, const struct svc_spec *spec)
{
        _cleanup_free_ char *policy = policy_of(spec);
        return p->size > 0 && policy && strcmp(policy, p->policy) == 0;
}

bool cage_pool_take(struct cage_pool *p, struct cage_box **box, struct cage_session **session)
{
        pthread_mutex_lock(&p->lock);
        struct pool_entry *e = p->ready;
        if (e) {
                p->ready = e->next;
                p->n_ready--;
                p->hits++;
        } else {
                p->misses++;
        }
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        if (!e)
                return false;
        *box = e->box;
        *session = e->session;
        free(e);
        (void)cage_box_set_cpu_weight(*box, POOL_SERVING_WEIGHT);
        return true;
}

void cage_pool_note_cold(struct cage_pool *p)
{
        pthread_mutex_lock(&p->lock);
        p->cold++;
        pthread_mutex_unlock(&p->lock);
}

json_t *cage_pool_stats(struct cage_pool *p)
{
        pthread_mutex_lock(&p->lock);
        json_t *o =
                json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:f}", "size", (int)p->size, "ready",
                          (int)p->n_ready, "hits", (json_int_t)p->hits, "misses",
                          (json_int_t)p->misses, "cold", (json_int_t)p->cold, "started",
                          (json_int_t)p->started, "failed", (json_int_t)p->failed, "avg_start_ms",
                          p->started ? (double)p->start_ms_total / (double)p->started : 0.0);
        pthread_mutex_unlock(&p->lock);
        return o;
}
