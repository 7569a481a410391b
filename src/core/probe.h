/* The real launch, for diagnostics (`codecage doctor`): a sandbox started
 * with every containment step a run takes — the clone into the namespaces,
 * id maps, cgroup, the new root with pivot_root, an idmapped mount (as
 * root), capabilities dropped, seccomp — running `true`, with the first
 * step that failed and its errno. The caller turns (step, errno) into
 * advice; nothing here knows what to advise. */
#ifndef CODECAGE_CORE_PROBE_H
#define CODECAGE_CORE_PROBE_H

#include <stdbool.h>
#include <stdint.h>

struct cage_probe {
        bool ok;
        char step[120];      /* the step that failed: a launch step's name, "clone3", ... */
        int err;             /* its errno (0 when it has none) */
        char message[256];   /* the whole error, in codecage's words */
        bool idmapped_mount; /* the probe's mount was idmapped (root only) */
        const char *limits_backend;
        uint64_t duration_ms;
};

/* Starts the probe sandbox and waits for it (at most timeout_ms). Returns
 * 0 with *ret filled in either way, or -errno when it could not even try. */
int cage_probe_launch(uint64_t timeout_ms, struct cage_probe *ret);

#endif
