/* Pause points for crash tests. Builds made with -Dunsafe_debug=true stop
 * for good at a named point when CODECAGE_DEBUG_PAUSE lists its name
 * (comma-separated): they print "codecage: debug pause at NAME" to stderr
 * and sleep until killed, so a test can SIGKILL the process exactly there
 * and check what the next start cleans up. Normal builds compile the points
 * away. */
#ifndef CODECAGE_UTIL_DEBUG_PAUSE_H
#define CODECAGE_UTIL_DEBUG_PAUSE_H

#include <stdbool.h>

#ifdef CODECAGE_UNSAFE_DEBUG
/* True when CODECAGE_DEBUG_PAUSE names `point`. */
bool debug_pause_wanted(const char *point);
/* Announces the point and sleeps until the process is killed, when wanted. */
void debug_pause_point(const char *point);
#else
static inline bool debug_pause_wanted(const char *point)
{
        (void)point;
        return false;
}
static inline void debug_pause_point(const char *point)
{
        (void)point;
}
#endif

#endif
