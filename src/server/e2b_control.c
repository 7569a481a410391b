/* E2B's control plane (e2b.h, docs/E2B.md) for the tenant of the request's
 * API key:
 *
 *   POST /v2/sandboxes, POST /sandboxes        create (201)
 *   GET  /v2/sandboxes, GET /sandboxes         list (metadata, state and
 *                                              template filters; limit and
 *                                              nextToken / X-Next-Token)
 *   GET  /sandboxes/{id}                       info
 *   DELETE /sandboxes/{id}                     kill (204)
 *   POST /sandboxes/{id}/timeout               a new end of life, from now (204)
 *   POST /sandboxes/{id}/refreshes             a later end of life (204)
 *   POST /sandboxes/{id}/connect, /v2/...      tokens again; a later end (200)
 *
 * A create becomes a codecage named sandbox (e2b_registry.c): templateID
 * "base" or "code-interpreter-v1" is the host image, anything else an
 * image reference (docs/IMAGES.md); envVars its env, metadata its labels,
 * the network only when asked (allow_internet_access: true gives what the
 * config's network.allow admits; network.allowOut names hosts, refused
 * when the config does not cover them) and e2b.internet_access is not
 * false. Another tenant's sandbox is a 404, like one that does
 * not exist. Everything else E2B's API has (pause and resume, snapshots,
 * forks, metrics, templates, volumes, ...) answers 501 in E2B's error shape
 * with a message saying codecage does not offer it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/e2b.h"
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define TIMEOUT_DEFAULT_S 300 /* a create without timeout: the SDKs' DEFAULT_SANDBOX_TIMEOUT_MS */
#define LIST_LIMIT_MAX    100

static int not_offered(struct cage_error *err, const char *what)
{
        return cage_fail(err, -ENOSYS, "codecage does not offer %s", what);
}

static void iso_time(uint64_t ms, char out[32])
{
        time_t s = (time_t)(ms / 1000);
        struct tm tm;
        char base[24] = "1970-01-01T00:00:00";
        if (gmtime_r(&s, &tm))
                strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, 32, "%s.%03uZ", base, (unsigned)(ms % 1000));
}

static json_t *info_doc(struct e2b_registry *reg, struct e2b_box *box)
{
        char started[32], end[32];
        iso_time(box->started_ms, started);
        iso_time(e2b_registry_end(reg, box), end);
        int cpus = (int)ceil(box->cpus);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:O, s:s, s:s, s:b}", "sandboxID",
                         box->id, "templateID", box->template_id, "clientID", "codecage",
                         "startedAt", started, "endAt", end, "cpuCount", cpus < 1 ? 1 : cpus,
                         "memoryMB", (json_int_t)box->memory_mib, "metadata", box->metadata,
                         "state", "running", "envdVersion", E2B_ENVD_VERSION, "allowInternetAccess",
                         box->network);
}

static json_t *tokens_doc(struct e2b_box *box)
{
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", box->id, "templateID",
                         box->template_id, "clientID", "codecage", "envdVersion", E2B_ENVD_VERSION,
                         "envdAccessToken", box->envd_token, "trafficAccessToken",
                         box->traffic_token);
}

static int body_object(const struct e2b_call *c, json_t **ret, struct cage_error *err)
{
        if (c->body_len == 0) {
                *ret = json_object();
                return *ret ? 0 : -ENOMEM;
        }
        return http_body_json(c->body, c->body_len, false, ret, err);
}

/* ---- create ------------------------------------------------------------------- */

static bool is_host_template(const char *t)
{
        return strcmp(t, "base") == 0 || strcmp(t, "code-interpreter-v1") == 0;
}

/* What of E2B's create codecage refuses rather than ignores. */
static int check_unoffered(const json_t *body, struct cage_error *err)
{
        const json_t *v;
        if (json_is_true(json_object_get(body, "autoPause")))
                return not_offered(err, "pausing sandboxes: a sandbox is killed at its timeout");
        if ((v = json_object_get(body, "mcp")) && !json_is_null(v))
                return not_offered(err, "the MCP gateway");
        if ((v = json_object_get(body, "volumeMounts")) && json_array_size(v) > 0)
                return not_offered(err, "volumes");
        if ((v = json_object_get(body, "iam")) && !json_is_null(v))
                return not_offered(err, "workload identity tokens");
        const json_t *net = json_object_get(body, "network");
        if (json_object_get(net, "egressProxy") || json_object_get(net, "rules") ||
            json_array_size(json_object_get(net, "denyOut")) > 0)
                return not_offered(err, "egress proxies, header rules or deny lists: list the "
                                        "hosts to allow in network.allowOut");
        return 0;
}

