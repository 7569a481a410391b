/* Long-lived sandboxes; see box.h for the model and box_proto.h for the
 * protocol with codecage-init.
 *
 * Start: the same preparation as a one-shot run (seccomp program, uid
 * slot, cgroup host, launch plan with idmapped mounts), then the clone —
 * on the launcher thread — the id maps, the cgroup, and a wait until either
 * the child reports a failed launch step or its report pipe closes, which
 * happens when codecage-init has been exec'd (the pipe is close-on-exec).
 *
 * Exec: a request with five fds goes down the control socket; init answers
 * STARTED with the exec's pid inside; we find that process on the host (a
 * child of init whose innermost NSpid matches), move it into a fresh
 * sub-cgroup "e<id>", and let it go. Then we watch its output, its status
 * pipe, the deadline, the cancel fd and pid 1 itself. When the exec ends —
 * or times out, or is cancelled — its cgroup is killed, so nothing it
 * started outlives it, and the result is judged like a one-shot run's. */
#include "box.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "box_private.h"
#include "box_proto.h"
#include "cgroup.h"
#include "init_image.h"
#include "output.h"
#include "plan.h"
#include "sandbox.h"
#include "seccomp.h"
#include "userns.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/debug_pause.h"
#include "util/fdutil.h"

#define START_TIMEOUT_MS 10000
#define ENV_MAX          (CAGE_ENV_MAX * 2)

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

/* ---- the launcher thread ---- */

struct launch_job {
        const struct launch_plan *plan;
        pid_t pid;
        int pidfd;
        bool done;
};

static pthread_mutex_t launcher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t launcher_cond = PTHREAD_COND_INITIALIZER;
static struct launch_job *launcher_job;
static pthread_once_t launcher_once = PTHREAD_ONCE_INIT;
static int launcher_r;

static void *launcher_main(void *arg)
{
        (void)arg;
        pthread_mutex_lock(&launcher_lock);
        for (;;) {
                while (!launcher_job || launcher_job->done)
                        pthread_cond_wait(&launcher_cond, &launcher_lock);
                struct launch_job *job = launcher_job;
                job->pid = sandbox_clone(job->plan, &job->pidfd);
                job->done = true;
                pthread_cond_broadcast(&launcher_cond);
        }
        return NULL;
}

static void launcher_start(void)
{
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        launcher_r = -pthread_create(&t, &attr, launcher_main, NULL);
        pthread_attr_destroy(&attr);
}

/* Clones the sandbox's pid 1 on the launcher thread, which lives as long
 * as the process, so its parent-death signal fires only when we are gone. */
static pid_t clone_on_launcher(const struct launch_plan *plan, int *ret_pidfd)
{
        pthread_once(&launcher_once, launcher_start);
        if (launcher_r < 0)
                return launcher_r;
        struct launch_job job = {.plan = plan, .pidfd = -1};
        pthread_mutex_lock(&launcher_lock);
        while (launcher_job)
                pthread_cond_wait(&launcher_cond, &launcher_lock);
        launcher_job = &job;
        pthread_cond_broadcast(&launcher_cond);
        while (!job.done)
                pthread_cond_wait(&launcher_cond, &launcher_lock);
        launcher_job = NULL;
        pthread_cond_broadcast(&launcher_cond);
        pthread_mutex_unlock(&launcher_lock);
        *ret_pidfd = job.pidfd;
        return job.pid;
}

/* ---- start ---- */

struct start_state {
        struct cage_spec spec;
        struct launch_plan plan;
        int report_r, sync_w, ctl_w;
};

