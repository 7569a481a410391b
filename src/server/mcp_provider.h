/* What the MCP server offers, as providers: each one brings tools,
 * resources, prompts and completion (any of them), and the server's
 * dispatch (mcp_providers.c) answers tools/list, tools/call,
 * resources, prompts and completion requests from the providers
 * registered with it, in order. codecage's own tools and resources are
 * one provider (mcp_tools.c, mcp_resources.c); a test build adds the
 * conformance suite's fixtures as another (mcp_fixtures.h), only when
 * its switch is given, so nothing here knows them.
 *
 * A provider is created once per server and read-only afterwards: any
 * thread may use it. Its JSON parts are borrowed by the dispatch. */
#ifndef CODECAGE_SERVER_MCP_PROVIDER_H
#define CODECAGE_SERVER_MCP_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>

#include "server/mcp.h"

struct mcp_provider {
        const char *name; /* for error messages: "codecage", "conformance fixtures" */
        void *data;       /* the provider's own */

        /* Tool definitions (name, description, inputSchema, ...); NULL: none. */
        json_t *tools;
        /* Runs one of its tools, the arguments checked against the top level
         * of its inputSchema: a complete CallToolResult (isError for a failure
         * a model should see), or NULL when out of memory. */
        json_t *(*call)(const struct mcp_provider *p, struct mcp_call *c, const char *name,
                        const json_t *args);

        json_t *resources;          /* resources/list entries, or NULL */
        json_t *resource_templates; /* resources/templates/list entries, or NULL */
        bool subscribe;             /* resources/subscribe is accepted */
        /* Revision 2026-07-28: its tools without an `execution` of their own
         * may run as tasks (execution.taskSupport "optional"). */
        bool tasks_optional;
        /* Whether its tool name, run as a task, becomes one only when it
         * says so (mcp_call_escalate: after gathering input through
         * input-required results) rather than at once. NULL: never. */
        bool (*task_later)(const char *name);
        /* resources/read: 0 when uri is none of its own; 1 with *ret (the
         * ReadResourceResult) or with e filled (*ret NULL). */
        int (*read)(const struct mcp_provider *p, struct mcp_session *s, const char *uri,
                    json_t **ret, struct mcp_error *e);

        json_t *prompts; /* prompts/list entries, or NULL */
        /* prompts/get of one of its prompts: the GetPromptResult, or NULL with e. */
        json_t *(*prompt)(const struct mcp_provider *p, const json_t *params, struct mcp_error *e);
        /* completion/complete: the CompleteResult, or NULL with e. */
        json_t *(*complete)(const struct mcp_provider *p, const json_t *params,
                            struct mcp_error *e);

        /* Frees data (the JSON parts are the dispatch's to release). */
        void (*free_data)(void *data);
};

/* Frees p, its JSON parts and its data. Accepts NULL; returns NULL. */
struct mcp_provider *mcp_provider_free(struct mcp_provider *p);

/* Adds p to srv (taking it): -EEXIST naming a tool another provider has
 * already, -E2BIG past MCP_PROVIDERS_MAX. p is freed on failure. */
int mcp_providers_add(struct mcp_server *srv, struct mcp_provider *p, struct cage_error *err);

/* What the registered providers offer beyond tools and resources. */
enum mcp_offer {
        MCP_OFFER_SUBSCRIBE = 1 << 0,
        MCP_OFFER_PROMPTS = 1 << 1,
        MCP_OFFER_COMPLETE = 1 << 2,
};
unsigned mcp_providers_offer(const struct mcp_server *srv);

/* The methods, answered from every provider. */
json_t *mcp_providers_tools_list(struct mcp_session *s, const json_t *params, struct mcp_error *e);
json_t *mcp_providers_tools_call(struct mcp_call *c, struct mcp_error *e);
/* execution.taskSupport of tool name: "forbidden", "optional" or
 * "required" (an unknown tool: "forbidden"). */
const char *mcp_providers_task_support(const struct mcp_server *srv, const char *name);
bool mcp_providers_task_later(const struct mcp_server *srv, const char *name);
/* The definition of tool name as tools/list shows it, or NULL. */
const json_t *mcp_providers_tool(const struct mcp_server *srv, const char *name);
json_t *mcp_providers_resources_list(struct mcp_session *s, const json_t *params,
                                     struct mcp_error *e);
json_t *mcp_providers_resources_templates(struct mcp_session *s, const json_t *params,
                                          struct mcp_error *e);
json_t *mcp_providers_resources_read(struct mcp_session *s, const json_t *params,
                                     struct mcp_error *e);
json_t *mcp_providers_prompts_list(struct mcp_session *s, const json_t *params,
                                   struct mcp_error *e);
json_t *mcp_providers_prompts_get(struct mcp_session *s, const json_t *params, struct mcp_error *e);
json_t *mcp_providers_complete(struct mcp_session *s, const json_t *params, struct mcp_error *e);

/* The top-level check of a tool's arguments against its inputSchema
 * (required, types, enums, unknown keys): NULL when they pass, else the
 * isError CallToolResult that says what is wrong. */
json_t *mcp_tool_args_check(const char *tool, const json_t *schema, const json_t *args);

/* codecage's own provider: the tools of mcp_tools.json (only those of
 * list, "a,b", when it is not NULL) and the codecage:// resources. */
int mcp_codecage_provider_new(const struct cage_config *cfg, const char *list,
                              struct mcp_provider **ret, struct cage_error *err);
/* mcp_resources.c: codecage's resource templates and resources/read. */
json_t *mcp_codecage_resource_templates(void);
int mcp_codecage_resource_read(const struct mcp_provider *p, struct mcp_session *s, const char *uri,
                               json_t **ret, struct mcp_error *e);

#endif
