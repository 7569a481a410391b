/* The small helpers every file of the MCP server uses: protocol errors
 * (struct mcp_error), the names of log levels, and the cursors and pages
 * of paginated lists. Pure functions; they call nothing else of MCP. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "util/cleanup.h"

json_t *mcp_fail(struct mcp_error *e, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        e->code = code;
        return NULL;
}

static const char *const level_names[] = {
        [MCP_LOG_DEBUG] = "debug",   [MCP_LOG_INFO] = "info",
        [MCP_LOG_NOTICE] = "notice", [MCP_LOG_WARNING] = "warning",
        [MCP_LOG_ERROR] = "error",   [MCP_LOG_CRITICAL] = "critical",
        [MCP_LOG_ALERT] = "alert",   [MCP_LOG_EMERGENCY] = "emergency",
};

const char *mcp_log_level_to_string(enum mcp_log_level l)
{
        return (size_t)l < ELEMENTSOF(level_names) ? level_names[l] : "info";
}

int mcp_log_level_from_string(const char *s)
{
        for (size_t i = 0; s && i < ELEMENTSOF(level_names); i++)
                if (strcmp(s, level_names[i]) == 0)
                        return (int)i;
        return -1;
}

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

json_t *mcp_page(const json_t *all, const json_t *params, const char *key, const char *method,
                 struct mcp_error *e)
{
        long offset = mcp_cursor_parse(params);
        if (offset < 0 || (size_t)offset > json_array_size(all))
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "%s: invalid cursor; start again without one", method);
        json_t *items = json_array();
        for (size_t i = (size_t)offset;
             items && i < json_array_size(all) && i < (size_t)offset + MCP_PAGE_SIZE; i++)
                json_array_append(items, json_array_get(all, i));
        json_t *result = json_pack("{s:o}", key, items);
        size_t next = (size_t)offset + MCP_PAGE_SIZE;
        if (result && next < json_array_size(all))
                json_object_set_new(result, "nextCursor", mcp_cursor_next(next));
        return result;
}