static int open_null(int flags)
{
        int fd = open("/dev/null", flags | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int make_start_fds(struct start_state *st, struct cage_error *err)
{
        int rep[2], sync[2], ctl[2];
        if ((st->plan.stdin_fd = open_null(O_RDONLY)) < 0 ||
            (st->plan.stdout_fd = open_null(O_WRONLY)) < 0 ||
            (st->plan.stderr_fd = open_null(O_WRONLY)) < 0)
                return cage_fail(err, -errno, "open /dev/null");
        if (pipe2(rep, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->report_r = rep[0];
        st->plan.report_fd = rep[1];
        if (pipe2(sync, O_CLOEXEC) < 0)
                return cage_fail(err, -errno, "pipe");
        st->plan.sync_fd = sync[0];
        st->sync_w = sync[1];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
                return cage_fail(err, -errno, "control socket");
        st->ctl_w = ctl[0];
        st->plan.box_ctl_fd = ctl[1];
        return 0;
}

static void close_child_ends(struct start_state *st)
{
        close_fd(&st->plan.stdin_fd);
        close_fd(&st->plan.stdout_fd);
        close_fd(&st->plan.stderr_fd);
        close_fd(&st->plan.report_fd);
        close_fd(&st->plan.sync_fd);
        close_fd(&st->plan.box_ctl_fd);
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                close_fd(&st->plan.mount_fds[i]);
}

/* The sandbox's environment outlives the plan: keep a copy. */
static char **copy_env(char *const *envp)
{
        size_t n = 0, bytes = 0;
        while (envp[n])
                bytes += strlen(envp[n++]) + 1;
        char **copy = malloc((n + 1) * sizeof(char *) + bytes);
        if (!copy)
                return NULL;
        char *pos = (char *)(copy + n + 1);
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(envp[i]) + 1;
                copy[i] = memcpy(pos, envp[i], len);
                pos += len;
        }
        copy[n] = NULL;
        return copy;
}

static int prepare(struct cage_box *box, struct start_state *st, struct cage_error *err)
{
        int r;
        if ((r = cage_seccomp_program(&st->plan.seccomp, err)) < 0)
                return r;
        if ((st->plan.box_init_fd = cage_init_image_fd(err)) < 0)
                return st->plan.box_init_fd;
        st->plan.box = true;
        if ((r = cage_id_slot_acquire(&box->slot, err)) < 0)
                return r;
        st->plan.privileged = box->slot.privileged;
        if ((r = launch_detect_cgroups(&box->cg_host, err)) < 0)
                return r;
        st->plan.rlimit_memory =
                box->cg_host.backend == CGROUP_BACKEND_NONE || !box->cg_host.has_memory;
        if ((r = plan_build(&st->plan, &st->spec, err)) < 0)
                return r;
        if (!(box->envp = copy_env(st->plan.envp)))
                return cage_fail(err, -ENOMEM, "sandbox environment");
        launch_open_mounts(&st->plan, &st->spec, &box->slot);
        return make_start_fds(st, err);
}

/* EPIPE: the child failed a launch step and exited; wait_launched() reads
 * its report, which names the step. */
static int send_sync(struct start_state *st, char what, struct cage_error *err)
{
        if (write_all(st->sync_w, &what, 1) < 0 && errno != EPIPE)
                return cage_fail(err, -errno, "waking the sandbox");
        return 0;
}

/* The launch succeeded when the report pipe closes with nothing in it
 * (codecage-init was exec'd; the write end is close-on-exec). */
static int wait_launched(struct cage_box *box, struct start_state *st, struct cage_error *err)
{
        struct child_report rep;
        struct pollfd p = {.fd = st->report_r, .events = POLLIN};
        int n = poll(&p, 1, START_TIMEOUT_MS);
        if (n == 0)
                return cage_fail(err, -ETIMEDOUT, "the sandbox did not start within %d ms",
                                 START_TIMEOUT_MS);
        ssize_t got = read(st->report_r, &rep, sizeof(rep));
        if (got == 0)
                return 0;
        if (got != sizeof(rep))
                return cage_fail(err, -EIO, "reading the sandbox's launch report");
        rep.step[sizeof(rep.step) - 1] = '\0';
        if (rep.kind == REPORT_BAD_MOUNT) {
                int i = -1;
                sscanf(rep.step, "mounts[%d]", &i);
                const char *target =
                        i >= 0 && (size_t)i < st->spec.n_mounts ? st->spec.mounts[i].target : "?";
                return cage_fail(err, -EINVAL,
                                 "%s \"%s\": cannot make the mount point in this image (%s)",
                                 rep.step, target, strerror(rep.value));
        }
        (void)box;
        return cage_fail(err, -EIO, "sandbox launch step \"%s\" failed: %s", rep.step,
                         strerror(rep.value));
}

static int launch(struct cage_box *box, struct start_state *st, struct cage_error *err)
{
        int r = prepare(box, st, err);
        if (r < 0)
                return r;
        box->pid = clone_on_launcher(&st->plan, &box->pidfd);
        if (box->pid < 0) {
                r = (int)box->pid;
                box->pid = 0;
                return cage_fail(err, r, "clone into new namespaces");
        }
        close_child_ends(st);
        box->ctl_fd = TAKE_FD(st->ctl_w);
        r = cage_userns_write_maps(box->pid, &box->slot, err);
        if (r == 0)
                r = send_sync(st, SYNC_MAPS_WRITTEN, err);
        if (r == 0)
                r = launch_create_cgroup(&box->cg_host, &st->spec, &box->cg, err);
        if (r == 0 && box->cg)
                r = cage_cgroup_attach(box->cg, box->pid, err);
        if (r == 0)
                r = send_sync(st, SYNC_IN_CGROUP, err);
        close_fd(&st->sync_w);
        return r < 0 ? r : wait_launched(box, st, err);
}

int cage_box_start(const struct cage_spec *spec, struct cage_box **ret, struct cage_error *err)
{
        static char *const init_argv[] = {"codecage-init", NULL};
        struct cage_box *box = calloc(1, sizeof(*box));
        struct start_state *st = calloc(1, sizeof(*st));
        if (!box || !st) {
                free(box);
                free(st);
                return cage_fail(err, -ENOMEM, "allocate sandbox");
        }
        st->spec = *spec;
        st->spec.argv = init_argv;
        int r = cage_spec_validate(&st->spec, err);
        if (r == 0)
                r = plan_check_inputs(&st->spec, err);
        if (r < 0) {
                free(box);
                free(st);
                return r;
        }
        *box = (struct cage_box){.pidfd = -1, .ctl_fd = -1, .slot = {.lock_fd = -1}};
        pthread_mutex_init(&box->lock, NULL);
        box->memory_bytes = spec->memory_bytes;
        st->report_r = st->sync_w = st->ctl_w = -1;
        st->plan = (struct launch_plan){.stdin_fd = -1,
                                        .stdout_fd = -1,
                                        .stderr_fd = -1,
                                        .report_fd = -1,
                                        .sync_fd = -1,
                                        .box_init_fd = -1,
                                        .box_ctl_fd = -1};
        for (size_t i = 0; i < CAGE_MOUNTS_MAX; i++)
                st->plan.mount_fds[i] = -1;
        r = launch(box, st, err);
        close_child_ends(st);
        close_fd(&st->report_r);
        close_fd(&st->sync_w);
        close_fd(&st->ctl_w);
        plan_free(&st->plan);
        free(st);
        if (r < 0) {
                cage_box_destroy(box);
                return r;
        }
        *ret = box;
        return 0;
}

/* ---- kill, destroy, queries ---- */

static void reap_locked(struct cage_box *box, bool block)
{
        if (box->reaped || box->pid <= 0)
                return;
        int status;
        pid_t r;
        do
                r = waitpid(box->pid, &status, block ? __WALL : __WALL | WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == box->pid || (r < 0 && errno == ECHILD))
                box->reaped = true;
}

bool cage_box_alive(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        reap_locked(box, false);
        bool alive = !box->reaped && !box->killed;
        pthread_mutex_unlock(&box->lock);
        return alive;
}

void cage_box_kill_init(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        box->killed = true;
        /* SIGKILL to pid 1 ends the whole pid namespace. */
        if (box->pidfd >= 0 && !box->reaped)
                syscall(SYS_pidfd_send_signal, box->pidfd, SIGKILL, NULL, 0);
        pthread_mutex_unlock(&box->lock);
}

void cage_box_kill(struct cage_box *box)
{
        cage_box_kill_init(box);
        /* The cgroup kill also catches anything outside the pid namespace. */
        if (box->cg)
                cage_cgroup_kill(box->cg);
}

struct cage_box *cage_box_destroy(struct cage_box *box)
{
        if (!box)
                return NULL;
        cage_box_kill(box);
        debug_pause_point("box-killed");
        pthread_mutex_lock(&box->lock);
        reap_locked(box, true);
        pthread_mutex_unlock(&box->lock);
        cage_cgroup_destroy(box->cg);
        debug_pause_point("box-cgroup-removed");
        close_fd(&box->pidfd);
        close_fd(&box->ctl_fd);
        cage_id_slot_release(&box->slot);
        free(box->envp);
        pthread_mutex_destroy(&box->lock);
        free(box);
        return NULL;
}

int cage_box_usage(struct cage_box *box, struct cage_box_usage *ret)
{
        struct cgroup_stats s = {0};
        memset(ret, 0, sizeof(*ret));
        if (!box->cg)
                return 0;
        int r = cage_cgroup_stats(box->cg, &s);
        ret->cpu_ms = s.cpu_usage_ns / 1000000ULL;
        ret->memory_bytes = s.peak_memory_bytes;
        ret->memory_now_bytes = s.memory_bytes;
        ret->oom_kills = s.oom_kills;
        return r;
}

int cage_box_set_cpu_weight(struct cage_box *box, unsigned weight)
{
        return box->cg ? cage_cgroup_set_cpu_weight(box->cg, weight) : 0;
}

const char *cage_box_limits_backend(const struct cage_box *box)
{
        return cgroup_backend_to_string(box->cg ? cage_cgroup_backend(box->cg)
                                                : CGROUP_BACKEND_NONE);
}

pid_t cage_box_init_pid(const struct cage_box *box)
{
        return box->pid;
}

int cage_box_pidfd(const struct cage_box *box)
{
        return box->pidfd;
}

const char *cage_box_cgroup_name(const struct cage_box *box)
{
        return box->cg ? cage_cgroup_name(box->cg) : NULL;
}

uid_t cage_box_host_uid(const struct cage_box *box)
{
        return box->slot.host_uid;
}

gid_t cage_box_host_gid(const struct cage_box *box)
{
        return box->slot.host_gid;
}
