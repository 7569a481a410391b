/* MCP dispatch: what one message from the client does, for every
 * transport. Requests are looked up in the method table (tools,
 * resources, prompts and completion are answered from the server's
 * providers: mcp_providers.c; a method no provider offers is unknown);
 * tools/call
 * becomes a registered call the transport runs on its own thread (so the
 * transport keeps reading: a cancellation or a sampling answer can
 * arrive meanwhile); every other method answers at once. Responses go to
 * the request of ours they answer; notifications (initialized,
 * cancelled, ...) change session state and are never answered.
 *
 * Protocol errors are JSON-RPC errors (-32700 parse, -32600 invalid
 * request, -32601 unknown method, -32602 bad params); a tool that fails
 * answers a result with isError (mcp_tools.c). Two eras are served:
 * 2025-11-25 (clients of 2025-06-18 and 2025-03-26 too) with initialize
 * and a session, and 2026-07-28, stateless: every request carries its
 * protocol version, client capabilities and log level in params._meta
 * (mcp_modern_check()), server/discover replaces initialize, the
 * session-state methods (ping, logging/setLevel, resources/subscribe...)
 * are gone, results say their resultType and caching hints, a
 * tools/call runs as a job (mcp_job.c: input-required results, tasks),
 * and subscriptions/listen opens a notification stream the transport
 * keeps (mcp_listen.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "util/cleanup.h"

static const char *const versions[] = {MCP_VERSION_LATEST, "2025-06-18", "2025-03-26"};
/* What server/discover and UnsupportedProtocolVersionError list. */
static const char *const all_versions[] = {MCP_VERSION_MODERN, MCP_VERSION_LATEST, "2025-06-18",
                                           "2025-03-26"};

#define ERR_HEADER_MISMATCH     (-32020)
#define ERR_MISSING_CAPABILITY  (-32021)
#define ERR_UNSUPPORTED_VERSION (-32022)
#define LIST_TTL_MS             60000 /* tools, templates, prompts: fixed while the server runs */

static const char instructions[] =
        "codecage runs code in isolated Linux sandboxes (bounded memory, CPU and time; no "
        "network unless `network` lists hosts; pip packages through `requirements`). For a "
        "one-off computation call run_python or run_shell without `sandbox`. For "
        "work that spans several calls, create a sandbox with sandbox_create and pass its name "
        "as `sandbox`: its Python variables and /workspace files persist. Files written to "
        "/workspace/output/ come back as images or resource links.";

bool mcp_version_supported(const char *v)
{
        for (size_t i = 0; v && i < ELEMENTSOF(versions); i++)
                if (strcmp(v, versions[i]) == 0)
                        return true;
        return false;
}

/* ---- methods ---------------------------------------------------------------- */

static json_t *capabilities(const struct mcp_server *srv, bool stateless)
{
        unsigned offer = mcp_providers_offer(srv);
        /* 2026-07-28: resourceSubscriptions of subscriptions/listen (files of
         * sandboxes change); before, resources/subscribe of a provider */
        bool subscribe = stateless ? srv->listen != NULL : (offer & MCP_OFFER_SUBSCRIBE) != 0;
        json_t *caps = json_pack("{s:{s:b}, s:{s:b, s:b}, s:{}}", "tools", "listChanged", 0,
                                 "resources", "subscribe", subscribe, "listChanged", 0, "logging");
        if (caps && (offer & MCP_OFFER_PROMPTS))
                json_object_set_new(caps, "prompts", json_pack("{s:b}", "listChanged", 0));
        if (caps && (offer & MCP_OFFER_COMPLETE))
                json_object_set_new(caps, "completions", json_object());
        if (caps && stateless) /* any tool may run as a task (mcp_job.c) */
                json_object_set_new(caps, "extensions", json_pack("{s:{}}", MCP_TASKS_EXTENSION));
        return caps;
}

