/* Code mode: upstream MCP servers whose tools Python code calls as
 * tools.<tool>(**arguments), so a model writes one program instead of
 * twenty tool calls. The operator names them on the command line
 * (`codecage mcp --upstream NAME=COMMAND ARGS...`, `codecage serve
 * --mcp-upstream ...`); clients cannot add any.
 *
 * Each upstream is an MCP server over stdio, started on first use (posix_
 * spawn, our stdin/stdout pipes, its stderr is ours), initialized, and its
 * tools listed once; it lives until the server stops. One reader thread
 * per upstream routes answers to the waiting callers by id, answers its
 * pings and refuses its other requests. tools.list() lists every tool;
 * tools.<tool> finds a tool by name in the first upstream that has it,
 * or as tools.<upstream>__<tool>. A tool's structuredContent is the value
 * the code gets; without it, its text; an isError result raises
 * HostCallError. Lines from an upstream are bounded (UPSTREAM_LINE_MAX),
 * as are upstreams, tools and the wait for an answer.
 *
 * Locking: up->lock guards the state, the pending list and the tools;
 * up->write_lock keeps whole lines on the upstream's stdin. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/mcp.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define UPSTREAM_LINE_MAX  (16 * 1024 * 1024)
#define UPSTREAM_WAIT_MS   (300 * 1000)
#define UPSTREAM_TOOLS_MAX 1000
#define UPSTREAM_PAGES_MAX 20
#define UPSTREAM_ARGS_MAX  64
#define UPSTREAM_NAME_MAX  32

extern char **environ;

enum upstream_state { UP_IDLE, UP_STARTING, UP_READY, UP_FAILED };

struct upstream_pending {
        json_int_t id;
        json_t *answer;
        struct upstream_pending *next;
};

struct mcp_upstream {
        char name[UPSTREAM_NAME_MAX + 1];
        char **argv;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* state changed, an answer arrived */
        pthread_mutex_t write_lock;
        enum upstream_state state;
        char error[256];
        pid_t pid;
        int to_fd, from_fd;
        pthread_t reader;
        bool reader_started;
        struct upstream_pending *pending;
        json_int_t next_id;
        json_t *tools;
};

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

/* ---- configuration ---------------------------------------------------------------- */

static bool name_ok(const char *s, size_t n)
{
        if (n == 0 || n > UPSTREAM_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
                        return false;
        return true;
}

/* "NAME=COMMAND ARGS..." (split at spaces, no quoting) into up. */
static int parse_spec(const char *spec, struct mcp_upstream *up, struct cage_error *err)
{
        const char *eq = strchr(spec, '=');
        if (!eq || !name_ok(spec, (size_t)(eq - spec)))
                return cage_fail(err, -EINVAL,
                                 "upstream \"%.64s\": must be NAME=COMMAND with NAME of "
                                 "[a-z0-9_] (at most %d characters)",
                                 spec, UPSTREAM_NAME_MAX);
        memcpy(up->name, spec, (size_t)(eq - spec));
        up->argv = calloc(UPSTREAM_ARGS_MAX + 1, sizeof(char *));
        _cleanup_free_ char *copy = strdup(eq + 1);
        if (!up->argv || !copy)
                return cage_fail(err, -ENOMEM, "upstream");
        size_t n = 0;
        char *save = NULL;
        for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
                if (n == UPSTREAM_ARGS_MAX || !(up->argv[n++] = strdup(w)))
                        return cage_fail(err, -EINVAL, "upstream %s: too many arguments", up->name);
        }
        if (n == 0)
                return cage_fail(err, -EINVAL, "upstream %s: the command is empty", up->name);
        return 0;
}

static void upstream_free(struct mcp_upstream *up);

static struct mcp_upstream *upstream_new(void)
{
        struct mcp_upstream *up = calloc(1, sizeof(*up));
        if (!up)
                return NULL;
        up->to_fd = up->from_fd = -1;
        pthread_mutex_init(&up->lock, NULL);
        pthread_mutex_init(&up->write_lock, NULL);
        pthread_cond_init(&up->cond, NULL);
        return up;
}

