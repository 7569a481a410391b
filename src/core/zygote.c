/* Zygotes; see zygote.h for the model and runtime/python/codecage_zygote.py
 * for the template's side.
 *
 * Start: a template box (box_start_template), then the zygote as its one
 * exec (`python3 -I -c <zygote> <driver>`, fd 3 our SOCK_SEQPACKET control
 * socket), a hello with everything the children apply (ids, workdir, the
 * scratch tmpfs options, rlimits, /proc masks, the seccomp program), and
 * its answer: ready, or why this python cannot be a zygote.
 *
 * Fork: a uid slot and a cgroup with the spec's limits for the child first
 * (a launcher's pieces), a spawn request with the child's six fds, then the
 * child's "p" on its sync socket: the kernel stamps that message with the
 * sender's pid as we see it (SO_PASSCRED), which is how we find pid 1 of the
 * new sandbox without trusting anything the template says. We check its
 * uid is the slot's, take a pidfd, move it into the cgroup and answer "c";
 * only then does the child drop its privileges and fork the driver. */
#include "zygote.h"

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
#include <unistd.h>

#include <jansson.h>

#include "box_private.h"
#include "launcher.h"
#include "plan.h"
#include "seccomp.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

extern const char cage_zygote_source[];
extern const char cage_zygote_source_end[];

#define ZYGOTE_START_MS 10000 /* the template's python3 loads the driver */
#define ZYGOTE_FORK_MS  10000 /* a fork: namespaces, mounts */
#define HELLO_MAX       (256 * 1024)

/* Protections the unsafe debug build can switch off (CODECAGE_DEBUG_DISABLE
 * naming "zygote-uid": every child shares the template's host uid;
 * "zygote-caps", "zygote-seccomp", "zygote-reseed", "zygote-limits": the
 * children keep their capabilities, install no filter, keep the template's
 * `random` state, leave their user namespace's limits as they were), so
 * the security suite can show what stops its attacks; and "zygote-python":
 * the template answers as a Python that cannot host a zygote does. */
static const char *debug_disable(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        return off ? off : "";
#else
        return "";
#endif
}

struct cage_zygote {
        struct cage_spec spec; /* the children's; only its numbers are read after the start */
        struct id_slot shared; /* zygote-uid (unsafe debug builds): the template's ids */
        struct cage_box *box;  /* the template */
        struct cage_box_proc *proc;
        int ctl;
        pthread_mutex_t lock; /* one spawn request at a time */
        bool dead;
};

/* ---- start ---- */

static json_t *string_array(const char *const *v, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

static json_t *rlimits_json(const struct launch_plan *plan)
{
        struct rlimit_setting set[RLIMITS_MAX];
        size_t n = rlimits_list(plan, set);
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_pack("[i, I, I]", set[i].resource,
                                                   (json_int_t)set[i].cur, (json_int_t)set[i].max));
        return a;
}

static json_t *program_hex(const struct sock_fprog *prog)
{
        size_t len = (size_t)prog->len * sizeof(struct sock_filter);
        const unsigned char *b = (const unsigned char *)prog->filter;
        _cleanup_free_ char *hex = malloc(len * 2 + 1);
        for (size_t i = 0; hex && i < len; i++)
                snprintf(hex + 2 * i, 3, "%02x", b[i]);
        return hex ? json_string(hex) : NULL;
}

/* The two stacked programs of every sandbox (seccomp.h), in install order. */
static json_t *seccomp_hex(struct cage_error *err)
{
        const struct cage_seccomp_filters *f;
        if (cage_seccomp_program(&f, err) < 0)
                return NULL;
        return json_pack("[o, o]", program_hex(&f->syscalls), program_hex(&f->arguments));
}

