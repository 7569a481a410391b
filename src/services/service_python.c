/* Python through the service: runs in a named sandbox's persistent session,
 * one-shot runs (from the warm pool when their policy allows), and the
 * session's variables. See service.h.
 *
 * A named sandbox has at most one session, created on first use and kept
 * across calls; calls on it are serialised by sb->py_lock. A run that loses
 * the session's state (an interrupt the code ignored, a crash) frees it:
 * the next call starts a fresh one, and the result of the losing run says
 * state_lost. Stopping the sandbox ends the session with it.
 *
 * Contexts are extra sessions of a named sandbox (at most
 * SVC_CONTEXTS_MAX), each its own interpreter in the same sandbox: a run
 * names one with "context". They share py_lock with the main session, so
 * a sandbox's Python calls still run one at a time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service_private.h"
#include "services/files.h"
#include "services/session_frame.h"
#include "util/cleanup.h"
#include "util/error.h"

#define VAR_NAME_MAX       128
#define REQUEST_TIMEOUT_MS 30000
#define HOST_BUDGET_MAX    10000

static const char *const run_keys[] = {"code", "timeout_s", "host_budget", "context", "env", NULL};
static const char *const oneshot_extra[] = {"code", "files", "host_budget", NULL};

struct py_req {
        const char *code;
        size_t code_len;
        uint64_t timeout_ms;
        uint32_t host_budget;
        json_t *env; /* named sandboxes: variables for this run only, or NULL */
};

/* The `env` of a run in a named sandbox: the spec's rules for names and values. */
static int parse_run_env(const json_t *req, struct py_req *q, struct cage_error *err)
{
        json_t *env = json_object_get(req, "env");
        if (!env || json_is_null(env))
                return 0;
        if (!json_is_object(env) || json_object_size(env) > SVC_ENV_MAX)
                return cage_fail(err, -EINVAL, "env: must be an object of at most %d strings",
                                 SVC_ENV_MAX);
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v)
        {
                size_t n = strlen(k);
                if (!n || n > VAR_NAME_MAX || (k[0] >= '0' && k[0] <= '9') ||
                    strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789") !=
                            n)
                        return cage_fail(err, -EINVAL, "env: \"%.64s\" is not a valid name", k);
                if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
                    json_string_length(v) > SVC_ENV_VALUE_MAX)
                        return cage_fail(err, -EINVAL,
                                         "env.%s: must be a string of at most %d bytes", k,
                                         SVC_ENV_VALUE_MAX);
        }
        q->env = env;
        return 0;
}

static int parse_code(const json_t *req, struct py_req *q, struct cage_error *err)
{
        const json_t *code = json_object_get(req, "code");
        if (!json_is_string(code))
                return cage_fail(err, -EINVAL, "code: required, a string of Python");
        if (json_string_length(code) > SESSION_CODE_MAX)
                return cage_fail(err, -E2BIG, "code: more than %d bytes", SESSION_CODE_MAX);
        q->code = json_string_value(code);
        q->code_len = json_string_length(code);
        const json_t *budget = json_object_get(req, "host_budget");
        q->host_budget = SESSION_HOST_BUDGET;
        if (budget && !json_is_null(budget)) {
                if (!json_is_integer(budget) || json_integer_value(budget) < 1 ||
                    json_integer_value(budget) > HOST_BUDGET_MAX)
                        return cage_fail(err, -EINVAL, "host_budget: an integer 1..%d",
                                         HOST_BUDGET_MAX);
                q->host_budget = (uint32_t)json_integer_value(budget);
        }
        return 0;
}

static int check_keys(const json_t *req, const char *const *keys, struct cage_error *err)
{
        if (!json_is_object(req))
                return cage_fail(err, -EINVAL, "the request body must be a JSON object");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)req, k, v)
        {
                bool known = false;
                for (size_t i = 0; keys[i] && !known; i++)
                        known = strcmp(k, keys[i]) == 0;
                if (!known)
                        return cage_fail(err, -EINVAL, "unknown field \"%.64s\"", k);
        }
        return 0;
}

/* Host calls of a run: tools.* go to the configured upstream MCP servers
 * (code mode) when there are any; everything else to the front end. */
struct run_host {
        struct cage_service *svc;
        const struct cage_service_host *front;
};

