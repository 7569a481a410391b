/* The MCP tools: the table (definitions from mcp_tools.json, embedded in
 * the binary, joined to their handlers here), tools/list with cursor
 * pagination, tools/call with the arguments checked against the tool's
 * inputSchema (top level: required, types, enums, unknown keys). The
 * handlers live in mcp_handlers.c (sandbox_*, file_*, python_*) and
 * mcp_run.c (run_python, run_shell).
 *
 * Every handler maps its arguments onto one service call (service.h) and
 * answers structuredContent (the service's document) plus a short text
 * for a model; a service error becomes an isError result naming what to
 * do (mcp_content.c). A tool name nobody knows is a protocol error
 * (-32602); bad arguments are a tool error, so a model can fix them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "util/cleanup.h"
#include "util/error.h"

extern const char cage_mcp_tools_json[];
extern const char cage_mcp_tools_json_end[];

static const struct tool_impl {
        const char *name;
        mcp_tool_fn fn;
} impls[] = {
        {"run_python", mcp_tool_run_python},
        {"run_shell", mcp_tool_run_shell},
        {"sandbox_create", mcp_tool_sandbox_create},
        {"sandbox_list", mcp_tool_sandbox_list},
        {"sandbox_remove", mcp_tool_sandbox_remove},
        {"sandbox_stop", mcp_tool_sandbox_stop},
        {"sandbox_logs", mcp_tool_sandbox_logs},
        {"file_write", mcp_tool_file_write},
        {"file_read", mcp_tool_file_read},
        {"file_list", mcp_tool_file_list},
        {"python_set_variable", mcp_tool_python_set},
        {"python_get_variable", mcp_tool_python_get},
        {"python_list_variables", mcp_tool_python_list},
};

static const struct tool_impl *find_impl(const char *name)
{
        for (size_t i = 0; name && i < ELEMENTSOF(impls); i++)
                if (strcmp(impls[i].name, name) == 0)
                        return &impls[i];
        return NULL;
}

/* ---- loading the table ------------------------------------------------------------- */

static json_t *resolve(const json_t *node, const json_t *shared);

static json_t *resolve_object(const json_t *node, const json_t *shared)
{
        json_t *out = json_object();
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)node, k,
                            v) if (!out || json_object_set_new(out, k, resolve(v, shared)) < 0)
        {
                json_decref(out);
                return NULL;
        }
        return out;
}

static json_t *resolve_array(const json_t *node, const json_t *shared)
{
        json_t *out = json_array();
        size_t i;
        const json_t *v;
        json_array_foreach(node, i, v)
        {
                if (!out || json_array_append_new(out, resolve(v, shared)) < 0) {
                        json_decref(out);
                        return NULL;
                }
        }
        return out;
}

/* A deep copy of node with every string "@NAME" replaced by shared[NAME]. */
static json_t *resolve(const json_t *node, const json_t *shared)
{
        const char *s = json_string_value(node);
        if (s && s[0] == '@' && json_object_get(shared, s + 1))
                return resolve(json_object_get(shared, s + 1), shared);
        if (json_is_object(node))
                return resolve_object(node, shared);
        if (json_is_array(node))
                return resolve_array(node, shared);
        return json_deep_copy(node);
}

