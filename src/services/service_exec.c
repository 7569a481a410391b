/* Execs in named sandboxes and one-shot runs; see service.h.
 *
 * Both parse the request, snapshot output/ of the workspace, run through
 * the box (core/box.h), collect the artifacts that appeared or changed,
 * redact secret values from the text, and audit start and end. A one-shot
 * run gets a fresh sandbox whose /workspace is its scratch tmpfs; the
 * server reaches that through its pid 1's root (as root it may), writes the
 * request's files there before the code runs, and copies output/ into
 * <data_dir>/runs/<run_id>/ before the sandbox goes, where it stays for
 * the configured retention. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/result_json.h"
#include "core/spec.h"
#include "service_private.h"
#include "services/files.h"
#include "services/tenancy.h"
#include "util/base64.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define ARGV_MAX          4096
#define SCRIPT_MAX        (1024 * 1024)
#define FILES_MAX         256
#define RUN_OUTPUT_MAX    (256ULL * 1024 * 1024) /* bytes of output/ kept per run */
#define RUN_OUTPUT_FILES  1000
#define OUTPUT_STOP_BYTES (64ULL * 1024 * 1024)

/* ---- requests ---- */

struct exec_req {
        char **argv;
        char **env;
        const char *cwd;
        const char *stdin_data;
        size_t stdin_len;
        uint64_t timeout_ms;
        json_t *owned; /* strings the pointers above borrow from */
};

static void exec_req_free(struct exec_req *q)
{
        free(q->argv);
        if (q->env)
                for (char **e = q->env; *e; e++)
                        free(*e);
        free(q->env);
        json_decref(q->owned);
}

static bool has_nul(const json_t *s)
{
        return strlen(json_string_value(s)) != json_string_length(s);
}

static int parse_argv(const json_t *in, struct exec_req *q, struct cage_error *err)
{
        const json_t *argv = json_object_get(in, "argv");
        const json_t *script = json_object_get(in, "script");
        if (!argv == !script)
                return cage_fail(err, -EINVAL, "exactly one of argv and script is required");
        if (script) {
                if (!json_is_string(script) || json_string_length(script) > SCRIPT_MAX ||
                    has_nul(script))
                        return cage_fail(err, -EINVAL,
                                         "script: must be a string of at most %d bytes",
                                         SCRIPT_MAX);
                q->argv = calloc(4, sizeof(char *));
                if (!q->argv)
                        return -ENOMEM;
                q->argv[0] = "/bin/sh";
                q->argv[1] = "-c";
                q->argv[2] = (char *)json_string_value(script);
                return 0;
        }
        if (!json_is_array(argv) || json_array_size(argv) < 1 || json_array_size(argv) > ARGV_MAX)
                return cage_fail(err, -EINVAL, "argv: must be a list of 1..%d strings", ARGV_MAX);
        q->argv = calloc(json_array_size(argv) + 1, sizeof(char *));
        if (!q->argv)
                return -ENOMEM;
        size_t i;
        const json_t *a;
        json_array_foreach(argv, i, a)
        {
                if (!json_is_string(a) || has_nul(a) || (i == 0 && !json_string_length(a)))
                        return cage_fail(err, -EINVAL, "argv[%zu]: must be a string%s", i,
                                         i == 0 ? " naming the program" : "");
                q->argv[i] = (char *)json_string_value(a);
        }
        return 0;
}

