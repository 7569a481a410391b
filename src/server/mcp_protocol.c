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
 * answers a result with isError (mcp_tools.c). Revision 2025-11-25 is
 * ours; clients of 2025-06-18 and 2025-03-26 are accepted too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "util/cleanup.h"

static const char *const versions[] = {MCP_VERSION_LATEST, "2025-06-18", "2025-03-26"};

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

static json_t *capabilities(const struct mcp_server *srv)
{
        unsigned offer = mcp_providers_offer(srv);
        json_t *caps = json_pack("{s:{s:b}, s:{s:b, s:b}, s:{}}", "tools", "listChanged", 0,
                                 "resources", "subscribe", (offer & MCP_OFFER_SUBSCRIBE) != 0,
                                 "listChanged", 0, "logging");
        if (caps && (offer & MCP_OFFER_PROMPTS))
                json_object_set_new(caps, "prompts", json_pack("{s:b}", "listChanged", 0));
        if (caps && (offer & MCP_OFFER_COMPLETE))
                json_object_set_new(caps, "completions", json_object());
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
                         "capabilities", capabilities(s->srv), "serverInfo", "name",
                         MCP_SERVER_NAME, "title", "codecage sandboxes", "version",
                         CODECAGE_VERSION, "instructions", instructions);
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
};

static const struct method {
        const char *name;
        method_fn fn;
        unsigned flags;
        unsigned offer; /* enum mcp_offer: only when a provider offers it */
} methods[] = {
        {"initialize", m_initialize, M_BEFORE_INIT, 0},
        {"ping", m_ping, M_BEFORE_INIT, 0},
        {"tools/list", mcp_providers_tools_list, 0, 0},
        {"tools/call", NULL, M_CALL, 0},
        {"logging/setLevel", m_set_level, 0, 0},
        {"resources/list", mcp_providers_resources_list, 0, 0},
        {"resources/read", mcp_providers_resources_read, 0, 0},
        {"resources/templates/list", mcp_providers_resources_templates, 0, 0},
        {"resources/subscribe", m_subscribe, 0, MCP_OFFER_SUBSCRIBE},
        {"resources/unsubscribe", m_subscribe, 0, MCP_OFFER_SUBSCRIBE},
        {"prompts/list", mcp_providers_prompts_list, 0, MCP_OFFER_PROMPTS},
        {"prompts/get", mcp_providers_prompts_get, 0, MCP_OFFER_PROMPTS},
        {"completion/complete", mcp_providers_complete, 0, MCP_OFFER_COMPLETE},
};

static const struct method *find_method(const struct mcp_server *srv, const char *name)
{
        for (size_t i = 0; name && i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, name) == 0)
                        return (methods[i].offer & ~mcp_providers_offer(srv)) ? NULL : &methods[i];
        return NULL;
}

bool mcp_method_known(const char *method)
{
        for (size_t i = 0; method && i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, method) == 0)
                        return true;
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

static enum mcp_route request(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                              json_t **answer, struct mcp_call **call)
{
        const json_t *id = jsonrpc_id(msg);
        const char *name = json_string_value(json_object_get(msg, "method"));
        const struct method *m = find_method(s->srv, name);
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
        if (m->flags & M_CALL) {
                int r = mcp_call_new(s, sink, msg, call);
                if (r == 0)
                        return MCP_CALL;
                *answer = call_error(id, r);
                return MCP_ANSWER;
        }
        json_t *result = m->fn(s, json_object_get(msg, "params"), &e);
        *answer = result ? jsonrpc_result(id, result) : jsonrpc_error(id, e.code, e.message);
        return MCP_ANSWER;
}

enum mcp_route mcp_receive(struct mcp_session *s, struct mcp_sink *sink, const json_t *msg,
                           json_t **answer, struct mcp_call **call)
{
        const char *why;
        *answer = NULL;
        *call = NULL;
        switch (jsonrpc_classify(msg, &why)) {
        case JSONRPC_REQUEST:
                return request(s, sink, msg, answer, call);
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
        json_t *result = mcp_providers_tools_call(c, &e);
        if (mcp_call_cancelled(c)) {
                json_decref(result);
                return NULL;
        }
        if (!result)
                return jsonrpc_error(c->id, e.code ? e.code : JSONRPC_INTERNAL_ERROR,
                                     e.message[0] ? e.message : "Internal error");
        mcp_result_downgrade(result, c->session->version);
        return jsonrpc_result(c->id, result);
}
