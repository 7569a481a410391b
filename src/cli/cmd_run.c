/* `codecage run [options] -- CMD ARGS...`: one command in a fresh sandbox.
 * Without --json it behaves like the program (its output, its exit code,
 * 128+N for signal N, and the documented codes of cli.h for timeout, OOM,
 * output limit and codecage's own failures). With --json it prints the
 * result contract. All options live in one table, which also makes --help. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/output.h"
#include "core/reaper.h"
#include "core/spec.h"
#include "run.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

enum run_opt {
        OPT_IMAGE = 1000,
        OPT_RO,
        OPT_RW,
        OPT_ENV,
        OPT_ENV_PASS,
        OPT_MEMORY,
        OPT_CPUS,
        OPT_PIDS,
        OPT_DISK,
        OPT_TIMEOUT,
        OPT_CPU_TIME,
        OPT_OUTPUT_MAX,
        OPT_OUTPUT_STOP,
        OPT_NOFILE,
        OPT_WORKDIR,
        OPT_USER,
        OPT_CONFIG,
        OPT_STDIN,
        OPT_JSON,
        OPT_DEBUG_DISABLE,
        OPT_DEBUG_FAIL_STEP,
        OPT_HELP,
};

static const struct run_option {
        const char *name;
        enum run_opt id;
        const char *arg; /* NULL: a flag */
        const char *help;
} run_options[] = {
        {"image", OPT_IMAGE, "host|DIR|REF",
         "root filesystem: the host's userland (default), a rootfs directory, or an OCI image "
         "(python:3.12-slim, ghcr.io/o/r:tag), pulled into the store when missing"},
        {"config", OPT_CONFIG, "FILE",
         "the server config whose data_dir holds the image store and whose `images` section "
         "applies (default: built-in, /var/lib/codecage)"},
        {"ro", OPT_RO, "SRC[:DST]", "bind host path SRC read-only at DST (default: same path)"},
        {"rw", OPT_RW, "SRC[:DST]", "bind host path SRC read-write at DST"},
        {"env", OPT_ENV, "K=V", "set an environment variable (the environment starts empty)"},
        {"env-pass", OPT_ENV_PASS, "NAME", "pass NAME from codecage's own environment"},
        {"memory", OPT_MEMORY, "MIB",
         "memory limit, tmpfs pages included (16..1048576, default 512)"},
        {"cpus", OPT_CPUS, "N", "CPU bandwidth, fractional allowed (0.01..1024, default 1)"},
        {"pids", OPT_PIDS, "N", "processes and threads (2..1048576, default 256)"},
        {"disk", OPT_DISK, "MIB",
         "size of /workspace + /tmp + /dev/shm (1..1048576, default 1024)"},
        {"timeout", OPT_TIMEOUT, "S", "wall-clock limit in seconds (default 30)"},
        {"cpu-time", OPT_CPU_TIME, "S",
         "CPU-time limit of the whole tree in seconds (default none)"},
        {"output-max", OPT_OUTPUT_MAX, "BYTES",
         "bytes kept per stream, head and tail (default: all; 65536 with --json)"},
        {"output-stop", OPT_OUTPUT_STOP, "BYTES",
         "stop the run after this much output of both streams (default 64 MiB; 0: never)"},
        {"nofile", OPT_NOFILE, "N", "open files per process (16..1048576, default 1024)"},
        {"workdir", OPT_WORKDIR, "DIR", "working directory inside (default /workspace)"},
        {"user", OPT_USER, "UID[:GID]",
         "the program's ids inside (default 1000:1000); mapped to an unprivileged host id"},
        {"stdin", OPT_STDIN, "FILE|-",
         "standard input: a file, or - for codecage's own (default /dev/null)"},
        {"json", OPT_JSON, NULL,
         "print the result contract as JSON instead of the program's output"},
#ifdef CODECAGE_UNSAFE_DEBUG
        {"debug-disable", OPT_DEBUG_DISABLE, "LIST",
         "UNSAFE test build only: switch protections off"},
        {"debug-fail-step", OPT_DEBUG_FAIL_STEP, "STEP",
         "UNSAFE test build only: make a launch step fail"},
#endif
        {"help", OPT_HELP, NULL, "show this help"},
};

#define N_RUN_OPTIONS (sizeof(run_options) / sizeof(run_options[0]))

