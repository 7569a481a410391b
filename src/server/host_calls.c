/* The registry of host calls waiting for an HTTP client's answer; see
 * host_calls.h.
 *
 * One mutex guards the list and every entry's answer fields. An entry is
 * freed only by its waiter (host_call_close), after unlinking it under
 * the mutex, so an answer that found it under the mutex may write into
 * it. Waiters sleep on the entry's condition variable in slices of
 * WAIT_SLICE_MS and look at their cancel fds between slices: the client
 * leaving or the server stopping ends the wait within a slice. */
#include "server/host_calls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define WAIT_SLICE_MS 100

struct host_call {
        struct host_call *prev, *next;
        char id[HOST_CALL_ID_LEN + 1];
        char *tenant;
        pthread_cond_t cond; /* CLOCK_MONOTONIC */
        bool answered;
        json_t *value;
        char *error;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_call *registry;

/* With registry_lock held. */
static struct host_call *find(const char *id)
{
        for (struct host_call *c = registry; c; c = c->next)
                if (strcmp(c->id, id) == 0)
                        return c;
        return NULL;
}

static size_t count_of(const char *tenant)
{
        size_t n = 0;
        for (struct host_call *c = registry; c; c = c->next)
                n += strcmp(c->tenant, tenant) == 0;
        return n;
}

static int new_id(char id[HOST_CALL_ID_LEN + 1])
{
        unsigned char raw[HOST_CALL_ID_LEN / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(id + 2 * i, 3, "%02x", raw[i]);
        return 0;
}

static struct host_call *call_new(const char *tenant)
{
        struct host_call *c = calloc(1, sizeof(*c));
        pthread_condattr_t attr;
        if (!c)
                return NULL;
        c->tenant = strdup(tenant);
        if (!c->tenant || new_id(c->id) < 0) {
                free(c->tenant);
                free(c);
                return NULL;
        }
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&c->cond, &attr);
        pthread_condattr_destroy(&attr);
        return c;
}

static void call_free(struct host_call *c)
{
        pthread_cond_destroy(&c->cond);
        json_decref(c->value);
        free(c->error);
        free(c->tenant);
        free(c);
}

int host_call_open(const char *tenant, struct host_call **ret)
{
        struct host_call *c = call_new(tenant);
        if (!c)
                return -ENOMEM;
        pthread_mutex_lock(&registry_lock);
        if (count_of(tenant) >= HOST_CALLS_PER_TENANT_MAX || find(c->id)) {
                pthread_mutex_unlock(&registry_lock);
                call_free(c);
                return -EAGAIN;
        }
        c->next = registry;
        if (registry)
                registry->prev = c;
        registry = c;
        pthread_mutex_unlock(&registry_lock);
        *ret = c;
        return 0;
}

const char *host_call_id(const struct host_call *c)
{
        return c->id;
}

static bool any_readable(const int *fds, size_t n)
{
        struct pollfd p[4];
        size_t k = 0;
        for (size_t i = 0; i < n && k < ELEMENTSOF(p); i++)
                if (fds[i] >= 0)
                        p[k++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        return k > 0 && poll(p, k, 0) > 0;
}

static void deadline_in(struct timespec *ts, uint64_t ms)
{
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += (time_t)(ms / 1000);
        ts->tv_nsec += (long)(ms % 1000) * 1000000;
        if (ts->tv_nsec >= 1000000000) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000;
        }
}

int host_call_wait(struct host_call *c, uint64_t timeout_ms, const int *fds, size_t n_fds,
                   json_t **value, char **error)
{
        uint64_t deadline = clock_mono_ms() + timeout_ms;
        int r = 0;
        pthread_mutex_lock(&registry_lock);
        while (!c->answered) {
                pthread_mutex_unlock(&registry_lock);
                bool cancelled = any_readable(fds, n_fds);
                uint64_t now = clock_mono_ms();
                pthread_mutex_lock(&registry_lock);
                if (c->answered)
                        break;
                if (cancelled || now >= deadline) {
                        r = cancelled ? -ECANCELED : -ETIMEDOUT;
                        break;
                }
                struct timespec ts;
                uint64_t left = deadline - now;
                deadline_in(&ts, left < WAIT_SLICE_MS ? left : WAIT_SLICE_MS);
                pthread_cond_timedwait(&c->cond, &registry_lock, &ts);
        }
        if (c->answered) {
                *value = TAKE_PTR(c->value);
                *error = TAKE_PTR(c->error);
                r = 0;
        }
        pthread_mutex_unlock(&registry_lock);
        return r;
}

struct host_call *host_call_close(struct host_call *c)
{
        if (!c)
                return NULL;
        pthread_mutex_lock(&registry_lock);
        if (c->prev)
                c->prev->next = c->next;
        else
                registry = c->next;
        if (c->next)
                c->next->prev = c->prev;
        pthread_mutex_unlock(&registry_lock);
        call_free(c);
        return NULL;
}

int host_call_answer(const char *tenant, const char *id, json_t *value, const char *error,
                     struct cage_error *err)
{
        _cleanup_free_ char *msg = error ? strdup(error) : NULL;
        if (error && !msg)
                return cage_fail(err, -ENOMEM, "host call");
        pthread_mutex_lock(&registry_lock);
        struct host_call *c = find(id);
        if (!c || strcmp(c->tenant, tenant) != 0) {
                pthread_mutex_unlock(&registry_lock);
                return cage_fail(err, -ENOENT,
                                 "no host call %.40s is waiting (unknown, answered after its "
                                 "wait ended, or of another tenant)",
                                 id);
        }
        if (c->answered) {
                pthread_mutex_unlock(&registry_lock);
                return cage_fail(err, -EBUSY, "host call %.40s was answered already", id);
        }
        c->answered = true;
        c->value = msg ? NULL : json_incref(value ? value : json_null());
        c->error = TAKE_PTR(msg);
        pthread_cond_signal(&c->cond);
        pthread_mutex_unlock(&registry_lock);
        return 0;
}

int host_call_disabled(void *ctx, const char *name, json_t *args, json_t *kwargs, json_t **value,
                       char **error)
{
        if (asprintf(error,
                     "%s: host functions are not enabled for this run. Send the request with "
                     "\"Accept: text/event-stream\" and \"host_functions\": true (or a list of "
                     "extra function names), then answer each `host_call` event with "
                     "POST /v1/host_calls/{id} and {\"value\": ...} or {\"error\": \"...\"}",
                     name ? name : "host call") < 0) {
                *error = NULL;
                return -ENOMEM;
        }
        return 0;
}
