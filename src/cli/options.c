/* Parsing of CLI option values into spec fields, with errors that name the
 * option and the allowed range. No value is trusted until parsed whole. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util/cleanup.h"
#include "util/error.h"

int parse_u64_range(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *ret,
                    struct cage_error *err)
{
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
                return cage_fail(err, -EINVAL, "%s: \"%s\" is not an integer in %llu..%llu", opt, s,
                                 (unsigned long long)lo, (unsigned long long)hi);
        *ret = v;
        return 0;
}

int parse_double_range(const char *opt, const char *s, double lo, double hi, double *ret,
                       struct cage_error *err)
{
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
                return cage_fail(err, -EINVAL, "%s: \"%s\" is not a number in %g..%g", opt, s, lo,
                                 hi);
        *ret = v;
        return 0;
}

int parse_seconds_ms(const char *opt, const char *s, uint64_t max_ms, uint64_t *ret,
                     struct cage_error *err)
{
        double secs;
        int r = parse_double_range(opt, s, 0.001, (double)max_ms / 1000.0, &secs, err);
        if (r < 0)
                return r;
        *ret = (uint64_t)(secs * 1000.0 + 0.5);
        return 0;
}

/* SRC[:DST]; DST defaults to SRC. Modifies s in place. */
int parse_mount(const char *opt, char *s, bool writable, struct cage_mount *ret,
                struct cage_error *err)
{
        char *colon = strchr(s, ':');
        if (colon)
                *colon = '\0';
        const char *dst = colon ? colon + 1 : s;
        if (s[0] != '/' || dst[0] != '/')
                return cage_fail(err, -EINVAL, "%s: \"%s\" needs absolute paths: SRC[:DST]", opt,
                                 s);
        *ret = (struct cage_mount){.source = s, .target = dst, .writable = writable};
        return 0;
}

static const struct {
        const char *name;
        uint32_t bit;
} debug_switches[] = {
        {"seccomp", CAGE_DEBUG_NO_SECCOMP},     {"caps", CAGE_DEBUG_NO_CAPS_DROP},
        {"nnp", CAGE_DEBUG_NO_NO_NEW_PRIVS},    {"rootfs", CAGE_DEBUG_HOST_ROOTFS},
        {"proc-mask", CAGE_DEBUG_NO_PROC_MASK}, {"limits", CAGE_DEBUG_NO_LIMITS},
        {"fds", CAGE_DEBUG_KEEP_FDS},           {"env", CAGE_DEBUG_KEEP_ENV},
        {"setsid", CAGE_DEBUG_NO_SETSID},       {"pidns", CAGE_DEBUG_NO_PIDNS},
        {"netns", CAGE_DEBUG_NO_NETNS},         {"userns-owner", CAGE_DEBUG_ROOT_OWNED_USERNS},
};

int parse_debug_disable(const char *s, uint32_t *ret, struct cage_error *err)
{
        _cleanup_free_ char *copy = strdup(s);
        char *save = NULL;
        if (!copy)
                return cage_fail(err, -ENOMEM, "--debug-disable");
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                size_t i;
                for (i = 0; i < ELEMENTSOF(debug_switches); i++)
                        if (strcmp(tok, debug_switches[i].name) == 0)
                                break;
                if (i == ELEMENTSOF(debug_switches))
                        return cage_fail(err, -EINVAL, "--debug-disable: unknown protection \"%s\"",
                                         tok);
                *ret |= debug_switches[i].bit;
        }
        return 0;
}

void cli_block_stop_signals(sigset_t *ret)
{
        sigemptyset(ret);
        sigaddset(ret, SIGINT);
        sigaddset(ret, SIGTERM);
        sigprocmask(SIG_BLOCK, ret, NULL);
}

int cli_getopt(int argc, char **argv, const struct option *opts,
               int (*on)(void *ctx, int c, char *arg), void (*usage)(FILE *f), void *ctx)
{
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (c == 'h') {
                        usage(stdout);
                        return 1;
                }
                if (c == '?' || on(ctx, c, optarg) < 0) {
                        if (c == '?')
                                usage(stderr);
                        return -EINVAL;
                }
        }
        return 0;
}

void cli_ensure_std_fds(void)
{
        for (int fd = 0; fd < 3; fd++)
                if (fcntl(fd, F_GETFD) < 0)
                        open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}
