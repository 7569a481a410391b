/* The sandbox's seccomp filter. It is compiled once per process with
 * libseccomp in the supervisor and kept as raw BPF, so the sandboxed child
 * (which must not allocate) installs it with a single seccomp(2) call. */
#ifndef CODECAGE_CORE_SECCOMP_H
#define CODECAGE_CORE_SECCOMP_H

#include <linux/filter.h>

#include "codecage/codecage.h"

/* Returns the shared, immutable filter program (built on first use). */
int cage_seccomp_program(const struct sock_fprog **ret, struct cage_error *err);
/* Installs prog on the calling thread; no_new_privs must already be set. */
int cage_seccomp_install(const struct sock_fprog *prog);

/* For docs and tests: the syscalls the filter refuses with EPERM. */
extern const char *const cage_seccomp_denied[];

#endif
