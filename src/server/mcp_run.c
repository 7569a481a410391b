/* run_python and run_shell: the arguments mapped onto the service
 * (one-shot run without `sandbox`, the named sandbox's session or exec
 * with it), live output as progress notifications, cancellation, and the
 * result rendered for a model: the result contract as structuredContent,
 * a concise text, images of output/ inline and other artifacts as
 * resource links.
 *
 * Progress: when the request carries _meta.progressToken, every output
 * chunk may send notifications/progress whose `progress` is the number
 * of output bytes so far (strictly increasing) and whose `message` holds
 * the latest lines (valid UTF-8, control characters neutralised, secrets
 * redacted), at most one notification per MCP_PROGRESS_MS. The output
 * callback runs on the service's thread; it also answers "cancel" once
 * the call is cancelled, besides the cancel fd the service polls. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/output.h"
#include "server/mcp.h"
#include "services/redact.h"
#include "services/service.h"
#include "util/base64.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define PROGRESS_TAIL  2048 /* bytes of latest output kept for the message */
#define PROGRESS_LINES 5
#define RENDER_MAX     (256 * 1024)
#define FILES_MAX      256 /* `files` entries, as the service allows for one-shot runs */

struct progress {
        struct mcp_call *c;
        pthread_mutex_t lock;
        char tail[PROGRESS_TAIL];
        size_t tail_len;
        uint64_t bytes, steps, last_ms; /* steps: preparation messages sent */
};

/* ---- progress ------------------------------------------------------------------- */

static void keep_tail(struct progress *p, const char *buf, size_t len)
{
        if (len >= PROGRESS_TAIL) {
                memcpy(p->tail, buf + len - PROGRESS_TAIL, PROGRESS_TAIL);
                p->tail_len = PROGRESS_TAIL;
                return;
        }
        size_t keep = p->tail_len + len > PROGRESS_TAIL ? PROGRESS_TAIL - len : p->tail_len;
        memmove(p->tail, p->tail + p->tail_len - keep, keep);
        memcpy(p->tail + keep, buf, len);
        p->tail_len = keep + len;
}

/* The last PROGRESS_LINES lines of the tail, sanitised and redacted. */
static char *latest_lines(struct progress *p)
{
        size_t end = p->tail_len, start = end, lines = 0;
        while (end > 0 && p->tail[end - 1] == '\n')
                end--;
        start = end;
        while (start > 0 && !(p->tail[start - 1] == '\n' && ++lines >= PROGRESS_LINES))
                start--;
        char *text = NULL, *clean = NULL;
        size_t len = 0, clen = 0;
        if (cage_sanitize_text(p->tail + start, end - start, &text, &len) < 0)
                return NULL;
        struct cage_redactor *red = cage_service_redactor(p->c->session->srv->svc);
        if (red && cage_redact_needed(red, text, len) &&
            cage_redact(red, text, len, &clean, &clen) == 0) {
                free(text);
                return clean;
        }
        return text;
}

static void send_progress(struct progress *p, const char *message)
{
        /* Output bytes plus preparation steps: it only ever grows. */
        json_t *params =
                json_pack("{s:O, s:I, s:s}", "progressToken", p->c->progress_token, "progress",
                          (json_int_t)(p->bytes + p->steps), "message", message);
        if (params)
                (void)mcp_call_notify(p->c, "notifications/progress", params);
}

/* cage_output_fn */
/* A preparation step (pulling an image) as a progress message. */
static void on_status(void *ctx, const char *status)
{
        struct progress *p = ctx;
        pthread_mutex_lock(&p->lock);
        p->steps++;
        if (p->c->progress_token)
                send_progress(p, status);
        pthread_mutex_unlock(&p->lock);
}

static int on_output(void *ctx, int stream, const void *buf, size_t len)
{
        struct progress *p = ctx;
        if (p->c->job) /* tasks/get shows the latest lines */
                mcp_job_output(p->c->job, buf, len);
        pthread_mutex_lock(&p->lock);
        keep_tail(p, buf, len);
        p->bytes += len;
        uint64_t now = clock_mono_ms();
        if (p->c->progress_token && len && now - p->last_ms >= MCP_PROGRESS_MS) {
                _cleanup_free_ char *lines = latest_lines(p);
                if (lines)
                        send_progress(p, lines);
                p->last_ms = now;
        }
        pthread_mutex_unlock(&p->lock);
        return mcp_call_cancelled(p->c) ? 1 : 0;
}

