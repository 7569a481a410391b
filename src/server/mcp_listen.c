/* subscriptions/listen of revision 2026-07-28: the subscriptions of one
 * server, their filters, acknowledgements and the resource updates sent
 * on them.
 *
 * A subscription is a listen request whose stream stays open: an SSE
 * response over HTTP, the shared stdout over stdio (its sink). Its first
 * message is notifications/subscriptions/acknowledged with the part of
 * the filter codecage honors; every message on it carries the request's
 * id as _meta["io.modelcontextprotocol/subscriptionId"]. Nothing codecage
 * lists ever changes (tools, prompts, the empty resources/list), so
 * toolsListChanged, promptsListChanged and resourcesListChanged are never
 * honored; resourceSubscriptions are, for files of named sandboxes
 * (codecage://sandboxes/<name>/files/<path>): the service tells the hub of
 * every change of a workspace (cage_service_watch(): a file written,
 * fetched or deleted through the API or a tool, a run or exec in the
 * sandbox, its removal) and each subscription of the same tenant naming a
 * file it touches gets notifications/resources/updated. A run may change
 * any file of its sandbox, so after one every subscribed file of that
 * sandbox is "updated" (may need to be read again).
 *
 * The service's callback only queues the change (it may hold the
 * service's locks); the hub's thread matches and sends, so a slow client
 * never holds up the service. The queue is bounded; past it, every
 * subscription is told of all its files once.
 *
 * Bounds: MCP_LISTEN_PER_TENANT_MAX subscriptions per tenant, each of at
 * most MCP_LISTEN_URIS_MAX URIs of at most MCP_LISTEN_URI_MAX bytes. A
 * subscription ends when its transport says so: the SSE stream closes,
 * the client sends notifications/cancelled naming it (stdio), or the
 * transport ends (stdio sends notifications/cancelled for each first). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codecage/service.h"
#include "server/mcp.h"
#include "util/cleanup.h"

#define CHANGES_MAX   1024 /* queued workspace changes */
#define META_SUB_ID   "io.modelcontextprotocol/subscriptionId"
#define SANDBOX_NAMES 64 /* bytes of a sandbox name, with its NUL (http_name_is_valid) */

struct sub_uri {
        char *uri;     /* as the client wrote it: what updates name */
        char *sandbox; /* its sandbox */
        char *path;    /* its normalized path beneath /workspace */
};

struct mcp_subscription {
        char tenant[CAGE_CONFIG_TENANT_NAME_MAX + 1];
        struct mcp_sink *sink; /* its stream; owner of the subscription */
        json_t *id;
        char key[JSONRPC_KEY_MAX];
        struct sub_uri *uris;
        size_t n_uris;
        size_t sending; /* the hub's thread is sending on it */
        bool acked;     /* its acknowledgement is out: updates may follow */
        struct mcp_subscription *next;
};

struct change {
        char *tenant, *sandbox, *path; /* path NULL: anything in the workspace */
        struct change *next;
};

struct mcp_listen {
        struct cage_service *svc;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* a change was queued, a send ended, stopping */
        struct mcp_subscription *subs;
        struct change *changes, **tail;
        size_t n_changes;
        bool overflow; /* changes were dropped: tell everyone of everything */
        bool stop;
        pthread_t thread;
        bool thread_started;
};

/* ---- paths ------------------------------------------------------------------------- */

/* The path beneath /workspace that p names: a leading "/workspace/",
 * empty and "." segments dropped ("a//./b" -> "a/b"). NULL when out of
 * memory. */
static char *normalize(const char *p)
{
        if (strncmp(p, "/workspace/", 11) == 0)
                p += 11;
        else if (strcmp(p, "/workspace") == 0)
                p += 10;
        char *out = malloc(strlen(p) + 1);
        size_t n = 0;
        while (out && *p) {
                size_t len = strcspn(p, "/");
                if (!(len == 0 || (len == 1 && p[0] == '.'))) {
                        if (n > 0)
                                out[n++] = '/';
                        memcpy(out + n, p, len);
                        n += len;
                }
                p += len + (p[len] == '/');
        }
        if (out)
                out[n] = '\0';
        return out;
}

