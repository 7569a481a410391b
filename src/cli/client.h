/* The HTTP client of `codecage sandbox`: talks to a running `codecage serve`
 * over its Unix socket or a base URL, on libcurl.
 *
 * One struct cage_client holds one curl handle (connections are reused
 * between requests), the server's address and the bearer token. The token
 * goes only into the Authorization header: it is never formatted into a
 * message and is wiped from memory when the client is freed.
 *
 * Errors are -errno with a message for the operator in err:
 *  - an API error `{"error": {"code", "message"}}` becomes
 *    "<message> (HTTP <status>)", with the code mapped back to the errno
 *    the service used (404 -> -ENOENT, 409 -> -EEXIST, 413 -> -E2BIG, ...);
 *  - an unreachable server becomes "cannot reach the codecage server at
 *    <where>: is `codecage serve` running?" (-ECONNREFUSED).
 *
 * Everything the server sends is bounded: JSON bodies by
 * CAGE_CLIENT_JSON_MAX, downloads by the caller's max, SSE lines and events
 * by CAGE_CLIENT_SSE_MAX. Redirects are not followed; only http and https
 * are spoken. */
#ifndef CODECAGE_CLI_CLIENT_H
#define CODECAGE_CLI_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"

#define CAGE_CLIENT_JSON_MAX     (64ULL << 20) /* a JSON response body */
#define CAGE_CLIENT_SSE_MAX      (64ULL << 20) /* one SSE line, one event's data */
#define CAGE_CLIENT_DOWNLOAD_MAX (1ULL << 30)  /* a file downloaded by cp */

/* Where the server is. Exactly one of url and socket is set; the strings
 * are borrowed for the cage_client_new() call only. */
struct cage_client_target {
        const char *url;    /* "http://HOST:PORT" (or https) */
        const char *socket; /* path of the server's Unix socket */
        const char *token;  /* bearer token; NULL: none */
};

/* Scope-bound json_decref (see util/cleanup.h). */
static inline void cage_client_json_decrefp(json_t **p)
{
        json_decref(*p);
}
#ifndef _cleanup_json_
#define _cleanup_json_ __attribute__((cleanup(cage_client_json_decrefp)))
#endif

struct cage_client;

int cage_client_new(const struct cage_client_target *target, struct cage_client **ret,
                    struct cage_error *err);
/* Wipes the token and frees. Accepts NULL; returns NULL. */
struct cage_client *cage_client_free(struct cage_client *c);

/* Percent-encodes s for a URL path or query; '/' is kept when keep_slash.
 * Returns a malloc'ed string, or NULL when out of memory. */
char *cage_client_escape(const char *s, bool keep_slash);

/* One JSON request. path starts with "/v1/" and is already encoded; body
 * (NULL: none) is sent as application/json. *ret is the parsed response
 * (NULL when the server sent no body) for the caller to json_decref(). */
int cage_client_json(struct cage_client *c, const char *method, const char *path,
                     const json_t *body, json_t **ret, struct cage_error *err);

/* A Server-Sent Events request: POSTs body with Accept: text/event-stream
 * and calls on_event for every event as it arrives (event is "message"
 * when the server named none; data is the event's data lines joined by
 * '\n', NUL-terminated). on_event returns 0, or -errno with err filled to
 * stop. When the server answers with plain JSON instead, *ret_json gets
 * it; otherwise *ret_json is NULL. */
typedef int (*cage_client_event_fn)(void *ctx, const char *event, const char *data, size_t len,
                                    struct cage_error *err);
int cage_client_stream(struct cage_client *c, const char *path, const json_t *body,
                       cage_client_event_fn on_event, void *ctx, json_t **ret_json,
                       struct cage_error *err);

/* Fills err from an API error document {"error": {"code", "message"}}:
 * "<message> (HTTP <status>)" (status 0: no suffix, e.g. an SSE "error"
 * event) and the errno the status stands for. Returns that -errno. */
int cage_client_api_error(const json_t *doc, long status, struct cage_error *err);

/* PUTs `size` bytes read from fd as the raw body (application/octet-stream). */
int cage_client_upload(struct cage_client *c, const char *path, int fd, uint64_t size,
                       struct cage_error *err);
/* GETs path and writes the raw body to fd; -EFBIG past max bytes.
 * *ret_len (if not NULL) gets the number of bytes written. */
int cage_client_download(struct cage_client *c, const char *path, int fd, uint64_t max,
                         uint64_t *ret_len, struct cage_error *err);

#endif
