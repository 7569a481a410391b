/* Unit tests for core/cgroup.c on the real host (needs root): the v1 backend
 * on /sys/fs/cgroup/<controller>, the v2 backend on a cgroup2 mount (the
 * hybrid /sys/fs/cgroup/unified here, which offers no controllers), the
 * forced "none" backend, delegation to a non-root supervisor, clean-up after
 * failures, and a timing of create + attach + destroy. Group names carry our
 * pid so parallel runs do not collide; every test removes what it made. */
#include <dirent.h>
#include "core/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "util/cleanup.h"

#define MiB     (1024ULL * 1024ULL)
#define V1_ROOT "/sys/fs/cgroup"
#define NOBODY  65534
static const char *const v1_hiers[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

/* ---- helpers ---- */

static bool is_cgroup2(const char *path)
{
        struct statfs sfs;
        return statfs(path, &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC;
}

static const char *v2_mount(void)
{
        if (is_cgroup2("/sys/fs/cgroup"))
                return "/sys/fs/cgroup";
        return is_cgroup2("/sys/fs/cgroup/unified") ? "/sys/fs/cgroup/unified" : NULL;
}

static bool host_is_v1(void)
{
        struct statfs sfs;
        return !is_cgroup2("/sys/fs/cgroup") && statfs(V1_ROOT "/memory", &sfs) == 0 &&
               sfs.f_type == CGROUP_SUPER_MAGIC;
}

static int detect_mode(const char *mode, struct cgroup_host *host, struct cage_error *err)
{
        if (mode)
                setenv("CODECAGE_CGROUP", mode, 1);
        else
                unsetenv("CODECAGE_CGROUP");
        unsetenv("CODECAGE_CGROUP_PARENT");
        int r = cage_cgroup_host_detect(host, err);
        unsetenv("CODECAGE_CGROUP");
        return r;
}

static void group_name(char *buf, size_t size, const char *tag)
{
        snprintf(buf, size, "t%d-%s", (int)getpid(), tag);
}

static bool exists(const char *path)
{
        return access(path, F_OK) == 0;
}

static bool read_text(const char *path, char *buf, size_t size)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, size - 1, f);
        buf[n] = '\0';
        fclose(f);
        return true;
}

static bool v1_file(const char *hier, const char *name, const char *file, char *buf, size_t size)
{
        char path[512];
        snprintf(path, sizeof(path), V1_ROOT "/%s/codecage/%s/%s", hier, name, file);
        return read_text(path, buf, size);
}

static uint64_t v1_num(const char *hier, const char *name, const char *file)
{
        char buf[64];
        if (!v1_file(hier, name, file, buf, sizeof(buf)))
                return UINT64_MAX;
        return strtoull(buf, NULL, 10);
}

static bool v1_dir_exists(const char *hier, const char *name)
{
        char path[512];
        snprintf(path, sizeof(path), V1_ROOT "/%s/codecage/%s", hier, name);
        return exists(path);
}

static bool proc_cgroup_has(pid_t pid, const char *needle)
{
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
        return read_text(path, buf, sizeof(buf)) && strstr(buf, needle);
}

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Spins for ms of this process's CPU time (not wall time: on a busy
 * machine the wall clock runs on while we are not scheduled). */
static uint64_t cpu_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void spin_ms(unsigned ms)
{
        uint64_t end = cpu_ns() + ms * 1000000ULL;
        while (cpu_ns() < end)
                ;
}

static void touch_mib(size_t mib)
{
        size_t len = mib * MiB;
        volatile char *p = malloc(len);
        if (!p)
                _exit(90);
        for (size_t i = 0; i < len; i += 4096)
                p[i] = 1;
}

/* A forked child that waits for "go" (sent once it is attached), runs
 * body, then reports "ready" and sleeps until killed. */
struct child {
        pid_t pid;
        int go;    /* write end */
        int ready; /* read end */
};

static void child_sleep(void)
{
}

static bool child_start(struct child *c, void (*body)(void))
{
        int go[2], ready[2];
        if (pipe2(go, O_CLOEXEC) < 0)
                return false;
        if (pipe2(ready, O_CLOEXEC) < 0)
                return false;
        c->pid = fork();
        if (c->pid < 0)
                return false;
        if (c->pid == 0) {
                char b;
                if (read(go[0], &b, 1) != 1)
                        _exit(91);
                body();
                if (write(ready[1], "r", 1) != 1)
                        _exit(92);
                for (;;)
                        pause();
        }
        close(go[0]);
        close(ready[1]);
        c->go = go[1];
        c->ready = ready[0];
        return true;
}

/* Lets the child run its body; true once it says it is done. */
static bool child_go(struct child *c)
{
        char b;
        return write(c->go, "g", 1) == 1 && read(c->ready, &b, 1) == 1;
}

/* waitpid(pid) for at most 5 s, so a broken kill fails a test instead of
 * hanging it; pid -1 waits for any child. Returns the pid or -1. */
static pid_t wait_bounded(pid_t pid, int *status)
{
        for (int i = 0; i < 5000; i++) {
                pid_t r = waitpid(pid, status, WNOHANG);
                if (r != 0)
                        return r;
                usleep(1000);
        }
        return -1;
}

