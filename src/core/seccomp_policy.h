/* The seccomp policy, expressed with libseccomp. Used at build time by
 * tools/gen-seccomp.c (and by the unit tests); see seccomp_policy.c. */
#ifndef CODECAGE_CORE_SECCOMP_POLICY_H
#define CODECAGE_CORE_SECCOMP_POLICY_H

#include "codecage/codecage.h"

/* Writes the policy as a raw BPF program (struct sock_filter[]) to fd. */
int cage_seccomp_policy_export(int fd, struct cage_error *err);

/* The syscalls the filter refuses with EPERM, for docs and tests. */
extern const char *const cage_seccomp_denied[];

#endif
