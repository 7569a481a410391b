/* An MCP session: what initialize negotiated, the requests in flight (so
 * notifications/cancelled reaches them) and the requests we sent the
 * client (sampling) with the threads waiting for their answers.
 *
 * Locking: session->lock guards every mutable field of the session and
 * the `cancelled` flag of its calls; session->cond is broadcast whenever
 * an answer arrives, a call is cancelled or the session closes. A call
 * holds a session reference; the session lists registered calls but owns
 * none (mcp_call_free unregisters). Cancelling signals the call's
 * eventfd, which the service polls as its cancel_fd. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server/mcp.h"
#include "services/service.h"
#include "util/cleanup.h"

/* A request we sent the client, waiting for its answer. */
struct mcp_pending {
        json_int_t id;
        bool done;
        json_t *result;
        char *error;
        struct mcp_pending *next;
};

struct mcp_session *mcp_session_new(struct mcp_server *srv, const char *tenant)
{
        struct mcp_session *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->srv = srv;
        s->refs = 1;
        snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
        snprintf(s->version, sizeof(s->version), "%s", MCP_VERSION_LATEST);
        s->log_level = MCP_LOG_INFO;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        return s;
}

struct mcp_session *mcp_session_new_stateless(struct mcp_server *srv, const char *tenant)
{
        struct mcp_session *s = mcp_session_new(srv, tenant);
        if (!s)
                return NULL;
        s->stateless = true;
        s->initialized = true;
        snprintf(s->version, sizeof(s->version), "%s", MCP_VERSION_MODERN);
        return s;
}

void mcp_session_set_remote(struct mcp_session *s, const char *remote)
{
        pthread_mutex_lock(&s->lock);
        snprintf(s->remote, sizeof(s->remote), "%s", remote ? remote : "");
        pthread_mutex_unlock(&s->lock);
}

void mcp_session_audit_foreign(struct mcp_session *s, const char *call, const char *sandbox,
                               const char *run_id)
{
        char remote[MCP_REMOTE_MAX];
        pthread_mutex_lock(&s->lock);
        snprintf(remote, sizeof(remote), "%s", s->remote);
        pthread_mutex_unlock(&s->lock);
        struct cage_service_peer peer = {.remote = remote[0] ? remote : NULL,
                                         .method = remote[0] ? "POST" : NULL,
                                         .route = remote[0] ? "/mcp" : NULL,
                                         .call = call};
        (void)cage_service_audit_foreign(s->srv->svc, s->tenant, sandbox, run_id, &peer);
}

struct mcp_session *mcp_session_ref(struct mcp_session *s)
{
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
        return s;
}

struct mcp_session *mcp_session_unref(struct mcp_session *s)
{
        if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return NULL;
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return NULL;
}

/* With the lock held. */
static void cancel_locked(struct mcp_call *c)
{
        if (c->cancelled)
                return;
        c->cancelled = true;
        (void)eventfd_write(c->cancel_fd, 1);
        pthread_cond_broadcast(&c->session->cond);
}