static int child_reap(struct child *c)
{
        int status = -1;
        close(c->go);
        close(c->ready);
        if (wait_bounded(c->pid, &status) == c->pid)
                return status;
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        return -1;
}

static bool killed_by_sigkill(int status)
{
        return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* Reaps n processes (orphans come to us as subreaper); returns how many of
 * them died of SIGKILL. */
static int reap_n(int n)
{
        int killed = 0;
        for (int i = 0; i < n; i++) {
                int status;
                if (wait_bounded(-1, &status) < 0)
                        break;
                if (killed_by_sigkill(status))
                        killed++;
        }
        return killed;
}

/* ---- backend names and "none" ---- */

TEST(backend_names)
{
        CHECK_STREQ(cgroup_backend_to_string(CGROUP_BACKEND_NONE), "none");
        CHECK_STREQ(cgroup_backend_to_string(CGROUP_BACKEND_V1), "v1");
        CHECK_STREQ(cgroup_backend_to_string(CGROUP_BACKEND_V2), "v2");
}

TEST(forced_none)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        memset(&host, 0xaa, sizeof(host));
        CHECK(detect_mode("none", &host, &err) == 0);
        CHECK(host.backend == CGROUP_BACKEND_NONE);
        CHECK(!host.has_memory && !host.has_pids && !host.has_cpu && !host.has_freezer);

        struct cgroup_limits lim = {.memory_bytes = 64 * MiB, .cpus = 1, .pids = 10};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, "none-group", &lim, &cg, &err) == 0);
        CHECK(cg && cage_cgroup_backend(cg) == CGROUP_BACKEND_NONE);
        if (!cg)
                return;
        struct cgroup_stats st;
        memset(&st, 0xaa, sizeof(st));
        CHECK(cage_cgroup_attach(cg, getpid(), &err) == 0);
        CHECK(cage_cgroup_stats(cg, &st) == 0);
        CHECK(st.cpu_usage_ns == 0 && st.peak_memory_bytes == 0 && st.oom_kills == 0);
        CHECK(cage_cgroup_kill(cg) == 0);
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(cage_cgroup_destroy(NULL) == 0);
}

TEST(forced_invalid)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        CHECK(detect_mode("v3", &host, &err) == -EINVAL);
        CHECK(err.code == -EINVAL);
        CHECK(strstr(err.message, "v3") != NULL);
        CHECK(host.backend == CGROUP_BACKEND_NONE);
}

TEST(auto_detect)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        CHECK(detect_mode(NULL, &host, &err) == 0);
        if (is_cgroup2("/sys/fs/cgroup")) {
                CHECK(host.backend == CGROUP_BACKEND_V2);
                return;
        }
        CHECK(host_is_v1());
        CHECK(host.backend == CGROUP_BACKEND_V1);
        CHECK_STREQ(host.v1_root, V1_ROOT);
        CHECK(host.has_memory && host.has_pids && host.has_cpu && host.has_cpuacct);
        CHECK(host.has_freezer);
        CHECK(exists(V1_ROOT "/memory/codecage") && exists(V1_ROOT "/freezer/codecage"));
}

TEST(invalid_names)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(detect_mode("none", &host, &err) == 0);
        CHECK(cage_cgroup_create(&host, "", NULL, &cg, &err) == -EINVAL);
        CHECK(cage_cgroup_create(&host, "a/b", NULL, &cg, &err) == -EINVAL);
        CHECK(cage_cgroup_create(&host, "..", NULL, &cg, &err) == -EINVAL);
        char longname[100];
        memset(longname, 'x', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        CHECK(cage_cgroup_create(&host, longname, NULL, &cg, &err) == -EINVAL);
        struct cgroup_limits bad = {.cpus = -1};
        CHECK(cage_cgroup_create(&host, "ok", &bad, &cg, &err) == -EINVAL);
        CHECK(cg == NULL);
}

/* ---- v1 ---- */

static bool v1_host(struct cgroup_host *host)
{
        struct cage_error err = {0};
        if (detect_mode("v1", host, &err) < 0) {
                fprintf(stderr, "  v1 detect: %s\n", err.message);
                return false;
        }
        return host->backend == CGROUP_BACKEND_V1;
}

/* The v1 cases run wherever the host has v1 hierarchies (and must work
 * there); a v2-only host skips them. */
#define REQUIRE_V1(host)                                                                           \
        do {                                                                                       \
                if (!host_is_v1())                                                                 \
                        SKIP("no cgroup v1 hierarchies on this host");                             \
                CHECK(v1_host(host));                                                              \
        } while (0)

static void child_work(void)
{
        touch_mib(8);
        spin_ms(40);
}

