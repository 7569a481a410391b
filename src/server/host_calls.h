/* Host-function calls of Python runs answered by HTTP clients (docs/API.md,
 * "Host functions").
 *
 * A run streamed with host_functions turns each call of llm_query,
 * tools.x, ... into an SSE `host_call` event with an opaque id; the client
 * answers with POST /v1/host_calls/{id}. The run's worker thread waits for
 * that answer here. The registry is process-wide (ids are 128 random bits,
 * so two servers in one process could share it): an entry lives exactly as
 * long as its waiter, so an answer for a call whose wait ended (answered,
 * timed out, cancelled) finds nothing and is a 404, like an unknown id or
 * one of another tenant. At most HOST_CALLS_PER_TENANT_MAX calls of one
 * tenant wait at a time. */
#ifndef CODECAGE_SERVER_HOST_CALLS_H
#define CODECAGE_SERVER_HOST_CALLS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"

#define HOST_CALL_ID_LEN          32 /* lowercase hex */
#define HOST_CALLS_PER_TENANT_MAX 64
#define HOST_CALL_WAIT_MS         (10 * 60 * 1000)
#define HOST_CALL_VALUE_MAX       (8 * 1024 * 1024) /* JSON bytes of one answer */
#define HOST_CALL_ERROR_MAX       (64 * 1024)       /* bytes of an error answer */

struct host_call;

/* Registers a pending call of tenant. -EAGAIN when the tenant already has
 * HOST_CALLS_PER_TENANT_MAX calls waiting. */
int host_call_open(const char *tenant, struct host_call **ret);
const char *host_call_id(const struct host_call *c);
/* Waits for the answer: 0 with *value (new reference) or *error
 * (malloc'ed) set; -ETIMEDOUT after timeout_ms; -ECANCELED once one of
 * fds[0..n_fds) is readable (the client left, the server is stopping). */
int host_call_wait(struct host_call *c, uint64_t timeout_ms, const int *fds, size_t n_fds,
                   json_t **value, char **error);
/* Unregisters and frees; later answers find nothing. Accepts NULL. */
struct host_call *host_call_close(struct host_call *c);

/* The answer of POST /v1/host_calls/{id}: exactly one of value (borrowed)
 * and error. -ENOENT for an unknown or ended call or another tenant's,
 * -EBUSY for a call answered already. */
int host_call_answer(const char *tenant, const char *id, json_t *value, const char *error,
                     struct cage_error *err);

/* A cage_service_host fn for runs without callbacks: every call fails with
 * a message that says how to enable host functions. */
int host_call_disabled(void *ctx, const char *name, json_t *args, json_t *kwargs, json_t **value,
                       char **error);

#endif
