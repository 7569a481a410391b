/* MCP over Streamable HTTP at /mcp of `codecage serve` (docs/MCP.md):
 * the hooks http.c calls. http.c keeps what every route shares (the
 * listeners, bearer-token authentication to a tenant, the body limit,
 * logging); mcp_http.c does the rest of the endpoint. */
#ifndef CODECAGE_SERVER_MCP_HTTP_H
#define CODECAGE_SERVER_MCP_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "codecage/codecage.h"

struct cage_config;
struct cage_service;
struct MHD_Connection;
struct mcp_http;
struct mcp_http_request;

/* The endpoint's state (sessions); shutdown_fd becomes readable when the
 * server stops. Uses the options of mcp_serve_options_set(). */
int mcp_http_new(const struct cage_config *cfg, struct cage_service *svc, int shutdown_fd,
                 struct mcp_http **ret, struct cage_error *err);
/* The server stops (its shutdown pipe is written): waits at most
 * timeout_ms for the subscriptions/listen streams to send their last
 * event and end, before the connections are cut. Accepts NULL. */
void mcp_http_quiesce(struct mcp_http *m, int timeout_ms);
/* subscriptions/listen streams open: requests that are no work under way
 * (a drain does not wait for them; they end when the server stops). */
unsigned mcp_http_listening(struct mcp_http *m);
/* After every connection is gone: closes every session. Accepts NULL. */
struct mcp_http *mcp_http_free(struct mcp_http *m);

/* Whether the request target (path, maybe a query) is /mcp. */
bool mcp_http_is_endpoint(const char *target);
/* The check made before authentication: the method (405, *allow set).
 * 0 when fine, else the status with *message set. (The Host / Origin
 * policy is http.c's, for every route.) */
unsigned mcp_http_precheck(const char *method, const char **message, const char **allow);
/* Handles a complete request of tenant (body: body_len bytes) and queues
 * the response; returns MHD's result. *status is the HTTP status sent;
 * *slot keeps what must outlive the handler (a stream, its call) until
 * mcp_http_request_done(). */
int mcp_http_handle(struct mcp_http *m, struct MHD_Connection *conn, const char *method,
                    const char *tenant, const char *body, size_t body_len, unsigned *status,
                    struct mcp_http_request **slot);
/* From the request-completed callback: cancels a call still running,
 * waits for it, frees. Accepts NULL. */
void mcp_http_request_done(struct mcp_http_request *r);

#endif
