/* Parking fds: an idle object hands its fds to the kernel and keeps one.
 *
 * fd_park sends up to FD_PARK_MAX fds (SCM_RIGHTS) into a fresh AF_UNIX
 * socket pair, closes the sending end and the originals, and returns the
 * receiving end: the open files live on in flight, inside that socket's
 * queue (pipes stay open, so their writers see no EPIPE; locks and peers
 * are unaffected), at the cost of one fd instead of n. fd_unpark takes them
 * back in the same order. Used for idle sessions (session.c), which would
 * otherwise hold four fds each while nobody calls them. */
#ifndef CODECAGE_UTIL_FDPARK_H
#define CODECAGE_UTIL_FDPARK_H

#include <stddef.h>

#define FD_PARK_MAX 8

/* Parks *fds[i] for each i < n that is >= 0 and sets it to -1. Returns the
 * park fd (O_CLOEXEC) or -errno, in which case nothing was changed. */
int fd_park(int *const fds[], size_t n);
/* Puts the parked fds back into *fds[i] (the ones that were -1 when parked
 * stay -1) and closes *park (set to -1). Returns 0 or -errno; on failure
 * the parked fds are lost (closed) and every *fds[i] is -1. */
int fd_unpark(int *park, int *const fds[], size_t n);

#endif
