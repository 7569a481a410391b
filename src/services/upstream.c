/* Code mode's MCP client; see upstream.h.
 *
 * One struct upstream per configured server: its process (stdin/stdout
 * pipes; stderr goes to ours, the server log), the tools it offers that the
 * config allows, and a lock that serialises its JSON-RPC exchanges
 * (newline-delimited messages, as MCP's stdio transport says). A tool is
 * tools.<tool> in the first server that offers it, and tools.<server>__<tool>
 * in any. Everything an upstream sends is bounded (line length, tool count)
 * and parsed strictly.
 *
 * Two protocol eras: a started server is first asked server/discover with
 * the request _meta of revision 2026-07-28; one that lists that revision
 * in supportedVersions is spoken to statelessly (every request carries
 * its _meta, no initialize), any other answer (an error, another list)
 * gets initialize of 2025-11-25 on the same process, and one that does not
 * answer within UPSTREAM_PROBE_MS (or exits) is started again for
 * initialize. */
#include "upstream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define PROTOCOL_VERSION  "2025-11-25"
#define PROTOCOL_MODERN   "2026-07-28"
#define UPSTREAM_PROBE_MS 10000

extern char **environ;

struct upstream {
        char *name;
        json_t *command; /* array of strings */
        json_t *allow;   /* array of names, or NULL: every tool */
        pthread_mutex_t lock;
        pid_t pid;
        int to_fd, from_fd;
        char *buf; /* bytes read but not yet consumed */
        size_t buf_len;
        long next_id;
        bool modern;   /* it speaks 2026-07-28: every request carries its _meta */
        json_t *tools; /* [{name, description, inputSchema}] as the server listed them */
};

struct cage_upstreams {
        struct upstream *servers;
        size_t n;
        pthread_mutex_t lock; /* the merged tool table */
        json_t *table;        /* {exposed name: {server, tool, spec}} */
        json_t *list;         /* what tools.list() returns */
};

/* ---- one process ---- */

