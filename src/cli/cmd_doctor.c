/* `codecage doctor [--json]`: checks what this host offers a sandbox and
 * prints, per check, a verdict (ok / warn / FAIL), what was found and, for
 * anything not ok, the exact command or setting that fixes it.
 *
 * This file owns the list of host checks, their verdicts and fix texts, and
 * the two output formats. Cgroup facts are gathered once (struct host) since
 * three checks judge them; every other check is one small function. The
 * namespaces check runs the real launch (core/probe.c: every containment
 * step a run takes) and only turns the step that failed into a fix. Probes
 * that could hang or change the calling process -- the launch, the
 * seccomp install, and cgroup detection (which may move its caller into a
 * "supervisor" leaf group) -- run in forked children under a deadline, so
 * doctor always finishes and leaves itself as it was. The only lasting
 * changes are the ones `codecage run` makes anyway (its "codecage" parent
 * cgroups). Exit status: 0 unless a check FAILs (warnings do not), 1 if one
 * does, EXIT_CODECAGE_FAILED for a usage error. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "services/workspace.h"
#include "core/cgroup.h"
#include "core/probe.h"
#include "core/seccomp.h"
#include "core/userns.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/fdutil.h"

#define PROBE_TIMEOUT_MS 5000 /* a probe child is killed after this */
#define REAP_TIMEOUT_MS  1000 /* how long to wait for a killed probe to go */
#define TEXT_MAX         1024

#define CGROUP_FS_ROOT   "/sys/fs/cgroup"
#define CGROUP_V2_HYBRID "/sys/fs/cgroup/unified"
#define RUN_DIR          "/run/codecage"
#define PYTHON           "/usr/bin/python3"
#define SYSCTL_CONF      "/etc/sysctl.d/99-codecage.conf"

#define DELEGATE_FIX                                                                               \
        "systemd-run --user --scope -p Delegate=yes codecage ... (or export "                      \
        "CODECAGE_CGROUP_PARENT=<a cgroup v2 directory you can write>)"
#define CONTAINER_FIX                                                                              \
        "if codecage runs inside a container, start that container with --security-opt "           \
        "seccomp=unconfined --security-opt apparmor=unconfined; on a host, look for AppArmor or "  \
        "SELinux denials in `dmesg`"

enum verdict {
        VERDICT_OK,
        VERDICT_WARN,
        VERDICT_FAIL,
};

static const char *const verdict_text[] = {"ok", "warn", "FAIL"};
static const char *const verdict_json[] = {"ok", "warn", "fail"};

struct check {
        const char *name;
        enum verdict verdict;
        char detail[TEXT_MAX];
        char fix[TEXT_MAX];
};

/* ---- cgroup facts ---- */

enum ctrl {
        CTRL_MEMORY,
        CTRL_PIDS,
        CTRL_CPU,
        CTRL_CPUACCT,
        CTRL_FREEZER,
        CTRL_MAX,
};

static const char *const ctrl_names[CTRL_MAX] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

/* What a sandbox loses without each controller. */
static const char *const ctrl_loss[CTRL_MAX] = {
        "--memory falls back to RLIMIT_AS (counts mappings, not resident memory)",
        "--pids falls back to RLIMIT_NPROC",
        "--cpus is not enforced",
        "cpu_ms comes from rusage of reaped processes only",
        "kill cannot freeze the tree before signalling it",
};

/* What cage_cgroup_host_detect() said, as reported by a probe child. */
struct cg_report {
        int r;
        struct cgroup_host host;
        struct cage_error err;
};

struct host {
        bool root;
        const char *sudo;         /* prefix for fix commands: "sudo " unless root */
        const char *cg_forced;    /* CODECAGE_CGROUP, or NULL */
        struct cg_report cg;      /* the backend `codecage run` would use */
        struct cg_report cg_auto; /* auto-detection (cg itself unless forced) */
        struct cg_report cg_why;  /* auto gave none: its natural backend forced, for the reason */
        const char *v2_mount;     /* NULL, CGROUP_FS_ROOT or CGROUP_V2_HYBRID */
        bool v2_root;             /* CGROUP_FS_ROOT itself is cgroup v2 */
        char v2_controllers[256]; /* cgroup.controllers at the v2 mount */
        bool v1[CTRL_MAX];        /* CGROUP_FS_ROOT/<controller> is a v1 hierarchy */
        bool any_v1;
};

/* ---- text helpers ---- */

__attribute__((format(printf, 4, 0))) static void vappend(char *buf, size_t size, const char *sep,
                                                          const char *fmt, va_list ap)
{
        size_t len = strnlen(buf, size);
        if (len > 0 && sep) {
                int n = snprintf(buf + len, size - len, "%s", sep);
                if (n < 0 || (size_t)n >= size - len)
                        return;
                len += (size_t)n;
        }
        if (len + 1 < size)
                vsnprintf(buf + len, size - len, fmt, ap);
}

__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t size, const char *fmt,
                                                         ...)
{
        va_list ap;
        va_start(ap, fmt);
        vappend(buf, size, NULL, fmt, ap);
        va_end(ap);
}

/* Records a finding: raises the check's verdict to v and appends the text. */
__attribute__((format(printf, 3, 4))) static void found(struct check *c, enum verdict v,
                                                        const char *fmt, ...)
{
        va_list ap;
        if (v > c->verdict)
                c->verdict = v;
        va_start(ap, fmt);
        vappend(c->detail, sizeof(c->detail), "; ", fmt, ap);
        va_end(ap);
}

/* Appends a fix; several are separated by "; ". */
__attribute__((format(printf, 2, 3))) static void fix(struct check *c, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vappend(c->fix, sizeof(c->fix), "; ", fmt, ap);
        va_end(ap);
}

static void fix_sysctl(struct check *c, const struct host *h, const char *key, const char *value)
{
        fix(c,
            "%ssysctl -w %s=%s (to keep it across reboots: echo %s=%s | %stee -a " SYSCTL_CONF ")",
            h->sudo, key, value, key, value, h->sudo);
}

static const char *errno_name(int e)
{
        const char *name = strerrorname_np(e);
        return name ? name : "errno";
}

/* Whether word appears in a space- or newline-separated list. */
static bool has_word(const char *list, const char *word)
{
        size_t wlen = strlen(word);
        for (const char *p = list; *p;) {
                size_t len = strcspn(p, " \t\n");
                if (len == wlen && strncmp(p, word, len) == 0)
                        return true;
                p += len;
                p += strspn(p, " \t\n");
        }
        return false;
}

static int read_u64_file(const char *path, uint64_t *ret)
{
        char buf[64], *end;
        ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
        if (n < 0)
                return (int)n;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || end == buf)
                return -EINVAL;
        *ret = v;
        return 0;
}

static void rlim_text(rlim_t v, char *buf, size_t size)
{
        if (v == RLIM_INFINITY)
                snprintf(buf, size, "unlimited");
        else
                snprintf(buf, size, "%llu", (unsigned long long)v);
}

static bool is_fs_type(const char *path, unsigned long magic)
{
        struct statfs sfs;
        return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == magic;
}

/* ---- probes in forked children ---- */

/* A probe's body: runs in the child, writes its report to fd, returns the
 * child's exit status. */
typedef int (*probe_fn)(int fd, const void *arg);

/* A probe that runs a sequence of steps reports the first that failed. */
struct step_report {
        int err;       /* errno of the failed step */
        char step[64]; /* empty: every step passed */
};

static void report_step(int fd, const char *step, int err)
{
        struct step_report rep = {.err = err};
        size_t n = strnlen(step, sizeof(rep.step) - 1);
        memcpy(rep.step, step, n);
        (void)write_all(fd, &rep, sizeof(rep));
}