TEST(v1_limits_stats_kill_destroy)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "lim");
        struct cgroup_limits lim = {.memory_bytes = 64 * MiB, .cpus = 1.5, .pids = 32};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg) {
                fprintf(stderr, "  %s\n", err.message);
                return;
        }
        CHECK(cage_cgroup_backend(cg) == CGROUP_BACKEND_V1);
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(v1_dir_exists(v1_hiers[i], name));
        CHECK(v1_num("memory", name, "memory.limit_in_bytes") == 64 * MiB);
        if (exists(V1_ROOT "/memory/memory.memsw.limit_in_bytes"))
                CHECK(v1_num("memory", name, "memory.memsw.limit_in_bytes") == 64 * MiB);
        CHECK(v1_num("pids", name, "pids.max") == 32);
        CHECK(v1_num("cpu", name, "cpu.cfs_period_us") == 100000);
        CHECK(v1_num("cpu", name, "cpu.cfs_quota_us") == 150000);

        struct child c;
        CHECK(child_start(&c, child_work));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        char needle[128];
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++) {
                snprintf(needle, sizeof(needle), ":%s:/codecage/%s\n", v1_hiers[i], name);
                CHECK(proc_cgroup_has(c.pid, needle));
        }
        CHECK(child_go(&c));

        struct cgroup_stats st;
        CHECK(cage_cgroup_stats(cg, &st) == 0);
        CHECK(st.cpu_usage_ns >= 20 * 1000000ULL);
        CHECK(st.cpu_usage_ns < 10 * 1000000000ULL);
        CHECK(st.peak_memory_bytes >= 8 * MiB && st.peak_memory_bytes <= 64 * MiB);
        CHECK(st.oom_kills == 0);
        /* The single readers a session call uses: the child still holds its
         * 8 MiB, and CPU time only grows. */
        uint64_t now = 0, cpu = 0;
        CHECK(cage_cgroup_memory_now(cg, &now) == 0);
        CHECK(now >= 8 * MiB && now <= 64 * MiB);
        CHECK(cage_cgroup_cpu_usage(cg, &cpu) == 0 && cpu >= st.cpu_usage_ns);

        CHECK(cage_cgroup_kill(cg) == 0);
        char procs[256] = "x";
        CHECK(v1_file("freezer", name, "cgroup.procs", procs, sizeof(procs)) && procs[0] == 0);
        CHECK(v1_file("freezer", name, "freezer.state", procs, sizeof(procs)) &&
              strncmp(procs, "THAWED", 6) == 0);
        CHECK(killed_by_sigkill(child_reap(&c)));
        CHECK(cage_cgroup_destroy(cg) == 0);
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(!v1_dir_exists(v1_hiers[i], name));
}

static int open_fds(void)
{
        int n = 0;
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return -1;
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* A parked group holds no fds; unparked, it is the same group: a process
 * attached to its sub-group after both were parked is in it, killed by
 * its kill after another park, and destroy removes every directory. */
TEST(v1_park_unpark)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "park");
        struct cgroup_limits lim = {.memory_bytes = 64 * MiB};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL, *sub = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg)
                return;
        CHECK(cage_cgroup_create_child(cg, "e1", &sub, &err) == 0);
        if (!sub) {
                (void)cage_cgroup_destroy(cg);
                return;
        }
        int before = open_fds();
        cage_cgroup_park(sub);
        cage_cgroup_park(cg);
        cage_cgroup_park(cg); /* twice: a no-op */
        int parked = open_fds();
        CHECK(parked > 0 && parked <= before - 2 * (int)ELEMENTSOF(v1_hiers) + 2);
        CHECK(cage_cgroup_unpark(cg) == 0 && cage_cgroup_unpark(sub) == 0);
        CHECK(cage_cgroup_unpark(cg) == 0);
        CHECK(open_fds() == before);
        struct child c;
        CHECK(child_start(&c, child_work));
        CHECK(cage_cgroup_attach(sub, c.pid, &err) == 0);
        char needle[128];
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++) {
                /* Sub-groups have no v1 memory group (cgroup.c): the parent's. */
                bool memory = strcmp(v1_hiers[i], "memory") == 0;
                snprintf(needle, sizeof(needle), ":%s:/codecage/%s%s\n", v1_hiers[i], name,
                         memory ? "" : "/e1");
                CHECK(proc_cgroup_has(c.pid, needle) == !memory);
        }
        uint64_t peak = 0;
        CHECK(cage_cgroup_memory_peak(cg, &peak) == 0);
        cage_cgroup_park(sub);
        CHECK(cage_cgroup_unpark(sub) == 0);
        CHECK(cage_cgroup_kill(sub) == 0);
        CHECK(killed_by_sigkill(child_reap(&c)));
        CHECK(cage_cgroup_destroy(sub) == 0);
        CHECK(cage_cgroup_destroy(cg) == 0);
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(!v1_dir_exists(v1_hiers[i], name));
}

static void child_hog(void)
{
        touch_mib(200);
}

TEST(v1_oom_kill)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "oom");
        struct cgroup_limits lim = {.memory_bytes = 32 * MiB};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg)
                return;
        struct child c;
        CHECK(child_start(&c, child_hog));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        CHECK(write(c.go, "g", 1) == 1);
        int status = child_reap(&c);
        CHECK(killed_by_sigkill(status));
        struct cgroup_stats st;
        CHECK(cage_cgroup_stats(cg, &st) == 0);
        CHECK(st.oom_kills >= 1);
        CHECK(st.peak_memory_bytes >= 16 * MiB && st.peak_memory_bytes <= 32 * MiB);
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(!v1_dir_exists("memory", name));
}

/* v1 counts an OOM kill only in the victim's own group: a kill of a process
 * in an exec's sub-group (which shares its parent's memory group) must show
 * in the sandbox's group, before and after the sub-group is removed. As in
 * a sandbox, the process is in the parent first (init's children are). */