static void stop_process(struct upstream *s)
{
        if (s->pid > 0) {
                kill(s->pid, SIGKILL);
                while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        s->pid = 0;
        if (s->to_fd >= 0)
                close(s->to_fd);
        if (s->from_fd >= 0)
                close(s->from_fd);
        s->to_fd = s->from_fd = -1;
        free(s->buf);
        s->buf = NULL;
        s->buf_len = 0;
}

static int spawn_process(struct upstream *s, struct cage_error *err)
{
        size_t argc = json_array_size(s->command);
        _cleanup_free_ char **argv = calloc(argc + 1, sizeof(char *));
        int in[2] = {-1, -1}, out[2] = {-1, -1};
        if (!argv || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
                int e = errno;
                for (int i = 0; i < 2; i++) {
                        if (in[i] >= 0)
                                close(in[i]);
                        if (out[i] >= 0)
                                close(out[i]);
                }
                return cage_fail(err, -e, "upstream %s: pipes", s->name);
        }
        for (size_t i = 0; i < argc; i++)
                argv[i] = (char *)json_string_value(json_array_get(s->command, i));
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        int r = posix_spawn(&s->pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(in[0]);
        close(out[1]);
        s->to_fd = in[1];
        s->from_fd = out[0];
        if (r != 0) {
                s->pid = 0;
                stop_process(s);
                return cage_fail(err, -r, "upstream %s: starting %s", s->name, argv[0]);
        }
        return 0;
}

static int send_message(struct upstream *s, json_t *msg)
{
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        text[len] = '\n'; /* json_dumps left room: replace the NUL */
        return write_all(s->to_fd, text, len + 1) < 0 ? -errno : 0;
}

/* The next newline-terminated message, within the deadline. */
static int read_line(struct upstream *s, int64_t deadline, json_t **ret)
{
        for (;;) {
                char *nl = s->buf ? memchr(s->buf, '\n', s->buf_len) : NULL;
                if (nl) {
                        size_t n = (size_t)(nl - s->buf);
                        json_t *msg = json_loadb(s->buf, n, 0, NULL);
                        memmove(s->buf, nl + 1, s->buf_len - n - 1);
                        s->buf_len -= n + 1;
                        if (!msg && n > 0)
                                return -EPROTO;
                        if (!msg)
                                continue;
                        *ret = msg;
                        return 0;
                }
                if (s->buf_len >= UPSTREAM_LINE_MAX)
                        return -E2BIG;
                int64_t left = deadline - clock_mono_ms();
                struct pollfd p = {.fd = s->from_fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) == 0)
                        return -ETIMEDOUT;
                char *grown = realloc(s->buf, s->buf_len + 65536);
                if (!grown)
                        return -ENOMEM;
                s->buf = grown;
                ssize_t got = read(s->from_fd, s->buf + s->buf_len, 65536);
                if (got == 0)
                        return -EPIPE;
                if (got < 0 && errno != EINTR)
                        return -errno;
                if (got > 0)
                        s->buf_len += (size_t)got;
        }
}

/* The params of a request: in revision 2026-07-28 with the _meta every
 * request carries (no client capabilities: code mode offers none). */
static json_t *request_params(bool modern, json_t *params)
{
        json_t *p = params ? json_copy(params) : json_object();
        if (!p || !modern)
                return p;
        json_t *meta =
                json_pack("{s:s, s:{}, s:{s:s, s:s}}", "io.modelcontextprotocol/protocolVersion",
                          PROTOCOL_MODERN, "io.modelcontextprotocol/clientCapabilities",
                          "io.modelcontextprotocol/clientInfo", "name", "codecage", "version",
                          CODECAGE_VERSION);
        if (!meta || json_object_set_new(p, "_meta", meta) < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

/* A 2026-07-28 result that is not complete: the upstream asked for input
 * (elicitation, sampling, roots) that code mode cannot give, or answered
 * something this client does not know. */
static int incomplete(struct upstream *s, const json_t *result, char **error)
{
        const char *type = json_string_value(json_object_get(result, "resultType"));
        if (!s->modern || !type || strcmp(type, "complete") == 0)
                return 0;
        if (asprintf(error,
                     strcmp(type, "input_required") == 0
                             ? "upstream %s: the tool asked for input from the user or a model, "
                               "which code mode does not provide"
                             : "upstream %s: an answer of result type %.40s",
                     s->name, type) < 0)
                *error = NULL;
        return -EREMOTEIO;
}

/* One request and its answer within timeout_ms (notifications and
 * requests from the upstream in between are skipped: we offer it no
 * capabilities). */
static int request_within(struct upstream *s, bool modern, const char *method, json_t *params,
                          int64_t timeout_ms, json_t **result, char **error)
{
        long id = ++s->next_id;
        json_t *p = request_params(modern, params);
        json_t *msg = p ? json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id,
                                    "method", method, "params", p)
                        : NULL;
        int r = msg ? send_message(s, msg) : -ENOMEM;
        json_decref(msg);
        int64_t deadline = clock_mono_ms() + timeout_ms;
        while (r == 0) {
                json_t *answer = NULL;
                if ((r = read_line(s, deadline, &answer)) < 0)
                        break;
                json_t *aid = json_object_get(answer, "id");
                bool ours = json_is_integer(aid) && json_integer_value(aid) == id &&
                            !json_object_get(answer, "method");
                if (ours) {
                        json_t *e = json_object_get(answer, "error");
                        if (e) {
                                const char *m = json_string_value(json_object_get(e, "message"));
                                if (asprintf(error, "upstream %s: %s", s->name, m ? m : "error") <
                                    0)
                                        *error = NULL;
                                r = -EREMOTEIO;
                        } else {
                                *result = json_incref(json_object_get(answer, "result"));
                                r = incomplete(s, *result, error);
                        }
                        json_decref(answer);
                        return r;
                }
                json_decref(answer);
        }
        stop_process(s); /* a broken exchange: start afresh next time */
        return r;
}

static int request(struct upstream *s, const char *method, json_t *params, json_t **result,
                   char **error)
{
        return request_within(s, s->modern, method, params, UPSTREAM_TIMEOUT_MS, result, error);
}

/* server/discover: whether the server speaks 2026-07-28; -errno when it
 * did not answer (the process is stopped then). */
static int discover(struct upstream *s)
{
        json_t *result = NULL;
        char *error = NULL;
        int r = request_within(s, true, "server/discover", NULL, UPSTREAM_PROBE_MS, &result,
                               &error);
        free(error);
        bool modern = false;
        size_t i;
        json_t *v;
        json_array_foreach(r == 0 ? json_object_get(result, "supportedVersions") : NULL, i, v)
                modern |= json_is_string(v) && strcmp(json_string_value(v), PROTOCOL_MODERN) == 0;
        json_decref(result);
        if (r < 0 && r != -EREMOTEIO)
                return r;
        return modern;
}

static int initialize(struct upstream *s, struct cage_error *err)
{
        json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", PROTOCOL_VERSION,
                                   "capabilities", "clientInfo", "name", "codecage", "version",
                                   CODECAGE_VERSION);
        json_t *result = NULL;
        char *error = NULL;
        s->modern = false;
        int r = spawn_process(s, err);
        int probe = r == 0 ? discover(s) : 0;
        if (probe > 0) { /* revision 2026-07-28: no handshake */
                json_decref(params);
                s->modern = true;
                return 0;
        }
        if (r == 0 && probe < 0) /* no answer: a fresh process for initialize */
                r = spawn_process(s, err);
        if (r == 0)
                r = request(s, "initialize", params, &result, &error);
        json_decref(params);
        json_decref(result);
        if (r == 0) {
                json_t *note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                                         "notifications/initialized");
                r = note ? send_message(s, note) : -ENOMEM;
                json_decref(note);
        }
        if (r < 0) {
                cage_fail(err, r, "upstream %s: initialize: %s", s->name, error ? error : "");
                stop_process(s);
        }
        free(error);
        return r;
}