static json_t *m_initialize(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        const json_t *caps = json_object_get(params, "capabilities");
        if (!asked)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "initialize: params.protocolVersion (a string) is required");
        if (caps && !json_is_object(caps))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "initialize: params.capabilities must be an object");
        pthread_mutex_lock(&s->lock);
        bool again = s->initialized;
        if (!again) {
                snprintf(s->version, sizeof(s->version), "%s",
                         mcp_version_supported(asked) ? asked : MCP_VERSION_LATEST);
                s->sampling = json_is_object(json_object_get(caps, "sampling"));
                s->elicitation = json_is_object(json_object_get(caps, "elicitation"));
                s->initialized = true;
        }
        pthread_mutex_unlock(&s->lock);
        if (again)
                return mcp_fail(e, JSONRPC_INVALID_REQUEST,
                                "initialize: this session is initialized already");
        return json_pack("{s:s, s:o, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", s->version,
                         "capabilities", capabilities(s->srv, false), "serverInfo", "name",
                         MCP_SERVER_NAME, "title", "codecage sandboxes", "version",
                         CODECAGE_VERSION, "instructions", instructions);
}

static json_t *string_array(const char *const *v, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

/* 2026-07-28: what initialize said, asked any time, without state. */
static json_t *m_discover(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        return json_pack("{s:o, s:o, s:s, s:s, s:i, s:{s:{s:s, s:s, s:s}}}", "supportedVersions",
                         string_array(all_versions, ELEMENTSOF(all_versions)), "capabilities",
                         capabilities(s->srv, true), "instructions", instructions, "cacheScope",
                         "public", "ttlMs", LIST_TTL_MS, "_meta",
                         "io.modelcontextprotocol/serverInfo", "name", MCP_SERVER_NAME, "title",
                         "codecage sandboxes", "version", CODECAGE_VERSION);
}

static json_t *m_ping(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        return json_object();
}

static json_t *m_set_level(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        int level = mcp_log_level_from_string(json_string_value(json_object_get(params, "level")));
        if (level < 0)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "logging/setLevel: params.level must be one of debug, info, "
                                "notice, warning, error, critical, alert, emergency");
        pthread_mutex_lock(&s->lock);
        s->log_level = (enum mcp_log_level)level;
        pthread_mutex_unlock(&s->lock);
        return json_object();
}

/* Subscriptions are accepted when a provider offers them; resources
 * never change, so no update is ever sent. */
static json_t *m_subscribe(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        if (!json_is_string(json_object_get(params, "uri")))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS, "params.uri (a string) is required");
        return json_object();
}

typedef json_t *(*method_fn)(struct mcp_session *s, const json_t *params, struct mcp_error *e);

enum {
        M_BEFORE_INIT = 1 << 0, /* allowed before initialize */
        M_CALL = 1 << 1,        /* a call, run by the transport */
        M_LEGACY = 1 << 2,      /* only before 2026-07-28 (session state) */
        M_MODERN = 1 << 3,      /* only from 2026-07-28 on */
        M_CACHE = 1 << 4,       /* 2026-07-28: the result has ttlMs and cacheScope */
        M_VOLATILE = 1 << 5,    /* ... with ttlMs 0: it changes with the sandboxes */
        M_LISTEN = 1 << 6,      /* subscriptions/listen: a stream the transport keeps */
};

