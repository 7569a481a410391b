/* JSON-RPC 2.0 messages as MCP uses them: parsing one message (no
 * batches: MCP 2025-06-18 and later have none), telling requests,
 * notifications and responses apart, and building answers.
 *
 * Everything here works on jansson documents; nothing does I/O. Ids are
 * what MCP allows: a string of at most JSONRPC_ID_MAX bytes or an integer
 * (never null in a request). */
#ifndef CODECAGE_SERVER_JSONRPC_H
#define CODECAGE_SERVER_JSONRPC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JSONRPC_PARSE_ERROR        (-32700)
#define JSONRPC_INVALID_REQUEST    (-32600)
#define JSONRPC_METHOD_NOT_FOUND   (-32601)
#define JSONRPC_INVALID_PARAMS     (-32602)
#define JSONRPC_INTERNAL_ERROR     (-32603)
#define JSONRPC_RESOURCE_NOT_FOUND (-32002) /* MCP: resources/read of an unknown URI */

#define JSONRPC_ID_MAX     256 /* bytes of a string id */
#define JSONRPC_METHOD_MAX 256
#define JSONRPC_KEY_MAX    (JSONRPC_ID_MAX * 6 + 8) /* an id as canonical JSON text */

enum jsonrpc_kind {
        JSONRPC_INVALID,
        JSONRPC_REQUEST,
        JSONRPC_NOTIFICATION,
        JSONRPC_RESPONSE,
};

/* Parses one message of len bytes. On failure returns NULL and *ret_error
 * is the error response to send (parse error, or invalid request for a
 * batch or a non-object). */
json_t *jsonrpc_parse(const char *text, size_t len, json_t **ret_error);

/* What msg is; for JSONRPC_INVALID, *why says what is wrong. */
enum jsonrpc_kind jsonrpc_classify(const json_t *msg, const char **why);

/* The id of msg if it is a usable one (string or integer), else NULL. */
const json_t *jsonrpc_id(const json_t *msg);
/* The id as canonical text ("5", "\"5\""): equal keys, equal ids. */
int jsonrpc_id_key(const json_t *id, char key[JSONRPC_KEY_MAX]);

/* Builders; each returns a new document or NULL on ENOMEM. result and
 * params are stolen (NULL: an empty object). id NULL: JSON null. */
json_t *jsonrpc_result(const json_t *id, json_t *result);
json_t *jsonrpc_error(const json_t *id, int code, const char *message);
json_t *jsonrpc_errorf(const json_t *id, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
json_t *jsonrpc_request(json_int_t id, const char *method, json_t *params);
json_t *jsonrpc_notification(const char *method, json_t *params);

#endif
