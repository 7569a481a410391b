/* codecage's own MCP provider (mcp_provider.h): the tool table, whose
 * definitions come from mcp_tools.json (embedded in the binary) joined
 * to their handlers here, with the config's limits filled into the
 * descriptions, and the codecage:// resources of mcp_resources.c. The
 * handlers live in mcp_handlers.c (sandbox_*, file_*, python_*) and
 * mcp_run.c (run_python, run_shell).
 *
 * Every handler maps its arguments onto one service call (service.h) and
 * answers structuredContent (the service's document) plus a short text
 * for a model; a service error becomes an isError result naming what to
 * do (mcp_content.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
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

/* The definitions of the tools of list (all when NULL), ready to list. */
static json_t *load_tools(const struct cage_config *cfg, const char *list, struct cage_error *err)
{
        json_auto_t *doc = load_defs(err);
        if (!doc)
                return NULL;
        const json_t *shared = json_object_get(doc, "shared");
        json_auto_t *tools = json_array();
        size_t i;
        const json_t *def;
        json_array_foreach(json_object_get(doc, "tools"), i, def)
        {
                const char *name = json_string_value(json_object_get(def, "name"));
                if (!find_impl(name)) {
                        cage_fail(err, -EINVAL, "mcp_tools.json: no handler for %s", name);
                        return NULL;
                }
                if (list && !listed(list, name))
                        continue;
                json_t *tool = resolve(def, shared);
                if (!tool || finish_tool(tool, cfg) < 0 || json_array_append_new(tools, tool) < 0) {
                        cage_fail(err, -ENOMEM, "tool table");
                        return NULL;
                }
        }
        return TAKE_PTR(tools);
}

/* "a, b": the names of the config's upstream servers, or NULL. */
static char *upstream_names(const struct cage_config *cfg)
{
        char *text = NULL;
        size_t n = 0, i;
        json_t *e;
        if (!json_array_size(cfg->upstream_servers))
                return NULL;
        FILE *f = open_memstream(&text, &n);
        if (!f)
                return NULL;
        json_array_foreach(cfg->upstream_servers, i, e)
                fprintf(f, "%s%s", i ? ", " : "", json_string_value(json_object_get(e, "name")));
        fclose(f);
        return text;
}

/* Code mode: run_python's description names the upstream tools. */
static int announce_upstreams(json_t *tools, const struct cage_config *cfg, struct cage_error *err)
{
        size_t i;
        json_t *tool;
        _cleanup_free_ char *names = upstream_names(cfg);
        json_array_foreach(tools, i, tool)
        {
                const char *name = json_string_value(json_object_get(tool, "name"));
                _cleanup_free_ char *desc = NULL;
                if (strcmp(name, "run_python") != 0)
                        continue;
                if (!names ||
                    asprintf(&desc,
                             "%s Code mode: the tools of the upstream MCP servers %s are Python "
                             "functions here: tools.list() lists them (name, server, "
                             "description, input_schema); tools.<name>(**arguments) calls one "
                             "and returns its structured result or its text; a failing tool "
                             "raises HostCallError. Prefer one program that calls several tools "
                             "over many separate tool calls.",
                             json_string_value(json_object_get(tool, "description")), names) < 0)
                        return cage_fail(err, -ENOMEM, "tool table");
                json_object_set_new(tool, "description", json_string(desc));
        }
        return 0;
}

/* ---- tools/call ------------------------------------------------------------------------- */

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

static json_t *call_tool(const struct mcp_provider *p, struct mcp_call *c, const char *name,
                         const json_t *args)
{
        const struct tool_impl *impl = find_impl(name);
        json_t *result = impl ? impl->fn(c, args) : NULL;
        if (json_is_true(json_object_get(result, "isError")))
                audit_foreign(c, name, args);
        return result;
}

int mcp_codecage_provider_new(const struct cage_config *cfg, const char *list,
                              struct mcp_provider **ret, struct cage_error *err)
{
        int r = mcp_tools_check(list, err);
        if (r < 0)
                return r;
        struct mcp_provider *p = calloc(1, sizeof(*p));
        if (!p)
                return cage_fail(err, -ENOMEM, "tool table");
        *p = (struct mcp_provider){
                .name = "codecage",
                .call = call_tool,
                .tasks_optional = true,
                .resource_templates = mcp_codecage_resource_templates(),
                .read = mcp_codecage_resource_read,
        };
        p->tools = load_tools(cfg, list, err);
        if (!p->tools)
                r = err->code < 0 ? err->code : -EINVAL;
        else if (!p->resource_templates)
                r = cage_fail(err, -ENOMEM, "resource templates");
        if (r == 0 && json_array_size(cfg->upstream_servers))
                r = announce_upstreams(p->tools, cfg, err);
        if (r < 0) {
                mcp_provider_free(p);
                return r;
        }
        *ret = p;
        return 0;
}
