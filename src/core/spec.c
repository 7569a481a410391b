/* Spec defaults and validation: the only place that decides whether a
 * struct cage_spec is acceptable. Secure defaults come from DESIGN (512 MiB,
 * 1 cpu, 256 pids, 1 GiB disk, 30 s, 64 KiB output per stream). */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "util/error.h"

void cage_spec_init(struct cage_spec *spec)
{
        memset(spec, 0, sizeof(*spec));
        spec->image = "host";
        spec->workdir = "/workspace";
        spec->uid = SANDBOX_UID;
        spec->gid = SANDBOX_GID;
        spec->memory_bytes = 512 * MIB;
        spec->cpus = 1.0;
        spec->pids = 256;
        spec->disk_bytes = 1024 * MIB;
        spec->timeout_ms = 30 * 1000;
        spec->output_max_bytes = 65536;
        spec->output_stop_bytes = 64 * MIB;
        spec->nofile = 1024;
        spec->stdin_fd = -1;
}

static int check_range_u64(struct cage_error *err, const char *field, uint64_t v, uint64_t lo,
                           uint64_t hi, const char *unit, uint64_t div)
{
        if (v >= lo && v <= hi)
                return 0;
        return cage_fail(err, -EINVAL, "%s: %llu %s is out of range (allowed %llu..%llu %s)", field,
                         (unsigned long long)(v / div), unit, (unsigned long long)(lo / div),
                         (unsigned long long)(hi / div), unit);
}

/* A path is acceptable inside the sandbox when it is absolute, normalised
 * (no "." / ".." / empty components) and of sane length. */
static bool path_is_clean_absolute(const char *p)
{
        if (!p || p[0] != '/' || strlen(p) >= 4096)
                return false;
        for (const char *c = p; *c;) {
                while (*c == '/')
                        c++;
                const char *end = strchrnul(c, '/');
                size_t n = (size_t)(end - c);
                if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                if (n == 0 && *end)
                        return false;
                c = end;
        }
        return strstr(p, "//") == NULL;
}

static const char *const reserved_targets[] = {"/proc", "/dev", "/etc", "/usr", "/sys"};

static bool target_is_reserved(const char *t)
{
        if (strcmp(t, "/") == 0)
                return true;
        for (size_t i = 0; i < sizeof(reserved_targets) / sizeof(reserved_targets[0]); i++) {
                size_t n = strlen(reserved_targets[i]);
                if (strncmp(t, reserved_targets[i], n) == 0 && (t[n] == '\0' || t[n] == '/'))
                        return true;
        }
        return false;
}

static int validate_mounts(const struct cage_spec *spec, struct cage_error *err)
{
        if (spec->n_mounts > CAGE_MOUNTS_MAX)
                return cage_fail(err, -EINVAL, "mounts: %zu entries (allowed at most %d)",
                                 spec->n_mounts, CAGE_MOUNTS_MAX);
        for (size_t i = 0; i < spec->n_mounts; i++) {
                const struct cage_mount *m = &spec->mounts[i];
                if (!path_is_clean_absolute(m->source))
                        return cage_fail(err, -EINVAL,
                                         "mounts[%zu].source: \"%s\" must be a normalised "
                                         "absolute host path",
                                         i, m->source ? m->source : "");
                if (!path_is_clean_absolute(m->target) || target_is_reserved(m->target))
                        return cage_fail(err, -EINVAL,
                                         "mounts[%zu].target: \"%s\" must be a normalised "
                                         "absolute path outside /, /proc, /dev, /etc, /usr, /sys",
                                         i, m->target ? m->target : "");
        }
        return 0;
}

static int validate_env(const struct cage_spec *spec, struct cage_error *err)
{
        if (spec->n_env > CAGE_ENV_MAX)
                return cage_fail(err, -EINVAL, "env: %zu variables (allowed at most %d)",
                                 spec->n_env, CAGE_ENV_MAX);
        for (size_t i = 0; i < spec->n_env; i++) {
                const char *e = spec->env[i];
                const char *eq = e ? strchr(e, '=') : NULL;
                if (!eq || eq == e || strlen(e) > 131072)
                        return cage_fail(err, -EINVAL,
                                         "env[%zu]: \"%.64s\" must be NAME=VALUE with a "
                                         "non-empty NAME (at most 128 KiB)",
                                         i, e ? e : "");
        }
        return 0;
}

static int validate_limits(const struct cage_spec *s, struct cage_error *err)
{
        int r;
        if ((r = check_range_u64(err, "memory_mib", s->memory_bytes, SPEC_MEMORY_MIN,
                                 SPEC_MEMORY_MAX, "MiB", MIB)) < 0)
                return r;
        if (!isfinite(s->cpus) || s->cpus < SPEC_CPUS_MIN || s->cpus > SPEC_CPUS_MAX)
                return cage_fail(err, -EINVAL, "cpus: %g is out of range (allowed %g..%g)", s->cpus,
                                 SPEC_CPUS_MIN, SPEC_CPUS_MAX);
        if ((r = check_range_u64(err, "pids", s->pids, SPEC_PIDS_MIN, SPEC_PIDS_MAX, "", 1)) < 0)
                return r;
        if ((r = check_range_u64(err, "disk_mib", s->disk_bytes, SPEC_DISK_MIN, SPEC_DISK_MAX,
                                 "MiB", MIB)) < 0)
                return r;
        if ((r = check_range_u64(err, "timeout_ms", s->timeout_ms, 1, SPEC_TIMEOUT_MAX_MS, "ms",
                                 1)) < 0)
                return r;
        if (s->cpu_time_ms && (r = check_range_u64(err, "cpu_time_ms", s->cpu_time_ms, 1,
                                                   SPEC_TIMEOUT_MAX_MS, "ms", 1)) < 0)
                return r;
        if (s->output_max_bytes != UINT64_MAX &&
            (r = check_range_u64(err, "output_max_bytes", s->output_max_bytes, 0,
                                 SPEC_OUTPUT_MAX_MAX, "bytes", 1)) < 0)
                return r;
        return check_range_u64(err, "nofile", s->nofile, SPEC_NOFILE_MIN, SPEC_NOFILE_MAX, "", 1);
}

static int validate_debug(const struct cage_spec *s, struct cage_error *err)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        (void)s;
        (void)err;
        return 0;
#else
        if (s->debug_disable || s->debug_fail_step)
                return cage_fail(err, -EINVAL,
                                 "debug_disable: protections can only be switched off in a "
                                 "build made with -Dunsafe_debug=true");
        return 0;
#endif
}

int cage_spec_validate(const struct cage_spec *s, struct cage_error *err)
{
        int r;
        if (!s->argv || !s->argv[0] || !s->argv[0][0])
                return cage_fail(err, -EINVAL, "argv: a program to run is required");
        if (!s->image || (strcmp(s->image, "host") != 0 && !path_is_clean_absolute(s->image)))
                return cage_fail(err, -EINVAL,
                                 "image: \"%s\" must be \"host\" or an absolute directory",
                                 s->image ? s->image : "");
        if (s->uid == UINT32_MAX || s->gid == UINT32_MAX)
                return cage_fail(err, -EINVAL, "user: %u:%u is not a valid uid:gid", s->uid,
                                 s->gid);
        if (!path_is_clean_absolute(s->workdir))
                return cage_fail(err, -EINVAL, "workdir: \"%s\" must be a normalised absolute path",
                                 s->workdir ? s->workdir : "");
        if ((r = validate_limits(s, err)) < 0 || (r = validate_env(s, err)) < 0 ||
            (r = validate_mounts(s, err)) < 0)
                return r;
        return validate_debug(s, err);
}