static int parse_exec_env(const json_t *in, struct exec_req *q, struct cage_error *err)
{
        const json_t *env = json_object_get(in, "env");
        if (!env || json_is_null(env))
                return 0;
        /* Same rules as the spec's env: parse it through a throwaway spec. */
        if (!json_is_object(env) || json_object_size(env) > SVC_ENV_MAX)
                return cage_fail(err, -EINVAL, "env: must be an object of at most %d strings",
                                 SVC_ENV_MAX);
        q->env = calloc(json_object_size(env) + 1, sizeof(char *));
        if (!q->env)
                return -ENOMEM;
        size_t n = 0;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)env, k, v)
        {
                bool name_ok = k[0] && strlen(k) <= 128 && !strchr(k, '=') &&
                               strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
                                         "0123456789") == strlen(k) &&
                               !(k[0] >= '0' && k[0] <= '9');
                if (!name_ok)
                        return cage_fail(err, -EINVAL, "env: \"%.64s\" is not a valid name", k);
                if (!json_is_string(v) || has_nul(v) || json_string_length(v) > SVC_ENV_VALUE_MAX)
                        return cage_fail(err, -EINVAL,
                                         "env.%s: must be a string of at most %d "
                                         "bytes",
                                         k, SVC_ENV_VALUE_MAX);
                if (asprintf(&q->env[n++], "%s=%s", k, json_string_value(v)) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int svc_parse_timeout(const struct cage_config *cfg, const json_t *in, uint64_t dflt_ms,
                      uint64_t *ret, struct cage_error *err)
{
        const json_t *t = json_object_get(in, "timeout_s");
        *ret = dflt_ms;
        if (!t || json_is_null(t))
                return 0;
        double s = json_is_number(t) ? json_number_value(t) : -1;
        if (!(s > 0) || s > (double)cfg->limits.timeout_s_max)
                return cage_fail_plain(
                        err, s > 0 ? -EPERM : -EINVAL,
                        "timeout_s: must be a number above 0 and at most this server's "
                        "maximum of %llu",
                        (unsigned long long)cfg->limits.timeout_s_max);
        *ret = (uint64_t)(s * 1000.0 + 0.5);
        if (*ret == 0)
                *ret = 1;
        return 0;
}

static int parse_exec(struct cage_service *svc, const json_t *in, uint64_t dflt_timeout_ms,
                      const char *const *keys, struct exec_req *q, struct cage_error *err)
{
        if (!json_is_object(in))
                return cage_fail(err, -EINVAL, "the request body must be a JSON object");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)in, k, v)
        {
                bool known = false;
                for (size_t i = 0; keys[i] && !known; i++)
                        known = strcmp(k, keys[i]) == 0;
                if (!known)
                        return cage_fail(err, -EINVAL, "unknown field \"%.64s\"", k);
        }
        q->owned = json_incref((json_t *)in);
        int r = parse_argv(in, q, err);
        if (r == 0)
                r = parse_exec_env(in, q, err);
        if (r == 0)
                r = svc_parse_timeout(svc->cfg, in, dflt_timeout_ms, &q->timeout_ms, err);
        const json_t *cwd = json_object_get(in, "cwd");
        if (r == 0 && cwd && !json_is_null(cwd)) {
                if (!json_is_string(cwd) || json_string_value(cwd)[0] != '/' || has_nul(cwd) ||
                    json_string_length(cwd) > 4095)
                        return cage_fail(err, -EINVAL, "cwd: must be an absolute path");
                q->cwd = json_string_value(cwd);
        }
        const json_t *in_data = json_object_get(in, "stdin");
        if (r == 0 && in_data && !json_is_null(in_data)) {
                if (!json_is_string(in_data))
                        return cage_fail(err, -EINVAL, "stdin: must be a string");
                q->stdin_data = json_string_value(in_data);
                q->stdin_len = json_string_length(in_data);
        }
        return r == -ENOMEM ? cage_fail(err, r, "request") : r;
}

/* ---- results ---- */

static void redact_stream(struct cage_service *svc, struct cage_stream *s)
{
        char *clean;
        size_t len;
        if (!s->data || !cage_redact_needed(svc->redactor, s->data, s->len))
                return;
        if (cage_redact(svc->redactor, s->data, s->len, &clean, &len) < 0) {
                s->len = 0; /* never let an unredacted secret out */
                s->data[0] = '\0';
                return;
        }
        free(s->data);
        s->data = clean;
        s->len = len;
}

json_t *svc_result_json(struct cage_service *svc, struct cage_result *res, json_t *artifacts)
{
        redact_stream(svc, &res->out);
        redact_stream(svc, &res->err);
        json_t *o = cage_result_to_json_object(res);
        if (o && artifacts)
                json_object_set(o, "artifacts", artifacts);
        return o;
}

