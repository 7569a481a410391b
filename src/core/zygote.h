/* Zygotes: sandboxes with a loaded Python session made by fork instead of
 * exec. A template sandbox (box.c, started with box_start_template) runs
 * runtime/python/codecage_zygote.py, an interpreter that has imported the
 * session driver and never runs code it is sent; for each sandbox it forks a
 * process into fresh user, pid, mount, net, ipc and uts namespaces whose
 * sandbox user maps to a host uid slot of its own, with its own mounts
 * (/proc, devpts, scratch tmpfs, its workspace); we put it into its own
 * cgroup with the spec's limits, then it unshares its cgroup namespace, applies the rlimits,
 * drops every capability, sets no_new_privs and installs the same seccomp
 * program as every sandbox, forks the driver and execs codecage-init, pid 1
 * of every long-lived sandbox, before the driver says "ready". What the children
 * of one template share (the address-space layout, the interpreter's hash
 * secret, the modules it loaded) is listed in docs/SECURITY.md.
 *
 * Each sandbox comes back as a box (pid 1 is the child's init, not our
 * child; kill and destroy as any box) with its driver as a spawned exec
 * whose channel is *chan. One template serves forks from any thread. */
#ifndef CODECAGE_CORE_ZYGOTE_H
#define CODECAGE_CORE_ZYGOTE_H

#include <stdbool.h>
#include <stddef.h>

#include "box.h"

struct cage_zygote;

/* The session driver a template loads: its bytecode (a .pyc header and
 * marshal data), which a python3 with the same MAGIC_NUMBER loads, and its
 * source, which any other compiles (its parser's arenas then stay in the
 * template, ~2 MiB every fork copies). Neither NUL-terminated. */
struct cage_zygote_driver {
        const char *source;
        size_t source_len;
        const void *pyc;
        size_t pyc_len;
};

/* Starts a template for sandboxes of spec (validated as for
 * cage_box_start), its interpreter loading driver. -ENOTSUP when this
 * image's python3 cannot host a zygote (the message says why: no ctypes,
 * too old, not root, ...). */
int cage_zygote_start(const struct cage_spec *spec, const struct cage_zygote_driver *driver,
                      struct cage_zygote **ret, struct cage_error *err);
/* One fresh sandbox with its driver running (not yet "ready": the caller
 * reads that from *chan). spec: the sandbox's own limits, environment,
 * working directory and workspace (its one mount, at /workspace), on the
 * template's image and user; NULL: the template's spec. -ENOTSUP when
 * spec is not one the template can make (another user, other mounts),
 * -E2BIG when its environment is over 1 MiB. */
int cage_zygote_fork(struct cage_zygote *z, const struct cage_spec *spec, struct cage_box **box,
                     struct cage_box_proc **driver, int *chan, struct cage_error *err);
/* The template's box (to tie an image lease to its life). */
struct cage_box *cage_zygote_template(struct cage_zygote *z);
/* Whether the template still serves forks. */
bool cage_zygote_alive(struct cage_zygote *z);
/* How many sandboxes it forked are alive (the caller holds z). */
unsigned cage_zygote_sandboxes(struct cage_zygote *z);
/* Drops the caller's hold: no more forks, and the template is killed once
 * no sandbox it forked is alive (they live in its pid namespace, so they
 * end with it: a template that ends by itself takes them along). Accepts
 * NULL. */
struct cage_zygote *cage_zygote_free(struct cage_zygote *z);

#endif
