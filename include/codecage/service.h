/* The sandbox service: named sandboxes per tenant, execs inside them,
 * one-shot runs, workspace files and artifacts, with the server's policy
 * (config limits, env allowlist, secrets, allowed mounts), the audit log and
 * the SQLite store. It is what `codecage serve` (HTTP) and `codecage mcp`
 * put on the wire.
 *
 * JSON in, JSON out: request and response documents are exactly the bodies
 * of the HTTP API (docs/API.md), so every front end shares one validation
 * and one set of error messages. Requests are borrowed; *ret documents are
 * new references the caller releases with json_decref().
 *
 * Errors are -errno with a message in err that a client can act on:
 *   -EINVAL  bad request (the message names the field)   -> HTTP 400
 *            (also -EISDIR, -ENOTDIR, -ENAMETOOLONG)
 *   -ENOENT  unknown sandbox, run or file                 -> 404
 *   -EEXIST  the tenant already has that name             -> 409
 *   -EBUSY   the sandbox is not in a state for this       -> 409
 *            (also -ENOTEMPTY: a non-empty directory, not recursive)
 *   -EPERM   refused by policy (limits, mounts, secrets)  -> 403
 *            (also -ELOOP, -EXDEV: a link the file API will not follow)
 *   -E2BIG   too large (body, file, list)                 -> 413
 *   -ENOSPC  the workspace is full (disk_mib)             -> 507
 *   -EUSERS  over a tenant quota, or the launch queue     -> 429
 *   anything else: codecage's own failure                 -> 500
 * cage_service_http_status() does that mapping.
 *
 * Every function is safe from any number of threads. `tenant` is the name
 * of an authenticated tenant ("default" when the server has no tokens).
 *
 * This is the C library under `codecage serve` and `codecage mcp`: link
 * libcodecage, load a config (docs/CONFIG.md), open the service before
 * starting threads of your own (it gives the process a private mount
 * namespace when it runs as root), and call it. */
#ifndef CODECAGE_SERVICE_H
#define CODECAGE_SERVICE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "codecage/codecage.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cage_config;
struct cage_service;
struct cage_redactor;

/* Server configuration (docs/CONFIG.md): every default, a file, or a JSON
 * text; checked as a whole, with a message naming the first bad key. */
int cage_config_defaults(struct cage_config **ret, struct cage_error *err);
int cage_config_load(const char *path, struct cage_config **ret, struct cage_error *err);
int cage_config_parse(const char *text, size_t len, struct cage_config **ret,
                      struct cage_error *err);
struct cage_config *cage_config_free(struct cage_config *cfg);

#define CAGE_SERVICE_DEFAULT_TENANT "default"

/* Live output and cancellation for exec and run. on_output gets raw bytes
 * (stream 1 = stdout, 2 = stderr) as the program writes them; returning
 * non-zero cancels. cancel_fd readable -> cancel; -1 when unused. */
struct cage_service_io {
        cage_output_fn on_output;
        void *on_output_ctx;
        int cancel_fd;
        /* What a long preparation is doing ("pulling the image ...");
         * may be NULL. */
        void (*on_status)(void *ctx, const char *status);
        void *on_status_ctx;
        /* exec only: with stdin_stream, the program's stdin is stdin_fd, the
         * read end of a pipe the caller writes to while it runs (and closes
         * for EOF); the request's "stdin" text is then ignored. */
        bool stdin_stream;
        int stdin_fd;
};

/* Opens the data directory, the store and the audit log, removes whatever
 * a previous server left behind (processes, cgroups, mounts) and brings
 * every named sandbox back as "stopped". The config must outlive svc. */
int cage_service_open(const struct cage_config *cfg, struct cage_service **ret,
                      struct cage_error *err);
/* Stops every running sandbox (workspaces kept), closes. Accepts NULL. */
struct cage_service *cage_service_close(struct cage_service *svc);

/* Changes of named sandboxes' workspaces as they happen through the service
 * (file writes, fetches, mkdir and deletes; runs and exec in the sandbox;
 * its removal), for a front end that tells its clients (MCP resource
 * subscriptions). path: the client's path of a file write or delete, as
 * given (relative to /workspace or beginning with "/workspace/"), or NULL
 * when anything in the workspace may have changed (a run, a removal). fn
 * is called on the thread that made the change, possibly with the
 * service's locks held: it must return quickly and call nothing of the
 * service. One watcher at a time; cage_service_watch(svc, NULL, NULL)
 * stops it and returns once no call of the old one runs. */