static bool allowed(const struct upstream *s, const char *tool)
{
        if (!s->allow)
                return true;
        size_t i;
        json_t *a;
        json_array_foreach(s->allow, i, a) if (strcmp(json_string_value(a), tool) == 0) return true;
        return false;
}

/* tools/list, following cursors, keeping the allowed tools. */
static int list_tools(struct upstream *s, struct cage_error *err)
{
        json_t *tools = json_array(), *cursor = NULL;
        int r = 0;
        for (int page = 0; page < 64 && r == 0; page++) {
                json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : json_object();
                json_t *result = NULL;
                char *error = NULL;
                r = request(s, "tools/list", params, &result, &error);
                json_decref(params);
                free(error);
                json_t *list = json_object_get(result, "tools");
                size_t i;
                json_t *t;
                json_array_foreach(list, i, t)
                {
                        const char *name = json_string_value(json_object_get(t, "name"));
                        if (name && allowed(s, name) && json_array_size(tools) < UPSTREAM_TOOLS_MAX)
                                json_array_append(tools, t);
                }
                json_decref(cursor);
                cursor = json_incref(json_object_get(result, "nextCursor"));
                json_decref(result);
                if (!json_is_string(cursor))
                        break;
        }
        json_decref(cursor);
        if (r < 0) {
                json_decref(tools);
                return cage_fail(err, r, "upstream %s: tools/list", s->name);
        }
        json_decref(s->tools);
        s->tools = tools;
        return 0;
}

/* With s->lock held: the process is running and initialised. */
static int ensure_started(struct upstream *s, struct cage_error *err)
{
        if (s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0)
                return 0;
        if (s->pid > 0) {
                s->pid = 0; /* reaped just now */
                stop_process(s);
        }
        int r = initialize(s, err);
        return r < 0 ? r : list_tools(s, err);
}

/* ---- the merged table ---- */

static json_t *describe_tool(const char *name, const char *server, json_t *spec)
{
        json_t *desc = json_object_get(spec, "description");
        json_t *schema = json_object_get(spec, "inputSchema");
        return json_pack("{s:s, s:s, s:O, s:O}", "name", name, "server", server, "description",
                         json_is_string(desc) ? desc : json_string(""), "input_schema",
                         json_is_object(schema) ? schema : json_object());
}

static int build_table(struct cage_upstreams *u, struct cage_error *err)
{
        json_t *table = json_object(), *list = json_array();
        for (size_t i = 0; i < u->n; i++) {
                struct upstream *s = &u->servers[i];
                pthread_mutex_lock(&s->lock);
                int r = ensure_started(s, err);
                size_t k;
                json_t *t;
                json_array_foreach(r == 0 ? s->tools : NULL, k, t)
                {
                        const char *name = json_string_value(json_object_get(t, "name"));
                        char qualified[256];
                        snprintf(qualified, sizeof(qualified), "%s__%s", s->name, name);
                        json_t *entry = json_pack("{s:i, s:s, s:O}", "server", (int)i, "tool", name,
                                                  "spec", t);
                        bool first = !json_object_get(table, name);
                        if (first)
                                json_object_set(table, name, entry);
                        json_object_set(table, qualified, entry);
                        json_array_append_new(list,
                                              describe_tool(first ? name : qualified, s->name, t));
                        json_decref(entry);
                }
                pthread_mutex_unlock(&s->lock);
                if (r < 0) {
                        json_decref(table);
                        json_decref(list);
                        return r;
                }
        }
        json_decref(u->table);
        json_decref(u->list);
        u->table = table;
        u->list = list;
        return 0;
}

/* A tools/call result as the value Python gets: structuredContent when
 * there is one, else the text (one string, or a list of them). */