/* Reads up to size bytes until EOF or the deadline; -ETIMEDOUT then. */
static ssize_t read_until(int fd, void *buf, size_t size, int64_t deadline)
{
        size_t have = 0;
        while (have < size) {
                int64_t left = deadline - (int64_t)clock_mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int r = poll(&p, 1, (int)left);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r <= 0)
                        continue;
                ssize_t n = read(fd, (char *)buf + have, size - have);
                if (n < 0 && errno != EINTR)
                        return -errno;
                if (n == 0)
                        break;
                if (n > 0)
                        have += (size_t)n;
        }
        return (ssize_t)have;
}

/* Reaps pid before the deadline: 0, or -ETIMEDOUT / -errno. */
static int reap_until(pid_t pid, int64_t deadline, int *ret_status)
{
        struct timespec pause = {.tv_nsec = 200 * 1000};
        for (;;) {
                pid_t r = waitpid(pid, ret_status, WNOHANG);
                if (r == pid)
                        return 0;
                if (r < 0 && errno != EINTR)
                        return -errno;
                if ((int64_t)clock_mono_ms() >= deadline)
                        return -ETIMEDOUT;
                nanosleep(&pause, NULL);
                if (pause.tv_nsec < 10 * 1000 * 1000)
                        pause.tv_nsec *= 2;
        }
}

/* Runs fn in a forked child and reads its report (at most size bytes) into
 * buf. A child that does not finish within PROBE_TIMEOUT_MS is killed, and
 * anything it started dies with it (parent-death signals). Returns the
 * report's length with the wait status in *ret_status, or -ETIMEDOUT /
 * -errno. */
