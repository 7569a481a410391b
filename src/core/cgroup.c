/* Control groups for one sandbox; see cgroup.h.
 *
 * This file owns host detection (which backend, where the "codecage" parent
 * groups live, which controllers they offer), and for each sandbox its group
 * directories: creating them with limits, moving the child in, reading the
 * usage counters, killing everything inside and removing them again.
 *
 * A group keeps one O_PATH fd per hierarchy (v2: only the first slot), so
 * every limit, attach and read is a single openat() relative to it. Paths
 * are rebuilt only for error messages and rmdir. Nothing here uses stdio
 * for I/O: the whole create + attach + destroy cycle is a few dozen
 * syscalls. */
#include "core/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/debug_pause.h"
#include "util/error.h"
#include "util/fdutil.h"

#define CGROUP_FS_ROOT    "/sys/fs/cgroup"
#define CGROUP_V2_HYBRID  "/sys/fs/cgroup/unified"
#define PARENT_NAME       "codecage"
#define SUPERVISOR_NAME   "supervisor"
#define GROUP_NAME_MAX    64
#define CPU_PERIOD_US     100000 /* the kernel's default period of a new group */
#define CPU_QUOTA_MIN_US  1000
#define NSEC_PER_USEC     1000ULL
#define NSEC_PER_MSEC     1000000ULL
#define NSEC_PER_SEC      1000000000ULL
#define KILL_TIMEOUT_NS   (2000 * NSEC_PER_MSEC)
#define FREEZE_TIMEOUT_NS (1000 * NSEC_PER_MSEC)
#define POLL_SLICE_MS     10
#define BACKOFF_MIN_NS    (50 * NSEC_PER_USEC)
#define BACKOFF_MAX_NS    (5 * NSEC_PER_MSEC)
#define RMDIR_TRIES       10
#define KILL_GRACE_NS     (20 * NSEC_PER_MSEC)
#define OOM_TREE_DEPTH    2

/* v1 hierarchies, in creation order. v2 uses slot 0 only. */
enum hier {
        HIER_MEMORY,
        HIER_PIDS,
        HIER_CPU,
        HIER_CPUACCT,
        HIER_FREEZER,
        HIER_MAX,
};
#define HIER_UNIFIED 0

static const char *const hier_names[HIER_MAX] = {
        [HIER_MEMORY] = "memory",   [HIER_PIDS] = "pids",       [HIER_CPU] = "cpu",
        [HIER_CPUACCT] = "cpuacct", [HIER_FREEZER] = "freezer",
};

/* v2 controllers we enable, as a bit mask. */
enum {
        CTRL_MEMORY = 1 << 0,
        CTRL_PIDS = 1 << 1,
        CTRL_CPU = 1 << 2,
        CTRL_WANTED = CTRL_MEMORY | CTRL_PIDS | CTRL_CPU,
};

/* Single-value files read on every session call, kept open (pread at 0
 * makes the kernel show them afresh) while the group's fds are. */
enum counter {
        CTR_CPUACCT_USAGE, /* v1 cpuacct.usage */
        CTR_MEM_USAGE,     /* v1 memory.usage_in_bytes */
        CTR_MEM_PEAK,      /* v1 memory.max_usage_in_bytes */
        CTR_MEMSW_PEAK,    /* v1 memory.memsw.max_usage_in_bytes */
        CTR_CURRENT,       /* v2 memory.current */
        CTR_PEAK,          /* v2 memory.peak */
        CTR_MAX,
};

static const char *const counter_file[CTR_MAX] = {
        "cpuacct.usage",
        "memory.usage_in_bytes",
        "memory.max_usage_in_bytes",
        "memory.memsw.max_usage_in_bytes",
        "memory.current",
        "memory.peak",
};

struct cage_cgroup {
        enum cgroup_backend backend;
        int fd[HIER_MAX];                   /* O_PATH fd of the group directory, or -1 */
        int counter_fd1[CTR_MAX];           /* an open counter file's fd + 1; 0: not open */
        bool no_counter[CTR_MAX];           /* the file does not exist (memsw without swap) */
        bool made[HIER_MAX];                /* we created this directory (remove it) */
        bool alias[HIER_MAX];               /* v1: co-mounted with an earlier hierarchy */
        bool has_memory, has_pids, has_cpu; /* v2 controllers */
        char base[256];                     /* v1_root or v2_parent */
        char name[GROUP_NAME_MAX + 1];
        struct cage_cgroup *parent;      /* a sub-group's parent, which outlives it */
        bool parked;                     /* fd[] closed by cage_cgroup_park() */
        signed char parked_fd[HIER_MAX]; /* then: PARKED_NONE, PARKED_OWN or the alias's j */
        uint64_t retired_oom_kills;      /* v1: OOM kills counted in removed sub-groups */
};

#define PARKED_NONE (-2) /* no directory in this hierarchy */
#define PARKED_OWN  (-1) /* a directory of its own, opened again by path */

const char *cgroup_backend_to_string(enum cgroup_backend b)
{
        switch (b) {
        case CGROUP_BACKEND_NONE:
                return "none";
        case CGROUP_BACKEND_V1:
                return "v1";
        case CGROUP_BACKEND_V2:
                return "v2";
        }
        return "unknown";
}

/* ---- small helpers ---- */

static void sleep_ns(uint64_t ns)
{
        struct timespec ts = {.tv_sec = (time_t)(ns / NSEC_PER_SEC),
                              .tv_nsec = (long)(ns % NSEC_PER_SEC)};
        nanosleep(&ts, NULL);
}

/* Sleeps *delay and doubles it up to BACKOFF_MAX_NS. */
static void backoff(uint64_t *delay)
{
        sleep_ns(*delay);
        *delay = *delay * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : *delay * 2;
}

static bool is_fs_type(const char *path, unsigned long magic)
{
        struct statfs sfs;
        return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == magic;
}

