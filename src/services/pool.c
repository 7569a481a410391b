/* The warm pool; see pool.h. One shelf per image (the host's first), each
 * keeping `size` entries ready. A shelf forks its sandboxes from a zygote
 * (core/zygote.h: a few milliseconds each, most of it waiting on the
 * kernel), REFILLERS at a time so those waits overlap; a shelf whose image
 * cannot host one starts each sandbox and python3 in it (tens of
 * milliseconds). Refill threads take the emptiest shelf. */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "services/config.h"
#include "services/metrics.h"
#include "util/background.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define RETRY_AFTER_FAILURE_S 1    /* after one failed start; doubling up to... */
#define RETRY_MAX_S           60   /* ...this (an image that cannot be pulled now) */
#define POOL_WARMING_WEIGHT   1    /* cpu weight while a sandbox warms up */
#define POOL_SERVING_WEIGHT   100  /* the default, once it serves a run */
#define REFILLERS             4    /* refill threads */
#define DISPOSERS             4    /* disposer threads: a teardown mostly waits for the kernel */
#define ZYGOTE_RETRY_MS       5000 /* after a zygote's template ended or failed to start */
#define POOL_WAIT_MS          2000 /* a run waits this long for a fork before it starts cold */

struct pool_entry {
        struct cage_box *box;
        struct cage_session *session;
        struct pool_entry *next;
};

/* A run waiting for the shelf's next sandbox: served in arrival order. */
struct pool_waiter {
        pthread_cond_t cond;
        struct pool_entry *entry; /* handed over by a refill thread */
        struct pool_waiter *next;
};

/* The ready sandboxes of one image. */
struct pool_shelf {
        unsigned size;
        struct svc_spec *spec; /* the default policy, with this image */
        char *policy;          /* the spec's doc without per-run fields, serialised */
        struct pool_entry *ready;
        unsigned n_ready;
        uint64_t hits, misses, started, failed, start_ms_total;
        uint64_t waited; /* hits that waited for a fork */
        struct pool_waiter *waiters, **waiters_tail;
        unsigned n_waiters;
        unsigned failing;     /* failed starts in a row */
        uint64_t retry_at_ms; /* no start before (after failures) */
        unsigned starting;    /* entries being started now */
        /* Under zygote_lock: */
        struct cage_zygote *zygote;
        bool zygote_tried;        /* once per shelf; again after its template ended */
        uint64_t zygote_retry_ms; /* not before */
        /* Under lock, copied from the above: */
        bool forks;                                                   /* it has a zygote */
        char zygote_error[sizeof(((struct cage_error *)0)->message)]; /* why not */
};

struct cage_pool {
        const struct cage_config *cfg;
        cage_pool_start_fn start_box;
        cage_pool_zygote_fn start_zygote;
        void *start_ctx;
        /* Used sandboxes waiting to be destroyed off the request path. */
        struct pool_entry *dead;
        unsigned n_dead;
        uint64_t disposed, dispose_ms_total;
        bool disposer_running;
        unsigned n_disposers;
        pthread_t disposers[DISPOSERS];
        pthread_cond_t dead_cond;
        struct pool_shelf *shelves;
        size_t n_shelves;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop;
        unsigned n_threads;
        pthread_t threads[REFILLERS];
        pthread_mutex_t zygote_lock; /* starting a shelf's zygote */
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

/* The shelf's zygote, started on first use (and again a while after its
 * template ended), or NULL: then the shelf starts sandboxes one by one. */
static struct cage_zygote *zygote_of(struct cage_pool *p, struct pool_shelf *shelf)
{
        pthread_mutex_lock(&p->zygote_lock);
        if (shelf->zygote && !cage_zygote_alive(shelf->zygote)) {
                shelf->zygote = cage_zygote_free(shelf->zygote);
                shelf->zygote_retry_ms = clock_mono_ms() + ZYGOTE_RETRY_MS;
                shelf->zygote_tried = false;
        }
        struct cage_error err = {0};
        if (!shelf->zygote && !shelf->zygote_tried && clock_mono_ms() >= shelf->zygote_retry_ms &&
            p->start_zygote) {
                shelf->zygote_tried = true;
                int r = p->start_zygote(p->start_ctx, shelf->spec, &shelf->zygote, &err);
                if (r < 0)
                        shelf->zygote = NULL;
                /* This image's Python cannot host one: for good. Anything else
                 * (an image not pulled yet, a failed start): again later. */
                if (r < 0 && r != -ENOTSUP) {
                        shelf->zygote_tried = false;
                        shelf->zygote_retry_ms = clock_mono_ms() + ZYGOTE_RETRY_MS;
                }
        }
        struct cage_zygote *z = shelf->zygote;
        pthread_mutex_lock(&p->lock);
        if (err.message[0])
                snprintf(shelf->zygote_error, sizeof(shelf->zygote_error), "%s", err.message);
        else if (z)
                shelf->zygote_error[0] = '\0';
        shelf->forks = z != NULL;
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->zygote_lock);
        return z;
}

