/* Python sessions: the driver (runtime/python/codecage_session.py) running
 * as a long-lived exec in a sandbox, spoken to over its channel
 * (docs/SESSION-PROTOCOL.md). One call at a time per session (callers
 * serialise); everything the driver says is bounded and checked.
 *
 * A run that does not finish by its deadline is interrupted (SIGINT →
 * KeyboardInterrupt, namespace kept); if the driver does not answer within
 * the grace period the session is dead: the result says state_lost and the
 * caller starts a new one. A driver that dies on its own (os._exit, OOM)
 * is reported the same way, never as a silently empty namespace. */
#ifndef CODECAGE_SERVICES_SESSION_H
#define CODECAGE_SERVICES_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "core/box.h"

#define SESSION_CODE_MAX    (1024 * 1024)
#define SESSION_JSON_MAX    (16 * 1024 * 1024) /* one frame's JSON from the driver */
#define SESSION_TEXT_MAX    (1024ULL * 1024 * 1024)
#define SESSION_GRACE_MS    2000
#define SESSION_RETURN_MAX  65536
#define SESSION_VALUE_MAX   (8 * 1024 * 1024) /* JSON of a `get` value (the driver's VALUE_MAX) */
#define SESSION_REPR_MAX    65536             /* bytes of a `get` repr (its TEXT_MAX) */
#define SESSION_NAME_MAX    1024              /* bytes of a type name (its NAME_MAX characters) */
#define SESSION_HOST_BUDGET 100
#define SESSION_FN_MAX      256 /* bytes of a host function's name */
#define SESSION_START_MS    10000
/* How deep a value sent to the driver may nest arrays and objects: as deep
 * as the driver sends its own (its VALUE_DEPTH_MAX), well within what JSON
 * readers that recurse (the driver's, a client's) read. */
#define SESSION_DEPTH_MAX 512

struct cage_session;

/* Serves one host call of the code (llm_query, tools.x, ...): fills *value
 * (a new reference) or *error (malloc'ed message). Returning < 0 is the
 * same as an error "host call failed". */
typedef int (*cage_session_host_fn)(void *ctx, const char *fn, json_t *args, json_t *kwargs,
                                    json_t **value, char **error);

struct cage_session_run {
        const char *code;
        size_t code_len;
        uint64_t timeout_ms;
        uint64_t grace_ms;          /* 0 = SESSION_GRACE_MS */
        uint64_t output_max_bytes;  /* kept per stream */
        uint64_t output_stop_bytes; /* interrupt past this much output; 0 = none */
        uint32_t host_budget;       /* 0 = SESSION_HOST_BUDGET */
        cage_session_host_fn host;  /* NULL: host calls fail with a clear error */
        void *host_ctx;
        json_t *functions; /* extra host function names (array of strings) or NULL */
        json_t *env;       /* {NAME: value} in os.environ for this run only, or NULL */
        cage_output_fn on_output;
        void *on_output_ctx;
        int cancel_fd;
};

/* Starts the driver in box with the box's environment plus env ("K=V",
 * NULL-terminated, may be NULL) and waits for its `ready`. */
int cage_session_start(struct cage_box *box, char *const *env, struct cage_session **ret,
                       struct cage_error *err);

/* The same for a driver that is running already (a zygote's fork,
 * core/zygote.h): its process and our end of its channel. Takes both. */
int cage_session_adopt(struct cage_box *box, struct cage_box_proc *driver, int chan,
                       struct cage_session **ret, struct cage_error *err);

/* Runs code. *ret is the result contract as JSON (stdout, stderr,
 * truncated, status, error, return_value, duration_ms, cpu_ms,
 * peak_memory_bytes, state_lost, ...); < 0 only when no verdict exists.
 * After state_lost the session is dead: free it. */
int cage_session_run(struct cage_session *s, const struct cage_session_run *run, json_t **ret,
                     struct cage_error *err);

/* One request/answer exchange (set, get, list, reset, load_file, ...):
 * msg is borrowed, blob (may be NULL) goes after it. *ret is the driver's
 * answer; an answer with op "error" becomes -EINVAL with its message. */
int cage_session_request(struct cage_session *s, json_t *msg, const void *blob, size_t blob_len,
                         uint64_t timeout_ms, json_t **ret, struct cage_error *err);

/* An idle session need not hold its fds: its cgroup directory fds are
 * closed and its pipes and channel parked in one socket (see
 * cage_box_proc_park()); cage_session_alive(), which every use of a session
 * calls first, takes them back. Only while no call uses s. */
void cage_session_park(struct cage_session *s);
bool cage_session_alive(struct cage_session *s);
/* The driver's source (runtime/python/codecage_session.py), not
 * NUL-terminated. */
const char *cage_session_driver_source(size_t *len);
/* Its bytecode, compiled at build time: a .pyc header and marshal data. */
const void *cage_session_driver_bytecode(size_t *len);
struct cage_session *cage_session_free(struct cage_session *s);

#endif