static ssize_t probe_run(probe_fn fn, const void *arg, void *buf, size_t size, int *ret_status)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(fds[0]);
                close(fds[1]);
                return -e;
        }
        if (pid == 0) {
                close(fds[0]);
                /* Dies with doctor, so a killed doctor leaves no probe behind. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                _exit(fn(fds[1], arg));
        }
        close(fds[1]);
        int64_t deadline = (int64_t)clock_mono_ms() + PROBE_TIMEOUT_MS;
        ssize_t n = read_until(fds[0], buf, size, deadline);
        close(fds[0]);
        int r = n < 0 ? (int)n : reap_until(pid, deadline, ret_status);
        if (r < 0) {
                kill(pid, SIGKILL);
                (void)reap_until(pid, (int64_t)clock_mono_ms() + REAP_TIMEOUT_MS, ret_status);
                return r;
        }
        return n;
}

static void found_step(struct check *c, const struct step_report *rep)
{
        if (rep->err)
                found(c, VERDICT_FAIL, "%s failed: %s (%s)", rep->step, errno_name(rep->err),
                      strerror(rep->err));
        else
                found(c, VERDICT_FAIL, "%s", rep->step);
}

/* Describes a probe that ended without a report. */
static void probe_died(struct check *c, const char *what, ssize_t n, int status)
{
        if (n == -ETIMEDOUT)
                found(c, VERDICT_FAIL, "%s did not finish within %d s and was killed", what,
                      PROBE_TIMEOUT_MS / 1000);
        else if (n < 0)
                found(c, VERDICT_FAIL, "cannot run %s: %s", what, strerror((int)-n));
        else if (WIFSIGNALED(status))
                found(c, VERDICT_FAIL, "%s was killed by signal %d (%s)", what, WTERMSIG(status),
                      strsignal(WTERMSIG(status)));
        else
                found(c, VERDICT_FAIL, "%s failed with exit status %d and no report", what,
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* ---- facts gathered once ---- */

static int cgroup_probe(int fd, const void *arg)
{
        const char *mode = arg; /* NULL: environment as is; "": auto; else forced */
        if (mode && *mode)
                setenv("CODECAGE_CGROUP", mode, 1);
        else if (mode)
                unsetenv("CODECAGE_CGROUP");
        struct cg_report rep = {0};
        rep.r = cage_cgroup_host_detect(&rep.host, &rep.err);
        return write_all(fd, &rep, sizeof(rep)) < 0;
}

static void detect_cgroup(const char *mode, struct cg_report *ret)
{
        int status = 0;
        memset(ret, 0, sizeof(*ret));
        ssize_t n = probe_run(cgroup_probe, mode, ret, sizeof(*ret), &status);
        if (n == (ssize_t)sizeof(*ret))
                return;
        memset(ret, 0, sizeof(*ret));
        ret->r = n < 0 ? (int)n : -EIO;
        snprintf(ret->err.message, sizeof(ret->err.message), "cgroup detection %s",
                 n == -ETIMEDOUT ? "did not finish within 5 s" : "died without a report");
}

static void gather_cgroup_fs(struct host *h)
{
        if (is_fs_type(CGROUP_FS_ROOT, CGROUP2_SUPER_MAGIC)) {
                h->v2_root = true;
                h->v2_mount = CGROUP_FS_ROOT;
        } else if (is_fs_type(CGROUP_V2_HYBRID, CGROUP2_SUPER_MAGIC)) {
                h->v2_mount = CGROUP_V2_HYBRID;
        }
        if (h->v2_mount) {
                char path[128];
                snprintf(path, sizeof(path), "%s/cgroup.controllers", h->v2_mount);
                if (read_file_at(AT_FDCWD, path, h->v2_controllers, sizeof(h->v2_controllers)) < 0)
                        h->v2_controllers[0] = '\0';
                h->v2_controllers[strcspn(h->v2_controllers, "\n")] = '\0';
        }
        for (int i = 0; i < CTRL_MAX && !h->v2_root; i++) {
                char path[128];
                snprintf(path, sizeof(path), CGROUP_FS_ROOT "/%s", ctrl_names[i]);
                h->v1[i] = is_fs_type(path, CGROUP_SUPER_MAGIC);
                h->any_v1 |= h->v1[i];
        }
}

static void gather(struct host *h)
{
        h->root = geteuid() == 0;
        h->sudo = h->root ? "" : "sudo ";
        gather_cgroup_fs(h);
        const char *forced = getenv("CODECAGE_CGROUP");
        h->cg_forced = forced && *forced ? forced : NULL;
        detect_cgroup(NULL, &h->cg);
        if (h->cg_forced)
                detect_cgroup("", &h->cg_auto);
        else
                h->cg_auto = h->cg;
        /* Auto-detection hides why it found nothing; forcing the backend it
         * would have tried makes detection say. */
        if (h->cg_auto.r == 0 && h->cg_auto.host.backend == CGROUP_BACKEND_NONE)
                detect_cgroup(h->v2_root ? "v2" : "v1", &h->cg_why);
}

static enum cgroup_backend backend_of(const struct cg_report *cg)
{
        return cg->r < 0 ? CGROUP_BACKEND_NONE : cg->host.backend;
}

/* ---- kernel ---- */

static const struct kernel_feature {
        unsigned major, minor;
        const char *name;
        const char *without; /* what happens on older kernels */
        bool root_only, v2_only;
} optional_features[] = {
        {5, 12, "idmapped mounts", "--rw binds are not idmapped", true, false},
        {5, 14, "cgroup.kill", "kill signals each process of a v2 group in turn", false, true},
        {5, 19, "memory.peak", "v2 peak memory is memory.current at the end", false, true},
        {6, 3, "idmapped tmpfs",
         "--rw binds of tmpfs directories are plain binds (their own permissions apply)", true,
         false},
};

static bool kernel_at_least(unsigned major, unsigned minor, unsigned want_major,
                            unsigned want_minor)
{
        return major > want_major || (major == want_major && minor >= want_minor);
}

static void check_kernel(const struct host *h, struct check *c)
{
        struct utsname u;
        unsigned major = 0, minor = 0;
        if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2) {
                found(c, VERDICT_WARN, "cannot tell the kernel version");
                fix(c, "make sure the kernel is Linux 5.10 or newer (`uname -r`)");
                return;
        }
        if (!kernel_at_least(major, minor, 5, 10)) {
                found(c, VERDICT_FAIL,
                      "Linux %s: codecage needs 5.10 or newer (clone3 5.3, pidfd 5.3, close_range "
                      "5.9)",
                      u.release);
                fix(c, "install a 5.10+ kernel (your distribution's current, backports or HWE "
                       "kernel) and reboot");
                return;
        }
        found(c, VERDICT_OK, "Linux %s >= 5.10 (clone3, pidfd, close_range)", u.release);
        bool v2 = backend_of(&h->cg) == CGROUP_BACKEND_V2 || h->v2_root;
        const struct kernel_feature *newest = NULL;
        char have[256] = "";
        for (size_t i = 0; i < ELEMENTSOF(optional_features); i++) {
                const struct kernel_feature *f = &optional_features[i];
                if (kernel_at_least(major, minor, f->major, f->minor)) {
                        append(have, sizeof(have), "%s%s (%u.%u)", have[0] ? ", " : "", f->name,
                               f->major, f->minor);
                } else if ((!f->root_only || h->root) && (!f->v2_only || v2)) {
                        found(c, VERDICT_WARN, "%s needs %u.%u: %s", f->name, f->major, f->minor,
                              f->without);
                        newest = f;
                }
        }
        if (have[0])
                found(c, VERDICT_OK, "also %s", have);
        if (newest)
                fix(c, "install a %u.%u+ kernel for %s and reboot", newest->major, newest->minor,
                    newest->name);
}

/* ---- user namespaces ---- */

static bool apparmor_restricts_userns(void)
{
        uint64_t v;
        return read_u64_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", &v) == 0 &&
               v == 1;
}

static void fix_apparmor(struct check *c, const struct host *h)
{
        fix_sysctl(c, h, "kernel.apparmor_restrict_unprivileged_userns", "0");
        fix(c, "or load an AppArmor profile for the codecage binary that grants `userns,`");
}

static void check_userns_counts(const struct host *h, struct check *c)
{
        static const char *const kinds[] = {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"};
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
                char path[64], key[64];
                uint64_t v;
                snprintf(path, sizeof(path), "/proc/sys/user/max_%s_namespaces", kinds[i]);
                snprintf(key, sizeof(key), "user.max_%s_namespaces", kinds[i]);
                int r = read_u64_file(path, &v);
                if (r < 0 && i == 0) {
                        found(c, VERDICT_FAIL, "no %s: the kernel has no user namespaces", path);
                        fix(c, "use a kernel built with CONFIG_USER_NS=y");
                } else if (r == 0 && v == 0) {
                        found(c, VERDICT_FAIL, "%s=0: no %s namespace can be created", key,
                              kinds[i]);
                        fix_sysctl(c, h, key, "15000");
                } else if (r == 0 && i == 0) {
                        found(c, VERDICT_OK, "%s=%llu", key, (unsigned long long)v);
                }
        }
}

static void check_userns(const struct host *h, struct check *c)
{
        uint64_t v;
        check_userns_counts(h, c);
        if (read_u64_file("/proc/sys/kernel/unprivileged_userns_clone", &v) == 0 && v == 0) {
                if (h->root) {
                        found(c, VERDICT_OK, "kernel.unprivileged_userns_clone=0 (fine as root)");
                } else {
                        found(c, VERDICT_FAIL,
                              "kernel.unprivileged_userns_clone=0: only root may create user "
                              "namespaces");
                        fix_sysctl(c, h, "kernel.unprivileged_userns_clone", "1");
                }
        }
        if (apparmor_restricts_userns()) {
                if (h->root) {
                        found(c, VERDICT_OK,
                              "kernel.apparmor_restrict_unprivileged_userns=1 (fine as root)");
                } else {
                        found(c, VERDICT_FAIL,
                              "kernel.apparmor_restrict_unprivileged_userns=1: AppArmor denies "
                              "capabilities inside unprivileged user namespaces");
                        fix_apparmor(c, h);
                }
        }
        if (h->root)
                found(c, VERDICT_OK, "running as root");
}

/* ---- the launch probe ---- */

/* The real launch (core/probe.c), in a child so a hang cannot hold doctor. */
static int launch_probe(int fd, const void *arg)
{
        (void)arg;
        struct cage_probe p;
        int r = cage_probe_launch(PROBE_TIMEOUT_MS - 1000, &p);
        if (r < 0) {
                memset(&p, 0, sizeof(p));
                snprintf(p.step, sizeof(p.step), "start the probe");
                p.err = -r;
                snprintf(p.message, sizeof(p.message), "%s", strerror(-r));
        }
        return write_all(fd, &p, sizeof(p)) < 0;
}

static void fix_clone_failure(const struct host *h, struct check *c, int err)
{
        switch (err) {
        case ENOSYS:
                fix(c, "clone3 is blocked, usually by a container's seccomp profile: start the "
                       "container with --security-opt seccomp=unconfined (or use Docker >= 20.10 "
                       "with libseccomp >= 2.4.4), or upgrade to a 5.10+ kernel");
                break;
        case ENOSPC:
                fix(c, "a namespace count limit is reached:");
                fix_sysctl(c, h, "user.max_user_namespaces", "15000");
                break;
        case EUSERS:
                fix(c, "user namespaces are nested 32 deep: run codecage from a shallower "
                       "container");
                break;
        case EINVAL:
                fix(c, "use a kernel built with CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS, "
                       "CONFIG_IPC_NS and CONFIG_UTS_NS");
                break;
        default:
                fix(c, "fix the user namespace findings above, or run codecage as root; %s",
                    CONTAINER_FIX);
        }
}

static void fix_step_failure(const struct host *h, struct check *c, const struct cage_probe *p)
{
        if (strcmp(p->step, "clone3") == 0)
                fix_clone_failure(h, c, p->err);
        else if (!h->root && apparmor_restricts_userns())
                fix_apparmor(c, h);
        else if (strcmp(p->step, "mount /proc") == 0 && p->err == EPERM)
                fix(c, "/proc is partly hidden by over-mounts, as in containers: start the "
                       "container with --security-opt systempaths=unconfined (Docker) or "
                       "--security-opt unmask=ALL (Podman)");
        else if (strcmp(p->step, "pivot_root") == 0 || strcmp(p->step, "detach old root") == 0)
                fix(c,
                    "pivot_root needs a root that is not the initramfs (rootfs): boot "
                    "with a real root filesystem, or run codecage in a container; %s",
                    CONTAINER_FIX);
        else if (strcmp(p->step, "id maps and cgroup") == 0)
                fix(c, "see the cgroup and userns checks; %s", CONTAINER_FIX);
        else
                fix(c, "%s", CONTAINER_FIX);
}

static void check_namespaces(const struct host *h, struct check *c)
{
        struct cage_probe p = {0};
        int status = 0;
        ssize_t n = probe_run(launch_probe, NULL, &p, sizeof(p), &status);
        if (n != (ssize_t)sizeof(p)) {
                probe_died(c, "the launch probe", n, status);
                fix(c, n == -ETIMEDOUT ? "look for hung tasks in `dmesg`" : CONTAINER_FIX);
        } else if (!p.ok) {
                if (p.err)
                        found(c, VERDICT_FAIL, "launching a sandbox: %s failed: %s (%s)", p.step,
                              errno_name(p.err), p.message);
                else
                        found(c, VERDICT_FAIL, "launching a sandbox: %s: %s", p.step, p.message);
                fix_step_failure(h, c, &p);
        } else {
                found(c, VERDICT_OK,
                      "a real launch: clone3 into new user, mount, pid, net, ipc and uts "
                      "namespaces, id maps, %s cgroup, new root and pivot_root, %s mount, "
                      "/proc, loopback, capabilities dropped, seccomp, exec: ok (%llu ms)",
                      p.limits_backend ? p.limits_backend : "no",
                      p.idmapped_mount ? "idmapped" : "bind", (unsigned long long)p.duration_ms);
        }
}

/* ---- seccomp ---- */

static int seccomp_probe(int fd, const void *arg)
{
        const struct cage_seccomp_filters *prog = arg;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                report_step(fd, "set no_new_privs", errno);
                return 1;
        }
        int r = cage_seccomp_install(prog);
        if (r < 0) {
                report_step(fd, "install the filter", -r);
                return 1;
        }
        /* The policy answers clone3 with ENOSYS; unfiltered, clone3(NULL, 0)
         * is EINVAL. So this tells that the filter is in force. */
        if (syscall(SYS_clone3, NULL, 0) != -1 || errno != ENOSYS) {
                report_step(fd, "filter in force (clone3 should fail with ENOSYS)", errno);
                return 1;
        }
        return 0;
}

static void check_seccomp_probe(const struct cage_seccomp_filters *prog, struct check *c)
{
        struct step_report rep = {0};
        int status = 0;
        ssize_t n = probe_run(seccomp_probe, prog, &rep, sizeof(rep), &status);
        if (n == (ssize_t)sizeof(rep) && rep.step[0]) {
                found_step(c, &rep);
                fix(c, "%s", CONTAINER_FIX);
        } else if (n != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                probe_died(c, "the seccomp probe", n, status);
                fix(c, "rebuild codecage (ninja -C build) and rerun; %s", CONTAINER_FIX);
        } else {
                found(c, VERDICT_OK,
                      "our two filters (%u + %u instructions: the syscall allow list, the "
                      "argument checks) install and are in force",
                      (unsigned)prog->syscalls.len, (unsigned)prog->arguments.len);
        }
}

static void check_seccomp(const struct host *h, struct check *c)
{
        (void)h;
        char avail[256];
        if (read_file_at(AT_FDCWD, "/proc/sys/kernel/seccomp/actions_avail", avail, sizeof(avail)) <
            0) {
                found(c, VERDICT_FAIL,
                      "no /proc/sys/kernel/seccomp/actions_avail: the kernel has "
                      "no seccomp filters");
                fix(c, "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y");
                return;
        }
        static const char *const needed[] = {"kill_process", "errno"};
        for (size_t i = 0; i < ELEMENTSOF(needed); i++)
                if (!has_word(avail, needed[i])) {
                        found(c, VERDICT_FAIL, "seccomp action %s is not available", needed[i]);
                        fix(c, "install a 5.10+ kernel (kill_process needs 4.14)");
                }
        if (c->verdict == VERDICT_OK)
                found(c, VERDICT_OK, "actions kill_process and errno available");
        const struct cage_seccomp_filters *prog = NULL;
        struct cage_error err = {0};
        if (cage_seccomp_program(&prog, &err) < 0 || !prog || prog->syscalls.len == 0 ||
            prog->syscalls.len > BPF_MAXINSNS || prog->arguments.len == 0 ||
            prog->arguments.len > BPF_MAXINSNS) {
                found(c, VERDICT_FAIL, "building the filter failed: %s",
                      err.message[0] ? err.message : "empty or oversized program");
                fix(c, "rebuild codecage (ninja -C build); the filter is generated at build time "
                       "from src/core/seccomp_policy.c");
                return;
        }
        check_seccomp_probe(prog, c);
}

/* ---- cgroups ---- */

static void v1_list(const struct host *h, char *buf, size_t size)
{
        buf[0] = '\0';
        for (int i = 0; i < CTRL_MAX; i++)
                if (h->v1[i])
                        append(buf, size, "%s%s", buf[0] ? ", " : "", ctrl_names[i]);
}

/* Which hierarchies are mounted, in a few words. */
static void describe_layout(const struct host *h, char *buf, size_t size)
{
        char v1[128];
        v1_list(h, v1, sizeof(v1));
        char ctrls[300];
        snprintf(ctrls, sizeof(ctrls), "%s%s",
                 h->v2_controllers[0] ? "controllers: " : "no controllers", h->v2_controllers);
        buf[0] = '\0';
        if (h->v2_root)
                append(buf, size, "unified cgroup v2 at %s with %s", h->v2_mount, ctrls);
        else if (h->any_v1 && h->v2_mount)
                append(buf, size, "hybrid host: v1 hierarchies %s, and cgroup v2 at %s with %s", v1,
                       h->v2_mount, ctrls);
        else if (h->any_v1)
                append(buf, size, "legacy host: v1 hierarchies %s", v1);
        else if (h->v2_mount)
                append(buf, size, "cgroup v2 at %s with %s", h->v2_mount, ctrls);
        else
                append(buf, size, "no cgroup filesystem under " CGROUP_FS_ROOT);
}

/* How to get a working cgroup backend on this host. */
static void fix_enable_cgroups(const struct host *h, struct check *c)
{
        enum cgroup_backend automatic = backend_of(&h->cg_auto);
        if (h->cg_forced && automatic != CGROUP_BACKEND_NONE)
                fix(c, "unset CODECAGE_CGROUP (auto-detection picks %s on this host)",
                    cgroup_backend_to_string(automatic));
        else if (!h->root && h->v2_root)
                fix(c, "%s", DELEGATE_FIX);
        else if (!h->root)
                fix(c, "run codecage as root, or switch to cgroup v2 (kernel parameter "
                       "systemd.unified_cgroup_hierarchy=1) and run it as " DELEGATE_FIX);
        else if (!h->v2_mount && !h->any_v1)
                fix(c, "mount -t cgroup2 none " CGROUP_FS_ROOT " (or boot with the kernel "
                       "parameter systemd.unified_cgroup_hierarchy=1)");
        else if (h->v2_root)
                fix(c, "make " CGROUP_FS_ROOT " writable for root (in a container: start it with "
                       "--cgroupns=private and a writable cgroup mount), then rerun codecage "
                       "doctor");
        else
                fix(c, "mkdir -p " CGROUP_FS_ROOT "/memory " CGROUP_FS_ROOT "/pids && mount -t "
                       "cgroup -o memory cgroup " CGROUP_FS_ROOT "/memory && mount -t cgroup -o "
                       "pids cgroup " CGROUP_FS_ROOT "/pids, or switch to cgroup v2 with the "
                       "kernel parameter systemd.unified_cgroup_hierarchy=1");
}

static void check_cgroup(const struct host *h, struct check *c)
{
        char layout[512];
        describe_layout(h, layout, sizeof(layout));
        const struct cg_report *cg = &h->cg;
        if (cg->r < 0) {
                bool named = strncmp(cg->err.message, "CODECAGE_CGROUP", 15) == 0;
                found(c, VERDICT_FAIL, "%s%s%s%s (%s)",
                      h->cg_forced && !named ? "CODECAGE_CGROUP=" : "",
                      h->cg_forced && !named ? h->cg_forced : "",
                      h->cg_forced && !named ? ": " : "", cg->err.message, layout);
                fix_enable_cgroups(h, c);
        } else if (cg->host.backend == CGROUP_BACKEND_NONE) {
                found(c, VERDICT_WARN,
                      "none: memory, cpu and pids limits fall back to rlimits (RLIMIT_AS for "
                      "--memory, RLIMIT_NPROC for --pids; --cpus is not enforced)");
                if (h->cg_forced)
                        found(c, VERDICT_WARN, "because CODECAGE_CGROUP=%s", h->cg_forced);
                else if (h->cg_why.r < 0)
                        found(c, VERDICT_WARN, "%s", h->cg_why.err.message);
                found(c, VERDICT_WARN, "%s", layout);
                fix_enable_cgroups(h, c);
        } else if (cg->host.backend == CGROUP_BACKEND_V1) {
                found(c, VERDICT_OK,
                      "v1, sandboxes go under " CGROUP_FS_ROOT "/<controller>/codecage (%s)",
                      layout);
        } else {
                found(c, VERDICT_OK, "v2, sandboxes go under %s (%s)", cg->host.v2_parent, layout);
        }
}

static void host_has(const struct cgroup_host *host, bool has[CTRL_MAX])
{
        has[CTRL_MEMORY] = host->has_memory;
        has[CTRL_PIDS] = host->has_pids;
        has[CTRL_CPU] = host->has_cpu;
        has[CTRL_CPUACCT] = host->has_cpuacct;
        has[CTRL_FREEZER] = host->has_freezer;
}

static void fix_v1_controller(const struct host *h, struct check *c, int i)
{
        if (!h->v1[i])
                fix(c,
                    "%smkdir -p " CGROUP_FS_ROOT
                    "/%s && %smount -t cgroup -o %s cgroup " CGROUP_FS_ROOT "/%s",
                    h->sudo, ctrl_names[i], h->sudo, ctrl_names[i], ctrl_names[i]);
        else
                fix(c, "run codecage as root, so it can create " CGROUP_FS_ROOT "/%s/codecage",
                    ctrl_names[i]);
}

/* Appends to cmds the write that enables what `want` lacks in dir's
 * subtree_control. */
static void fix_v2_subtree(const struct host *h, const char *dir, unsigned want, char *cmds,
                           size_t size)
{
        char path[600], enabled[256], plus[64] = "";
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
        if (read_file_at(AT_FDCWD, path, enabled, sizeof(enabled)) < 0)
                enabled[0] = '\0';
        for (int i = 0; i <= CTRL_CPU; i++)
                if ((want & (1u << i)) && !has_word(enabled, ctrl_names[i]))
                        append(plus, sizeof(plus), "%s+%s", plus[0] ? " " : "", ctrl_names[i]);
        if (plus[0])
                append(cmds, size, "%secho '%s' | %stee %s >/dev/null", cmds[0] ? " && " : "", plus,
                       h->sudo, path);
}

/* CODECAGE_CGROUP_PARENT names a group we may write whose ancestors do not
 * hand it the controllers in `want`: root enables them in each ancestor's
 * subtree_control, from the mount down to the parent's parent (codecage
 * enables them in the parent itself). False when there is none to name. */
static bool fix_v2_ancestors(const struct host *h, struct check *c, const char *parent,
                             unsigned want)
{
        size_t mlen = h->v2_mount ? strlen(h->v2_mount) : 0;
        if (!mlen || strncmp(parent, h->v2_mount, mlen) != 0 || parent[mlen] != '/')
                return false;
        char dir[512], cmds[2048] = "";
        snprintf(dir, sizeof(dir), "%s", h->v2_mount);
        for (const char *p = parent + mlen;;) {
                fix_v2_subtree(h, dir, want, cmds, sizeof(cmds));
                const char *next = strchr(p + 1, '/');
                if (!next)
                        break;
                append(dir, sizeof(dir), "%.*s", (int)(next - p), p);
                p = next;
        }
        if (!cmds[0])
                return false;
        fix(c, "%s", cmds);
        return true;
}

/* One fix per cause for the v2 controllers in the mask `missing`. */
static void fix_v2_controllers(const struct host *h, struct check *c, const char *parent,
                               unsigned missing)
{
        char absent[64] = "", plus[64] = "";
        unsigned offered = 0;
        for (int i = 0; i <= CTRL_CPU; i++) {
                if (!(missing & (1u << i)))
                        continue;
                if (has_word(h->v2_controllers, ctrl_names[i])) {
                        offered |= 1u << i;
                        append(plus, sizeof(plus), "%s+%s", plus[0] ? " " : "", ctrl_names[i]);
                } else {
                        append(absent, sizeof(absent), "%s%s", absent[0] ? ", " : "",
                               ctrl_names[i]);
                }
        }
        if (missing & (1u << CTRL_FREEZER))
                fix(c, "install a 5.2+ kernel for cgroup.freeze");
        if (absent[0])
                fix(c,
                    "%s not offered by cgroup v2 (bound to v1 hierarchies, or disabled): boot "
                    "with the kernel parameter systemd.unified_cgroup_hierarchy=1 and no "
                    "cgroup_disable= for them",
                    absent);
        /* A group named by CODECAGE_CGROUP_PARENT: its ancestors, exactly. */
        const char *env = secure_getenv("CODECAGE_CGROUP_PARENT");
        bool named = plus[0] && !h->root && env && *env && fix_v2_ancestors(h, c, parent, offered);
        if (plus[0] && !h->root && !named) {
                fix(c, "let systemd delegate them: sudo mkdir -p "
                       "/etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu "
                       "cpuset io memory pids\\n' | sudo tee "
                       "/etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl "
                       "daemon-reload, then log in again");
        } else if (plus[0] && h->root) {
                char up[256];
                snprintf(up, sizeof(up), "%s", parent);
                char *slash = strrchr(up, '/');
                if (slash && slash != up)
                        *slash = '\0';
                fix(c,
                    "echo '%s' > %s/cgroup.subtree_control && echo '%s' > "
                    "%s/cgroup.subtree_control",
                    plus, up, plus, parent);
        }
}

static void check_cgroup_controllers(const struct host *h, struct check *c)
{
        const struct cgroup_host *host = &h->cg.host;
        if (backend_of(&h->cg) == CGROUP_BACKEND_NONE) {
                char layout[512];
                describe_layout(h, layout, sizeof(layout));
                found(c, VERDICT_WARN, "none in use: no cgroup backend (%s)", layout);
                fix_enable_cgroups(h, c);
                return;
        }
        bool has[CTRL_MAX];
        host_has(host, has);
        char list[128] = "";
        for (int i = 0; i < CTRL_MAX; i++)
                if (has[i])
                        append(list, sizeof(list), "%s%s", list[0] ? ", " : "", ctrl_names[i]);
        found(c, VERDICT_OK, "%s: %s", cgroup_backend_to_string(host->backend),
              list[0] ? list : "none");
        enum cgroup_backend automatic = backend_of(&h->cg_auto);
        unsigned missing = 0;
        if (h->cg_forced && automatic != CGROUP_BACKEND_NONE && automatic != host->backend &&
            !(has[CTRL_MEMORY] && has[CTRL_PIDS]))
                fix(c, "unset CODECAGE_CGROUP (auto-detection picks %s on this host)",
                    cgroup_backend_to_string(automatic));
        for (int i = 0; i < CTRL_MAX; i++) {
                if (has[i])
                        continue;
                found(c, VERDICT_WARN, "no %s: %s", ctrl_names[i], ctrl_loss[i]);
                missing |= 1u << i;
                if (host->backend == CGROUP_BACKEND_V1)
                        fix_v1_controller(h, c, i);
        }
        if (missing && host->backend == CGROUP_BACKEND_V2)
                fix_v2_controllers(h, c, host->v2_parent, missing);
}

static bool v2_writable(const char *dir)
{
        char path[512];
        if (access(dir, W_OK) < 0)
                return false;
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        if (access(path, W_OK) < 0)
                return false;
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
        return access(path, W_OK) == 0;
}

/* Our own cgroup v2 directory, from /proc/self/cgroup. */
static void own_v2_cgroup(const struct host *h, char *buf, size_t size)
{
        char data[4096];
        snprintf(buf, size, "%s (own cgroup unknown)", h->v2_mount ? h->v2_mount : CGROUP_FS_ROOT);
        if (!h->v2_mount || read_file_at(AT_FDCWD, "/proc/self/cgroup", data, sizeof(data)) < 0)
                return;
        for (char *line = data; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                if (strncmp(line, "0::", 3) == 0) {
                        snprintf(buf, size, "%s%s", h->v2_mount, line + 3);
                        return;
                }
                line = nl ? nl + 1 : NULL;
        }
}

static void check_v2_parent(const struct host *h, struct check *c, const char *parent)
{
        char path[512], enabled[256] = "", offered[256] = "", missing[64] = "";
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", parent);
        (void)read_file_at(AT_FDCWD, path, enabled, sizeof(enabled));
        snprintf(path, sizeof(path), "%s/cgroup.controllers", parent);
        (void)read_file_at(AT_FDCWD, path, offered, sizeof(offered));
        enabled[strcspn(enabled, "\n")] = '\0';
        for (int i = 0; i <= CTRL_CPU; i++)
                if (has_word(offered, ctrl_names[i]) && !has_word(enabled, ctrl_names[i]))
                        append(missing, sizeof(missing), "+%s ", ctrl_names[i]);
        if (!v2_writable(parent)) {
                found(c, VERDICT_FAIL, "v2 parent %s is not writable", parent);
                fix(c, "%s",
                    h->root ? "check that " CGROUP_FS_ROOT " is mounted read-write" : DELEGATE_FIX);
                return;
        }
        found(c, VERDICT_OK, "v2 parent %s is writable%s; subtree_control: %s", parent,
              h->root ? "" : " (delegated to you)", enabled[0] ? enabled : "empty");
        if (missing[0]) {
                missing[strlen(missing) - 1] = '\0';
                found(c, VERDICT_WARN, "offered but not enabled for sandboxes: %s", missing);
                fix(c, "echo '%s' > %s/cgroup.subtree_control", missing, parent);
        }
}

static void check_cgroup_delegation(const struct host *h, struct check *c)
{
        const struct cg_report *view =
                backend_of(&h->cg) != CGROUP_BACKEND_NONE ? &h->cg : &h->cg_auto;
        enum cgroup_backend b = backend_of(view);
        if (b == CGROUP_BACKEND_V2) {
                check_v2_parent(h, c, view->host.v2_parent);
        } else if (b == CGROUP_BACKEND_V1) {
                found(c, VERDICT_OK,
                      "not needed: cgroup v1 as root, groups under " CGROUP_FS_ROOT
                      "/<controller>/codecage");
        } else if (h->root) {
                found(c, VERDICT_OK, "not needed as root (see the cgroup check)");
        } else if (h->v2_root) {
                char own[512];
                own_v2_cgroup(h, own, sizeof(own));
                found(c, VERDICT_WARN, "your cgroup %s is not delegated to you (not writable)",
                      own);
                fix(c, "%s", DELEGATE_FIX);
        } else {
                found(c, VERDICT_WARN,
                      "cgroup v1 hierarchies cannot be delegated to a non-root "
                      "user");
                fix_enable_cgroups(h, c);
        }
}

/* ---- moving processes between cgroups ---- */

#define MOVE_SAMPLES    3
#define MOVE_SLOW_MS    2.0
#define MOVE_QUIET_NS   50000000L /* between samples: the kernel's lock goes idle again */
#define MOVE_GROUP_NAME CGROUP_RUN_PREFIX "%d-999999" /* swept like a run's if we die */

/* Milliseconds one write to cgroup.procs takes, moving a sleeping child
 * into a scratch group; negative when it cannot be measured. */
static double time_one_move(const struct cgroup_host *host)
{
        char name[64];
        struct cage_cgroup *cg = NULL;
        struct cage_error err = {0};
        int p[2];
        snprintf(name, sizeof(name), MOVE_GROUP_NAME, (int)getpid());
        if (cage_cgroup_create(host, name, NULL, &cg, &err) < 0)
                return -1;
        double ms = -1;
        if (pipe2(p, O_CLOEXEC) == 0) {
                pid_t pid = fork();
                if (pid == 0) {
                        char b;
                        close(p[1]);
                        _exit(read(p[0], &b, 1) < 0);
                }
                close(p[0]);
                uint64_t t0 = clock_mono_ns();
                if (pid > 0 && cage_cgroup_attach(cg, pid, &err) == 0)
                        ms = (double)(clock_mono_ns() - t0) / 1e6;
                close(p[1]);
                if (pid > 0)
                        waitpid(pid, NULL, 0);
        }
        cage_cgroup_destroy(cg);
        return ms;
}

static double median_move_ms(const struct cgroup_host *host)
{
        double ms[MOVE_SAMPLES];
        for (int i = 0; i < MOVE_SAMPLES; i++) {
                nanosleep(&(struct timespec){.tv_nsec = MOVE_QUIET_NS}, NULL);
                if ((ms[i] = time_one_move(host)) < 0)
                        return -1;
        }
        for (int i = 1; i < MOVE_SAMPLES; i++) /* three values: insertion sort */
                for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
                        double t = ms[j];
                        ms[j] = ms[j - 1];
                        ms[j - 1] = t;
                }
        return ms[MOVE_SAMPLES / 2];
}