static int route_host_call(void *ctx, const char *fn, json_t *args, json_t *kwargs, json_t **value,
                           char **error)
{
        struct run_host *h = ctx;
        int r;
        if (strncmp(fn, "tools.", 6) == 0 && cage_upstreams_any(h->svc->upstreams)) {
                r = cage_upstreams_call(h->svc->upstreams, fn, kwargs, value, error);
                cage_metrics_host_call(r == 0 && !*error);
                return r;
        }
        if (h->front && h->front->fn) {
                r = h->front->fn(h->front->ctx, fn, args, kwargs, value, error);
                cage_metrics_host_call(r == 0 && !*error);
                return r;
        }
        cage_metrics_host_call(false);
        if (asprintf(error,
                     "%s is not available: this client serves no host functions "
                     "(llm_query needs an MCP client with sampling, or an HTTP client "
                     "that answers host calls)",
                     fn) < 0)
                *error = NULL;
        return 0;
}

static void fill_run(struct cage_session_run *run, const struct py_req *q, uint64_t output_max,
                     const struct cage_service_io *io, struct run_host *host)
{
        *run = (struct cage_session_run){.code = q->code,
                                         .code_len = q->code_len,
                                         .timeout_ms = q->timeout_ms,
                                         .output_max_bytes = output_max,
                                         .output_stop_bytes = 64ULL << 20,
                                         .host_budget = q->host_budget,
                                         .cancel_fd = -1};
        if (io) {
                run->on_output = io->on_output;
                run->on_output_ctx = io->on_output_ctx;
                run->cancel_fd = io->cancel_fd;
        }
        run->host = route_host_call;
        run->host_ctx = host;
        run->env = q->env;
        if (host->front)
                run->functions = host->front->functions;
}

/* Redacts the string field key of o the way exec results are redacted
 * (a string that cannot be redacted becomes ""). */
static void redact_text(struct cage_service *svc, json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key);
        char *clean;
        size_t len;
        if (!json_is_string(v) ||
            !cage_redact_needed(svc->redactor, json_string_value(v), json_string_length(v)))
                return;
        if (cage_redact(svc->redactor, json_string_value(v), json_string_length(v), &clean, &len) ==
            0) {
                json_object_set_new(o, key, json_stringn(clean, len));
                free(clean);
        } else {
                json_object_set_new(o, key, json_string(""));
        }
}

/* A JSON value field holding a secret anywhere (found by serialising it)
 * becomes the string "[REDACTED]". */
static void redact_value(struct cage_service *svc, json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key);
        char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (text && cage_redact_needed(svc->redactor, text, strlen(text)))
                json_object_set_new(o, key, json_string("[REDACTED]"));
        free(text);
}

/* Redacts a run's result: its text fields, its error, its return_value. */
static void redact_result(struct cage_service *svc, json_t *res)
{
        static const char *const fields[] = {"stdout", "stderr", "return_repr"};
        for (size_t i = 0; i < 3; i++)
                redact_text(svc, res, fields[i]);
        json_t *error = json_object_get(res, "error");
        if (json_is_object(error)) {
                redact_text(svc, error, "message");
                redact_text(svc, error, "traceback");
        }
        redact_value(svc, res, "return_value");
}

static void audit_run(struct cage_service *svc, enum cage_audit_event ev, const char *tenant,
                      const char *name, json_t *labels, const json_t *res, const char *run_id)
{
        json_t *f = json_pack("{s:s, s:O, s:O, s:O}", "program", "python", "status",
                              json_object_get(res, "status"), "duration_ms",
                              json_object_get(res, "duration_ms"), "state_lost",
                              json_object_get(res, "state_lost"));
        if (f && run_id)
                json_object_set_new(f, "run_id", json_string(run_id));
        svc_audit(svc, ev, tenant, name, labels, f);
}

int svc_session_start(struct cage_box *box, const char *image, struct cage_session **ret,
                      struct cage_error *err)
{
        int r = cage_session_start(box, NULL, ret, err);
        if (r == -ENOEXEC && strcmp(image, "host") != 0)
                return cage_fail_plain(err, r,
                                       "image \"%s\" has no python3 on its PATH: Python needs an "
                                       "image with python3 3.8 or newer",
                                       image);
        return r;
}

/* ---- named sandboxes ---- */

/* With py_lock held: the slot of context id (NULL: the main session), or
 * NULL with err filled. */
