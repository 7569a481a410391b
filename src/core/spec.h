/* Spec defaults, ranges and validation. The ranges are public so the CLI
 * and docs can print them; cage_spec_validate() names the field and the
 * allowed range of the first bad value. */
#ifndef CODECAGE_CORE_SPEC_H
#define CODECAGE_CORE_SPEC_H

#include "codecage/codecage.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

#define SPEC_MEMORY_MIN     (16 * MIB)
#define SPEC_MEMORY_MAX     (1024 * GIB)
#define SPEC_CPUS_MIN       0.01
#define SPEC_CPUS_MAX       1024.0
#define SPEC_PIDS_MIN       2u
#define SPEC_PIDS_MAX       1048576u
#define SPEC_DISK_MIN       (1 * MIB)
#define SPEC_DISK_MAX       (1024 * GIB)
#define SPEC_TIMEOUT_MAX_MS (24ULL * 3600 * 1000)
#define SPEC_OUTPUT_MAX_MAX (1 * GIB)
#define SPEC_NOFILE_MIN     16u
#define SPEC_NOFILE_MAX     1048576u

/* The uid/gid the program runs as inside every sandbox. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000

#endif