/* Moving a process into a cgroup takes the kernel's global threadgroup lock
 * for writing, which waits for an RCU grace period unless a cgroup2 mount
 * has favordynmods: on cgroup v1 every launch moves its sandbox (v2 clones
 * it straight into its group), and every exec in a named sandbox moves. */
static void check_cgroup_moves(const struct host *h, struct check *c)
{
        if (h->cg.r < 0 || h->cg.host.backend == CGROUP_BACKEND_NONE) {
                found(c, VERDICT_OK, "no cgroup backend: nothing moves");
                return;
        }
        double ms = median_move_ms(&h->cg.host);
        if (ms < 0) {
                found(c, VERDICT_WARN, "could not time a move into a scratch group");
                return;
        }
        const char *who = h->cg.host.backend == CGROUP_BACKEND_V1
                                  ? "every sandbox start and every exec in a named sandbox"
                                  : "every exec in a named sandbox";
        if (ms < MOVE_SLOW_MS) {
                found(c, VERDICT_OK, "a move into a cgroup takes %.2f ms", ms);
                return;
        }
        found(c, VERDICT_WARN,
              "a move into a cgroup takes %.2f ms (the kernel waits for an RCU grace period): "
              "%s pays it",
              ms, who);
        fix(c,
            "%smount -o remount,favordynmods %s (Linux 6.0+, host-wide: moves stop waiting, "
            "forks and exits cost a little more)",
            h->sudo, h->v2_mount ? h->v2_mount : "<a cgroup2 mount>");
}

