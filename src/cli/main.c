/* codecage-full: every command of codecage. This file only sets up the
 * process (standard fds, SIGPIPE) and dispatches to a subcommand. The lean
 * `codecage` binary (front.c) runs `run` itself and execs this one for the
 * rest. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/reaper.h"

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
        const char *help;
} commands[] = {
        {"run", cmd_run, "run a command in a fresh one-shot sandbox"},
        {"doctor", cmd_doctor, "check what this host supports and how to fix what it lacks"},
        {"serve", cmd_serve, "serve the HTTP API (docs/API.md) until SIGINT/SIGTERM"},
        {"sandbox", cmd_sandbox, "manage named sandboxes on a running codecage serve"},
        {"image", cmd_image, "pull, import, list and remove images in the local store"},
        /* MCP (cmd_mcp.c) */
        {"mcp", cmd_mcp, "serve MCP over stdio for agents (docs/MCP.md)"},
};

static void usage(FILE *f)
{
        fprintf(f, "usage: codecage COMMAND [ARGS...]\n\ncommands:\n");
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
        fprintf(f, "\n`codecage COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], LAUNCH_REAPER_COMMAND) == 0)
                return launch_reaper_main(argc, argv);
        cli_ensure_std_fds();
        signal(SIGPIPE, SIG_IGN);
        if (argc < 2) {
                usage(stderr);
                return EXIT_CODECAGE_FAILED;
        }
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
                usage(stdout);
                return 0;
        }
        if (strcmp(argv[1], "--version") == 0) {
                printf("codecage %s\n", CODECAGE_VERSION);
                return 0;
        }
        /* MCP: serve's --mcp-* options belong to the MCP server (cmd_mcp.c). */
        if (strcmp(argv[1], "serve") == 0 && mcp_serve_options_take(&argc, argv) < 0)
                return EXIT_CODECAGE_FAILED;
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (strcmp(argv[1], commands[i].name) == 0)
                        return commands[i].fn(argc - 1, argv + 1);
        fprintf(stderr, "codecage: unknown command \"%s\"\n", argv[1]);
        usage(stderr);
        return EXIT_CODECAGE_FAILED;
}