typedef void (*cage_service_watch_fn)(void *arg, const char *tenant, const char *sandbox,
                                      const char *path);
void cage_service_watch(struct cage_service *svc, cage_service_watch_fn fn, void *arg);

/* Audit records the front ends make: a request refused for want of a valid
 * token (reason "missing_token" or "bad_token") or by the HTTP server's
 * Host / Origin policy ("bad_host", "bad_origin"); remote: the peer, or
 * NULL. The token itself is never recorded. */
void cage_service_audit_auth_deny(struct cage_service *svc, const char *reason, const char *remote,
                                  const char *method, const char *route);

/* Where a request came from, for its audit record; any field may be NULL. */
struct cage_service_peer {
        const char *remote; /* "ADDR:PORT", "[V6]:PORT", "unix:uid=N" */
        const char *method; /* the HTTP method */
        const char *route;  /* the request's path, never its query */
        const char *call;   /* MCP: "tools/call NAME", "resources/read" */
};
/* After a call of `tenant` naming a sandbox (or, with sandbox NULL, a run)
 * failed with -ENOENT: when another tenant holds that sandbox name or run,
 * records auth.deny with reason "forbidden" (the client still gets "not
 * found", as for anything that does not exist) and returns true. */
bool cage_service_audit_foreign(struct cage_service *svc, const char *tenant, const char *sandbox,
                                const char *run_id, const struct cage_service_peer *peer);
/* auth.deny with reason "forbidden" for a request of `tenant` the server
 * refused (an operator route; sandbox: what it named, or NULL). */
void cage_service_audit_forbidden(struct cage_service *svc, const char *tenant, const char *sandbox,
                                  const struct cage_service_peer *peer);

/* Operations (docs/OPERATIONS.md). metrics: the Prometheus text exposition
 * (format 0.0.4) of the whole service, malloc'ed. ready: whether the
 * server can take work (accepting, store answers, cgroups usable, warm pool
 * filled once, data_dir has room); *ret (may be NULL): {status, checks,
 * reasons}. drain: from now on ready says "draining" (SIGTERM). */
int cage_service_metrics(struct cage_service *svc, char **ret, size_t *ret_len);
bool cage_service_ready(struct cage_service *svc, json_t **ret);
void cage_service_drain(struct cage_service *svc);
bool cage_service_draining(struct cage_service *svc);
/* Calls (execs, Python calls, one-shot runs) running now. */
unsigned cage_service_calls_in_flight(struct cage_service *svc);
/* The metadata store answers (the watchdog's check). */
bool cage_service_healthy(struct cage_service *svc);
/* SIGHUP: cfg replaces the config from now on -- tokens, tenants, quotas,
 * limits, defaults, secrets, network limits -- without touching a running
 * sandbox or session. The caller keeps every config it passed (and the
 * first) alive until cage_service_close(), and checks that keys which need
 * a restart (data_dir, listen, pool, images, upstream_servers, audit_log,
 * e2b)
 * did not change. */
int cage_service_reload(struct cage_service *svc, const struct cage_config *cfg,
                        struct cage_error *err);
/* The config and the secrets' redactor in force now (the latest reload's).
 * Borrowed: both stay valid until cage_service_close(), a reload retires
 * rather than frees them; a front end reads them per request, so a reload
 * reaches every listener (tokens revoked, new secrets redacted). */
const struct cage_config *cage_service_config(struct cage_service *svc);
struct cage_redactor *cage_service_redactor(struct cage_service *svc);
/* Reopens the audit log at its path (log rotation). */
int cage_service_reopen_audit(struct cage_service *svc, struct cage_error *err);

/* -errno of a service call -> the HTTP status the API answers with. */
int cage_service_http_status(int r);

/* Sandboxes. Info documents: {name, id, state, image, created, last_used,
 * labels, spec, usage: {cpu_ms, memory_bytes, pids}} (docs/API.md). */
int cage_service_sandbox_create(struct cage_service *svc, const char *tenant, const json_t *spec,
                                json_t **ret, struct cage_error *err);
int cage_service_sandbox_get(struct cage_service *svc, const char *tenant, const char *name,
                             json_t **ret, struct cage_error *err);
/* label_filter: NULL or "key=value". ret: {"sandboxes": [info, ...]}. */
int cage_service_sandbox_list(struct cage_service *svc, const char *tenant,
                              const char *label_filter, json_t **ret, struct cage_error *err);
/* stop: processes gone, workspace kept. start: running again. kill: like
 * stop but SIGKILL at once, no grace. Each returns the new info. */