TEST(v1_oom_in_sub_group_counts_for_parent)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "oomsub");
        struct cgroup_limits lim = {.memory_bytes = 32 * MiB};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL, *sub = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg)
                return;
        CHECK(cage_cgroup_create_child(cg, "e1", &sub, &err) == 0);
        if (sub) {
                struct child c;
                CHECK(child_start(&c, child_hog));
                CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
                CHECK(cage_cgroup_attach(sub, c.pid, &err) == 0);
                CHECK(write(c.go, "g", 1) == 1);
                CHECK(killed_by_sigkill(child_reap(&c)));
                struct cgroup_stats st;
                CHECK(cage_cgroup_stats(cg, &st) == 0 && st.oom_kills >= 1);
                CHECK(cage_cgroup_destroy(sub) == 0);
                CHECK(cage_cgroup_stats(cg, &st) == 0 && st.oom_kills >= 1);
        }
        CHECK(cage_cgroup_destroy(cg) == 0);
}

static bool reaped(pid_t pid)
{
        int status;
        return waitpid(pid, &status, WNOHANG) == pid;
}

/* A supervisor killed between a v1 freeze and the thaw leaves its group
 * frozen with a SIGKILL pending. The sweep must thaw it, so the processes
 * die and the groups (with their exec sub-groups) go. */
TEST(v1_sweep_thaws_a_frozen_leftover)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        pid_t dead = fork();
        if (dead == 0)
                _exit(0);
        CHECK(dead > 0 && waitpid(dead, NULL, 0) == dead);
        char name[64];
        snprintf(name, sizeof(name), CGROUP_RUN_PREFIX "%d-7", (int)dead);
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL, *sub = NULL;
        CHECK(cage_cgroup_create(&host, name, NULL, &cg, &err) == 0);
        if (!cg)
                return;
        CHECK(cage_cgroup_create_child(cg, "e1", &sub, &err) == 0);
        struct child a, b;
        CHECK(child_start(&a, child_sleep) && cage_cgroup_attach(cg, a.pid, &err) == 0);
        CHECK(child_start(&b, child_sleep) && sub && cage_cgroup_attach(sub, b.pid, &err) == 0);
        CHECK(child_go(&a) && child_go(&b));
        char path[256];
        snprintf(path, sizeof(path), V1_ROOT "/freezer/codecage/%s/freezer.state", name);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        CHECK(fd >= 0 && write(fd, "FROZEN", 6) == 6);
        if (fd >= 0)
                close(fd);
        kill(a.pid, SIGKILL);
        kill(b.pid, SIGKILL);
        usleep(20000);
        CHECK(!reaped(a.pid) && !reaped(b.pid)); /* frozen: the kills wait */
        /* The sweep runs in a process of its own while we reap, as a dead
         * supervisor's sandboxes are reaped by whoever inherited them. */
        pid_t sweeper = fork();
        if (sweeper == 0) {
                cage_cgroup_sweep_stale(&host, 5000);
                _exit(0);
        }
        CHECK(killed_by_sigkill(child_reap(&a)));
        CHECK(killed_by_sigkill(child_reap(&b)));
        int status = -1;
        CHECK(sweeper > 0 && wait_bounded(sweeper, &status) == sweeper && status == 0);
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(!v1_dir_exists(v1_hiers[i], name));
        CHECK(cage_cgroup_destroy(sub) == 0);
        CHECK(cage_cgroup_destroy(cg) == 0);
}

static void child_tree(void)
{
        for (int i = 0; i < 5; i++) {
                pid_t p = fork();
                if (p == 0)
                        for (;;)
                                pause();
        }
}

TEST(v1_kill_tree)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
        char name[64];
        group_name(name, sizeof(name), "tree");
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, NULL, &cg, &err) == 0);
        if (!cg)
                return;
        struct child c;
        CHECK(child_start(&c, child_tree));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        CHECK(child_go(&c));
        char procs[512];
        CHECK(v1_file("pids", name, "cgroup.procs", procs, sizeof(procs)));
        int n = 0;
        for (char *p = procs; (p = strchr(p, '\n')); p++)
                n++;
        CHECK(n == 6);
        CHECK(cage_cgroup_kill(cg) == 0);
        CHECK(v1_file("pids", name, "cgroup.procs", procs, sizeof(procs)) && procs[0] == 0);
        close(c.go);
        close(c.ready);
        CHECK(reap_n(6) == 6);
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(!v1_dir_exists("freezer", name));
}

static void child_forks(void)
{
        int ok = 0;
        for (int i = 0; i < 6; i++) {
                pid_t p = fork();
                if (p == 0)
                        for (;;)
                                pause();
                if (p > 0)
                        ok++;
        }
        _exit(ok);
}

TEST(v1_pids_limit)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
        char name[64];
        group_name(name, sizeof(name), "pids");
        struct cgroup_limits lim = {.pids = 3};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg)
                return;
        struct child c;
        CHECK(child_start(&c, child_forks));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        CHECK(write(c.go, "g", 1) == 1);
        int status = child_reap(&c);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
        CHECK(cage_cgroup_destroy(cg) == 0); /* kills the two grandchildren */
        CHECK(reap_n(2) == 2);
        CHECK(!v1_dir_exists("pids", name));
}

