/* `codecage serve`: the HTTP API (docs/API.md) on the listeners of the
 * server config (docs/CONFIG.md).
 *
 * Order matters: the config is loaded and validated (command-line listener
 * overrides are merged into the config document and the whole document is
 * validated again by services/config.c, so its rules -- e.g. no
 * unauthenticated listener beyond loopback -- hold for the overrides too);
 * SIGINT/SIGTERM/SIGHUP are blocked so every later thread inherits the
 * mask and only this thread takes them; the service is opened while the
 * process is still single-threaded (it unshares a mount namespace); then
 * the HTTP threads start.
 *
 * Signals (docs/OPERATIONS.md): SIGHUP reloads the config file (all or
 * nothing; keys that need a restart must not change) and reopens the
 * audit log. SIGINT/SIGTERM drain: /readyz turns 503, the API's listeners
 * stop accepting, new requests on open connections get 503, and running
 * calls get drain_timeout_s to finish; then the HTTP server stops
 * (cancelling what still runs) and the service stops its sandboxes
 * (workspaces kept). Under systemd (Type=notify) the state goes to
 * $NOTIFY_SOCKET and the watchdog is pinged while the store answers.
 * Exit status: 0 after a signal, 125 for a usage, config or start-up
 * error. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/reaper.h"
#include "server/http.h"
#include "server/mcp.h"
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/clock.h"
#include "util/fdutil.h"
#include "util/sd_notify.h"

struct serve_args {
        const char *config;
        const char *listen;
        const char *socket;
        bool no_socket;
};

static const struct option serve_options[] = {
        {"config", required_argument, NULL, 'c'}, {"listen", required_argument, NULL, 'l'},
        {"socket", required_argument, NULL, 's'}, {"no-socket", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
        fprintf(f,
                "usage: codecage serve [--config FILE] [--listen HOST:PORT] [--socket PATH] "
                "[--no-socket]\n"
                "                      [--mcp-tools LIST] [--mcp-upstream NAME=COMMAND]... "
                "[--mcp-conformance]\n\n"
                "Serves the HTTP API (docs/API.md) and MCP over Streamable HTTP at /mcp "
                "(docs/MCP.md)\nuntil SIGINT or SIGTERM (which drain first); SIGHUP reloads "
                "the config and reopens\nthe audit log (docs/OPERATIONS.md).\n\n"
                "options:\n"
                "  --config FILE        server config (docs/CONFIG.md); default: built-in "
                "defaults\n"
                "  --listen HOST:PORT   TCP address, replaces listen.http (IPV4:PORT, "
                "[IPV6]:PORT,\n"
                "                       localhost:PORT; not loopback only with tenants)\n"
                "  --socket PATH        Unix socket (mode 0600), replaces listen.unix\n"
                "  --no-socket          no Unix socket (listen.unix: null)\n"
                "  --mcp-tools LIST     MCP offers only these tools, e.g. run_python,run_shell\n"
                "  --mcp-upstream NAME=COMMAND\n"
                "                       code mode: an upstream MCP server (stdio) whose tools "
                "Python\n"
                "                       calls as tools.<tool>(...); joins the config's "
                "upstream_servers\n"
                "  --mcp-conformance    add the MCP conformance suite's test fixtures (tests "
                "only)\n"
                "  --help               show this help\n\n"
                "One log line per request goes to stderr. Exit status: 0 after SIGINT/SIGTERM, "
                "%d for a\nusage, config or start-up error.\n",
                EXIT_CODECAGE_FAILED);
}

static int on_option(void *ctx, int c, char *arg)
{
        struct serve_args *a = ctx;
        if (c == 'c')
                a->config = arg;
        else if (c == 'l')
                a->listen = arg;
        else if (c == 's')
                a->socket = arg;
        else if (c == 'n')
                a->no_socket = true;
        return 0;
}

static int parse_args(int argc, char **argv, struct serve_args *a)
{
        int r = cli_getopt(argc, argv, serve_options, on_option, usage, a);
        if (r != 0)
                return r;
        if (optind < argc || (a->socket && a->no_socket)) {
                fprintf(stderr, "codecage: serve: %s\n",
                        optind < argc ? "unexpected argument"
                                      : "--socket and --no-socket exclude each other");
                usage(stderr);
                return -EINVAL;
        }
        return 0;
}

/* The config file as a JSON document (read like config.c reads it: a
 * regular file of bounded size; a syntax error shows only line and column,
 * never an excerpt, which could hold a secret). */
