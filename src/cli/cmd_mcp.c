/* `codecage mcp`: MCP over stdio (docs/MCP.md), the embedded default: no
 * daemon, the service runs in this process. Also the MCP options of
 * `codecage serve` (--mcp-conformance, --mcp-tools, --mcp-upstream), which
 * main.c takes out of serve's arguments before cmd_serve() parses the rest.
 *
 * Order matters, as for serve: the config is loaded; SIGINT/SIGTERM are
 * blocked and taken through a signalfd (every later thread inherits the
 * mask); the service is opened while the process is still
 * single-threaded (it unshares a mount namespace); stdout is kept for the
 * protocol alone (fd 1 then points at stderr, so nothing stray can
 * corrupt it); then the stdio loop runs until end of input or a signal.
 * Exit status: 0, or 125 for a usage, config or start-up error. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "core/reaper.h"
#include "server/mcp.h"
#include "server/mcp_fixtures.h"
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/error.h"

struct mcp_args {
        const char *config;
        const char *tools;
        const char *upstreams[MCP_UPSTREAMS_MAX + 1];
        size_t n_upstreams;
};

static const struct option mcp_long_options[] = {
        {"config", required_argument, NULL, 'c'},
        {"tools", required_argument, NULL, 't'},
        {"upstream", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
        fprintf(f,
                "usage: codecage mcp [--config FILE] [--tools LIST] [--upstream "
                "NAME=COMMAND]...\n\n"
                "Serves MCP (Model Context Protocol) over stdio: newline-delimited JSON-RPC on\n"
                "stdin and stdout, for clients that start codecage themselves (Claude Desktop,\n"
                "Claude Code, Cursor). The sandbox service runs inside this process; named\n"
                "sandboxes are kept in the config's data_dir. Logs go to stderr.\n\n"
                "options:\n"
                "  --config FILE   server config (docs/CONFIG.md): limits, secrets, data_dir;\n"
                "                  default: built-in defaults\n"
                "  --tools LIST    offer only these tools, e.g. run_python,run_shell\n"
                "  --upstream NAME=COMMAND\n"
                "                  code mode: an MCP server (stdio) whose tools Python code\n"
                "                  calls as tools.<tool>(...); COMMAND is split at spaces;\n"
                "                  repeatable (at most %d)\n"
                "  --help          show this help\n\n"
                "docs/MCP.md lists the tools. Exit status: 0 at end of input or after\n"
                "SIGINT/SIGTERM, %d for a usage, config or start-up error.\n",
                MCP_UPSTREAMS_MAX, EXIT_CODECAGE_FAILED);
}

static int on_option(void *ctx, int c, char *arg)
{
        struct mcp_args *a = ctx;
        if (c == 'c') {
                a->config = arg;
        } else if (c == 't') {
                a->tools = arg;
        } else if (c == 'u') {
                if (a->n_upstreams == MCP_UPSTREAMS_MAX) {
                        fprintf(stderr, "codecage: mcp: at most %d --upstream\n",
                                MCP_UPSTREAMS_MAX);
                        return -EINVAL;
                }
                a->upstreams[a->n_upstreams++] = arg;
        }
        return 0;
}

static int parse_args(int argc, char **argv, struct mcp_args *a)
{
        struct cage_error err = {0};
        int r = cli_getopt(argc, argv, mcp_long_options, on_option, usage, a);
        if (r != 0)
                return r;
        if (optind < argc) {
                fprintf(stderr, "codecage: mcp: unexpected argument \"%s\"\n", argv[optind]);
                return -EINVAL;
        }
        if (a->tools && mcp_tools_check(a->tools, &err) < 0) {
                fprintf(stderr, "codecage: mcp: %s\n", err.message);
                return -EINVAL;
        }
        return 0;
}

/* fd 1 becomes a copy of stderr; the protocol gets a private copy of the
 * original stdout. */
