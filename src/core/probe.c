/* The launch probe; see probe.h. It drives the launcher (launcher.c) like a
 * run does and reads the child's own launch reports, so a step that fails
 * here fails for every sandbox. */
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "plan.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define PROBE_MOUNT_TARGET "/opt/codecage-probe"

static void failed(struct cage_probe *p, const char *step, int err, const char *message)
{
        p->ok = false;
        snprintf(p->step, sizeof(p->step), "%s", step);
        p->err = err;
        snprintf(p->message, sizeof(p->message), "%.*s", (int)sizeof(p->message) - 1, message);
}

static int open_null_stdio(struct launch_plan *plan)
{
        plan->stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        plan->stdout_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        plan->stderr_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        return plan->stdin_fd < 0 || plan->stdout_fd < 0 || plan->stderr_fd < 0 ? -errno : 0;
}

/* One record from the child; false at the end of the pipe. */
static bool read_report(struct launcher *l, struct cage_probe *p, bool *exited)
{
        struct child_report rep;
        ssize_t n = read(l->report_r, &rep, sizeof(rep));
        if (n <= 0)
                return n < 0 && errno == EINTR;
        if (n != sizeof(rep))
                return true;
        rep.step[sizeof(rep.step) - 1] = '\0';
        char msg[256];
        if (rep.kind == REPORT_EXITED) {
                *exited = true;
                if (WIFEXITED(rep.value) && WEXITSTATUS(rep.value) == 0)
                        p->ok = true;
                else
                        failed(p, "run the program", 0, "`true` did not exit 0 in the sandbox");
        } else if (rep.kind == REPORT_EXEC_FAILED) {
                snprintf(msg, sizeof(msg), "exec `true`: %s", strerror(rep.value));
                failed(p, "exec the program", rep.value, msg);
        } else if (rep.kind != REPORT_STARTED && !p->step[0]) {
                snprintf(msg, sizeof(msg), "sandbox launch step \"%s\" failed: %s", rep.step,
                         strerror(rep.value));
                failed(p, rep.step, rep.value, msg);
        }
        return true;
}

/* Reads the launch reports until pid 1 is gone or the deadline passes. */
static void follow(struct launcher *l, struct cage_probe *p, uint64_t deadline_ms)
{
        bool exited = false;
        while (l->report_r >= 0) {
                uint64_t now = clock_mono_ms();
                if (now >= deadline_ms) {
                        failed(p, "wait for the sandbox", ETIMEDOUT,
                               "the probe sandbox did not finish in time");
                        return;
                }
                struct pollfd pfd = {.fd = l->report_r, .events = POLLIN};
                if (poll(&pfd, 1, (int)(deadline_ms - now)) < 0 && errno != EINTR)
                        break;
                if (pfd.revents && !read_report(l, p, &exited))
                        close_fd(&l->report_r);
        }
        if (!exited && !p->step[0])
                failed(p, "sandbox init", 0, "the sandbox ended without reporting");
}

static int run_probe(struct launcher *l, struct cage_probe *p, uint64_t deadline_ms)
{
        struct cage_error err = {0};
        int r = launcher_prepare(l, &err);
        if (r == 0)
                r = open_null_stdio(&l->plan);
        if (r < 0) {
                failed(p, "prepare the launch", -r, err.message[0] ? err.message : strerror(-r));
                return 0;
        }
        p->idmapped_mount = l->plan.mount_fds[0] >= 0;
        if ((r = launcher_clone(l, false, &err)) < 0) {
                failed(p, "clone3", -r, err.message);
                return 0;
        }
        r = launcher_enter_cgroup(l, &err);
        p->limits_backend = launcher_limits_backend(l);
        if (r < 0) {
                failed(p, "id maps and cgroup", -r, err.message);
                return 0;
        }
        follow(l, p, deadline_ms);
        return 0;
}

int cage_probe_launch(uint64_t timeout_ms, struct cage_probe *ret)
{
        static char *const argv[] = {"true", NULL};
        char dir[] = "/tmp/codecage-probe-XXXXXX";
        memset(ret, 0, sizeof(*ret));
        if (!mkdtemp(dir))
                return -errno;
        uint64_t t0 = clock_mono_ms();
        struct cage_spec spec;
        cage_spec_init(&spec);
        spec.argv = argv;
        spec.timeout_ms = timeout_ms;
        spec.mounts[0] = (struct cage_mount){.source = dir, .target = PROBE_MOUNT_TARGET};
        spec.n_mounts = 1;
#ifdef CODECAGE_UNSAFE_DEBUG
        /* Tests make a launch step fail to show that doctor runs it. */
        spec.debug_fail_step = getenv("CODECAGE_DEBUG_FAIL_STEP");
#endif
        struct cage_error err = {0};
        int r = cage_spec_validate(&spec, &err);
        if (r == 0)
                r = plan_check_inputs(&spec, &err);
        if (r == 0) {
                struct launcher l;
                launcher_init(&l, &spec);
                r = run_probe(&l, ret, t0 + timeout_ms);
                launcher_release(&l);
        }
        rmdir(dir);
        ret->duration_ms = clock_mono_ms() - t0;
        return r;
}