/* What every child applies, from the same plan a launch builds. */
static char *hello_text(const struct cage_spec *spec, struct cage_error *err)
{
        struct launch_plan plan = {0};
        struct cgroup_host host;
        if (plan_build(&plan, spec, err) < 0 || launch_detect_cgroups(&host, err) < 0) {
                plan_free(&plan);
                return NULL;
        }
        bool rlimit_as = host.backend == CGROUP_BACKEND_NONE || !host.has_memory;
        const char *const *ro, *const *hidden;
        size_t n_ro, n_hidden;
        rootfs_proc_dirs(&ro, &n_ro, &hidden, &n_hidden);
        json_t *hex = seccomp_hex(err);
        json_t *o =
                hex ? json_pack("{s:i, s:i, s:s, s:s, s:o, s:I, s:o, s:o, s:o, s:o, s:s}", "uid",
                                (int)spec->uid, "gid", (int)spec->gid, "workdir", spec->workdir,
                                "scratch_opts", plan.scratch_opts, "rlimits", rlimits_json(&plan),
                                "rlimit_as", (json_int_t)(rlimit_as ? spec->memory_bytes : 0),
                                "proc_masked", string_array(plan.proc_masked, plan.n_proc_masked),
                                "proc_readonly", string_array(ro, n_ro), "proc_hidden",
                                string_array(hidden, n_hidden), "seccomp", hex, "disable",
                                debug_disable())
                    : NULL;
        plan_free(&plan);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!text && hex)
                cage_fail(err, -ENOMEM, "zygote");
        return text;
}

/* Waits for one message on fd (or the end of the zygote process). */
static ssize_t recv_timed(struct cage_zygote *z, int fd, void *buf, size_t size, int timeout_ms)
{
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                              {.fd = cage_box_proc_status_fd(z->proc), .events = POLLIN}};
        uint64_t deadline = clock_mono_ms() + (uint64_t)timeout_ms;
        for (;;) {
                int left = (int)(deadline > clock_mono_ms() ? deadline - clock_mono_ms() : 0);
                int n = poll(p, 2, left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0)
                        return -ETIMEDOUT;
                if (p[0].revents)
                        break;
                return -ESRCH; /* the zygote ended */
        }
        ssize_t got = recv(fd, buf, size, 0);
        return got < 0 ? -errno : got;
}

static int handshake(struct cage_zygote *z, const char *hello, struct cage_error *err)
{
        if (send(z->ctl, hello, strlen(hello), MSG_NOSIGNAL) < 0)
                return cage_fail(err, -errno, "zygote: hello");
        char buf[1024];
        ssize_t n = recv_timed(z, z->ctl, buf, sizeof(buf) - 1, ZYGOTE_START_MS);
        if (n <= 0) {
                int e = cage_box_proc_exec_errno(z->proc);
                if (e)
                        return cage_fail_plain(err, -ENOTSUP,
                                               "zygote: no python3 in this image (%s)",
                                               strerror(e));
                return cage_fail(err, n < 0 ? (int)n : -ESRCH,
                                 "zygote: the template's python3 did not answer");
        }
        buf[n] = '\0';
        json_auto_t *msg = json_loads(buf, 0, NULL);
        const char *op = json_string_value(json_object_get(msg, "op"));
        if (op && strcmp(op, "ready") == 0)
                return 0;
        const char *why = json_string_value(json_object_get(msg, "message"));
        return cage_fail_plain(err, -ENOTSUP, "zygote: this image's python3 cannot host one: %s",
                               why ? why : "no answer");
}

static int spawn_zygote(struct cage_zygote *z, const char *driver, size_t driver_len,
                        struct cage_error *err)
{
        size_t len = (size_t)(cage_zygote_source_end - cage_zygote_source);
        _cleanup_free_ char *source = strndup(cage_zygote_source, len);
        _cleanup_free_ char *drv = strndup(driver, driver_len);
        char *argv[] = {"python3", "-I", "-c", source, drv, NULL};
        int sv[2];
        if (!source || !drv)
                return cage_fail(err, -ENOMEM, "zygote");
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return cage_fail(err, -errno, "zygote: control socket");
        z->ctl = sv[0];
        struct cage_exec ex = {.argv = argv, .timeout_ms = ZYGOTE_START_MS};
        int r = cage_box_spawn(z->box, &ex, sv[1], &z->proc, err);
        close(sv[1]);
        return r;
}