/* The description with {limit} placeholders filled from the config. */
static char *fill_limits(const char *text, const struct cage_config *cfg)
{
        char values[5][32];
        const char *keys[5] = {"{timeout_s_max}", "{memory_mib_max}", "{cpus_max}",
                               "{output_max_bytes_max}", "{file_read_max}"};
        snprintf(values[0], 32, "%llu", (unsigned long long)cfg->limits.timeout_s_max);
        snprintf(values[1], 32, "%llu", (unsigned long long)cfg->limits.memory_mib_max);
        snprintf(values[2], 32, "%g", cfg->limits.cpus_max);
        snprintf(values[3], 32, "%llu", (unsigned long long)cfg->limits.output_max_bytes_max);
        snprintf(values[4], 32, "%d", MCP_READ_MAX);
        size_t cap = strlen(text) + 5 * 32 * 4 + 1, w = 0;
        char *out = malloc(cap);
        for (const char *p = text; out && *p;) {
                size_t k = 0;
                while (k < 5 && strncmp(p, keys[k], strlen(keys[k])) != 0)
                        k++;
                if (k < 5 && w + strlen(values[k]) < cap) {
                        memcpy(out + w, values[k], strlen(values[k]));
                        w += strlen(values[k]);
                        p += strlen(keys[k]);
                } else if (w + 1 < cap) {
                        out[w++] = *p++;
                } else {
                        break;
                }
        }
        if (out)
                out[w] = '\0';
        return out;
}

static int finish_tool(json_t *tool, const struct cage_config *cfg)
{
        _cleanup_free_ char *desc =
                fill_limits(json_string_value(json_object_get(tool, "description")), cfg);
        if (!desc || json_object_set_new(tool, "description", json_string(desc)) < 0)
                return -ENOMEM;
        json_t *props = json_object_get(json_object_get(tool, "inputSchema"), "properties");
        json_t *timeout = json_object_get(props, "timeout_s");
        if (timeout) {
                _cleanup_free_ char *tdesc = fill_limits(
                        json_string_value(json_object_get(timeout, "description")), cfg);
                json_object_set_new(timeout, "maximum",
                                    json_integer((json_int_t)cfg->limits.timeout_s_max));
                if (tdesc)
                        json_object_set_new(timeout, "description", json_string(tdesc));
        }
        return 0;
}

/* Comma-separated tool names -> whether name is in it. */
static bool listed(const char *list, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = list; p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (len == n && strncmp(p, name, n) == 0)
                        return true;
                p = end ? end + 1 : NULL;
        }
        return false;
}

int mcp_tools_check(const char *list, struct cage_error *err)
{
        char name[64];
        for (const char *p = list; p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                snprintf(name, sizeof(name), "%.*s", (int)(len < 63 ? len : 63), p);
                if (!find_impl(name))
                        return cage_fail(err, -EINVAL,
                                         "--tools: unknown tool \"%s\" (known: run_python, "
                                         "run_shell, sandbox_create, sandbox_list, "
                                         "sandbox_remove, sandbox_stop, sandbox_logs, file_write, "
                                         "file_read, file_list, python_set_variable, "
                                         "python_get_variable, python_list_variables)",
                                         name);
                p = end ? end + 1 : NULL;
        }
        if (list && !*list)
                return cage_fail(err, -EINVAL, "--tools: name at least one tool");
        return 0;
}

static json_t *load_defs(struct cage_error *err)
{
        json_error_t jerr;
        size_t len = (size_t)(cage_mcp_tools_json_end - cage_mcp_tools_json);
        json_t *doc = json_loadb(cage_mcp_tools_json, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!doc)
                cage_fail(err, -EINVAL, "mcp_tools.json: line %d: %s", jerr.line, jerr.text);
        return doc;
}

int mcp_tools_load(struct mcp_server *srv, const char *list, struct cage_error *err)
{
        int r = mcp_tools_check(list, err);
        if (r < 0)
                return r;
        json_auto_t *doc = load_defs(err);
        if (!doc)
                return -EINVAL;
        const json_t *shared = json_object_get(doc, "shared");
        srv->tools = json_array();
        size_t i;
        const json_t *def;
        json_array_foreach(json_object_get(doc, "tools"), i, def)
        {
                const char *name = json_string_value(json_object_get(def, "name"));
                if (!find_impl(name))
                        return cage_fail(err, -EINVAL, "mcp_tools.json: no handler for %s", name);
                if (list && !listed(list, name))
                        continue;
                json_t *tool = resolve(def, shared);
                if (!tool || finish_tool(tool, srv->cfg) < 0 ||
                    json_array_append_new(srv->tools, tool) < 0)
                        return cage_fail(err, -ENOMEM, "tool table");
        }
        return 0;
}

