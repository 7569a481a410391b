/* Watching a running program, shared by one-shot runs (supervise.c) and
 * execs in long-lived sandboxes (box_exec.c): its output pipes (head and
 * tail kept, streamed to on_output), its stdin fed from memory, the
 * wall-clock deadline, an optional CPU budget, the cancel fd and the
 * output flood stop — plus the caller's own fds (a report or status pipe,
 * pidfds), each with a handler. The loop ends when the caller says the
 * program is done or a limit trips; the caller then kills what is left and
 * drains. */
#ifndef CODECAGE_CORE_WATCH_H
#define CODECAGE_CORE_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "output.h"

struct cage_cgroup;

/* One more fd to poll (while *fd >= 0) and what to do when it is ready. */
struct watch_fd {
        int *fd;
        void (*ready)(void *ctx);
};

struct watch {
        const struct cage_run_options *opts; /* never NULL */
        uint64_t output_stop_bytes;          /* 0: no stop */
        uint64_t timeout_ms, deadline_ns;
        uint64_t cpu_time_ms;       /* 0: no CPU budget */
        struct cage_cgroup *cpu_cg; /* where the budget's CPU time is read */
        int out_r, err_r, in_w;     /* ours; -1 when closed */
        const char *in_data;
        size_t in_left;
        struct output_capture cap_out, cap_err;
        bool timed_out, cpu_exceeded, cancelled, flooded;
};

/* No fds, no limits; opts may be NULL (keep output, no cancel fd). */
void watch_init(struct watch *w, const struct cage_run_options *opts);
/* Head+tail buffers of output_max_bytes per stream (none when the caller
 * does not keep output). */
int watch_capture(struct watch *w, uint64_t output_max_bytes);
/* The deadline starts now. */
void watch_start_clock(struct watch *w, uint64_t timeout_ms);
/* A limit tripped: timeout, CPU budget, cancel or output flood. */
bool watch_tripped(const struct watch *w);
/* Polls until done(ctx) or a limit trips. */
void watch_loop(struct watch *w, const struct watch_fd *extra, size_t n_extra,
                bool (*done)(void *ctx), void *ctx);
/* Once what runs was killed: reads the output pipes to their end (bounded;
 * not at all after the output stop), then whatever the extra fds already
 * hold. The extras here are pipes whose handler reads one record and
 * closes the fd at its end. */
void watch_drain(struct watch *w, const struct watch_fd *extra, size_t n_extra, void *ctx);
/* Adds codecage's own line to the program's stderr. */
void watch_note(struct watch *w, const char *line);
/* The captured streams into res->out and res->err. */
int watch_finish(struct watch *w, struct cage_result *res);
/* Closes our fds and frees the buffers. */
void watch_free(struct watch *w);

#endif
