/* Installing the sandbox's seccomp filter. The program itself is generated
 * at build time from seccomp_policy.c (see tools/gen-seccomp.c) into
 * cage_seccomp_filter[], so launching a sandbox compiles nothing and the
 * sandboxed child, which must not allocate, installs it with one syscall. */
#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

extern const struct sock_filter cage_seccomp_filter[];
extern const unsigned short cage_seccomp_filter_len;

int cage_seccomp_program(const struct sock_fprog **ret, struct cage_error *err)
{
        static struct sock_fprog program;
        (void)err;
        program.len = cage_seccomp_filter_len;
        program.filter = (struct sock_filter *)cage_seccomp_filter;
        *ret = &program;
        return 0;
}

int cage_seccomp_install(const struct sock_fprog *prog)
{
        /* SECCOMP_FILTER_FLAG_TSYNC is not needed: the sandbox is single
         * threaded when this runs. */
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
                return -errno;
        return 0;
}