/* Whether a change of `changed` (NULL: anything) touches file `path`:
 * the file itself or a directory holding it (a recursive delete). */
static bool touches(const char *changed, const char *path)
{
        if (!changed || !*changed)
                return true;
        size_t n = strlen(changed);
        return strncmp(changed, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* ---- subscriptions ---------------------------------------------------------------- */

static void sub_free(struct mcp_subscription *sub)
{
        for (size_t i = 0; sub && i < sub->n_uris; i++) {
                free(sub->uris[i].uri);
                free(sub->uris[i].sandbox);
                free(sub->uris[i].path);
        }
        if (sub) {
                free(sub->uris);
                json_decref(sub->id);
        }
        free(sub);
}

/* Adds uri when it names a file of a sandbox (the only resources that
 * change) and is not there yet: 0, or -ENOMEM. */
static int sub_add_uri(struct mcp_subscription *sub, const char *uri)
{
        struct mcp_resource_uri t = {0};
        bool ours = mcp_resource_uri_parse(uri, &t) == 0 && !t.run;
        for (size_t i = 0; ours && i < sub->n_uris; i++)
                ours = strcmp(sub->uris[i].uri, uri) != 0;
        if (!ours) {
                mcp_resource_uri_clear(&t);
                return 0;
        }
        struct sub_uri u = {
                .uri = strdup(uri), .sandbox = TAKE_PTR(t.id), .path = normalize(t.path)};
        mcp_resource_uri_clear(&t);
        if (!u.uri || !u.sandbox || !u.path || !*u.path) {
                bool oom = !u.uri || !u.sandbox || !u.path;
                free(u.uri);
                free(u.sandbox);
                free(u.path);
                return oom ? -ENOMEM : 0; /* "files/." names no file */
        }
        sub->uris[sub->n_uris++] = u;
        return 0;
}

/* Checks params.notifications: -32602 for a filter of the wrong shape. */
static json_t *check_filter(const json_t *filter, struct mcp_error *e)
{
        static const char *const flags[] = {"toolsListChanged", "promptsListChanged",
                                            "resourcesListChanged"};
        if (!json_is_object(filter))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "subscriptions/listen: params.notifications (an object) is "
                                "required");
        for (size_t i = 0; i < ELEMENTSOF(flags); i++) {
                const json_t *v = json_object_get(filter, flags[i]);
                if (v && !json_is_boolean(v))
                        return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                        "subscriptions/listen: params.notifications.%s must be "
                                        "a boolean",
                                        flags[i]);
        }
        const json_t *uris = json_object_get(filter, "resourceSubscriptions");
        if (!uris)
                return (json_t *)filter;
        if (!json_is_array(uris) || json_array_size(uris) > MCP_LISTEN_URIS_MAX)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "subscriptions/listen: params.notifications.resourceSubscriptions "
                                "must be an array of at most %d URIs",
                                MCP_LISTEN_URIS_MAX);
        size_t i;
        const json_t *uri;
        json_array_foreach(uris, i, uri)
        {
                if (!json_is_string(uri) || json_string_length(uri) > MCP_LISTEN_URI_MAX)
                        return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                        "subscriptions/listen: resourceSubscriptions[%zu] must "
                                        "be a string of at most %d bytes",
                                        i, MCP_LISTEN_URI_MAX);
        }
        return (json_t *)filter;
}

/* The subscription a checked filter asks for. */
static int sub_new(const char *tenant, struct mcp_sink *sink, const json_t *id,
                   const json_t *filter, struct mcp_subscription **ret)
{
        const json_t *uris = json_object_get(filter, "resourceSubscriptions");
        struct mcp_subscription *sub = calloc(1, sizeof(*sub));
        if (!sub)
                return -ENOMEM;
        snprintf(sub->tenant, sizeof(sub->tenant), "%s", tenant);
        sub->sink = sink;
        sub->id = json_deep_copy(id);
        sub->uris = calloc(json_array_size(uris) + 1, sizeof(*sub->uris));
        int r = sub->id && sub->uris && jsonrpc_id_key(id, sub->key) == 0 ? 0 : -ENOMEM;
        size_t i;
        const json_t *uri;
        json_array_foreach(uris, i, uri)
        {
                if (r == 0)
                        r = sub_add_uri(sub, json_string_value(uri));
        }
        if (r < 0) {
                sub_free(sub);
                return r;
        }
        *ret = sub;
        return 0;
}

