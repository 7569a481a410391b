/* The sandbox's seccomp filter: a BPF program generated at build time from
 * the policy in seccomp_policy.c, installed by the sandboxed child with a
 * single seccomp(2) call. */
#ifndef CODECAGE_CORE_SECCOMP_H
#define CODECAGE_CORE_SECCOMP_H

#include <linux/filter.h>

#include "codecage/codecage.h"

/* Returns the shared, immutable filter program. */
int cage_seccomp_program(const struct sock_fprog **ret, struct cage_error *err);
/* Installs prog on the calling thread; no_new_privs must already be set. */
int cage_seccomp_install(const struct sock_fprog *prog);

#endif
