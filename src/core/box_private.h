/* The state of a long-lived sandbox, shared by box.c (lifecycle) and
 * box_exec.c (one exec). */
#ifndef CODECAGE_CORE_BOX_PRIVATE_H
#define CODECAGE_CORE_BOX_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "box.h"
#include "launcher.h"

struct cage_zygote;

struct cage_box {
        struct cage_spec spec; /* the launch's, codecage-init as argv; its pointers are
                                * the caller's, valid only while starting */
        struct launcher l;     /* pid 1, its pidfd, cgroup and uid slot */
        int ctl_fd;
        pthread_mutex_t lock; /* ctl sends, exec ids, reaping */
        uint32_t next_exec;
        bool killed;
        bool template; /* a zygote's template: keeps its capabilities (zygote.c) */
        bool adopted;  /* pid 1 is not our child (a zygote's): the pidfd says when it ended */
        char **envp;   /* the sandbox's own environment (plan), owned */
        char *workdir; /* where execs start unless they say (the spec\'s workdir), owned */
        uint64_t memory_bytes, cpu_time_ms; /* the spec's, for verdicts */
        bool oom_counted;                   /* oom_kills was counted (box_exec.c) */
        uint64_t oom_kills;                 /* ... and found this many */
        struct cage_zygote *zygote;         /* the template that forked it (held), or NULL */
        void *attached;                     /* cage_box_attach() */
        void (*release_attached)(void *data);
};

/* The sandbox's cgroup (NULL: none), its directory fds opened again when
 * it was parked (cage_box_park). Every use of box->l.cg goes through it. */
struct cage_cgroup *box_cgroup(struct cage_box *box);
/* A zygote's template: a box like any other, except that its user namespace
 * maps the host's uid slots and that pid 1 and its execs keep their
 * capabilities there, with no seccomp filter (docs/SECURITY.md). */
int box_start_template(const struct cage_spec *spec, struct cage_box **ret, struct cage_error *err);
/* A box for a sandbox a zygote forked: pid 1 (our pidfd of it, not our
 * child; codecage-init), its cgroup and uid slot (moved from l), ctl_fd its
 * init's control socket, envp the environment of its execs (copied). Takes
 * everything, also on failure (NULL). */
struct cage_box *box_adopt(const struct cage_spec *spec, struct launcher *l, int ctl_fd,
                           char *const *envp);
/* A box a zygote forked is gone: its template may end once no other is
 * alive (zygote.c). */
void zygote_child_gone(struct cage_zygote *z);
/* The session driver of such a box, already running: its output pipes and
 * its init's status pipe (box_proto.h records). Takes the fds. */
struct cage_box_proc *box_proc_adopt(struct cage_box *box, int out_r, int err_r, int status_r);

#endif