/* allowInternetAccess: every host the server's network.allow admits (its
 * address ranges aside: a sandbox's list names hosts and addresses). */
static int policy_hosts(const struct cage_config *cfg, json_t *list)
{
        json_auto_t *all = egress_allowlist_to_json(&cfg->network.allow);
        if (!all)
                return -ENOMEM;
        size_t i;
        json_t *h;
        json_array_foreach(all, i, h) if (!strchr(json_string_value(h), '/'))
                json_array_append(list, h);
        return 0;
}

/* The spec's network list: none unless asked for, and then what the
 * request names (network.allowOut) or what the policy allows
 * (allow_internet_access); the service refuses what the policy does not
 * cover. With e2b.internet_access false, none at all: allow_internet_access
 * (which some SDK versions send on every create) is answered with an
 * offline sandbox, hosts named in allowOut are refused. */
static int network_of(const struct cage_config *cfg, const json_t *body, json_t *spec,
                      struct cage_error *err)
{
        const json_t *allow = json_object_get(json_object_get(body, "network"), "allowOut");
        json_auto_t *list = json_array();
        if (!list)
                return -ENOMEM;
        if (!cfg->e2b.internet_access) {
                if (json_array_size(allow) > 0)
                        return cage_fail(err, -EPERM,
                                         "network.allowOut: sandboxes made through the E2B API "
                                         "have no network on this server (e2b.internet_access "
                                         "is false)");
                return 0;
        }
        if (allow) {
                size_t i;
                json_t *h;
                if (!json_is_array(allow))
                        return cage_fail(err, -EINVAL, "network.allowOut: must be a list");
                json_array_foreach((json_t *)allow, i, h)
                {
                        if (!json_is_string(h))
                                return cage_fail(err, -EINVAL,
                                                 "network.allowOut[%zu]: must be a string", i);
                        bool all = strcmp(json_string_value(h), "0.0.0.0/0") == 0;
                        json_array_append_new(list, all ? json_string("*") : json_incref(h));
                }
        } else if (json_is_true(json_object_get(body, "allow_internet_access")) &&
                   policy_hosts(cfg, list) < 0) {
                return -ENOMEM;
        }
        return json_array_size(list) ? json_object_set(spec, "network", list) : 0;
}

static int timeout_of(const struct e2b_call *c, const json_t *body, const char *key, uint64_t dflt,
                      uint64_t *ret, struct cage_error *err)
{
        const json_t *t = json_object_get(body, key);
        uint64_t max = c->cfg->e2b.timeout_s_max;
        if (!t || json_is_null(t)) {
                *ret = dflt < max ? dflt : max;
                return 0;
        }
        if (!json_is_integer(t) || json_integer_value(t) < 0)
                return cage_fail(err, -EINVAL, "%s: must be a number of seconds", key);
        if ((uint64_t)json_integer_value(t) > max)
                return cage_fail(err, -EINVAL,
                                 "%s: at most %llu seconds (the server's e2b.timeout_s_max)", key,
                                 (unsigned long long)max);
        *ret = (uint64_t)json_integer_value(t);
        return 0;
}

/* E2B's set-timeout requires its "timeout": a body without one (or with a
 * misspelt one) would otherwise end the sandbox at once. */
static int require_timeout(const json_t *body, struct cage_error *err)
{
        const json_t *t = json_object_get(body, "timeout");
        if (!t || json_is_null(t))
                return cage_fail(err, -EINVAL,
                                 "timeout: required, the sandbox's new lifetime in seconds");
        return 0;
}

static int build_spec(const struct cage_config *cfg, const json_t *body, const char *template_id,
                      json_t **ret, struct cage_error *err)
{
        json_auto_t *spec = json_object();
        if (!spec)
                return -ENOMEM;
        const json_t *env = json_object_get(body, "envVars");
        const json_t *meta = json_object_get(body, "metadata");
        if (!is_host_template(template_id))
                json_object_set_new(spec, "image", json_string(template_id));
        if (env && !json_is_null(env))
                json_object_set(spec, "env", (json_t *)env);
        if (meta && !json_is_null(meta))
                json_object_set(spec, "labels", (json_t *)meta);
        int r = network_of(cfg, body, spec, err);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(spec);
        return 0;
}