int mcp_upstreams_load(struct mcp_server *srv, const char *const *specs, size_t n,
                       struct cage_error *err)
{
        if (n > MCP_UPSTREAMS_MAX)
                return cage_fail(err, -EINVAL, "at most %d upstream MCP servers",
                                 MCP_UPSTREAMS_MAX);
        srv->upstreams = calloc(n ? n : 1, sizeof(*srv->upstreams));
        if (!srv->upstreams)
                return cage_fail(err, -ENOMEM, "upstreams");
        for (size_t i = 0; i < n; i++) {
                struct mcp_upstream *up = upstream_new();
                if (!up)
                        return cage_fail(err, -ENOMEM, "upstreams");
                srv->upstreams[srv->n_upstreams++] = up;
                int r = parse_spec(specs[i], up, err);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(srv->upstreams[j]->name, up->name) == 0)
                                return cage_fail(err, -EINVAL, "upstream %s: named twice",
                                                 up->name);
        }
        return 0;
}

/* ---- the channel ----------------------------------------------------------------------- */

/* With the lock held: the upstream is unusable from now on. */
static void fail_locked(struct mcp_upstream *up, const char *why)
{
        bool prefixed = strncmp(why, "upstream MCP server ", 20) == 0;
        if (up->state != UP_FAILED)
                snprintf(up->error, sizeof(up->error), "%s%s%s%s",
                         prefixed ? "" : "upstream MCP server ", prefixed ? "" : up->name,
                         prefixed ? "" : ": ", why);
        up->state = UP_FAILED;
        pthread_cond_broadcast(&up->cond);
}

static int send_line(struct mcp_upstream *up, const json_t *msg)
{
        char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        text[n] = '\n';
        pthread_mutex_lock(&up->write_lock);
        int r = write_all(up->to_fd, text, n + 1);
        pthread_mutex_unlock(&up->write_lock);
        free(text);
        return r;
}

/* A request of the upstream to us: ping is answered, the rest refused. */
static void answer_request(struct mcp_upstream *up, const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        const json_t *id = jsonrpc_id(msg);
        json_auto_t *reply = strcmp(method, "ping") == 0
                                     ? jsonrpc_result(id, NULL)
                                     : jsonrpc_error(id, JSONRPC_METHOD_NOT_FOUND,
                                                     "codecage offers no such method to "
                                                     "upstream servers");
        if (reply)
                (void)send_line(up, reply);
}

static void route(struct mcp_upstream *up, const char *line, size_t len)
{
        json_t *error = NULL;
        json_auto_t *msg = jsonrpc_parse(line, len, &error);
        const char *why;
        json_decref(error);
        if (!msg)
                return;
        enum jsonrpc_kind kind = jsonrpc_classify(msg, &why);
        if (kind == JSONRPC_REQUEST) {
                answer_request(up, msg);
                return;
        }
        const json_t *id = json_object_get(msg, "id");
        if (kind != JSONRPC_RESPONSE || !json_is_integer(id))
                return; /* notifications (logs, progress) are not relayed */
        pthread_mutex_lock(&up->lock);
        for (struct upstream_pending *p = up->pending; p; p = p->next)
                if (p->id == json_integer_value(id) && !p->answer) {
                        p->answer = json_incref(msg);
                        pthread_cond_broadcast(&up->cond);
                        break;
                }
        pthread_mutex_unlock(&up->lock);
}

