/* The check tools/call makes of a tool's arguments before any provider
 * sees them: the top level of the tool's inputSchema (required keys,
 * JSON types, enums, unknown keys when additionalProperties is false).
 * A failure is an isError CallToolResult naming the argument and what it
 * must be, so a model can fix its call. Pure: no I/O, no state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "util/cleanup.h"

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

json_t *mcp_tool_args_check(const char *tool, const json_t *schema, const json_t *args)
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
