/* JSON-RPC 2.0 parsing, classification and builders; see jsonrpc.h.
 *
 * Parsing rejects duplicate keys (a message means one thing) and relies on
 * jansson's own nesting limit; the caller bounds the size. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/output.h"
#include "server/jsonrpc.h"
#include "util/json_bounded.h"
#include "util/cleanup.h"

json_t *jsonrpc_parse(const char *text, size_t len, json_t **ret_error)
{
        json_error_t jerr;
        bool too_large = false;
        json_t *msg = json_load_request(text, len, JSON_REJECT_DUPLICATES, &jerr, &too_large);
        *ret_error = NULL;
        if (too_large) {
                *ret_error = jsonrpc_errorf(NULL, JSONRPC_PARSE_ERROR,
                                            "Parse error: the message would take more than %zu "
                                            "MiB of the server's memory to hold (each array, "
                                            "object or number costs it tens of bytes)",
                                            (JSON_REQUEST_BASE + 4 * len) >> 20);
                return NULL;
        }
        if (!msg) {
                *ret_error = jsonrpc_errorf(NULL, JSONRPC_PARSE_ERROR,
                                            "Parse error: invalid JSON at line %d, column %d: %s",
                                            jerr.line, jerr.column, jerr.text);
                return NULL;
        }
        if (json_is_array(msg)) {
                json_decref(msg);
                *ret_error = jsonrpc_error(NULL, JSONRPC_INVALID_REQUEST,
                                           "Invalid Request: batches are not supported; send one "
                                           "message at a time");
                return NULL;
        }
        if (!json_is_object(msg)) {
                json_decref(msg);
                *ret_error = jsonrpc_error(NULL, JSONRPC_INVALID_REQUEST,
                                           "Invalid Request: a message must be a JSON object");
                return NULL;
        }
        return msg;
}

const json_t *jsonrpc_id(const json_t *msg)
{
        const json_t *id = json_object_get(msg, "id");
        if (json_is_integer(id))
                return id;
        if (json_is_string(id) && json_string_length(id) <= JSONRPC_ID_MAX &&
            strlen(json_string_value(id)) == json_string_length(id))
                return id;
        return NULL;
}

int jsonrpc_id_key(const json_t *id, char key[JSONRPC_KEY_MAX])
{
        char *text = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!text)
                return -1;
        size_t n = strlen(text);
        int r = n < JSONRPC_KEY_MAX ? 0 : -1;
        if (r == 0)
                memcpy(key, text, n + 1);
        free(text);
        return r;
}

static enum jsonrpc_kind invalid(const char **why, const char *text)
{
        *why = text;
        return JSONRPC_INVALID;
}

enum jsonrpc_kind jsonrpc_classify(const json_t *msg, const char **why)
{
        const json_t *version = json_object_get(msg, "jsonrpc");
        const json_t *method = json_object_get(msg, "method");
        const json_t *id = json_object_get(msg, "id");
        *why = NULL;
        if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0)
                return invalid(why, "\"jsonrpc\" must be \"2.0\"");
        if (method) {
                if (!json_is_string(method) || json_string_length(method) == 0 ||
                    json_string_length(method) > JSONRPC_METHOD_MAX)
                        return invalid(why, "\"method\" must be a non-empty string");
                const json_t *params = json_object_get(msg, "params");
                if (params && !json_is_object(params))
                        return invalid(why, "\"params\" must be an object");
                if (!id)
                        return JSONRPC_NOTIFICATION;
                if (!jsonrpc_id(msg))
                        return invalid(why, "\"id\" must be an integer or a string of at most "
                                            "256 bytes");
                return JSONRPC_REQUEST;
        }
        bool has_result = json_object_get(msg, "result") != NULL;
        bool has_error = json_object_get(msg, "error") != NULL;
        if (id && has_result != has_error)
                return JSONRPC_RESPONSE;
        return invalid(why, "neither a request (method) nor a response (id with result or "
                            "error)");
}

json_t *jsonrpc_result(const json_t *id, json_t *result)
{
        if (!result)
                result = json_object();
        if (!result)
                return NULL;
        return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
                         result);
}

/* A message may quote what the client sent (a decoded URI, cut at a size
 * limit): it is made valid UTF-8 with control characters neutralised, so
 * the error can always be encoded and sent. */
json_t *jsonrpc_error(const json_t *id, int code, const char *message)
{
        _cleanup_free_ char *clean = NULL;
        size_t len;
        if (cage_sanitize_text(message, strlen(message), &clean, &len) < 0)
                return NULL;
        return json_pack("{s:s, s:O, s:{s:i, s:s%}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                         "error", "code", code, "message", clean, len);
}

json_t *jsonrpc_errorf(const json_t *id, int code, const char *fmt, ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return jsonrpc_error(id, code, message);
}

json_t *jsonrpc_request(json_int_t id, const char *method, json_t *params)
{
        if (!params)
                params = json_object();
        if (!params)
                return NULL;
        return json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method", method,
                         "params", params);
}

json_t *jsonrpc_notification(const char *method, json_t *params)
{
        if (!params)
                params = json_object();
        if (!params)
                return NULL;
        return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
}