static int create(struct e2b_call *c, struct e2b_reply *reply, struct cage_error *err)
{
        json_auto_t *body = NULL, *spec = NULL;
        uint64_t timeout_s;
        struct e2b_box *box;
        int r = body_object(c, &body, err);
        if (r < 0)
                return r;
        const json_t *tid = json_object_get(body, "templateID");
        if (tid && (!json_is_string(tid) || !json_string_length(tid) ||
                    json_string_length(tid) > E2B_TEMPLATE_MAX))
                return cage_fail(err, -EINVAL, "templateID: must be a template name or an image");
        const char *template_id = tid ? json_string_value(tid) : "base";
        const json_t *meta = json_object_get(body, "metadata");
        if ((r = check_unoffered(body, err)) < 0 ||
            (r = timeout_of(c, body, "timeout", TIMEOUT_DEFAULT_S, &timeout_s, err)) < 0 ||
            (r = build_spec(c->cfg, body, template_id, &spec, err)) < 0)
                return r;
        r = e2b_registry_create(c->reg, c->tenant, spec, template_id, timeout_s,
                                json_is_object(meta) ? (json_t *)meta : NULL, &box, err);
        if (r < 0)
                return r;
        reply->status = 201;
        reply->json = tokens_doc(box);
        e2b_box_unref(box);
        return reply->json ? 0 : -ENOMEM;
}

/* ---- list ----------------------------------------------------------------------- */

/* Whether the query asks for states and none of them is "running". */
static bool state_excludes_running(const char *query)
{
        bool asked = false, running = false;
        for (const char *p = query; p && *p;) {
                size_t n = strcspn(p, "&");
                if (n > 6 && strncmp(p, "state=", 6) == 0) {
                        asked = true;
                        running |= (n - 6 == 7 && strncmp(p + 6, "running", 7) == 0) ||
                                   memmem(p + 6, n - 6, "running", 7) != NULL;
                }
                p += n + (p[n] == '&');
        }
        return asked && !running;
}

struct list_query {
        char *metadata, *template_id, *next;
        size_t limit;
};

static void list_query_free(struct list_query *q)
{
        free(q->metadata);
        free(q->template_id);
        free(q->next);
}

static int list_query_parse(const char *query, struct list_query *q, struct cage_error *err)
{
        _cleanup_free_ char *limit = NULL;
        q->limit = LIST_LIMIT_MAX;
        if (http_query_get(query, "metadata", &q->metadata) < 0 ||
            http_query_get(query, "template", &q->template_id) < 0 ||
            http_query_get(query, "nextToken", &q->next) < 0 ||
            http_query_get(query, "limit", &limit) < 0)
                return cage_fail(err, -EINVAL, "a query parameter has a bad %%-escape");
        if (limit) {
                char *end;
                unsigned long v = strtoul(limit, &end, 10);
                if (*end || v < 1 || v > LIST_LIMIT_MAX)
                        return cage_fail(err, -EINVAL, "limit: 1..%d", LIST_LIMIT_MAX);
                q->limit = v;
        }
        return 0;
}

static int list(struct e2b_call *c, struct e2b_reply *reply, struct cage_error *err)
{
        struct list_query q = {0};
        struct e2b_box **boxes = NULL;
        size_t n = 0;
        int r = list_query_parse(c->query, &q, err);
        if (r == 0)
                r = e2b_registry_list(c->reg, c->tenant, &boxes, &n);
        json_t *out = r == 0 ? json_array() : NULL;
        bool past_token = !q.next, excluded = state_excludes_running(c->query);
        const char *last = NULL;
        for (size_t i = 0; out && r == 0 && i < n; i++) {
                struct e2b_box *b = boxes[i];
                bool match = !excluded && past_token;
                if (match && q.metadata &&
                    e2b_metadata_matches(q.metadata, b->metadata, &match) < 0)
                        r = cage_fail(err, -EINVAL, "metadata: must be key=value pairs");
                if (match && q.template_id)
                        match = strcmp(q.template_id, b->template_id) == 0;
                if (q.next && strcmp(q.next, b->id) == 0)
                        past_token = true;
                if (!match)
                        continue;
                if (json_array_size(out) == q.limit) {
                        snprintf(reply->header_value, sizeof(reply->header_value), "%s", last);
                        reply->header_name = "X-Next-Token";
                        break;
                }
                json_array_append_new(out, info_doc(c->reg, b));
                last = b->id;
        }
        for (size_t i = 0; i < n; i++)
                e2b_box_unref(boxes[i]);
        free(boxes);
        list_query_free(&q);
        if (r < 0 || !out) {
                json_decref(out);
                return r < 0 ? r : -ENOMEM;
        }
        reply->status = 200;
        reply->json = out;
        return 0;
}

