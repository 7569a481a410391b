/* Installing the sandbox's seccomp filters. The programs are generated at
 * build time from seccomp_policy.c (see tools/gen-seccomp.c) into
 * cage_seccomp_syscalls[] and cage_seccomp_arguments[], so launching a
 * sandbox compiles nothing and the sandboxed child, which must not
 * allocate, installs them with two syscalls. */
#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

extern const struct sock_filter cage_seccomp_syscalls[];
extern const unsigned short cage_seccomp_syscalls_len;
extern const struct sock_filter cage_seccomp_arguments[];
extern const unsigned short cage_seccomp_arguments_len;

int cage_seccomp_program(const struct cage_seccomp_filters **ret, struct cage_error *err)
{
        static struct cage_seccomp_filters filters;
        (void)err;
        filters.syscalls.len = cage_seccomp_syscalls_len;
        filters.syscalls.filter = (struct sock_filter *)cage_seccomp_syscalls;
        filters.arguments.len = cage_seccomp_arguments_len;
        filters.arguments.filter = (struct sock_filter *)cage_seccomp_arguments;
        *ret = &filters;
        return 0;
}

static int install_one(const struct sock_fprog *prog)
{
        /* SECCOMP_FILTER_FLAG_TSYNC is not needed: the sandbox is single
         * threaded when this runs. */
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
                return -errno;
        return 0;
}

int cage_seccomp_install(const struct cage_seccomp_filters *filters)
{
        int r = install_one(&filters->syscalls);
        return r < 0 ? r : install_one(&filters->arguments);
}