static struct cage_session **session_slot(struct sb *sb, const char *id, struct cage_error *err)
{
        if (!id)
                return &sb->session;
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++)
                if (sb->contexts[i].id[0] && strcmp(sb->contexts[i].id, id) == 0)
                        return &sb->contexts[i].session;
        cage_fail(err, -ENOENT, "context \"%.64s\": no such context in sandbox \"%s\"", id,
                  sb->name);
        return NULL;
}

/* With py_lock held: frees the session of a run that lost its state (the
 * main one through svc_drop_session, which also ends its quota count). */
static void drop_if_dead(struct sb *sb, const char *id)
{
        struct cage_error ignored;
        struct cage_session **slot = session_slot(sb, id, &ignored);
        if (!slot || !*slot || cage_session_alive(*slot))
                return;
        if (id)
                *slot = cage_session_free(*slot);
        else
                svc_drop_session(sb);
}

/* With py_lock held: the session of context id (NULL: the main one),
 * started if needed, in *ret. The main session counts against the
 * tenant's quota of sessions; contexts are the E2B listener's extra ones. */
static int session_of(struct sb *sb, struct cage_box *box, const char *id,
                      struct cage_session **ret, struct cage_error *err)
{
        struct cage_session **slot = session_slot(sb, id, err);
        if (!slot)
                return -ENOENT;
        drop_if_dead(sb, id);
        int r = 0;
        if (!*slot) {
                if (!id && (r = svc_quota_session_start(sb->svc, sb->tenant, err)) < 0)
                        return r;
                if (!id && sb->forked_session)
                        *slot = TAKE_PTR(sb->forked_session);
                else
                        r = svc_session_start(box, sb->spec->image, slot, err);
                if (r < 0 && !id)
                        svc_quota_session_end(sb->svc, sb->tenant);
        }
        if (r == 0)
                *ret = *slot;
        return r;
}

void svc_contexts_stop(struct sb *sb)
{
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++)
                sb->contexts[i].session = cage_session_free(sb->contexts[i].session);
}

void svc_contexts_park(struct sb *sb)
{
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++)
                cage_session_park(sb->contexts[i].session);
}

static int run_named(struct cage_service *svc, const char *tenant, const char *name,
                     const json_t *req, const struct cage_service_io *io,
                     const struct cage_service_host *host, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        struct py_req q = {0};
        struct cage_box *box;
        struct cage_session *session = NULL;
        bool restarted;
        _cleanup_close_ int ws = -1;
        const json_t *ctx = json_object_get(req, "context");
        int r = check_keys(req, run_keys, err);
        if (r == 0 && ctx && !json_is_null(ctx) && !json_is_string(ctx))
                r = cage_fail(err, -EINVAL, "context: must be the id of a context");
        const char *ctx_id = json_is_string(ctx) ? json_string_value(ctx) : NULL;
        if (r == 0)
                r = parse_code(req, &q, err);
        if (r == 0)
                r = parse_run_env(req, &q, err);
        if (r == 0)
                r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        r = svc_parse_timeout(svc->cfg, req, sb->spec ? sb->spec->timeout_s_ms : 30000,
                              &q.timeout_ms, err);
        if (r == 0)
                r = svc_enter(sb, &restarted, &box, &ws, err);
        if (r < 0) {
                svc_unref(sb);
                return r;
        }
        struct cage_artifact_snapshot *before = NULL;
        json_t *artifacts = NULL;
        pthread_mutex_lock(&sb->py_lock);
        r = session_of(sb, box, ctx_id, &session, err);
        if (r == 0) {
                struct cage_session_run run;
                struct run_host rh = {.svc = svc, .front = host};
                fill_run(&run, &q, sb->spec->output_max_bytes, io, &rh);
                (void)cage_artifacts_snapshot(ws, &before, NULL);
                r = cage_session_run(session, &run, ret, err);
        }
        if (r == 0)
                drop_if_dead(sb, ctx_id);
        pthread_mutex_unlock(&sb->py_lock);
        if (r == 0) {
                if (cage_artifacts_collect(ws, before, &artifacts, NULL) == 0)
                        json_object_set_new(*ret, "artifacts", artifacts);
                json_object_set_new(*ret, "restarted", json_boolean(restarted));
                redact_result(svc, *ret);
                audit_run(svc, CAGE_AUDIT_EXEC_END, tenant, name, svc_labels(sb), *ret, NULL);
        }
        cage_artifact_snapshot_free(before);
        svc_leave(sb, NULL);
        svc_unref(sb);
        return r;
}