static int join_path(char *buf, size_t size, const char *a, const char *b)
{
        int n = snprintf(buf, size, "%s/%s", a, b);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int mkdir_exist_ok(const char *path)
{
        return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* Parses a decimal number that ends at whitespace or the end of buf. */
static int parse_u64(const char *s, uint64_t *ret)
{
        char *end;
        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno)
                return -errno;
        if (*end != '\0' && *end != '\n' && *end != ' ')
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Finds the line "key N" in a flat-keyed file's contents. */
static int parse_keyed(const char *buf, const char *key, uint64_t *ret)
{
        size_t klen = strlen(key);
        const char *p = buf;
        while (p && *p) {
                if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
                        return parse_u64(p + klen + 1, ret);
                p = strchr(p, '\n');
                if (p)
                        p++;
        }
        return -ENOENT;
}

/* Reads counter c of the group whose directory is dirfd, from the file
 * kept open (opened on first use; another thread may race us to it). One
 * read, not a loop to EOF: a single-value file's few bytes come whole from
 * the kernel, and a session call reads several of these. */
static int read_counter(struct cage_cgroup *cg, int dirfd, enum counter c, uint64_t *ret)
{
        if (__atomic_load_n(&cg->no_counter[c], __ATOMIC_RELAXED))
                return -ENOENT;
        int fd1 = __atomic_load_n(&cg->counter_fd1[c], __ATOMIC_ACQUIRE);
        if (fd1 == 0) {
                int fd = openat(dirfd, counter_file[c], O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (fd < 0) {
                        int r = -errno;
                        if (r == -ENOENT)
                                __atomic_store_n(&cg->no_counter[c], true, __ATOMIC_RELAXED);
                        return r;
                }
                int none = 0;
                if (__atomic_compare_exchange_n(&cg->counter_fd1[c], &none, fd + 1, false,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                        fd1 = fd + 1;
                else {
                        close(fd);
                        fd1 = none;
                }
        }
        char buf[64];
        ssize_t n;
        do
                n = pread(fd1 - 1, buf, sizeof(buf) - 1, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        buf[n] = '\0';
        return parse_u64(buf, ret);
}

static void close_counters(struct cage_cgroup *cg)
{
        for (int c = 0; c < CTR_MAX; c++) {
                int fd1 = __atomic_exchange_n(&cg->counter_fd1[c], 0, __ATOMIC_ACQ_REL);
                if (fd1 > 0)
                        close(fd1 - 1);
        }
}

/* Reads "key N" from a flat-keyed file; a missing key leaves *ret alone. */
static int read_keyed_at(int dirfd, const char *file, const char *key, uint64_t *ret)
{
        char buf[1024];
        ssize_t n = read_file_at(dirfd, file, buf, sizeof(buf));
        if (n < 0)
                return (int)n;
        int r = parse_keyed(buf, key, ret);
        return r == -ENOENT ? 0 : r;
}

/* ---- processes in a group ---- */

/* Calls kill(SIGKILL) on every pid listed in cgroup.procs when do_kill, and
 * returns how many were listed (or -errno). Never signals ourselves. */
static int procs_foreach(int dirfd, bool do_kill)
{
        _cleanup_close_ int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        char buf[4096];
        size_t have = 0;
        int count = 0;
        pid_t self = getpid();
        for (;;) {
                ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                have += (size_t)n;
                buf[have] = '\0';
                char *line = buf, *nl;
                while ((nl = strchr(line, '\n')) || (n == 0 && *line)) {
                        if (nl)
                                *nl = '\0';
                        long pid = strtol(line, NULL, 10);
                        if (pid > 0 && pid != self) {
                                count++;
                                if (do_kill)
                                        kill((pid_t)pid, SIGKILL);
                        }
                        line = nl ? nl + 1 : line + strlen(line);
                }
                if (n == 0)
                        return count;
                have = strlen(line);
                memmove(buf, line, have);
        }
}

/* SIGKILLs everything listed until the list is empty or the deadline. */
static int kill_until_empty(int dirfd, uint64_t deadline)
{
        uint64_t delay = BACKOFF_MIN_NS;
        for (;;) {
                int n = procs_foreach(dirfd, true);
                if (n <= 0)
                        return n;
                if (clock_mono_ns() > deadline)
                        return -EBUSY;
                backoff(&delay);
        }
}

/* ---- host detection ---- */

static unsigned ctrl_mask(const char *list)
{
        static const struct {
                const char *name;
                unsigned bit;
        } ctrls[] = {{"memory", CTRL_MEMORY}, {"pids", CTRL_PIDS}, {"cpu", CTRL_CPU}};
        unsigned mask = 0;
        const char *p = list;
        while (*p) {
                size_t len = strcspn(p, " \n");
                for (size_t i = 0; i < ELEMENTSOF(ctrls); i++)
                        if (len == strlen(ctrls[i].name) && strncmp(p, ctrls[i].name, len) == 0)
                                mask |= ctrls[i].bit;
                p += len;
                p += strspn(p, " \n");
        }
        return mask;
}

static int read_ctrl_mask(const char *dir, const char *file, unsigned *ret)
{
        char path[512], buf[512];
        int r = join_path(path, sizeof(path), dir, file);
        if (r < 0)
                return r;
        ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
        if (n < 0)
                return (int)n;
        *ret = ctrl_mask(buf);
        return 0;
}

static int write_subtree(const char *path, unsigned want)
{
        char buf[64] = "";
        if (want & CTRL_MEMORY)
                strcat(buf, "+memory ");
        if (want & CTRL_PIDS)
                strcat(buf, "+pids ");
        if (want & CTRL_CPU)
                strcat(buf, "+cpu ");
        return write_file_at(AT_FDCWD, path, buf);
}

/* Enables the wanted controllers that dir offers in its subtree_control and
 * returns the mask that ends up enabled. Controllers that cannot be enabled
 * (not offered, or "no internal processes") are simply left out. */
static int enable_controllers(const char *dir, unsigned *ret)
{
        unsigned avail, enabled;
        char path[512];
        int r = read_ctrl_mask(dir, "cgroup.controllers", &avail);
        if (r < 0)
                return r;
        r = read_ctrl_mask(dir, "cgroup.subtree_control", &enabled);
        if (r < 0)
                return r;
        unsigned want = avail & ~enabled & CTRL_WANTED;
        if (want) {
                r = join_path(path, sizeof(path), dir, "cgroup.subtree_control");
                if (r < 0)
                        return r;
                /* One write for all; if that fails, one by one. */
                if (write_subtree(path, want) < 0)
                        for (unsigned bit = 1; bit <= CTRL_CPU; bit <<= 1)
                                if (want & bit)
                                        (void)write_subtree(path, bit);
                r = read_ctrl_mask(dir, "cgroup.subtree_control", &enabled);
                if (r < 0)
                        return r;
        }
        *ret = enabled & CTRL_WANTED;
        return 0;
}

static int copy_path(char *dst, size_t size, const char *src)
{
        int n = snprintf(dst, size, "%s", src);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Our own v2 cgroup path (relative to the mount) from /proc/self/cgroup. */
static int own_v2_cgroup(char *buf, size_t size)
{
        char data[4096];
        ssize_t n = read_file_at(AT_FDCWD, "/proc/self/cgroup", data, sizeof(data));
        if (n < 0)
                return (int)n;
        for (char *line = data; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                if (strncmp(line, "0::", 3) == 0)
                        return copy_path(buf, size, line + 3);
                line = nl ? nl + 1 : NULL;
        }
        return -ENOENT;
}

/* The rest of <own>'s processes into the leaf as well (for a service's
 * group: the reaper we started before; own_v2_delegated saw only ours),
 * ids that are gone skipped. */
static int move_rest_into_leaf(const char *own, const char *leaf_procs)
{
        char procs[512], data[4096];
        int r = join_path(procs, sizeof(procs), own, "cgroup.procs");
        ssize_t n = r < 0 ? r : read_file_at(AT_FDCWD, procs, data, sizeof(data));
        if (n < 0)
                return (int)n;
        char *save = NULL;
        for (char *pid = strtok_r(data, "\n", &save); pid; pid = strtok_r(NULL, "\n", &save)) {
                r = write_file_at(AT_FDCWD, leaf_procs, pid);
                if (r < 0 && r != -ESRCH)
                        return r;
        }
        return 0;
}

/* Moves us (with whole_group, every process of <own>) into <own>/supervisor
 * so <own> has no processes of its own and may enable controllers for its
 * children. */
static int enter_supervisor_leaf(const char *own, bool whole_group, struct cage_error *err)
{
        char leaf[512], procs[512], pid[32];
        int r = join_path(leaf, sizeof(leaf), own, SUPERVISOR_NAME);
        if (r >= 0)
                r = join_path(procs, sizeof(procs), leaf, "cgroup.procs");
        if (r < 0)
                return cage_fail(err, r, "cgroup path %s", own);
        r = mkdir_exist_ok(leaf);
        if (r < 0)
                return cage_fail(err, r, "mkdir %s", leaf);
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        r = write_file_at(AT_FDCWD, procs, pid);
        if (r == 0 && whole_group)
                r = move_rest_into_leaf(own, procs);
        if (r < 0)
                return cage_fail(err, r, "move supervisor into %s", leaf);
        return 0;
}

static bool v2_dir_writable(const char *dir)
{
        char path[512];
        if (access(dir, W_OK) < 0)
                return false;
        if (join_path(path, sizeof(path), dir, "cgroup.procs") < 0 || access(path, W_OK) < 0)
                return false;
        return join_path(path, sizeof(path), dir, "cgroup.subtree_control") == 0 &&
               access(path, W_OK) == 0;
}

/* pid is us or a child of ours (the reaper). */
static bool ours(const char *pid)
{
        char path[64], stat[512];
        if (atoi(pid) == (int)getpid())
                return true;
        snprintf(path, sizeof(path), "/proc/%s/stat", pid);
        if (read_file_at(AT_FDCWD, path, stat, sizeof(stat)) < 0)
                return true; /* gone */
        const char *end = strrchr(stat, ')');
        int ppid = 0;
        return end && sscanf(end + 1, " %*c %d", &ppid) == 1 && ppid == (int)getpid();
}

/* Every process of group dir is ours: nobody else's would be moved. */
static bool group_is_ours(const char *dir)
{
        char procs[512], data[4096];
        if (join_path(procs, sizeof(procs), dir, "cgroup.procs") < 0 ||
            read_file_at(AT_FDCWD, procs, data, sizeof(data)) < 0)
                return false;
        char *save = NULL;
        for (char *pid = strtok_r(data, "\n", &save); pid; pid = strtok_r(NULL, "\n", &save))
                if (!ours(pid))
                        return false;
        return true;
}

/* Root in a group its service manager handed to it, which holds no process
 * but ours: systemd marks the group of a unit with Delegate=yes with the
 * trusted.delegate xattr (which only CAP_SYS_ADMIN can set). A command run
 * from a shell in such a group finds the shell there and keeps to
 * <mount>/codecage. */
static bool own_v2_delegated(const char *mount)
{
        char rel[256], path[512], v[2];
        if (own_v2_cgroup(rel, sizeof(rel)) < 0)
                return false;
        char *slash = strrchr(rel, '/');
        if (slash && slash != rel && strcmp(slash + 1, SUPERVISOR_NAME) == 0)
                *slash = '\0'; /* already moved by an earlier detection */
        int n = snprintf(path, sizeof(path), "%s%s", mount, rel);
        if (strcmp(rel, "/") == 0 || n < 0 || (size_t)n >= sizeof(path))
                return false;
        return getxattr(path, "trusted.delegate", v, sizeof(v)) == 1 && v[0] == '1' &&
               group_is_ours(path);
}

/* Non-root without CODECAGE_CGROUP_PARENT, or root in a delegated group:
 * our own cgroup becomes the parent; we move into its "supervisor" leaf
 * first (root, owning the whole group, with every process in it). */
static int v2_parent_own(const char *mount, char *parent, size_t size, struct cage_error *err)
{
        char rel[256];
        int r = own_v2_cgroup(rel, sizeof(rel));
        if (r < 0)
                return cage_fail(err, r, "no cgroup v2 entry in /proc/self/cgroup");
        bool in_leaf = false;
        char *slash = strrchr(rel, '/');
        if (slash && strcmp(slash + 1, SUPERVISOR_NAME) == 0) {
                *slash = '\0'; /* already moved by an earlier detection */
                in_leaf = true;
        }
        int n = snprintf(parent, size, "%s%s", mount, rel);
        if (n < 0 || (size_t)n >= size)
                return cage_fail(err, -ENAMETOOLONG, "cgroup path %s%s", mount, rel);
        if (!v2_dir_writable(parent))
                return cage_fail(err, -EACCES, "own cgroup %s is not delegated to us", parent);
        return in_leaf ? 0 : enter_supervisor_leaf(parent, geteuid() == 0, err);
}

/* Root in any other group: <mount>/codecage, with the controllers enabled
 * all the way down. */
static int v2_parent_root(const char *mount, char *parent, size_t size, struct cage_error *err)
{
        unsigned ignored;
        int r = enable_controllers(mount, &ignored);
        if (r < 0)
                return cage_fail(err, r, "enable controllers in %s", mount);
        r = join_path(parent, size, mount, PARENT_NAME);
        if (r < 0)
                return cage_fail(err, r, "cgroup path %s", mount);
        r = mkdir_exist_ok(parent);
        if (r < 0)
                return cage_fail(err, r, "mkdir %s", parent);
        return 0;
}

/* CODECAGE_CGROUP_PARENT: an absolute directory, or a path inside the
 * mount. */
static int v2_parent_env(const char *mount, const char *env, char *parent, size_t size,
                         struct cage_error *err)
{
        int n;
        if (is_fs_type(env, CGROUP2_SUPER_MAGIC))
                n = snprintf(parent, size, "%s", env);
        else
                n = snprintf(parent, size, "%s/%s", mount, env + strspn(env, "/"));
        if (n < 0 || (size_t)n >= size)
                return cage_fail(err, -ENAMETOOLONG, "CODECAGE_CGROUP_PARENT %s", env);
        if (!is_fs_type(parent, CGROUP2_SUPER_MAGIC))
                return cage_fail(err, -ENOENT, "CODECAGE_CGROUP_PARENT %s: no cgroup v2 dir", env);
        return 0;
}

static int detect_v2(struct cgroup_host *h, const char *mount, struct cage_error *err)
{
        const char *env = secure_getenv("CODECAGE_CGROUP_PARENT");
        char *parent = h->v2_parent;
        int r;
        if (env && *env)
                r = v2_parent_env(mount, env, parent, sizeof(h->v2_parent), err);
        else if (geteuid() == 0 && !own_v2_delegated(mount))
                r = v2_parent_root(mount, parent, sizeof(h->v2_parent), err);
        else
                r = v2_parent_own(mount, parent, sizeof(h->v2_parent), err);
        if (r < 0)
                return r;
        unsigned mask;
        r = enable_controllers(parent, &mask);
        if (r < 0)
                return cage_fail(err, r, "enable controllers in %s", parent);
        char path[512];
        h->backend = CGROUP_BACKEND_V2;
        h->has_memory = mask & CTRL_MEMORY;
        h->has_pids = mask & CTRL_PIDS;
        h->has_cpu = mask & CTRL_CPU;
        h->has_cpuacct = true; /* cpu.stat is in every v2 group */
        h->has_freezer = join_path(path, sizeof(path), parent, "cgroup.freeze") == 0 &&
                         access(path, F_OK) == 0;
        return 0;
}

static const char *v2_mount(void)
{
        if (is_fs_type(CGROUP_FS_ROOT, CGROUP2_SUPER_MAGIC))
                return CGROUP_FS_ROOT;
        if (is_fs_type(CGROUP_V2_HYBRID, CGROUP2_SUPER_MAGIC))
                return CGROUP_V2_HYBRID;
        return NULL;
}

/* <root>/<controller>/codecage, created and writable by us. */
static int prepare_v1_hier(const char *root, enum hier hi)
{
        char mount[512], path[512];
        int r = join_path(mount, sizeof(mount), root, hier_names[hi]);
        if (r < 0)
                return r;
        if (!is_fs_type(mount, CGROUP_SUPER_MAGIC))
                return -ENODEV;
        r = join_path(path, sizeof(path), mount, PARENT_NAME);
        if (r < 0)
                return r;
        r = mkdir_exist_ok(path);
        if (r < 0)
                return r;
        return access(path, W_OK) < 0 ? -errno : 0;
}

static int detect_v1(struct cgroup_host *h, struct cage_error *err)
{
        bool *has[HIER_MAX] = {
                [HIER_MEMORY] = &h->has_memory,   [HIER_PIDS] = &h->has_pids,
                [HIER_CPU] = &h->has_cpu,         [HIER_CPUACCT] = &h->has_cpuacct,
                [HIER_FREEZER] = &h->has_freezer,
        };
        int first = 0;
        copy_path(h->v1_root, sizeof(h->v1_root), CGROUP_FS_ROOT);
        for (int i = 0; i < HIER_MAX; i++) {
                int r = prepare_v1_hier(h->v1_root, (enum hier)i);
                *has[i] = r == 0;
                if (r < 0 && !first && (i == HIER_MEMORY || i == HIER_PIDS))
                        first = r;
        }
        if (!h->has_memory && !h->has_pids) {
                h->has_cpu = h->has_cpuacct = h->has_freezer = false;
                return cage_fail(err, first, "no usable cgroup v1 memory or pids hierarchy in %s",
                                 h->v1_root);
        }
        h->backend = CGROUP_BACKEND_V1;
        return 0;
}

static int detect_forced(struct cgroup_host *h, const char *mode, struct cage_error *err)
{
        if (strcmp(mode, "none") == 0)
                return 0;
        if (strcmp(mode, "v1") == 0)
                return detect_v1(h, err);
        if (strcmp(mode, "v2") == 0) {
                const char *mount = v2_mount();
                if (!mount)
                        return cage_fail(err, -ENODEV, "no cgroup v2 mount at %s or %s",
                                         CGROUP_FS_ROOT, CGROUP_V2_HYBRID);
                return detect_v2(h, mount, err);
        }
        return cage_fail(err, -EINVAL, "CODECAGE_CGROUP=%s: expected v1, v2 or none", mode);
}

int cage_cgroup_host_detect(struct cgroup_host *ret, struct cage_error *err)
{
        memset(ret, 0, sizeof(*ret));
        const char *mode = secure_getenv("CODECAGE_CGROUP");
        if (mode && *mode) {
                int r = detect_forced(ret, mode, err);
                if (r < 0)
                        memset(ret, 0, sizeof(*ret));
                return r;
        }
        /* Not forced: anything unusable quietly means "none" (the caller
         * falls back to rlimits); force a backend to see why. */
        int r = is_fs_type(CGROUP_FS_ROOT, CGROUP2_SUPER_MAGIC)
                        ? detect_v2(ret, CGROUP_FS_ROOT, NULL)
                        : detect_v1(ret, NULL);
        if (r < 0)
                memset(ret, 0, sizeof(*ret));
        return 0;
}

/* ---- one group ---- */

static int group_path(const struct cage_cgroup *cg, int hi, char *buf, size_t size)
{
        int n;
        if (cg->backend == CGROUP_BACKEND_V1)
                n = snprintf(buf, size, "%s/%s/%s/%s", cg->base, hier_names[hi], PARENT_NAME,
                             cg->name);
        else
                n = snprintf(buf, size, "%s/%s", cg->base, cg->name);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The directory above a group in hierarchy hi (v1: <base>/<hier>/codecage,
 * v2: <base>), opened once per process for the first base seen, -1 for
 * another: a group reopened relative to it skips the walk from / (2.5 µs
 * instead of 4.4 on a v1 host, five times per call to an idle sandbox). */
static int parent_dir(const struct cage_cgroup *cg, int hi)
{
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        static char base[sizeof(cg->base)];
        static int fds[HIER_MAX] = {[0 ... HIER_MAX - 1] = -2}; /* -2: not tried */
        pthread_mutex_lock(&lock);
        if (!base[0])
                memcpy(base, cg->base, sizeof(base));
        int fd = -1;
        if (strcmp(base, cg->base) == 0) {
                if (fds[hi] == -2) {
                        char path[512];
                        int n = cg->backend == CGROUP_BACKEND_V1
                                        ? snprintf(path, sizeof(path), "%s/%s/%s", base,
                                                   hier_names[hi], PARENT_NAME)
                                        : snprintf(path, sizeof(path), "%s", base);
                        fds[hi] = n > 0 && (size_t)n < sizeof(path)
                                          ? open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)
                                          : -1;
                }
                fd = fds[hi];
        }
        pthread_mutex_unlock(&lock);
        return fd;
}

/* The group's directory in hierarchy hi, opened (by its whole path when
 * the parent is not open, or was removed and made again); -errno. */
static int open_dir(const struct cage_cgroup *cg, int hi)
{
        char path[512];
        int parent = parent_dir(cg, hi);
        int fd = parent >= 0 ? openat(parent, cg->name, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd >= 0)
                return fd;
        int q = group_path(cg, hi, path, sizeof(path));
        if (q < 0)
                return q;
        fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int fail_at(const struct cage_cgroup *cg, int hi, struct cage_error *err, int r,
                   const char *what, const char *file)
{
        char path[512];
        if (group_path(cg, hi, path, sizeof(path)) < 0)
                snprintf(path, sizeof(path), "%s", cg->name);
        return cage_fail(err, r, "%s %s/%s", what, path, file);
}

static int write_limit(const struct cage_cgroup *cg, int hi, const char *file, uint64_t value,
                       bool optional, struct cage_error *err)
{
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRIu64, value);
        int r = write_file_at(cg->fd[hi], file, buf);
        if (r == -ENOENT && optional)
                return 0;
        return r < 0 ? fail_at(cg, hi, err, r, "write", file) : 0;
}

static uint64_t cpu_quota_us(double cpus)
{
        double q = cpus * CPU_PERIOD_US;
        if (q < CPU_QUOTA_MIN_US)
                return CPU_QUOTA_MIN_US;
        return (uint64_t)(q + 0.5);
}

static int limits_v2(struct cage_cgroup *cg, const struct cgroup_limits *l, struct cage_error *err)
{
        int r = 0;
        char buf[64];
        if (cg->has_memory && l->memory_bytes) {
                r = write_limit(cg, HIER_UNIFIED, "memory.max", l->memory_bytes, false, err);
                if (r >= 0)
                        r = write_limit(cg, HIER_UNIFIED, "memory.swap.max", 0, true, err);
        }
        if (r >= 0 && cg->has_pids && l->pids)
                r = write_limit(cg, HIER_UNIFIED, "pids.max", l->pids, false, err);
        if (r >= 0 && cg->has_cpu && l->cpus > 0) {
                snprintf(buf, sizeof(buf), "%" PRIu64 " %d", cpu_quota_us(l->cpus), CPU_PERIOD_US);
                r = write_file_at(cg->fd[HIER_UNIFIED], "cpu.max", buf);
                if (r < 0)
                        r = fail_at(cg, HIER_UNIFIED, err, r, "write", "cpu.max");
        }
        return r;
}

static int limits_v1(struct cage_cgroup *cg, const struct cgroup_limits *l, struct cage_error *err)
{
        int r = 0;
        if (cg->fd[HIER_MEMORY] >= 0 && l->memory_bytes) {
                /* memsw must stay >= the memory limit: set it second. */
                r = write_limit(cg, HIER_MEMORY, "memory.limit_in_bytes", l->memory_bytes, false,
                                err);
                if (r >= 0)
                        r = write_limit(cg, HIER_MEMORY, "memory.memsw.limit_in_bytes",
                                        l->memory_bytes, true, err);
        }
        if (r >= 0 && cg->fd[HIER_PIDS] >= 0 && l->pids)
                r = write_limit(cg, HIER_PIDS, "pids.max", l->pids, false, err);
        /* The quota alone: a group starts with the kernel's period, which is
         * CPU_PERIOD_US, and every write to either file walks every cpu group
         * of the machine (the kernel checks the whole tree's bandwidth). */
        if (r >= 0 && cg->fd[HIER_CPU] >= 0 && l->cpus > 0)
                r = write_limit(cg, HIER_CPU, "cpu.cfs_quota_us", cpu_quota_us(l->cpus), false,
                                err);
        return r;
}

/* An existing directory that is one we just made under another name is a
 * co-mounted hierarchy (cpu,cpuacct): share its fd. */
static int find_alias(const struct cage_cgroup *cg, int hi, const char *path)
{
        struct stat st, other;
        if (stat(path, &st) < 0)
                return -1;
        for (int j = 0; j < hi; j++)
                if (cg->made[j] && fstat(cg->fd[j], &other) == 0 && other.st_dev == st.st_dev &&
                    other.st_ino == st.st_ino)
                        return j;
        return -1;
}

static int make_dir(struct cage_cgroup *cg, int hi, struct cage_error *err)
{
        char path[512];
        int r = group_path(cg, hi, path, sizeof(path));
        if (r < 0)
                return cage_fail(err, r, "cgroup path for %s", cg->name);
        if (mkdir(path, 0755) < 0) {
                int j = errno == EEXIST ? find_alias(cg, hi, path) : -1;
                if (j < 0)
                        return cage_fail(err, -errno, "mkdir %s", path);
                cg->fd[hi] = cg->fd[j];
                cg->alias[hi] = true;
                return 0;
        }
        cg->made[hi] = true;
        int fd = open_dir(cg, hi);
        cg->fd[hi] = fd < 0 ? -1 : fd;
        return fd < 0 ? cage_fail(err, fd, "open %s", path) : 0;
}

static int create_v1(struct cage_cgroup *cg, const struct cgroup_host *host,
                     const struct cgroup_limits *l, struct cage_error *err)
{
        const bool has[HIER_MAX] = {
                [HIER_MEMORY] = host->has_memory,   [HIER_PIDS] = host->has_pids,
                [HIER_CPU] = host->has_cpu,         [HIER_CPUACCT] = host->has_cpuacct,
                [HIER_FREEZER] = host->has_freezer,
        };
        for (int i = 0; i < HIER_MAX; i++) {
                if (!has[i])
                        continue;
                int r = make_dir(cg, i, err);
                if (r < 0)
                        return r;
        }
        return limits_v1(cg, l, err);
}

static int create_v2(struct cage_cgroup *cg, const struct cgroup_host *host,
                     const struct cgroup_limits *l, struct cage_error *err)
{
        cg->has_memory = host->has_memory;
        cg->has_pids = host->has_pids;
        cg->has_cpu = host->has_cpu;
        int r = make_dir(cg, HIER_UNIFIED, err);
        return r < 0 ? r : limits_v2(cg, l, err);
}

static bool name_valid(const char *name)
{
        size_t len = name ? strlen(name) : 0;
        return len > 0 && len <= GROUP_NAME_MAX && !strchr(name, '/') && strcmp(name, ".") != 0 &&
               strcmp(name, "..") != 0;
}

static int remove_dirs(struct cage_cgroup *cg);
static void close_fds(struct cage_cgroup *cg);

/* Hands a new group over, or undoes it when r says its creation failed. */
static int created(struct cage_cgroup *cg, int r, struct cage_cgroup **ret)
{
        if (r < 0) {
                (void)remove_dirs(cg);
                close_fds(cg);
                free(cg);
                return r;
        }
        *ret = cg;
        return 0;
}

int cage_cgroup_create(const struct cgroup_host *host, const char *name,
                       const struct cgroup_limits *limits, struct cage_cgroup **ret,
                       struct cage_error *err)
{
        static const struct cgroup_limits unlimited;
        const struct cgroup_limits *l = limits ? limits : &unlimited;
        if (!name_valid(name))
                return cage_fail(err, -EINVAL, "invalid cgroup name \"%s\"", name ? name : "");
        if (!isfinite(l->cpus) || l->cpus < 0)
                return cage_fail(err, -EINVAL, "invalid cpu limit %g", l->cpus);
        struct cage_cgroup *cg = calloc(1, sizeof(*cg));
        if (!cg)
                return cage_fail(err, -ENOMEM, "allocate cgroup");
        for (int i = 0; i < HIER_MAX; i++)
                cg->fd[i] = -1;
        cg->backend = host->backend;
        snprintf(cg->name, sizeof(cg->name), "%s", name);
        const char *base = host->backend == CGROUP_BACKEND_V1 ? host->v1_root : host->v2_parent;
        int r = copy_path(cg->base, sizeof(cg->base), base);
        if (r < 0)
                r = cage_fail(err, r, "cgroup base path %s", base);
        else if (host->backend == CGROUP_BACKEND_V1)
                r = create_v1(cg, host, l, err);
        else if (host->backend == CGROUP_BACKEND_V2)
                r = create_v2(cg, host, l, err);
        return created(cg, r, ret);
}

/* A sub-group has no limits of its own (the parent's apply to it) and, on
 * v2, no controllers: the parent keeps none enabled for its subtree, so its
 * own processes may stay in it. It serves to kill and account for one part
 * of the tree. */
/* A child group stays in its parent's v1 memory group: a v1 memory cgroup
 * costs the kernel 150-400 KiB (per sandbox with a session, as much as its
 * other kernel objects together), and the child's limit is its parent's
 * anyway. Its memory is charged to, and its peak read from, the parent's,
 * as on v2, where children get no memory controller. */
static bool v1_shares_memory(const struct cage_cgroup *parent, int i)
{
        return parent->backend == CGROUP_BACKEND_V1 && i == HIER_MEMORY;
}

int cage_cgroup_create_child(struct cage_cgroup *parent, const char *leaf, struct cage_cgroup **ret,
                             struct cage_error *err)
{
        if (!name_valid(leaf) || strlen(parent->name) + 1 + strlen(leaf) > GROUP_NAME_MAX)
                return cage_fail(err, -EINVAL, "invalid cgroup name \"%s\"", leaf ? leaf : "");
        struct cage_cgroup *cg = calloc(1, sizeof(*cg));
        if (!cg)
                return cage_fail(err, -ENOMEM, "allocate cgroup");
        cg->backend = parent->backend;
        cg->parent = parent;
        memcpy(cg->base, parent->base, sizeof(cg->base));
        int n = snprintf(cg->name, sizeof(cg->name), "%.*s/%s", GROUP_NAME_MAX, parent->name, leaf);
        int r = n < 0 || (size_t)n >= sizeof(cg->name) ? -ENAMETOOLONG : 0;
        for (int i = 0; i < HIER_MAX; i++) {
                cg->fd[i] = -1;
                if (r < 0 || parent->fd[i] < 0 || parent->alias[i] || v1_shares_memory(parent, i))
                        continue;
                r = make_dir(cg, i, err);
        }
        for (int i = 0; i < HIER_MAX && r == 0; i++) {
                if (!parent->alias[i])
                        continue;
                for (int j = 0; j < i; j++)
                        if (parent->fd[j] == parent->fd[i])
                                cg->fd[i] = cg->fd[j];
                cg->alias[i] = cg->fd[i] >= 0;
        }
        return created(cg, r, ret);
}

int cage_cgroup_set_cpu_weight(struct cage_cgroup *cg, unsigned weight)
{
        char buf[32];
        if (weight < 1 || weight > 10000)
                return -EINVAL;
        if (cg->backend == CGROUP_BACKEND_V2 && cg->has_cpu) {
                snprintf(buf, sizeof(buf), "%u", weight);
                return write_file_at(cg->fd[HIER_UNIFIED], "cpu.weight", buf);
        }
        if (cg->backend == CGROUP_BACKEND_V1 && cg->fd[HIER_CPU] >= 0) {
                /* v1 shares: 1024 is the default weight of 100; at least 2. */
                unsigned shares = weight * 1024 / 100;
                snprintf(buf, sizeof(buf), "%u", shares < 2 ? 2 : shares);
                return write_file_at(cg->fd[HIER_CPU], "cpu.shares", buf);
        }
        return 0;
}

const char *cage_cgroup_name(const struct cage_cgroup *cg)
{
        return cg->name;
}

enum cgroup_backend cage_cgroup_backend(const struct cage_cgroup *cg)
{
        return cg ? cg->backend : CGROUP_BACKEND_NONE;
}

int cage_cgroup_attach(struct cage_cgroup *cg, pid_t pid, struct cage_error *err)
{
        char buf[32];
        snprintf(buf, sizeof(buf), "%d", (int)pid);
        for (int i = 0; i < HIER_MAX; i++) {
                if (cg->fd[i] < 0 || cg->alias[i])
                        continue;
                int r = write_file_at(cg->fd[i], "cgroup.procs", buf);
                if (r < 0)
                        return fail_at(cg, i, err, r, "attach to", "cgroup.procs");
        }
        return 0;
}

int cage_cgroup_clone_fd(const struct cage_cgroup *cg)
{
        return cg && cg->backend == CGROUP_BACKEND_V2 ? cg->fd[HIER_UNIFIED] : -1;
}

/* ---- accounting ---- */

static int keep_first(int first, int r)
{
        return first < 0 ? first : r < 0 ? r : 0;
}

int cage_cgroup_memory_now(struct cage_cgroup *cg, uint64_t *ret)
{
        *ret = 0;
        if (cg->backend == CGROUP_BACKEND_V2)
                return cg->has_memory ? read_counter(cg, cg->fd[HIER_UNIFIED], CTR_CURRENT, ret)
                                      : -EOPNOTSUPP;
        int fd = cg->backend == CGROUP_BACKEND_V1 ? cg->fd[HIER_MEMORY] : -1;
        return fd >= 0 ? read_counter(cg, fd, CTR_MEM_USAGE, ret) : -EOPNOTSUPP;
}

int cage_cgroup_cpu_usage(struct cage_cgroup *cg, uint64_t *ret_ns)
{
        *ret_ns = 0;
        if (cg->backend == CGROUP_BACKEND_V2) {
                uint64_t usec = 0;
                int r = read_keyed_at(cg->fd[HIER_UNIFIED], "cpu.stat", "usage_usec", &usec);
                *ret_ns = usec * NSEC_PER_USEC;
                return r;
        }
        if (cg->backend != CGROUP_BACKEND_V1 || cg->fd[HIER_CPUACCT] < 0)
                return 0;
        return read_counter(cg, cg->fd[HIER_CPUACCT], CTR_CPUACCT_USAGE, ret_ns);
}

static int stats_v2(struct cage_cgroup *cg, struct cgroup_stats *ret)
{
        int fd = cg->fd[HIER_UNIFIED];
        int r = cage_cgroup_cpu_usage(cg, &ret->cpu_usage_ns);
        if (!cg->has_memory)
                return r;
        int now = cage_cgroup_memory_now(cg, &ret->memory_bytes);
        int q = read_counter(cg, fd, CTR_PEAK, &ret->peak_memory_bytes);
        if (q == -ENOENT) { /* before 5.19 */
                ret->peak_memory_bytes = ret->memory_bytes;
                q = now;
        }
        r = keep_first(r, q);
        return keep_first(r, read_keyed_at(fd, "memory.events", "oom_kill", &ret->oom_kills));
}

/* v1 counts an OOM kill only in the victim's own memory group, where v2
 * counts it in every ancestor too. So a group's v1 count is its subtree's
 * (one level per exec, bounded) plus what removed sub-groups had counted:
 * a sandbox then sees the OOM kills of all its execs, as on v2. */
static uint64_t oom_kills_v1_tree(int dirfd, int depth)
{
        uint64_t total = 0;
        (void)read_keyed_at(dirfd, "memory.oom_control", "oom_kill", &total);
        if (depth >= OOM_TREE_DEPTH)
                return total;
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return total;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                _cleanup_close_ int sub =
                        openat(dirfd, de->d_name, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (sub >= 0)
                        total += oom_kills_v1_tree(sub, depth + 1);
        }
        closedir(d);
        return total;
}

static int stats_v1(struct cage_cgroup *cg, struct cgroup_stats *ret)
{
        int r = cage_cgroup_cpu_usage(cg, &ret->cpu_usage_ns);
        int fd = cg->fd[HIER_MEMORY];
        if (fd < 0)
                return r;
        (void)cage_cgroup_memory_now(cg, &ret->memory_bytes);
        r = keep_first(r, read_counter(cg, fd, CTR_MEM_PEAK, &ret->peak_memory_bytes));
        ret->oom_kills = oom_kills_v1_tree(fd, 0) +
                         __atomic_load_n(&cg->retired_oom_kills, __ATOMIC_RELAXED);
        return r;
}

int cage_cgroup_memory_peak(struct cage_cgroup *cg, uint64_t *ret)
{
        *ret = 0;
        if (cg->backend == CGROUP_BACKEND_V2)
                return cg->has_memory ? read_counter(cg, cg->fd[HIER_UNIFIED], CTR_PEAK, ret)
                                      : -EOPNOTSUPP;
        int fd = cg->backend == CGROUP_BACKEND_V1 ? cg->fd[HIER_MEMORY] : -1;
        if (fd < 0)
                return -EOPNOTSUPP;
        uint64_t memsw = 0;
        int r = read_counter(cg, fd, CTR_MEM_PEAK, ret);
        if (r < 0)
                return r;
        r = read_counter(cg, fd, CTR_MEMSW_PEAK, &memsw);
        if (r < 0 && r != -ENOENT) /* no memsw without swap accounting */
                return r;
        if (memsw > *ret)
                *ret = memsw;
        return 0;
}

int cage_cgroup_stats(struct cage_cgroup *cg, struct cgroup_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        switch (cg->backend) {
        case CGROUP_BACKEND_V2:
                return stats_v2(cg, ret);
        case CGROUP_BACKEND_V1:
                return stats_v1(cg, ret);
        case CGROUP_BACKEND_NONE:
                break;
        }
        return 0;
}

/* ---- killing ---- */

/* Waits for "populated 0" in cgroup.events, woken by its notifications. */
static int wait_unpopulated(int dirfd, uint64_t deadline)
{
        _cleanup_close_ int fd = openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (;;) {
                char buf[256];
                ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
                if (n < 0 && errno != EINTR)
                        return -errno;
                uint64_t populated = 1;
                if (n >= 0) {
                        buf[n] = '\0';
                        if (parse_keyed(buf, "populated", &populated) == 0 && populated == 0)
                                return 0;
                }
                uint64_t now = clock_mono_ns();
                if (now > deadline)
                        return -EBUSY;
                uint64_t left_ms = (deadline - now) / NSEC_PER_MSEC + 1;
                struct pollfd p = {.fd = fd, .events = POLLPRI};
                (void)poll(&p, 1, left_ms < POLL_SLICE_MS ? (int)left_ms : POLL_SLICE_MS);
        }
}

static int kill_v2(struct cage_cgroup *cg)
{
        int fd = cg->fd[HIER_UNIFIED];
        uint64_t deadline = clock_mono_ns() + KILL_TIMEOUT_NS;
        int r = write_file_at(fd, "cgroup.kill", "1");
        if (r == -ENOENT || r == -EOPNOTSUPP) /* before 5.14 */
                r = kill_until_empty(fd, deadline);
        if (r < 0)
                return r;
        return wait_unpopulated(fd, deadline);
}

static int wait_frozen(int dirfd, uint64_t deadline)
{
        uint64_t delay = BACKOFF_MIN_NS;
        for (;;) {
                char buf[32];
                ssize_t n = read_file_at(dirfd, "freezer.state", buf, sizeof(buf));
                if (n < 0)
                        return (int)n;
                if (strncmp(buf, "FROZEN", 6) == 0)
                        return 0;
                if (clock_mono_ns() > deadline)
                        return -ETIMEDOUT;
                backoff(&delay);
        }
}

/* The directory whose cgroup.procs lists the group's processes. */
static int procs_dir_v1(const struct cage_cgroup *cg)
{
        static const int order[] = {HIER_FREEZER, HIER_PIDS, HIER_MEMORY, HIER_CPU, HIER_CPUACCT};
        for (size_t i = 0; i < ELEMENTSOF(order); i++)
                if (cg->fd[order[i]] >= 0)
                        return cg->fd[order[i]];
        return -1;
}

/* Freeze so nothing can fork while we kill, SIGKILL all, thaw at once so
 * the signals are delivered. A supervisor that dies between the freeze and
 * the thaw leaves the group frozen: the sweep thaws such groups. */
static void freeze_kill_thaw(int procs, int freezer)
{
        if (write_file_at(freezer, "freezer.state", "FROZEN") >= 0)
                (void)wait_frozen(freezer, clock_mono_ns() + FREEZE_TIMEOUT_NS);
        (void)procs_foreach(procs, true);
        debug_pause_point("cgroup-frozen");
        (void)write_file_at(freezer, "freezer.state", "THAWED");
}

/* SIGKILL first: a sandbox's pid 1 takes its whole pid namespace with it,
 * and the pids limit bounds what a fork loop can add between two rounds.
 * Only a group still populated after KILL_GRACE_NS is frozen (the backstop),
 * which keeps the window in which a dying supervisor could leave a group
 * frozen to the rare fork race. */
static int kill_v1(struct cage_cgroup *cg)
{
        int procs = procs_dir_v1(cg);
        if (procs < 0)
                return 0;
        int freezer = cg->fd[HIER_FREEZER];
        int n = procs_foreach(procs, false);
        /* The crash tests pause between a freeze and its thaw: there a
         * sandbox's own group is frozen even when its processes are gone
         * already (its pid 1 is killed first), an exec's only when busy. */
        bool force_freeze =
                freezer >= 0 && (n > 0 || !cg->parent) && debug_pause_wanted("cgroup-frozen");
        if (n <= 0 && !force_freeze)
                return n;
        uint64_t start = clock_mono_ns();
        int r = force_freeze ? -EBUSY : kill_until_empty(procs, start + KILL_GRACE_NS);
        if (r != -EBUSY || freezer < 0)
                return r;
        freeze_kill_thaw(procs, freezer);
        return kill_until_empty(procs, start + KILL_TIMEOUT_NS);
}

int cage_cgroup_kill(struct cage_cgroup *cg)
{
        switch (cg->backend) {
        case CGROUP_BACKEND_V2:
                return kill_v2(cg);
        case CGROUP_BACKEND_V1:
                return kill_v1(cg);
        case CGROUP_BACKEND_NONE:
                break;
        }
        return 0;
}

/* ---- removal ---- */

/* rmdir one hierarchy's directory: on EBUSY kill what is inside (once), then
 * retry a few times, since v1 memory groups can stay busy briefly. */
static int remove_dir(struct cage_cgroup *cg, int hi, bool *killed)
{
        char path[512];
        int r = group_path(cg, hi, path, sizeof(path));
        if (r < 0)
                return r;
        uint64_t delay = BACKOFF_MIN_NS;
        for (int attempt = 0;; attempt++) {
                if (rmdir(path) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY || attempt >= RMDIR_TRIES)
                        return -errno;
                if (!*killed) {
                        *killed = true;
                        (void)cage_cgroup_kill(cg);
                        continue;
                }
                backoff(&delay);
        }
}

static int remove_dirs(struct cage_cgroup *cg)
{
        bool killed = false;
        int first = 0;
        for (int i = 0; i < HIER_MAX; i++)
                if (cg->made[i])
                        first = keep_first(first, remove_dir(cg, i, &killed));
        return first;
}

static void close_fds(struct cage_cgroup *cg)
{
        close_counters(cg);
        for (int i = 0; i < HIER_MAX; i++) {
                if (cg->fd[i] >= 0 && !cg->alias[i])
                        close(cg->fd[i]);
                cg->fd[i] = -1;
        }
}

/* On v1 a removed sub-group takes its OOM count with it: hand it to the
 * parent first (see oom_kills_v1_tree). */
static void retire_oom_kills(struct cage_cgroup *cg)
{
        struct cgroup_stats s = {0};
        if (!cg->parent || cg->backend != CGROUP_BACKEND_V1 || cg->fd[HIER_MEMORY] < 0)
                return;
        if (stats_v1(cg, &s) >= 0 && s.oom_kills)
                __atomic_add_fetch(&cg->parent->retired_oom_kills, s.oom_kills, __ATOMIC_RELAXED);
}

void cage_cgroup_park(struct cage_cgroup *cg)
{
        if (!cg || cg->parked)
                return;
        for (int i = 0; i < HIER_MAX; i++) {
                cg->parked_fd[i] = cg->fd[i] < 0 ? PARKED_NONE : PARKED_OWN;
                for (int j = 0; cg->alias[i] && j < i; j++)
                        if (cg->fd[j] == cg->fd[i])
                                cg->parked_fd[i] = (signed char)j;
        }
        close_fds(cg);
        cg->parked = true;
}

int cage_cgroup_unpark(struct cage_cgroup *cg)
{
        if (!cg || !cg->parked)
                return 0;
        int r = 0;
        for (int i = 0; i < HIER_MAX; i++) {
                if (cg->parked_fd[i] != PARKED_OWN)
                        continue;
                int fd = open_dir(cg, i);
                cg->fd[i] = fd < 0 ? -1 : fd;
                r = keep_first(r, fd < 0 ? fd : 0);
        }
        for (int i = 0; i < HIER_MAX; i++)
                if (cg->parked_fd[i] >= 0)
                        cg->fd[i] = cg->fd[cg->parked_fd[i]];
        cg->parked = false;
        return r;
}

int cage_cgroup_destroy(struct cage_cgroup *cg)
{
        if (!cg)
                return 0;
        retire_oom_kills(cg);
        int r = remove_dirs(cg);
        close_fds(cg);
        free(cg);
        return r;
}