static json_t *audit_fields(const struct cage_result *res, const char *argv0)
{
        return json_pack("{s:s, s:o, s:o, s:I, s:I, s:I, s:s}", "status",
                         cage_status_to_string(res->status), "exit_code",
                         res->exit_code >= 0 ? json_integer(res->exit_code) : json_null(), "signal",
                         res->signal ? json_integer(res->signal) : json_null(), "duration_ms",
                         (json_int_t)res->duration_ms, "cpu_ms", (json_int_t)res->cpu_ms,
                         "peak_memory_bytes", (json_int_t)res->peak_memory_bytes, "program", argv0);
}

static void run_exec(struct cage_service *svc, struct cage_box *box, const struct exec_req *q,
                     uint64_t output_max, const struct cage_service_io *io, struct cage_result *res,
                     int *r, struct cage_error *err)
{
        struct cage_exec ex = {.argv = q->argv,
                               .env = q->env,
                               .cwd = q->cwd,
                               .stdin_data = q->stdin_data,
                               .stdin_len = q->stdin_len,
                               .timeout_ms = q->timeout_ms,
                               .output_max_bytes = output_max,
                               .output_stop_bytes = OUTPUT_STOP_BYTES};
        struct cage_run_options opts = {.keep_output = true, .cancel_fd = -1};
        if (io) {
                opts.on_output = io->on_output;
                opts.on_output_ctx = io->on_output_ctx;
                opts.cancel_fd = io->cancel_fd;
                ex.stdin_stream = io->stdin_stream;
                ex.stdin_fd = io->stdin_fd;
        }
        (void)svc;
        *r = cage_box_exec(box, &ex, &opts, res, err);
}

/* ---- exec in a named sandbox ---- */

static const char *const exec_keys[] = {"argv", "script", "env", "cwd", "stdin", "timeout_s", NULL};

int svc_enter(struct sb *sb, bool *restarted, struct cage_box **box, int *ws_fd,
              struct cage_error *err)
{
        pthread_mutex_lock(&sb->lock);
        int r = sb->removed ? cage_fail_plain(err, -ENOENT, "no sandbox named \"%s\"", sb->name)
                            : svc_ensure_running(sb, restarted, err);
        if (r == 0 && (*ws_fd = svc_workspace_fd(sb, err)) < 0)
                r = *ws_fd;
        if (r == 0) {
                sb->active++;
                sb->last_used_ms = clock_wall_ms();
                *box = sb->box;
        }
        pthread_mutex_unlock(&sb->lock);
        return r;
}

/* The store's last_used_ms trails the registry's by at most this and the
 * reaper's period: the reaper writes what is due, all in one transaction
 * (a write per call cost a session call ~5% of its time). */
#define TOUCH_PERIOD_MS 1000

void svc_leave(struct sb *sb, const struct cage_result *res)
{
        pthread_mutex_lock(&sb->lock);
        sb->active--;
        sb->last_used_ms = clock_wall_ms();
        if (sb->last_used_ms - sb->touched_ms >= TOUCH_PERIOD_MS) {
                sb->touched_ms = sb->last_used_ms;
                sb->touch_due = true;
        }
        if (res) {
                log_ring_append(&sb->logs, res->out.data ? res->out.data : "", res->out.len);
                log_ring_end_block(&sb->logs);
                log_ring_append(&sb->logs, res->err.data ? res->err.data : "", res->err.len);
                log_ring_end_block(&sb->logs);
        }
        pthread_cond_broadcast(&sb->changed);
        pthread_mutex_unlock(&sb->lock);
}