static void *reader_main(void *arg)
{
        struct mcp_upstream *up = arg;
        size_t cap = 64 * 1024, len = 0;
        char *buf = malloc(cap);
        ssize_t n = 1;
        while (buf && n > 0 && len < UPSTREAM_LINE_MAX) {
                if (cap - len < 4096) {
                        char *nb = realloc(buf, cap * 2);
                        if (!nb)
                                break;
                        buf = nb;
                        cap *= 2;
                }
                n = read(up->from_fd, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        n = 1;
                else if (n > 0)
                        len += (size_t)n;
                char *nl;
                size_t start = 0;
                while ((nl = memchr(buf + start, '\n', len - start))) {
                        route(up, buf + start, (size_t)(nl - (buf + start)));
                        start = (size_t)(nl - buf) + 1;
                }
                memmove(buf, buf + start, len - start);
                len -= start;
        }
        free(buf);
        pthread_mutex_lock(&up->lock);
        fail_locked(up, len >= UPSTREAM_LINE_MAX ? "sent a message over 16 MiB" : "it exited");
        pthread_mutex_unlock(&up->lock);
        return NULL;
}

static void deadline_after(struct timespec *ts, uint64_t ms)
{
        clock_gettime(CLOCK_REALTIME, ts);
        ts->tv_sec += (time_t)(ms / 1000);
}

/* One request; 0 with *result, or -1 with *error (both new). */
static int request(struct mcp_upstream *up, const char *method, json_t *params, json_t **result,
                   char **error)
{
        struct upstream_pending p = {0};
        struct timespec deadline;
        pthread_mutex_lock(&up->lock);
        p.id = ++up->next_id;
        p.next = up->pending;
        up->pending = &p;
        pthread_mutex_unlock(&up->lock);
        json_auto_t *msg = jsonrpc_request(p.id, method, params);
        int r = msg ? send_line(up, msg) : -ENOMEM;
        deadline_after(&deadline, UPSTREAM_WAIT_MS);
        pthread_mutex_lock(&up->lock);
        while (r == 0 && !p.answer && up->state != UP_FAILED)
                if (pthread_cond_timedwait(&up->cond, &up->lock, &deadline) == ETIMEDOUT)
                        r = -ETIMEDOUT;
        for (struct upstream_pending **q = &up->pending; *q; q = &(*q)->next)
                if (*q == &p) {
                        *q = p.next;
                        break;
                }
        pthread_mutex_unlock(&up->lock);
        json_auto_t *answer = p.answer;
        const json_t *err = json_object_get(answer, "error");
        if (!answer || err) {
                const char *m = json_string_value(json_object_get(err, "message"));
                if (asprintf(error, "upstream MCP server %s: %s: %.300s", up->name, method,
                             m                 ? m
                             : r == -ETIMEDOUT ? "no answer in time"
                                               : "it is gone") < 0)
                        *error = NULL;
                return -1;
        }
        *result = json_incref(json_object_get(answer, "result"));
        return 0;
}

/* ---- start ----------------------------------------------------------------------------- */

static int spawn(struct mcp_upstream *up)
{
        int to[2], from[2];
        if (pipe2(to, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(from, O_CLOEXEC) < 0) {
                int r = -errno;
                close(to[0]);
                close(to[1]);
                return r;
        }
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none, defaults;
        sigemptyset(&none);
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGPIPE); /* ignored here, not in the upstream */
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, to[0], STDIN_FILENO);
        posix_spawn_file_actions_adddup2(&fa, from[1], STDOUT_FILENO);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        posix_spawnattr_setsigmask(&attr, &none); /* SIGTERM is blocked in our threads */
        posix_spawnattr_setsigdefault(&attr, &defaults);
        int r = -posix_spawnp(&up->pid, up->argv[0], &fa, &attr, up->argv, environ);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        close(to[0]);
        close(from[1]);
        up->to_fd = to[1];
        up->from_fd = from[0];
        if (r < 0)
                up->pid = 0;
        return r;
}

static int list_tools(struct mcp_upstream *up, char **error)
{
        json_auto_t *tools = json_array();
        json_auto_t *cursor = NULL;
        for (int page = 0; page < UPSTREAM_PAGES_MAX; page++) {
                json_auto_t *result = NULL;
                json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
                if (request(up, "tools/list", params, &result, error) < 0)
                        return -1;
                json_array_extend(tools, json_object_get(result, "tools"));
                json_decref(cursor);
                cursor = json_incref(json_object_get(result, "nextCursor"));
                if (!json_is_string(cursor) || json_array_size(tools) > UPSTREAM_TOOLS_MAX)
                        break;
        }
        pthread_mutex_lock(&up->lock);
        up->tools = json_incref(tools);
        pthread_mutex_unlock(&up->lock);
        return 0;
}

static int handshake(struct mcp_upstream *up, char **error)
{
        json_auto_t *result = NULL;
        json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                                   MCP_VERSION_LATEST, "capabilities", "clientInfo", "name",
                                   MCP_SERVER_NAME, "version", CODECAGE_VERSION);
        if (request(up, "initialize", params, &result, error) < 0)
                return -1;
        json_auto_t *note = jsonrpc_notification("notifications/initialized", NULL);
        if (!note || send_line(up, note) < 0)
                return -1;
        return list_tools(up, error);
}

