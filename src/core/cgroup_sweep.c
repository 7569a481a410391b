/* Removing cgroups left by a codecage process that died without cleaning
 * up (kill -9, OOM, power cut of the supervisor only). Sandbox groups are
 * named "run-<supervisor pid>-<n>"; a group whose supervisor pid no longer
 * exists is stale. A supervisor killed halfway through a v1 kill can leave
 * its group frozen, with SIGKILLs pending that are never delivered: so the
 * sweep thaws every stale group (v1 freezer.state, v2 cgroup.freeze) and
 * SIGKILLs what is inside, in every hierarchy, before it waits for anything.
 * Then it removes the groups that have emptied, waiting at most `wait_ms`
 * in all: a group that cannot be removed yet is left for the next sweep and
 * never costs more than that. A pid reused by an unrelated process only
 * delays the sweep of that group to a later start. The reaper of one
 * supervisor (reaper.c) sweeps that supervisor's groups the same way. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/fdutil.h"

/* The freezer first, so everything is thawed before anything is waited on. */
static const char *const v1_hierarchies[] = {"freezer", "memory", "pids", "cpu", "cpuacct"};

#define SUB_GROUP_DEPTH 2 /* run-<pid>-<n>/e<k>: one level of exec groups */
#define RETRY_SLEEP_NS  2000000L

/* Which groups a sweep removes: those of one supervisor (its reaper, once
 * it died), or those of every supervisor that no longer exists. */
struct sweep {
        pid_t owner; /* 0: any dead supervisor */
};

static bool doomed(const struct sweep *sw, const char *name)
{
        int pid;
        unsigned n;
        char tail;
        if (sscanf(name, CGROUP_RUN_PREFIX "%d-%u%c", &pid, &n, &tail) != 2 || pid <= 0)
                return false;
        if (sw->owner)
                return pid == sw->owner;
        return kill(pid, 0) < 0 && errno == ESRCH;
}

/* Thaws the group (whichever freezer it has) and SIGKILLs every pid listed
 * in its cgroup.procs; true when none was listed. */
static bool thaw_and_kill(int dirfd)
{
        (void)write_file_at(dirfd, "freezer.state", "THAWED");
        (void)write_file_at(dirfd, "cgroup.freeze", "0");
        char buf[4096];
        ssize_t n = read_file_at(dirfd, "cgroup.procs", buf, sizeof(buf));
        if (n <= 0)
                return true;
        for (char *p = buf, *end; *p; p = end) {
                long pid = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (pid > 0)
                        kill((pid_t)pid, SIGKILL);
        }
        return false;
}

typedef void (*group_fn)(const struct sweep *sw, int parentfd, const char *name, int depth);

/* A directory stream over dirfd from its start (a dup shares the offset of
 * earlier passes, hence the rewind). */
static DIR *open_listing(int dirfd)
{
        int dupfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        DIR *d = dupfd >= 0 ? fdopendir(dupfd) : NULL;
        if (!d) {
                if (dupfd >= 0)
                        close(dupfd);
                return NULL;
        }
        rewinddir(d);
        return d;
}

/* Calls fn on each sub-directory of dirfd. */
static void for_each_subgroup(const struct sweep *sw, int dirfd, int depth, group_fn fn)
{
        DIR *d = open_listing(dirfd);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && de->d_name[0] != '.')
                        fn(sw, dirfd, de->d_name, depth);
        closedir(d);
}

/* Pass 1: a group and its sub-groups thawed, their processes killed. */
static void release_group(const struct sweep *sw, int parentfd, const char *name, int depth)
{
        _cleanup_close_ int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        (void)thaw_and_kill(fd);
        if (depth + 1 < SUB_GROUP_DEPTH)
                for_each_subgroup(sw, fd, depth + 1, release_group);
}

/* Pass 2: sub-groups first, then the group, once each is empty. */
static void remove_group(const struct sweep *sw, int parentfd, const char *name, int depth)
{
        _cleanup_close_ int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        if (depth + 1 < SUB_GROUP_DEPTH)
                for_each_subgroup(sw, fd, depth + 1, remove_group);
        if (thaw_and_kill(fd))
                (void)unlinkat(parentfd, name, AT_REMOVEDIR);
}

static void release_doomed(const struct sweep *sw, int parentfd, const char *name, int depth)
{
        if (doomed(sw, name))
                release_group(sw, parentfd, name, depth);
}

static void remove_doomed(const struct sweep *sw, int parentfd, const char *name, int depth)
{
        if (doomed(sw, name))
                remove_group(sw, parentfd, name, depth);
}

static bool any_doomed_left(const struct sweep *sw, int parentfd)
{
        bool left = false;
        DIR *d = open_listing(parentfd);
        if (!d)
                return false;
        struct dirent *de;
        while ((de = readdir(d)) && !left)
                left = de->d_type == DT_DIR && doomed(sw, de->d_name);
        closedir(d);
        return left;
}

/* The codecage parent directories of the host's hierarchies, opened. */
static size_t open_parents(const struct cgroup_host *host, int *fds, size_t max)
{
        char path[512];
        size_t n = 0;
        if (host->backend == CGROUP_BACKEND_V2) {
                fds[n] = open(host->v2_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                return fds[n] >= 0 ? 1 : 0;
        }
        if (host->backend != CGROUP_BACKEND_V1)
                return 0;
        for (size_t i = 0; i < ELEMENTSOF(v1_hierarchies) && n < max; i++) {
                if (snprintf(path, sizeof(path), "%s/%s/codecage", host->v1_root,
                             v1_hierarchies[i]) >= (int)sizeof(path))
                        continue;
                fds[n] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fds[n] >= 0)
                        n++;
        }
        return n;
}

static void sweep(const struct sweep *sw, int *fds, size_t n, unsigned wait_ms)
{
        for (size_t i = 0; i < n; i++)
                for_each_subgroup(sw, fds[i], 0, release_doomed);
        uint64_t deadline = clock_mono_ms() + wait_ms;
        for (;;) {
                bool left = false;
                for (size_t i = 0; i < n; i++) {
                        for_each_subgroup(sw, fds[i], 0, remove_doomed);
                        left = left || any_doomed_left(sw, fds[i]);
                }
                if (!left || clock_mono_ms() >= deadline)
                        break;
                nanosleep(&(struct timespec){.tv_nsec = RETRY_SLEEP_NS}, NULL);
        }
}

static void sweep_parents(const struct cgroup_host *host, const struct sweep *sw, unsigned wait_ms)
{
        int fds[ELEMENTSOF(v1_hierarchies)];
        size_t n = open_parents(host, fds, ELEMENTSOF(fds));
        bool any = false;
        for (size_t i = 0; i < n && !any; i++)
                any = any_doomed_left(sw, fds[i]);
        if (any)
                sweep(sw, fds, n, wait_ms);
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
}

/* Every cold `codecage run` sweeps: one listing per hierarchy when there is
 * nothing to do, the full passes only when something is stale. */
void cage_cgroup_sweep_stale(const struct cgroup_host *host, unsigned wait_ms)
{
        sweep_parents(host, &(struct sweep){.owner = 0}, wait_ms);
}

void cage_cgroup_sweep_owner(const struct cgroup_host *host, pid_t owner, unsigned wait_ms)
{
        if (owner > 0)
                sweep_parents(host, &(struct sweep){.owner = owner}, wait_ms);
}
