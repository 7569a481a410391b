/* The tools that map one-to-one onto a service call: sandbox_create,
 * sandbox_list, sandbox_remove, sandbox_stop, sandbox_logs, file_write,
 * file_read, file_list, python_set_variable, python_get_variable and
 * python_list_variables. Each gets arguments already checked against its
 * inputSchema (mcp_tools.c), makes the call as the session's tenant and
 * answers the service's document as structuredContent plus a short text
 * for a model (listings cut at TEXT_MAX bytes); a service error becomes
 * an isError result saying what to do (mcp_content.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "services/service.h"
#include "util/base64.h"
#include "util/cleanup.h"

#define TEXT_MAX 4096 /* the text rendering of a listing, before "..." */

/* ---- helpers of the handlers -------------------------------------------------------- */

/* args[key] as a string, NULL when absent or null. */
static const char *arg_str(const json_t *args, const char *key)
{
        return json_string_value(json_object_get(args, key));
}

static struct cage_service *svc_of(struct mcp_call *c)
{
        return c->session->srv->svc;
}

static const char *tenant_of(struct mcp_call *c)
{
        return c->session->tenant;
}

/* Appends printf text to a bounded buffer, with "..." once it is full. */
static void text_add(char *buf, size_t *w, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void text_add(char *buf, size_t *w, const char *fmt, ...)
{
        if (*w >= TEXT_MAX)
                return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf + *w, TEXT_MAX + 1 - *w, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        *w += (size_t)n;
        if (*w >= TEXT_MAX) {
                memcpy(buf + TEXT_MAX - 4, "...\n", 5);
                *w = TEXT_MAX;
        }
}

static char *info_text(const json_t *info)
{
        const json_t *spec = json_object_get(info, "spec");
        char *text = NULL;
        if (asprintf(&text,
                     "Sandbox \"%s\" is %s (image %s, memory %lld MiB, cpus %g, timeout %g s). "
                     "Pass sandbox=\"%s\" to run_python, run_shell, file_* and python_* tools.",
                     json_string_value(json_object_get(info, "name")),
                     json_string_value(json_object_get(info, "state")),
                     json_string_value(json_object_get(info, "image")),
                     (long long)json_integer_value(json_object_get(spec, "memory_mib")),
                     json_number_value(json_object_get(spec, "cpus")),
                     json_number_value(json_object_get(spec, "timeout_s")),
                     json_string_value(json_object_get(info, "name"))) < 0)
                return NULL;
        return text;
}

static char *strdup_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strdup_text(const char *fmt, ...)
{
        char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&text, fmt, ap) < 0)
                text = NULL;
        va_end(ap);
        return text;
}

/* ---- sandbox_* ---------------------------------------------------------------------- */

json_t *mcp_tool_sandbox_create(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *info = NULL;
        int r = cage_service_sandbox_create(svc_of(c), tenant_of(c), args, &info, &err);
        if (r < 0)
                return mcp_result_service_error("sandbox_create", r, &err);
        return mcp_result_structured(info, info_text(info));
}

json_t *mcp_tool_sandbox_list(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *doc = NULL;
        const char *label = arg_str(args, "label");
        if (label && !strchr(label, '='))
                return mcp_result_error("sandbox_list: `label` must be \"key=value\"");
        int r = cage_service_sandbox_list(svc_of(c), tenant_of(c), label, &doc, &err);
        if (r < 0)
                return mcp_result_service_error("sandbox_list", r, &err);
        char text[TEXT_MAX + 1] = "";
        size_t w = 0, i;
        const json_t *sb, *list = json_object_get(doc, "sandboxes");
        text_add(text, &w, "%zu sandbox%s%s\n", json_array_size(list),
                 json_array_size(list) == 1 ? "" : "es", json_array_size(list) ? ":" : "");
        json_array_foreach(list, i, sb) text_add(text, &w, "- %s: %s, image %s, created %s\n",
                                                 json_string_value(json_object_get(sb, "name")),
                                                 json_string_value(json_object_get(sb, "state")),
                                                 json_string_value(json_object_get(sb, "image")),
                                                 json_string_value(json_object_get(sb, "created")));
        return mcp_result_structured(doc, strdup(text));
}