/* ---- filesystems ---- */

static bool has_filesystem(const char *name)
{
        char buf[8192];
        if (read_file_at(AT_FDCWD, "/proc/filesystems", buf, sizeof(buf)) < 0)
                return false;
        for (char *line = buf; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                const char *tab = strrchr(line, '\t');
                if (strcmp(tab ? tab + 1 : line, name) == 0)
                        return true;
                line = nl ? nl + 1 : NULL;
        }
        return false;
}

static void check_overlayfs(const struct host *h, struct check *c)
{
        if (has_filesystem("overlay")) {
                found(c, VERDICT_OK, "overlay is in /proc/filesystems");
                return;
        }
        found(c, VERDICT_WARN,
              "overlay is not in /proc/filesystems (module not loaded or not "
              "built)");
        fix(c,
            "%smodprobe overlay (to load it at boot: echo overlay | %stee "
            "/etc/modules-load.d/codecage.conf)",
            h->sudo, h->sudo);
}

static void check_tmpfs(const struct host *h, struct check *c)
{
        (void)h;
        if (has_filesystem("tmpfs")) {
                found(c, VERDICT_OK,
                      "tmpfs is in /proc/filesystems (sandbox root, /tmp, /dev/shm, "
                      "/workspace)");
                return;
        }
        found(c, VERDICT_FAIL, "tmpfs is not in /proc/filesystems: sandboxes cannot build a root");
        fix(c, "use a kernel built with CONFIG_TMPFS=y");
}