/* ---- tools/list ----------------------------------------------------------------------- */

long mcp_cursor_parse(const json_t *params)
{
        const json_t *cursor = json_object_get(params, "cursor");
        if (!cursor || json_is_null(cursor))
                return 0;
        const char *s = json_string_value(cursor);
        if (!s || strncmp(s, "o:", 2) != 0 || !s[2] || strlen(s) > MCP_CURSOR_MAX ||
            strspn(s + 2, "0123456789") != strlen(s + 2) || strlen(s + 2) > 9)
                return -1;
        return strtol(s + 2, NULL, 10);
}

json_t *mcp_cursor_next(size_t offset)
{
        char text[32];
        snprintf(text, sizeof(text), "o:%zu", offset);
        return json_string(text);
}

/* Every tool this session may see: ours, then the fixtures. */
static json_t *all_tools(struct mcp_session *s)
{
        json_t *all = json_copy(s->srv->tools);
        if (all && s->srv->fixtures)
                json_array_extend(all, json_object_get(s->srv->fixtures, "tools"));
        return all;
}

json_t *mcp_tools_list(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        long offset = mcp_cursor_parse(params);
        json_auto_t *all = all_tools(s);
        if (offset < 0 || (size_t)offset > json_array_size(all))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tools/list: invalid cursor; start again without one");
        json_t *page = json_array();
        bool old = strcmp(s->version, "2025-03-26") == 0;
        for (size_t i = (size_t)offset;
             page && i < json_array_size(all) && i < (size_t)offset + MCP_PAGE_SIZE; i++) {
                json_t *tool = json_copy(json_array_get(all, i));
                if (tool && old) /* that revision had no outputSchema */
                        json_object_del(tool, "outputSchema");
                json_array_append_new(page, tool);
        }
        json_t *result = json_pack("{s:o}", "tools", page);
        size_t next = (size_t)offset + MCP_PAGE_SIZE;
        if (result && next < json_array_size(all))
                json_object_set_new(result, "nextCursor", mcp_cursor_next(next));
        return result;
}

/* ---- tools/call: argument checks -------------------------------------------------------- */

static bool has_type(const json_t *v, const char *type)
{
        if (strcmp(type, "string") == 0)
                return json_is_string(v);
        if (strcmp(type, "integer") == 0)
                return json_is_integer(v) ||
                       (json_is_real(v) &&
                        json_real_value(v) == (double)(long long)json_real_value(v));
        if (strcmp(type, "number") == 0)
                return json_is_number(v);
        if (strcmp(type, "boolean") == 0)
                return json_is_boolean(v);
        if (strcmp(type, "array") == 0)
                return json_is_array(v);
        if (strcmp(type, "object") == 0)
                return json_is_object(v);
        if (strcmp(type, "null") == 0)
                return json_is_null(v);
        return true;
}

static bool type_ok(const json_t *v, const json_t *type)
{
        if (json_is_string(type))
                return has_type(v, json_string_value(type));
        size_t i;
        const json_t *t;
        json_array_foreach(type, i, t) if (has_type(v, json_string_value(t))) return true;
        return !json_is_array(type);
}

static bool enum_ok(const json_t *v, const json_t *values)
{
        size_t i;
        const json_t *e;
        if (!values)
                return true;
        json_array_foreach(values, i, e) if (json_equal(v, e)) return true;
        return false;
}

static void known_keys(const json_t *props, char *out, size_t n)
{
        const char *k;
        const json_t *v;
        size_t w = 0;
        out[0] = '\0';
        json_object_foreach((json_t *)props, k, v) if (w < n) w +=
                (size_t)snprintf(out + w, n - w, "%s%s", w ? ", " : "", k);
}