static int start(struct mcp_upstream *up, char **error)
{
        int r = spawn(up);
        if (r == 0) {
                r = -pthread_create(&up->reader, NULL, reader_main, up);
                up->reader_started = r == 0;
        }
        if (r == 0 && handshake(up, error) < 0)
                r = -EPROTO;
        pthread_mutex_lock(&up->lock);
        if (r == 0 && up->state == UP_STARTING)
                up->state = UP_READY;
        else
                fail_locked(up, *error         ? *error
                                : r == -ENOENT ? "cannot run its command"
                                               : "it did not start");
        pthread_cond_broadcast(&up->cond);
        pthread_mutex_unlock(&up->lock);
        return up->state == UP_READY ? 0 : -1;
}

/* Starts up once (any thread may ask; the others wait): 0 or -1 with
 * *error. */
static int ready(struct mcp_upstream *up, char **error)
{
        pthread_mutex_lock(&up->lock);
        while (up->state == UP_STARTING)
                pthread_cond_wait(&up->cond, &up->lock);
        enum upstream_state st = up->state;
        if (st == UP_IDLE)
                up->state = UP_STARTING;
        pthread_mutex_unlock(&up->lock);
        if (st == UP_IDLE) {
                char *why = NULL;
                int r = start(up, &why);
                free(why);
                if (r == 0)
                        return 0;
        } else if (st == UP_READY) {
                return 0;
        }
        pthread_mutex_lock(&up->lock);
        *error = strdup(up->error);
        pthread_mutex_unlock(&up->lock);
        return -1;
}

/* ---- tools.* ------------------------------------------------------------------------- */

static json_t *tool_list(struct mcp_server *srv, char **error)
{
        json_t *list = json_array();
        for (size_t i = 0; list && i < srv->n_upstreams; i++) {
                struct mcp_upstream *up = srv->upstreams[i];
                size_t j;
                const json_t *t;
                if (ready(up, error) < 0) {
                        json_decref(list);
                        return NULL;
                }
                json_array_foreach(up->tools, j, t) json_array_append_new(
                        list, json_pack("{s:O?, s:s, s:O?, s:O?}", "name",
                                        json_object_get(t, "name"), "server", up->name,
                                        "description", json_object_get(t, "description"),
                                        "input_schema", json_object_get(t, "inputSchema")));
        }
        return list;
}

static bool has_tool(const struct mcp_upstream *up, const char *name)
{
        size_t i;
        const json_t *t;
        json_array_foreach(up->tools, i, t)
        {
                const char *n = json_string_value(json_object_get(t, "name"));
                if (n && strcmp(n, name) == 0)
                        return true;
        }
        return false;
}

/* The upstream and tool name of tools.<fn>: <tool> or <upstream>__<tool>.
 * An upstream that cannot start is skipped (its error is reported when no
 * other has the tool). */
static struct mcp_upstream *find(struct mcp_server *srv, const char *fn, const char **tool,
                                 char **error)
{
        _cleanup_free_ char *broken = NULL;
        for (size_t i = 0; i < srv->n_upstreams; i++) {
                struct mcp_upstream *up = srv->upstreams[i];
                size_t n = strlen(up->name);
                char *why = NULL;
                if (ready(up, &why) < 0) {
                        if (!broken)
                                broken = TAKE_PTR(why);
                        free(why);
                        continue;
                }
                if (has_tool(up, fn)) {
                        *tool = fn;
                        return up;
                }
                if (strncmp(fn, up->name, n) == 0 && strncmp(fn + n, "__", 2) == 0 &&
                    has_tool(up, fn + n + 2)) {
                        *tool = fn + n + 2;
                        return up;
                }
        }
        if (asprintf(error,
                     "tools.%.100s: no upstream MCP server has this tool (tools.list() "
                     "lists them)%s%.300s",
                     fn, broken ? "; " : "", broken ? broken : "") < 0)
                *error = NULL;
        return NULL;
}

/* The text blocks of content joined by newlines; *all_text says whether
 * every block was text. */
