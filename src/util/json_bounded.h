/* Reading untrusted JSON with a memory budget: jansson may take many times
 * a document's size to hold it (a 3-byte "{}," is a whole object with its
 * hash table), so a reader of JSON that someone else chose bounds what a
 * parse may allocate, not only the text's length. */
#ifndef CODECAGE_UTIL_JSON_BOUNDED_H
#define CODECAGE_UTIL_JSON_BOUNDED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* json_loadb() that fails once the parse holds more than mem_max bytes of
 * heap at a time (counted as malloc's usable sizes plus a chunk header
 * each). On failure *over_budget (may be NULL) says whether the budget was
 * the reason; error (may be NULL) is filled as json_loadb() fills it. */
json_t *json_loadb_bounded(const char *buf, size_t len, size_t flags, size_t mem_max,
                           json_error_t *error, bool *over_budget);

/* A client's request body (HTTP, MCP, E2B): JSON_REQUEST_BASE of heap, and
 * 4 bytes more per byte of text, so that a body of strings (~2x its text)
 * of any size the server accepts fits, and the worst shapes (~84x for a
 * list of empty objects) cost a bounded amount. */
#define JSON_REQUEST_BASE ((size_t)256 << 20)
json_t *json_load_request(const char *buf, size_t len, size_t flags, json_error_t *error,
                          bool *over_budget);

#endif
