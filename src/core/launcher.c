/* The supervisor's side of starting a sandbox; see launcher.h. One path for
 * one-shot runs and long-lived sandboxes, so a launch step changes in one
 * place. */
#include "launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "idmap.h"
#include "plan.h"
#include "sandbox.h"
#include "seccomp.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

/* ---- cgroups: the host, once per process ---- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static struct cgroup_host cached_host;
static int cached_host_r;
static struct cage_error cached_host_err;

static void detect_host_once(void)
{
        cached_host_r = cage_cgroup_host_detect(&cached_host, &cached_host_err);
        if (cached_host_r == 0)
                cage_cgroup_sweep_stale(&cached_host, 0);
}

int launch_detect_cgroups(struct cgroup_host *ret, struct cage_error *err)
{
        pthread_once(&host_once, detect_host_once);
        if (cached_host_r < 0) {
                if (err)
                        *err = cached_host_err;
                return cached_host_r;
        }
        *ret = cached_host;
        return 0;
}

void launch_sweep_stale_cgroups(unsigned wait_ms)
{
        struct cgroup_host host;
        if (launch_detect_cgroups(&host, NULL) == 0)
                cage_cgroup_sweep_stale(&host, wait_ms);
}

/* A group named run-<our pid>-<n> with the spec's limits; none when there
 * is no cgroup backend (rlimits only). */
