/* What tool results are made of: text and image blocks, resource links
 * to artifacts, isError results whose text tells a model what to do next,
 * base64, UTF-8 checks and the codecage:// URIs of files.
 *
 * URIs: codecage://runs/<run_id>/<path> (an artifact of a one-shot run,
 * path relative to its /workspace, e.g. output/plot.png) and
 * codecage://sandboxes/<name>/files/<path> (a workspace file of a named
 * sandbox). Each path byte outside [A-Za-z0-9-._~/] is percent-encoded;
 * mcp_resources.c decodes them. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/output.h"
#include "server/mcp.h"
#include "services/service.h"
#include "util/cleanup.h"

/* ---- blocks and results ------------------------------------------------------- */

/* Text that is not UTF-8 (an error quoting a client's bytes, a message cut
 * inside a character) is repaired rather than lost. */
json_t *mcp_text_block(const char *text)
{
        _cleanup_free_ char *clean = NULL;
        if (!mcp_utf8_valid(text, strlen(text)) &&
            cage_sanitize_text(text, strlen(text), &clean, NULL) < 0)
                return NULL;
        return json_pack("{s:s, s:s}", "type", "text", "text", clean ? clean : text);
}

json_t *mcp_image_block(const void *data, size_t len, const char *mime)
{
        _cleanup_free_ char *b64 = mcp_base64(data, len);
        return b64 ? json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", mime)
                   : NULL;
}

json_t *mcp_result_error(const char *fmt, ...)
{
        char text[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        return json_pack("{s:[o], s:b}", "content", mcp_text_block(text), "isError", 1);
}

json_t *mcp_result_structured(json_t *structured, char *text)
{
        json_t *block = text ? mcp_text_block(text) : NULL;
        free(text);
        if (!structured || !block) {
                json_decref(structured);
                json_decref(block);
                return NULL;
        }
        return json_pack("{s:[o], s:o}", "content", block, "structuredContent", structured);
}

static const struct {
        int r;
        const char *kind;
        const char *hint;
} error_hints[] = {
        {-EINVAL, "invalid argument", "Fix the argument the message names and call again."},
        {-EISDIR, "invalid argument", "The path is a folder: list it with file_list."},
        {-ENOTDIR, "invalid argument", "A part of the path is not a folder."},
        {-ENAMETOOLONG, "invalid argument", "Use a shorter path or name."},
        {-ENOENT, "not found",
         "Check the names: sandbox_list lists your sandboxes, file_list a folder's files, "
         "python_list_variables a session's variables; sandbox_create makes a new sandbox."},
        {-EEXIST, "already exists", "Choose another name, or use the existing sandbox."},
        {-EBUSY, "busy", "The sandbox is not in a state for this; try again in a moment."},
        {-ENOTEMPTY, "not empty", "The folder is not empty."},
        {-EPERM, "refused by this server's policy",
         "Ask for less (the limits are in the tool descriptions) or leave the option out."},
        {-ELOOP, "refused",
         "The path goes through a symbolic link; the file tools never follow "
         "links."},
        {-EXDEV, "refused", "The path leads out of the workspace."},
        {-E2BIG, "too large",
         "Ask for less: a smaller file, or read a part of it with run_shell (head, tail, grep)."},
        {-ENOSPC, "workspace full",
         "Delete files in the sandbox or create one with a larger disk_mib."},
        {-EUSERS, "over a quota",
         "Wait until one of your running calls ends (or stop a sandbox you do not need), then "
         "call again."},
};

json_t *mcp_result_service_error(const char *tool, int r, const struct cage_error *err)
{
        const char *kind = "internal error";
        const char *hint = "This is a failure of codecage itself, not of your code; try again.";
        for (size_t i = 0; i < ELEMENTSOF(error_hints); i++)
                if (error_hints[i].r == r) {
                        kind = error_hints[i].kind;
                        hint = error_hints[i].hint;
                }
        return mcp_result_error("%s failed (%s): %s. %s", tool, kind,
                                err->message[0] ? err->message : "no details", hint);
}

/* ---- encodings ---------------------------------------------------------------- */

char *mcp_base64(const void *data, size_t len)
{
        static const char abc[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const unsigned char *in = data;
        char *out = malloc((len + 2) / 3 * 4 + 1);
        if (!out)
                return NULL;
        size_t w = 0, i = 0;
        for (; i + 2 < len; i += 3) {
                uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
                out[w++] = abc[v >> 18 & 63];
                out[w++] = abc[v >> 12 & 63];
                out[w++] = abc[v >> 6 & 63];
                out[w++] = abc[v & 63];
        }
        if (i < len) {
                uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
                out[w++] = abc[v >> 18 & 63];
                out[w++] = abc[v >> 12 & 63];
                out[w++] = i + 1 < len ? abc[v >> 6 & 63] : '=';
                out[w++] = '=';
        }
        out[w] = '\0';
        return out;
}

/* Length of the UTF-8 sequence at p (strict: no overlongs, surrogates or
 * code points past U+10FFFF), 0 when invalid. */
static size_t utf8_seq(const unsigned char *p, size_t left)
{
        if (p[0] < 0x80)
                return p[0] ? 1 : 0; /* a NUL makes it binary */
        size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
        if (n == 0 || p[0] > 0xf4 || n > left)
                return 0;
        for (size_t i = 1; i < n; i++)
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
        if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
            (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
                return 0;
        return n;
}

bool mcp_utf8_valid(const void *data, size_t len)
{
        const unsigned char *p = data;
        for (size_t i = 0; i < len;) {
                size_t n = utf8_seq(p + i, len - i);
                if (!n)
                        return false;
                i += n;
        }
        return true;
}

char *mcp_shown_name(const char *name, char *buf, size_t size)
{
        size_t w = 0;
        for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
                char esc[5] = {(char)*p, 0};
                if (*p == '\n' || *p == '\t' || *p == '\\')
                        snprintf(esc, sizeof(esc), "\\%c",
                                 *p == '\n'   ? 'n'
                                 : *p == '\t' ? 't'
                                              : '\\');
                else if (*p < 0x20 || *p == 0x7f)
                        snprintf(esc, sizeof(esc), "\\x%02x", *p);
                size_t n = strlen(esc);
                if (w + n >= size)
                        break;
                memcpy(buf + w, esc, n);
                w += n;
        }
        if (size)
                buf[w] = '\0';
        return buf;
}

bool mcp_image_mime(const char *mime)
{
        static const char *const kinds[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};
        for (size_t i = 0; mime && i < ELEMENTSOF(kinds); i++)
                if (strcmp(mime, kinds[i]) == 0)
                        return true;
        return false;
}

static char *uri_with_path(const char *prefix, const char *path)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t plen = strlen(prefix), len = strlen(path);
        char *out = malloc(plen + 3 * len + 1);
        if (!out)
                return NULL;
        memcpy(out, prefix, plen);
        size_t w = plen;
        for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
                        out[w++] = (char)*p;
                } else {
                        out[w++] = '%';
                        out[w++] = hex[*p >> 4];
                        out[w++] = hex[*p & 15];
                }
        }
        out[w] = '\0';
        return out;
}

