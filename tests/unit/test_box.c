/* Long-lived sandboxes (src/core/box.c, box_exec.c, runtime/codecage-init.c)
 * driven through the C API: several execs in one sandbox, state kept
 * between them, stdin, env, cwd, exit codes and signals, a per-exec timeout
 * that kills the exec's whole tree and leaves the sandbox usable,
 * background processes ended with their exec, concurrent execs, kill while
 * an exec runs, and pid 1 out of reach of the code inside. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/box.h"
#include "harness.h"

static struct cage_box *start_box_cpu(uint64_t cpu_time_ms)
{
        struct cage_spec spec;
        struct cage_error err = {0};
        struct cage_box *box = NULL;
        cage_spec_init(&spec);
        spec.timeout_ms = 10000;
        spec.cpu_time_ms = cpu_time_ms;
        int r = cage_box_start(&spec, &box, &err);
        if (r < 0)
                fprintf(stderr, "  cage_box_start: %s\n", err.message);
        return box;
}

static struct cage_box *start_box(void)
{
        return start_box_cpu(0);
}

struct outcome {
        struct cage_result res;
        int r;
        struct cage_error err;
};

static void exec_argv(struct cage_box *box, char *const *argv, char *const *env, const char *in,
                      uint64_t timeout_ms, struct outcome *o)
{
        struct cage_exec ex = {.argv = argv,
                               .env = env,
                               .stdin_data = in,
                               .stdin_len = in ? strlen(in) : 0,
                               .timeout_ms = timeout_ms,
                               .output_max_bytes = 65536};
        memset(o, 0, sizeof(*o));
        o->r = cage_box_exec(box, &ex, NULL, &o->res, &o->err);
        if (o->r < 0)
                fprintf(stderr, "  cage_box_exec: %s\n", o->err.message);
}

static void sh(struct cage_box *box, const char *script, uint64_t timeout_ms, struct outcome *o)
{
        char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
        exec_argv(box, argv, NULL, NULL, timeout_ms, o);
}

TEST(state_persists_between_execs)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        sh(box, "echo kept > /workspace/f; echo $$", 5000, &o);
        CHECK(o.r == 0 && o.res.status == CAGE_STATUS_OK);
        cage_result_free(&o.res);
        sh(box, "cat /workspace/f; id -u", 5000, &o);
        CHECK(o.r == 0 && o.res.status == CAGE_STATUS_OK);
        CHECK_STREQ(o.res.out.data, "kept\n1000\n");
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

TEST(exit_codes_signals_stdin_env)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        sh(box, "exit 3", 5000, &o);
        CHECK(o.res.status == CAGE_STATUS_ERROR && o.res.exit_code == 3);
        cage_result_free(&o.res);
        sh(box, "kill -9 $$", 5000, &o);
        CHECK(o.res.status == CAGE_STATUS_ERROR && o.res.signal == 9);
        cage_result_free(&o.res);
        char *cat[] = {"cat", NULL};
        exec_argv(box, cat, NULL, "from stdin", 5000, &o);
        CHECK_STREQ(o.res.out.data, "from stdin");
        cage_result_free(&o.res);
        char *env[] = {"GREETING=hello", "HOME=/tmp", NULL};
        char *echo[] = {"/bin/sh", "-c", "echo $GREETING $HOME $PATH", NULL};
        exec_argv(box, echo, env, NULL, 5000, &o);
        CHECK(o.res.out.data && strncmp(o.res.out.data, "hello /tmp /usr/local/bin", 25) == 0);
        cage_result_free(&o.res);
        char *missing[] = {"no-such-program", NULL};
        exec_argv(box, missing, NULL, NULL, 5000, &o);
        CHECK(o.res.status == CAGE_STATUS_ERROR && o.res.exit_code == 127);
        CHECK(o.res.err.data && strstr(o.res.err.data, "cannot run"));
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

TEST(timeout_kills_the_tree_and_keeps_the_sandbox)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        /* A daemon that escapes its session and a loop in the foreground. */
        sh(box, "setsid sh -c 'while :; do sleep 1; done' & while :; do :; done", 500, &o);
        CHECK(o.r == 0 && o.res.status == CAGE_STATUS_TIMEOUT);
        cage_result_free(&o.res);
        /* The escaped daemon is gone with its exec's cgroup. */
        sh(box, "for p in /proc/[0-9]*; do cat $p/comm; done | grep -c sleep", 5000, &o);
        CHECK(o.res.status == CAGE_STATUS_ERROR); /* grep -c found none: exit 1 */
        CHECK_STREQ(o.res.out.data, "0\n");
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

