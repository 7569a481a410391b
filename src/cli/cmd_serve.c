/* `codecage serve`: the HTTP API (docs/API.md) on the listeners of the
 * server config (docs/CONFIG.md).
 *
 * Order matters: the config is loaded and validated (command-line listener
 * overrides are merged into the config document and the whole document is
 * validated again by services/config.c, so its rules -- e.g. no
 * unauthenticated listener beyond loopback -- hold for the overrides too);
 * SIGINT/SIGTERM are blocked so every later thread inherits the mask and
 * only this thread takes them, with sigwaitinfo(); the service is opened
 * while the process is still single-threaded (it unshares a mount
 * namespace); then the HTTP threads start. On SIGINT/SIGTERM the HTTP
 * server stops first (running execs are cancelled, connections drained),
 * then the service. Exit status: 0 after a signal, 125 for a usage, config
 * or start-up error. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/reaper.h"
#include "server/http.h"
#include "server/mcp.h"
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

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
                "(docs/MCP.md)\nuntil SIGINT or SIGTERM.\n\n"
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

static int serve(const struct cage_config *cfg, const sigset_t *stop)
{
        struct cage_error err = {0};
        struct cage_service *svc = NULL;
        struct cage_http_server *srv = NULL;
        siginfo_t info = {0};
        int sig;

        if (cage_service_open(cfg, &svc, &err) < 0) {
                fprintf(stderr, "codecage: serve: %s\n", err.message);
                return EXIT_CODECAGE_FAILED;
        }
        if (cage_http_start(cfg, svc, &srv, &err) < 0) {
                fprintf(stderr, "codecage: serve: %s\n", err.message);
                cage_service_close(svc);
                return EXIT_CODECAGE_FAILED;
        }
        fprintf(stderr, "codecage: serving on %s\n", cage_http_describe(srv));
        do
                sig = sigwaitinfo(stop, &info);
        while (sig < 0 && errno == EINTR);
        fprintf(stderr, "codecage: %s from pid %d, stopping\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", (int)info.si_pid);
        cage_http_stop(srv);
        cage_service_close(svc);
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
        /* Removes our cgroups should we be killed (src/core/reaper.c). */
        (void)launch_reaper_start(false); /* exec'd: a clean command line */
        /* Before any thread exists, so every thread inherits the mask. */
        cli_block_stop_signals(&stop);
        r = serve(cfg, &stop);
        cage_config_free(cfg);
        return r;
}