/* ---- process limits ---- */

static void check_pid_sysctls(const struct host *h, struct check *c)
{
        static const struct {
                const char *key, *path;
                uint64_t low, raise_to;
        } sysctls[] = {
                {"kernel.pid_max", "/proc/sys/kernel/pid_max", 32768, 4194304},
                {"kernel.threads-max", "/proc/sys/kernel/threads-max", 4096, 65536},
        };
        for (size_t i = 0; i < ELEMENTSOF(sysctls); i++) {
                uint64_t v;
                if (read_u64_file(sysctls[i].path, &v) < 0) {
                        found(c, VERDICT_WARN, "cannot read %s", sysctls[i].path);
                        fix(c, "mount /proc (mount -t proc proc /proc)");
                } else if (v < sysctls[i].low) {
                        char value[32];
                        snprintf(value, sizeof(value), "%llu",
                                 (unsigned long long)sysctls[i].raise_to);
                        found(c, VERDICT_WARN, "%s=%llu is low for many sandboxes", sysctls[i].key,
                              (unsigned long long)v);
                        fix_sysctl(c, h, sysctls[i].key, value);
                } else {
                        found(c, VERDICT_OK, "%s=%llu", sysctls[i].key, (unsigned long long)v);
                }
        }
}

static void check_pid_limits(const struct host *h, struct check *c)
{
        check_pid_sysctls(h, c);
        struct cage_spec spec;
        cage_spec_init(&spec);
        struct rlimit rl;
        if (getrlimit(RLIMIT_NPROC, &rl) < 0) {
                found(c, VERDICT_WARN, "getrlimit(RLIMIT_NPROC): %s", strerror(errno));
                fix(c, "check `ulimit -u`");
                return;
        }
        char soft[32], hard[32];
        rlim_text(rl.rlim_cur, soft, sizeof(soft));
        rlim_text(rl.rlim_max, hard, sizeof(hard));
        found(c, VERDICT_OK, "ulimit -u %s (hard %s)", soft, hard);
        const char *limits_fix = "raise it in /etc/security/limits.conf (`<user> soft nproc 65536` "
                                 "and `<user> hard nproc 65536`) and log in again";
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < spec.pids) {
                found(c, VERDICT_FAIL,
                      "hard limit %s is below the default --pids %u: sandboxes cannot set "
                      "RLIMIT_NPROC",
                      hard, (unsigned)spec.pids);
                fix(c, "%s", limits_fix);
        } else if (!h->root && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 4096) {
                found(c, VERDICT_WARN,
                      "all your sandboxes share your uid's %s processes (run as root for a uid "
                      "per sandbox)",
                      soft);
                fix(c, "%s", limits_fix);
        } else if (h->root) {
                found(c, VERDICT_OK, "as root each sandbox gets its own uid and process count");
        }
}