/* A program that floods its output is stopped there, terminal or not (an
 * endless stream fills the caller's disk or scrollback); --output-stop 0
 * lifts it. */
#define DEFAULT_OUTPUT_STOP (64 * MIB)

static void usage(FILE *f)
{
        fprintf(f, "usage: codecage run [options] -- CMD [ARGS...]\n\noptions:\n");
        for (size_t i = 0; i < N_RUN_OPTIONS; i++) {
                char left[48];
                snprintf(left, sizeof(left), "--%s%s%s", run_options[i].name,
                         run_options[i].arg ? " " : "",
                         run_options[i].arg ? run_options[i].arg : "");
                fprintf(f, "  %-26s %s\n", left, run_options[i].help);
        }
        fprintf(f,
                "\nexit status: the program's, 128+N if killed by signal N, %d timeout, %d out of "
                "memory,\n%d output limit, %d cancelled, %d codecage failed, %d cannot execute, %d "
                "not found.\nWith --json: 0 whenever a result is printed.\n",
                EXIT_TIMEOUT, EXIT_OOM, EXIT_OUTPUT_LIMIT, EXIT_CANCELLED, EXIT_CODECAGE_FAILED,
                EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND);
}

static int add_env(struct run_args *a, const char *kv, struct cage_error *err)
{
        if (a->spec.n_env >= CAGE_ENV_MAX)
                return cage_fail(err, -EINVAL, "--env: at most %d variables", CAGE_ENV_MAX);
        a->spec.env[a->spec.n_env++] = kv;
        return 0;
}

static int add_env_pass(struct run_args *a, const char *name, struct cage_error *err)
{
        const char *v = getenv(name);
        if (!name[0] || strchr(name, '='))
                return cage_fail(err, -EINVAL, "--env-pass: \"%s\" is not a variable name", name);
        if (!v)
                return cage_fail(err, -EINVAL,
                                 "--env-pass: %s is not set in codecage's environment", name);
        char *kv;
        if (asprintf(&kv, "%s=%s", name, v) < 0)
                return cage_fail(err, -ENOMEM, "--env-pass");
        a->env_pass_storage[a->n_env_pass++] = kv;
        return add_env(a, kv, err);
}

static int add_mount(struct run_args *a, const char *opt, char *val, bool rw,
                     struct cage_error *err)
{
        if (a->spec.n_mounts >= CAGE_MOUNTS_MAX)
                return cage_fail(err, -EINVAL, "%s: at most %d mounts", opt, CAGE_MOUNTS_MAX);
        return parse_mount(opt, val, rw, &a->spec.mounts[a->spec.n_mounts++], err);
}