/* ---- arguments --------------------------------------------------------------------- */

static bool non_empty(const json_t *args, const char *key)
{
        const json_t *v = json_object_get(args, key);
        return (json_is_array(v) && json_array_size(v)) ||
               (json_is_object(v) && json_object_size(v));
}

static json_t *refuse_unsupported(const char *tool, const json_t *args, const char *sandbox)
{
        static const char *const spec_only[] = {"requirements", "network", "image"};
        for (size_t i = 0; sandbox && i < ELEMENTSOF(spec_only); i++)
                if (non_empty(args, spec_only[i]) ||
                    (i == 2 && json_is_string(json_object_get(args, spec_only[i]))))
                        return mcp_result_error(
                                "%s: `%s` belongs to the sandbox: give it to sandbox_create (a "
                                "named sandbox keeps its packages and network policy). Leave it "
                                "out when you pass `sandbox`.",
                                tool, spec_only[i]);
        if (sandbox && non_empty(args, "env") && strcmp(tool, "run_python") == 0)
                return mcp_result_error(
                        "run_python: `env` applies to one-shot runs only. A named sandbox gets "
                        "its environment from sandbox_create; for one call set os.environ in the "
                        "code instead.");
        return NULL;
}

/* Writes `files` into a named sandbox's workspace; an isError result on
 * failure. */
static json_t *put_files(struct mcp_call *c, const char *tool, const char *sandbox,
                         const json_t *files)
{
        size_t i;
        const json_t *f;
        if (json_array_size(files) > FILES_MAX)
                return mcp_result_error("%s: `files` holds more than %d files", tool, FILES_MAX);
        json_array_foreach(files, i, f)
        {
                const char *path = json_string_value(json_object_get(f, "path"));
                const json_t *content = json_object_get(f, "content");
                const char *encoding = json_string_value(json_object_get(f, "encoding"));
                const char *url = json_string_value(json_object_get(f, "url"));
                if (path && url) {
                        char field[32];
                        struct cage_error err = {0};
                        snprintf(field, sizeof(field), "files[%zu].url", i);
                        int r = cage_service_file_fetch(c->session->srv->svc, c->session->tenant,
                                                        sandbox, path, url, field, &err);
                        if (r < 0)
                                return mcp_result_service_error(tool, r, &err);
                        continue;
                }
                if (!path || !json_is_string(content))
                        return mcp_result_error("%s: files[%zu] must be {path, content, "
                                                "encoding} or {path, url}",
                                                tool, i);
                _cleanup_free_ void *data = NULL;
                size_t len = json_string_length(content);
                bool b64 = encoding && strcmp(encoding, "base64") == 0;
                if (b64 && cage_base64_decode(json_string_value(content), len, &data, &len) < 0)
                        return mcp_result_error("%s: files[%zu].content is not valid base64", tool,
                                                i);
                struct cage_error err = {0};
                int r = cage_service_file_write(c->session->srv->svc, c->session->tenant, sandbox,
                                                path, b64 ? data : json_string_value(content), len,
                                                &err);
                if (r < 0)
                        return mcp_result_service_error(tool, r, &err);
        }
        return NULL;
}

/* The service request: main_key = the code or command under its service
 * name, plus the options that apply. */
static json_t *service_request(const json_t *args, const char *main_key, const char *value,
                               bool oneshot, bool with_env)
{
        json_t *req = json_pack("{s:s}", main_key, value);
        static const char *const keys[] = {"timeout_s",    "env",     "files",
                                           "requirements", "network", "image"};
        for (size_t i = 0; req && i < ELEMENTSOF(keys); i++) {
                const json_t *v = json_object_get(args, keys[i]);
                if (!v || json_is_null(v) || (i >= 2 && !oneshot) || (i == 1 && !with_env))
                        continue;
                json_object_set(req, keys[i], (json_t *)v);
        }
        return req;
}

/* ---- rendering ------------------------------------------------------------------------ */

struct text {
        char *buf;
        size_t len, cap;
};