TEST(v1_destroy_kills_leftovers)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "left");
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, NULL, &cg, &err) == 0);
        if (!cg)
                return;
        struct child c;
        CHECK(child_start(&c, child_sleep));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        CHECK(child_go(&c));
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(killed_by_sigkill(child_reap(&c)));
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(!v1_dir_exists(v1_hiers[i], name));
}

TEST(v1_existing_name_kept)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        char name[64];
        group_name(name, sizeof(name), "dup");
        struct cage_error err = {0};
        struct cage_cgroup *a = NULL, *b = NULL;
        CHECK(cage_cgroup_create(&host, name, NULL, &a, &err) == 0);
        CHECK(cage_cgroup_create(&host, name, NULL, &b, &err) == -EEXIST);
        CHECK(b == NULL);
        CHECK(strstr(err.message, name) != NULL);
        /* The failed create must not have removed the first group. */
        for (size_t i = 0; i < ELEMENTSOF(v1_hiers); i++)
                CHECK(v1_dir_exists(v1_hiers[i], name));
        CHECK(cage_cgroup_destroy(a) == 0);
        CHECK(!v1_dir_exists("memory", name));
}

/* A fake v1 tree without limit files: the memory limit write fails, and
 * create must remove the directories it made. */
TEST(create_failure_cleans_up)
{
        char root[128], path[256];
        snprintf(root, sizeof(root), "/tmp/cctest-%d", (int)getpid());
        const char *dirs[] = {"", "/memory", "/memory/codecage", "/pids", "/pids/codecage"};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
                CHECK(mkdir(path, 0755) == 0);
        }
        struct cgroup_host host = {
                .backend = CGROUP_BACKEND_V1, .has_memory = true, .has_pids = true};
        snprintf(host.v1_root, sizeof(host.v1_root), "%s", root);
        struct cgroup_limits lim = {.memory_bytes = 32 * MiB};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, "g", &lim, &cg, &err) == -ENOENT);
        CHECK(cg == NULL);
        CHECK(strstr(err.message, "memory.limit_in_bytes") != NULL);
        snprintf(path, sizeof(path), "%s/memory/codecage/g", root);
        CHECK(!exists(path));
        snprintf(path, sizeof(path), "%s/pids/codecage/g", root);
        CHECK(!exists(path));
        /* Without limits the same tree works (no files are needed). */
        CHECK(cage_cgroup_create(&host, "g", NULL, &cg, &err) == 0);
        CHECK(exists(path));
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(!exists(path));
        for (size_t i = ELEMENTSOF(dirs); i-- > 0;) {
                snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
                CHECK(rmdir(path) == 0);
        }
}

TEST(v1_timing)
{
        struct cgroup_host host;
        REQUIRE_V1(&host);
        struct cgroup_limits lim = {.memory_bytes = 256 * MiB, .cpus = 1, .pids = 64};
        enum { N = 30 };
        uint64_t t_create = 0, t_attach = 0, t_destroy = 0;
        for (int i = 0; i < N; i++) {
                char name[64], tag[16];
                snprintf(tag, sizeof(tag), "bench%d", i);
                group_name(name, sizeof(name), tag);
                struct child c;
                struct cage_error err = {0};
                struct cage_cgroup *cg = NULL;
                /* As the launcher does: create, fork, attach; destroy
                 * after the child is reaped. */
                uint64_t t0 = now_ns();
                CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
                uint64_t t1 = now_ns();
                CHECK(child_start(&c, child_sleep));
                uint64_t t2 = now_ns();
                CHECK(cg && cage_cgroup_attach(cg, c.pid, &err) == 0);
                uint64_t t3 = now_ns();
                kill(c.pid, SIGKILL);
                CHECK(killed_by_sigkill(child_reap(&c)));
                uint64_t t4 = now_ns();
                CHECK(cage_cgroup_destroy(cg) == 0);
                uint64_t t5 = now_ns();
                t_create += t1 - t0;
                t_attach += t3 - t2;
                t_destroy += t5 - t4;
                CHECK(!v1_dir_exists("memory", name));
        }
        uint64_t total = (t_create + t_attach + t_destroy) / N;
        printf("  v1 per group: create %" PRIu64 " us, attach %" PRIu64 " us, destroy %" PRIu64
               " us, total %" PRIu64 " us\n",
               t_create / N / 1000, t_attach / N / 1000, t_destroy / N / 1000, total / 1000);
        CHECK(total < 500 * 1000000ULL);
}

/* ---- v2 (on this host: the controller-less hybrid mount) ---- */

static bool v2_host(struct cgroup_host *host)
{
        struct cage_error err = {0};
        if (detect_mode("v2", host, &err) < 0) {
                fprintf(stderr, "  v2 detect: %s\n", err.message);
                return false;
        }
        return host->backend == CGROUP_BACKEND_V2;
}

static bool mount_offers(const char *mount, const char *ctrl)
{
        char path[256], buf[512];
        snprintf(path, sizeof(path), "%s/cgroup.controllers", mount);
        if (!read_text(path, buf, sizeof(buf)))
                return false;
        for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n"))
                if (strcmp(tok, ctrl) == 0)
                        return true;
        return false;
}