TEST(background_processes_end_with_their_exec)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        sh(box, "(sleep 100 >/dev/null 2>&1 &) ; echo started", 5000, &o);
        CHECK(o.res.status == CAGE_STATUS_OK);
        CHECK(o.res.duration_ms < 5000);
        cage_result_free(&o.res);
        sh(box, "for p in /proc/[0-9]*; do cat $p/comm; done | grep -c sleep", 5000, &o);
        CHECK_STREQ(o.res.out.data, "0\n");
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

TEST(pid1_is_out_of_reach)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        sh(box,
           "kill -9 1; kill -TERM 1; cat /proc/1/environ; ls -l /proc/1/fd; "
           "head -c 4 /proc/1/exe; echo done",
           5000, &o);
        CHECK(o.res.out.data && strstr(o.res.out.data, "done"));
        cage_result_free(&o.res);
        CHECK(cage_box_alive(box));
        sh(box, "tr '\\0' ' ' < /proc/1/cmdline; cat /proc/1/environ /proc/1/maps", 5000, &o);
        CHECK_STREQ(o.res.out.data, "codecage-init ");
        CHECK(o.res.err.data && strstr(o.res.err.data, "Permission denied"));
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

struct concurrent_arg {
        struct cage_box *box;
        int n;
        bool ok;
};

static void *concurrent_exec(void *p)
{
        struct concurrent_arg *a = p;
        char script[64], want[32];
        snprintf(script, sizeof(script), "sleep 0.2; echo %d", a->n);
        snprintf(want, sizeof(want), "%d\n", a->n);
        struct outcome o;
        /* Eight at once on a loaded or emulated host took more than 5 s of
         * wall time each; the bound is only for a hang. */
        sh(a->box, script, 60000, &o);
        a->ok = o.r == 0 && o.res.status == CAGE_STATUS_OK && o.res.out.data &&
                strcmp(o.res.out.data, want) == 0;
        if (o.r == 0 && !a->ok)
                fprintf(stderr, "  exec %d: %s (%s) after %llu ms, stdout \"%s\"\n", a->n,
                        cage_status_to_string(o.res.status), o.res.reason,
                        (unsigned long long)o.res.duration_ms,
                        o.res.out.data ? o.res.out.data : "");
        cage_result_free(&o.res);
        return NULL;
}

TEST(concurrent_execs_get_their_own_output)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        pthread_t t[8];
        struct concurrent_arg a[8];
        for (int i = 0; i < 8; i++) {
                a[i] = (struct concurrent_arg){.box = box, .n = i};
                pthread_create(&t[i], NULL, concurrent_exec, &a[i]);
        }
        for (int i = 0; i < 8; i++) {
                pthread_join(t[i], NULL);
                CHECK(a[i].ok);
        }
        cage_box_destroy(box);
}

static void *kill_later(void *p)
{
        usleep(300000);
        cage_box_kill(p);
        return NULL;
}

TEST(kill_ends_a_running_exec)
{
        struct cage_box *box = start_box();
        CHECK(box != NULL);
        if (!box)
                return;
        pthread_t t;
        pthread_create(&t, NULL, kill_later, box);
        struct outcome o;
        sh(box, "sleep 30", 20000, &o);
        pthread_join(t, NULL);
        CHECK(o.r == 0 && o.res.status == CAGE_STATUS_CANCELLED);
        CHECK(o.res.duration_ms < 5000);
        cage_result_free(&o.res);
        CHECK(!cage_box_alive(box));
        sh(box, "true", 5000, &o);
        CHECK(o.r == -ESRCH);
        cage_box_destroy(box);
}

/* The CPU budget reads the same as for a one-shot run: the exec that spends
 * it is a timeout (SIGXCPU from RLIMIT_CPU), not an error. */
TEST(cpu_budget_is_a_timeout)
{
        struct cage_box *box = start_box_cpu(300);
        CHECK(box != NULL);
        if (!box)
                return;
        struct outcome o;
        /* RLIMIT_CPU counts whole seconds of CPU: on a busy machine they can
         * take many more of wall time, which must not end the exec first. */
        sh(box, "while :; do :; done", 120000, &o);
        CHECK(o.r == 0 && o.res.status == CAGE_STATUS_TIMEOUT);
        CHECK(strstr(o.res.reason, "cpu time limit") != NULL);
        cage_result_free(&o.res);
        cage_box_destroy(box);
}

RUN_TESTS(T(state_persists_between_execs), T(cpu_budget_is_a_timeout),
          T(exit_codes_signals_stdin_env), T(timeout_kills_the_tree_and_keeps_the_sandbox),
          T(background_processes_end_with_their_exec), T(pid1_is_out_of_reach),
          T(concurrent_execs_get_their_own_output), T(kill_ends_a_running_exec))
