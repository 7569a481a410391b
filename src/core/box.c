/* Long-lived sandboxes; see box.h for the model and box_proto.h for the
 * protocol with codecage-init.
 *
 * Start: the launcher (launcher.c) does what a one-shot run does —
 * prepare, clone (on the launcher thread), id maps, cgroup — with pid 1
 * being codecage-init exec'd from a sealed memfd, its stdio /dev/null and
 * a control socket for execs. The start has succeeded once the report pipe
 * closes with nothing in it (codecage-init was exec'd).
 *
 * Exec (box_exec.c): a request with five fds goes down the control socket;
 * init answers STARTED with the exec's pid inside; we find that process on
 * the host, move it into a fresh sub-cgroup "e<id>", let it go and watch
 * it with the same loop and verdict as a one-shot run. */
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
#include "plan.h"
#include "util/clock.h"
#include "util/debug_pause.h"
#include "util/error.h"
#include "util/fdutil.h"

#define START_TIMEOUT_MS  10000
#define INIT_EXIT_WAIT_MS 2000 /* then the cgroup kill's own rounds */

/* ---- start ---- */

static int open_null(int flags)
{
        int fd = open("/dev/null", flags | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Init's stdio is /dev/null; the control socket is how execs arrive. */
static int make_box_fds(struct cage_box *box, struct cage_error *err)
{
        struct launch_plan *plan = &box->l.plan;
        int ctl[2];
        if ((plan->stdin_fd = open_null(O_RDONLY)) < 0 ||
            (plan->stdout_fd = open_null(O_WRONLY)) < 0 ||
            (plan->stderr_fd = open_null(O_WRONLY)) < 0)
                return cage_fail(err, -errno, "open /dev/null");
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
                return cage_fail(err, -errno, "control socket");
        box->ctl_fd = ctl[0];
        plan->box_ctl_fd = ctl[1];
        return 0;
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

static int prepare(struct cage_box *box, struct cage_error *err)
{
        struct launch_plan *plan = &box->l.plan;
        int r;
        if ((plan->box_init_fd = cage_init_image_fd(err)) < 0)
                return plan->box_init_fd;
        plan->box = true;
        if ((r = launcher_prepare(&box->l, err)) < 0)
                return r;
        if (box->template) {
                /* It makes the namespaces and mounts of the sandboxes it forks and
                 * writes their id maps; they drop all of it before any code runs. */
                plan->disable |=
                        CAGE_DEBUG_NO_SECCOMP | CAGE_DEBUG_NO_CAPS_DROP | CAGE_DEBUG_NO_PROC_MASK;
                box->l.template_maps = true;
                plan->nests_namespaces = true; /* its children limit their own */
        }
        if (!(box->envp = copy_env(plan->envp)) || !(box->workdir = strdup(box->spec.workdir)))
                return cage_fail(err, -ENOMEM, "sandbox environment");
        return make_box_fds(box, err);
}

/* The launch succeeded when the report pipe closes with nothing in it
 * (codecage-init was exec'd; the write end is close-on-exec). */
static int wait_launched(struct cage_box *box, struct cage_error *err)
{
        struct child_report rep;
        struct pollfd p = {.fd = box->l.report_r, .events = POLLIN};
        int n = poll(&p, 1, START_TIMEOUT_MS);
        if (n == 0)
                return cage_fail(err, -ETIMEDOUT, "the sandbox did not start within %d ms",
                                 START_TIMEOUT_MS);
        ssize_t got = read(box->l.report_r, &rep, sizeof(rep));
        if (got == 0)
                return 0;
        if (got != sizeof(rep))
                return cage_fail(err, -EIO, "reading the sandbox's launch report");
        rep.step[sizeof(rep.step) - 1] = '\0';
        return launcher_report_error(&box->l, &rep, err);
}

static int launch(struct cage_box *box, struct cage_error *err)
{
        int r = prepare(box, err);
        if (r == 0)
                r = launcher_clone(&box->l, true, err);
        if (r == 0)
                r = launcher_enter_cgroup(&box->l, err);
        if (r == 0)
                r = wait_launched(box, err);
        if (r == 0) /* read to its end: an idle sandbox holds no fd it does not use */
                close_fd(&box->l.report_r);
        plan_free(&box->l.plan);
        return r;
}

static int start(const struct cage_spec *spec, bool template, struct cage_box **ret,
                 struct cage_error *err)
{
        static char *const init_argv[] = {"codecage-init", NULL};
        struct cage_box *box = calloc(1, sizeof(*box));
        if (!box)
                return cage_fail(err, -ENOMEM, "allocate sandbox");
        box->spec = *spec;
        box->template = template;
        box->spec.argv = init_argv;
        int r = cage_spec_validate(&box->spec, err);
        if (r == 0)
                r = plan_check_inputs(&box->spec, err);
        if (r < 0) {
                free(box);
                return r;
        }
        box->ctl_fd = -1;
        launcher_init(&box->l, &box->spec);
        pthread_mutex_init(&box->lock, NULL);
        box->memory_bytes = spec->memory_bytes;
        box->cpu_time_ms = spec->cpu_time_ms;
        r = launch(box, err);
        if (r < 0) {
                cage_box_destroy(box);
                return r;
        }
        *ret = box;
        return 0;
}

int cage_box_start(const struct cage_spec *spec, struct cage_box **ret, struct cage_error *err)
{
        return start(spec, false, ret, err);
}

int box_start_template(const struct cage_spec *spec, struct cage_box **ret, struct cage_error *err)
{
        return start(spec, true, ret, err);
}

struct cage_box *box_adopt(const struct cage_spec *spec, struct launcher *l, int ctl_fd,
                           char *const *envp)
{
        struct cage_box *box = calloc(1, sizeof(*box));
        if (box && (!(box->envp = copy_env(envp)) || !(box->workdir = strdup(spec->workdir)))) {
                free(box->envp);
                free(box);
                box = NULL;
        }
        if (!box) {
                if (ctl_fd >= 0)
                        close(ctl_fd);
                launcher_release(l);
                return NULL;
        }
        box->spec = *spec;
        box->l = *l;
        box->l.spec = &box->spec;
        box->ctl_fd = ctl_fd;
        box->adopted = true;
        box->memory_bytes = spec->memory_bytes;
        box->cpu_time_ms = spec->cpu_time_ms;
        pthread_mutex_init(&box->lock, NULL);
        return box;
}

/* ---- kill, destroy, queries ---- */

static void reap_locked(struct cage_box *box, bool block)
{
        struct launcher *l = &box->l;
        if (l->reaped || l->pid <= 0)
                return;
        if (box->adopted) { /* not our child: its pidfd is readable once it ended */
                struct pollfd p = {.fd = l->pidfd, .events = POLLIN};
                int n;
                do
                        n = poll(&p, 1, block ? -1 : 0);
                while (n < 0 && errno == EINTR);
                l->reaped = n != 0;
                return;
        }
        int status;
        pid_t r;
        do
                r = waitpid(l->pid, &status, block ? __WALL : __WALL | WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == l->pid || (r < 0 && errno == ECHILD))
                l->reaped = true;
}

bool cage_box_alive(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        reap_locked(box, false);
        bool alive = !box->l.reaped && !box->killed;
        pthread_mutex_unlock(&box->lock);
        return alive;
}

void cage_box_kill_init(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        box->killed = true;
        /* SIGKILL to pid 1 ends the whole pid namespace. */
        if (box->l.pidfd >= 0 && !box->l.reaped)
                syscall(SYS_pidfd_send_signal, box->l.pidfd, SIGKILL, NULL, 0);
        pthread_mutex_unlock(&box->lock);
}

/* ---- parking: an idle sandbox holds no cgroup fds ---- */

struct cage_cgroup *box_cgroup(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        (void)cage_cgroup_unpark(box->l.cg);
        pthread_mutex_unlock(&box->lock);
        return box->l.cg;
}

void cage_box_park(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        cage_cgroup_park(box->l.cg);
        pthread_mutex_unlock(&box->lock);
}

/* Waits, at most INIT_EXIT_WAIT_MS, for pid 1 to have exited after its
 * SIGKILL. The kernel ends pid 1 last: it first kills and reaps every
 * other process of the pid namespace, so once the pidfd reads as exited
 * the cgroup holds none of them, and the cgroup kill below finds it empty
 * in one read instead of polling it while the processes tear down their
 * memory (and freezing the group when that takes long). */
static void wait_init_exit(struct cage_box *box)
{
        pthread_mutex_lock(&box->lock);
        int pidfd = box->l.reaped ? -1 : box->l.pidfd;
        pthread_mutex_unlock(&box->lock);
        if (pidfd < 0)
                return;
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        uint64_t deadline = clock_mono_ms() + INIT_EXIT_WAIT_MS;
        for (;;) {
                uint64_t now = clock_mono_ms();
                if (now >= deadline || poll(&p, 1, (int)(deadline - now)) != -1 || errno != EINTR)
                        return;
        }
}

void cage_box_kill(struct cage_box *box)
{
        cage_box_kill_init(box);
        wait_init_exit(box);
        /* The cgroup kill also catches anything outside the pid namespace. */
        struct cage_cgroup *cg = box_cgroup(box);
        if (cg)
                cage_cgroup_kill(cg);
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
        cage_cgroup_destroy(box_cgroup(box));
        box->l.cg = NULL;
        debug_pause_point("box-cgroup-removed");
        if (box->ctl_fd >= 0)
                close(box->ctl_fd);
        launcher_release(&box->l); /* the pidfd, the uid slot */
        if (box->release_attached)
                box->release_attached(box->attached);
        free(box->envp);
        free(box->workdir);
        pthread_mutex_destroy(&box->lock);
        struct cage_zygote *zygote = box->zygote;
        free(box);
        if (zygote) /* after our pid 1 is gone: the template may go now */
                zygote_child_gone(zygote);
        return NULL;
}

int cage_box_usage(struct cage_box *box, struct cage_box_usage *ret)
{
        struct cgroup_stats s = {0};
        memset(ret, 0, sizeof(*ret));
        struct cage_cgroup *cg = box_cgroup(box);
        if (!cg)
                return 0;
        int r = cage_cgroup_stats(cg, &s);
        ret->cpu_ms = s.cpu_usage_ns / 1000000ULL;
        ret->memory_bytes = s.peak_memory_bytes;
        ret->memory_now_bytes = s.memory_bytes;
        ret->oom_kills = s.oom_kills;
        return r;
}

void cage_box_attach(struct cage_box *box, void *data, void (*release)(void *data))
{
        box->attached = data;
        box->release_attached = release;
}

int cage_box_set_cpu_weight(struct cage_box *box, unsigned weight)
{
        struct cage_cgroup *cg = box_cgroup(box);
        return cg ? cage_cgroup_set_cpu_weight(cg, weight) : 0;
}

const char *cage_box_limits_backend(const struct cage_box *box)
{
        return cgroup_backend_to_string(box->l.cg ? cage_cgroup_backend(box->l.cg)
                                                  : CGROUP_BACKEND_NONE);
}

pid_t cage_box_init_pid(const struct cage_box *box)
{
        return box->l.pid;
}

int cage_box_pidfd(const struct cage_box *box)
{
        return box->l.pidfd;
}

const char *cage_box_cgroup_name(const struct cage_box *box)
{
        return box->l.cg ? cage_cgroup_name(box->l.cg) : NULL;
}

uid_t cage_box_host_uid(const struct cage_box *box)
{
        return box->l.slot.host_uid;
}

gid_t cage_box_host_gid(const struct cage_box *box)
{
        return box->l.slot.host_gid;
}
