/* Pid 1 inside the sandbox. It starts the program, reaps every process that
 * is re-parented to it, and when the program exits reports its wait status
 * to the supervisor and exits — which makes the kernel kill everything
 * still left in the pid namespace (background jobs, double-forked daemons).
 *
 * init was created by a raw clone of a possibly multi-threaded supervisor,
 * so it never allocates and starts the program with vfork(2), not fork(3)
 * (whose atfork handlers could wait on locks held by threads that no longer
 * exist). It is non-dumpable and signals from inside the namespace cannot
 * reach it (pid 1 ignores signals it has no handler for). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box_proto.h"
#include "launch.h"
#include "util/fdutil.h"

static void send_report(const struct launch_plan *plan, int kind, int value, const char *step)
{
        struct child_report rep = {.kind = kind, .value = value};
        if (step)
                snprintf(rep.step, sizeof(rep.step), "%s", step);
        (void)!write(plan->report_fd, &rep, sizeof(rep));
}

/* Moves fd to a number >= 3 so dup2() onto 0..2 cannot clobber another. */
static int lift_fd(int fd)
{
        return fd < 3 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd;
}

static int setup_stdio(const struct launch_plan *plan)
{
        int in = lift_fd(plan->stdin_fd), out = lift_fd(plan->stdout_fd),
            err = lift_fd(plan->stderr_fd);
        if (in < 0 || out < 0 || err < 0)
                return -errno;
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
                return -errno;
        return 0;
}

static void reset_signals(void)
{
        sigset_t none;
        sigemptyset(&none);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
}

/* execve along the sandbox's own PATH (execvpe would search ours). */
static int exec_program(const struct launch_plan *plan)
{
        const char *file = plan->argv[0];
        if (strchr(file, '/')) {
                execve(file, plan->argv, plan->envp);
                return -errno;
        }
        int saved = -ENOENT;
        for (const char *p = plan->path_env; p && *p;) {
                const char *end = strchrnul(p, ':');
                char path[4096];
                int n = snprintf(path, sizeof(path), "%.*s/%s", (int)(end - p), p, file);
                if (n > 0 && (size_t)n < sizeof(path) && end > p) {
                        execve(path, plan->argv, plan->envp);
                        if (errno != ENOENT && errno != ENOTDIR)
                                saved = -errno;
                }
                p = *end ? end + 1 : end;
        }
        return saved;
}

static _Noreturn void program_main(const struct launch_plan *plan)
{
        reset_signals();
        int r = setup_stdio(plan);
        if (r < 0) {
                send_report(plan, REPORT_SETUP_FAILED, -r, "stdio");
                _exit(127);
        }
        if (chdir(plan->workdir) < 0) {
                send_report(plan, REPORT_EXEC_FAILED, errno, "chdir to workdir");
                _exit(127);
        }
        if ((r = rlimit_memory_fallback(plan)) < 0) {
                send_report(plan, REPORT_SETUP_FAILED, -r, "rlimit as");
                _exit(127);
        }
        r = exec_program(plan);
        send_report(plan, REPORT_EXEC_FAILED, -r, "execve");
        _exit(r == -ENOENT ? 127 : 126);
}

/* Long-lived sandboxes: pid 1 becomes codecage-init, exec'd from its
 * sealed, execute-only memfd (so it runs with a fresh memory image and is
 * non-dumpable), with the control socket as BOX_CTL_FD and /dev/null (the
 * plan's stdio) as its standard fds. */
static _Noreturn void exec_box_init(const struct launch_plan *plan)
{
        static char *const init_argv[] = {"codecage-init", NULL};
        static char *const init_envp[] = {NULL};
        /* Above BOX_CTL_FD first, so no dup2 below closes one of them. */
        int ctl = fcntl(plan->box_ctl_fd, F_DUPFD_CLOEXEC, BOX_CTL_FD + 1);
        int image = fcntl(plan->box_init_fd, F_DUPFD_CLOEXEC, BOX_CTL_FD + 1);
        if (ctl < 0 || image < 0 || setup_stdio(plan) < 0 || dup2(ctl, BOX_CTL_FD) < 0)
                child_fail(plan, "codecage-init fds", errno);
        syscall(SYS_execveat, image, "", init_argv, init_envp, AT_EMPTY_PATH);
        child_fail(plan, "exec codecage-init", errno);
}

_Noreturn void init_run(const struct launch_plan *plan)
{
        if (plan->box)
                exec_box_init(plan);
        /* Our argv area is the supervisor's command line (/proc/1/cmdline,
         * which anyone may read): wipe our copy. Nothing below reads it. */
        if (plan->arg_end > plan->arg_start)
                memset((void *)plan->arg_start, 0, plan->arg_end - plan->arg_start);
        /* vfork: no copy of init's page tables, and glibc's vfork runs no
         * atfork handlers; the child only sets up fds and execs. */
        pid_t program = vfork();
        if (program < 0)
                child_fail(plan, "fork program", errno);
        if (program == 0)
                program_main(plan);
        close(plan->stdin_fd);
        close(plan->stdout_fd);
        close(plan->stderr_fd);
        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);
                if (pid == program) {
                        send_report(plan, REPORT_EXITED, status, NULL);
                        _exit(0);
                }
                if (pid < 0 && errno != EINTR)
                        child_fail(plan, "wait for program", errno);
        }
}