json_t *mcp_tool_sandbox_remove(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        const char *name = arg_str(args, "name");
        int r = cage_service_sandbox_remove(svc_of(c), tenant_of(c), name, &err);
        if (r < 0)
                return mcp_result_service_error("sandbox_remove", r, &err);
        return mcp_result_structured(json_pack("{s:s}", "removed", name),
                                     strdup_text("Removed sandbox \"%s\" and its files.", name));
}

json_t *mcp_tool_sandbox_stop(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *info = NULL;
        int r = cage_service_sandbox_stop(svc_of(c), tenant_of(c), arg_str(args, "name"), &info,
                                          &err);
        if (r < 0)
                return mcp_result_service_error("sandbox_stop", r, &err);
        return mcp_result_structured(info, info_text(info));
}

json_t *mcp_tool_sandbox_logs(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *doc = NULL;
        json_int_t tail = json_integer_value(json_object_get(args, "tail"));
        if (tail < 0 || tail > 100000)
                return mcp_result_error("sandbox_logs: `tail` must be 0..100000");
        int r = cage_service_sandbox_logs(svc_of(c), tenant_of(c), arg_str(args, "name"),
                                          (size_t)tail, &doc, &err);
        if (r < 0)
                return mcp_result_service_error("sandbox_logs", r, &err);
        char text[TEXT_MAX + 1] = "";
        size_t w = 0, i;
        const json_t *line, *lines = json_object_get(doc, "lines");
        if (!json_array_size(lines))
                text_add(text, &w, "(no output yet)");
        json_array_foreach(lines, i, line) text_add(text, &w, "%s\n", json_string_value(line));
        return mcp_result_structured(doc, strdup(text));
}

/* ---- file_* ---------------------------------------------------------------------------- */

/* The bytes of {content, encoding}: a new buffer, or an isError result. */
static json_t *decode_content(const char *tool, const json_t *args, void **data, size_t *len)
{
        const json_t *content = json_object_get(args, "content");
        const char *encoding = arg_str(args, "encoding");
        if (encoding && strcmp(encoding, "base64") == 0) {
                if (cage_base64_decode(json_string_value(content), json_string_length(content),
                                       data, len) < 0)
                        return mcp_result_error("%s: `content` is not valid base64 (standard "
                                                "alphabet, padded, no whitespace)",
                                                tool);
                return NULL;
        }
        *len = json_string_length(content);
        *data = malloc(*len + 1);
        if (!*data)
                return mcp_result_error("%s: out of memory", tool);
        memcpy(*data, json_string_value(content), *len);
        return NULL;
}

json_t *mcp_tool_file_write(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        const char *path = arg_str(args, "path");
        json_t *bad = decode_content("file_write", args, &data, &len);
        if (bad)
                return bad;
        int r = cage_service_file_write(svc_of(c), tenant_of(c), arg_str(args, "sandbox"), path,
                                        data, len, &err);
        if (r < 0)
                return mcp_result_service_error("file_write", r, &err);
        return mcp_result_structured(json_pack("{s:s, s:I}", "path", path, "size", (json_int_t)len),
                                     strdup_text("Wrote %zu bytes to /workspace/%s.", len, path));
}

static json_t *binary_result(struct mcp_call *c, const char *sandbox, const char *path,
                             const void *data, size_t len, const char *uri)
{
        struct cage_error err = {0};
        json_auto_t *stat = NULL;
        (void)cage_service_file_stat(svc_of(c), tenant_of(c), sandbox, path, &stat, &err);
        const char *mime = json_string_value(json_object_get(stat, "mime"));
        _cleanup_free_ char *b64 = mcp_base64(data, len);
        _cleanup_free_ char *text = strdup_text(
                "/workspace/%s: %zu bytes of binary data (%s), base64 in the resource below.", path,
                len, mime ? mime : "application/octet-stream");
        json_t *structured = json_pack("{s:s, s:I, s:s, s:s}", "path", path, "size",
                                       (json_int_t)len, "encoding", "base64", "uri", uri);
        if (!b64 || !text || !structured)
                return json_decref(structured), NULL;
        return json_pack("{s:[{s:s, s:s}, {s:s, s:{s:s, s:s, s:s}}], s:o}", "content", "type",
                         "text", "text", text, "type", "resource", "resource", "uri", uri,
                         "mimeType", mime ? mime : "application/octet-stream", "blob", b64,
                         "structuredContent", structured);
}