static int open_stdin(struct run_args *a, const char *val, struct cage_error *err)
{
        if (strcmp(val, "-") == 0) {
                a->spec.stdin_fd = 0;
                return 0;
        }
        int fd = open(val, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return cage_fail(err, -errno, "--stdin: cannot open \"%s\"", val);
        a->stdin_fd = a->spec.stdin_fd = fd;
        return 0;
}

static int apply_limit_option(struct run_args *a, int id, char *v, struct cage_error *err)
{
        struct cage_spec *s = &a->spec;
        uint64_t n;
        int r = 0;
        switch (id) {
        case OPT_MEMORY:
                r = parse_u64_range("--memory", v, SPEC_MEMORY_MIN / MIB, SPEC_MEMORY_MAX / MIB, &n,
                                    err);
                s->memory_bytes = n * MIB;
                return r;
        case OPT_CPUS:
                return parse_double_range("--cpus", v, SPEC_CPUS_MIN, SPEC_CPUS_MAX, &s->cpus, err);
        case OPT_PIDS:
                r = parse_u64_range("--pids", v, SPEC_PIDS_MIN, SPEC_PIDS_MAX, &n, err);
                s->pids = (uint32_t)n;
                return r;
        case OPT_DISK:
                r = parse_u64_range("--disk", v, SPEC_DISK_MIN / MIB, SPEC_DISK_MAX / MIB, &n, err);
                s->disk_bytes = n * MIB;
                return r;
        case OPT_TIMEOUT:
                return parse_seconds_ms("--timeout", v, SPEC_TIMEOUT_MAX_MS, &s->timeout_ms, err);
        case OPT_CPU_TIME:
                return parse_seconds_ms("--cpu-time", v, SPEC_TIMEOUT_MAX_MS, &s->cpu_time_ms, err);
        case OPT_OUTPUT_MAX:
                a->output_max_set = true;
                return parse_u64_range("--output-max", v, 0, SPEC_OUTPUT_MAX_MAX,
                                       &s->output_max_bytes, err);
        case OPT_OUTPUT_STOP:
                a->output_stop_set = true;
                return parse_u64_range("--output-stop", v, 0, UINT64_MAX / 2, &s->output_stop_bytes,
                                       err);
        case OPT_NOFILE:
                r = parse_u64_range("--nofile", v, SPEC_NOFILE_MIN, SPEC_NOFILE_MAX, &n, err);
                s->nofile = (uint32_t)n;
                return r;
        }
        return cage_fail(err, -EINVAL, "unknown option");
}

/* UID or UID:GID (GID defaults to UID), numeric. */
static int parse_user(const char *v, uint32_t *uid, uint32_t *gid, struct cage_error *err)
{
        uint64_t u, g;
        char copy[32];
        if (snprintf(copy, sizeof(copy), "%s", v) >= (int)sizeof(copy))
                return cage_fail(err, -EINVAL, "--user: \"%.40s\" is not UID[:GID]", v);
        char *colon = strchr(copy, ':');
        if (colon)
                *colon = '\0';
        int r = parse_u64_range("--user", copy, 0, UINT32_MAX - 1, &u, err);
        if (r == 0 && colon)
                r = parse_u64_range("--user", colon + 1, 0, UINT32_MAX - 1, &g, err);
        if (r < 0)
                return r;
        *uid = (uint32_t)u;
        *gid = (uint32_t)(colon ? g : u);
        return 0;
}

static int apply_option(struct run_args *a, int id, char *v, struct cage_error *err)
{
        switch (id) {
        case OPT_IMAGE:
                a->spec.image = v;
                return 0;
        case OPT_RO:
                return add_mount(a, "--ro", v, false, err);
        case OPT_RW:
                return add_mount(a, "--rw", v, true, err);
        case OPT_ENV:
                return add_env(a, v, err);
        case OPT_ENV_PASS:
                return add_env_pass(a, v, err);
        case OPT_WORKDIR:
                a->spec.workdir = v;
                a->workdir_set = true;
                return 0;
        case OPT_USER:
                a->user_set = true;
                return parse_user(v, &a->spec.uid, &a->spec.gid, err);
        case OPT_CONFIG:
                a->config = v;
                return 0;
        case OPT_STDIN:
                return open_stdin(a, v, err);
        case OPT_JSON:
                a->json = true;
                return 0;
        case OPT_DEBUG_DISABLE:
                return parse_debug_disable(v, &a->spec.debug_disable, err);
        case OPT_DEBUG_FAIL_STEP:
                a->spec.debug_fail_step = v;
                return 0;
        }
        return apply_limit_option(a, id, v, err);
}

static int parse_args(struct run_args *a, int argc, char **argv, struct cage_error *err)
{
        struct option longopts[N_RUN_OPTIONS + 1];
        for (size_t i = 0; i < N_RUN_OPTIONS; i++)
                longopts[i] = (struct option){run_options[i].name,
                                              run_options[i].arg ? required_argument : no_argument,
                                              NULL, (int)run_options[i].id};
        longopts[N_RUN_OPTIONS] = (struct option){0};
        optind = 1;
        opterr = 0;
        int c, r;
        while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
                if (c == OPT_HELP) {
                        usage(stdout);
                        exit(0);
                }
                if (c == '?' || c == ':')
                        return cage_fail(
                                err, -EINVAL,
                                "unknown or incomplete option \"%s\" (see codecage run --help)",
                                argv[optind - 1]);
                if ((r = apply_option(a, c, optarg, err)) < 0)
                        return r;
        }
        if (optind >= argc)
                return cage_fail(err, -EINVAL,
                                 "no command given: codecage run [options] -- CMD [ARGS...]");
        a->spec.argv = argv + optind;
        if (!a->output_max_set)
                a->spec.output_max_bytes = a->json ? 65536 : UINT64_MAX;
        if (!a->output_stop_set)
                a->spec.output_stop_bytes = DEFAULT_OUTPUT_STOP;
        return 0;
}