static int call_result(json_t *result, const char *name, json_t **value, char **error)
{
        json_t *content = json_object_get(result, "content");
        json_t *texts = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(content, i, c)
        {
                json_t *t = json_object_get(c, "text");
                if (json_is_string(t))
                        json_array_append(texts, t);
        }
        if (json_is_true(json_object_get(result, "isError"))) {
                const char *first = json_string_value(json_array_get(texts, 0));
                if (asprintf(error, "tools.%s: %s", name, first ? first : "(no message)") < 0)
                        *error = NULL;
        } else if (json_object_get(result, "structuredContent")) {
                *value = json_incref(json_object_get(result, "structuredContent"));
        } else if (json_array_size(texts) == 1) {
                *value = json_incref(json_array_get(texts, 0));
        } else {
                *value = json_incref(texts);
        }
        json_decref(texts);
        return 0;
}

int cage_upstreams_call(struct cage_upstreams *u, const char *fn, json_t *kwargs, json_t **value,
                        char **error)
{
        struct cage_error err = {0};
        if (strncmp(fn, "tools.", 6) != 0)
                return -EINVAL;
        const char *name = fn + 6;
        pthread_mutex_lock(&u->lock);
        int r = u->table ? 0 : build_table(u, &err);
        json_t *entry = r == 0 ? json_incref(json_object_get(u->table, name)) : NULL;
        if (r == 0 && strcmp(name, "list") == 0) {
                *value = json_deep_copy(u->list);
                pthread_mutex_unlock(&u->lock);
                return 0;
        }
        pthread_mutex_unlock(&u->lock);
        if (r < 0) {
                *error = strdup(err.message);
                return 0;
        }
        if (!entry) {
                if (asprintf(error,
                             "tools.%.100s: no upstream MCP server has this tool (or the config "
                             "does not allow it); tools.list() shows the tools there are",
                             name) < 0)
                        *error = NULL;
                return 0;
        }
        struct upstream *s = &u->servers[json_integer_value(json_object_get(entry, "server"))];
        json_t *params = json_pack("{s:O, s:O}", "name", json_object_get(entry, "tool"),
                                   "arguments", kwargs ? kwargs : json_object());
        json_t *result = NULL;
        pthread_mutex_lock(&s->lock);
        r = ensure_started(s, &err);
        if (r == 0)
                r = request(s, "tools/call", params, &result, error);
        pthread_mutex_unlock(&s->lock);
        json_decref(params);
        json_decref(entry);
        if (r < 0 && !*error)
                *error = strdup(err.message[0] ? err.message : "the upstream server failed");
        if (r == 0)
                call_result(result, name, value, error);
        json_decref(result);
        return 0;
}

/* ---- lifecycle ---- */

int cage_upstreams_open(const json_t *servers, struct cage_upstreams **ret, struct cage_error *err)
{
        struct cage_upstreams *u = calloc(1, sizeof(*u));
        size_t n = json_array_size(servers);
        if (!u || !(u->servers = calloc(n ? n : 1, sizeof(*u->servers)))) {
                free(u);
                return cage_fail(err, -ENOMEM, "upstreams");
        }
        pthread_mutex_init(&u->lock, NULL);
        for (size_t i = 0; i < n; i++) {
                const json_t *e = json_array_get(servers, i);
                struct upstream *s = &u->servers[i];
                s->name = strdup(json_string_value(json_object_get(e, "name")));
                s->command = json_deep_copy(json_object_get(e, "command"));
                json_t *allow = json_object_get(e, "allow");
                s->allow = allow ? json_deep_copy(allow) : NULL;
                s->to_fd = s->from_fd = -1;
                pthread_mutex_init(&s->lock, NULL);
                u->n++;
                if (!s->name || !s->command) {
                        cage_upstreams_close(u);
                        return cage_fail(err, -ENOMEM, "upstreams");
                }
        }
        *ret = u;
        return 0;
}

struct cage_upstreams *cage_upstreams_close(struct cage_upstreams *u)
{
        if (!u)
                return NULL;
        for (size_t i = 0; i < u->n; i++) {
                struct upstream *s = &u->servers[i];
                stop_process(s);
                free(s->name);
                json_decref(s->command);
                json_decref(s->allow);
                json_decref(s->tools);
                pthread_mutex_destroy(&s->lock);
        }
        free(u->servers);
        json_decref(u->table);
        json_decref(u->list);
        pthread_mutex_destroy(&u->lock);
        free(u);
        return NULL;
}

bool cage_upstreams_any(const struct cage_upstreams *u)
{
        return u && u->n > 0;
}