/* ---- one-shot runs ---- */

static int run_oneshot(struct cage_service *svc, const char *tenant, const json_t *req,
                       const struct cage_service_io *io, const struct cage_service_host *host,
                       json_t **ret, struct cage_error *err)
{
        struct svc_oneshot o;
        struct py_req q = {0};
        int r = svc_oneshot_prepare(svc, tenant, req, oneshot_extra, &o, err);
        if (r == 0)
                r = parse_code(req, &q, err);
        if (r == 0) {
                q.timeout_ms = o.spec->timeout_s_ms;
                r = svc_oneshot_start(svc, tenant, req, true, io, &o, err);
        }
        if (r == 0 && o.failed) { /* pip failed: that is the run's result */
                *ret = svc_oneshot_failed_result(&o);
        } else if (r == 0) {
                struct cage_session_run run;
                struct run_host rh = {.svc = svc, .front = host};
                fill_run(&run, &q, o.spec->output_max_bytes, io, &rh);
                r = cage_session_run(o.session, &run, ret, err);
        }
        if (r == 0 && !o.failed) {
                svc_oneshot_finish(svc, tenant, &o, *ret);
                json_object_set_new(*ret, "pooled", json_boolean(o.pooled));
                redact_result(svc, *ret);
                audit_run(svc, CAGE_AUDIT_RUN_END, tenant, NULL, o.spec->labels, *ret, o.run_id);
        }
        svc_oneshot_free(svc, &o);
        return r;
}

int cage_service_python_run(struct cage_service *svc, const char *tenant, const char *name,
                            const json_t *req, const struct cage_service_io *io,
                            const struct cage_service_host *host, json_t **ret,
                            struct cage_error *err)
{
        struct svc_call call;
        int r = svc_call_begin(svc, tenant, name ? CAGE_METRIC_SESSION : CAGE_METRIC_RUN_PYTHON,
                               &call, err);
        if (r == 0)
                r = name ? run_named(svc, tenant, name, req, io, host, ret, err)
                         : run_oneshot(svc, tenant, req, io, host, ret, err);
        svc_audit_denied(svc, r, tenant, name, err);
        svc_call_end(&call, r, r == 0 ? *ret : NULL);
        return r;
}

json_t *cage_service_pool_stats(struct cage_service *svc)
{
        json_t *st = cage_pool_stats(svc->pool);
        if (st)
                json_object_set_new(st, "sandbox_zygotes", svc_zygotes_stats(svc));
        return st;
}

/* ---- variables ---- */

static bool identifier(const char *s)
{
        static const char *const keywords[] = {
                "False",  "None",   "True",    "and",      "as",       "assert", "async",
                "await",  "break",  "class",   "continue", "def",      "del",    "elif",
                "else",   "except", "finally", "for",      "from",     "global", "if",
                "import", "in",     "is",      "lambda",   "nonlocal", "not",    "or",
                "pass",   "raise",  "return",  "try",      "while",    "with",   "yield"};
        size_t len = s ? strlen(s) : 0;
        if (!len || len > VAR_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
                return false;
        for (size_t i = 0; i < len; i++)
                if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                      (s[i] >= '0' && s[i] <= '9')))
                        return false;
        for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
                if (strcmp(s, keywords[i]) == 0)
                        return false;
        return true;
}

/* One request to the named sandbox's session (started if needed). */
static int session_call(struct cage_service *svc, const char *tenant, const char *name, json_t *msg,
                        const void *blob, size_t blob_len, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        struct cage_box *box;
        bool restarted;
        _cleanup_close_ int ws = -1;
        json_t *answer = NULL;
        int r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        if ((r = svc_enter(sb, &restarted, &box, &ws, err)) < 0) {
                svc_unref(sb);
                return r;
        }
        pthread_mutex_lock(&sb->py_lock);
        struct cage_session *session = NULL;
        r = session_of(sb, box, NULL, &session, err);
        if (r == 0)
                r = cage_session_request(session, msg, blob, blob_len, REQUEST_TIMEOUT_MS, &answer,
                                         err);
        drop_if_dead(sb, NULL);
        pthread_mutex_unlock(&sb->py_lock);
        svc_leave(sb, NULL);
        svc_unref(sb);
        if (r == 0 && ret)
                *ret = answer;
        else
                json_decref(answer);
        return r;
}