json_t *mcp_tool_file_read(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        const char *sandbox = arg_str(args, "sandbox"), *path = arg_str(args, "path");
        json_int_t max = json_integer_value(json_object_get(args, "max_bytes"));
        if (max <= 0 || max > MCP_READ_MAX)
                max = MCP_READ_MAX;
        int r = cage_service_file_read(svc_of(c), tenant_of(c), sandbox, path, (size_t)max, &data,
                                       &len, &err);
        if (r < 0)
                return mcp_result_service_error("file_read", r, &err);
        _cleanup_free_ char *uri = mcp_uri_sandbox_file(sandbox, path);
        if (!uri)
                return NULL;
        if (!mcp_utf8_valid(data, len))
                return binary_result(c, sandbox, path, data, len, uri);
        json_t *structured =
                json_pack("{s:s, s:I, s:s, s:s%, s:s}", "path", path, "size", (json_int_t)len,
                          "encoding", "utf-8", "text", (const char *)data, len, "uri", uri);
        char *text = malloc(len + 1);
        if (text) {
                memcpy(text, data, len);
                text[len] = '\0';
        }
        return mcp_result_structured(structured, text);
}

json_t *mcp_tool_file_list(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *doc = NULL;
        const char *path = arg_str(args, "path");
        int r = cage_service_file_list(svc_of(c), tenant_of(c), arg_str(args, "sandbox"),
                                       path ? path : "", &doc, &err);
        if (r < 0)
                return mcp_result_service_error("file_list", r, &err);
        char text[TEXT_MAX + 1] = "";
        size_t w = 0, i;
        const json_t *e, *entries = json_object_get(doc, "entries");
        text_add(text, &w, "/workspace/%s: %zu entr%s\n", path ? path : "",
                 json_array_size(entries), json_array_size(entries) == 1 ? "y" : "ies");
        json_array_foreach(entries, i, e)
        {
                const char *type = json_string_value(json_object_get(e, "type"));
                bool dir = type && strcmp(type, "dir") == 0;
                char name[MCP_SHOWN_NAME_MAX];
                text_add(text, &w, "- %s%s (%s, %lld bytes)\n",
                         mcp_shown_name(json_string_value(json_object_get(e, "path")), name,
                                        sizeof(name)),
                         dir ? "/" : "", type ? type : "?",
                         (long long)json_integer_value(json_object_get(e, "size")));
        }
        return mcp_result_structured(doc, strdup(text));
}

/* ---- python_* ---------------------------------------------------------------------------- */

json_t *mcp_tool_python_set(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        const char *name = arg_str(args, "name");
        int r = cage_service_python_set(svc_of(c), tenant_of(c), arg_str(args, "sandbox"), name,
                                        json_object_get(args, "value"), &err);
        if (r < 0)
                return mcp_result_service_error("python_set_variable", r, &err);
        return mcp_result_structured(json_pack("{s:s, s:b}", "name", name, "set", 1),
                                     strdup_text("Set %s in the sandbox's Python session.", name));
}

json_t *mcp_tool_python_get(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *doc = NULL;
        int r = cage_service_python_get(svc_of(c), tenant_of(c), arg_str(args, "sandbox"),
                                        arg_str(args, "name"), &doc, &err);
        if (r < 0)
                return mcp_result_service_error("python_get_variable", r, &err);
        const char *repr = json_string_value(json_object_get(doc, "repr"));
        return mcp_result_structured(doc,
                                     strdup_text("%s (%s) = %s", arg_str(args, "name"),
                                                 json_string_value(json_object_get(doc, "type")),
                                                 repr ? repr : "?"));
}

json_t *mcp_tool_python_list(struct mcp_call *c, const json_t *args)
{
        struct cage_error err = {0};
        json_t *doc = NULL;
        int r = cage_service_python_list(svc_of(c), tenant_of(c), arg_str(args, "sandbox"), &doc,
                                         &err);
        if (r < 0)
                return mcp_result_service_error("python_list_variables", r, &err);
        char text[TEXT_MAX + 1] = "";
        size_t w = 0, i;
        const json_t *v, *vars = json_object_get(doc, "variables");
        text_add(text, &w, "%zu variable%s%s\n", json_array_size(vars),
                 json_array_size(vars) == 1 ? "" : "s", json_array_size(vars) ? ":" : "");
        json_array_foreach(vars, i, v)
                text_add(text, &w, "- %s: %s\n", json_string_value(json_object_get(v, "name")),
                         json_string_value(json_object_get(v, "type")));
        return mcp_result_structured(doc, strdup(text));
}
