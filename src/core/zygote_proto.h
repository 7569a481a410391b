/* The spawn request the server sends a zygote's template
 * (src/core/zygote.c to runtime/zygote_child.c's cz_serve()).
 *
 * One SOCK_SEQPACKET message of exactly sizeof(struct zygote_spawn_request)
 * bytes, carrying the child's fds as SCM_RIGHTS in enum zygote_child_fd
 * order, plus the workspace's detached mount when `workspace` is 1. The
 * template reads it with no interpreter (so that serving it writes almost
 * none of its pages, each of which every live child would make it copy) and
 * ignores a message of another size, magic or fd count: the server then
 * times out waiting for the child. Strings are NUL-terminated within their
 * arrays. */
#ifndef CODECAGE_CORE_ZYGOTE_PROTO_H
#define CODECAGE_CORE_ZYGOTE_PROTO_H

#include <stdint.h>

#define ZYGOTE_SPAWN_MAGIC 0x32707a63u /* "czp2" */
#define ZYGOTE_RLIMITS_MAX 8
#define ZYGOTE_SCRATCH_MAX 128
#define ZYGOTE_WORKDIR_MAX 4096

/* The child's fds in a request, in this order (they become its 1..n). */
enum zygote_child_fd {
        ZYGOTE_FD_STDOUT,
        ZYGOTE_FD_STDERR,
        ZYGOTE_FD_CHANNEL,
        ZYGOTE_FD_SYNC,
        ZYGOTE_FD_CTL,
        ZYGOTE_FD_STATUS,
        ZYGOTE_FD_INIT,
        ZYGOTE_FD_ENV,
        ZYGOTE_CHILD_FDS
};

struct zygote_rlimit {
        uint32_t resource, pad;
        uint64_t soft, hard;
};

struct zygote_spawn_request {
        uint32_t magic;
        uint32_t host_uid, host_gid; /* the child's uid slot */
        uint32_t shared;             /* 1: the template's own ids (unsafe debug builds) */
        uint32_t workspace;          /* 1: one more fd, the workspace's detached mount */
        uint32_t n_rlimits;
        uint64_t rlimit_as; /* the driver's RLIMIT_AS when no memory cgroup caps it, else 0 */
        struct zygote_rlimit rlimits[ZYGOTE_RLIMITS_MAX];
        char scratch_opts[ZYGOTE_SCRATCH_MAX]; /* the scratch tmpfs's mount options */
        char workdir[ZYGOTE_WORKDIR_MAX];      /* the driver's working directory */
};

#endif