static int check_var(const char *var, struct cage_error *err)
{
        if (!identifier(var))
                return cage_fail(err, -EINVAL,
                                 "variable name \"%.64s\": must be a Python identifier that is "
                                 "not a keyword",
                                 var ? var : "");
        return 0;
}

int cage_service_python_set(struct cage_service *svc, const char *tenant, const char *name,
                            const char *var, const json_t *value, struct cage_error *err)
{
        int r = check_var(var, err);
        if (r < 0)
                return r;
        json_t *msg = json_pack("{s:s, s:s, s:O}", "op", "set", "name", var, "value", value);
        r = msg ? session_call(svc, tenant, name, msg, NULL, 0, NULL, err)
                : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        return r;
}

int cage_service_python_set_text(struct cage_service *svc, const char *tenant, const char *name,
                                 const char *var, const char *text, size_t len,
                                 struct cage_error *err)
{
        int r = check_var(var, err);
        if (r < 0)
                return r;
        if (len > SESSION_TEXT_MAX)
                return cage_fail(err, -E2BIG, "text: more than %llu bytes", SESSION_TEXT_MAX);
        json_t *msg = json_pack("{s:s, s:s}", "op", "set_text", "name", var);
        r = msg ? session_call(svc, tenant, name, msg, text, len, NULL, err)
                : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        return r;
}

int cage_service_python_load_file(struct cage_service *svc, const char *tenant, const char *name,
                                  const char *var, const char *path, struct cage_error *err)
{
        char rel[CAGE_FILES_PATH_MAX + 1], inside[CAGE_FILES_PATH_MAX + 16];
        int r = check_var(var, err);
        if (r == 0)
                r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        snprintf(inside, sizeof(inside), "/workspace/%s", rel);
        json_t *msg = json_pack("{s:s, s:s, s:s}", "op", "load_file", "name", var, "path", inside);
        r = msg ? session_call(svc, tenant, name, msg, NULL, 0, NULL, err)
                : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        return r;
}

/* The `get` answer to the client from the driver's `value`, within the
 * driver's own bounds (the code can forge the frame): a value of at most
 * SESSION_VALUE_MAX bytes of JSON nested at most SESSION_DEPTH_MAX deep
 * (else null), a type and a repr cut to their sizes. */
static json_t *variable_of(const char *var, const json_t *answer)
{
        json_t *value = json_object_get(answer, "value");
        if (!value || session_value_check(value, SESSION_VALUE_MAX) < 0)
                value = json_null();
        json_t *type = session_text_cut(json_object_get(answer, "type"), SESSION_NAME_MAX);
        json_t *repr = session_text_cut(json_object_get(answer, "repr"), SESSION_REPR_MAX);
        return json_pack("{s:s, s:o, s:O, s:o}", "name", var, "type", type ? type : json_null(),
                         "value", value, "repr", repr ? repr : json_null());
}

int cage_service_python_get(struct cage_service *svc, const char *tenant, const char *name,
                            const char *var, json_t **ret, struct cage_error *err)
{
        json_t *answer = NULL;
        int r = check_var(var, err);
        if (r < 0)
                return r;
        json_t *msg = json_pack("{s:s, s:s}", "op", "get", "name", var);
        r = msg ? session_call(svc, tenant, name, msg, NULL, 0, &answer, err)
                : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        if (r < 0)
                return r == -EINVAL ? -ENOENT : r;
        *ret = variable_of(var, answer);
        json_decref(answer);
        if (*ret) {
                redact_text(svc, *ret, "repr");
                redact_value(svc, *ret, "value");
        }
        return *ret ? 0 : cage_fail(err, -EPROTO, "a malformed answer from the session");
}

int cage_service_python_list(struct cage_service *svc, const char *tenant, const char *name,
                             json_t **ret, struct cage_error *err)
{
        json_t *answer = NULL;
        json_t *msg = json_pack("{s:s}", "op", "list");
        int r = msg ? session_call(svc, tenant, name, msg, NULL, 0, &answer, err)
                    : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        if (r < 0)
                return r;
        json_t *vars = json_object_get(answer, "variables");
        *ret = json_pack("{s:o, s:b}", "variables",
                         json_is_array(vars) ? json_incref(vars) : json_array(), "truncated",
                         json_is_true(json_object_get(answer, "truncated")));
        json_decref(answer);
        return 0;
}

