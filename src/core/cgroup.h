/* Control groups for one sandbox: limits (memory, cpu bandwidth, pids),
 * accounting (cpu time, peak memory, OOM kills), kill-the-whole-tree and
 * removal, with a cgroup v2 backend (production hosts) and a v1 backend
 * (memory, pids, cpu, cpuacct and freezer hierarchies). With neither usable,
 * cage_cgroup_create() returns a group of backend CGROUP_BACKEND_NONE and the
 * caller falls back to rlimits (and says so). Nothing here is called from the
 * sandboxed child; all functions run in the supervisor. */
#ifndef CODECAGE_CORE_CGROUP_H
#define CODECAGE_CORE_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "codecage/codecage.h"

enum cgroup_backend {
        CGROUP_BACKEND_NONE,
        CGROUP_BACKEND_V1,
        CGROUP_BACKEND_V2,
};

const char *cgroup_backend_to_string(enum cgroup_backend b);

struct cgroup_limits {
        uint64_t memory_bytes; /* 0 = unlimited */
        double cpus;           /* 0 = unlimited */
        uint32_t pids;         /* 0 = unlimited */
};

struct cgroup_stats {
        uint64_t cpu_usage_ns;
        uint64_t peak_memory_bytes;
        uint64_t memory_bytes; /* now */
        uint64_t oom_kills;
};

/* Where the hierarchies live; tests point these at fake trees. */
struct cgroup_host {
        enum cgroup_backend backend;
        char v2_parent[256]; /* v2: directory under which sandboxes are made */
        char v1_root[256];   /* v1: directory holding memory/, pids/, ... */
        bool has_memory, has_pids, has_cpu, has_cpuacct, has_freezer;
};

/* Looks at the running host (honouring CODECAGE_CGROUP=v1|v2|none) and fills
 * *ret. Prepares the parent group (creates "codecage" under it, enables the
 * v2 controllers) so later creates are one mkdir each. */
int cage_cgroup_host_detect(struct cgroup_host *ret, struct cage_error *err);

struct cage_cgroup;

/* Creates the group `name` (a short unique token) with the limits. */
int cage_cgroup_create(const struct cgroup_host *host, const char *name,
                       const struct cgroup_limits *limits, struct cage_cgroup **ret,
                       struct cage_error *err);
/* Creates `leaf` beneath parent (in each of its hierarchies), without
 * limits of its own: a part of a sandbox's tree (one exec) that can be
 * killed and measured alone. Destroy it before its parent. */
int cage_cgroup_create_child(struct cage_cgroup *parent, const char *leaf, struct cage_cgroup **ret,
                             struct cage_error *err);
enum cgroup_backend cage_cgroup_backend(const struct cage_cgroup *cg);
/* CPU weight relative to other groups (1..10000, default 100): v2
 * cpu.weight, v1 cpu.shares. A no-op without a cpu controller. */
int cage_cgroup_set_cpu_weight(struct cage_cgroup *cg, unsigned weight);
/* The group's name beneath the codecage parent ("run-12-3", "run-12-3/e7"). */
const char *cage_cgroup_name(const struct cage_cgroup *cg);
/* Moves pid into the group (every hierarchy for v1). */
int cage_cgroup_attach(struct cage_cgroup *cg, pid_t pid, struct cage_error *err);
/* v2: the group's directory fd for clone3(CLONE_INTO_CGROUP), which starts
 * a child inside the group instead of moving it there; -1 otherwise (v1
 * has no such clone, NULL has no group). */
int cage_cgroup_clone_fd(const struct cage_cgroup *cg);
/* Reads usage counters; fields a backend cannot tell are left 0. */
int cage_cgroup_stats(struct cage_cgroup *cg, struct cgroup_stats *ret);
/* The group's CPU time in ns, alone: what a session call reads besides
 * the peak (cage_cgroup_stats() also reads memory now and the OOM kills,
 * which v1 counts over the subtree, a directory walk). */
int cage_cgroup_cpu_usage(struct cage_cgroup *cg, uint64_t *ret_ns);
/* The group's memory use now (v1 memory.usage_in_bytes, v2 memory.current);
 * -EOPNOTSUPP without a memory controller. */
int cage_cgroup_memory_now(struct cage_cgroup *cg, uint64_t *ret);
/* The group's peak memory use since it was made (v1: the larger of
 * memory.max_usage_in_bytes and memory.memsw.max_usage_in_bytes, v2:
 * memory.peak, 5.19+). The group's OOM killer runs only once its use has
 * reached its limit, so while the peak stays below the limit its OOM kills
 * stay 0. -EOPNOTSUPP without a memory controller. */
int cage_cgroup_memory_peak(struct cage_cgroup *cg, uint64_t *ret);
/* Kills every process in the group and waits (bounded) until it is empty:
 * v2 cgroup.kill, v1 freeze + SIGKILL each pid + thaw. */
int cage_cgroup_kill(struct cage_cgroup *cg);
/* An idle group need not hold a directory fd per hierarchy: park closes
 * them, unpark opens the same directories again by path (0, or the first
 * error; a directory that failed to open is then absent). No other function
 * may be called on a parked group, nor on its sub-groups' parent; the
 * caller serialises park and unpark with every other use. NULL is a no-op. */
void cage_cgroup_park(struct cage_cgroup *cg);
int cage_cgroup_unpark(struct cage_cgroup *cg);
/* Kills what is left, removes the group from every hierarchy and frees cg.
 * Accepts NULL. Returns the first error but always frees. */
int cage_cgroup_destroy(struct cage_cgroup *cg);

/* Sandbox groups are named CGROUP_RUN_PREFIX "<supervisor pid>-<n>". */
#define CGROUP_RUN_PREFIX "run-"

/* Removes groups whose supervisor process no longer exists (cgroup_sweep.c):
 * thaws and kills what they hold, then waits at most wait_ms in all for them
 * to empty; what is still busy then is left for a later sweep. */
void cage_cgroup_sweep_stale(const struct cgroup_host *host, unsigned wait_ms);
/* The same for every group of one supervisor, alive or not (its reaper
 * runs this once the supervisor is gone, even while it is a zombie). */
void cage_cgroup_sweep_owner(const struct cgroup_host *host, pid_t owner, unsigned wait_ms);

#endif
