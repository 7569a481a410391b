/* The sandbox's seccomp filters: two BPF programs generated at build time
 * from the policy in seccomp_policy.c, installed by the sandboxed child
 * with two seccomp(2) calls. */
#ifndef CODECAGE_CORE_SECCOMP_H
#define CODECAGE_CORE_SECCOMP_H

#include <linux/filter.h>

#include "codecage/codecage.h"

struct cage_seccomp_filters {
        struct sock_fprog syscalls;  /* the allow list: unknown calls get ENOSYS */
        struct sock_fprog arguments; /* dangerous modes of allowed calls: EPERM */
};

/* Returns the shared, immutable programs. */
int cage_seccomp_program(const struct cage_seccomp_filters **ret, struct cage_error *err);
/* Installs both on the calling thread; no_new_privs must already be set. */
int cage_seccomp_install(const struct cage_seccomp_filters *filters);

#endif
