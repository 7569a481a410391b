/* The supervisor's side of starting a sandbox, shared by one-shot runs
 * (supervise.c) and long-lived sandboxes (box.c): prepare (seccomp program,
 * host uid slot, cgroup host, launch plan, idmapped mounts, the report and
 * sync pipes), clone into the namespaces, write the id maps and put the
 * child into its cgroup, kill it, and release everything. The caller only
 * adds what differs: a run's stdio pipes, a box's codecage-init image and
 * control socket. */
#ifndef CODECAGE_CORE_LAUNCHER_H
#define CODECAGE_CORE_LAUNCHER_H

#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "cgroup.h"
#include "launch.h"
#include "userns.h"

struct launcher {
        const struct cage_spec *spec;
        struct launch_plan plan;
        struct id_slot slot;
        struct cgroup_host cg_host;
        struct cage_cgroup *cg;
        pid_t pid;
        int pidfd;
        int report_r;        /* the child's launch reports; EOF once it exec'd */
        int sync_w;          /* our wake-up bytes to the child */
        bool stdin_borrowed; /* plan.stdin_fd is the caller's: never closed here */
        bool born_in_cgroup; /* cloned into l->cg (v2): no move */
        bool template_maps;  /* a zygote's template: cage_userns_write_template_maps() */
        bool reaped;
};

/* Every fd -1, nothing held; spec must outlive the launcher. */
void launcher_init(struct launcher *l, const struct cage_spec *spec);
/* Everything before the clone. The plan's stdio (and box) fds are the
 * caller's to fill in afterwards; they are closed after the clone. */
int launcher_prepare(struct launcher *l, struct cage_error *err);
/* Clones the child, on the process-wide launcher thread when `on_thread`
 * (a long-lived sandbox's parent-death signal follows the thread that
 * cloned it), then closes the child's ends. */
int launcher_clone(struct launcher *l, bool on_thread, struct cage_error *err);
/* Id maps, then the cgroup: the child goes on once it is inside it. */
int launcher_enter_cgroup(struct launcher *l, struct cage_error *err);
/* The spec's cgroup (run-<our pid>-<n>, with its limits), none without a
 * backend; for sandboxes a zygote forks (zygote.c). */
int launcher_make_cgroup(struct launcher *l, struct cage_error *err);
/* SIGKILL to pid 1 (its whole pid namespace) and the cgroup kill, which
 * also catches anything outside it (debug builds without a pid ns). */
void launcher_kill(struct launcher *l);
/* Waits for pid 1 (once); rusage may be NULL. */
void launcher_reap(struct launcher *l, struct rusage *rusage);
/* Kills and reaps what is left, removes the cgroup, closes every fd,
 * releases the uid slot. */
void launcher_release(struct launcher *l);
/* "none" / "v1" / "v2": what enforces the limits. */
const char *launcher_limits_backend(const struct launcher *l);
/* The error for a failed launch step the child reported: a mount point
 * the image cannot hold is the caller's mistake (-EINVAL, naming
 * mounts[i].target), any other step codecage's own (-EIO). */
int launcher_report_error(const struct launcher *l, const struct child_report *rep,
                          struct cage_error *err);

/* Host detection does a few filesystem probes (and sweeps groups of dead
 * supervisors without waiting): once per process, safe from any thread. */
int launch_detect_cgroups(struct cgroup_host *ret, struct cage_error *err);
/* Sweeps the groups of dead supervisors again, waiting up to wait_ms for
 * them to empty (a server's start). */
void launch_sweep_stale_cgroups(unsigned wait_ms);
/* Starts the launcher thread of long-lived sandboxes now instead of at the
 * first launch (a server's start): it takes its slots of low fd numbers
 * (lean clones) and its copy of the mount table while both are small, and
 * the fds it keeps are the process's from the first request on. */
int launch_thread_start(void);

#endif