char *mcp_uri_run(const char *run_id, const char *path)
{
        _cleanup_free_ char *prefix = NULL;
        if (asprintf(&prefix, "codecage://runs/%s/", run_id) < 0)
                return NULL;
        return uri_with_path(prefix, path);
}

char *mcp_uri_sandbox_file(const char *name, const char *path)
{
        _cleanup_free_ char *prefix = NULL;
        if (asprintf(&prefix, "codecage://sandboxes/%s/files/", name) < 0)
                return NULL;
        return uri_with_path(prefix, path);
}

/* ---- artifacts ------------------------------------------------------------------ */

struct image_budget {
        size_t count, bytes;
};

/* An image block for artifact path, or NULL when it is not returned
 * inline (too large, over the budget, unreadable). */
static json_t *artifact_image(struct mcp_call *c, const char *sandbox, const char *run_id,
                              const char *path, const char *mime, json_int_t size,
                              struct image_budget *budget)
{
        if (!mcp_image_mime(mime) || size < 0 || size > MCP_IMAGE_MAX ||
            budget->count >= MCP_IMAGES_MAX || budget->bytes + (size_t)size > MCP_IMAGES_TOTAL_MAX)
                return NULL;
        struct mcp_session *s = c->session;
        struct cage_error err = {0};
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        int r = sandbox ? cage_service_file_read(s->srv->svc, s->tenant, sandbox, path,
                                                 MCP_IMAGE_MAX, &data, &len, &err)
                        : cage_service_run_file_read(s->srv->svc, s->tenant, run_id, path,
                                                     MCP_IMAGE_MAX, &data, &len, &err);
        if (r < 0)
                return NULL;
        budget->count++;
        budget->bytes += len;
        return mcp_image_block(data, len, mime);
}

static json_t *artifact_link(const char *sandbox, const char *run_id, const json_t *a)
{
        const char *path = json_string_value(json_object_get(a, "path"));
        const char *name = json_string_value(json_object_get(a, "name"));
        const char *mime = json_string_value(json_object_get(a, "mime"));
        _cleanup_free_ char *uri =
                sandbox ? mcp_uri_sandbox_file(sandbox, path) : mcp_uri_run(run_id, path);
        if (!uri)
                return NULL;
        json_t *link =
                json_pack("{s:s, s:s, s:s, s:s}", "type", "resource_link", "uri", uri, "name",
                          name ? name : path, "mimeType", mime ? mime : "application/octet-stream");
        const json_t *size = json_object_get(a, "size");
        if (link && json_is_integer(size))
                json_object_set(link, "size", (json_t *)size);
        return link;
}

void mcp_add_artifacts(struct mcp_call *c, const char *sandbox, const json_t *result,
                       json_t *content)
{
        const char *run_id = json_string_value(json_object_get(result, "run_id"));
        const json_t *artifacts = json_object_get(result, "artifacts");
        struct image_budget budget = {0};
        size_t i;
        const json_t *a;
        if (!sandbox && !run_id)
                return;
        json_array_foreach(artifacts, i, a)
        {
                const char *path = json_string_value(json_object_get(a, "path"));
                if (!path)
                        continue;
                json_t *block = artifact_image(
                        c, sandbox, run_id, path, json_string_value(json_object_get(a, "mime")),
                        json_integer_value(json_object_get(a, "size")), &budget);
                if (!block)
                        block = artifact_link(sandbox, run_id, a);
                if (block)
                        json_array_append_new(content, block);
        }
}

/* ---- older clients ---------------------------------------------------------------- */

void mcp_result_downgrade(json_t *result, const char *version)
{
        if (strcmp(version, "2025-03-26") != 0)
                return;
        json_object_del(result, "structuredContent");
        size_t i;
        json_t *block;
        json_array_foreach(json_object_get(result, "content"), i, block)
        {
                const char *type = json_string_value(json_object_get(block, "type"));
                if (!type || strcmp(type, "resource_link") != 0)
                        continue;
                _cleanup_free_ char *text = NULL;
                if (asprintf(&text, "Resource %s (%s), readable with resources/read",
                             json_string_value(json_object_get(block, "uri")),
                             json_string_value(json_object_get(block, "mimeType"))) < 0)
                        continue;
                json_array_set_new(json_object_get(result, "content"), i, mcp_text_block(text));
        }
}
