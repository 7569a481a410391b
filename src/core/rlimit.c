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

size_t rlimits_list(const struct launch_plan *plan, struct rlimit_setting *out)
{
        const struct cage_spec *s = plan->spec;
        size_t n = 0;
        out[n++] = (struct rlimit_setting){RLIMIT_CORE, 0, 0, "rlimit core"};
        if (plan->disable & CAGE_DEBUG_NO_LIMITS)
                return n;
        out[n++] = (struct rlimit_setting){RLIMIT_NOFILE, s->nofile, s->nofile, "rlimit nofile"};
        /* The limits the kernel counts per user (processes, locked shared
         * memory, message queues) are also checked in every ancestor user
         * namespace against what its creator had: a zygote's template
         * creates the namespaces of all its children, so with these limits
         * all of them would share one sandbox's allowance. It keeps the
         * server's; each child sets its own. */
        if (!plan->nests_namespaces) {
                out[n++] = (struct rlimit_setting){RLIMIT_NPROC, s->pids, s->pids, "rlimit nproc"};
                out[n++] = (struct rlimit_setting){RLIMIT_MEMLOCK, 64 * 1024, 64 * 1024,
                                                   "rlimit memlock"};
                out[n++] = (struct rlimit_setting){RLIMIT_MSGQUEUE, 64 * 1024, 64 * 1024,
                                                   "rlimit msgqueue"};
        }
        if (s->cpu_time_ms) {
                /* Whole seconds, rounded up; the supervisor enforces the
                 * exact total for the whole tree through the cgroup. */
                rlim_t secs = (rlim_t)((s->cpu_time_ms + 999) / 1000);
                out[n++] = (struct rlimit_setting){RLIMIT_CPU, secs, secs + 1, "rlimit cpu"};
        }
        return n;
}

int rlimits_apply(const struct launch_plan *plan, const char **step)
{
        struct rlimit_setting set[RLIMITS_MAX];
        size_t n = rlimits_list(plan, set);
        for (size_t i = 0; i < n; i++) {
                struct rlimit rl = {.rlim_cur = set[i].cur, .rlim_max = set[i].max};
                *step = set[i].step;
                if (setrlimit(set[i].resource, &rl) < 0)
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
