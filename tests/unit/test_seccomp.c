/* Unit tests for the seccomp programs: they build and match the policy,
 * every syscall the kernel headers name is classified exactly once, denied
 * calls fail with EPERM even with invalid arguments (so the filter, not the
 * kernel, said no), unknown and absent calls get ENOSYS, dangerous
 * arguments of allowed calls are refused, and ordinary calls still work. */
#include <errno.h>
#include <stdbool.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "core/seccomp.h"
#include "core/seccomp_policy.h"
#include "harness.h"
#include "util/cleanup.h"

/* Runs fn in a child under the filter; returns its exit status. */
static int under_filter(int (*fn)(void))
{
        const struct cage_seccomp_filters *prog;
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

static long modify_ldt_call(void)
{
        return syscall(SYS_modify_ldt, 0, NULL, 0);
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
        ok = ok && chmod(path, 01777) == 0; /* the sticky bit is fine */
        close(fd);
        unlink(path);
        return ok ? 0 : 1;
}

TEST(setuid_and_setgid_modes_are_refused)
{
        CHECK(under_filter(setuid_modes_refused) == 0);
}

static bool is_errno(long r, int e)
{
        return r < 0 && errno == e;
}

/* Syscalls no libseccomp of Debian 12 knows (newer than its tables), by
 * x86_64 number: statmount, listmount, lsm_get_self_attr, lsm_list_modules. */
static const long newer_syscalls[] = {457, 458, 459, 461};

static bool kernel_at_least(unsigned want_major, unsigned want_minor)
{
        struct utsname u;
        unsigned major = 0, minor = 0;
        if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2)
                return false;
        return major > want_major || (major == want_major && minor >= want_minor);
}

static int newer_syscalls_are_enosys(void)
{
        for (size_t i = 0; i < ELEMENTSOF(newer_syscalls); i++)
                if (!is_errno(syscall(newer_syscalls[i], 0, 0, 0, 0), ENOSYS))
                        return 1;
        return 0;
}

static int refused_families(void)
{
        bool ok = is_errno(modify_ldt_call(), EPERM);
        ok = ok && is_errno(syscall(SYS_mbind, 0, 0, 0, 0, 0, 0), EPERM);
        ok = ok && is_errno(syscall(SYS_set_mempolicy, 0, NULL, 0), EPERM);
        ok = ok && is_errno(syscall(SYS_migrate_pages, 0, 0, NULL, NULL), EPERM);
        ok = ok && is_errno(syscall(SYS_ustat, 0, NULL), EPERM);
        ok = ok && is_errno(syscall(SYS_sysfs, 0), EPERM);
        return ok ? 0 : 1;
}

static int personality_only_default_or_query(void)
{
        bool ok = personality(0xffffffff) >= 0;
        ok = ok && personality(PER_LINUX) >= 0;
        ok = ok && is_errno(personality(PER_LINUX | ADDR_NO_RANDOMIZE), ENOSYS);
        ok = ok && is_errno(personality(PER_LINUX | READ_IMPLIES_EXEC), ENOSYS);
        ok = ok && is_errno(personality(PER_LINUX32), ENOSYS);
        return ok ? 0 : 1;
}

static int tty_ioctls_refused(void)
{
        static const unsigned long requests[] = {TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS};
        for (size_t i = 0; i < ELEMENTSOF(requests); i++)
                if (!is_errno(ioctl(-1, requests[i], NULL), EPERM))
                        return 1;
        /* others reach the kernel: a bad fd is EBADF */
        return is_errno(ioctl(-1, TIOCGWINSZ, NULL), EBADF) ? 0 : 2;
}

static bool socket_works(int family, int type, int protocol)
{
        int fd = socket(family, type | SOCK_CLOEXEC, protocol);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

static int socket_families(void)
{
        bool ok = socket_works(AF_UNIX, SOCK_STREAM, 0) && socket_works(AF_INET, SOCK_DGRAM, 0) &&
                  socket_works(AF_INET6, SOCK_STREAM, 0) &&
                  socket_works(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
        if (!ok)
                return 1;
        ok = is_errno(socket(AF_PACKET, SOCK_RAW, 0), EPERM) &&
             is_errno(socket(AF_VSOCK, SOCK_STREAM, 0), EPERM) &&
             is_errno(socket(AF_INET, SOCK_RAW, IPPROTO_RAW), EPERM) &&
             is_errno(socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK, 0), EPERM) &&
             is_errno(socket(AF_INET, SOCK_PACKET, 0), EPERM) &&
             is_errno(socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT), EPERM) &&
             is_errno(socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER), EPERM) &&
             is_errno(socket(AF_NETLINK, SOCK_RAW, NETLINK_XFRM), EPERM) &&
             is_errno(socket(AF_KEY, SOCK_RAW, 2), EPERM) &&
             is_errno(socket(200, SOCK_STREAM, 0), EPERM);
        if (!ok)
                return 2;
        int sv[2];
        ok = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0;
        if (ok) {
                close(sv[0]);
                close(sv[1]);
        }
        return ok && is_errno(socketpair(AF_INET, SOCK_STREAM, 0, sv), EPERM) ? 0 : 3;
}

