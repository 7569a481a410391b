/* The lean `codecage` binary: a static PIE with only the launch engine,
 * so a cold `codecage run` starts in well under a millisecond. It runs
 * `codecage run` (with the host's userland or a rootfs directory) and
 * `--version` itself and execs `codecage-full` for everything else
 * (delegate.c). main.c is the full binary's entry point. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/reaper.h"

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], LAUNCH_REAPER_COMMAND) == 0)
                return launch_reaper_main(argc, argv);
        cli_ensure_std_fds();
        if (argc >= 2 && strcmp(argv[1], "run") == 0) {
                signal(SIGPIPE, SIG_IGN);
                return cmd_run(argc - 1, argv + 1);
        }
        if (argc == 2 && strcmp(argv[1], "--version") == 0) {
                printf("codecage %s\n", CODECAGE_VERSION);
                return 0;
        }
        return cli_exec_full(argv);
}