int cage_zygote_start(const struct cage_spec *spec, const char *driver, size_t driver_len,
                      struct cage_zygote **ret, struct cage_error *err)
{
        if (geteuid() != 0)
                return cage_fail_plain(err, -ENOTSUP, "zygote: the server does not run as root");
        if (spec->n_mounts)
                return cage_fail_plain(err, -ENOTSUP, "zygote: not for policies with mounts");
        static char *const argv[] = {"python3", NULL};
        struct cage_spec child = *spec;
        child.argv = argv;
        int r = cage_spec_validate(&child, err);
        if (r < 0)
                return r;
        struct cage_zygote *z = calloc(1, sizeof(*z));
        if (!z)
                return cage_fail(err, -ENOMEM, "zygote");
        z->spec = child;
        z->ctl = -1;
        pthread_mutex_init(&z->lock, NULL);
        /* The template is root in its user namespace (the slot's host id):
         * its exec keeps the capabilities it needs to make namespaces. */
        struct cage_spec tspec = *spec;
        tspec.uid = 0;
        tspec.gid = 0;
        _cleanup_free_ char *hello = hello_text(&child, err);
        r = hello ? box_start_template(&tspec, &z->box, err) : -ENOMEM;
        if (r == 0)
                r = spawn_zygote(z, driver, driver_len, err);
        if (r == 0)
                r = handshake(z, hello, err);
        if (r == 0)
                z->shared = (struct id_slot){.host_uid = cage_box_host_uid(z->box),
                                             .host_gid = cage_box_host_gid(z->box)};
        if (r < 0) {
                cage_zygote_free(z);
                return r;
        }
        *ret = z;
        return 0;
}

/* ---- fork ---- */

enum { C_OUT, C_ERR, C_CHAN, C_SYNC, C_CTL, C_STATUS, C_COUNT };

struct fork_fds {
        int child[C_COUNT]; /* what the zygote hands to the child */
        int out_r, err_r, chan, sync, ctl, status_r;
};

static void fork_fds_close(struct fork_fds *f)
{
        for (int i = 0; i < C_COUNT; i++)
                close_fd(&f->child[i]);
        close_fd(&f->out_r);
        close_fd(&f->err_r);
        close_fd(&f->chan);
        close_fd(&f->sync);
        close_fd(&f->ctl);
        close_fd(&f->status_r);
}

static int pair(int type, int *ours, int *theirs)
{
        int sv[2];
        if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        *ours = sv[0];
        *theirs = sv[1];
        return 0;
}

static int pipe_to_us(int *ours, int *theirs)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        *ours = p[0];
        *theirs = p[1];
        return 0;
}

static int make_fds(struct fork_fds *f, struct cage_error *err)
{
        int one = 1, r;
        if ((r = pipe_to_us(&f->out_r, &f->child[C_OUT])) < 0 ||
            (r = pipe_to_us(&f->err_r, &f->child[C_ERR])) < 0 ||
            (r = pipe_to_us(&f->status_r, &f->child[C_STATUS])) < 0 ||
            (r = pair(SOCK_STREAM, &f->chan, &f->child[C_CHAN])) < 0 ||
            (r = pair(SOCK_SEQPACKET, &f->sync, &f->child[C_SYNC])) < 0 ||
            (r = pair(SOCK_SEQPACKET, &f->ctl, &f->child[C_CTL])) < 0)
                return cage_fail(err, r, "zygote: the child's fds");
        if (setsockopt(f->sync, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0)
                return cage_fail(err, -errno, "zygote: SO_PASSCRED");
        return 0;
}

static int send_spawn(struct cage_zygote *z, const struct id_slot *slot, struct fork_fds *f,
                      struct cage_error *err)
{
        char msg[128];
        int len = snprintf(msg, sizeof(msg),
                           "{\"op\":\"spawn\",\"host_uid\":%u,\"host_gid\":%u,\"shared\":%s}",
                           (unsigned)slot->host_uid, (unsigned)slot->host_gid,
                           slot == &z->shared ? "true" : "false");
        char control[CMSG_SPACE(sizeof(int) * C_COUNT)] = {0};
        struct iovec iov = {.iov_base = msg, .iov_len = (size_t)len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control,
                            .msg_controllen = sizeof(control)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * C_COUNT);
        memcpy(CMSG_DATA(c), f->child, sizeof(int) * C_COUNT);
        pthread_mutex_lock(&z->lock);
        ssize_t n = z->dead ? -1 : sendmsg(z->ctl, &mh, MSG_NOSIGNAL);
        if (n < 0)
                z->dead = true;
        pthread_mutex_unlock(&z->lock);
        for (int i = 0; i < C_COUNT; i++)
                close_fd(&f->child[i]);
        return n < 0 ? cage_fail_plain(err, -ESRCH, "zygote: the template is gone") : 0;
}

/* The child's "p": its pid (as we see it) and uid from the kernel. */
static int wait_placed(struct fork_fds *f, const struct id_slot *slot, pid_t *ret,
                       struct cage_error *err)
{
        char buf[256];
        char control[CMSG_SPACE(sizeof(struct ucred))];
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control,
                            .msg_controllen = sizeof(control)};
        struct pollfd p = {.fd = f->sync, .events = POLLIN};
        int n;
        do
                n = poll(&p, 1, ZYGOTE_FORK_MS);
        while (n < 0 && errno == EINTR);
        if (n == 0)
                return cage_fail(err, -ETIMEDOUT, "zygote: the new sandbox did not get ready");
        ssize_t got = recvmsg(f->sync, &mh, MSG_CMSG_CLOEXEC);
        if (got <= 0)
                return cage_fail_plain(err, -EIO, "zygote: the new sandbox ended while starting");
        buf[got] = '\0';
        if (buf[0] == 'e')
                return cage_fail_plain(err, -EIO, "zygote: sandbox launch step \"%s\" failed",
                                       buf + 1);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (got != 1 || buf[0] != 'p' || !c || c->cmsg_type != SCM_CREDENTIALS)
                return cage_fail_plain(err, -EPROTO, "zygote: unexpected message");
        struct ucred cred;
        memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        if (cred.pid <= 0 || cred.uid != slot->host_uid || cred.gid != slot->host_gid)
                return cage_fail_plain(err, -EPROTO,
                                       "zygote: the new sandbox is not the uid it was given");
        *ret = cred.pid;
        return 0;
}