int cage_service_sandbox_stop(struct cage_service *svc, const char *tenant, const char *name,
                              json_t **ret, struct cage_error *err);
int cage_service_sandbox_start(struct cage_service *svc, const char *tenant, const char *name,
                               json_t **ret, struct cage_error *err);
int cage_service_sandbox_kill(struct cage_service *svc, const char *tenant, const char *name,
                              json_t **ret, struct cage_error *err);
/* Everything gone: processes, workspace, metadata. */
int cage_service_sandbox_remove(struct cage_service *svc, const char *tenant, const char *name,
                                struct cage_error *err);
/* The last `tail` lines (0 = all kept) of past exec output:
 * {"lines": ["...", ...], "truncated": bool}. */
int cage_service_sandbox_logs(struct cage_service *svc, const char *tenant, const char *name,
                              size_t tail, json_t **ret, struct cage_error *err);

/* One exec in a named sandbox. req: {argv: [..]} or {script: "..."} (run
 * by /bin/sh -c), optional env {K: V}, cwd, stdin (text), timeout_s.
 * ret: the result contract plus "restarted": true when the sandbox was
 * stopped and this call started it again. */
int cage_service_exec(struct cage_service *svc, const char *tenant, const char *name,
                      const json_t *req, const struct cage_service_io *io, json_t **ret,
                      struct cage_error *err);

/* A one-shot run in a fresh sandbox: req holds spec fields (memory_mib, env,
 * secrets, network, ...), `files` to put in the workspace first, and one of
 * argv, command (shell) or code (Python). ret: the result contract plus
 * "run_id"; the run's output/ stays readable for the retention period. */
int cage_service_run(struct cage_service *svc, const char *tenant, const json_t *req,
                     const struct cage_service_io *io, json_t **ret, struct cage_error *err);

/* Workspace files of a named sandbox. Paths are relative to /workspace
 * ("data/x.csv"; a leading "/workspace/" is accepted); ".." and other
 * absolute paths are refused; links never lead out. */
int cage_service_file_write(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, const void *data, size_t len, struct cage_error *err);
/* Downloads url (http or https; checked like sandbox traffic against the
 * server's network.allow, docs/NETWORK.md) into the workspace at path.
 * field names the URL in error messages (e.g. "files[0].url"). */
int cage_service_file_fetch(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, const char *url, const char *field,
                            struct cage_error *err);
/* max: at most this many bytes (-E2BIG beyond). *ret_data is malloc'ed. */
int cage_service_file_read(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, size_t max, void **ret_data, size_t *ret_len,
                           struct cage_error *err);
/* ret: {"path": p, "entries": [{name, path, type, size, mtime}, ...]} */
int cage_service_file_list(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, json_t **ret, struct cage_error *err);
/* The same reading at most max entries (a listing's own cap still holds):
 * a caller with a budget keeps no more of a large directory. */
int cage_service_file_list_max(struct cage_service *svc, const char *tenant, const char *name,
                               const char *path, size_t max, json_t **ret, struct cage_error *err);
/* ret: {name, path, type, size, mtime, mime} */
int cage_service_file_stat(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, json_t **ret, struct cage_error *err);
int cage_service_file_mkdir(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, struct cage_error *err);
int cage_service_file_delete(struct cage_service *svc, const char *tenant, const char *name,
                             const char *path, bool recursive, struct cage_error *err);
/* Renames a file or directory (replacing a file at `to`), creating the
 * missing parents of `to`; audited as a delete of from and a write of to. */
int cage_service_file_move(struct cage_service *svc, const char *tenant, const char *name,
                           const char *from, const char *to, struct cage_error *err);

/* Host functions (llm_query, tools.*, ...) that Python code may call, served
 * by the front end (MCP sampling, an HTTP client's callback). fn fills
 * *value (new reference) or *error (malloc'ed); NULL fn: none available. */
struct cage_service_host {
        int (*fn)(void *ctx, const char *name, json_t *args, json_t *kwargs, json_t **value,
                  char **error);
        void *ctx;
        json_t *functions; /* names of extra host functions, or NULL */
};

/* Python. With a sandbox name: its persistent session (started on first
 * use; a stopped sandbox is started again, "restarted": true, with an empty
 * namespace). Without: a one-shot run in a fresh sandbox — from the warm
 * pool when the request asks for the default policy. req: {code,
 * timeout_s?, host_budget?} plus, one-shot only, the spec fields and
 * `files`. ret: the result contract with return_value, return_repr, error,
 * state_lost, artifacts (and run_id for one-shot runs). */