TEST(v2_detect)
{
        if (geteuid() != 0)
                SKIP("needs root: as a user the parent is a delegated group, not <mount>/codecage");
        const char *mount = v2_mount();
        CHECK(mount != NULL);
        if (!mount)
                return;
        struct cgroup_host host;
        CHECK(v2_host(&host));
        char want[256];
        snprintf(want, sizeof(want), "%s/codecage", mount);
        CHECK_STREQ(host.v2_parent, want);
        CHECK(is_cgroup2(host.v2_parent));
        CHECK(host.has_memory == mount_offers(mount, "memory"));
        CHECK(host.has_pids == mount_offers(mount, "pids"));
        CHECK(host.has_cpu == mount_offers(mount, "cpu"));
        CHECK(host.has_cpuacct);
        /* Detection is repeatable. */
        struct cgroup_host again;
        CHECK(v2_host(&again));
        CHECK(memcmp(&host, &again, sizeof(host)) == 0);
}

TEST(v2_attach_stats_kill_destroy)
{
        struct cgroup_host host;
        CHECK(v2_host(&host));
        if (host.backend != CGROUP_BACKEND_V2)
                return;
        char name[64], dir[512], needle[160], path[600], buf[256];
        group_name(name, sizeof(name), "v2");
        snprintf(dir, sizeof(dir), "%s/%s", host.v2_parent, name);
        struct cgroup_limits lim = {.memory_bytes = 64 * MiB, .cpus = 0.5, .pids = 16};
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, &lim, &cg, &err) == 0);
        if (!cg) {
                fprintf(stderr, "  %s\n", err.message);
                return;
        }
        CHECK(cage_cgroup_backend(cg) == CGROUP_BACKEND_V2);
        CHECK(is_cgroup2(dir));
        if (host.has_memory) {
                snprintf(path, sizeof(path), "%s/memory.max", dir);
                CHECK(read_text(path, buf, sizeof(buf)) && strtoull(buf, NULL, 10) == 64 * MiB);
        }
        if (host.has_cpu) {
                snprintf(path, sizeof(path), "%s/cpu.max", dir);
                CHECK(read_text(path, buf, sizeof(buf)) && strcmp(buf, "50000 100000\n") == 0);
        }

        struct child c;
        CHECK(child_start(&c, child_work));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        const char *rel = dir + strlen(v2_mount());
        snprintf(needle, sizeof(needle), "0::%s\n", rel);
        CHECK(proc_cgroup_has(c.pid, needle));
        CHECK(child_go(&c));

        struct cgroup_stats st;
        CHECK(cage_cgroup_stats(cg, &st) == 0);
        CHECK(st.cpu_usage_ns >= 20 * 1000000ULL);
        uint64_t now = 0, cpu = 0;
        if (host.has_memory) {
                CHECK(st.peak_memory_bytes >= 8 * MiB);
                CHECK(cage_cgroup_memory_now(cg, &now) == 0);
                CHECK(now >= 8 * MiB && now <= 64 * MiB);
        } else {
                CHECK(st.peak_memory_bytes == 0);
                CHECK(cage_cgroup_memory_now(cg, &now) == -EOPNOTSUPP && now == 0);
        }
        CHECK(st.oom_kills == 0);
        CHECK(cage_cgroup_cpu_usage(cg, &cpu) == 0 && cpu >= st.cpu_usage_ns);

        CHECK(cage_cgroup_kill(cg) == 0);
        snprintf(path, sizeof(path), "%s/cgroup.events", dir);
        CHECK(read_text(path, buf, sizeof(buf)) && strstr(buf, "populated 0"));
        CHECK(killed_by_sigkill(child_reap(&c)));
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(!exists(dir));
}

TEST(v2_kill_tree_and_destroy)
{
        struct cgroup_host host;
        CHECK(v2_host(&host));
        CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
        char name[64], dir[512], path[600], buf[512];
        group_name(name, sizeof(name), "v2tree");
        snprintf(dir, sizeof(dir), "%s/%s", host.v2_parent, name);
        struct cage_error err = {0};
        struct cage_cgroup *cg = NULL;
        CHECK(cage_cgroup_create(&host, name, NULL, &cg, &err) == 0);
        if (!cg)
                return;
        struct child c;
        CHECK(child_start(&c, child_tree));
        CHECK(cage_cgroup_attach(cg, c.pid, &err) == 0);
        CHECK(child_go(&c));
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        int n = 0;
        CHECK(read_text(path, buf, sizeof(buf)));
        for (char *p = buf; (p = strchr(p, '\n')); p++)
                n++;
        CHECK(n == 6);
        /* destroy alone must kill the whole tree */
        CHECK(cage_cgroup_destroy(cg) == 0);
        CHECK(!exists(dir));
        close(c.go);
        close(c.ready);
        CHECK(reap_n(6) == 6);
}