/* Plain mode, live: raw bytes to our own stdout/stderr, with terminal
 * control sequences neutralised when that is a terminal. */
struct live_output {
        bool is_tty[3];
        struct text_sanitizer san[3];
};

static int write_live(void *ctx, int stream, const void *buf, size_t len)
{
        struct live_output *lo = ctx;
        if (!lo->is_tty[stream]) {
                (void)write_all(stream, buf, len);
                return 0;
        }
        const char *p = buf;
        while (len > 0) {
                char out[3 * (4096 + 4)];
                size_t chunk = len > 4096 ? 4096 : len;
                size_t n = text_sanitizer_feed(&lo->san[stream], p, chunk, out, false);
                (void)write_all(stream, out, n);
                p += chunk;
                len -= chunk;
        }
        return 0;
}

static int exit_code_for(const struct cage_result *res)
{
        switch (res->status) {
        case CAGE_STATUS_OK:
        case CAGE_STATUS_ERROR:
                return res->signal ? 128 + res->signal : res->exit_code;
        case CAGE_STATUS_TIMEOUT:
                return EXIT_TIMEOUT;
        case CAGE_STATUS_OOM:
                return EXIT_OOM;
        case CAGE_STATUS_OUTPUT_LIMIT:
                return EXIT_OUTPUT_LIMIT;
        case CAGE_STATUS_CANCELLED:
                return EXIT_CANCELLED;
        case CAGE_STATUS_INTERNAL_ERROR:
                break;
        }
        return EXIT_CODECAGE_FAILED;
}

static int run_plain(struct run_args *a, struct cage_result *res, struct cage_error *err)
{
        struct live_output lo = {0};
        bool capped = a->output_max_set;
        for (int i = 1; i <= 2; i++)
                lo.is_tty[i] = isatty(i);
        struct cage_run_options opts = {.on_output = capped ? NULL : write_live,
                                        .on_output_ctx = &lo,
                                        .keep_output = capped,
                                        .cancel_fd = -1};
        int r = cage_run(&a->spec, &opts, res, err);
        if (r < 0)
                return r;
        if (capped) {
                write_all(1, res->out.data, res->out.len);
                write_all(2, res->err.data, res->err.len);
        }
        if (res->status != CAGE_STATUS_OK && res->status != CAGE_STATUS_ERROR)
                fprintf(stderr, "codecage: %s: %s\n", cage_status_to_string(res->status),
                        res->reason);
        else if (res->signal)
                fprintf(stderr, "codecage: %s\n", res->reason);
        if (res->limits_backend && strcmp(res->limits_backend, "none") == 0)
                fprintf(stderr, "codecage: warning: no usable cgroup backend; memory, cpu and pids "
                                "limits fall back to rlimits (run `codecage doctor`)\n");
        return 0;
}

static int run_json(struct run_args *a, struct cage_result *res, struct cage_error *err)
{
        int r = cage_run(&a->spec, NULL, res, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *json = cage_result_to_json(res);
        if (!json)
                return cage_fail(err, -ENOMEM, "rendering the result");
        printf("%s\n", json);
        return 0;
}

int cmd_run(int argc, char **argv)
{
        struct run_args a = {.stdin_fd = -1, .argv = argv};
        struct cage_error err = {0};
        struct cage_result res = {0};
        cage_spec_init(&a.spec);
        int r = parse_args(&a, argc, argv, &err);
        if (r == 0)
                r = run_use_image(&a, &err);
        /* Our cgroups go should we be killed. After the image: the lean
         * binary execs the full one for an image, which starts its own.
         * Pulling an image may have left threads: then the reaper execs. */
        if (r == 0)
                (void)launch_reaper_start(a.image == NULL);
        if (r == 0)
                r = a.json ? run_json(&a, &res, &err) : run_plain(&a, &res, &err);
        int code = r < 0 ? EXIT_CODECAGE_FAILED : a.json ? 0 : exit_code_for(&res);
        launch_reaper_dismiss(); /* cage_run removed our groups */
        if (r < 0)
                fprintf(stderr, "codecage run: %s\n", err.message);
        cage_result_free(&res);
        for (size_t i = 0; i < a.n_env_pass; i++)
                free(a.env_pass_storage[i]);
        if (a.stdin_fd >= 0)
                close(a.stdin_fd);
        run_image_free(a.image);
        return code;
}