static int exec_named(struct cage_service *svc, const char *tenant, const char *name,
                      const json_t *req, const struct cage_service_io *io, json_t **ret,
                      struct cage_error *err)
{
        struct sb *sb;
        struct exec_req q = {0};
        struct cage_result res = {0};
        struct cage_box *box = NULL;
        struct cage_artifact_snapshot *before = NULL;
        json_t *artifacts = NULL;
        bool restarted = false;
        _cleanup_close_ int ws = -1;
        int r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        uint64_t dflt = sb->spec ? sb->spec->timeout_s_ms : 30000;
        r = parse_exec(svc, req, dflt, exec_keys, &q, err);
        if (r == 0)
                r = svc_enter(sb, &restarted, &box, &ws, err);
        if (r < 0) {
                svc_audit_denied(svc, r, tenant, name, err);
                exec_req_free(&q);
                svc_unref(sb);
                return r;
        }
        svc_audit(svc, CAGE_AUDIT_EXEC_START, tenant, name, svc_labels(sb),
                  json_pack("{s:s}", "program", q.argv[0]));
        (void)cage_artifacts_snapshot(ws, &before, NULL);
        run_exec(svc, box, &q, sb->spec->output_max_bytes, io, &res, &r, err);
        if (r == 0 && cage_artifacts_collect(ws, before, &artifacts, NULL) < 0)
                artifacts = json_array();
        if (r == 0) {
                *ret = svc_result_json(svc, &res, artifacts);
                json_object_set_new(*ret, "restarted", json_boolean(restarted));
                svc_audit(svc, CAGE_AUDIT_EXEC_END, tenant, name, svc_labels(sb),
                          audit_fields(&res, q.argv[0]));
        }
        svc_leave(sb, r == 0 ? &res : NULL);
        cage_result_free(&res);
        json_decref(artifacts);
        cage_artifact_snapshot_free(before);
        exec_req_free(&q);
        svc_unref(sb);
        return r;
}

int cage_service_exec(struct cage_service *svc, const char *tenant, const char *name,
                      const json_t *req, const struct cage_service_io *io, json_t **ret,
                      struct cage_error *err)
{
        struct svc_call call;
        int r = svc_call_begin(svc, tenant, CAGE_METRIC_EXEC, &call, err);
        if (r == 0)
                r = exec_named(svc, tenant, name, req, io, ret, err);
        else
                svc_audit_denied(svc, r, tenant, name, err);
        svc_call_end(&call, r, r == 0 ? *ret : NULL);
        return r;
}

/* ---- one-shot runs ---- */

static const char *const run_extra[] = {"argv", "command", "code", "files", "stdin", NULL};

/* argv from {argv}, {command} (shell) or {code} (Python). */
static int run_argv(const json_t *in, struct exec_req *q, struct cage_error *err)
{
        const json_t *argv = json_object_get(in, "argv");
        const json_t *command = json_object_get(in, "command");
        const json_t *code = json_object_get(in, "code");
        if ((argv != NULL) + (command != NULL) + (code != NULL) != 1)
                return cage_fail(err, -EINVAL, "exactly one of argv, command and code is required");
        if (argv)
                return parse_argv(in, q, err);
        const json_t *text = command ? command : code;
        const char *field = command ? "command" : "code";
        if (!json_is_string(text) || json_string_length(text) > SCRIPT_MAX || has_nul(text))
                return cage_fail(err, -EINVAL, "%s: must be a string of at most %d bytes", field,
                                 SCRIPT_MAX);
        q->argv = calloc(4, sizeof(char *));
        if (!q->argv)
                return cage_fail(err, -ENOMEM, "request");
        q->argv[0] = command ? "/bin/sh" : "python3";
        q->argv[1] = "-c";
        q->argv[2] = (char *)json_string_value(text);
        return 0;
}

/* One entry of `files`: {path, content, encoding?} or {path, url}. */
static int file_entry(const json_t *f, size_t i, const char **path, const char **content,
                      size_t *clen, const char **enc, const char **url, struct cage_error *err)
{
        *content = *url = NULL;
        *enc = "utf-8";
        *clen = 0;
        if (json_unpack((json_t *)f, "{s:s, s?s%, s?s, s?s}", "path", path, "content", content,
                        clen, "encoding", enc, "url", url) < 0 ||
            json_object_size(f) > 3 || (*content && *url) || (!*content && !*url) ||
            (*url && json_object_size(f) != 2))
                return cage_fail(err, -EINVAL,
                                 "files[%zu]: must be {path, content, encoding} or {path, url}", i);
        if (*content && strcmp(*enc, "base64") != 0 && strcmp(*enc, "utf-8") != 0 &&
            strcmp(*enc, "utf8") != 0)
                return cage_fail(err, -EINVAL, "files[%zu].encoding: \"utf-8\" or \"base64\"", i);
        return 0;
}