static void add(struct text *t, const char *s, size_t n)
{
        if (!t->buf || t->len + n + 1 > RENDER_MAX)
                return;
        if (t->len + n + 1 > t->cap) {
                size_t cap = (t->len + n + 1) * 2;
                char *nb = realloc(t->buf, cap);
                if (!nb)
                        return;
                t->buf = nb;
                t->cap = cap;
        }
        memcpy(t->buf + t->len, s, n);
        t->len += n;
        t->buf[t->len] = '\0';
}

static void addf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(struct text *t, const char *fmt, ...)
{
        char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n >= 0)
                add(t, s, (size_t)n);
        free(s);
}

static const char *status_meaning(const char *status)
{
        static const struct {
                const char *status, *text;
        } meanings[] = {
                {"ok", "finished successfully"},
                {"error", "failed"},
                {"timeout", "was killed: it ran past its time limit (timeout_s)"},
                {"oom", "was killed: it ran out of memory"},
                {"output_limit", "was stopped: it wrote too much output"},
                {"cancelled", "was cancelled"},
                {"internal_error", "could not be run: codecage itself failed, not your code"},
        };
        for (size_t i = 0; status && i < ELEMENTSOF(meanings); i++)
                if (strcmp(status, meanings[i].status) == 0)
                        return meanings[i].text;
        return "ended";
}

static void render_stream(struct text *t, const json_t *res, const char *name)
{
        const json_t *s = json_object_get(res, name);
        const json_t *cut = json_object_get(json_object_get(res, "truncated"), name);
        if (!json_string_length(s))
                return;
        addf(t, "--- %s ---\n", name);
        add(t, json_string_value(s), json_string_length(s));
        if (json_string_value(s)[json_string_length(s) - 1] != '\n')
                add(t, "\n", 1);
        if (cut)
                addf(t, "(%s cut: %lld of %lld bytes kept)\n", name,
                     (long long)json_integer_value(json_object_get(cut, "kept")),
                     (long long)json_integer_value(json_object_get(cut, "total")));
}

static void render_value(struct text *t, const json_t *res)
{
        const json_t *value = json_object_get(res, "return_value");
        const char *repr = json_string_value(json_object_get(res, "return_repr"));
        if (value && !json_is_null(value)) {
                _cleanup_free_ char *s = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
                if (s)
                        addf(t, "return value: %s\n", s);
        } else if (repr) {
                addf(t, "return value (repr): %s\n", repr);
        }
}

static void render_error(struct text *t, const json_t *res)
{
        const json_t *error = json_object_get(res, "error");
        const char *tb = json_string_value(json_object_get(error, "traceback"));
        if (!json_is_object(error))
                return;
        if (tb && *tb)
                addf(t, "--- exception ---\n%s%s", tb, tb[strlen(tb) - 1] == '\n' ? "" : "\n");
        else
                addf(t, "exception: %s: %s\n", json_string_value(json_object_get(error, "type")),
                     json_string_value(json_object_get(error, "message")));
}

static char *render(const char *tool, const json_t *res)
{
        struct text t = {.buf = malloc(256), .cap = 256};
        const char *status = json_string_value(json_object_get(res, "status"));
        const json_t *exit_code = json_object_get(res, "exit_code");
        if (t.buf)
                t.buf[0] = '\0';
        addf(&t, "status: %s: the %s %s", status ? status : "?",
             strcmp(tool, "run_python") == 0 ? "code" : "command", status_meaning(status));
        if (json_is_integer(exit_code))
                addf(&t, " (exit code %lld)", (long long)json_integer_value(exit_code));
        addf(&t, " in %lld ms\n",
             (long long)json_number_value(json_object_get(res, "duration_ms")));
        const char *reason = json_string_value(json_object_get(res, "reason"));
        if (reason)
                addf(&t, "reason: %s\n", reason);
        if (json_is_true(json_object_get(res, "restarted")))
                addf(&t, "note: the sandbox had been stopped and was started again: earlier "
                         "Python variables are gone, files are kept\n");
        if (json_is_true(json_object_get(res, "state_lost")))
                addf(&t, "note: the Python session was lost (interrupted or crashed): its "
                         "variables are gone; the next call starts a fresh one\n");
        render_stream(&t, res, "stdout");
        render_stream(&t, res, "stderr");
        render_error(&t, res);
        render_value(&t, res);
        size_t i;
        const json_t *a;
        char name[MCP_SHOWN_NAME_MAX];
        json_array_foreach(json_object_get(res, "artifacts"), i, a) addf(
                &t, "artifact: %s (%s, %lld bytes)\n",
                mcp_shown_name(json_string_value(json_object_get(a, "path")), name, sizeof(name)),
                json_string_value(json_object_get(a, "mime")),
                (long long)json_integer_value(json_object_get(a, "size")));
        return t.buf;
}