static const struct method {
        const char *name;
        method_fn fn;
        unsigned flags;
        unsigned offer; /* enum mcp_offer: only when a provider offers it */
} methods[] = {
        {"initialize", m_initialize, M_BEFORE_INIT | M_LEGACY, 0},
        {"server/discover", m_discover, M_MODERN, 0},
        {"ping", m_ping, M_BEFORE_INIT | M_LEGACY, 0},
        {"tools/list", mcp_providers_tools_list, M_CACHE, 0},
        {"tools/call", NULL, M_CALL, 0},
        {"logging/setLevel", m_set_level, M_LEGACY, 0},
        {"resources/list", mcp_providers_resources_list, M_CACHE | M_VOLATILE, 0},
        {"resources/read", mcp_providers_resources_read, M_CACHE | M_VOLATILE, 0},
        {"resources/templates/list", mcp_providers_resources_templates, M_CACHE, 0},
        {"resources/subscribe", m_subscribe, M_LEGACY, MCP_OFFER_SUBSCRIBE},
        {"resources/unsubscribe", m_subscribe, M_LEGACY, MCP_OFFER_SUBSCRIBE},
        {"prompts/list", mcp_providers_prompts_list, M_CACHE, MCP_OFFER_PROMPTS},
        {"prompts/get", mcp_providers_prompts_get, 0, MCP_OFFER_PROMPTS},
        {"completion/complete", mcp_providers_complete, 0, MCP_OFFER_COMPLETE},
        {"tasks/get", mcp_tasks_get, M_MODERN, 0},
        {"tasks/update", mcp_tasks_update, M_MODERN, 0},
        {"tasks/cancel", mcp_tasks_cancel, M_MODERN, 0},
        {"subscriptions/listen", NULL, M_MODERN | M_LISTEN, 0},
};

/* The method of an era (stateless: 2026-07-28), if a provider offers it. */
static const struct method *find_method(const struct mcp_server *srv, const char *name,
                                        bool stateless)
{
        unsigned foreign = stateless ? M_LEGACY : M_MODERN;
        for (size_t i = 0; name && i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, name) == 0)
                        return (methods[i].offer & ~mcp_providers_offer(srv)) ||
                                               (methods[i].flags & foreign)
                                       ? NULL
                                       : &methods[i];
        return NULL;
}

bool mcp_method_known(const char *method)
{
        for (size_t i = 0; method && i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, method) == 0)
                        return !(methods[i].flags & M_MODERN);
        return false;
}

bool mcp_is_call(const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        return method && strcmp(method, "tools/call") == 0 && jsonrpc_id(msg);
}

/* ---- messages ---------------------------------------------------------------- */

static void notification(struct mcp_session *s, const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        const json_t *params = json_object_get(msg, "params");
        if (strcmp(method, "notifications/cancelled") == 0)
                mcp_session_cancel(s, json_object_get(params, "requestId"));
        /* notifications/initialized, roots/list_changed, progress, ...:
         * nothing to do. Unknown notifications are ignored (JSON-RPC). */
}