void mcp_session_close(struct mcp_session *s)
{
        pthread_mutex_lock(&s->lock);
        s->closed = true;
        for (struct mcp_call *c = s->calls; c; c = c->next)
                cancel_locked(c);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

void mcp_session_deafen(struct mcp_session *s)
{
        pthread_mutex_lock(&s->lock);
        s->deaf = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

size_t mcp_session_calls(struct mcp_session *s)
{
        pthread_mutex_lock(&s->lock);
        size_t n = s->n_calls;
        pthread_mutex_unlock(&s->lock);
        return n;
}

enum mcp_log_level mcp_session_log_level(struct mcp_session *s)
{
        pthread_mutex_lock(&s->lock);
        enum mcp_log_level l = s->log_level;
        pthread_mutex_unlock(&s->lock);
        return l;
}

/* ---- calls ------------------------------------------------------------------ */

static const json_t *progress_token(const json_t *params)
{
        const json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        return json_is_string(token) || json_is_integer(token) ? token : NULL;
}

static struct mcp_call *find_locked(struct mcp_session *s, const char *key)
{
        for (struct mcp_call *c = s->calls; c; c = c->next)
                if (strcmp(c->key, key) == 0)
                        return c;
        return NULL;
}

static int register_call(struct mcp_session *s, struct mcp_call *c)
{
        int r = 0;
        pthread_mutex_lock(&s->lock);
        if (s->closed)
                r = -ESHUTDOWN;
        else if (find_locked(s, c->key))
                r = -EEXIST;
        else if (s->n_calls >= MCP_CALLS_MAX)
                r = -EBUSY;
        if (r == 0) {
                c->next = s->calls;
                s->calls = c;
                s->n_calls++;
                c->registered = true;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

int mcp_call_new(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                 struct mcp_call **ret)
{
        struct mcp_call *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->cancel_fd = -1;
        c->session = mcp_session_ref(s);
        c->sink = sink;
        c->id = json_incref((json_t *)jsonrpc_id(msg));
        const json_t *params = json_object_get(msg, "params");
        c->params = params ? json_incref((json_t *)params) : json_object();
        int r = 0;
        if (!c->id || !c->params || jsonrpc_id_key(c->id, c->key) < 0)
                r = -ENOMEM;
        else if ((c->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
                r = -errno;
        if (r == 0)
                r = register_call(s, c);
        if (r < 0) {
                mcp_call_free(c);
                return r;
        }
        c->progress_token = progress_token(c->params);
        c->log_level = MCP_LOG_NONE;
        if (s->stateless) { /* checked by mcp_modern_check() */
                const json_t *meta = json_object_get(c->params, "_meta");
                int level = mcp_log_level_from_string(
                        json_string_value(json_object_get(meta, MCP_META_LOG_LEVEL)));
                if (level >= 0)
                        c->log_level = (enum mcp_log_level)level;
        }
        *ret = c;
        return 0;
}

struct mcp_call *mcp_call_free(struct mcp_call *c)
{
        if (!c)
                return NULL;
        struct mcp_session *s = c->session;
        pthread_mutex_lock(&s->lock);
        if (c->registered) {
                for (struct mcp_call **p = &s->calls; *p; p = &(*p)->next)
                        if (*p == c) {
                                *p = c->next;
                                s->n_calls--;
                                break;
                        }
                pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
        if (c->cancel_fd >= 0)
                close(c->cancel_fd);
        json_decref(c->id);
        json_decref(c->params);
        mcp_session_unref(s);
        free(c);
        return NULL;
}

void mcp_session_cancel(struct mcp_session *s, const json_t *id)
{
        char key[JSONRPC_KEY_MAX];
        if (!id || jsonrpc_id_key(id, key) < 0)
                return;
        pthread_mutex_lock(&s->lock);
        struct mcp_call *c = find_locked(s, key);
        if (c)
                cancel_locked(c);
        pthread_mutex_unlock(&s->lock);
}

void mcp_call_cancel(struct mcp_call *c)
{
        pthread_mutex_lock(&c->session->lock);
        cancel_locked(c);
        pthread_mutex_unlock(&c->session->lock);
}

bool mcp_call_cancelled(struct mcp_call *c)
{
        pthread_mutex_lock(&c->session->lock);
        bool r = c->cancelled;
        pthread_mutex_unlock(&c->session->lock);
        return r;
}

/* ---- messages to the client ------------------------------------------------ */

int mcp_call_notify(struct mcp_call *c, const char *method, json_t *params)
{
        json_t *msg = jsonrpc_notification(method, params);
        if (!msg)
                return -ENOMEM;
        int r = c->sink->send(c->sink, msg);
        json_decref(msg);
        return r;
}

bool mcp_call_has_capability(struct mcp_call *c, const char *name)
{
        struct mcp_session *s = c->session;
        bool has;
        if (s->stateless) {
                const json_t *meta = json_object_get(c->params, "_meta");
                has = json_is_object(json_object_get(json_object_get(meta, MCP_META_CAPS), name));
        } else {
                pthread_mutex_lock(&s->lock);
                has = strcmp(name, "sampling") == 0      ? s->sampling
                      : strcmp(name, "elicitation") == 0 ? s->elicitation
                                                         : false;
                pthread_mutex_unlock(&s->lock);
        }
        if (!has)
                c->missing_capability = name;
        return has;
}

void mcp_call_log(struct mcp_call *c, enum mcp_log_level level, const char *fmt, ...)
{
        enum mcp_log_level min =
                c->session->stateless ? c->log_level : mcp_session_log_level(c->session);
        if (level < min)
                return;
        char text[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        json_t *params = json_pack("{s:s, s:s, s:s}", "level", mcp_log_level_to_string(level),
                                   "logger", MCP_SERVER_NAME, "data", text);
        if (params)
                (void)mcp_call_notify(c, "notifications/message", params);
}

static void deadline_after(struct timespec *ts, uint64_t ms)
{
        clock_gettime(CLOCK_REALTIME, ts);
        ts->tv_sec += (time_t)(ms / 1000);
        ts->tv_nsec += (long)(ms % 1000) * 1000000;
        if (ts->tv_nsec >= 1000000000) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000;
        }
}

static void unlink_pending_locked(struct mcp_session *s, struct mcp_pending *p)
{
        for (struct mcp_pending **q = &s->pending; *q; q = &(*q)->next)
                if (*q == p) {
                        *q = p->next;
                        return;
                }
}

/* Waits for p with the lock held: 0 answered, else why not. */
static int wait_answer_locked(struct mcp_call *c, struct mcp_pending *p)
{
        struct mcp_session *s = c->session;
        struct timespec deadline;
        deadline_after(&deadline, MCP_CLIENT_WAIT_MS);
        while (!p->done && !c->cancelled && !s->closed && !s->deaf)
                if (pthread_cond_timedwait(&s->cond, &s->lock, &deadline) == ETIMEDOUT)
                        return -ETIMEDOUT;
        return p->done ? 0 : s->deaf && !c->cancelled ? -EPIPE : -ECANCELED;
}

static bool is_deaf(struct mcp_session *s)
{
        pthread_mutex_lock(&s->lock);
        bool deaf = s->deaf;
        pthread_mutex_unlock(&s->lock);
        return deaf;
}

static int ask_failed(char **error, const char *text)
{
        *error = strdup(text);
        return -1;
}

/* Tells the client we no longer want the answer to request id. */
static void cancel_request(struct mcp_call *c, json_int_t id, const char *reason)
{
        json_t *params = json_pack("{s:I, s:s}", "requestId", id, "reason", reason);
        if (params)
                (void)mcp_call_notify(c, "notifications/cancelled", params);
}

int mcp_call_ask(struct mcp_call *c, const char *method, json_t *params, json_t **result,
                 char **error)
{
        struct mcp_session *s = c->session;
        struct mcp_pending p = {0};
        pthread_mutex_lock(&s->lock);
        p.id = ++s->next_id;
        p.next = s->pending;
        s->pending = &p;
        pthread_mutex_unlock(&s->lock);

        json_t *msg = jsonrpc_request(p.id, method, params);
        int r = !msg ? -ENOMEM : is_deaf(s) ? -EPIPE : c->sink->send(c->sink, msg);
        json_decref(msg);
        pthread_mutex_lock(&s->lock);
        if (r == 0)
                r = wait_answer_locked(c, &p);
        unlink_pending_locked(s, &p);
        pthread_mutex_unlock(&s->lock);

        if (r == -ETIMEDOUT) {
                cancel_request(c, p.id, "timed out");
                return ask_failed(error, "the MCP client did not answer in time");
        }
        if (r == -ECANCELED)
                return ask_failed(error, "the tool call was cancelled");
        if (r < 0)
                return ask_failed(error, "cannot send the request to the MCP client: it is gone, "
                                         "or (over HTTP) it did not accept an event stream "
                                         "(Accept: text/event-stream) for this call");
        if (p.error) {
                *error = p.error;
                return -1;
        }
        if (!p.result)
                return ask_failed(error, "out of memory");
        *result = p.result;
        return 0;
}

void mcp_session_deliver(struct mcp_session *s, const json_t *response)
{
        const json_t *id = json_object_get(response, "id");
        if (!json_is_integer(id))
                return; /* we only send integer ids */
        pthread_mutex_lock(&s->lock);
        for (struct mcp_pending *p = s->pending; p; p = p->next) {
                if (p->id != json_integer_value(id) || p->done)
                        continue;
                const json_t *result = json_object_get(response, "result");
                const json_t *error = json_object_get(response, "error");
                if (result) {
                        p->result = json_incref((json_t *)result);
                } else {
                        const char *m = json_string_value(json_object_get(error, "message"));
                        if (asprintf(&p->error, "the MCP client answered with an error: %.400s",
                                     m ? m : "(no message)") < 0)
                                p->error = NULL;
                }
                p->done = true;
                pthread_cond_broadcast(&s->cond);
                break;
        }
        pthread_mutex_unlock(&s->lock);
}