/* ---- one sandbox ------------------------------------------------------------- */

/* What a route of one sandbox that codecage does not serve is for. */
static const char *unoffered_name(const char *what)
{
        static const struct {
                const char *part, *name;
        } names[] = {{"pause", "pausing sandboxes"},
                     {"resume", "resuming sandboxes"},
                     {"snapshot", "snapshots"},
                     {"fork", "forking sandboxes"},
                     {"metrics", "sandbox metrics"},
                     {"network", "changing the network of a running sandbox"},
                     {"logs", "sandbox logs"}};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strstr(what, names[i].part))
                        return names[i].name;
        return "this route";
}

static int one(struct e2b_call *c, struct e2b_box *box, const char *what, struct e2b_reply *reply,
               struct cage_error *err)
{
        json_auto_t *body = NULL;
        uint64_t t;
        int r;
        if (!*what && strcmp(c->method, "GET") == 0) {
                reply->status = 200;
                reply->json = info_doc(c->reg, box);
                return 0;
        }
        if (!*what && strcmp(c->method, "DELETE") == 0) {
                if (e2b_registry_kill(c->reg, box) < 0)
                        return cage_fail(err, -ENOENT, "sandbox \"%s\" not found", box->id);
                reply->status = 204;
                return 0;
        }
        bool timeout = strcmp(what, "/timeout") == 0, refresh = strcmp(what, "/refreshes") == 0;
        bool connect = strcmp(what, "/connect") == 0;
        if ((!timeout && !refresh && !connect) || strcmp(c->method, "POST") != 0)
                return not_offered(err, unoffered_name(what));
        if ((r = body_object(c, &body, err)) < 0 ||
            (timeout && (r = require_timeout(body, err)) < 0) ||
            (r = timeout_of(c, body, refresh ? "duration" : "timeout", 0, &t, err)) < 0)
                return r;
        bool given = json_object_get(body, refresh ? "duration" : "timeout") != NULL;
        if (timeout || (given && t > 0))
                e2b_registry_set_end(c->reg, box, clock_wall_ms() + t * 1000, !timeout);
        reply->status = connect ? 200 : 204;
        reply->json = connect ? tokens_doc(box) : NULL;
        return 0;
}

/* "/sandboxes/{id}[/rest]" (or under /v2): the sandbox of this tenant. */
static int sandbox_route(struct e2b_call *c, const char *p, struct e2b_reply *reply,
                         struct cage_error *err)
{
        char id[E2B_ID_LEN + 2];
        size_t n = strcspn(p, "/");
        if (n == 0 || n > E2B_ID_LEN)
                return cage_fail(err, -ENOENT, "sandbox not found");
        memcpy(id, p, n);
        id[n] = '\0';
        struct e2b_box *box = e2b_registry_get_for(c->reg, c->tenant, id);
        if (!box) {
                (void)cage_service_audit_foreign(c->svc, c->tenant, id, NULL, c->peer);
                return cage_fail(err, -ENOENT, "sandbox \"%s\" not found", id);
        }
        int r = one(c, box, p + n, reply, err);
        e2b_box_unref(box);
        return r;
}

int e2b_control(struct e2b_call *c, struct e2b_reply *reply, struct cage_error *err)
{
        const char *p = c->path;
        bool v2 = strncmp(p, "/v2/", 4) == 0;
        if (v2)
                p += 3;
        if (strcmp(p, "/sandboxes") == 0 && strcmp(c->method, "POST") == 0)
                return create(c, reply, err);
        if (strcmp(p, "/sandboxes") == 0 && strcmp(c->method, "GET") == 0)
                return list(c, reply, err);
        if (strncmp(p, "/sandboxes/", 11) == 0)
                return sandbox_route(c, p + 11, reply, err);
        if (strcmp(c->path, "/health") == 0) {
                reply->status = 200;
                return 0;
        }
        if (strncmp(c->path, "/templates", 10) == 0)
                return not_offered(err, "templates: use an image reference as the templateID");
        if (strncmp(c->path, "/snapshots", 10) == 0)
                return not_offered(err, "snapshots");
        if (strncmp(c->path, "/volumes", 8) == 0)
                return not_offered(err, "volumes");
        return not_offered(err, "this route");
}
