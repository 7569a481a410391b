/* Unit tests for the seccomp program: it builds, denied calls fail with
 * EPERM even with invalid arguments (so the filter, not the kernel, said
 * no), clone3 gets ENOSYS, and ordinary calls still work. */
#include <errno.h>
#include <stdbool.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "core/seccomp.h"
#include "core/seccomp_policy.h"
#include "harness.h"

/* Runs fn in a child under the filter; returns its exit status. */
static int under_filter(int (*fn)(void))
{
        const struct sock_fprog *prog;
        if (cage_seccomp_program(&prog, NULL) < 0)
                return -1;
        pid_t pid = fork();
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || cage_seccomp_install(prog) < 0)
                        _exit(100);
                _exit(fn());
        }
        int status;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

static int bpf_is_eperm(void)
{
        return syscall(SYS_bpf, -1, NULL, 0) < 0 && errno == EPERM ? 0 : 1;
}

static int bpf_is_not_eperm(void)
{
        return syscall(SYS_bpf, -1, NULL, 0) < 0 && errno != EPERM ? 0 : 1;
}

static int clone3_is_enosys(void)
{
        return syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS ? 0 : 1;
}

static int clone_newuser_is_eperm(void)
{
        long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
        if (r == 0)
                _exit(0);
        return r < 0 && errno == EPERM ? 0 : 1;
}

static int mount_and_unshare_are_eperm(void)
{
        bool ok = syscall(SYS_mount, NULL, NULL, NULL, 0, NULL) < 0 && errno == EPERM;
        ok = ok && syscall(SYS_unshare, 0x7fffffff) < 0 && errno == EPERM;
        ok = ok && syscall(SYS_keyctl, -1, 0, 0, 0, 0) < 0 && errno == EPERM;
        return ok ? 0 : 1;
}

static int ordinary_calls_work(void)
{
        return getpid() > 0 && syscall(SYS_getppid) > 0 && access("/", R_OK) == 0 ? 0 : 1;
}

static int setuid_modes_refused(void)
{
        char path[] = "/tmp/codecage-seccomp-XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0)
                return 2;
        bool ok = chmod(path, 0755) == 0;                    /* plain modes work */
        ok = ok && chmod(path, 04755) < 0 && errno == EPERM; /* setuid refused */
        ok = ok && fchmod(fd, 02755) < 0 && errno == EPERM;  /* setgid refused */
        ok = ok && fchmodat(AT_FDCWD, path, 06755, 0) < 0 && errno == EPERM;
        int fd2 = open("/tmp/codecage-seccomp-suid", O_CREAT | O_WRONLY | O_CLOEXEC, 04755);
        ok = ok && fd2 < 0 && errno == EPERM;
        ok = ok && mkdir("/tmp/codecage-seccomp-sgid", 02755) < 0 && errno == EPERM;
        ok = ok && syscall(SYS_openat2, AT_FDCWD, path, NULL, 0) < 0 && errno == ENOSYS;
        close(fd);
        unlink(path);
        return ok ? 0 : 1;
}

TEST(setuid_and_setgid_modes_are_refused)
{
        CHECK(under_filter(setuid_modes_refused) == 0);
}

TEST(program_builds_and_is_cached)
{
        const struct sock_fprog *a = NULL, *b = NULL;
        CHECK(cage_seccomp_program(&a, NULL) == 0);
        CHECK(cage_seccomp_program(&b, NULL) == 0);
        CHECK(a && a == b && a->len > 10);
}

TEST(denied_calls_get_eperm_from_the_filter)
{
        CHECK(under_filter(bpf_is_eperm) == 0);
        CHECK(under_filter(mount_and_unshare_are_eperm) == 0);
        CHECK(under_filter(clone_newuser_is_eperm) == 0);
        /* Without the filter the kernel answers bpf(-1) with EINVAL. */
        CHECK(bpf_is_not_eperm() == 0);
}

TEST(clone3_gets_enosys)
{
        CHECK(under_filter(clone3_is_enosys) == 0);
}

TEST(ordinary_calls_still_work)
{
        CHECK(under_filter(ordinary_calls_work) == 0);
}

TEST(denied_list_names_the_families)
{
        const char *want[] = {"bpf",
                              "keyctl",
                              "ptrace",
                              "mount",
                              "fsopen",
                              "io_uring_setup",
                              "userfaultfd",
                              "perf_event_open",
                              "kexec_load",
                              "init_module",
                              "unshare",
                              "setns",
                              "open_by_handle_at"};
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                bool found = false;
                for (size_t j = 0; cage_seccomp_denied[j]; j++)
                        found = found || strcmp(cage_seccomp_denied[j], want[i]) == 0;
                CHECK(found);
        }
}

TEST(generated_program_matches_the_policy)
{
        const struct sock_fprog *prog = NULL;
        CHECK(cage_seccomp_program(&prog, NULL) == 0);
        int fd = memfd_create("t", MFD_CLOEXEC);
        CHECK(fd >= 0 && cage_seccomp_policy_export(fd, NULL) == 0);
        off_t size = lseek(fd, 0, SEEK_END);
        CHECK(prog && size == (off_t)(prog->len * sizeof(struct sock_filter)));
        struct sock_filter fresh[4096];
        CHECK(size > 0 && (size_t)size <= sizeof(fresh));
        CHECK(pread(fd, fresh, (size_t)size, 0) == size);
        CHECK(prog && memcmp(fresh, prog->filter, (size_t)size) == 0);
        close(fd);
}

RUN_TESTS(T(program_builds_and_is_cached), T(generated_program_matches_the_policy),
          T(denied_calls_get_eperm_from_the_filter), T(clone3_gets_enosys),
          T(setuid_and_setgid_modes_are_refused), T(ordinary_calls_still_work),
          T(denied_list_names_the_families))