static int fork_entry(struct cage_zygote *z, struct pool_entry *e)
{
        struct cage_box_proc *driver;
        int chan;
        /* No lower CPU weight while it warms up (as for a start): a fork needs
         * a millisecond or two of CPU, and a starved refill empties the pool. */
        int r = cage_zygote_fork(z, NULL, &e->box, &driver, &chan, NULL);
        if (r == 0)
                r = cage_session_adopt(e->box, driver, chan, &e->session, NULL);
        return r;
}

static int start_entry(struct cage_pool *p, struct pool_shelf *shelf, struct pool_entry **ret)
{
        struct pool_entry *e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        struct cage_zygote *z = zygote_of(p, shelf);
        int r;
        if (z) {
                r = fork_entry(z, e);
        } else {
                r = p->start_box(p->start_ctx, shelf->spec, &e->box);
                /* Warming up yields the CPU to runs in progress. */
                if (r == 0)
                        (void)cage_box_set_cpu_weight(e->box, POOL_WARMING_WEIGHT);
                if (r == 0)
                        r = cage_session_start(e->box, NULL, &e->session, NULL);
        }
        /* A fork's interpreter is warm already (the zygote warmed up before
         * it forked). */
        if (r == 0 && !z)
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
        thread_mark_background();
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
                uint64_t t0 = clock_mono_ms();
                destroy_entry(e);
                pthread_mutex_lock(&p->lock);
                p->disposed++;
                p->dispose_ms_total += clock_mono_ms() - t0;
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

/* Entries to start: below size, and one more for each run waiting. */
static unsigned missing(const struct pool_shelf *s)
{
        unsigned have = s->n_ready + s->starting, want = s->size + s->n_waiters;
        return have < want ? want - have : 0;
}

/* The shelf furthest below its size (counting entries being started) and
 * not waiting out failures, or NULL. Without a zygote a shelf has one start
 * at a time (each is a python3 loading, CPU-bound). */
static struct pool_shelf *emptiest_locked(struct cage_pool *p)
{
        struct pool_shelf *best = NULL;
        uint64_t now = clock_mono_ms();
        for (size_t i = 0; i < p->n_shelves; i++) {
                struct pool_shelf *s = &p->shelves[i];
                bool serial = !s->forks && s->starting > 0;
                if (missing(s) && !serial && s->retry_at_ms <= now &&
                    (!best || missing(s) > missing(best)))
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

/* Waits (with lock held) for the shelf's next entry while it forks them (a
 * fork is a few milliseconds, a sandbox started cold many times that); the
 * refill threads hand entries to waiters first come, first served. */
static struct pool_entry *wait_entry_locked(struct cage_pool *p, struct pool_shelf *shelf)
{
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += POOL_WAIT_MS / 1000;
        until.tv_nsec += (POOL_WAIT_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        struct pool_waiter w = {.entry = NULL};
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&w.cond, &attr);
        pthread_condattr_destroy(&attr);
        if (!shelf->waiters_tail)
                shelf->waiters_tail = &shelf->waiters;
        *shelf->waiters_tail = &w;
        shelf->waiters_tail = &w.next;
        shelf->n_waiters++;
        while (!w.entry && shelf->forks && !p->stop)
                if (pthread_cond_timedwait(&w.cond, &p->lock, &until) == ETIMEDOUT)
                        break;
        if (!w.entry) { /* still queued: leave the queue */
                struct pool_waiter **pp = &shelf->waiters;
                while (*pp != &w)
                        pp = &(*pp)->next;
                *pp = w.next;
                if (shelf->waiters_tail == &w.next)
                        shelf->waiters_tail = pp;
                shelf->n_waiters--;
        } else {
                shelf->waited++;
        }
        pthread_cond_destroy(&w.cond);
        return w.entry;
}

/* A new entry: to the first waiting run, else on the shelf. */
static void shelve_locked(struct pool_shelf *shelf, struct pool_entry *e)
{
        struct pool_waiter *w = shelf->waiters;
        if (w) {
                shelf->waiters = w->next;
                if (!shelf->waiters)
                        shelf->waiters_tail = &shelf->waiters;
                shelf->n_waiters--;
                w->entry = e;
                pthread_cond_signal(&w->cond);
                return;
        }
        e->next = shelf->ready;
        shelf->ready = e;
        shelf->n_ready++;
}

static void *refill_main(void *arg)
{
        struct cage_pool *p = arg;
        thread_mark_background();
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
                shelf->starting++;
                pthread_mutex_unlock(&p->lock);
                uint64_t t0 = clock_mono_ms();
                struct pool_entry *e = NULL;
                int r = start_entry(p, shelf, &e);
                pthread_mutex_lock(&p->lock);
                shelf->starting--;
                cage_metrics_pool_refill(clock_mono_ms() - t0, r == 0);
                if (r < 0) {
                        note_failure_locked(shelf);
                        continue;
                }
                shelf->failing = 0;
                shelf->started++;
                shelf->start_ms_total += clock_mono_ms() - t0;
                shelve_locked(shelf, e);
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
        int r = 0;
        for (unsigned i = 0; r == 0 && i < DISPOSERS; i++)
                if ((r = -pthread_create(&p->disposers[i], NULL, dispose_main, p)) == 0)
                        p->n_disposers++;
        p->disposer_running = p->n_disposers > 0;
        if (r < 0)
                return cage_fail(err, r, "starting the pool's disposer threads");
        if (!any_size(p))
                return 0;
        for (unsigned i = 0; i < REFILLERS; i++) {
                r = -pthread_create(&p->threads[i], NULL, refill_main, p);
                if (r < 0)
                        return cage_fail(err, r, "starting the pool's refill threads");
                p->n_threads++;
        }
        return 0;
}

int cage_pool_open(const struct cage_config *cfg, cage_pool_start_fn start_box,
                   cage_pool_zygote_fn start_zygote, void *start_ctx, struct cage_pool **ret,
                   struct cage_error *err)
{
        struct cage_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return cage_fail(err, -ENOMEM, "pool");
        p->cfg = cfg;
        p->start_box = start_box;
        p->start_zygote = start_zygote;
        pthread_mutex_init(&p->zygote_lock, NULL);
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
        for (size_t i = 0; i < p->n_shelves; i++)
                for (struct pool_waiter *w = p->shelves[i].waiters; w; w = w->next)
                        pthread_cond_signal(&w->cond);
        pthread_cond_broadcast(&p->dead_cond);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        for (unsigned i = 0; i < p->n_disposers; i++)
                pthread_join(p->disposers[i], NULL);
        for (size_t i = 0; i < p->n_shelves; i++) {
                free_entries(p->shelves[i].ready);
                cage_zygote_free(p->shelves[i].zygote);
                svc_spec_free(p->shelves[i].spec);
                free(p->shelves[i].policy);
        }
        free(p->shelves);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->zygote_lock);
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

/* One entry for a run (waiting for a fork where the shelf forks), or NULL. */
static struct pool_entry *take_entry(struct cage_pool *p, struct pool_shelf *shelf)
{
        pthread_mutex_lock(&p->lock);
        struct pool_entry *e = shelf->ready;
        if (e) {
                shelf->ready = e->next;
                shelf->n_ready--;
        }
        /* One entry gone, one to start: one refill thread (a thread at
         * work looks for more before it waits again). */
        pthread_cond_signal(&p->cond);
        if (!e && shelf->forks)
                e = wait_entry_locked(p, shelf);
        if (e)
                shelf->hits++;
        else
                shelf->misses++;
        pthread_mutex_unlock(&p->lock);
        return e;
}

bool cage_pool_take(struct cage_pool *p, const struct svc_spec *spec, struct cage_box **box,
                    struct cage_session **session)
{
        struct pool_shelf *shelf = shelf_for(p, spec);
        struct pool_entry *e = shelf ? take_entry(p, shelf) : NULL;
        /* A sandbox that ended while it waited (its zygote's template died
         * and took it along) is no use: the next one. */
        for (int tries = 1; e && !cage_session_alive(e->session); tries++) {
                cage_pool_dispose(p, e->box, e->session);
                free(e);
                e = tries < 3 ? take_entry(p, shelf) : NULL;
        }
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
        json_t *o =
                json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:f, s:b}", "image", s->spec->image,
                          "size", (int)s->size, "ready", (int)s->n_ready, "hits",
                          (json_int_t)s->hits, "misses", (json_int_t)s->misses, "started",
                          (json_int_t)s->started, "failed", (json_int_t)s->failed, "avg_start_ms",
                          s->started ? (double)s->start_ms_total / (double)s->started : 0.0,
                          "zygote", s->forks);
        if (o)
                json_object_set_new(o, "waited", json_integer((json_int_t)s->waited));
        if (o && !s->forks && s->zygote_error[0])
                json_object_set_new(o, "zygote_error", json_string(s->zygote_error));
        return o;
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
                json_object_set_new(o, "disposing", json_integer((json_int_t)p->n_dead));
                json_object_set_new(
                        o, "avg_dispose_ms",
                        json_real(p->disposed ? (double)p->dispose_ms_total / (double)p->disposed
                                              : 0.0));
                json_object_set_new(o, "images", all ? all : json_array());
        }
        pthread_mutex_unlock(&p->lock);
        return o;
}