/* ---- uid slots ---- */

/* Appends the names of the entries of a colon-separated file (passwd,
 * group, subuid) whose ids [field id_field, + field count_field or 1]
 * overlap the uid slot range; returns how many there are. */
static int scan_slot_overlap(const char *path, int id_field, int count_field, char *out,
                             size_t size)
{
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        int hits = 0;
        if (!f)
                return 0;
        while (getline(&line, &cap, f) > 0) {
                char *fields[4] = {0}, *p = line;
                line[strcspn(line, "\n")] = '\0';
                for (int i = 0; i < 4 && p; i++)
                        fields[i] = strsep(&p, ":");
                if (!fields[0] || !fields[id_field] || (count_field >= 0 && !fields[count_field]))
                        continue;
                unsigned long long id = strtoull(fields[id_field], NULL, 10);
                unsigned long long n =
                        count_field >= 0 ? strtoull(fields[count_field], NULL, 10) : 1;
                if (id < (unsigned long long)UID_SLOT_BASE + UID_SLOT_COUNT &&
                    id + n > UID_SLOT_BASE) {
                        append(out, size, "%s%s (%llu)", hits ? ", " : "", fields[0], id);
                        hits++;
                }
        }
        return hits;
}

static void check_slot_range(const struct host *h, struct check *c)
{
        static const struct {
                const char *path;
                int id_field, count_field;
                const char *cmd;
                bool takes_range;
        } files[] = {
                {"/etc/passwd", 2, -1, "usermod -u <new uid>", false},
                {"/etc/group", 2, -1, "groupmod -g <new gid>", false},
                {"/etc/subuid", 1, 2, "usermod --del-subuids", true},
                {"/etc/subgid", 1, 2, "usermod --del-subgids", true},
        };
        char range[64];
        snprintf(range, sizeof(range), "%u-%u", UID_SLOT_BASE, UID_SLOT_BASE + UID_SLOT_COUNT - 1);
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                char names[512] = "";
                if (scan_slot_overlap(files[i].path, files[i].id_field, files[i].count_field, names,
                                      sizeof(names)) == 0)
                        continue;
                found(c, VERDICT_FAIL,
                      "%s has ids in the sandbox uid range %s: %s (sandboxes would share them)",
                      files[i].path, range, names);
                if (files[i].takes_range)
                        fix(c, "%s%s %s <name> for each of: %s", h->sudo, files[i].cmd, range,
                            names);
                else
                        fix(c, "%s%s <name> for each of: %s (new ids outside %s)", h->sudo,
                            files[i].cmd, names, range);
        }
        if (c->verdict == VERDICT_OK)
                found(c, VERDICT_OK,
                      "uids %s (%u slots) are free in /etc/passwd, /etc/group, /etc/subuid, "
                      "/etc/subgid",
                      range, UID_SLOT_COUNT);
}

/* RUN_DIR and UID_SLOT_DIR must be root's alone: whoever can write there
 * can hold or forge uid slots. */