static int create_cgroup(struct launcher *l, struct cage_error *err)
{
        static unsigned counter;
        char name[64];
        if (l->cg_host.backend == CGROUP_BACKEND_NONE ||
            (l->spec->debug_disable & CAGE_DEBUG_NO_LIMITS))
                return 0;
        snprintf(name, sizeof(name), CGROUP_RUN_PREFIX "%d-%u", (int)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        /* A zygote's template has no memory limit: what each child makes
         * before it is moved into a group of its own (its task, its cloned
         * namespaces) and the template's pages it still maps after the
         * template wrote its own copy stay charged to the template's group,
         * a little per live child. The template runs no code it is sent. */
        struct cgroup_limits lim = {.memory_bytes = l->template_maps ? 0 : l->spec->memory_bytes,
                                    .cpus = l->spec->cpus,
                                    .pids = l->spec->pids};
        return cage_cgroup_create(&l->cg_host, name, &lim, &l->cg, err);
}

/* ---- lean clones: the child shares our fd table, then keeps a few ----
 *
 * A clone copies the fd table of the server, which holds a few fds per live
 * sandbox, and the child then closes each of them (every close of a
 * directory or of the uid slots' lock file walks kernel lists): at 1500
 * live sandboxes the biggest cost of a launch that grew with their number.
 * Instead the launcher thread keeps LEAN_SLOTS fds of /dev/null at low
 * numbers, taken at its start; for each clone it points them at the
 * child's fds (dup3), clones with CLONE_FILES, and the child's first step
 * is close_range(below, ~0, CLOSE_RANGE_UNSHARE): a private table of the
 * fds below the slots' top only. Once the child's table is its own (kcmp),
 * the slots point at /dev/null again, so none of the child's pipes stays
 * open here. Kernels without close_range's unshare (< 5.9) or kcmp clone
 * as before. */

#define LEAN_SLOTS (7 + CAGE_MOUNTS_MAX)

static struct {
        bool ok;
        int null_fd;
        int slot[LEAN_SLOTS];
        int below; /* one above the highest slot */
} lean = {.null_fd = -1};

/* Whether this kernel has both, tried in a forked child (which holds
 * nothing: its table is a copy it may change). */
static bool lean_supported(void)
{
        if (syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILES, 0, 0) != 0)
                return false;
        pid_t pid = fork();
        if (pid == 0)
                _exit(syscall(SYS_close_range, ~0U, ~0U, CLOSE_RANGE_UNSHARE) == 0 ? 0 : 1);
        int status;
        while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void lean_setup(void)
{
        if (!lean_supported() || (lean.null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                return;
        for (size_t i = 0; i < LEAN_SLOTS; i++) {
                if ((lean.slot[i] = fcntl(lean.null_fd, F_DUPFD_CLOEXEC, 3)) < 0)
                        return;
                if (lean.slot[i] >= lean.below)
                        lean.below = lean.slot[i] + 1;
        }
        lean.ok = true;
}

/* Points the next slot at *fd (keeping its close-on-exec flag) and makes
 * *fd that slot's number. */
static int lean_place(int *fd, size_t *used)
{
        if (*fd < 0)
                return 0;
        int flags = fcntl(*fd, F_GETFD);
        int slot = lean.slot[*used];
        if (flags < 0 || dup3(*fd, slot, (flags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
                return -errno;
        (*used)++;
        *fd = slot;
        return 0;
}

static void lean_release(size_t used)
{
        for (size_t i = 0; i < used; i++)
                (void)dup3(lean.null_fd, lean.slot[i], O_CLOEXEC);
}

/* Until the child's first step made its table its own (or it is gone).
 * Bounded: a child stopped before that step is killed after ~5 s. */
static void lean_wait_unshared(pid_t pid, int pidfd)
{
        for (unsigned i = 0;; i++) {
                if (syscall(SYS_kcmp, getpid(), pid, KCMP_FILES, 0, 0) != 0)
                        return;
                if (i < 64) {
                        sched_yield();
                        continue;
                }
                if (i == 64 + 100000)
                        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                usleep(50);
        }
}

static pid_t lean_clone(const struct launch_plan *plan, int *ret_pidfd)
{
        struct launch_plan copy = *plan;
        size_t used = 0;
        int r = 0;
        int *fds[] = {&copy.stdin_fd, &copy.stdout_fd,   &copy.stderr_fd, &copy.report_fd,
                      &copy.sync_fd,  &copy.box_init_fd, &copy.box_ctl_fd};
        for (size_t i = 0; i < ELEMENTSOF(fds) && r == 0; i++)
                if (copy.box || (fds[i] != &copy.box_init_fd && fds[i] != &copy.box_ctl_fd))
                        r = lean_place(fds[i], &used);
        for (size_t i = 0; i < CAGE_MOUNTS_MAX && r == 0; i++)
                r = lean_place(&copy.mount_fds[i], &used);
        if (r < 0) {
                lean_release(used);
                return sandbox_clone(plan, ret_pidfd);
        }
        copy.shared_fds_below = lean.below;
#ifdef CODECAGE_UNSAFE_DEBUG
        /* The security suite's control: the child keeps what it inherited. */
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "server-fds"))
                copy.disable |= CAGE_DEBUG_KEEP_FDS;
#endif
        pid_t pid = sandbox_clone(&copy, ret_pidfd);
        if (pid > 0)
                lean_wait_unshared(pid, *ret_pidfd);
        lean_release(used);
        return pid;
}

/* ---- the launcher thread ---- */

struct clone_job {
        const struct launch_plan *plan;
        pid_t pid;
        int pidfd;
        bool done;
};

static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thread_cond = PTHREAD_COND_INITIALIZER;
static struct clone_job *thread_job;
static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static int thread_r;

static void *thread_main(void *arg)
{
        (void)arg;
        /* A mount namespace of this thread's own, copied now: each clone
         * copies its cloner's mount table, and the server's gains a mount per
         * running sandbox (its workspace), so creation would slow as they
         * grow. Sources come as detached trees from the caller's namespace
         * (open_mounts). As root only (unprivileged, there are no such mounts). */
        if (geteuid() == 0)
                (void)unshare(CLONE_FS | CLONE_NEWNS);
        lean_setup();
        pthread_mutex_lock(&thread_lock);
        for (;;) {
                while (!thread_job || thread_job->done)
                        pthread_cond_wait(&thread_cond, &thread_lock);
                struct clone_job *job = thread_job;
                job->pid = lean.ok ? lean_clone(job->plan, &job->pidfd)
                                   : sandbox_clone(job->plan, &job->pidfd);
                job->done = true;
                pthread_cond_broadcast(&thread_cond);
        }
        return NULL;
}

static void thread_start(void)
{
        pthread_t t;
        pthread_attr_t attr;
        struct sched_param normal = {.sched_priority = 0};
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The ordinary policy whichever thread starts it (an upkeep thread
         * runs SCHED_BATCH): every sandbox it clones inherits it. */
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_OTHER);
        pthread_attr_setschedparam(&attr, &normal);
        thread_r = -pthread_create(&t, &attr, thread_main, NULL);
        pthread_attr_destroy(&attr);
}

int launch_thread_start(void)
{
        pthread_once(&thread_once, thread_start);
        return thread_r;
}

/* Clones on the launcher thread, which lives as long as the process, so
 * the sandbox's parent-death signal fires only when we are gone. */
static pid_t clone_on_thread(const struct launch_plan *plan, int *ret_pidfd)
{
        int r = launch_thread_start();
        if (r < 0)
                return r;
        struct clone_job job = {.plan = plan, .pidfd = -1};
        pthread_mutex_lock(&thread_lock);
        while (thread_job)
                pthread_cond_wait(&thread_cond, &thread_lock);
        thread_job = &job;
        pthread_cond_broadcast(&thread_cond);
        while (!job.done)
                pthread_cond_wait(&thread_cond, &thread_lock);
        thread_job = NULL;
        pthread_cond_broadcast(&thread_cond);
        pthread_mutex_unlock(&thread_lock);
        *ret_pidfd = job.pidfd;
        return job.pid;
}

/* ---- the launch ---- */

void launcher_init(struct launcher *l, const struct cage_spec *spec)
{
        *l = (struct launcher){.spec = spec,
                               .pidfd = -1,
                               .report_r = -1,
                               .sync_w = -1,
                               .plan = {.stdin_fd = -1,
                                        .stdout_fd = -1,
                                        .stderr_fd = -1,
                                        .report_fd = -1,
                                        .sync_fd = -1,
                                        .box_init_fd = -1,
                                        .box_ctl_fd = -1,
                                        .clone_cgroup_fd = -1}};
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                l->plan.mount_fds[i] = -1;
}

/* As root, user mounts are idmapped so their owner is the sandbox user
 * (whose host uid is a per-sandbox slot); where the kernel or filesystem
 * cannot idmap, a plain bind is used and the directory's own permissions
 * apply. Either is a detached tree taken here, from the caller's mount
 * namespace (the server's, which holds the workspaces): the launcher thread
 * clones sandboxes from a namespace of its own. */
static void open_mounts(struct launcher *l)
{
        if (!l->slot.privileged)
                return;
        for (size_t i = 0; i < l->spec->n_mounts; i++) {
                const struct cage_mount *m = &l->spec->mounts[i];
                int fd = idmap_mount_open(m->source, l->slot.host_uid, l->slot.host_gid,
                                          m->writable, NULL);
                if (fd < 0)
                        fd = bind_tree_open(m->source, m->writable, NULL);
                l->plan.mount_fds[i] = fd >= 0 ? fd : -1;
        }
}

static int make_pipes(struct launcher *l, struct cage_error *err)
{
        int rep[2], sync[2];
        if (pipe2(rep, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        l->report_r = rep[0];
        l->plan.report_fd = rep[1];
        if (pipe2(sync, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        l->plan.sync_fd = sync[0];
        l->sync_w = sync[1];
        return 0;
}

int launcher_prepare(struct launcher *l, struct cage_error *err)
{
        int r;
        if ((r = cage_seccomp_program(&l->plan.seccomp, err)) < 0)
                return r;
        if ((r = cage_id_slot_acquire(&l->slot, err)) < 0)
                return r;
        l->plan.privileged = l->slot.privileged;
        if ((r = launch_detect_cgroups(&l->cg_host, err)) < 0)
                return r;
        l->plan.rlimit_memory = l->cg_host.backend == CGROUP_BACKEND_NONE || !l->cg_host.has_memory;
        if ((r = plan_build(&l->plan, l->spec, err)) < 0)
                return r;
        open_mounts(l);
        /* As root, the sandbox's user namespace is created by (so owned by,
         * and its per-user kernel counts charged to) its own host uid. */
        if (l->slot.privileged && !(l->spec->debug_disable & CAGE_DEBUG_ROOT_OWNED_USERNS))
                l->plan.owner_uid = l->slot.host_uid;
        return make_pipes(l, err);
}

static void close_child_ends(struct launcher *l)
{
        if (l->stdin_borrowed)
                l->plan.stdin_fd = -1;
        close_fd(&l->plan.stdin_fd);
        close_fd(&l->plan.stdout_fd);
        close_fd(&l->plan.stderr_fd);
        close_fd(&l->plan.report_fd);
        close_fd(&l->plan.sync_fd);
        close_fd(&l->plan.box_ctl_fd);
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                close_fd(&l->plan.mount_fds[i]);
}

static pid_t clone_child(struct launcher *l, bool on_thread)
{
        return on_thread ? clone_on_thread(&l->plan, &l->pidfd)
                         : sandbox_clone(&l->plan, &l->pidfd);
}

/* On cgroup v2 the group is made first and the child born in it: moving a
 * process into a group takes the kernel's global threadgroup lock for
 * writing, which (without the favordynmods mount option) waits for an RCU
 * grace period, milliseconds on every launch. v1 has no such clone: there
 * the group is made while the child builds its filesystem, and joined. */
int launcher_clone(struct launcher *l, bool on_thread, struct cage_error *err)
{
        int r;
        if (l->cg_host.backend == CGROUP_BACKEND_V2 && (r = create_cgroup(l, err)) < 0) {
                close_child_ends(l);
                return r;
        }
        l->plan.clone_cgroup_fd = cage_cgroup_clone_fd(l->cg);
        pid_t pid = clone_child(l, on_thread);
        if (pid < 0 && l->plan.clone_cgroup_fd >= 0) {
                l->plan.clone_cgroup_fd = -1; /* a kernel without it: join afterwards */
                pid = clone_child(l, on_thread);
        }
        l->born_in_cgroup = pid > 0 && l->plan.clone_cgroup_fd >= 0;
        l->plan.clone_cgroup_fd = -1;
        close_child_ends(l);
        if (pid < 0)
                return cage_fail(err, (int)pid, "clone into new namespaces");
        l->pid = pid;
        return 0;
}

/* A child that already failed a launch step has exited and closed its end
 * (EPIPE): no error of ours; its report says which step failed. */
static int send_sync(struct launcher *l, char what, struct cage_error *err)
{
        if (write_all(l->sync_w, &what, 1) < 0 && errno != EPIPE)
                return cage_fail(err, -errno, "waking the sandbox");
        return 0;
}

/* Id maps first, so the child can build its filesystem while we create its
 * cgroup; the second byte lets it go on once it is inside that cgroup. */
int launcher_enter_cgroup(struct launcher *l, struct cage_error *err)
{
        int r = l->template_maps
                        ? cage_userns_write_template_maps(l->pid, &l->slot, err)
                        : cage_userns_write_maps(l->pid, &l->slot, l->spec->uid, l->spec->gid, err);
        if (r == 0)
                r = send_sync(l, SYNC_MAPS_WRITTEN, err);
        if (r == 0 && !l->cg)
                r = create_cgroup(l, err);
        if (r == 0 && l->cg && !l->born_in_cgroup)
                r = cage_cgroup_attach(l->cg, l->pid, err);
        if (r == 0)
                r = send_sync(l, SYNC_IN_CGROUP, err);
        close_fd(&l->sync_w);
        return r;
}

void launcher_kill(struct launcher *l)
{
        if (l->pidfd >= 0 && !l->reaped)
                syscall(SYS_pidfd_send_signal, l->pidfd, SIGKILL, NULL, 0);
        if (l->cg)
                cage_cgroup_kill(l->cg);
}

void launcher_reap(struct launcher *l, struct rusage *rusage)
{
        if (l->reaped || l->pid <= 0)
                return;
        int status;
        pid_t r;
        do
                r = wait4(l->pid, &status, __WALL, rusage);
        while (r < 0 && errno == EINTR);
        l->reaped = true;
}

void launcher_release(struct launcher *l)
{
        if (l->pid > 0 && !l->reaped) {
                launcher_kill(l);
                launcher_reap(l, NULL);
        }
        cage_cgroup_destroy(l->cg);
        l->cg = NULL;
        close_fd(&l->pidfd);
        close_fd(&l->report_r);
        close_fd(&l->sync_w);
        close_child_ends(l);
        plan_free(&l->plan);
        cage_id_slot_release(&l->slot);
}

const char *launcher_limits_backend(const struct launcher *l)
{
        return cgroup_backend_to_string(l->cg ? cage_cgroup_backend(l->cg) : CGROUP_BACKEND_NONE);
}

int launcher_report_error(const struct launcher *l, const struct child_report *rep,
                          struct cage_error *err)
{
        if (rep->kind != REPORT_BAD_MOUNT)
                return cage_fail(err, -EIO, "sandbox launch step \"%s\" failed: %s", rep->step,
                                 strerror(rep->value));
        int i = -1;
        sscanf(rep->step, "mounts[%d]", &i);
        const char *target =
                i >= 0 && (size_t)i < l->spec->n_mounts ? l->spec->mounts[i].target : "?";
        return cage_fail(err, -EINVAL,
                         "%s \"%s\": cannot make the mount point in this image (%s); mount at a "
                         "new path or in a writable directory",
                         rep->step, target, strerror(rep->value));
}

int launcher_make_cgroup(struct launcher *l, struct cage_error *err)
{
        return create_cgroup(l, err);
}
