/* The reaper: a small process that outlives the supervisor it was started
 * by and removes that supervisor's cgroups once it is gone. Processes of a
 * sandbox already die with their supervisor (the parent-death signal of
 * pid 1 kills its pid namespace); its cgroup directories would otherwise
 * stay until the next codecage start swept them.
 *
 * One reaper per supervisor process, started before its first launch. It
 * is the same binary exec'd afresh (clean memory and command line, safe to
 * start from a threaded server), in a session of its own so the terminal's
 * signals do not reach it. It waits for end-of-file on a pipe whose only
 * writer is the supervisor (close-on-exec, never written), then sweeps
 * every group named after the supervisor's pid, waiting a little for
 * killed sandboxes to empty. After a clean exit there is nothing to sweep. */
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "launcher.h"
#include "plan.h"
#include "util/cleanup.h"
#include "util/fdutil.h"

#define REAPER_FD      3    /* the pipe's read end, in the reaper */
#define REAPER_WAIT_MS 2000 /* for killed sandboxes to leave their groups */

static pthread_once_t reaper_once = PTHREAD_ONCE_INIT;
static bool reaper_exec; /* the mode of the first call */
static int reaper_r;
static int reaper_w = -1; /* our end: closed by our death, or written by a clean exit */

/* The reaper's fds, in the forked child: the pipe at REAPER_FD, /dev/null
 * at 0-2 (it must not hold the caller's terminal or pipes: a reader of
 * ours would wait for its end), nothing else. Async-signal-safe calls only. */
static int reaper_fds(int pipe_r)
{
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0)
                return -1;
        for (int fd = 0; fd < 3; fd++)
                if (dup2(null, fd) < 0)
                        return -1;
        /* dup2 onto itself would keep close-on-exec: clear it instead. */
        if (pipe_r == REAPER_FD ? fcntl(pipe_r, F_SETFD, 0) < 0 : dup2(pipe_r, REAPER_FD) < 0)
                return -1;
        syscall(SYS_close_range, REAPER_FD + 1, ~0U, 0);
        (void)!chdir("/");
        setsid();
        return 0;
}

static int reap(pid_t owner);

/* A plain fork shows the supervisor's command line (the sandboxed program's
 * included) until it is overwritten: it shows what it is instead. */
static void rename_self(void)
{
        static const char name[] = "codecage\0" LAUNCH_REAPER_COMMAND;
        uintptr_t start, end;
        plan_arg_area(&start, &end);
        if (end <= start)
                return;
        memset((void *)start, 0, end - start);
        memcpy((void *)start, name, sizeof(name) < end - start ? sizeof(name) : end - start - 1);
}

/* The forked child: exec'd afresh (a threaded caller: only async-signal-
 * safe calls may follow the fork) or, from a single-threaded caller, the
 * same code without an exec (cheaper on the path of a cold run). */
static _Noreturn void run_reaper(int pipe_r, pid_t owner, char *const argv[], bool exec)
{
        if (reaper_fds(pipe_r) < 0)
                _exit(127);
        if (exec) {
                execv("/proc/self/exe", argv);
                _exit(127);
        }
        rename_self();
        _exit(reap(owner));
}

static void start_reaper(void)
{
        int p[2];
        char pid[16];
        pid_t owner = getpid();
        snprintf(pid, sizeof(pid), "%d", (int)owner);
        char *const argv[] = {"codecage", (char *)LAUNCH_REAPER_COMMAND, pid, NULL};
        if (pipe2(p, O_CLOEXEC) < 0) {
                reaper_r = -errno;
                return;
        }
        pid_t child = fork();
        if (child == 0)
                run_reaper(p[0], owner, argv, reaper_exec);
        reaper_r = child < 0 ? -errno : 0;
        close(p[0]);
        /* The write end stays open, unused, until this process is gone. */
        if (child < 0)
                close(p[1]);
        else
                reaper_w = p[1];
}

/* The unsafe debug build can go without one (CODECAGE_DEBUG_DISABLE names
 * "reaper"), so the security suite can show what it removes. */
static bool switched_off(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "reaper"))
                return true;
#endif
        return false;
}

int launch_reaper_start(bool single_threaded)
{
        if (switched_off())
                return 0;
        reaper_exec = !single_threaded;
        pthread_once(&reaper_once, start_reaper);
        return reaper_r;
}

void launch_reaper_dismiss(void)
{
        if (reaper_w >= 0)
                (void)!write(reaper_w, "x", 1);
}

static pid_t parse_owner(const char *s)
{
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        return errno || *end || v <= 0 || v > INT_MAX ? 0 : (pid_t)v;
}

/* Waits until the supervisor is gone; a byte first means it removed its
 * groups itself. */
static int reap(pid_t owner)
{
        static const int quiet[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT};
        for (size_t i = 0; i < ELEMENTSOF(quiet); i++)
                signal(quiet[i], SIG_IGN);
        prctl(PR_SET_NAME, "codecage-reap");
        char b;
        ssize_t n;
        while ((n = read(REAPER_FD, &b, 1)) < 0 && errno == EINTR)
                ;
        if (n == 1)
                return 0;
        struct cgroup_host host;
        if (launch_detect_cgroups(&host, NULL) == 0)
                cage_cgroup_sweep_owner(&host, owner, REAPER_WAIT_MS);
        return 0;
}

int launch_reaper_main(int argc, char **argv)
{
        pid_t owner = argc == 3 ? parse_owner(argv[2]) : 0;
        if (!owner) {
                fprintf(stderr, "codecage: %s is internal: started by codecage itself\n",
                        LAUNCH_REAPER_COMMAND);
                return 2;
        }
        return reap(owner);
}