TEST(program_builds_and_is_cached)
{
        const struct cage_seccomp_filters *a = NULL, *b = NULL;
        CHECK(cage_seccomp_program(&a, NULL) == 0);
        CHECK(cage_seccomp_program(&b, NULL) == 0);
        CHECK(a && a == b && a->syscalls.len > 10 && a->arguments.len > 10);
}

TEST(denied_calls_get_eperm_from_the_filter)
{
        CHECK(under_filter(bpf_is_eperm) == 0);
        CHECK(under_filter(mount_and_unshare_are_eperm) == 0);
        CHECK(under_filter(clone_newuser_is_eperm) == 0);
        CHECK(under_filter(refused_families) == 0);
        /* Without the filter the kernel answers bpf(-1) with EINVAL. */
        CHECK(bpf_is_not_eperm() == 0);
}

TEST(unknown_and_absent_calls_get_enosys)
{
        CHECK(under_filter(clone3_is_enosys) == 0);
        CHECK(under_filter(newer_syscalls_are_enosys) == 0);
        /* A kernel before 6.8 has none of them: nothing to compare with. */
        if (!kernel_at_least(6, 8))
                SKIP("Linux before 6.8 has no statmount, listmount, lsm_* to compare with");
        /* this kernel has them: unfiltered, they are not ENOSYS */
        CHECK(newer_syscalls_are_enosys() != 0);
}

TEST(dangerous_arguments_are_refused)
{
        CHECK(under_filter(personality_only_default_or_query) == 0);
        CHECK(under_filter(tty_ioctls_refused) == 0);
        CHECK(under_filter(socket_families) == 0);
        /* unfiltered, this host allows what the filter refuses */
        CHECK(personality_only_default_or_query() != 0);
}

TEST(ordinary_calls_still_work)
{
        CHECK(under_filter(ordinary_calls_work) == 0);
}

static int count_in(const char *const *list, const char *name)
{
        int n = 0;
        for (size_t i = 0; list[i]; i++)
                n += strcmp(list[i], name) == 0;
        return n;
}

/* Every __NR_ name in the kernel headers is in exactly one list. */
TEST(every_syscall_of_the_headers_is_classified)
{
        static const char *const headers[] = {"/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
                                              "/usr/include/asm/unistd_64.h"};
        FILE *f = NULL;
        for (size_t i = 0; i < ELEMENTSOF(headers) && !f; i++)
                f = fopen(headers[i], "re");
        CHECK(f != NULL);
        if (!f)
                return;
        char line[256], name[128];
        int seen = 0;
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "#define __NR_%127s", name) != 1)
                        continue;
                seen++;
                int n = count_in(cage_seccomp_allowed, name) + count_in(cage_seccomp_denied, name) +
                        count_in(cage_seccomp_absent, name);
                if (n != 1)
                        fprintf(stderr, "  syscall %s is classified %d times\n", name, n);
                CHECK(n == 1);
        }
        fclose(f);
        CHECK(seen > 300);
}

/* An allowed name this libseccomp does not know would silently be ENOSYS. */
TEST(every_allowed_name_is_known_to_libseccomp)
{
        for (size_t i = 0; cage_seccomp_allowed[i]; i++) {
                bool known =
                        seccomp_syscall_resolve_name(cage_seccomp_allowed[i]) != __NR_SCMP_ERROR;
                if (!known)
                        fprintf(stderr, "  unknown: %s\n", cage_seccomp_allowed[i]);
                CHECK(known);
        }
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
                              "open_by_handle_at",
                              "modify_ldt",
                              "mbind",
                              "ustat"};
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(count_in(cage_seccomp_denied, want[i]) == 1);
}

static void check_matches(enum cage_seccomp_program which, const struct sock_fprog *prog)
{
        int fd = memfd_create("t", MFD_CLOEXEC);
        CHECK(fd >= 0 && cage_seccomp_policy_export(which, fd, NULL) == 0);
        off_t size = lseek(fd, 0, SEEK_END);
        CHECK(size == (off_t)(prog->len * sizeof(struct sock_filter)));
        static struct sock_filter fresh[BPF_MAXINSNS];
        CHECK(size > 0 && (size_t)size <= sizeof(fresh));
        if (size > 0 && (size_t)size <= sizeof(fresh)) {
                CHECK(pread(fd, fresh, (size_t)size, 0) == size);
                CHECK(memcmp(fresh, prog->filter, (size_t)size) == 0);
        }
        close(fd);
}

TEST(generated_programs_match_the_policy)
{
        const struct cage_seccomp_filters *prog = NULL;
        CHECK(cage_seccomp_program(&prog, NULL) == 0);
        if (!prog)
                return;
        check_matches(CAGE_SECCOMP_SYSCALLS, &prog->syscalls);
        check_matches(CAGE_SECCOMP_ARGUMENTS, &prog->arguments);
}

RUN_TESTS(T(program_builds_and_is_cached), T(generated_programs_match_the_policy),
          T(denied_calls_get_eperm_from_the_filter), T(unknown_and_absent_calls_get_enosys),
          T(dangerous_arguments_are_refused), T(setuid_and_setgid_modes_are_refused),
          T(ordinary_calls_still_work), T(every_syscall_of_the_headers_is_classified),
          T(every_allowed_name_is_known_to_libseccomp), T(denied_list_names_the_families))