static json_t *check_args(const char *tool, const json_t *schema, const json_t *args)
{
        const json_t *props = json_object_get(schema, "properties");
        size_t i;
        const json_t *req;
        char keys[512];
        json_array_foreach(json_object_get(schema, "required"), i, req)
        {
                const char *name = json_string_value(req);
                const json_t *v = json_object_get(args, name);
                const json_t *type = json_object_get(json_object_get(props, name), "type");
                if (!v || (json_is_null(v) && type && !type_ok(v, type)))
                        return mcp_result_error(
                                "%s: the argument `%s` is required: %s", tool, name,
                                json_string_value(json_object_get(json_object_get(props, name),
                                                                  "description"))
                                        ?: "see the tool's inputSchema");
        }
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)args, k, v)
        {
                const json_t *p = json_object_get(props, k);
                if (!p && json_is_false(json_object_get(schema, "additionalProperties"))) {
                        known_keys(props, keys, sizeof(keys));
                        return mcp_result_error("%s: unknown argument `%.64s`; it takes: %s", tool,
                                                k, keys);
                }
                if (!p || json_is_null(v))
                        continue;
                const json_t *type = json_object_get(p, "type");
                if ((type && !type_ok(v, type)) || !enum_ok(v, json_object_get(p, "enum"))) {
                        _cleanup_free_ char *want = json_dumps(json_object_get(p, "enum") ?: type,
                                                               JSON_ENCODE_ANY | JSON_COMPACT);
                        return mcp_result_error("%s: the argument `%s` must be %s%s", tool, k,
                                                json_object_get(p, "enum") ? "one of " : "a ",
                                                want ? want : "?");
                }
        }
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

/* The sandbox a tool call names: `sandbox`, or `name` of the sandbox_*
 * tools that address an existing one. */
static const char *sandbox_named(const char *tool, const json_t *args)
{
        const json_t *v = json_object_get(args, "sandbox");
        bool by_name = strncmp(tool, "sandbox_", 8) == 0 && strcmp(tool, "sandbox_create") != 0 &&
                       strcmp(tool, "sandbox_list") != 0;
        if (!v && by_name)
                v = json_object_get(args, "name");
        return json_string_value(v);
}

/* A failed call on a sandbox of another tenant is audited (tenancy.c). */
static void audit_foreign(struct mcp_call *c, const char *tool, const json_t *args)
{
        const char *sandbox = sandbox_named(tool, args);
        char call[128];
        if (!sandbox)
                return;
        snprintf(call, sizeof(call), "tools/call %s", tool);
        mcp_session_audit_foreign(c->session, call, sandbox, NULL);
}

json_t *mcp_tools_call(struct mcp_call *c, struct mcp_error *e)
{
        struct mcp_server *srv = c->session->srv;
        const char *name = json_string_value(json_object_get(c->params, "name"));
        const json_t *args = json_object_get(c->params, "arguments");
        json_auto_t *empty = json_object();
        if (!name)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tools/call: params.name (a string) is required");
        if (args && !json_is_object(args) && !json_is_null(args))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tools/call: params.arguments must be an object");
        if (!args || json_is_null(args))
                args = empty;
        const json_t *def = find_tool(srv->tools, name);
        if (!def && srv->fixtures)
                def = find_tool(json_object_get(srv->fixtures, "tools"), name);
        if (!def)
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "Unknown tool: %.100s (tools/list lists the tools of this server)",
                                name);
        json_t *bad = check_args(name, json_object_get(def, "inputSchema"), args);
        if (bad)
                return bad;
        const struct tool_impl *impl = find_impl(name);
        bool found = false;
        json_t *result = impl ? impl->fn(c, args) : mcp_fixture_tool(c, name, args, &found);
        if (json_is_true(json_object_get(result, "isError")))
                audit_foreign(c, name, args);
        return result ? result
                      : mcp_fail(e, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
}