static int read_config_doc(const char *path, json_t **ret, struct cage_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "cannot open");
        if (!S_ISREG(st.st_mode) || st.st_size > CAGE_CONFIG_FILE_MAX)
                return cage_fail(err, -EINVAL, "not a regular file of at most %d bytes",
                                 CAGE_CONFIG_FILE_MAX);
        _cleanup_free_ char *text = malloc((size_t)st.st_size + 1);
        if (!text)
                return cage_fail(err, -ENOMEM, "config");
        ssize_t n = read_full(fd, text, (size_t)st.st_size);
        if (n < 0)
                return cage_fail(err, (int)n, "cannot read");
        json_error_t jerr;
        *ret = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
        explicit_bzero(text, (size_t)n);
        if (!*ret)
                return cage_fail(err, -EINVAL, "invalid JSON at line %d, column %d", jerr.line,
                                 jerr.column);
        return 0;
}

static int set_listen(json_t *root, const struct serve_args *a)
{
        json_t *listen = json_object_get(root, "listen");
        if (!json_is_object(listen)) {
                listen = json_object();
                if (!listen || json_object_set_new(root, "listen", listen) < 0)
                        return -ENOMEM;
        }
        if (a->listen && json_object_set_new(listen, "http", json_string(a->listen)) < 0)
                return -ENOMEM;
        if (a->socket && json_object_set_new(listen, "unix", json_string(a->socket)) < 0)
                return -ENOMEM;
        if (a->no_socket && json_object_set_new(listen, "unix", json_null()) < 0)
                return -ENOMEM;
        return 0;
}

/* The config with the command line's listeners, validated as a whole. */
static int load_config(const struct serve_args *a, struct cage_config **ret, struct cage_error *err)
{
        if (!a->listen && !a->socket && !a->no_socket)
                return a->config ? cage_config_load(a->config, ret, err)
                                 : cage_config_defaults(ret, err);
        json_auto_t *root = NULL;
        int r = a->config ? read_config_doc(a->config, &root, err) : 0;
        if (r < 0)
                return r;
        if (!root && !(root = json_object()))
                return cage_fail(err, -ENOMEM, "config");
        if (!json_is_object(root))
                return cage_fail(err, -EINVAL, "the top level must be a JSON object");
        if (set_listen(root, a) < 0)
                return cage_fail(err, -ENOMEM, "config");
        char *text = json_dumps(root, JSON_COMPACT);
        if (!text)
                return cage_fail(err, -ENOMEM, "config");
        r = cage_config_parse(text, strlen(text), ret, err);
        explicit_bzero(text, strlen(text)); /* it may hold secret values and tokens */
        free(text);
        return r;
}

/* What the signal loop works on: the service, the HTTP server, and every
 * config loaded so far (the running one last): a reload keeps the earlier
 * ones alive, since a call may still read them, until the service closes. */
#define CANCEL_GRACE_MS 10000 /* for cancelled calls to answer */

struct serve_state {
        const struct serve_args *args;
        struct cage_service *svc;
        struct cage_http_server *srv;
        struct cage_config **configs;
        size_t n_configs;
        json_t *doc; /* the running config's file as JSON, NULL without a file */
};

static const struct cage_config *current(const struct serve_state *st)
{
        return st->configs[st->n_configs - 1];
}

static void notify(const char *state)
{
        int r = sd_notify_send(state);
        if (r < 0)
                fprintf(stderr, "codecage: serve: NOTIFY_SOCKET: %s\n", strerror(-r));
}

/* Keys a reload cannot apply: the running server holds what they made. */
static const char *const restart_keys[] = {"data_dir",  "listen", "pool",
                                           "pool_size", "images", "upstream_servers",
                                           "audit_log", "e2b",    NULL};