static int protocol_stdout(void)
{
        int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static int serve_stdio(const struct cage_config *cfg, const struct mcp_args *a, int stop_fd)
{
        struct cage_error err = {0};
        struct cage_service *svc = NULL;
        struct mcp_server *srv = NULL;
        struct mcp_options opts = {
                .tools = a->tools, .upstreams = a->upstreams, .n_upstreams = a->n_upstreams};
        _cleanup_close_ int out = protocol_stdout();
        if (out < 0) {
                fprintf(stderr, "codecage: mcp: stdout: %s\n", strerror(-out));
                return EXIT_CODECAGE_FAILED;
        }
        if (cage_service_open(cfg, &svc, &err) < 0 ||
            mcp_server_new(cfg, svc, &opts, &srv, &err) < 0) {
                fprintf(stderr, "codecage: mcp: %s\n", err.message);
                cage_service_close(svc);
                return EXIT_CODECAGE_FAILED;
        }
        fprintf(stderr, "codecage: mcp: serving MCP on stdio (data_dir %s)\n", cfg->data_dir);
        int r = mcp_stdio_run(srv, STDIN_FILENO, out, stop_fd, &err);
        if (r < 0)
                fprintf(stderr, "codecage: mcp: %s\n", err.message);
        mcp_server_free(srv);
        cage_service_close(svc);
        return r < 0 ? EXIT_CODECAGE_FAILED : 0;
}

int cmd_mcp(int argc, char **argv)
{
        struct mcp_args a = {0};
        struct cage_error err = {0};
        struct cage_config *cfg = NULL;
        sigset_t stop;

        int r = parse_args(argc, argv, &a);
        if (r != 0)
                return r > 0 ? 0 : EXIT_CODECAGE_FAILED;
        r = a.config ? cage_config_load(a.config, &cfg, &err) : cage_config_defaults(&cfg, &err);
        struct mcp_options opts = {.upstreams = a.upstreams, .n_upstreams = a.n_upstreams};
        if (r == 0 && (r = mcp_options_apply(&opts, cfg, &err)) < 0)
                cage_config_free(TAKE_PTR(cfg));
        if (r < 0) {
                fprintf(stderr, "codecage: config %s: %s\n", a.config ? a.config : "(defaults)",
                        err.message);
                return EXIT_CODECAGE_FAILED;
        }
        /* Removes our cgroups should we be killed (src/core/reaper.c). */
        (void)launch_reaper_start(false); /* exec'd: a clean command line */
        /* Before any thread exists, so every thread inherits the mask. */
        cli_block_stop_signals(&stop);
        _cleanup_close_ int sfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0) {
                fprintf(stderr, "codecage: mcp: signalfd: %s\n", strerror(errno));
                cage_config_free(cfg);
                return EXIT_CODECAGE_FAILED;
        }
        r = serve_stdio(cfg, &a, sfd);
        cage_config_free(cfg);
        return r;
}

/* ---- the MCP options of `codecage serve` ------------------------------------------ */

static void drop_args(int *argc, char **argv, int at, int n)
{
        memmove(&argv[at], &argv[at + n], (size_t)(*argc - at - n + 1) * sizeof(char *));
        *argc -= n;
}

int mcp_serve_options_take(int *argc, char **argv)
{
        static const char *upstreams[MCP_UPSTREAMS_MAX];
        struct mcp_options opts = {.upstreams = upstreams};
        struct cage_error err = {0};
        bool conformance = false;
        for (int i = 1; i < *argc;) {
                if (strcmp(argv[i], "--") == 0)
                        break;
                if (strcmp(argv[i], "--mcp-conformance") == 0) {
                        conformance = true;
                        drop_args(argc, argv, i, 1);
                } else if (strncmp(argv[i], "--mcp-tools=", 12) == 0) {
                        opts.tools = argv[i] + 12;
                        drop_args(argc, argv, i, 1);
                } else if (strcmp(argv[i], "--mcp-tools") == 0 && i + 1 < *argc) {
                        opts.tools = argv[i + 1];
                        drop_args(argc, argv, i, 2);
                } else if (strcmp(argv[i], "--mcp-upstream") == 0 && i + 1 < *argc) {
                        if (opts.n_upstreams == MCP_UPSTREAMS_MAX) {
                                fprintf(stderr, "codecage: serve: at most %d --mcp-upstream\n",
                                        MCP_UPSTREAMS_MAX);
                                return -EINVAL;
                        }
                        upstreams[opts.n_upstreams++] = argv[i + 1];
                        drop_args(argc, argv, i, 2);
                } else {
                        i++;
                }
        }
        if (opts.tools && mcp_tools_check(opts.tools, &err) < 0) {
                fprintf(stderr, "codecage: serve: %s\n", err.message);
                return -EINVAL;
        }
        if (conformance) { /* the fixtures are a provider of their own, added only here */
                opts.providers[opts.n_providers++] = mcp_fixtures_provider_new;
                fprintf(stderr, "codecage: serve: --mcp-conformance: serving the MCP conformance "
                                "suite's test fixtures (for tests only)\n");
        }
        mcp_serve_options_set(&opts);
        return 0;
}
