/* The state of a long-lived sandbox, shared by box.c (lifecycle) and
 * box_exec.c (one exec). */
#ifndef CODECAGE_CORE_BOX_PRIVATE_H
#define CODECAGE_CORE_BOX_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "box.h"
#include "cgroup.h"
#include "userns.h"

struct cage_box {
        pid_t pid;
        int pidfd;
        int ctl_fd;
        struct id_slot slot;
        struct cgroup_host cg_host;
        struct cage_cgroup *cg;
        pthread_mutex_t lock; /* ctl sends, exec ids, reaping */
        uint32_t next_exec;
        bool reaped;
        bool killed;
        char **envp; /* the sandbox's own environment (plan), owned */
        uint64_t memory_bytes;
};

#endif
