/* The wire protocol between the server and codecage-init, pid 1 of a
 * long-lived sandbox (runtime/codecage-init.c).
 *
 * Requests go server -> init on a SOCK_SEQPACKET socket that init holds as
 * fd BOX_CTL_FD: one message per request, so no framing can be broken. An
 * EXEC carries five fds (SCM_RIGHTS, in enum box_exec_fd order); init starts
 * the exec as a child in its own session which waits for one byte on the
 * go pipe (the server moves it into its own cgroup first), then execs.
 * A sixth fd, when present, becomes the program's fd 3 (a session's
 * channel, docs/SESSION-PROTOCOL.md).
 * Everything about that exec comes back on its own status pipe as
 * struct box_status records: STARTED (its pid inside), then EXITED (wait
 * status) or EXEC_FAILED / SETUP_FAILED (errno) — so concurrent execs never
 * share a channel and need no demultiplexing. Init never trusts a request
 * beyond its bounds and the server never trusts what init says beyond
 * "which pid", which it checks against the kernel's view. */
#ifndef CODECAGE_CORE_BOX_PROTO_H
#define CODECAGE_CORE_BOX_PROTO_H

#include <stdint.h>

#define BOX_CTL_FD 3
/* A sandbox a zygote forked: its pid 1 runs `codecage-init PID` with the
 * status pipe of the session driver it forked (pid PID inside) as this fd;
 * init reports that process as the exec with id BOX_ADOPTED_EXEC_ID. */
#define BOX_ADOPTED_STATUS_FD 4
#define BOX_ADOPTED_EXEC_ID   0
#define BOX_EXEC_BLOB_MAX     (128 * 1024) /* argv + env + cwd, NUL-separated */
#define BOX_EXEC_ARGS_MAX     4096         /* argv + env entries */
#define BOX_EXECS_MAX         64           /* concurrent execs per sandbox */

enum box_request_kind {
        BOX_REQ_EXEC = 1,
        BOX_REQ_SIGNAL = 2, /* signal an exec's process group */
};

enum box_exec_fd {
        BOX_FD_STDIN,
        BOX_FD_STDOUT,
        BOX_FD_STDERR,
        BOX_FD_STATUS,
        BOX_FD_GO,
        BOX_FD_COUNT,                  /* the fds every EXEC carries */
        BOX_FD_CHANNEL = BOX_FD_COUNT, /* optional sixth: becomes the exec's fd 3 */
        BOX_FD_MAX,
};

/* Followed in the same message by `blob_len` bytes: argc strings, then envc
 * strings, then the working directory, each NUL-terminated. */
struct box_exec_request {
        uint32_t kind; /* BOX_REQ_EXEC */
        uint32_t exec_id;
        uint32_t argc;
        uint32_t envc;
        uint32_t blob_len;
};

struct box_signal_request {
        uint32_t kind; /* BOX_REQ_SIGNAL */
        uint32_t exec_id;
        int32_t signal;
};

enum box_status_kind {
        BOX_STATUS_STARTED = 1,      /* value: the exec's pid inside the sandbox */
        BOX_STATUS_EXITED = 2,       /* value: its wait status */
        BOX_STATUS_EXEC_FAILED = 3,  /* value: errno of execve (or chdir) */
        BOX_STATUS_SETUP_FAILED = 4, /* value: errno; init could not start it */
};

struct box_status {
        int32_t kind;
        int32_t value;
};

#endif