/* The acknowledgement: of the filter, the URIs that can change. */
static json_t *acknowledgement(const struct mcp_subscription *sub, const json_t *filter)
{
        json_t *honored = json_object();
        if (honored && json_object_get(filter, "resourceSubscriptions")) {
                json_t *uris = json_array();
                for (size_t i = 0; uris && i < sub->n_uris; i++)
                        json_array_append_new(uris, json_string(sub->uris[i].uri));
                json_object_set_new(honored, "resourceSubscriptions", uris);
        }
        return json_pack("{s:s, s:s, s:{s:o, s:{s:O}}}", "jsonrpc", "2.0", "method",
                         "notifications/subscriptions/acknowledged", "params", "notifications",
                         honored, "_meta", META_SUB_ID, sub->id);
}

/* With the hub's lock held: subscriptions of tenant, and whether sink
 * has one of key open. */
static size_t count_locked(struct mcp_listen *l, const char *tenant, const struct mcp_sink *sink,
                           const char *key, bool *dup)
{
        size_t n = 0;
        *dup = false;
        for (struct mcp_subscription *sub = l->subs; sub; sub = sub->next) {
                n += strcmp(sub->tenant, tenant) == 0;
                *dup |= sub->sink == sink && strcmp(sub->key, key) == 0;
        }
        return n;
}

/* Registers sub and sends its acknowledgement. Until the acknowledgement
 * is out the hub's thread passes sub by (a change made meanwhile is one
 * made before the subscription began), so nothing precedes it. */
static int sub_register(struct mcp_listen *l, struct mcp_subscription *sub, json_t *ack,
                        struct mcp_error *e)
{
        bool dup;
        pthread_mutex_lock(&l->lock);
        size_t n = count_locked(l, sub->tenant, sub->sink, sub->key, &dup);
        bool ok = !dup && n < MCP_LISTEN_PER_TENANT_MAX && !l->stop;
        if (ok) {
                sub->sending = 1;
                sub->next = l->subs;
                l->subs = sub;
        }
        pthread_mutex_unlock(&l->lock);
        if (dup) {
                mcp_fail(e, JSONRPC_INVALID_REQUEST,
                         "Invalid Request: a subscription with this id is open already; use a "
                         "new id");
                return -EEXIST;
        }
        if (!ok) {
                mcp_fail(e, JSONRPC_INTERNAL_ERROR,
                         "Server busy: %d subscriptions of this tenant are open already; close "
                         "one first",
                         MCP_LISTEN_PER_TENANT_MAX);
                return -EBUSY;
        }
        (void)sub->sink->send(sub->sink, ack);
        pthread_mutex_lock(&l->lock);
        sub->acked = true;
        sub->sending--;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        return 0;
}