static json_t *call_error(const json_t *id, int r)
{
        switch (r) {
        case -EEXIST:
                return jsonrpc_error(id, JSONRPC_INVALID_REQUEST,
                                     "Invalid Request: a request with this id is in flight "
                                     "already; use a new id");
        case -EBUSY:
                return jsonrpc_errorf(id, JSONRPC_INTERNAL_ERROR,
                                      "Server busy: %d tool calls of this session are running "
                                      "already; wait for one to finish",
                                      MCP_CALLS_MAX);
        case -ESHUTDOWN:
                return jsonrpc_error(id, JSONRPC_INVALID_REQUEST, "The session is closed");
        default:
                return jsonrpc_error(id, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
        }
}

/* 2026-07-28: every result says it is complete; lists say how long they
 * may be cached (resources change with the sandboxes: not at all). */
static void modern_result(json_t *result, unsigned flags)
{
        if (json_object_get(result, "resultType")) /* input_required */
                return;
        json_object_set_new(result, "resultType", json_string("complete"));
        if (!(flags & M_CACHE))
                return;
        json_object_set_new(result, "ttlMs", json_integer(flags & M_VOLATILE ? 0 : LIST_TTL_MS));
        json_object_set_new(result, "cacheScope", json_string("private"));
}

/* 2026-07-28 (SEP-2164): an unknown resource is -32602 with its uri. */
static void modern_error(json_t *answer, const json_t *msg)
{
        json_t *error = json_object_get(answer, "error");
        if (json_integer_value(json_object_get(error, "code")) != JSONRPC_RESOURCE_NOT_FOUND)
                return;
        json_object_set_new(error, "code", json_integer(JSONRPC_INVALID_PARAMS));
        const json_t *uri = json_object_get(json_object_get(msg, "params"), "uri");
        if (json_is_string(uri))
                json_object_set_new(error, "data", json_pack("{s:O}", "uri", uri));
}

/* subscriptions/listen: MCP_LISTEN with *sub acknowledged, or its error. */
static enum mcp_route m_listen(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                               json_t **answer, struct mcp_subscription **sub)
{
        struct mcp_error e = {0};
        const json_t *id = jsonrpc_id(msg);
        if (!sub) {
                *answer = jsonrpc_error(id, JSONRPC_METHOD_NOT_FOUND,
                                        "Method not found: subscriptions/listen");
                return MCP_ANSWER;
        }
        if ((*sub = mcp_listen_open(s, sink, msg, &e)))
                return MCP_LISTEN;
        *answer = jsonrpc_error(id, e.code, e.message);
        return MCP_ANSWER;
}

static enum mcp_route request(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                              json_t **answer, struct mcp_call **call,
                              struct mcp_subscription **sub)
{
        const json_t *id = jsonrpc_id(msg);
        const char *name = json_string_value(json_object_get(msg, "method"));
        const struct method *m = find_method(s->srv, name, s->stateless);
        struct mcp_error e = {0};
        if (!m) {
                *answer = jsonrpc_errorf(id, JSONRPC_METHOD_NOT_FOUND, "Method not found: %.200s",
                                         name);
                return MCP_ANSWER;
        }
        pthread_mutex_lock(&s->lock);
        bool ready = s->initialized;
        pthread_mutex_unlock(&s->lock);
        if (!ready && !(m->flags & M_BEFORE_INIT)) {
                *answer = jsonrpc_error(id, JSONRPC_INVALID_REQUEST,
                                        "Invalid Request: send initialize first");
                return MCP_ANSWER;
        }
        if (m->flags & M_LISTEN)
                return m_listen(s, sink, msg, answer, sub);
        if (m->flags & M_CALL) {
                int r = mcp_call_new(s, sink, msg, call);
                if (r == 0)
                        return MCP_CALL;
                *answer = call_error(id, r);
                return MCP_ANSWER;
        }
        json_t *result = m->fn(s, json_object_get(msg, "params"), &e);
        if (result && s->stateless)
                modern_result(result, m->flags);
        *answer = result ? jsonrpc_result(id, result) : jsonrpc_error(id, e.code, e.message);
        if (!result && *answer && e.data)
                json_object_set(json_object_get(*answer, "error"), "data", e.data);
        json_decref(e.data);
        if (!result && s->stateless)
                modern_error(*answer, msg);
        return MCP_ANSWER;
}

enum mcp_route mcp_receive(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                           json_t **answer, struct mcp_call **call, struct mcp_subscription **sub)
{
        const char *why;
        *answer = NULL;
        *call = NULL;
        if (sub)
                *sub = NULL;
        switch (jsonrpc_classify(msg, &why)) {
        case JSONRPC_REQUEST:
                return request(s, sink, msg, answer, call, sub);
        case JSONRPC_NOTIFICATION:
                notification(s, msg);
                return MCP_DONE;
        case JSONRPC_RESPONSE:
                mcp_session_deliver(s, msg);
                return MCP_DONE;
        default:
                *answer = jsonrpc_errorf(jsonrpc_id(msg), JSONRPC_INVALID_REQUEST,
                                         "Invalid Request: %s", why);
                return MCP_ANSWER;
        }
}

json_t *mcp_call_run(struct mcp_call *c)
{
        struct mcp_error e = {0};
        if (c->session->stateless && !c->job) /* it runs as a job (mcp_job.c) */
                return mcp_job_call(c);
        json_t *result = mcp_providers_tools_call(c, &e);
        if (mcp_call_cancelled(c)) {
                json_decref(result);
                return NULL;
        }
        if (!result && c->missing_capability) {
                json_t *answer = jsonrpc_errorf(c->id, ERR_MISSING_CAPABILITY,
                                                "Missing required client capability: %s",
                                                c->missing_capability);
                json_object_set_new(
                        json_object_get(answer, "error"), "data",
                        json_pack("{s:{s:{}}}", "requiredCapabilities", c->missing_capability));
                return answer;
        }
        if (!result)
                return jsonrpc_error(c->id, e.code ? e.code : JSONRPC_INTERNAL_ERROR,
                                     e.message[0] ? e.message : "Internal error");
        mcp_result_downgrade(result, c->session->version);
        if (c->session->stateless)
                json_object_set_new(result, "resultType", json_string("complete"));
        return jsonrpc_result(c->id, result);
}

/* ---- 2026-07-28 ------------------------------------------------------------------ */

bool mcp_is_modern(const json_t *msg, const char *header_version)
{
        if (header_version && !mcp_version_supported(header_version))
                return true;
        const json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
        return json_object_get(meta, MCP_META_VERSION) != NULL;
}

static unsigned refuse(json_t **answer, const json_t *id, int code, const char *message,
                       json_t *data)
{
        *answer = jsonrpc_error(id, code, message);
        if (*answer && data)
                json_object_set(json_object_get(*answer, "error"), "data", data);
        json_decref(data);
        return 400;
}

unsigned mcp_modern_check(const json_t *msg, const char *header_version, json_t **answer)
{
        const char *why;
        *answer = NULL;
        if (jsonrpc_classify(msg, &why) != JSONRPC_REQUEST)
                return 0; /* notifications, responses, invalid messages: as ever */
        const json_t *id = jsonrpc_id(msg);
        const json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
        const json_t *version = json_object_get(meta, MCP_META_VERSION);
        const json_t *level = json_object_get(meta, MCP_META_LOG_LEVEL);
        if (!json_is_string(version))
                return refuse(answer, id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: params._meta[\"" MCP_META_VERSION
                              "\"] (a string) is required by every request of "
                              "revision " MCP_VERSION_MODERN,
                              NULL);
        if (!json_is_object(json_object_get(meta, MCP_META_CAPS)))
                return refuse(answer, id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: params._meta[\"" MCP_META_CAPS
                              "\"] (an object) is required by every request of "
                              "revision " MCP_VERSION_MODERN,
                              NULL);
        const char *v = json_string_value(version);
        if (header_version && strcmp(header_version, v) != 0)
                return refuse(answer, id, ERR_HEADER_MISMATCH,
                              "Header mismatch: MCP-Protocol-Version differs from "
                              "params._meta[\"" MCP_META_VERSION "\"]",
                              NULL);
        if (strcmp(v, MCP_VERSION_MODERN) != 0)
                return refuse(answer, id, ERR_UNSUPPORTED_VERSION,
                              "Unsupported protocol version: without initialize this server "
                              "speaks " MCP_VERSION_MODERN "; 2025-11-25 and earlier start "
                              "with initialize",
                              json_pack("{s:o, s:O}", "supported",
                                        string_array(all_versions, ELEMENTSOF(all_versions)),
                                        "requested", version));
        if (level && mcp_log_level_from_string(json_string_value(level)) < 0)
                return refuse(answer, id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: params._meta[\"" MCP_META_LOG_LEVEL
                              "\"] must be one of debug, info, notice, warning, error, critical, "
                              "alert, emergency",
                              NULL);
        return 0;
}

unsigned mcp_modern_http_status(const json_t *answer)
{
        json_int_t code =
                json_integer_value(json_object_get(json_object_get(answer, "error"), "code"));
        if (code == JSONRPC_METHOD_NOT_FOUND)
                return 404;
        if (code <= ERR_HEADER_MISMATCH && code >= ERR_UNSUPPORTED_VERSION)
                return 400;
        return 200;
}