/* ---- the run --------------------------------------------------------------------------- */

struct run {
        const char *tool;
        const char *sandbox;
        bool python;
        json_t *req;
};

static int call_service(struct mcp_call *c, const struct run *run, struct progress *p, json_t **res,
                        struct cage_error *err)
{
        struct cage_service *svc = c->session->srv->svc;
        const char *tenant = c->session->tenant;
        struct cage_service_io io = {.on_output = on_output,
                                     .on_output_ctx = p,
                                     .cancel_fd = c->cancel_fd,
                                     .on_status = on_status,
                                     .on_status_ctx = p};
        struct cage_service_host host;
        if (run->python) {
                mcp_sampling_host(c, &host);
                return cage_service_python_run(svc, tenant, run->sandbox, run->req, &io, &host, res,
                                               err);
        }
        if (run->sandbox)
                return cage_service_exec(svc, tenant, run->sandbox, run->req, &io, res, err);
        return cage_service_run(svc, tenant, run->req, &io, res, err);
}

static json_t *result_of(struct mcp_call *c, const struct run *run, json_t *res)
{
        const char *status = json_string_value(json_object_get(res, "status"));
        _cleanup_free_ char *rendered = render(run->tool, res);
        json_t *content = json_array();
        json_t *text = mcp_text_block(rendered ? rendered : "");
        if (!content || !text || json_array_append_new(content, text) < 0) {
                json_decref(content);
                json_decref(res);
                return NULL;
        }
        mcp_add_artifacts(c, run->sandbox, res, content);
        if (status && strcmp(status, "ok") != 0 && strcmp(status, "error") != 0 &&
            strcmp(status, "cancelled") != 0)
                mcp_call_log(c, MCP_LOG_NOTICE, "%s ended with status %s", run->tool, status);
        return json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent", res, "isError",
                         status && strcmp(status, "internal_error") == 0);
}

static json_t *execute(struct mcp_call *c, struct run *run)
{
        struct progress p = {.c = c};
        struct cage_error err = {0};
        json_t *res = NULL;
        pthread_mutex_init(&p.lock, NULL);
        mcp_call_log(c, MCP_LOG_DEBUG, "%s: starting %s", run->tool,
                     run->sandbox ? "in the named sandbox" : "a one-shot sandbox");
        if (c->progress_token)
                send_progress(&p, "started");
        int r = call_service(c, run, &p, &res, &err);
        pthread_mutex_destroy(&p.lock);
        if (r < 0)
                return mcp_result_service_error(run->tool, r, &err);
        return result_of(c, run, res);
}

static json_t *run_tool(struct mcp_call *c, const json_t *args, bool python)
{
        struct run run = {
                .tool = python ? "run_python" : "run_shell",
                .sandbox = json_string_value(json_object_get(args, "sandbox")),
                .python = python,
        };
        const char *main = json_string_value(json_object_get(args, python ? "code" : "command"));
        json_t *bad = refuse_unsupported(run.tool, args, run.sandbox);
        if (!bad && run.sandbox)
                bad = put_files(c, run.tool, run.sandbox, json_object_get(args, "files"));
        if (bad)
                return bad;
        const char *key = python ? "code" : run.sandbox ? "script" : "command";
        run.req = service_request(args, key, main, !run.sandbox, !python || !run.sandbox);
        if (!run.req)
                return NULL;
        json_t *result = execute(c, &run);
        json_decref(run.req);
        return result;
}

json_t *mcp_tool_run_python(struct mcp_call *c, const json_t *args)
{
        return run_tool(c, args, true);
}

json_t *mcp_tool_run_shell(struct mcp_call *c, const json_t *args)
{
        return run_tool(c, args, false);
}