struct mcp_subscription *mcp_listen_open(struct mcp_session *s, struct mcp_sink *sink,
                                         const json_t *msg, struct mcp_error *e)
{
        struct mcp_listen *l = s->srv->listen;
        const json_t *filter = json_object_get(json_object_get(msg, "params"), "notifications");
        struct mcp_subscription *sub = NULL;
        if (!l) {
                mcp_fail(e, JSONRPC_METHOD_NOT_FOUND, "Method not found: subscriptions/listen");
                return NULL;
        }
        if (!check_filter(filter, e))
                return NULL;
        if (sub_new(s->tenant, sink, jsonrpc_id(msg), filter, &sub) < 0) {
                mcp_fail(e, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
                return NULL;
        }
        json_auto_t *ack = acknowledgement(sub, filter);
        if (!ack)
                mcp_fail(e, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
        if (!ack || sub_register(l, sub, ack, e) < 0) {
                sub_free(sub);
                return NULL;
        }
        return sub;
}

/* With the lock held: unlinks sub and waits until nothing sends on it. */
static void unlink_locked(struct mcp_listen *l, struct mcp_subscription *sub)
{
        for (struct mcp_subscription **p = &l->subs; *p; p = &(*p)->next)
                if (*p == sub) {
                        *p = sub->next;
                        break;
                }
        while (sub->sending > 0)
                pthread_cond_wait(&l->cond, &l->lock);
}

void mcp_listen_close(struct mcp_server *srv, struct mcp_subscription *sub)
{
        struct mcp_listen *l = srv->listen;
        if (!sub || !l)
                return;
        pthread_mutex_lock(&l->lock);
        unlink_locked(l, sub);
        pthread_mutex_unlock(&l->lock);
        sub_free(sub);
}

bool mcp_listen_cancel(struct mcp_server *srv, const struct mcp_sink *sink, const json_t *id)
{
        struct mcp_listen *l = srv->listen;
        char key[JSONRPC_KEY_MAX];
        struct mcp_subscription *found = NULL;
        if (!l || !id || jsonrpc_id_key(id, key) < 0)
                return false;
        pthread_mutex_lock(&l->lock);
        for (struct mcp_subscription *sub = l->subs; sub && !found; sub = sub->next)
                if (sub->sink == sink && strcmp(sub->key, key) == 0)
                        found = sub;
        if (found)
                unlink_locked(l, found);
        pthread_mutex_unlock(&l->lock);
        sub_free(found);
        return found != NULL;
}

void mcp_listen_end_sink(struct mcp_server *srv, struct mcp_sink *sink, const char *reason)
{
        struct mcp_listen *l = srv->listen;
        while (l) {
                struct mcp_subscription *found = NULL;
                pthread_mutex_lock(&l->lock);
                for (struct mcp_subscription *sub = l->subs; sub && !found; sub = sub->next)
                        if (sub->sink == sink)
                                found = sub;
                if (found)
                        unlink_locked(l, found);
                pthread_mutex_unlock(&l->lock);
                if (!found)
                        return;
                json_auto_t *msg =
                        json_pack("{s:s, s:s, s:{s:O, s:s, s:{s:O}}}", "jsonrpc", "2.0", "method",
                                  "notifications/cancelled", "params", "requestId", found->id,
                                  "reason", reason, "_meta", META_SUB_ID, found->id);
                if (msg)
                        (void)sink->send(sink, msg);
                sub_free(found);
        }
}

/* ---- changes ------------------------------------------------------------------------- */

static void change_free(struct change *c)
{
        if (!c)
                return;
        free(c->tenant);
        free(c->sandbox);
        free(c->path);
        free(c);
}

/* cage_service_watch_fn: queues the change for the hub's thread. */
static void on_change(void *arg, const char *tenant, const char *sandbox, const char *path)
{
        struct mcp_listen *l = arg;
        pthread_mutex_lock(&l->lock);
        bool listened = l->subs != NULL;
        pthread_mutex_unlock(&l->lock);
        if (!listened) /* the common case: nothing to do */
                return;
        struct change *c = calloc(1, sizeof(*c));
        if (c) {
                c->tenant = strdup(tenant);
                c->sandbox = strdup(sandbox);
                c->path = path ? normalize(path) : NULL;
        }
        bool ok = c && c->tenant && c->sandbox && (!path || c->path);
        pthread_mutex_lock(&l->lock);
        if (!l->subs) { /* nobody listens */
                pthread_mutex_unlock(&l->lock);
                change_free(c);
                return;
        }
        if (ok && l->n_changes < CHANGES_MAX) {
                *l->tail = c;
                l->tail = &c->next;
                l->n_changes++;
                c = NULL;
        } else {
                l->overflow = true;
        }
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        change_free(c);
}

/* The unsafe debug build may switch the tenant check off
 * (CODECAGE_DEBUG_DISABLE=mcp-listen-tenant), so the security suite can
 * show it is what keeps one tenant's changes from another's
 * subscriptions. */
static bool any_tenant(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        return off && strstr(off, "mcp-listen-tenant");
#else
        return false;
#endif
}

/* With the lock held: whether change c (NULL: everything) touches uri u
 * of sub: a file of the subscription's own tenant's sandbox. */
static bool matches(const struct mcp_subscription *sub, const struct sub_uri *u,
                    const struct change *c)
{
        if (!c)
                return true;
        bool tenant = strcmp(sub->tenant, c->tenant) == 0 || any_tenant();
        return tenant && strcmp(u->sandbox, c->sandbox) == 0 && touches(c->path, u->path);
}

/* The hub serves every subscription: a client that does not read loses
 * its stream rather than hold up the others (send_nowait). */
static int send_update(struct mcp_sink *sink, const json_t *msg)
{
        return sink->send_nowait ? sink->send_nowait(sink, msg) : sink->send(sink, msg);
}

struct update {
        struct mcp_subscription *sub; /* its `sending` counts this */
        json_t *msg;
};

/* Sends notifications/resources/updated for every URI of every
 * subscription that c touches. The lock is held on entry and exit; the
 * updates are gathered under it (each counted in its subscription's
 * `sending`, so the subscription and its sink stay until it is sent) and
 * sent without it. */
static void deliver_locked(struct mcp_listen *l, const struct change *c)
{
        size_t n = 0, cap = 0;
        struct update *v = NULL;
        for (struct mcp_subscription *sub = l->subs; sub; sub = sub->next)
                for (size_t i = 0; i < sub->n_uris && sub->acked; i++) {
                        if (!matches(sub, &sub->uris[i], c))
                                continue;
                        if (n == cap) {
                                size_t ncap = cap ? 2 * cap : 16;
                                struct update *nv = realloc(v, ncap * sizeof(*v));
                                if (!nv)
                                        goto send;
                                v = nv;
                                cap = ncap;
                        }
                        v[n].msg =
                                json_pack("{s:s, s:s, s:{s:s, s:{s:O}}}", "jsonrpc", "2.0",
                                          "method", "notifications/resources/updated", "params",
                                          "uri", sub->uris[i].uri, "_meta", META_SUB_ID, sub->id);
                        v[n++].sub = sub;
                        sub->sending++;
                }
send:
        pthread_mutex_unlock(&l->lock);
        for (size_t i = 0; i < n; i++)
                if (v[i].msg)
                        (void)send_update(v[i].sub->sink, v[i].msg);
        pthread_mutex_lock(&l->lock);
        for (size_t i = 0; i < n; i++) {
                json_decref(v[i].msg);
                v[i].sub->sending--;
        }
        pthread_cond_broadcast(&l->cond);
        free(v);
}

static void *hub_main(void *arg)
{
        struct mcp_listen *l = arg;
        pthread_mutex_lock(&l->lock);
        while (!l->stop) {
                if (!l->changes && !l->overflow) {
                        pthread_cond_wait(&l->cond, &l->lock);
                        continue;
                }
                struct change *c = l->changes;
                if (c) {
                        l->changes = c->next;
                        if (!l->changes)
                                l->tail = &l->changes;
                        l->n_changes--;
                }
                bool all = !c && l->overflow;
                if (all)
                        l->overflow = false;
                deliver_locked(l, all ? NULL : c);
                pthread_mutex_unlock(&l->lock);
                change_free(c);
                pthread_mutex_lock(&l->lock);
        }
        pthread_mutex_unlock(&l->lock);
        return NULL;
}

int mcp_listen_new(struct cage_service *svc, struct mcp_listen **ret)
{
        struct mcp_listen *l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->svc = svc;
        l->tail = &l->changes;
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->cond, NULL);
        if (pthread_create(&l->thread, NULL, hub_main, l) != 0) {
                mcp_listen_free(l);
                return -EAGAIN;
        }
        l->thread_started = true;
        if (svc)
                cage_service_watch(svc, on_change, l);
        *ret = l;
        return 0;
}

struct mcp_listen *mcp_listen_free(struct mcp_listen *l)
{
        if (!l)
                return NULL;
        if (l->svc && l->thread_started)
                cage_service_watch(l->svc, NULL, NULL);
        pthread_mutex_lock(&l->lock);
        l->stop = true;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        if (l->thread_started)
                pthread_join(l->thread, NULL);
        while (l->subs) { /* the transports closed theirs: none should be left */
                struct mcp_subscription *sub = l->subs;
                l->subs = sub->next;
                sub_free(sub);
        }
        while (l->changes) {
                struct change *c = l->changes;
                l->changes = c->next;
                change_free(c);
        }
        pthread_cond_destroy(&l->cond);
        pthread_mutex_destroy(&l->lock);
        free(l);
        return NULL;
}
