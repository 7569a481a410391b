/* The seccomp policy, expressed with libseccomp. Used at build time by
 * tools/gen-seccomp.c (and by the unit tests); see seccomp_policy.c. */
#ifndef CODECAGE_CORE_SECCOMP_POLICY_H
#define CODECAGE_CORE_SECCOMP_POLICY_H

#include "codecage/codecage.h"

/* The two stacked programs: which syscalls exist, and which arguments of
 * those are refused. */
enum cage_seccomp_program {
        CAGE_SECCOMP_SYSCALLS,
        CAGE_SECCOMP_ARGUMENTS,
};

/* Writes one program as raw BPF (struct sock_filter[]) to fd. */
int cage_seccomp_policy_export(enum cage_seccomp_program which, int fd, struct cage_error *err);

/* The classification of every syscall, NULL-terminated, for docs and
 * tests: allowed, refused with EPERM, answered ENOSYS as if absent. */
extern const char *const cage_seccomp_allowed[];
extern const char *const cage_seccomp_denied[];
extern const char *const cage_seccomp_absent[];

#endif
