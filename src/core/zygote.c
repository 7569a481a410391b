/* Zygotes; see zygote.h for the model and runtime/python/codecage_zygote.py
 * for the template's side.
 *
 * Start: a template box (box_start_template), then the zygote as its one
 * exec (`python3 -I -c <zygote> <driver>`, fd 3 our SOCK_SEQPACKET control
 * socket), a hello with what every child applies (ids, /proc masks, the
 * seccomp program), and
 * its answer: ready, or why this python cannot be a zygote.
 *
 * Fork: a uid slot and a cgroup with the spec's limits for the child first
 * (a launcher's pieces), a spawn request with what the child applies of
 * its own spec (environment, rlimits, scratch size, working directory) and
 * its fds (stdio, session channel, sync, init's control socket and status
 * pipe, the codecage-init image, its workspace as a detached mount), then the
 * child's "p" on its sync socket, its first act: the kernel stamps that
 * message with the sender's pid as we see it (SO_PASSCRED), which is how we
 * find pid 1 of the new sandbox without trusting anything the template
 * says. We take a pidfd, move it into the cgroup and answer "c"; only then
 * does the child take its ids, make its network namespace and mounts
 * (charged to its own group), drop its privileges and say "r", which we
 * accept only from that pid with the slot's uid and gid. Then it forks the
 * driver. */
#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "box_private.h"
#include "idmap.h"
#include "init_image.h"
#include "launcher.h"
#include "plan.h"
#include "seccomp.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"
#include "zygote_proto.h"

extern const char cage_zygote_source[];
extern const char cage_zygote_source_end[];

#define ZYGOTE_START_MS 10000 /* the template's python3 loads the driver */
#define ZYGOTE_FORK_MS  10000 /* a fork: namespaces, mounts */
/* What runtime/python/codecage_zygote.py reads at most (ENV_MAX). */
#define ZYGOTE_ENV_MAX (1024 * 1024)

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
        struct cage_spec spec; /* the children's, with its strings in `strings` */
        char *strings;
        struct id_slot shared; /* zygote-uid (unsafe debug builds): the template's ids */
        struct cage_box *box;  /* the template */
        struct cage_box_proc *proc;
        int ctl;
        pthread_mutex_t lock; /* one spawn request at a time */
        bool dead;
        /* The owner's hold, and one per live sandbox it forked: those live in
         * the template's pid namespace and would end with it. */
        unsigned refs;
};

/* ---- start ---- */

/* The children's spec outlives the caller's strings (forks without a spec
 * of their own build their plan from it): its image, working directory,
 * environment and debug step are copied. */
static int keep_spec_strings(struct cage_zygote *z)
{
        struct cage_spec *s = &z->spec;
        const char *one[] = {s->image, s->workdir, s->debug_fail_step};
        size_t bytes = 0;
        for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
                bytes += one[i] ? strlen(one[i]) + 1 : 0;
        for (size_t i = 0; i < s->n_env; i++)
                bytes += strlen(s->env[i]) + 1;
        char *pos = z->strings = malloc(bytes ? bytes : 1);
        if (!pos)
                return -ENOMEM;
        s->image = plan_copy_str(&pos, s->image);
        s->workdir = plan_copy_str(&pos, s->workdir);
        s->debug_fail_step = plan_copy_str(&pos, s->debug_fail_step);
        for (size_t i = 0; i < s->n_env; i++)
                s->env[i] = plan_copy_str(&pos, s->env[i]);
        return 0;
}