/* Its pidfd, its cgroup, then "c": it may go on. */
static int place(struct launcher *l, struct fork_fds *f, pid_t pid, struct cage_error *err)
{
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return cage_fail(err, -errno, "zygote: pidfd of the new sandbox");
        l->pid = pid;
        l->pidfd = fd;
        if (l->cg) {
                int r = cage_cgroup_attach(l->cg, pid, err);
                if (r < 0)
                        return r;
        }
        if (send(f->sync, "c", 1, MSG_NOSIGNAL) != 1)
                return cage_fail(err, -errno, "zygote: waking the new sandbox");
        close_fd(&f->sync);
        return 0;
}

int cage_zygote_fork(struct cage_zygote *z, struct cage_box **box, struct cage_box_proc **driver,
                     int *chan, struct cage_error *err)
{
        struct launcher l;
        struct fork_fds f = {
                .out_r = -1, .err_r = -1, .chan = -1, .sync = -1, .ctl = -1, .status_r = -1};
        for (int i = 0; i < C_COUNT; i++)
                f.child[i] = -1;
        launcher_init(&l, &z->spec);
        pid_t pid = 0;
        int r = cage_id_slot_acquire(&l.slot, err);
        if (r == 0)
                r = launch_detect_cgroups(&l.cg_host, err);
        /* The group is made (and its limits written) while the child starts. */
        if (r == 0)
                r = launcher_make_cgroup(&l, err);
        if (r == 0)
                r = make_fds(&f, err);
        const struct id_slot *ids = strstr(debug_disable(), "zygote-uid") ? &z->shared : &l.slot;
        if (r == 0)
                r = send_spawn(z, ids, &f, err);
        if (r == 0)
                r = wait_placed(&f, ids, &pid, err);
        if (r == 0)
                r = place(&l, &f, pid, err);
        if (r < 0) {
                launcher_release(&l);
                fork_fds_close(&f);
                return r;
        }
        struct cage_box *b = box_adopt(&z->spec, &l, f.ctl);
        f.ctl = -1;
        struct cage_box_proc *p = b ? box_proc_adopt(b, f.out_r, f.err_r, f.status_r) : NULL;
        f.out_r = f.err_r = f.status_r = -1;
        if (!p) {
                cage_box_destroy(b);
                fork_fds_close(&f);
                return cage_fail(err, -ENOMEM, "zygote");
        }
        *box = b;
        *driver = p;
        *chan = TAKE_FD(f.chan);
        fork_fds_close(&f);
        return 0;
}

/* ---- queries, free ---- */

struct cage_box *cage_zygote_template(struct cage_zygote *z)
{
        return z->box;
}

bool cage_zygote_alive(struct cage_zygote *z)
{
        pthread_mutex_lock(&z->lock);
        bool alive = !z->dead && !cage_box_proc_exited(z->proc, NULL);
        pthread_mutex_unlock(&z->lock);
        return alive;
}

struct cage_zygote *cage_zygote_free(struct cage_zygote *z)
{
        if (!z)
                return NULL;
        close_fd(&z->ctl);
        cage_box_proc_free(z->proc);
        cage_box_destroy(z->box);
        pthread_mutex_destroy(&z->lock);
        free(z);
        return NULL;
}
