/* The reaper of a supervisor's cgroups (reaper.c). */
#ifndef CODECAGE_CORE_REAPER_H
#define CODECAGE_CORE_REAPER_H

#include <stdbool.h>

/* The hidden command both binaries hand to launch_reaper_main(). */
#define LAUNCH_REAPER_COMMAND "__reap-cgroups"

/* Starts this process's reaper once (later calls return the first result):
 * 0, or -errno when it could not be started (launches go on without it).
 * A single-threaded caller gets a plain fork; otherwise the fork execs
 * this binary afresh. */
int launch_reaper_start(bool single_threaded);
/* Tells the reaper this process removed its groups itself: it exits
 * without a sweep (call at a clean exit, after the last launch). */
void launch_reaper_dismiss(void);
/* main() of the reaper: argv is {"codecage", LAUNCH_REAPER_COMMAND, PID}. */
int launch_reaper_main(int argc, char **argv);

#endif
