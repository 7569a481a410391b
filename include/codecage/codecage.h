/* codecage public C API: run one command in a fresh, isolated sandbox.
 *
 * The flow is parse -> validate -> launch: a caller fills a struct cage_spec
 * (start from cage_spec_init() for the secure defaults), calls
 * cage_spec_validate(), then cage_run(). Nothing touches the system until
 * cage_run() is called. All functions return >= 0 on success and -errno on
 * failure, filling the caller's struct cage_error with a one-line message.
 * The library never exits the process and never logs. */
#ifndef CODECAGE_CODECAGE_H
#define CODECAGE_CODECAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAGE_ERROR_MESSAGE_MAX 512

/* An error filled by the library: a negative errno and a human message that
 * names what failed (a spec field, a launch step, ...). */
struct cage_error {
        int code;
        char message[CAGE_ERROR_MESSAGE_MAX];
};

/* A host path made visible inside the sandbox. */
struct cage_mount {
        const char *source; /* absolute host path */
        const char *target; /* absolute path inside the sandbox */
        bool writable;
};

#define CAGE_MOUNTS_MAX 32
#define CAGE_ENV_MAX    256

/* Protections that a build made with -Dunsafe_debug=true can switch off, so
 * the security tests can show that each attack succeeds without its guard.
 * In a normal build cage_spec_validate() refuses any of these bits. */
enum cage_debug_disable {
        CAGE_DEBUG_NO_SECCOMP = 1 << 0,
        CAGE_DEBUG_NO_CAPS_DROP = 1 << 1,
        CAGE_DEBUG_NO_NO_NEW_PRIVS = 1 << 2,
        CAGE_DEBUG_HOST_ROOTFS = 1 << 3, /* bind the whole host / read-only */
        CAGE_DEBUG_NO_PROC_MASK = 1 << 4,
        CAGE_DEBUG_NO_LIMITS = 1 << 5, /* no cgroup limits and no rlimits */
        CAGE_DEBUG_KEEP_FDS = 1 << 6,
        CAGE_DEBUG_KEEP_ENV = 1 << 7,
        CAGE_DEBUG_NO_SETSID = 1 << 8,
        CAGE_DEBUG_NO_PIDNS = 1 << 9,
        CAGE_DEBUG_NO_NETNS = 1 << 10,
        /* As root: userns owned by root (charged); no limits inside either way. */
        CAGE_DEBUG_ROOT_OWNED_USERNS = 1 << 11,
};

/* What a sandbox may do. Sizes are bytes, times milliseconds. */
struct cage_spec {
        const char *image;                 /* "host" or an absolute rootfs directory */
        char *const *argv;                 /* program and arguments, NULL-terminated */
        const char *env[CAGE_ENV_MAX + 1]; /* "K=V" strings, NULL-terminated */
        size_t n_env;
        struct cage_mount mounts[CAGE_MOUNTS_MAX];
        size_t n_mounts;
        const char *workdir;         /* absolute path inside; default /workspace */
        uint32_t uid, gid;           /* the program's ids inside (an image's User); default 1000.
                                      * Whatever they are, they map to an unprivileged host id
                                      * of this sandbox's own, with no capabilities. */
        uint64_t memory_bytes;       /* cgroup memory limit (incl. tmpfs pages) */
        double cpus;                 /* CPU bandwidth, may be fractional */
        uint32_t pids;               /* max processes + threads */
        uint64_t disk_bytes;         /* size of the tmpfs behind /workspace, /tmp, /dev/shm */
        uint64_t timeout_ms;         /* wall clock */
        uint64_t cpu_time_ms;        /* total CPU time of the tree; 0 = none */
        uint64_t output_max_bytes;   /* kept per stream (head + tail) */
        uint64_t output_stop_bytes;  /* stop the run past this much output */
        uint32_t nofile;             /* RLIMIT_NOFILE */
        int stdin_fd;                /* -1: /dev/null */
        uint32_t debug_disable;      /* enum cage_debug_disable; tests only */
        const char *debug_fail_step; /* unsafe_debug builds: make this launch step fail */
};

enum cage_status {
        CAGE_STATUS_OK,
        CAGE_STATUS_ERROR,
        CAGE_STATUS_TIMEOUT,
        CAGE_STATUS_OOM,
        CAGE_STATUS_OUTPUT_LIMIT,
        CAGE_STATUS_CANCELLED,
        CAGE_STATUS_INTERNAL_ERROR,
};

const char *cage_status_to_string(enum cage_status status);

/* One captured stream: the head and tail of what the program wrote. */
struct cage_stream {
        char *data; /* sanitised UTF-8, with a marker line if cut */
        size_t len;
        uint64_t total; /* bytes the program wrote */
        uint64_t kept;  /* bytes of those that are in data */
        bool truncated;
};

struct cage_result {
        enum cage_status status;
        int exit_code; /* -1 when killed by a signal or never started */
        int signal;    /* 0 unless killed by a signal */
        struct cage_stream out;
        struct cage_stream err;
        uint64_t duration_ms;
        uint64_t cpu_ms;
        uint64_t peak_memory_bytes;
        const char *limits_backend;          /* "v1", "v2" or "none" (rlimits only) */
        char reason[CAGE_ERROR_MESSAGE_MAX]; /* why, for non-ok statuses */
};

/* Called with raw bytes as the program writes them (stream 1 or 2), for
 * callers that show output live. Returning non-zero cancels the run. */
typedef int (*cage_output_fn)(void *ctx, int stream, const void *buf, size_t len);

struct cage_run_options {
        cage_output_fn on_output;
        void *on_output_ctx;
        bool keep_output; /* capture head + tail into the result streams */
        int cancel_fd;    /* readable -> cancel the run; -1 if unused */
};

void cage_spec_init(struct cage_spec *spec);
int cage_spec_validate(const struct cage_spec *spec, struct cage_error *err);

/* Runs spec->argv in a fresh sandbox and waits for it. A return < 0 means
 * the run could not be judged at all; otherwise *result says what happened,
 * including status CAGE_STATUS_INTERNAL_ERROR when the launcher failed. */
int cage_run(const struct cage_spec *spec, const struct cage_run_options *opts,
             struct cage_result *result, struct cage_error *err);

void cage_result_free(struct cage_result *result);

/* The result contract as a JSON document (caller frees). NULL on ENOMEM. */
char *cage_result_to_json(const struct cage_result *result);

#ifdef __cplusplus
}
#endif
#endif