static int check_restart_keys(const json_t *old, const json_t *new, struct cage_error *err)
{
        for (size_t i = 0; restart_keys[i]; i++) {
                json_t *a = json_object_get(old, restart_keys[i]);
                json_t *b = json_object_get(new, restart_keys[i]);
                if ((a || b) && !(a && b && json_equal(a, b)))
                        return cage_fail_plain(err, -EINVAL,
                                               "%s changed: it needs a restart (a reload applies "
                                               "tokens, tenants, quotas, limits, defaults, secrets "
                                               "and network limits)",
                                               restart_keys[i]);
        }
        return 0;
}

static int keep_config(struct serve_state *st, struct cage_config *cfg)
{
        struct cage_config **more =
                reallocarray(st->configs, st->n_configs + 1, sizeof(*st->configs));
        if (!more)
                return -ENOMEM;
        st->configs = more;
        st->configs[st->n_configs++] = cfg;
        return 0;
}

/* SIGHUP: the config file again, all or nothing; the audit log reopened. */
static void reload(struct serve_state *st)
{
        struct cage_error err = {0};
        struct cage_config *cfg = NULL;
        json_t *doc = NULL;
        const char *path = st->args->config;
        notify("RELOADING=1");
        int r = path ? read_config_doc(path, &doc, &err) : 0;
        if (r == 0 && path)
                r = check_restart_keys(st->doc, doc, &err);
        if (r == 0 && path)
                r = load_config(st->args, &cfg, &err);
        if (r == 0 && cfg)
                r = mcp_options_apply(mcp_serve_options(), cfg, &err);
        bool kept = false;
        if (r == 0 && cfg && !(kept = keep_config(st, cfg) == 0))
                r = cage_fail(&err, -ENOMEM, "reload");
        /* Kept before it is installed: a call may read it from then on. */
        if (r == 0 && cfg && (r = cage_service_reload(st->svc, cfg, &err)) == 0)
                cage_http_reload(st->srv, cfg);
        if (r < 0) {
                fprintf(stderr, "codecage: reload refused, the running config stays: %s: %s\n",
                        path ? path : "(defaults)", err.message);
                if (!kept)
                        cage_config_free(cfg);
                json_decref(doc);
        } else if (path) {
                json_decref(st->doc);
                st->doc = doc;
                fprintf(stderr, "codecage: reloaded %s\n", path);
        }
        if (cage_service_reopen_audit(st->svc, &err) < 0)
                fprintf(stderr, "codecage: audit log: %s\n", err.message);
        notify("READY=1\nSTATUS=serving (reloaded)");
}

/* Waits for the next signal of set, pinging the watchdog meanwhile when
 * the service is healthy. */
static int next_signal(const struct serve_state *st, const sigset_t *set, uint64_t watchdog_usec,
                       siginfo_t *info)
{
        for (;;) {
                struct timespec t = {.tv_sec = (time_t)(watchdog_usec / 2 / 1000000),
                                     .tv_nsec = (long)(watchdog_usec / 2 % 1000000) * 1000};
                int sig = watchdog_usec ? sigtimedwait(set, info, &t) : sigwaitinfo(set, info);
                if (sig > 0)
                        return sig;
                if (errno == EAGAIN && cage_service_healthy(st->svc))
                        notify("WATCHDOG=1");
        }
}

/* Waits until no call and no request is under way, or until deadline_ms
 * (or, when interruptible, a second SIGINT/SIGTERM); returns how many
 * calls (or else requests) were still under way. */
static unsigned wait_idle(const struct serve_state *st, const sigset_t *set, uint64_t watchdog_usec,
                          uint64_t deadline_ms, bool interruptible)
{
        unsigned n;
        while (((n = cage_service_calls_in_flight(st->svc)) > 0 ||
                (n = cage_http_active(st->srv)) > 0) &&
               clock_mono_ms() < deadline_ms) {
                struct timespec t = {.tv_nsec = 50 * 1000000L};
                int sig = sigtimedwait(set, NULL, &t);
                if (interruptible && (sig == SIGINT || sig == SIGTERM))
                        break;
                if (watchdog_usec)
                        notify("WATCHDOG=1");
        }
        return n;
}