static char *join_texts(const json_t *content, bool *all_text)
{
        char *text = NULL;
        size_t n = 0, i;
        const json_t *b;
        FILE *f = open_memstream(&text, &n);
        if (!f)
                return NULL;
        bool first = true;
        *all_text = true;
        json_array_foreach(content, i, b)
        {
                const json_t *t = json_object_get(b, "text");
                *all_text = *all_text && json_is_string(t);
                if (json_is_string(t))
                        fprintf(f, "%s%s", first ? "" : "\n", json_string_value(t));
                first = first && !json_is_string(t);
        }
        fclose(f);
        return text;
}

/* A CallToolResult as the code's value: structuredContent, else the text
 * (the content blocks when some are not text). */
static json_t *tool_value(const char *fn, const json_t *result, char **error)
{
        const json_t *content = json_object_get(result, "content");
        const json_t *structured = json_object_get(result, "structuredContent");
        bool all_text = true;
        _cleanup_free_ char *text = join_texts(content, &all_text);
        if (json_is_true(json_object_get(result, "isError"))) {
                if (asprintf(error, "tools.%.100s: %.2000s", fn, text ? text : "failed") < 0)
                        *error = NULL;
                return NULL;
        }
        if (structured)
                return json_deep_copy(structured);
        if (all_text)
                return json_string(text ? text : "");
        return json_deep_copy(content);
}

int mcp_upstream_call(struct mcp_server *srv, const char *fn, json_t *kwargs, json_t **value,
                      char **error)
{
        const char *tool = NULL;
        if (srv->n_upstreams == 0) {
                *error = strdup("tools.* needs upstream MCP servers, and this server has none "
                                "configured");
                return 0;
        }
        if (strcmp(fn, "list") == 0) {
                *value = tool_list(srv, error);
                return 0;
        }
        struct mcp_upstream *up = find(srv, fn, &tool, error);
        json_auto_t *result = NULL;
        if (!up)
                return 0;
        json_t *params = json_pack("{s:s, s:o}", "name", tool, "arguments",
                                   json_is_object(kwargs) ? json_incref(kwargs) : json_object());
        if (request(up, "tools/call", params, &result, error) == 0)
                *value = tool_value(fn, result, error);
        return 0;
}

/* ---- stop ------------------------------------------------------------------------------ */

/* Waits up to ms for the upstream to exit; true when it did (reaped). */
static bool reaped_within(struct mcp_upstream *up, int ms)
{
        int status;
        for (int waited = 0; up->pid > 0; waited += 50) {
                if (waitpid(up->pid, &status, WNOHANG) == up->pid)
                        up->pid = 0;
                else if (waited >= ms)
                        return false;
                else
                        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000000}, NULL);
        }
        return true;
}

/* As MCP's stdio transport says: close its input, then SIGTERM, then
 * SIGKILL. */
static void stop_process(struct mcp_upstream *up)
{
        close_fd(&up->to_fd);
        if (reaped_within(up, 1000))
                return;
        kill(up->pid, SIGTERM);
        if (reaped_within(up, 2000))
                return;
        kill(up->pid, SIGKILL);
        waitpid(up->pid, NULL, 0);
        up->pid = 0;
}

static void upstream_free(struct mcp_upstream *up)
{
        if (!up)
                return;
        stop_process(up);
        if (up->reader_started)
                pthread_join(up->reader, NULL);
        close_fd(&up->from_fd);
        for (size_t i = 0; up->argv && up->argv[i]; i++)
                free(up->argv[i]);
        free(up->argv);
        json_decref(up->tools);
        pthread_mutex_destroy(&up->lock);
        pthread_mutex_destroy(&up->write_lock);
        pthread_cond_destroy(&up->cond);
        free(up);
}

void mcp_upstreams_free(struct mcp_server *srv)
{
        for (size_t i = 0; i < srv->n_upstreams; i++)
                upstream_free(srv->upstreams[i]);
        free(srv->upstreams);
        srv->upstreams = NULL;
        srv->n_upstreams = 0;
}

char *mcp_upstreams_describe(const struct mcp_server *srv)
{
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        if (!f)
                return NULL;
        for (size_t i = 0; i < srv->n_upstreams; i++)
                fprintf(f, "%s%s", i ? ", " : "", srv->upstreams[i]->name);
        fclose(f);
        return text;
}
