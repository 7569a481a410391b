/* The providers of an MCP server (mcp_provider.h) and the methods
 * answered from them. Lists join the providers' items in the order the
 * providers were added (codecage's own first); tools/call goes to the
 * provider that has the tool, after its arguments passed the top level
 * of the tool's inputSchema; resources/read goes to the first provider
 * that takes the URI. A tool name nobody has is a protocol error
 * (-32602); bad arguments are a tool error, so a model can fix them.
 *
 * This file knows no provider: it sees only the interface. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "util/cleanup.h"
#include "util/error.h"

#define URI_MAX 8192 /* bytes of a resources/read URI */

struct mcp_provider *mcp_provider_free(struct mcp_provider *p)
{
        if (!p)
                return NULL;
        json_decref(p->tools);
        json_decref(p->resources);
        json_decref(p->resource_templates);
        json_decref(p->prompts);
        if (p->free_data)
                p->free_data(p->data);
        free(p);
        return NULL;
}

static const json_t *find_tool(const json_t *tools, const char *name)
{
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
                const char *n = json_string_value(json_object_get(t, "name"));
                if (n && strcmp(n, name) == 0)
                        return t;
        }
        return NULL;
}

/* The provider of tool name (and its definition), or NULL. */
static const struct mcp_provider *tool_provider(const struct mcp_server *srv, const char *name,
                                                const json_t **def)
{
        for (size_t i = 0; i < srv->n_providers; i++)
                if ((*def = find_tool(srv->providers[i]->tools, name)))
                        return srv->providers[i];
        return NULL;
}

int mcp_providers_add(struct mcp_server *srv, struct mcp_provider *p, struct cage_error *err)
{
        size_t i;
        const json_t *t, *def;
        if (srv->n_providers == MCP_PROVIDERS_MAX) {
                mcp_provider_free(p);
                return cage_fail(err, -E2BIG, "mcp: at most %d tool providers", MCP_PROVIDERS_MAX);
        }
        json_array_foreach(p->tools, i, t)
        {
                const char *name = json_string_value(json_object_get(t, "name"));
                if (!name || tool_provider(srv, name, &def)) {
                        int r = cage_fail(err, -EEXIST, "mcp: %s: tool %s is there already",
                                          p->name, name ? name : "without a name");
                        mcp_provider_free(p);
                        return r;
                }
        }
        srv->providers[srv->n_providers++] = p;
        return 0;
}

unsigned mcp_providers_offer(const struct mcp_server *srv)
{
        unsigned offer = 0;
        for (size_t i = 0; i < srv->n_providers; i++) {
                const struct mcp_provider *p = srv->providers[i];
                offer |= (p->subscribe ? MCP_OFFER_SUBSCRIBE : 0) |
                         (p->prompt ? MCP_OFFER_PROMPTS : 0) |
                         (p->complete ? MCP_OFFER_COMPLETE : 0);
        }
        return offer;
}

enum items { TOOLS, RESOURCES, TEMPLATES, PROMPTS };

static const json_t *items_of(const struct mcp_provider *p, enum items kind)
{
        switch (kind) {
        case TOOLS:
                return p->tools;
        case RESOURCES:
                return p->resources;
        case TEMPLATES:
                return p->resource_templates;
        default:
                return p->prompts;
        }
}

/* Every provider's items of one kind, in order. */
static json_t *joined(const struct mcp_server *srv, enum items kind)
{
        json_t *all = json_array();
        for (size_t i = 0; all && i < srv->n_providers; i++) {
                const json_t *items = items_of(srv->providers[i], kind);
                if (items && json_array_extend(all, (json_t *)items) < 0) {
                        json_decref(all);
                        return NULL;
                }
        }
        return all;
}

/* ---- tools ---------------------------------------------------------------------------- */

const char *mcp_providers_task_support(const struct mcp_server *srv, const char *name)
{
        const json_t *def = NULL;
        const struct mcp_provider *p = tool_provider(srv, name, &def);
        const char *v = json_string_value(
                json_object_get(json_object_get(def, "execution"), "taskSupport"));
        if (v && (strcmp(v, "optional") == 0 || strcmp(v, "required") == 0))
                return v;
        return p && p->tasks_optional && !v ? "optional" : "forbidden";
}

const json_t *mcp_providers_tool(const struct mcp_server *srv, const char *name)
{
        const json_t *def = NULL;
        return tool_provider(srv, name, &def) ? def : NULL;
}

bool mcp_providers_task_later(const struct mcp_server *srv, const char *name)
{
        const json_t *def = NULL;
        const struct mcp_provider *p = tool_provider(srv, name, &def);
        return p && p->task_later && p->task_later(name);
}

/* 2026-07-28: the tools that may run as tasks say so. */
static void with_task_support(const struct mcp_server *srv, json_t *all)
{
        size_t i;
        json_t *tool;
        json_array_foreach(all, i, tool)
        {
                const char *name = json_string_value(json_object_get(tool, "name"));
                if (!name || json_object_get(tool, "execution") ||
                    strcmp(mcp_providers_task_support(srv, name), "optional") != 0)
                        continue;
                json_t *copy = json_copy(tool);
                if (copy)
                        json_object_set_new(copy, "execution",
                                            json_pack("{s:s}", "taskSupport", "optional"));
                json_array_set_new(all, i, copy ? copy : json_null());
        }
}

