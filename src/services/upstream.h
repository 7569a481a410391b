/* Code mode: MCP servers named in the server config (`upstream_servers`)
 * whose tools Python code in a session calls as `tools.<name>(**kwargs)`
 * (and `tools.list()`), with codecage acting as their MCP client over
 * stdio. The tools stay the security boundary: the sandbox never talks to
 * an upstream server itself; every call passes through here, counts
 * against the run's host-call budget, and only tools the config's `allow`
 * list names (all, when it has none) can be reached.
 *
 * Each upstream process is started on first use, initialised once, and
 * restarted if it dies; calls to one upstream are serialised. */
#ifndef CODECAGE_SERVICES_UPSTREAM_H
#define CODECAGE_SERVICES_UPSTREAM_H

#include <jansson.h>
#include <stdbool.h>

#include "codecage/codecage.h"

#define UPSTREAM_LINE_MAX   (16 * 1024 * 1024) /* one JSON-RPC message */
#define UPSTREAM_TIMEOUT_MS 60000
#define UPSTREAM_TOOLS_MAX  1024

struct cage_upstreams;

/* servers: the config's validated upstream_servers (may be NULL). Starts
 * nothing. */
int cage_upstreams_open(const json_t *servers, struct cage_upstreams **ret, struct cage_error *err);
/* Ends every upstream process. Accepts NULL. */
struct cage_upstreams *cage_upstreams_close(struct cage_upstreams *u);
bool cage_upstreams_any(const struct cage_upstreams *u);

/* Serves a session's host call "tools.<name>" (kwargs are the tool's
 * arguments) or "tools.list" (a list of {name, description, input_schema}).
 * Fills *value or *error (malloc'ed message a model can act on). */
int cage_upstreams_call(struct cage_upstreams *u, const char *fn, json_t *kwargs, json_t **value,
                        char **error);

#endif
