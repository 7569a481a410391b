/* Resource limits set in the child before exec. They back up the cgroup
 * limits (and replace them when no cgroup backend is usable): open files,
 * processes (counted per user namespace on current kernels), CPU seconds per process, no core
 * dumps, no locked memory. File size is left to the scratch tmpfs size, so a full disk is ENOSPC
 * rather than SIGXFSZ. */
#include <errno.h>
#include <sys/resource.h>

#include "launch.h"

static int set_limit(int resource, rlim_t value)
{
        struct rlimit rl = {.rlim_cur = value, .rlim_max = value};
        return setrlimit(resource, &rl) < 0 ? -errno : 0;
}

int rlimits_apply(const struct launch_plan *plan, const char **step)
{
        const struct cage_spec *s = plan->spec;
        int r;
        *step = "rlimit core";
        if ((r = set_limit(RLIMIT_CORE, 0)) < 0)
                return r;
        if (plan->disable & CAGE_DEBUG_NO_LIMITS)
                return 0;
        *step = "rlimit nofile";
        if ((r = set_limit(RLIMIT_NOFILE, s->nofile)) < 0)
                return r;
        *step = "rlimit nproc";
        if ((r = set_limit(RLIMIT_NPROC, s->pids)) < 0)
                return r;
        *step = "rlimit memlock";
        if ((r = set_limit(RLIMIT_MEMLOCK, 64 * 1024)) < 0)
                return r;
        *step = "rlimit msgqueue";
        if ((r = set_limit(RLIMIT_MSGQUEUE, 64 * 1024)) < 0)
                return r;
        if (s->cpu_time_ms) {
                /* Whole seconds, rounded up; the supervisor enforces the
                 * exact total for the whole tree through the cgroup. */
                rlim_t secs = (rlim_t)((s->cpu_time_ms + 999) / 1000);
                struct rlimit rl = {.rlim_cur = secs, .rlim_max = secs + 1};
                *step = "rlimit cpu";
                if (setrlimit(RLIMIT_CPU, &rl) < 0)
                        return -errno;
        }
        return 0;
}

int rlimit_memory_fallback(const struct launch_plan *plan)
{
        /* Without a memory cgroup, address space is the nearest stand-in
         * (coarser: it counts mappings, not resident memory). Set in the
         * program's process just before exec, so pid 1 is not bound by it. */
        if (!plan->rlimit_memory || (plan->disable & CAGE_DEBUG_NO_LIMITS))
                return 0;
        return set_limit(RLIMIT_AS, plan->spec->memory_bytes);
}