/* SIGTERM: no new work, the running calls get drain_timeout_s to finish;
 * what still runs then is cancelled by cage_http_stop (status
 * "cancelled"). A second SIGTERM or SIGINT cuts the wait short. */
static void drain(struct serve_state *st, const sigset_t *set, uint64_t watchdog_usec)
{
        uint64_t deadline_ms = clock_mono_ms() + current(st)->drain_timeout_s * 1000;
        notify("STOPPING=1\nSTATUS=draining");
        cage_service_drain(st->svc);
        cage_http_quiesce(st->srv);
        unsigned n = wait_idle(st, set, watchdog_usec, deadline_ms, true);
        if (n == 0) {
                fprintf(stderr, "codecage: drain: no call running\n");
                return;
        }
        fprintf(stderr, "codecage: drain: cancelling %u running call(s)\n", n);
        /* Cancelled calls answer "cancelled": their responses go out first. */
        cage_http_cancel(st->srv);
        (void)wait_idle(st, set, watchdog_usec, clock_mono_ms() + CANCEL_GRACE_MS, false);
}

static int serve(struct serve_state *st, const sigset_t *set)
{
        struct cage_error err = {0};
        siginfo_t info = {0};
        int sig;

        if (cage_service_open(current(st), &st->svc, &err) < 0) {
                fprintf(stderr, "codecage: serve: %s\n", err.message);
                return EXIT_CODECAGE_FAILED;
        }
        if (cage_http_start(current(st), st->svc, &st->srv, &err) < 0) {
                fprintf(stderr, "codecage: serve: %s\n", err.message);
                cage_service_close(st->svc);
                return EXIT_CODECAGE_FAILED;
        }
        fprintf(stderr, "codecage: serving on %s\n", cage_http_describe(st->srv));
        notify("READY=1\nSTATUS=serving");
        uint64_t watchdog_usec = sd_watchdog_usec();
        while ((sig = next_signal(st, set, watchdog_usec, &info)) == SIGHUP) {
                fprintf(stderr, "codecage: SIGHUP from pid %d, reloading\n", (int)info.si_pid);
                reload(st);
        }
        fprintf(stderr, "codecage: %s from pid %d, stopping\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", (int)info.si_pid);
        drain(st, set, watchdog_usec);
        cage_http_stop(st->srv);
        cage_service_close(st->svc);
        return 0;
}

int cmd_serve(int argc, char **argv)
{
        struct serve_args a = {0};
        struct cage_error err = {0};
        struct cage_config *cfg = NULL;
        sigset_t stop;

        int r = parse_args(argc, argv, &a);
        if (r != 0)
                return r > 0 ? 0 : EXIT_CODECAGE_FAILED;
        if (load_config(&a, &cfg, &err) < 0 ||
            /* --mcp-upstream: code mode's servers join the config's. */
            mcp_options_apply(mcp_serve_options(), cfg, &err) < 0) {
                fprintf(stderr, "codecage: config %s: %s\n", a.config ? a.config : "(defaults)",
                        err.message);
                cage_config_free(cfg);
                return EXIT_CODECAGE_FAILED;
        }
        struct serve_state st = {.args = &a};
        if (keep_config(&st, cfg) < 0 ||
            (a.config && read_config_doc(a.config, &st.doc, &err) < 0)) {
                fprintf(stderr, "codecage: config %s: %s\n", a.config ? a.config : "(defaults)",
                        err.message[0] ? err.message : "out of memory");
                cage_config_free(cfg);
                free(st.configs);
                return EXIT_CODECAGE_FAILED;
        }
        /* Removes our cgroups should we be killed (src/core/reaper.c). */
        (void)launch_reaper_start(false); /* exec'd: a clean command line */
        /* Before any thread exists, so every thread inherits the mask. */
        cli_block_stop_signals(&stop);
        sigaddset(&stop, SIGHUP);
        sigprocmask(SIG_BLOCK, &stop, NULL);
        r = serve(&st, &stop);
        for (size_t i = 0; i < st.n_configs; i++)
                cage_config_free(st.configs[i]);
        free(st.configs);
        json_decref(st.doc);
        return r;
}