static void check_slot_dir(struct check *c, const char *path)
{
        struct stat st;
        if (lstat(path, &st) < 0) {
                if (errno != ENOENT) {
                        found(c, VERDICT_FAIL, "%s: %s", path, strerror(errno));
                        fix(c, "rm -rf %s (codecage recreates it)", path);
                } else if (access("/run", W_OK) < 0) {
                        found(c, VERDICT_FAIL, "%s is missing and /run is not writable", path);
                        fix(c, "mount -t tmpfs -o mode=0755 tmpfs /run");
                } else {
                        found(c, VERDICT_OK, "%s is created on the first run", path);
                }
                return;
        }
        if (!S_ISDIR(st.st_mode)) {
                found(c, VERDICT_FAIL, "%s is not a directory", path);
                fix(c, "rm -f %s (codecage recreates it)", path);
        } else if (st.st_uid != 0 || (st.st_mode & 022)) {
                found(c, VERDICT_FAIL,
                      "%s is owned by uid %u with mode %04o: others could hold "
                      "uid slots",
                      path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
                fix(c, "chown root:root %s && chmod 0700 %s", path, path);
        } else if (access(path, W_OK) < 0) {
                found(c, VERDICT_FAIL, "%s is not writable: %s", path, strerror(errno));
                fix(c, "mount -o remount,rw /run");
        } else {
                found(c, VERDICT_OK, "%s is root-only and writable", path);
        }
}

static void check_uid_slots(const struct host *h, struct check *c)
{
        if (!h->root) {
                found(c, VERDICT_OK,
                      "not root: sandboxes run as your own uid; the slot range %u+%u "
                      "is used only as root",
                      UID_SLOT_BASE, UID_SLOT_COUNT);
                return;
        }
        check_slot_range(h, c);
        check_slot_dir(c, RUN_DIR);
        struct stat st;
        if (lstat(RUN_DIR, &st) == 0)
                check_slot_dir(c, UID_SLOT_DIR);
}

/* ---- python ---- */

static void check_python(const struct host *h, struct check *c)
{
        char target[PATH_MAX];
        if (access(PYTHON, X_OK) < 0) {
                found(c, VERDICT_WARN, PYTHON " is missing (%s): Python runs need it",
                      strerror(errno));
                fix(c,
                    "%sapt-get install python3 (Debian/Ubuntu) or %sdnf install python3 "
                    "(Fedora/RHEL)",
                    h->sudo, h->sudo);
        } else if (realpath(PYTHON, target) && strcmp(target, PYTHON) != 0) {
                found(c, VERDICT_OK, PYTHON " -> %s", target);
        } else {
                found(c, VERDICT_OK, PYTHON " is present");
        }
}

/* ---- workspaces of named sandboxes ---- */

static void check_workspaces(const struct host *h, struct check *c)
{
        switch (cage_workspace_backend_detect()) {
        case CAGE_WORKSPACE_LOOP:
                found(c, VERDICT_OK,
                      "loop devices and mkfs.ext4: each named sandbox's /workspace is an ext4 "
                      "image with a hard disk_mib cap");
                return;
        case CAGE_WORKSPACE_DIR:
                break;
        }
        found(c, VERDICT_WARN,
              "workspaces of named sandboxes will be plain directories: disk_mib is not a hard "
              "cap (needs root, /dev/loop-control and mkfs.ext4)");
        fix(c, "run codecage serve as root, and %sapt-get install e2fsprogs", h->sudo);
}

/* ---- the checks and their output ---- */

static const struct doctor_check {
        const char *name;
        void (*run)(const struct host *h, struct check *c);
        const char *what;
} doctor_checks[] = {
        {"kernel", check_kernel, "Linux 5.10+; newer features that help"},
        {"userns", check_userns, "user namespace sysctls (Debian, Ubuntu/AppArmor)"},
        {"namespaces", check_namespaces, "a real sandbox launch, every containment step"},
        {"seccomp", check_seccomp, "seccomp actions; our filter builds and installs"},
        {"cgroup", check_cgroup, "which cgroup backend runs use (v2, v1 or none)"},
        {"cgroup-controllers", check_cgroup_controllers, "memory, pids, cpu, cpuacct, freezer"},
        {"cgroup-delegation", check_cgroup_delegation, "a writable v2 parent group"},
        {"cgroup-moves", check_cgroup_moves, "how long moving a process into a cgroup takes"},
        {"overlayfs", check_overlayfs, "overlay filesystem available"},
        {"tmpfs", check_tmpfs, "tmpfs available"},
        {"pid-limits", check_pid_limits, "kernel.pid_max, kernel.threads-max, ulimit -u"},
        {"uid-slots", check_uid_slots, "as root: the sandbox uid range and " RUN_DIR},
        {"python3", check_python, PYTHON " for Python runs"},
        {"workspaces", check_workspaces, "disk-capped workspaces for codecage serve"},
};

#define N_CHECKS ELEMENTSOF(doctor_checks)

static void usage(FILE *f)
{
        fprintf(f, "usage: codecage doctor [--json]\n\n"
                   "Checks what this host offers a sandbox. Each line is ok, warn or FAIL, the "
                   "check,\nwhat was found and, unless ok, the exact fix.\n\n"
                   "  --json     print {\"ok\": bool, \"checks\": [{name, status, detail, fix}]}\n"
                   "  --help     show this help\n\nchecks:\n");
        for (size_t i = 0; i < N_CHECKS; i++)
                fprintf(f, "  %-19s %s\n", doctor_checks[i].name, doctor_checks[i].what);
        fprintf(f,
                "\nexit status: 0 when no check FAILs (warnings do not), 1 when one does, %d "
                "for a usage error.\n",
                EXIT_CODECAGE_FAILED);
}

/* Returns 0 to run, 1 after printing help, or -EINVAL after an error. */
static int parse_args(int argc, char **argv, bool *json)
{
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0) {
                        *json = true;
                } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                        usage(stdout);
                        return 1;
                } else {
                        fprintf(stderr, "codecage doctor: %s \"%s\" (see codecage doctor --help)\n",
                                argv[i][0] == '-' ? "unknown option" : "unexpected argument",
                                argv[i]);
                        return -EINVAL;
                }
        }
        return 0;
}

static void print_text(const struct check *checks, size_t n)
{
        int count[3] = {0};
        for (size_t i = 0; i < n; i++) {
                const struct check *c = &checks[i];
                count[c->verdict]++;
                printf("%-4s  %-18s  %s", verdict_text[c->verdict], c->name, c->detail);
                if (c->verdict != VERDICT_OK && c->fix[0])
                        printf("; fix: %s", c->fix);
                putchar('\n');
        }
        printf("\n%zu checks: %d ok, %d warn, %d FAIL\n", n, count[VERDICT_OK], count[VERDICT_WARN],
               count[VERDICT_FAIL]);
}

/* A JSON string; bytes that are not valid UTF-8 become '?'. */
static json_t *json_text(const char *s)
{
        json_t *j = json_string(s);
        if (j)
                return j;
        char copy[TEXT_MAX];
        size_t i = 0;
        for (; s[i] && i + 1 < sizeof(copy); i++)
                copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
        copy[i] = '\0';
        return json_string(copy);
}

static int print_json(const struct check *checks, size_t n, bool ok)
{
        json_t *root = json_object(), *list = json_array();
        int r = root && list ? 0 : -ENOMEM;
        for (size_t i = 0; i < n && r == 0; i++) {
                const struct check *c = &checks[i];
                json_t *o = json_object();
                bool has_fix = c->verdict != VERDICT_OK && c->fix[0];
                if (!o || json_object_set_new(o, "name", json_text(c->name)) < 0 ||
                    json_object_set_new(o, "status", json_text(verdict_json[c->verdict])) < 0 ||
                    json_object_set_new(o, "detail", json_text(c->detail)) < 0 ||
                    json_object_set_new(o, "fix", has_fix ? json_text(c->fix) : json_null()) < 0 ||
                    json_array_append_new(list, o) < 0)
                        r = -ENOMEM;
        }
        if (r == 0 && (json_object_set_new(root, "ok", json_boolean(ok)) < 0 ||
                       json_object_set(root, "checks", list) < 0))
                r = -ENOMEM;
        char *text = r == 0 ? json_dumps(root, JSON_INDENT(2)) : NULL;
        if (text)
                printf("%s\n", text);
        else
                r = -ENOMEM;
        free(text);
        json_decref(list);
        json_decref(root);
        return r;
}

int cmd_doctor(int argc, char **argv)
{
        bool json = false;
        int r = parse_args(argc, argv, &json);
        if (r != 0)
                return r < 0 ? EXIT_CODECAGE_FAILED : 0;
        struct host h = {0};
        gather(&h);
        static struct check checks[N_CHECKS];
        bool ok = true;
        for (size_t i = 0; i < N_CHECKS; i++) {
                checks[i] = (struct check){.name = doctor_checks[i].name};
                doctor_checks[i].run(&h, &checks[i]);
                ok &= checks[i].verdict != VERDICT_FAIL;
        }
        if (json) {
                if (print_json(checks, N_CHECKS, ok) < 0) {
                        fprintf(stderr, "codecage doctor: out of memory rendering JSON\n");
                        return EXIT_CODECAGE_FAILED;
                }
        } else {
                print_text(checks, N_CHECKS);
        }
        if (fflush(stdout) != 0)
                return EXIT_CODECAGE_FAILED;
        return ok ? 0 : 1;
}