static json_t *string_array(const char *const *v, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(v[i]));
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
        if (plan_build(&plan, spec, err) < 0) {
                plan_free(&plan);
                return NULL;
        }
        const char *const *ro, *const *hidden;
        size_t n_ro, n_hidden;
        rootfs_proc_dirs(&ro, &n_ro, &hidden, &n_hidden);
        json_t *hex = seccomp_hex(err);
        json_t *o = hex ? json_pack("{s:i, s:i, s:o, s:o, s:o, s:o, s:s}", "uid", (int)spec->uid,
                                    "gid", (int)spec->gid, "proc_masked",
                                    string_array(plan.proc_masked, plan.n_proc_masked),
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

/* The hello carries the spawn object (runtime/zygote_child.c) the
 * template loads and the driver's bytecode, each a sealed memfd. */
static int send_hello(struct cage_zygote *z, const char *hello,
                      const struct cage_zygote_driver *driver, struct cage_error *err)
{
        int so = cage_zygote_child_image_fd(err);
        if (so < 0)
                return so;
        _cleanup_close_ int pyc =
                cage_sealed_memfd("codecage-driver-pyc", driver->pyc, driver->pyc_len, 0444, err);
        if (pyc < 0)
                return pyc;
        int fds[2] = {so, pyc};
        ssize_t sent = fd_send(z->ctl, hello, strlen(hello), fds, 2);
        return sent < 0 ? cage_fail(err, (int)sent, "zygote: hello") : 0;
}

static int handshake(struct cage_zygote *z, const char *hello,
                     const struct cage_zygote_driver *driver, struct cage_error *err)
{
        int r = send_hello(z, hello, driver, err);
        if (r < 0)
                return r;
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

static int spawn_zygote(struct cage_zygote *z, const struct cage_zygote_driver *driver,
                        struct cage_error *err)
{
        size_t len = (size_t)(cage_zygote_source_end - cage_zygote_source);
        _cleanup_free_ char *source = strndup(cage_zygote_source, len);
        _cleanup_free_ char *drv = strndup(driver->source, driver->source_len);
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

int cage_zygote_start(const struct cage_spec *spec, const struct cage_zygote_driver *driver,
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
        z->refs = 1;
        pthread_mutex_init(&z->lock, NULL);
        if (keep_spec_strings(z) < 0) {
                cage_zygote_free(z);
                return cage_fail(err, -ENOMEM, "zygote");
        }
        /* The template is root in its user namespace (the slot's host id):
         * its exec keeps the capabilities it needs to make namespaces. */
        struct cage_spec tspec = *spec;
        tspec.uid = 0;
        tspec.gid = 0;
        _cleanup_free_ char *hello = hello_text(&child, err);
        r = hello ? box_start_template(&tspec, &z->box, err) : -ENOMEM;
        if (r == 0)
                r = spawn_zygote(z, driver, err);
        if (r == 0)
                r = handshake(z, hello, driver, err);
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

/* The child's fds: zygote_proto.h's, then the workspace when it has one. */
enum { C_WORKSPACE = ZYGOTE_CHILD_FDS, C_COUNT };
_Static_assert(C_COUNT <= FD_SEND_MAX, "a spawn request's fds go in one fd_send()");

struct fork_fds {
        int child[C_COUNT]; /* what the zygote hands to the child (C_WORKSPACE: -1 without) */
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
        int one = 1, r, image = cage_init_image_fd(err);
        if (image < 0)
                return image;
        if ((f->child[ZYGOTE_FD_INIT] = fcntl(image, F_DUPFD_CLOEXEC, 3)) < 0)
                return cage_fail(err, -errno, "zygote: the init image");
        if ((r = pipe_to_us(&f->out_r, &f->child[ZYGOTE_FD_STDOUT])) < 0 ||
            (r = pipe_to_us(&f->err_r, &f->child[ZYGOTE_FD_STDERR])) < 0 ||
            (r = pipe_to_us(&f->status_r, &f->child[ZYGOTE_FD_STATUS])) < 0 ||
            (r = pair(SOCK_STREAM, &f->chan, &f->child[ZYGOTE_FD_CHANNEL])) < 0 ||
            (r = pair(SOCK_SEQPACKET, &f->sync, &f->child[ZYGOTE_FD_SYNC])) < 0 ||
            (r = pair(SOCK_SEQPACKET, &f->ctl, &f->child[ZYGOTE_FD_CTL])) < 0)
                return cage_fail(err, r, "zygote: the child's fds");
        if (setsockopt(f->sync, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0)
                return cage_fail(err, -errno, "zygote: SO_PASSCRED");
        return 0;
}

/* The sandbox's environment ("K=V\0" each) in a sealed memfd: the template
 * hands the fd to the child unread, so no sandbox's variables or secrets
 * ever enter the memory later children start as a copy of. */
static int env_memfd(char *const *envp, struct fork_fds *f, struct cage_error *err)
{
        int fd = memfd_create("codecage-env", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return cage_fail(err, -errno, "zygote: the environment");
        f->child[ZYGOTE_FD_ENV] = fd;
        size_t total = 0;
        for (size_t i = 0; envp[i]; i++) {
                size_t n = strlen(envp[i]) + 1;
                if ((total += n) > ZYGOTE_ENV_MAX)
                        return cage_fail_plain(err, -E2BIG, "zygote: the environment is too large");
                if (write_all(fd, envp[i], n) < 0)
                        return cage_fail(err, -errno, "zygote: the environment");
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return cage_fail(err, -errno, "zygote: sealing the environment");
        return 0;
}

/* The sandbox's own workspace, as every launch takes it (launcher.c): a
 * detached tree idmapped to its uid slot, else a plain bind. */
static int open_workspace(const struct cage_spec *spec, const struct id_slot *slot,
                          struct fork_fds *f, struct cage_error *err)
{
        if (!spec->n_mounts)
                return 0;
        const struct cage_mount *m = &spec->mounts[0];
        int fd = idmap_mount_open(m->source, slot->host_uid, slot->host_gid, m->writable, NULL);
        if (fd < 0)
                fd = bind_tree_open(m->source, m->writable, err);
        if (fd < 0)
                return fd;
        f->child[C_WORKSPACE] = fd;
        return 0;
}

/* What this child applies of its own spec: from the same plan a launch
 * builds (rlimits, scratch size, working directory; its environment goes in
 * its own memfd). */
static int spawn_request(const struct launch_plan *plan, const struct launcher *l,
                         const struct id_slot *ids, bool shared, struct zygote_spawn_request *req,
                         struct cage_error *err)
{
        const struct cage_spec *spec = plan->spec;
        bool rlimit_as = l->cg_host.backend == CGROUP_BACKEND_NONE || !l->cg_host.has_memory;
        struct rlimit_setting set[RLIMITS_MAX];
        size_t n = rlimits_list(plan, set);
        _Static_assert(RLIMITS_MAX <= ZYGOTE_RLIMITS_MAX, "every rlimit fits a spawn request");
        _Static_assert(sizeof(plan->scratch_opts) <= ZYGOTE_SCRATCH_MAX, "so do the options");
        if (strlen(spec->workdir) >= sizeof(req->workdir))
                return cage_fail_plain(err, -E2BIG, "zygote: the working directory is too long");
        *req = (struct zygote_spawn_request){
                .magic = ZYGOTE_SPAWN_MAGIC,
                .host_uid = ids->host_uid,
                .host_gid = ids->host_gid,
                .shared = shared,
                .workspace = spec->n_mounts > 0,
                .n_rlimits = (uint32_t)n,
                .rlimit_as = rlimit_as ? spec->memory_bytes : 0,
        };
        for (size_t i = 0; i < n; i++)
                req->rlimits[i] = (struct zygote_rlimit){.resource = (uint32_t)set[i].resource,
                                                         .soft = set[i].cur,
                                                         .hard = set[i].max};
        snprintf(req->scratch_opts, sizeof(req->scratch_opts), "%s", plan->scratch_opts);
        snprintf(req->workdir, sizeof(req->workdir), "%s", spec->workdir);
        return 0;
}

static int send_spawn(struct cage_zygote *z, const struct zygote_spawn_request *req,
                      struct fork_fds *f, struct cage_error *err)
{
        int fds[C_COUNT];
        size_t n = 0;
        for (int i = 0; i < C_COUNT; i++)
                if (f->child[i] >= 0)
                        fds[n++] = f->child[i];
        pthread_mutex_lock(&z->lock);
        ssize_t sent = z->dead ? -ESRCH : fd_send(z->ctl, req, sizeof(*req), fds, n);
        bool too_large = sent == -EMSGSIZE || sent == -ENOBUFS;
        if (sent < 0 && !too_large)
                z->dead = true;
        pthread_mutex_unlock(&z->lock);
        for (int i = 0; i < C_COUNT; i++)
                close_fd(&f->child[i]);
        if (too_large)
                return cage_fail(err, -E2BIG, "zygote: the spawn request");
        return sent < 0 ? cage_fail_plain(err, -ESRCH, "zygote: the template is gone") : 0;
}

/* One message of the child on its sync socket with its credentials from
 * the kernel (its pid as we see it, its ids); a failed launch step ("e"
 * and its name) fails here. */
static int recv_sync(struct fork_fds *f, char *buf, size_t size, struct ucred *cred,
                     struct cage_error *err)
{
        char control[CMSG_SPACE(sizeof(struct ucred))];
        struct iovec iov = {.iov_base = buf, .iov_len = size - 1};
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
        if (got != 1 || !c || c->cmsg_type != SCM_CREDENTIALS)
                return cage_fail_plain(err, -EPROTO, "zygote: unexpected message");
        memcpy(cred, CMSG_DATA(c), sizeof(*cred));
        return 0;
}

/* The child's sync message `kind`, sent as ids by want_pid (any pid when
 * 0); its pid in *ret (when ret). "p" comes before the child has its own ids (it has
 * the template's) and gives us its pid; "r" says every step of its launch
 * is done, and must come from the process we placed, as the ids it was
 * given. */
static int expect_sync(struct fork_fds *f, char kind, pid_t want_pid, const struct id_slot *ids,
                       pid_t *ret, struct cage_error *err)
{
        char buf[256];
        struct ucred cred;
        int r = recv_sync(f, buf, sizeof(buf), &cred, err);
        if (r < 0)
                return r;
        bool sender = want_pid ? cred.pid == want_pid : cred.pid > 0;
        if (buf[0] != kind || !sender || cred.uid != ids->host_uid || cred.gid != ids->host_gid)
                return cage_fail_plain(err, -EPROTO,
                                       "zygote: \"%c\" from pid %d uid %u is not what the new "
                                       "sandbox was to send",
                                       kind, (int)cred.pid, (unsigned)cred.uid);
        if (ret)
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
        return 0;
}

/* The spec a child of z may have: the template's ids, and no mount but its
 * workspace. */
static int check_child_spec(const struct cage_zygote *z, struct cage_spec *child,
                            struct cage_error *err)
{
        static char *const argv[] = {"python3", NULL};
        child->argv = argv;
        if (child->uid != z->spec.uid || child->gid != z->spec.gid)
                return cage_fail_plain(err, -ENOTSUP, "zygote: not for this sandbox's user");
        if (child->n_mounts > 1 ||
            (child->n_mounts == 1 && strcmp(child->mounts[0].target, "/workspace") != 0))
                return cage_fail_plain(err, -ENOTSUP, "zygote: not for sandboxes with mounts");
        if (child->debug_disable)
                return cage_fail_plain(err, -ENOTSUP, "zygote: not with protections switched off");
        return cage_spec_validate(child, err);
}

/* The slot, the group with its limits (written while the child starts),
 * the fds and the request. */
static int spawn_child(struct cage_zygote *z, struct launcher *l, struct launch_plan *plan,
                       struct fork_fds *f, pid_t *pid, struct cage_error *err)
{
        const struct id_slot *ids = strstr(debug_disable(), "zygote-uid") ? &z->shared : &l->slot;
        struct zygote_spawn_request req;
        int r = cage_id_slot_acquire(&l->slot, err);
        if (r == 0)
                r = launch_detect_cgroups(&l->cg_host, err);
        if (r == 0)
                r = plan_build_process(plan, l->spec, err);
        if (r == 0)
                r = spawn_request(plan, l, ids, ids == &z->shared, &req, err);
        if (r == 0)
                r = launcher_make_cgroup(l, err);
        if (r == 0)
                r = make_fds(f, err);
        if (r == 0)
                r = env_memfd(plan->envp, f, err);
        if (r == 0)
                r = open_workspace(l->spec, &l->slot, f, err);
        if (r == 0)
                r = send_spawn(z, &req, f, err);
        if (r == 0)
                r = expect_sync(f, 'p', 0, &z->shared, pid, err);
        if (r == 0)
                r = place(l, f, *pid, err);
        if (r == 0)
                r = expect_sync(f, 'r', *pid, ids, NULL, err);
        close_fd(&f->sync);
        return r;
}

int cage_zygote_fork(struct cage_zygote *z, const struct cage_spec *spec, struct cage_box **box,
                     struct cage_box_proc **driver, int *chan, struct cage_error *err)
{
        struct cage_spec child = spec ? *spec : z->spec;
        int r = check_child_spec(z, &child, err);
        if (r < 0)
                return r;
        struct launcher l;
        struct launch_plan plan = {0};
        struct fork_fds f = {
                .out_r = -1, .err_r = -1, .chan = -1, .sync = -1, .ctl = -1, .status_r = -1};
        for (int i = 0; i < C_COUNT; i++)
                f.child[i] = -1;
        launcher_init(&l, &child);
        pid_t pid = 0;
        r = spawn_child(z, &l, &plan, &f, &pid, err);
        if (r < 0) {
                plan_free(&plan);
                launcher_release(&l);
                fork_fds_close(&f);
                return r;
        }
        struct cage_box *b = box_adopt(&child, &l, f.ctl, plan.envp);
        f.ctl = -1;
        if (b) {
                __atomic_add_fetch(&z->refs, 1, __ATOMIC_RELAXED);
                b->zygote = z;
        }
        plan_free(&plan);
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

unsigned cage_zygote_sandboxes(struct cage_zygote *z)
{
        return __atomic_load_n(&z->refs, __ATOMIC_ACQUIRE) - 1; /* the caller's hold */
}

static void zygote_destroy(struct cage_zygote *z)
{
        close_fd(&z->ctl);
        cage_box_proc_free(z->proc);
        cage_box_destroy(z->box);
        pthread_mutex_destroy(&z->lock);
        free(z->strings);
        free(z);
}

static void zygote_unref(struct cage_zygote *z)
{
        if (__atomic_sub_fetch(&z->refs, 1, __ATOMIC_ACQ_REL) == 0)
                zygote_destroy(z);
}

void zygote_child_gone(struct cage_zygote *z)
{
        zygote_unref(z);
}

struct cage_zygote *cage_zygote_free(struct cage_zygote *z)
{
        if (!z)
                return NULL;
        pthread_mutex_lock(&z->lock);
        z->dead = true; /* no more forks */
        pthread_mutex_unlock(&z->lock);
        zygote_unref(z);
        return NULL;
}
