/* Long-lived sandboxes ("boxes"): the same containment pipeline as a
 * one-shot run (sandbox.c), but pid 1 is codecage-init, which stays and
 * starts execs on request (box_proto.h). Each exec runs in a cgroup of its
 * own beneath the sandbox's, so a timeout or a kill takes its whole process
 * tree — daemons, double forks and all — and leaves the sandbox usable; when
 * an exec's main process ends, what it left running ends with it.
 *
 * A box is driven from any number of threads: execs may run concurrently
 * (at most BOX_EXECS_MAX). Starting a box is done by one process-wide
 * launcher thread, because a sandbox's pid 1 gets SIGKILL when the thread
 * that cloned it exits (PR_SET_PDEATHSIG follows threads), and callers such
 * as per-connection HTTP threads come and go. */
#ifndef CODECAGE_CORE_BOX_H
#define CODECAGE_CORE_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "codecage/codecage.h"

struct cage_box;

/* One exec. argv and env ("K=V", over the box's own environment) are
 * NULL-terminated; cwd NULL = /workspace; stdin_data NULL = /dev/null. */
struct cage_exec {
        char *const *argv;
        char *const *env;
        const char *cwd;
        const void *stdin_data;
        size_t stdin_len;
        /* stdin_stream: the program's stdin is (a duplicate of) stdin_fd, the
         * read end of a pipe the caller feeds while it runs; stdin_data is
         * then ignored. */
        bool stdin_stream;
        int stdin_fd;
        uint64_t timeout_ms;
        uint64_t output_max_bytes;  /* kept per stream (head + tail) */
        uint64_t output_stop_bytes; /* stop the exec past this much; 0 = none */
};

struct cage_box_usage {
        uint64_t cpu_ms;
        uint64_t memory_bytes; /* peak */
        uint64_t memory_now_bytes;
        uint64_t oom_kills;
};

/* Starts a sandbox from a spec (spec->argv is ignored). The spec is copied
 * where needed; it need not outlive the call. -EINVAL for a bad spec or
 * mount target (message names the field), else codecage's own failure. */
int cage_box_start(const struct cage_spec *spec, struct cage_box **ret, struct cage_error *err);

/* Runs one exec and waits for it. A return < 0 means no verdict at all
 * (-EINVAL: a bad request; -ESRCH: the sandbox is gone); otherwise *res
 * has the result contract, including "timeout" and "cancelled" (opts may
 * be NULL; its on_output sees raw bytes, its cancel_fd cancels). */
int cage_box_exec(struct cage_box *box, const struct cage_exec *ex,
                  const struct cage_run_options *opts, struct cage_result *res,
                  struct cage_error *err);

/* An exec that outlives the call: a session's interpreter. Its stdin is
 * /dev/null; channel_fd (or -1) is handed to it as its fd 3; its output
 * pipes are the caller's to read (non-blocking). It ends with
 * cage_box_proc_free(), which kills its cgroup. ex->timeout_ms is not
 * enforced (the caller decides when to signal or free it). */
struct cage_box_proc;
int cage_box_spawn(struct cage_box *box, const struct cage_exec *ex, int channel_fd,
                   struct cage_box_proc **ret, struct cage_error *err);
int cage_box_proc_stdout(struct cage_box_proc *p);
int cage_box_proc_stderr(struct cage_box_proc *p);
/* Readable when the process ended (then cage_box_proc_exited says so). */
int cage_box_proc_status_fd(struct cage_box_proc *p);
bool cage_box_proc_exited(struct cage_box_proc *p, int *ret_wait_status);
/* The errno of a failed execve of the process (ENOENT: no such program on
 * its PATH), or 0 when it did not fail (yet). */
int cage_box_proc_exec_errno(struct cage_box_proc *p);
/* Signals its process group (e.g. SIGINT for a timeout). */
void cage_box_proc_signal(struct cage_box_proc *p, int sig);
/* CPU time and peak memory of its cgroup so far (on cgroup v2 the peak is
 * the sandbox's: sub-groups have no memory controller); with_oom: also the
 * sandbox's OOM kills (one more read). */
int cage_box_proc_usage(struct cage_box_proc *p, struct cage_box_usage *ret, bool with_oom);
struct cage_box_proc *cage_box_proc_free(struct cage_box_proc *p);
/* An idle process need not hold its fds: its cgroup's directory fds (5 on
 * v1) are closed, to be opened again by the next call that needs them, and
 * its output and status pipes, with *extra (a session's channel; NULL:
 * none), go into one parked socket (util/fdpark.h): one fd instead of four.
 * The process runs on; what it writes waits in the pipes. Every
 * cage_box_proc_* call takes them back (cage_box_proc_unpark, which also
 * restores *extra: call it before using *extra again). Only while no other
 * thread uses p (or calls cage_box_proc_* on it). */
void cage_box_proc_park(struct cage_box_proc *p, int *extra);
/* 0, or -errno when the parked fds could not be taken back (then they are
 * closed and the process counts as ended). */
int cage_box_proc_unpark(struct cage_box_proc *p);

/* Whether pid 1 is still there (it is gone after an OOM kill of it, or a
 * kill). */
bool cage_box_alive(struct cage_box *box);
int cage_box_usage(struct cage_box *box, struct cage_box_usage *ret);
/* The sandbox's CPU weight against others (1..10000, default 100). */
/* Ties data to the sandbox's life (an image lease, say): release(data) runs
 * once the sandbox is destroyed and nothing of it runs any more. One
 * attachment per sandbox. */
void cage_box_attach(struct cage_box *box, void *data, void (*release)(void *data));
int cage_box_set_cpu_weight(struct cage_box *box, unsigned weight);
/* An idle sandbox need not hold its cgroup's directory fds (5 on v1):
 * parked, they are opened again by the next call that needs them. Only
 * while no exec runs and no other thread calls into box. */
void cage_box_park(struct cage_box *box);
pid_t cage_box_init_pid(const struct cage_box *box);
/* A pidfd of pid 1 (borrowed: valid until cage_box_destroy). */
int cage_box_pidfd(const struct cage_box *box);
/* "v2", "v1" or "none" (rlimits only): what enforces the sandbox's limits. */
const char *cage_box_limits_backend(const struct cage_box *box);
/* "run-<pid>-<n>", or NULL without a cgroup backend. */
const char *cage_box_cgroup_name(const struct cage_box *box);
/* The host uid/gid the sandbox user (1000 inside) maps to. */
uid_t cage_box_host_uid(const struct cage_box *box);
gid_t cage_box_host_gid(const struct cage_box *box);

/* Kills every process of the sandbox, pid 1 included; safe while execs
 * run on other threads (they end at once, status "cancelled" with a
 * reason saying the sandbox was stopped). */
void cage_box_kill(struct cage_box *box);
/* Only the SIGKILL to pid 1 (which ends its pid namespace at once): the
 * cheap half of cage_box_kill, for callers that destroy the box later. */
void cage_box_kill_init(struct cage_box *box);

/* Kills what is left, removes the sandbox's cgroup, releases its uid slot
 * and frees. The caller guarantees no exec is still running on the box
 * (cage_box_kill, then wait for them). Accepts NULL; returns NULL. */
struct cage_box *cage_box_destroy(struct cage_box *box);

#endif
