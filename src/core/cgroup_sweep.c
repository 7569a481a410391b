/* Removing cgroups left by a codecage process that died without cleaning
 * up (kill -9, OOM, power cut of the supervisor only). Sandbox groups are
 * named "run-<supervisor pid>-<n>"; a group whose supervisor pid no longer
 * exists is stale: whatever is still inside is killed and the group removed
 * from every hierarchy. A pid reused by an unrelated process only delays the
 * sweep of that group to a later start. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "util/fdutil.h"

static const char *const v1_hierarchies[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

static bool stale_name(const char *name)
{
        int pid;
        unsigned n;
        char tail;
        if (sscanf(name, CGROUP_RUN_PREFIX "%d-%u%c", &pid, &n, &tail) != 2 || pid <= 0)
                return false;
        return kill(pid, 0) < 0 && errno == ESRCH;
}

/* SIGKILLs every pid listed in dir/cgroup.procs; true when it was empty. */
static bool kill_members(int dirfd)
{
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

static void remove_group(int parentfd, const char *name, int depth);

/* Sub-groups (one per exec of a long-lived sandbox) go first. */
static void remove_children(int fd, int depth)
{
        int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        DIR *d = dupfd >= 0 ? fdopendir(dupfd) : NULL;
        if (!d) {
                if (dupfd >= 0)
                        close(dupfd);
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 &&
                    strcmp(de->d_name, "..") != 0)
                        remove_group(fd, de->d_name, depth + 1);
        closedir(d);
}

static void remove_group(int parentfd, const char *name, int depth)
{
        for (int i = 0; i < 50; i++) {
                int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return;
                bool empty = kill_members(fd);
                if (depth < 2)
                        remove_children(fd, depth);
                close(fd);
                if (empty && unlinkat(parentfd, name, AT_REMOVEDIR) == 0)
                        return;
                nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        }
}

static void sweep_dir(const char *path)
{
        DIR *d = opendir(path);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && stale_name(de->d_name))
                        remove_group(dirfd(d), de->d_name, 0);
        closedir(d);
}

void cage_cgroup_sweep_stale(const struct cgroup_host *host)
{
        char path[512];
        if (host->backend == CGROUP_BACKEND_V2) {
                sweep_dir(host->v2_parent);
                return;
        }
        if (host->backend != CGROUP_BACKEND_V1)
                return;
        for (size_t i = 0; i < sizeof(v1_hierarchies) / sizeof(v1_hierarchies[0]); i++)
                if (snprintf(path, sizeof(path), "%s/%s/codecage", host->v1_root,
                             v1_hierarchies[i]) < (int)sizeof(path))
                        sweep_dir(path);
}
