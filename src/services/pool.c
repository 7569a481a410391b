/* The warm pool; see pool.h. One shelf per image (the host's first), each
 * keeping `size` entries ready; one refill thread fills the emptiest shelf,
 * one entry at a time (a start is a few tens of milliseconds: the sandbox,
 * then python3 loading the session driver). */
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

#define RETRY_AFTER_FAILURE_S 1   /* after one failed start; doubling up to... */
#define RETRY_MAX_S           60  /* ...this (an image that cannot be pulled now) */
#define POOL_WARMING_WEIGHT   1   /* cpu weight while a sandbox warms up */
#define POOL_SERVING_WEIGHT   100 /* the default, once it serves a run */

struct pool_entry {
        struct cage_box *box;
        struct cage_session *session;
        struct pool_entry *next;
};

/* The ready sandboxes of one image. */
struct pool_shelf {
        unsigned size;
        struct svc_spec *spec; /* the default policy, with this image */
        char *policy;          /* the spec's doc without per-run fields, serialised */
        struct pool_entry *ready;
        unsigned n_ready;
        uint64_t hits, misses, started, failed, start_ms_total;
        unsigned failing;     /* failed starts in a row */
        uint64_t retry_at_ms; /* no start before (after failures) */
};

struct cage_pool {
        const struct cage_config *cfg;
        cage_pool_start_fn start_box;
        void *start_ctx;
        /* Used sandboxes waiting to be destroyed off the request path. */
        struct pool_entry *dead;
        unsigned n_dead;
        bool disposer_running;
        pthread_t disposer;
        pthread_cond_t dead_cond;
        struct pool_shelf *shelves;
        size_t n_shelves;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop, thread_running;
        pthread_t thread;
        uint64_t cold;
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

static int start_entry(struct cage_pool *p, struct pool_shelf *shelf, struct pool_entry **ret)
{
        struct pool_entry *e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        int r = p->start_box(p->start_ctx, shelf->spec, &e->box);
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

/* The shelf furthest below its size and not waiting out failures, or NULL. */
static struct pool_shelf *emptiest_locked(struct cage_pool *p)
{
        struct pool_shelf *best = NULL;
        uint64_t now = clock_mono_ms();
        for (size_t i = 0; i < p->n_shelves; i++) {
                struct pool_shelf *s = &p->shelves[i];
                if (s->n_ready < s->size && s->retry_at_ms <= now &&
                    (!best || s->size - s->n_ready > best->size - best->n_ready))
                        best = s;
        }
        return best;
}

/* Sleeps a second (or until woken): long enough for a shelf's retry. */
static void wait_retry_locked(struct cage_pool *p)
{
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += RETRY_AFTER_FAILURE_S;
        pthread_cond_timedwait(&p->cond, &p->lock, &until);
}

/* A failed start: the shelf waits 1, 2, 4, ... up to RETRY_MAX_S seconds. */
static void note_failure_locked(struct pool_shelf *s)
{
        s->failed++;
        unsigned shift = s->failing < 6 ? s->failing : 6;
        uint64_t delay_s = (uint64_t)RETRY_AFTER_FAILURE_S << shift;
        s->retry_at_ms = clock_mono_ms() + (delay_s < RETRY_MAX_S ? delay_s : RETRY_MAX_S) * 1000;
        s->failing++;
}

static bool waiting_out_failures_locked(const struct cage_pool *p)
{
        for (size_t i = 0; i < p->n_shelves; i++)
                if (p->shelves[i].n_ready < p->shelves[i].size && p->shelves[i].failing)
                        return true;
        return false;
}

static void *refill_main(void *arg)
{
        struct cage_pool *p = arg;
        pthread_mutex_lock(&p->lock);
        while (!p->stop) {
                struct pool_shelf *shelf = emptiest_locked(p);
                if (!shelf) {
                        if (waiting_out_failures_locked(p))
                                wait_retry_locked(p);
                        else
                                pthread_cond_wait(&p->cond, &p->lock);
                        continue;
                }
                pthread_mutex_unlock(&p->lock);
                uint64_t t0 = clock_mono_ms();
                struct pool_entry *e = NULL;
                int r = start_entry(p, shelf, &e);
                pthread_mutex_lock(&p->lock);
                if (r < 0) {
                        note_failure_locked(shelf);
                        continue;
                }
                shelf->failing = 0;
                shelf->started++;
                shelf->start_ms_total += clock_mono_ms() - t0;
                e->next = shelf->ready;
                shelf->ready = e;
                shelf->n_ready++;
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* A shelf of `size` sandboxes of image ("host" or a reference). */
static int add_shelf(struct cage_pool *p, const char *image, unsigned size, struct cage_error *err)
{
        json_auto_t *req = json_pack("{s:s}", "image", image);
        struct pool_shelf *s = &p->shelves[p->n_shelves];
        *s = (struct pool_shelf){.size = size};
        int r = req ? svc_spec_parse(p->cfg, req, false, NULL, &s->spec, err)
                    : cage_fail(err, -ENOMEM, "pool");
        if (r == 0 && !(s->policy = policy_of(s->spec)))
                r = cage_fail(err, -ENOMEM, "pool");
        if (r < 0) {
                s->spec = svc_spec_free(s->spec);
                return cage_fail(err, r, "pool: image \"%s\"", image);
        }
        p->n_shelves++;
        return 0;
}

static int add_shelves(struct cage_pool *p, struct cage_error *err)
{
        const struct cage_config *cfg = p->cfg;
        unsigned host_size = cfg->pool_size;
        for (size_t i = 0; i < cfg->n_pool_images; i++)
                if (strcmp(cfg->pool_images[i].image, "host") == 0)
                        host_size = cfg->pool_images[i].size;
        p->shelves = calloc(cfg->n_pool_images + 1, sizeof(*p->shelves));
        if (!p->shelves)
                return cage_fail(err, -ENOMEM, "pool");
        int r = add_shelf(p, "host", host_size, err);
        for (size_t i = 0; r == 0 && i < cfg->n_pool_images; i++)
                if (strcmp(cfg->pool_images[i].image, "host") != 0)
                        r = add_shelf(p, cfg->pool_images[i].image, cfg->pool_images[i].size, err);
        return r;
}

static bool any_size(const struct cage_pool *p)
{
        for (size_t i = 0; i < p->n_shelves; i++)
                if (p->shelves[i].size)
                        return true;
        return false;
}

static int start_threads(struct cage_pool *p, struct cage_error *err)
{
        int r = -pthread_create(&p->disposer, NULL, dispose_main, p);
        p->disposer_running = r == 0;
        if (r < 0)
                return cage_fail(err, r, "starting the pool's disposer thread");
        if (!any_size(p))
                return 0;
        r = -pthread_create(&p->thread, NULL, refill_main, p);
        p->thread_running = r == 0;
        return r < 0 ? cage_fail(err, r, "starting the pool's refill thread") : 0;
}

int cage_pool_open(const struct cage_config *cfg, cage_pool_start_fn start_box, void *start_ctx,
                   struct cage_pool **ret, struct cage_error *err)
{
        struct cage_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return cage_fail(err, -ENOMEM, "pool");
        p->cfg = cfg;
        p->start_box = start_box;
        p->start_ctx = start_ctx;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        pthread_cond_init(&p->dead_cond, NULL);
        int r = add_shelves(p, err);
        if (r == 0)
                r = start_threads(p, err);
        if (r < 0) {
                cage_pool_close(p);
                return r;
        }
        *ret = p;
        return 0;
}

static void free_entries(struct pool_entry *e)
{
        for (struct pool_entry *next; e; e = next) {
                next = e->next;
                destroy_entry(e);
        }
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
        for (size_t i = 0; i < p->n_shelves; i++) {
                free_entries(p->shelves[i].ready);
                svc_spec_free(p->shelves[i].spec);
                free(p->shelves[i].policy);
        }
        free(p->shelves);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        pthread_cond_destroy(&p->dead_cond);
        free(p);
        return NULL;
}

/* The shelf whose policy is the spec's, if it keeps any sandboxes. */
static struct pool_shelf *shelf_for(const struct cage_pool *p, const struct svc_spec *spec)
{
        _cleanup_free_ char *policy = policy_of(spec);
        for (size_t i = 0; policy && i < p->n_shelves; i++)
                if (p->shelves[i].size && strcmp(policy, p->shelves[i].policy) == 0)
                        return &p->shelves[i];
        return NULL;
}

bool cage_pool_serves(const struct cage_pool *p, const struct svc_spec *spec)
{
        return shelf_for(p, spec) != NULL;
}

bool cage_pool_take(struct cage_pool *p, const struct svc_spec *spec, struct cage_box **box,
                    struct cage_session **session)
{
        struct pool_shelf *shelf = shelf_for(p, spec);
        if (!shelf)
                return false;
        pthread_mutex_lock(&p->lock);
        struct pool_entry *e = shelf->ready;
        if (e) {
                shelf->ready = e->next;
                shelf->n_ready--;
                shelf->hits++;
        } else {
                shelf->misses++;
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

static json_t *shelf_stats(const struct pool_shelf *s)
{
        return json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:f}", "image", s->spec->image,
                         "size", (int)s->size, "ready", (int)s->n_ready, "hits",
                         (json_int_t)s->hits, "misses", (json_int_t)s->misses, "started",
                         (json_int_t)s->started, "failed", (json_int_t)s->failed, "avg_start_ms",
                         s->started ? (double)s->start_ms_total / (double)s->started : 0.0);
}

json_t *cage_pool_stats(struct cage_pool *p)
{
        pthread_mutex_lock(&p->lock);
        /* The host's shelf at the top level (as before images), every shelf
         * in "images". */
        json_t *o = shelf_stats(&p->shelves[0]);
        json_t *all = json_array();
        for (size_t i = 0; o && all && i < p->n_shelves; i++)
                json_array_append_new(all, shelf_stats(&p->shelves[i]));
        if (o) {
                json_object_del(o, "image");
                json_object_set_new(o, "cold", json_integer((json_int_t)p->cold));
                json_object_set_new(o, "images", all ? all : json_array());
        }
        pthread_mutex_unlock(&p->lock);
        return o;
}