json_t *mcp_providers_tools_list(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        json_auto_t *all = joined(s->srv, TOOLS);
        bool old = strcmp(s->version, "2025-03-26") == 0;
        size_t i;
        json_t *tool;
        if (!all)
                return NULL;
        if (s->stateless)
                with_task_support(s->srv, all);
        json_array_foreach(all, i, tool)
        {
                if (!old) /* that revision had no outputSchema */
                        break;
                json_t *copy = json_copy(tool);
                if (copy)
                        json_object_del(copy, "outputSchema");
                json_array_set_new(all, i, copy ? copy : json_null());
        }
        return mcp_page(all, params, "tools", "tools/list", e);
}

json_t *mcp_providers_tools_call(struct mcp_call *c, struct mcp_error *e)
{
        const char *name = json_string_value(json_object_get(c->params, "name"));
        const json_t *args = json_object_get(c->params, "arguments");
        json_auto_t *empty = json_object();
        const json_t *def = NULL;
        if (!name)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tools/call: params.name (a string) is required");
        if (args && !json_is_object(args) && !json_is_null(args))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tools/call: params.arguments must be an object");
        if (!args || json_is_null(args))
                args = empty;
        const struct mcp_provider *p = tool_provider(c->session->srv, name, &def);
        if (!p)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "Unknown tool: %.100s (tools/list lists the tools of this server)",
                                name);
        json_t *result = mcp_tool_args_check(name, json_object_get(def, "inputSchema"), args);
        if (!result)
                result = p->call(p, c, name, args);
        return result || c->missing_capability
                       ? result
                       : mcp_fail(e, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
}

/* ---- resources ---------------------------------------------------------------------- */

json_t *mcp_providers_resources_list(struct mcp_session *s, const json_t *params,
                                     struct mcp_error *e)
{
        json_auto_t *all = joined(s->srv, RESOURCES);
        return all ? mcp_page(all, params, "resources", "resources/list", e) : NULL;
}

json_t *mcp_providers_resources_templates(struct mcp_session *s, const json_t *params,
                                          struct mcp_error *e)
{
        json_auto_t *all = joined(s->srv, TEMPLATES);
        return all ? mcp_page(all, params, "resourceTemplates", "resources/templates/list", e)
                   : NULL;
}

json_t *mcp_providers_resources_read(struct mcp_session *s, const json_t *params,
                                     struct mcp_error *e)
{
        const char *uri = json_string_value(json_object_get(params, "uri"));
        if (!uri || json_string_length(json_object_get(params, "uri")) > URI_MAX)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "resources/read: params.uri must be a string of at most %d bytes",
                                URI_MAX);
        for (size_t i = 0; i < s->srv->n_providers; i++) {
                const struct mcp_provider *p = s->srv->providers[i];
                json_t *result = NULL;
                if (p->read && p->read(p, s, uri, &result, e) != 0)
                        return result;
        }
        return mcp_fail(e, JSONRPC_RESOURCE_NOT_FOUND, /* no provider takes it */
                        "Resource not found: %.300s (this server serves "
                        "codecage://runs/<run_id>/<path> and "
                        "codecage://sandboxes/<name>/files/<path>)",
                        uri);
}

/* ---- prompts and completion -------------------------------------------------------------- */

json_t *mcp_providers_prompts_list(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        json_t *all = joined(s->srv, PROMPTS);
        return all ? json_pack("{s:o}", "prompts", all) : NULL;
}

/* The provider that lists prompt name. */
static const struct mcp_provider *prompt_provider(const struct mcp_server *srv, const char *name)
{
        for (size_t i = 0; name && i < srv->n_providers; i++)
                if (srv->providers[i]->prompt && find_tool(srv->providers[i]->prompts, name))
                        return srv->providers[i];
        return NULL;
}

json_t *mcp_providers_prompts_get(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS, "prompts/get: params.name is required");
        const struct mcp_provider *p = prompt_provider(s->srv, name);
        if (!p)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS, "prompts/get: unknown prompt %.100s",
                                name);
        return p->prompt(p, params, e);
}

json_t *mcp_providers_complete(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        const char *value =
                json_string_value(json_object_get(json_object_get(params, "argument"), "value"));
        if (!json_is_object(json_object_get(params, "ref")) || !value)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "completion/complete: params.ref and params.argument.value are "
                                "required");
        for (size_t i = 0; i < s->srv->n_providers; i++)
                if (s->srv->providers[i]->complete)
                        return s->srv->providers[i]->complete(s->srv->providers[i], params, e);
        /* Not reached: the method exists only when a provider completes. */
        return mcp_fail(e, JSONRPC_METHOD_NOT_FOUND, "Method not found: completion/complete");
}