TEST(v2_env_parent)
{
        if (geteuid() != 0)
                SKIP("needs root: makes groups at the top of the cgroup v2 hierarchy");
        const char *mount = v2_mount();
        CHECK(mount != NULL);
        if (!mount)
                return;
        char parent[256];
        snprintf(parent, sizeof(parent), "%s/cctest-%d", mount, (int)getpid());
        CHECK(mkdir(parent, 0755) == 0);
        struct cgroup_host host;
        struct cage_error err = {0};
        setenv("CODECAGE_CGROUP", "v2", 1);
        setenv("CODECAGE_CGROUP_PARENT", parent, 1);
        CHECK(cage_cgroup_host_detect(&host, &err) == 0);
        CHECK_STREQ(host.v2_parent, parent);
        /* also accepted relative to the mount */
        setenv("CODECAGE_CGROUP_PARENT", parent + strlen(mount), 1);
        CHECK(cage_cgroup_host_detect(&host, &err) == 0);
        CHECK_STREQ(host.v2_parent, parent);
        setenv("CODECAGE_CGROUP_PARENT", "/no-such-cctest-parent", 1);
        CHECK(cage_cgroup_host_detect(&host, &err) < 0);
        unsetenv("CODECAGE_CGROUP_PARENT");
        unsetenv("CODECAGE_CGROUP");
        CHECK(rmdir(parent) == 0);
}

static void drop_to_nobody(void)
{
        if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) < 0)
                _exit(99);
}

/* Runs fn as nobody in a child; returns its exit code. */
static int run_as_nobody(int (*fn)(const char *arg), const char *arg)
{
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
                drop_to_nobody();
                _exit(fn(arg));
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
                return -1;
        return WEXITSTATUS(status);
}

static int nobody_auto(const char *arg)
{
        (void)arg;
        struct cgroup_host host;
        struct cage_error err = {0};
        if (detect_mode(NULL, &host, &err) != 0)
                return 1;
        return host.backend == CGROUP_BACKEND_NONE ? 0 : 2;
}

static int nobody_forced_v2(const char *arg)
{
        (void)arg;
        struct cgroup_host host;
        struct cage_error err = {0};
        int r = detect_mode("v2", &host, &err);
        if (r != -EACCES)
                return 1;
        if (!strstr(err.message, "not delegated"))
                return 2;
        return host.backend == CGROUP_BACKEND_NONE ? 0 : 3;
}

TEST(nonroot_without_delegation)
{
        /* Our own v2 cgroup here is the mount root, never writable. */
        if (host_is_v1())
                CHECK(run_as_nobody(nobody_auto, NULL) == 0);
        char buf[4096];
        CHECK(read_text("/proc/self/cgroup", buf, sizeof(buf)));
        if (strstr(buf, "\n0::/\n") || strncmp(buf, "0::/\n", 5) == 0)
                CHECK(run_as_nobody(nobody_forced_v2, NULL) == 0);
}

/* As nobody inside a delegated cgroup: detection moves us into the
 * "supervisor" leaf and hands out the delegated cgroup as the parent. */
static int nobody_delegated(const char *dir)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        char want[256], path[600];
        if (detect_mode("v2", &host, &err) != 0)
                return 10;
        if (strcmp(host.v2_parent, dir) != 0)
                return 11;
        snprintf(want, sizeof(want), "0::%s/supervisor\n", dir + strlen(v2_mount()));
        if (!proc_cgroup_has(getpid(), want))
                return 12;
        struct cgroup_host again;
        if (detect_mode("v2", &again, &err) != 0 || strcmp(again.v2_parent, dir) != 0)
                return 13;
        if (!proc_cgroup_has(getpid(), want))
                return 14;
        struct cage_cgroup *cg = NULL;
        if (cage_cgroup_create(&host, "g", NULL, &cg, &err) != 0)
                return 15;
        struct child c;
        if (!child_start(&c, child_sleep) || cage_cgroup_attach(cg, c.pid, &err) != 0)
                return 16;
        if (!child_go(&c))
                return 17;
        if (cage_cgroup_kill(cg) != 0 || !killed_by_sigkill(child_reap(&c)))
                return 18;
        if (cage_cgroup_destroy(cg) != 0)
                return 19;
        snprintf(path, sizeof(path), "%s/g", dir);
        return exists(path) ? 20 : 0;
}

TEST(v2_nonroot_delegated)
{
        if (geteuid() != 0)
                SKIP("needs root: makes and delegates a group at the top of the hierarchy");
        const char *mount = v2_mount();
        CHECK(mount != NULL);
        if (!mount)
                return;
        char dir[256], path[300];
        snprintf(dir, sizeof(dir), "%s/cctest-deleg-%d", mount, (int)getpid());
        CHECK(mkdir(dir, 0755) == 0);
        CHECK(chown(dir, NOBODY, NOBODY) == 0);
        const char *files[] = {"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"};
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
                CHECK(chown(path, NOBODY, NOBODY) == 0);
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
                char me[32];
                snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
                snprintf(me, sizeof(me), "%d", (int)getpid());
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || write(fd, me, strlen(me)) < 0)
                        _exit(98);
                close(fd);
                drop_to_nobody();
                _exit(nobody_delegated(dir));
        }
        int status = -1;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
                fprintf(stderr, "  delegated child status %d\n", status);
        snprintf(path, sizeof(path), "%s/supervisor", dir);
        CHECK(rmdir(path) == 0);
        CHECK(rmdir(dir) == 0);
}

/* Root in a group marked delegated (systemd's trusted.delegate, for
 * Delegate=yes): with nothing but itself and its child (the reaper's
 * place) in it, the group becomes the parent and both move into its
 * supervisor leaf; with a process of someone else's in it, root keeps to
 * <mount>/codecage and moves nobody. */
