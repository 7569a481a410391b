/* Building the launch plan from a validated spec: the image's root entries,
 * the sandbox environment (only what the spec names, over fixed defaults)
 * and the scratch tmpfs options. Runs in the supervisor and may allocate;
 * plan_free() releases what plan_build() allocated. */
#ifndef CODECAGE_CORE_PLAN_H
#define CODECAGE_CORE_PLAN_H

#include <stdint.h>

#include "launch.h"

/* Checks the host paths a spec names (image, mount sources). */
int plan_check_inputs(const struct cage_spec *spec, struct cage_error *err);
int plan_build(struct launch_plan *plan, const struct cage_spec *spec, struct cage_error *err);
/* The part of plan_build() for a process whose root is made elsewhere (a
 * zygote's child): the spec, its environment and scratch size; no root. */
int plan_build_process(struct launch_plan *plan, const struct cage_spec *spec,
                       struct cage_error *err);
void plan_free(struct launch_plan *plan);
/* Copies s (NULL stays NULL) to *pos, which it advances; returns the copy. */
char *plan_copy_str(char **pos, const char *s);

/* [arg_start, arg_end) of /proc/self/stat: this process's argv strings,
 * which /proc/PID/cmdline shows; 0, 0 when unknown. */
void plan_arg_area(uintptr_t *ret_start, uintptr_t *ret_end);

#endif
