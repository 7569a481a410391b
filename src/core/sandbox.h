/* Creating the sandboxed child; see sandbox.c for the containment steps. */
#ifndef CODECAGE_CORE_SANDBOX_H
#define CODECAGE_CORE_SANDBOX_H

#include <sys/types.h>

#include "launch.h"

/* Clones the child into new namespaces; returns its pid (and a pidfd in
 * *ret_pidfd) or -errno. The child blocks until one byte arrives on
 * plan->sync_fd, which the caller sends once maps and cgroup are set. */
pid_t sandbox_clone(const struct launch_plan *plan, int *ret_pidfd);

#endif