static int join_group(const char *dir, pid_t pid)
{
        char path[300], id[32];
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        snprintf(id, sizeof(id), "%d", (int)pid);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        int r = fd >= 0 && write(fd, id, strlen(id)) > 0 ? 0 : -1;
        if (fd >= 0)
                close(fd);
        return r;
}

static pid_t sleeper(void)
{
        pid_t pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                pause();
                _exit(0);
        }
        return pid;
}

/* In the group with a child of ours: 0 when the group became the parent
 * and both of us are in its supervisor leaf. */
static int root_delegated(const char *dir, const char *mount)
{
        pid_t child = sleeper();
        if (child < 0 || join_group(dir, getpid()) < 0 || join_group(dir, child) < 0)
                return 98;
        struct cgroup_host host;
        struct cage_error err = {0};
        int code = 0;
        char path[64], cg[512], leaf[300];
        snprintf(leaf, sizeof(leaf), "0::%s/supervisor\n", dir + strlen(mount));
        if (detect_mode("v2", &host, &err) < 0)
                code = 1;
        else if (strcmp(host.v2_parent, dir) != 0)
                code = 2;
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)getpid());
        if (!code && (!read_text(path, cg, sizeof(cg)) || !strstr(cg, leaf)))
                code = 3;
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)child);
        if (!code && (!read_text(path, cg, sizeof(cg)) || !strstr(cg, leaf)))
                code = 4;
        join_group(mount, getpid());
        join_group(mount, child);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return code;
}

/* In the group with a process not ours: 0 when root kept to
 * <mount>/codecage and nothing moved. */
static int root_not_alone(const char *dir, const char *mount)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        char want[300], path[64], cg[512], group[300];
        if (join_group(dir, getpid()) < 0)
                return 98;
        snprintf(want, sizeof(want), "%s/codecage", mount);
        snprintf(group, sizeof(group), "0::%s\n", dir + strlen(mount));
        int code = 0;
        if (detect_mode("v2", &host, &err) < 0)
                code = 1;
        else if (strcmp(host.v2_parent, want) != 0)
                code = 2;
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)getpid());
        if (!code && (!read_text(path, cg, sizeof(cg)) || !strstr(cg, group)))
                code = 3;
        join_group(mount, getpid());
        return code;
}

static int in_child(int (*fn)(const char *, const char *), const char *dir, const char *mount)
{
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0)
                _exit(fn(dir, mount));
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
                return -1;
        return WEXITSTATUS(status);
}

TEST(v2_root_delegated)
{
        if (geteuid() != 0)
                SKIP("needs root: marks a group delegated at the top of the hierarchy");
        const char *mount = v2_mount();
        CHECK(mount != NULL);
        if (!mount)
                return;
        char dir[256], path[300];
        snprintf(dir, sizeof(dir), "%s/cctest-rootdeleg-%d", mount, (int)getpid());
        CHECK(mkdir(dir, 0755) == 0);
        if (setxattr(dir, "trusted.delegate", "1", 1, 0) < 0) {
                CHECK(rmdir(dir) == 0);
                SKIP("no trusted xattrs on this cgroup2 mount");
        }
        int r = in_child(root_delegated, dir, mount);
        CHECK(r == 0);
        if (r)
                fprintf(stderr, "  delegated root child: %d\n", r);
        snprintf(path, sizeof(path), "%s/supervisor", dir);
        CHECK(rmdir(path) == 0);
        CHECK(rmdir(dir) == 0);
        /* Someone else's process in the group: not ours to rearrange. A new
         * group: the first now has controllers on for its children, which
         * takes no process of its own. */
        snprintf(dir, sizeof(dir), "%s/cctest-rootshared-%d", mount, (int)getpid());
        snprintf(path, sizeof(path), "%s/supervisor", dir);
        CHECK(mkdir(dir, 0755) == 0);
        CHECK(setxattr(dir, "trusted.delegate", "1", 1, 0) == 0);
        pid_t other = sleeper();
        CHECK(other > 0 && join_group(dir, other) == 0);
        r = in_child(root_not_alone, dir, mount);
        CHECK(r == 0);
        if (r)
                fprintf(stderr, "  shared group child: %d\n", r);
        CHECK(access(path, F_OK) < 0);
        join_group(mount, other);
        kill(other, SIGKILL);
        waitpid(other, NULL, 0);
        CHECK(rmdir(dir) == 0);
}

RUN_TESTS(T(backend_names), T(forced_none), T(forced_invalid), T(auto_detect), T(invalid_names),
          T(v1_limits_stats_kill_destroy), T(v1_oom_kill), T(v1_park_unpark),
          T(v1_oom_in_sub_group_counts_for_parent), T(v1_sweep_thaws_a_frozen_leftover),
          T(v1_kill_tree), T(v1_pids_limit), T(v1_destroy_kills_leftovers),
          T(v1_existing_name_kept), T(create_failure_cleans_up), T(v1_timing), T(v2_detect),
          T(v2_attach_stats_kill_destroy), T(v2_kill_tree_and_destroy), T(v2_env_parent),
          T(nonroot_without_delegation), T(v2_nonroot_delegated), T(v2_root_delegated))