int cage_service_python_reset(struct cage_service *svc, const char *tenant, const char *name,
                              struct cage_error *err)
{
        json_t *msg = json_pack("{s:s}", "op", "reset");
        int r = msg ? session_call(svc, tenant, name, msg, NULL, 0, NULL, err)
                    : cage_fail(err, -ENOMEM, "request");
        json_decref(msg);
        return r;
}

/* ---- contexts ---- */

/* Runs fn on the sandbox with py_lock held and no stop possible meanwhile
 * (the sandbox is entered, so started when it was stopped). */
static int with_sessions(struct cage_service *svc, const char *tenant, const char *name,
                         int (*fn)(struct sb *sb, const char *id, char *out,
                                   struct cage_error *err),
                         const char *id, char *out, struct cage_error *err)
{
        struct sb *sb;
        struct cage_box *box;
        bool restarted;
        _cleanup_close_ int ws = -1;
        int r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        if ((r = svc_enter(sb, &restarted, &box, &ws, err)) == 0) {
                pthread_mutex_lock(&sb->py_lock);
                r = fn(sb, id, out, err);
                pthread_mutex_unlock(&sb->py_lock);
                svc_leave(sb, NULL);
        }
        svc_unref(sb);
        return r;
}

static int context_add(struct sb *sb, const char *id, char *out, struct cage_error *err)
{
        (void)id;
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++) {
                if (sb->contexts[i].id[0])
                        continue;
                int r = cage_store_new_id(sb->contexts[i].id, err);
                if (r == 0)
                        memcpy(out, sb->contexts[i].id, CAGE_STORE_ID_LEN + 1);
                return r;
        }
        return cage_fail(err, -EPERM,
                         "sandbox \"%s\" has %d contexts already, the most it may have", sb->name,
                         SVC_CONTEXTS_MAX);
}

static int context_drop(struct sb *sb, const char *id, char *out, struct cage_error *err)
{
        (void)out;
        struct cage_session **slot = session_slot(sb, id, err);
        if (!slot)
                return -ENOENT;
        *slot = cage_session_free(*slot);
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++)
                if (strcmp(sb->contexts[i].id, id) == 0)
                        sb->contexts[i].id[0] = '\0';
        return 0;
}

static int context_restart(struct sb *sb, const char *id, char *out, struct cage_error *err)
{
        (void)out;
        struct cage_session **slot = session_slot(sb, id, err);
        if (!slot)
                return -ENOENT;
        if (id)
                *slot = cage_session_free(*slot);
        else
                svc_drop_session(sb); /* the main session: its quota count ends too */
        return 0;
}

static int context_list(struct sb *sb, const char *id, char *out, struct cage_error *err)
{
        (void)id;
        (void)err;
        size_t n = 0;
        for (size_t i = 0; i < SVC_CONTEXTS_MAX; i++)
                if (sb->contexts[i].id[0]) {
                        memcpy(out + n * (CAGE_STORE_ID_LEN + 1), sb->contexts[i].id,
                               CAGE_STORE_ID_LEN + 1);
                        n++;
                }
        return (int)n;
}

int cage_service_python_context_create(struct cage_service *svc, const char *tenant,
                                       const char *name, char ret_id[CAGE_CONTEXT_ID_LEN + 1],
                                       struct cage_error *err)
{
        return with_sessions(svc, tenant, name, context_add, NULL, ret_id, err);
}

int cage_service_python_context_remove(struct cage_service *svc, const char *tenant,
                                       const char *name, const char *id, struct cage_error *err)
{
        if (!id)
                return cage_fail(err, -EINVAL, "the main session cannot be removed");
        return with_sessions(svc, tenant, name, context_drop, id, NULL, err);
}

int cage_service_python_context_restart(struct cage_service *svc, const char *tenant,
                                        const char *name, const char *id, struct cage_error *err)
{
        return with_sessions(svc, tenant, name, context_restart, id, NULL, err);
}

int cage_service_python_context_list(struct cage_service *svc, const char *tenant, const char *name,
                                     json_t **ret, struct cage_error *err)
{
        char ids[SVC_CONTEXTS_MAX][CAGE_STORE_ID_LEN + 1];
        int n = with_sessions(svc, tenant, name, context_list, NULL, &ids[0][0], err);
        if (n < 0)
                return n;
        json_t *list = json_array();
        for (int i = 0; list && i < n; i++)
                json_array_append_new(list, json_string(ids[i]));
        *ret = list;
        return list ? 0 : cage_fail(err, -ENOMEM, "contexts");
}