int svc_check_files(const json_t *in, struct cage_error *err)
{
        const json_t *files = json_object_get(in, "files");
        if (!files || json_is_null(files))
                return 0;
        if (!json_is_array(files) || json_array_size(files) > FILES_MAX)
                return cage_fail(err, -EINVAL, "files: must be a list of at most %d files",
                                 FILES_MAX);
        size_t i, clen;
        const json_t *f;
        const char *path, *content, *enc, *url;
        json_array_foreach(files, i, f)
        {
                int r = file_entry(f, i, &path, &content, &clen, &enc, &url, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The bytes of one entry: decoded content, or the URL's body. *owned:
 * *data is malloc'ed (possibly even on failure: free it). */
static int file_bytes(struct cage_service *svc, const char *tenant, json_t *labels, const json_t *f,
                      size_t i, void **data, size_t *len, bool *owned, const char **path,
                      struct cage_error *err)
{
        const char *content, *enc, *url;
        size_t clen;
        int r = file_entry(f, i, path, &content, &clen, &enc, &url, err);
        if (r < 0)
                return r;
        if (url) {
                char field[32];
                snprintf(field, sizeof(field), "files[%zu].url", i);
                *owned = true;
                return svc_fetch_url(svc, tenant, labels, url, field, data, len, err);
        }
        if (strcmp(enc, "base64") == 0) {
                *owned = true;
                if (cage_base64_decode(content, clen, data, len) < 0)
                        return cage_fail(err, -EINVAL, "files[%zu].content: not valid base64", i);
                return 0;
        }
        *data = (void *)content;
        *len = clen;
        return 0;
}

/* Writes the request's files into the workspace; the caller checked the
 * list with svc_check_files() before anything was started. */
int svc_put_files(struct cage_service *svc, const char *tenant, json_t *labels, const json_t *in,
                  int ws, struct cage_error *err)
{
        const json_t *files = json_object_get(in, "files");
        size_t i;
        const json_t *f;
        json_array_foreach(files, i, f)
        {
                void *data = NULL;
                size_t len = 0;
                bool owned = false;
                const char *path = NULL;
                int r = file_bytes(svc, tenant, labels, f, i, &data, &len, &owned, &path, err);
                struct cage_error ferr = {0};
                int w = r == 0 ? cage_files_write(ws, path, data, len, &ferr) : 0;
                if (owned)
                        free(data);
                if (r < 0)
                        return r;
                if (w < 0)
                        return cage_fail(err, w, "files[%zu]: %s", i, ferr.message);
                const char *url = json_string_value(json_object_get(f, "url"));
                json_t *fields = json_pack("{s:s, s:I, s:s}", "path", path, "size", (json_int_t)len,
                                           "source", url ? "url" : "inline");
                if (fields && url)
                        json_object_set_new(fields, "url", json_string(url));
                svc_audit(svc, CAGE_AUDIT_FILE_WRITE, tenant, NULL, labels, fields);
        }
        return 0;
}

/* The scratch tmpfs of a one-shot sandbox belongs to its user namespace,
 * where host root is unmapped: write as the sandbox's host uid. */
int svc_put_run_files(struct cage_service *svc, const char *tenant, json_t *labels,
                      struct cage_box *box, const json_t *req, int ws, struct cage_error *err)
{
        int old_gid = setfsgid(cage_box_host_gid(box));
        int old_uid = setfsuid(cage_box_host_uid(box));
        int r = svc_put_files(svc, tenant, labels, req, ws, err);
        setfsuid((uid_t)old_uid);
        setfsgid((gid_t)old_gid);
        return r;
}

/* The one-shot sandbox's /workspace, through its pid 1's root. */
int svc_open_run_workspace(struct cage_box *box, struct cage_error *err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", (int)cage_box_init_pid(box));
        _cleanup_close_ int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return cage_fail(err, -errno, "opening the run's root");
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        int fd = (int)syscall(SYS_openat2, root, "workspace", &how, sizeof(how));
        return fd < 0 ? cage_fail(err, -errno, "opening the run's workspace") : fd;
}

/* The least of what one run may keep, and which limit that is. */
struct keep_limit {
        uint64_t bytes;
        const char *what;
};

static void keep_at_most(struct keep_limit *l, uint64_t bytes, const char *what)
{
        if (bytes < l->bytes)
                *l = (struct keep_limit){bytes, what};
}

/* RUN_OUTPUT_MAX, the run's disk, the tenant's artifacts_mib and data_dir's
 * free space above its reserve: -ENOSPC when there is none. */
static int keep_limit(struct cage_service *svc, const char *tenant, uint64_t disk_bytes,
                      struct keep_limit *ret, struct cage_error *err)
{
        uint64_t spare = 0, quota = cage_config_quotas(svc->cfg, tenant)->artifacts_mib << 20;
        int r = svc_data_dir_spare(svc, &spare, err);
        if (r < 0)
                return r;
        if (spare == 0)
                return cage_fail_plain(err, -ENOSPC,
                                       "the server's data_dir is full (it keeps its reserve for "
                                       "workspaces): this run's artifacts were not kept (the run "
                                       "itself is reported as it ended)");
        *ret = (struct keep_limit){RUN_OUTPUT_MAX, "the most any run keeps"};
        keep_at_most(ret, disk_bytes, "the run's disk_mib");
        if (quota)
                keep_at_most(ret, quota, "the tenant's artifacts_mib quota");
        keep_at_most(ret, spare, "the free space of the server's data_dir above its reserve");
        return 0;
}

static int keep_failed(int r, const struct keep_limit *limit, struct cage_error *err)
{
        char why[sizeof(err->message)];
        snprintf(why, sizeof(why), "%s", err->message);
        if (r == -E2BIG)
                return cage_fail_plain(err, r,
                                       "this run's artifacts were not kept: %s (bytes: at most "
                                       "%" PRIu64 ", %s)",
                                       why, limit->bytes, limit->what);
        if (r == -ENOSPC || r == -EDQUOT)
                return cage_fail_plain(err, r,
                                       "the server's data_dir is full: this run's artifacts "
                                       "were not kept (the run itself is reported as it ended)");
        return r;
}

/* Copies output/ to <runs>/<run_id>/output for the retention period, then
 * binds it to tenant (tenancy.c): a run directory without an owner serves
 * nobody, so the owner, written last, publishes the copy whole. The copy
 * holds at most what keep_limit() allows, counted in bytes of data (a
 * sparse file costs what it holds); one that fails (over that, data_dir
 * full) is removed: no half-copied artifact is ever served. Then the
 * tenant's oldest runs go while its runs hold more than its artifacts_mib
 * (run_retention.c). */
int svc_keep_run_output(struct cage_service *svc, const char *tenant, int ws, const char *run_id,
                        uint64_t disk_bytes, struct cage_error *err)
{
        struct keep_limit limit;
        int r = keep_limit(svc, tenant, disk_bytes, &limit, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/%s", svc->runs_base, run_id) < 0)
                return cage_fail(err, -ENOMEM, "artifacts");
        if (mkdir(dir, 0700) < 0)
                return cage_fail(err, -errno, "artifacts: keeping them");
        _cleanup_close_ int run = open(dir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (run < 0)
                return cage_fail(err, -errno, "artifacts: keeping them");
        r = mkdirat(run, "output", 0700) < 0 ? -errno : 0;
        _cleanup_close_ int dfd =
                r == 0 ? openat(run, "output", O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (r == 0 && dfd < 0)
                r = -errno;
        uint64_t kept = 0;
        if (r == 0)
                r = cage_files_copy_tree(ws, "output", dfd, limit.bytes, RUN_OUTPUT_FILES, &kept,
                                         err);
        if (r == 0 && (r = svc_run_write_bytes(run, kept)) < 0)
                cage_fail(err, r, "artifacts: counting them");
        if (r == 0 && syncfs(dfd) < 0)
                r = cage_fail(err, -errno, "artifacts: flushing them");
        if (r == 0 && (r = svc_run_bind(run, tenant)) < 0)
                cage_fail(err, r, "artifacts: binding them to the tenant");
        if (r < 0) {
                svc_run_remove(AT_FDCWD, dir);
                return keep_failed(r, &limit, err);
        }
        uint64_t quota = cage_config_quotas(svc->cfg, tenant)->artifacts_mib << 20;
        if (quota)
                (void)svc_runs_trim_tenant(svc, tenant, run_id, kept, quota);
        return 0;
}

/* The run's own fields: what to run (argv, command or code), stdin. */
static int parse_run(const json_t *req, const struct svc_spec *spec, struct exec_req *q,
                     struct cage_error *err)
{
        q->owned = json_incref((json_t *)req);
        int r = run_argv(req, q, err);
        if (r < 0)
                return r;
        const json_t *in_data = json_object_get(req, "stdin");
        if (in_data && !json_is_null(in_data)) {
                if (!json_is_string(in_data))
                        return cage_fail(err, -EINVAL, "stdin: must be a string");
                q->stdin_data = json_string_value(in_data);
                q->stdin_len = json_string_length(in_data);
        }
        q->timeout_ms = spec->timeout_s_ms;
        return 0;
}

static int run_in(struct cage_service *svc, const char *tenant, struct svc_oneshot *o,
                  const struct exec_req *q, const struct cage_service_io *io, json_t **ret,
                  struct cage_error *err)
{
        struct cage_result res = {0};
        int r;
        svc_audit(svc, CAGE_AUDIT_RUN_START, tenant, NULL, o->spec->labels,
                  json_pack("{s:s, s:s}", "run_id", o->run_id, "program", q->argv[0]));
        run_exec(svc, o->box, q, o->spec->output_max_bytes, io, &res, &r, err);
        if (r == 0 && !(*ret = svc_result_json(svc, &res, NULL)))
                r = cage_fail(err, -ENOMEM, "result");
        if (r == 0) {
                svc_oneshot_finish(svc, tenant, o, *ret);
                json_t *fields = audit_fields(&res, q->argv[0]);
                json_object_set_new(fields, "run_id", json_string(o->run_id));
                svc_audit(svc, CAGE_AUDIT_RUN_END, tenant, NULL, o->spec->labels, fields);
        }
        cage_result_free(&res);
        return r;
}

int cage_service_run(struct cage_service *svc, const char *tenant, const json_t *req,
                     const struct cage_service_io *io, json_t **ret, struct cage_error *err)
{
        struct svc_oneshot o = {.ws = -1};
        struct exec_req q = {0};
        struct svc_call call;
        int r = svc_call_begin(svc, tenant, CAGE_METRIC_RUN_SHELL, &call, err);
        if (r == 0)
                r = svc_oneshot_prepare(svc, tenant, req, run_extra, &o, err);
        if (r == 0)
                r = parse_run(req, o.spec, &q, err);
        if (r == 0)
                r = svc_oneshot_start(svc, tenant, req, false, io, &o, err);
        if (r == 0 && o.failed) /* pip failed: that is the run's result */
                *ret = svc_oneshot_failed_result(&o);
        else if (r == 0)
                r = run_in(svc, tenant, &o, &q, io, ret, err);
        exec_req_free(&q);
        svc_oneshot_free(svc, &o);
        svc_audit_denied(svc, r, tenant, NULL, err);
        svc_call_end(&call, r, r == 0 ? *ret : NULL);
        return r;
}

/* ---- run artifacts ---- */

int cage_service_run_file_read(struct cage_service *svc, const char *tenant, const char *run_id,
                               const char *path, size_t max, void **ret_data, size_t *ret_len,
                               struct cage_error *err)
{
        if (!svc_run_id_valid(run_id)) /* ids are 32 lowercase hex digits */
                return cage_fail_plain(err, -ENOENT, "no run \"%.40s\"", run_id ? run_id : "");
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/%s", svc->runs_base, run_id) < 0)
                return cage_fail(err, -ENOMEM, "path");
        _cleanup_close_ int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || !svc_run_owned_by(fd, tenant)) /* another tenant's run does not exist */
                return cage_fail_plain(err, -ENOENT, "no artifacts of run %s (none, or expired)",
                                       run_id);
        char rel[CAGE_FILES_PATH_MAX + 1], full[CAGE_FILES_PATH_MAX + 16];
        int r = cage_files_check_path(path, rel, err);
        if (r < 0)
                return r;
        snprintf(full, sizeof(full), "%s%s", strncmp(rel, "output/", 7) == 0 ? "" : "output/", rel);
        r = cage_files_read(fd, full, max, ret_data, ret_len, err);
        if (r == 0)
                svc_audit(svc, CAGE_AUDIT_FILE_READ, tenant, run_id, NULL,
                          json_pack("{s:s, s:I}", "path", full, "size", (json_int_t)*ret_len));
        return r;
}