int cage_service_python_run(struct cage_service *svc, const char *tenant, const char *name,
                            const json_t *req, const struct cage_service_io *io,
                            const struct cage_service_host *host, json_t **ret,
                            struct cage_error *err);
/* Variables of a named sandbox's session. set: any JSON value. set_text:
 * a large text (e.g. "context") that never passes through JSON. load_file:
 * a file of the workspace read into a variable inside the sandbox. get:
 * {name, type, value, repr}. list: {"variables": [{name, type, size}]}. */
int cage_service_python_set(struct cage_service *svc, const char *tenant, const char *name,
                            const char *var, const json_t *value, struct cage_error *err);
int cage_service_python_set_text(struct cage_service *svc, const char *tenant, const char *name,
                                 const char *var, const char *text, size_t len,
                                 struct cage_error *err);
int cage_service_python_load_file(struct cage_service *svc, const char *tenant, const char *name,
                                  const char *var, const char *path, struct cage_error *err);
int cage_service_python_get(struct cage_service *svc, const char *tenant, const char *name,
                            const char *var, json_t **ret, struct cage_error *err);
int cage_service_python_list(struct cage_service *svc, const char *tenant, const char *name,
                             json_t **ret, struct cage_error *err);
int cage_service_python_reset(struct cage_service *svc, const char *tenant, const char *name,
                              struct cage_error *err);
/* Contexts: extra Python sessions of a named sandbox, each its own
 * interpreter (its own variables) in the same sandbox; a run names one with
 * "context": ID in req. At most 16 per sandbox (-EPERM beyond). create
 * makes an id (its session starts on first use); restart with id NULL is
 * the main session; list: ["ID", ...]. Stopping the sandbox ends their
 * sessions; the ids stay until removed (or the sandbox is). */
#define CAGE_CONTEXT_ID_LEN 32
int cage_service_python_context_create(struct cage_service *svc, const char *tenant,
                                       const char *name, char ret_id[CAGE_CONTEXT_ID_LEN + 1],
                                       struct cage_error *err);
int cage_service_python_context_remove(struct cage_service *svc, const char *tenant,
                                       const char *name, const char *id, struct cage_error *err);
int cage_service_python_context_restart(struct cage_service *svc, const char *tenant,
                                        const char *name, const char *id, struct cage_error *err);
int cage_service_python_context_list(struct cage_service *svc, const char *tenant, const char *name,
                                     json_t **ret, struct cage_error *err);
/* The warm pool's statistics: {size, ready, hits, misses, cold, ...}. */
json_t *cage_service_pool_stats(struct cage_service *svc);

/* Artifacts of a finished one-shot run (its output/ folder), until the
 * retention period ends, for the tenant that made the run only (for any
 * other the run does not exist: -ENOENT). path is relative to output/.
 * Each read is audited as file.read. */
int cage_service_run_file_read(struct cage_service *svc, const char *tenant, const char *run_id,
                               const char *path, size_t max, void **ret_data, size_t *ret_len,
                               struct cage_error *err);

/* Images (docs/IMAGES.md), shared by every tenant of the server. list:
 * [{ref, id, manifest_digest, size, created, last_used, in_use}]; inspect:
 * that plus refs, layers, config, platform. pull {"ref"}: a reference the
 * config's images.allow admits, pulled (again) from its registry unless
 * pull_policy is "never" (-EPERM); audited as image.pull; returns inspect.
 * import: a `docker save` archive or an OCI layout as a tar, tag NULL or a
 * reference; audited as image.import; returns [{id, ref,
 * manifest_digest}]. remove: -EBUSY while a sandbox uses it; audited as
 * image.remove. The HTTP API lets only operators import and remove. */
int cage_service_images_list(struct cage_service *svc, json_t **ret, struct cage_error *err);
int cage_service_image_inspect(struct cage_service *svc, const char *ref, json_t **ret,
                               struct cage_error *err);
int cage_service_image_pull(struct cage_service *svc, const char *tenant, const json_t *req,
                            const struct cage_service_io *io, json_t **ret, struct cage_error *err);
int cage_service_image_import(struct cage_service *svc, const char *tenant, const void *data,
                              size_t len, const char *tag, json_t **ret, struct cage_error *err);
int cage_service_image_remove(struct cage_service *svc, const char *tenant, const char *ref,
                              json_t **ret, struct cage_error *err);

#ifdef __cplusplus
}
#endif
#endif
