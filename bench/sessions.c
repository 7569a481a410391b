/* Sessions and the warm pool against their baselines, measured in this one
 * process so every number sees the same machine:
 *
 *   bare python3 -c 'print(1)'        a process per run (posix_spawn + wait)
 *   python REPL loop over pipes       one python3 reading code lines, exec'ing
 *   session round trip, C API         cage_session_run("x + 1")
 *   one-shot print(1), pooled         cage_service_python_run, pool warm
 *   one-shot print(1), cold           the same with a policy no pool serves
 *   sustained one-shot throughput     2 client threads, each run a fresh sandbox
 *   memory per idle session           N live sessions: MemAvailable drop / N
 *   MCP round trips over stdio        `codecage mcp` as a child: run_python in
 *                                     a sandbox's session and one-shot, against
 *                                     the same calls through the C API
 *   the pool under load               `codecage mcp` (pool_size 8): 200 one-shot
 *                                     run_python("print(1)") back to back, then
 *                                     2 and 8 concurrent clients for S seconds
 *                                     each; against bare python3 processes at
 *                                     the same concurrency
 *
 * Usage (root): build/bench/bench-sessions [--rounds N] [--sessions N]
 *               [--seconds S] [--data DIR] [--only load] */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/box.h"
#include "services/config.h"
#include "services/service.h"
#include "services/session.h"

extern char **environ;

#define BLOCK 20

static int rounds = 1000, n_sessions = 100, seconds = 10;
static const char *data_dir = "/tmp/codecage-bench";

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        return n ? v[n / 2] : 0;
}

static double p90(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        return n ? v[n * 9 / 10] : 0;
}

static void report(const char *what, double *v, int n)
{
        double p = p90(v, n), m = median(v, n);
        printf("  %-34s median %9.3f ms   p90 %9.3f ms   (n=%d)\n", what, m, p, n);
}

/* ---- baselines ---- */

static double bare_python_ms(void)
{
        char *argv[] = {"/usr/bin/python3", "-c", "print(1)", NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        double t0 = now_ms();
        pid_t pid;
        int status;
        if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0)
                waitpid(pid, &status, 0);
        posix_spawn_file_actions_destroy(&fa);
        return now_ms() - t0;
}

/* A plain REPL over pipes: the smallest thing a session could be. */
struct repl {
        pid_t pid;
        FILE *in, *out;
};

static int repl_start(struct repl *r)
{
        static const char loop[] =
                "import sys\nns = {}\nfor line in sys.stdin:\n"
                "    print(repr(eval(compile(line, '<in>', 'eval'), ns)), flush=True)\n";
        int to[2], from[2];
        if (pipe(to) < 0 || pipe(from) < 0)
                return -1;
        char *argv[] = {"/usr/bin/python3", "-I", "-c", (char *)loop, NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, to[0], 0);
        posix_spawn_file_actions_adddup2(&fa, from[1], 1);
        posix_spawn_file_actions_addclose(&fa, to[1]);
        posix_spawn_file_actions_addclose(&fa, from[0]);
        int e = posix_spawn(&r->pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(to[0]);
        close(from[1]);
        r->in = fdopen(to[1], "w");
        r->out = fdopen(from[0], "r");
        return e ? -1 : 0;
}

static double repl_round_ms(struct repl *r)
{
        char line[256];
        double t0 = now_ms();
        fputs("1 + 1\n", r->in);
        fflush(r->in);
        if (!fgets(line, sizeof(line), r->out))
                return -1;
        return now_ms() - t0;
}

/* ---- codecage ---- */

static double session_round_ms(struct cage_session *s)
{
        struct cage_session_run run = {.code = "x + 1",
                                       .code_len = 5,
                                       .timeout_ms = 10000,
                                       .output_max_bytes = 65536,
                                       .cancel_fd = -1};
        struct cage_error err = {0};
        json_t *res = NULL;
        double t0 = now_ms();
        int r = cage_session_run(s, &run, &res, &err);
        double dt = now_ms() - t0;
        json_decref(res);
        return r < 0 ? -1 : dt;
}

static double oneshot_ms(struct cage_service *svc, const char *request)
{
        json_t *req = json_loads(request, 0, NULL), *res = NULL;
        struct cage_error err = {0};
        double t0 = now_ms();
        int r = cage_service_python_run(svc, CAGE_SERVICE_DEFAULT_TENANT, NULL, req, NULL, NULL,
                                        &res, &err);
        double dt = now_ms() - t0;
        if (r < 0)
                fprintf(stderr, "bench: one-shot run failed: %s\n", err.message);
        json_decref(req);
        json_decref(res);
        return r < 0 ? -1 : dt;
}

static int pool_ready(struct cage_service *svc)
{
        json_t *st = cage_service_pool_stats(svc);
        int n = (int)json_integer_value(json_object_get(st, "ready"));
        json_decref(st);
        return n;
}

static void wait_pool(struct cage_service *svc)
{
        for (int i = 0; i < 2000 && pool_ready(svc) < 1; i++)
                usleep(5000);
}

struct load {
        struct cage_service *svc;
        double until;
        int runs, failed;
};

static void *load_main(void *arg)
{
        struct load *l = arg;
        while (now_ms() < l->until) {
                if (oneshot_ms(l->svc, "{\"code\": \"print(1)\"}") < 0)
                        l->failed++;
                else
                        l->runs++;
        }
        return NULL;
}

static long mem_available_kib(void)
{
        char line[256];
        long kib = -1;
        FILE *f = fopen("/proc/meminfo", "re");
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "MemAvailable: %ld kB", &kib) == 1)
                        break;
        if (f)
                fclose(f);
        return kib;
}

/* ---- MCP over stdio ---- */

struct mcp_child {
        pid_t pid;
        FILE *in, *out;
        int id;
};

static int mcp_start(struct mcp_child *m, const char *config)
{
        char exe[4096], bin[4200];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return -1;
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        snprintf(bin, sizeof(bin), "%s/codecage", exe);
        int to[2], from[2];
        if (pipe(to) < 0 || pipe(from) < 0)
                return -1;
        char *argv[] = {bin, "mcp", "--config", (char *)config, NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, to[0], 0);
        posix_spawn_file_actions_adddup2(&fa, from[1], 1);
        posix_spawn_file_actions_addclose(&fa, to[1]);
        posix_spawn_file_actions_addclose(&fa, from[0]);
        int e = posix_spawn(&m->pid, bin, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(to[0]);
        close(from[1]);
        m->in = fdopen(to[1], "w");
        m->out = fdopen(from[0], "r");
        return e ? -1 : 0;
}

/* One request; returns the response line's result (or NULL). */
static json_t *mcp_call(struct mcp_child *m, const char *method, json_t *params)
{
        json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", ++m->id, "method",
                                method, "params", params);
        char *text = json_dumps(req, JSON_COMPACT);
        fprintf(m->in, "%s\n", text);
        fflush(m->in);
        free(text);
        json_decref(req);
        static char line[1 << 20];
        while (fgets(line, sizeof(line), m->out)) {
                json_t *msg = json_loads(line, 0, NULL);
                json_t *id = json_object_get(msg, "id");
                if (json_is_integer(id) && json_integer_value(id) == m->id &&
                    !json_object_get(msg, "method")) {
                        json_t *result = json_incref(json_object_get(msg, "result"));
                        json_decref(msg);
                        return result;
                }
                json_decref(msg);
        }
        return NULL;
}

static double mcp_tool_ms(struct mcp_child *m, json_t *args)
{
        double t0 = now_ms();
        json_t *r = mcp_call(m, "tools/call",
                             json_pack("{s:s, s:o}", "name", "run_python", "arguments", args));
        double dt = now_ms() - t0;
        bool ok = r && !json_is_true(json_object_get(r, "isError"));
        json_decref(r);
        return ok ? dt : -1;
}

static double named_python_ms(struct cage_service *svc, const char *name)
{
        json_t *req = json_pack("{s:s}", "code", "print(1)"), *res = NULL;
        struct cage_error err = {0};
        double t0 = now_ms();
        int r = cage_service_python_run(svc, CAGE_SERVICE_DEFAULT_TENANT, name, req, NULL, NULL,
                                        &res, &err);
        double dt = now_ms() - t0;
        json_decref(req);
        json_decref(res);
        return r < 0 ? -1 : dt;
}

static void bench_mcp(struct cage_service *svc)
{
        char config[512], path[300];
        snprintf(path, sizeof(path), "%s/mcp.json", data_dir);
        snprintf(config, sizeof(config), "{\"data_dir\": \"%s/mcp\", \"pool_size\": 4}", data_dir);
        FILE *f = fopen(path, "we");
        if (!f)
                return;
        fputs(config, f);
        fclose(f);
        struct mcp_child m = {0};
        json_t *init = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-11-25",
                                 "capabilities", "clientInfo", "name", "bench", "version", "1");
        json_t *r = mcp_start(&m, path) == 0 ? mcp_call(&m, "initialize", init) : NULL;
        if (!r) {
                fprintf(stderr, "bench: codecage mcp did not start\n");
                return;
        }
        json_decref(r);
        fprintf(m.in, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        json_decref(mcp_call(&m, "tools/call",
                             json_pack("{s:s, s:{s:s}}", "name", "sandbox_create", "arguments",
                                       "name", "bench")));
        json_t *create = json_pack("{s:s}", "name", "bench"), *info = NULL;
        struct cage_error err = {0};
        cage_service_sandbox_create(svc, CAGE_SERVICE_DEFAULT_TENANT, create, &info, &err);
        json_decref(create);
        json_decref(info);
        int n = rounds / 5 ? rounds / 5 : 1;
        double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
        mcp_tool_ms(&m, json_pack("{s:s, s:s}", "code", "print(1)", "sandbox", "bench"));
        named_python_ms(svc, "bench");
        for (int i = 0; i < n; i += BLOCK) {
                for (int j = i; j < i + BLOCK && j < n; j++)
                        a[j] = mcp_tool_ms(&m, json_pack("{s:s, s:s}", "code", "print(1)",
                                                         "sandbox", "bench"));
                for (int j = i; j < i + BLOCK && j < n; j++)
                        b[j] = named_python_ms(svc, "bench");
        }
        printf("run_python(\"print(1)\") in a sandbox's session (%d rounds):\n", n);
        report("MCP over stdio (codecage mcp)", a, n);
        report("C API (cage_service_python_run)", b, n);
        printf("  the MCP layer adds %.3f ms (bar: well under 1 ms)\n",
               median(a, n) - median(b, n));
        int k = n / 4 ? n / 4 : 1;
        for (int i = 0; i < k; i++) {
                usleep(300000); /* both pools refilled */
                a[i] = mcp_tool_ms(&m, json_pack("{s:s}", "code", "print(1)"));
                usleep(300000);
                b[i] = oneshot_ms(svc, "{\"code\": \"print(1)\"}");
        }
        printf("one-shot run_python(\"print(1)\") from the pool (%d rounds):\n", k);
        report("MCP over stdio (codecage mcp)", a, k);
        report("C API (cage_service_python_run)", b, k);
        cage_service_sandbox_remove(svc, CAGE_SERVICE_DEFAULT_TENANT, "bench", &err);
        fclose(m.in);
        waitpid(m.pid, NULL, 0);
        fclose(m.out);
        free(a);
        free(b);
}

/* ---- the pool under load ---- */

#define LOAD_CLIENTS_MAX 8

/* One `codecage mcp` shared by client threads: requests carry
 * id = seq * LOAD_CLIENTS_MAX + client; a reader thread hands each answer
 * to its client. */
struct mux {
        struct mcp_child m;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        json_t *answer[LOAD_CLIENTS_MAX];
        bool done;
};

static void *mux_reader(void *arg)
{
        struct mux *x = arg;
        static char line[1 << 20];
        while (fgets(line, sizeof(line), x->m.out)) {
                json_t *msg = json_loads(line, 0, NULL);
                json_t *id = json_object_get(msg, "id");
                if (!json_is_integer(id) || json_object_get(msg, "method")) {
                        json_decref(msg);
                        continue;
                }
                int client = (int)(json_integer_value(id) % LOAD_CLIENTS_MAX);
                pthread_mutex_lock(&x->lock);
                x->answer[client] = msg;
                pthread_cond_broadcast(&x->cond);
                pthread_mutex_unlock(&x->lock);
        }
        pthread_mutex_lock(&x->lock);
        x->done = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        return NULL;
}

/* One one-shot run_python("print(1)"): ms, or -1 (failed); *cold: it did
 * not get a pooled sandbox. */
static double mux_run(struct mux *x, int client, int seq, int *cold)
{
        char req[256];
        snprintf(req, sizeof(req),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":"
                 "{\"name\":\"run_python\",\"arguments\":{\"code\":\"print(1)\"}}}\n",
                 seq * LOAD_CLIENTS_MAX + client);
        double t0 = now_ms();
        pthread_mutex_lock(&x->lock);
        fputs(req, x->m.in);
        fflush(x->m.in);
        while (!x->answer[client] && !x->done)
                pthread_cond_wait(&x->cond, &x->lock);
        json_t *msg = x->answer[client];
        x->answer[client] = NULL;
        pthread_mutex_unlock(&x->lock);
        double dt = now_ms() - t0;
        json_t *sc = json_object_get(json_object_get(msg, "result"), "structuredContent");
        const char *status = json_string_value(json_object_get(sc, "status"));
        bool ok = status && strcmp(status, "ok") == 0;
        if (ok && !json_is_true(json_object_get(sc, "pooled")))
                (*cold)++;
        json_decref(msg);
        return ok ? dt : -1;
}

struct load_client {
        struct mux *x;
        int client;
        double until;
        double *lat;
        int n, cap, failed, cold;
};

static void *load_client_main(void *arg)
{
        struct load_client *c = arg;
        for (int seq = 1; now_ms() < c->until; seq++) {
                double dt = mux_run(c->x, c->client, seq, &c->cold);
                if (dt < 0) {
                        c->failed++;
                        continue;
                }
                if (c->n == c->cap) {
                        c->cap = c->cap ? 2 * c->cap : 1024;
                        c->lat = realloc(c->lat, (size_t)c->cap * sizeof(double));
                }
                c->lat[c->n++] = dt;
        }
        return NULL;
}

/* Pooled runs at `clients` concurrency for `secs`: runs/s, p50/p90. */
static double load_pooled(struct mux *x, int clients, double secs)
{
        struct load_client c[LOAD_CLIENTS_MAX];
        pthread_t t[LOAD_CLIENTS_MAX];
        double t0 = now_ms(), until = t0 + secs * 1000.0;
        for (int i = 0; i < clients; i++) {
                c[i] = (struct load_client){.x = x, .client = i, .until = until};
                pthread_create(&t[i], NULL, load_client_main, &c[i]);
        }
        int n = 0, failed = 0, cold = 0;
        for (int i = 0; i < clients; i++) {
                pthread_join(t[i], NULL);
                n += c[i].n;
                failed += c[i].failed;
                cold += c[i].cold;
        }
        double elapsed = (now_ms() - t0) / 1000.0;
        double *all = calloc((size_t)n + 1, sizeof(double));
        for (int i = 0, k = 0; i < clients; i++) {
                memcpy(all + k, c[i].lat, (size_t)c[i].n * sizeof(double));
                k += c[i].n;
                free(c[i].lat);
        }
        char what[64];
        snprintf(what, sizeof(what), "%d clients, %.0f s", clients, secs);
        report(what, all, n);
        printf("  %-34s %.1f runs/s   p90/p50 %.2f   (%d not pooled, %d failed)\n", "", n / elapsed,
               median(all, n) > 0 ? p90(all, n) / median(all, n) : 0, cold, failed);
        free(all);
        return n / elapsed;
}

struct bare_client {
        double until;
        int n;
};

static void *bare_client_main(void *arg)
{
        struct bare_client *c = arg;
        while (now_ms() < c->until) {
                bare_python_ms();
                c->n++;
        }
        return NULL;
}

/* Bare python3 -c 'print(1)' processes at `clients` concurrency: runs/s. */
static double load_bare(int clients, double secs)
{
        struct bare_client c[LOAD_CLIENTS_MAX];
        pthread_t t[LOAD_CLIENTS_MAX];
        double t0 = now_ms(), until = t0 + secs * 1000.0;
        for (int i = 0; i < clients; i++) {
                c[i] = (struct bare_client){.until = until};
                pthread_create(&t[i], NULL, bare_client_main, &c[i]);
        }
        int n = 0;
        for (int i = 0; i < clients; i++) {
                pthread_join(t[i], NULL);
                n += c[i].n;
        }
        return n / ((now_ms() - t0) / 1000.0);
}

static void bench_load(void)
{
        char config[512], path[300];
        snprintf(path, sizeof(path), "%s/load.json", data_dir);
        snprintf(config, sizeof(config), "{\"data_dir\": \"%s/load\", \"pool_size\": 8}", data_dir);
        FILE *f = fopen(path, "we");
        if (!f)
                return;
        fputs(config, f);
        fclose(f);
        struct mux x = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        json_t *init = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-11-25",
                                 "capabilities", "clientInfo", "name", "bench", "version", "1");
        json_t *r = mcp_start(&x.m, path) == 0 ? mcp_call(&x.m, "initialize", init) : NULL;
        if (!r) {
                fprintf(stderr, "bench: codecage mcp did not start\n");
                return;
        }
        json_decref(r);
        fprintf(x.m.in, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        fflush(x.m.in);
        pthread_t reader;
        pthread_create(&reader, NULL, mux_reader, &x);
        sleep(5); /* the pool fills */
        enum { BACK_TO_BACK = 200 };
        double lat[BACK_TO_BACK];
        int n = 0, failed = 0, cold = 0;
        double t0 = now_ms();
        for (int i = 0; i < BACK_TO_BACK; i++) {
                double dt = mux_run(&x, 0, i + 1, &cold);
                if (dt < 0)
                        failed++;
                else
                        lat[n++] = dt;
        }
        double c1 = n / ((now_ms() - t0) / 1000.0);
        printf("the pool under load: one-shot run_python(\"print(1)\") through codecage mcp, "
               "pool_size 8:\n");
        report("200 back to back", lat, n);
        printf("  %-34s %.1f runs/s   p90/p50 %.2f   (%d not pooled, %d failed)\n", "", c1,
               p90(lat, n) / median(lat, n), cold, failed);
        sleep(2);
        double c2 = load_pooled(&x, 2, seconds);
        sleep(2);
        double c8 = load_pooled(&x, 8, seconds);
        double b1 = load_bare(1, seconds), b2 = load_bare(2, seconds), b8 = load_bare(8, seconds);
        printf("  bare python3 -c 'print(1)' processes: %.1f / %.1f / %.1f runs/s at 1 / 2 / 8\n",
               b1, b2, b8);
        printf("  pooled/bare throughput: %.2fx / %.2fx / %.2fx at 1 / 2 / 8 (bar: >= 2x)\n",
               c1 / b1, c2 / b2, c8 / b8);
        fclose(x.m.in);
        waitpid(x.m.pid, NULL, 0);
        pthread_join(reader, NULL);
        fclose(x.m.out);
}

/* ---- the runs ---- */

static void bench_baselines_and_session(double *bare_median)
{
        double *a = calloc((size_t)rounds, sizeof(double)), *b = calloc((size_t)rounds, 8),
               *c = calloc((size_t)rounds, sizeof(double));
        struct repl repl;
        struct cage_spec spec;
        struct cage_box *box = NULL;
        struct cage_session *s = NULL;
        struct cage_error err = {0};
        cage_spec_init(&spec);
        if (repl_start(&repl) < 0 || cage_box_start(&spec, &box, &err) < 0 ||
            cage_session_start(box, NULL, &s, &err) < 0) {
                fprintf(stderr, "bench: setup failed: %s\n", err.message);
                exit(1);
        }
        struct cage_session_run warm = {
                .code = "x = 1", .code_len = 5, .timeout_ms = 10000, .cancel_fd = -1};
        json_t *res = NULL;
        cage_session_run(s, &warm, &res, &err);
        json_decref(res);
        /* Interleaved in blocks: a round trip is measured among round trips
         * (as a client issues them), not right after a 30 ms process spawn
         * that has just evicted every cache. */
        for (int i = 0; i < rounds; i += BLOCK) {
                for (int j = i; j < i + BLOCK && j < rounds; j++)
                        b[j] = repl_round_ms(&repl);
                for (int j = i; j < i + BLOCK && j < rounds; j++)
                        c[j] = session_round_ms(s);
                for (int j = i; j < i + BLOCK && j < rounds; j += BLOCK)
                        a[j / BLOCK] = bare_python_ms();
        }
        printf("round trips (%d rounds, interleaved in blocks of %d):\n", rounds, BLOCK);
        report("bare python3 -c 'print(1)'", a, (rounds + BLOCK - 1) / BLOCK);
        report("python REPL loop over pipes", b, rounds);
        report("session x + 1 (C API)", c, rounds);
        *bare_median = median(a, (rounds + BLOCK - 1) / BLOCK);
        printf("  session overhead over the pipe REPL: %.3f ms   (bar: session < 0.3 ms)\n",
               median(c, rounds) - median(b, rounds));
        cage_session_free(s);
        cage_box_destroy(box);
        fclose(repl.in);
        fclose(repl.out);
        waitpid(repl.pid, NULL, 0);
        free(a);
        free(b);
        free(c);
}

static void bench_oneshot(struct cage_service *svc, double bare)
{
        int n = rounds / 20 ? rounds / 20 : 1;
        double *p = calloc((size_t)n, sizeof(double)), *c = calloc((size_t)n, sizeof(double));
        for (int i = 0; i < n; i++) {
                wait_pool(svc);
                p[i] = oneshot_ms(svc, "{\"code\": \"print(1)\"}");
                c[i] = oneshot_ms(svc, "{\"code\": \"print(1)\", \"memory_mib\": 256}");
        }
        printf("one-shot print(1) (%d rounds):\n", n);
        report("pooled (pool warm)", p, n);
        report("cold (policy no pool serves)", c, n);
        printf("  ratio pooled/bare %.2fx (bar: < 0.25x)   cold/bare %.2fx\n", median(p, n) / bare,
               median(c, n) / bare);
        free(p);
        free(c);
}

static void bench_throughput(struct cage_service *svc)
{
        struct load l[2];
        pthread_t t[2];
        double until = now_ms() + seconds * 1000.0;
        for (int i = 0; i < 2; i++) {
                l[i] = (struct load){.svc = svc, .until = until};
                pthread_create(&t[i], NULL, load_main, &l[i]);
        }
        for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
        json_t *st = cage_service_pool_stats(svc);
        char *stats = json_dumps(st, JSON_COMPACT);
        printf("sustained one-shot throughput, 2 client threads, %d s:\n", seconds);
        printf("  %.1f runs/s (%d failed); pool %s\n", (l[0].runs + l[1].runs) / (double)seconds,
               l[0].failed + l[1].failed, stats);
        free(stats);
        json_decref(st);
}

/* Where a fresh sandbox's time goes: the pool pays this per run. */
static void bench_breakdown(void)
{
        enum { N = 10 };
        double box[N], sess[N], first[N], destroy[N];
        struct cage_spec spec;
        struct cage_error err = {0};
        cage_spec_init(&spec);
        for (int i = 0; i < N; i++) {
                struct cage_box *b = NULL;
                struct cage_session *s = NULL;
                double t0 = now_ms();
                if (cage_box_start(&spec, &b, &err) < 0)
                        break;
                double t1 = now_ms();
                if (cage_session_start(b, NULL, &s, &err) < 0)
                        break;
                double t2 = now_ms();
                first[i] = session_round_ms(s);
                double t3 = now_ms();
                cage_session_free(s);
                cage_box_destroy(b);
                box[i] = t1 - t0;
                sess[i] = t2 - t1;
                destroy[i] = now_ms() - t3;
        }
        printf("a fresh sandbox with a session, by phase (%d rounds):\n", N);
        report("sandbox start (namespaces, cgroup)", box, N);
        report("python3 + session driver ready", sess, N);
        report("first run (x + 1)", first, N);
        report("teardown (session, cgroups)", destroy, N);
}

static void bench_memory(void)
{
        struct cage_box **boxes = calloc((size_t)n_sessions, sizeof(*boxes));
        struct cage_session **sessions = calloc((size_t)n_sessions, sizeof(*sessions));
        struct cage_spec spec;
        struct cage_error err = {0};
        cage_spec_init(&spec);
        sleep(1);
        long before = mem_available_kib();
        int live = 0;
        for (; live < n_sessions; live++)
                if (cage_box_start(&spec, &boxes[live], &err) < 0 ||
                    cage_session_start(boxes[live], NULL, &sessions[live], &err) < 0) {
                        fprintf(stderr, "bench: session %d: %s\n", live, err.message);
                        break;
                }
        sleep(2);
        long after = mem_available_kib();
        uint64_t charged = 0;
        for (int i = 0; i < live; i++) {
                struct cage_box_usage u;
                if (cage_box_usage(boxes[i], &u) == 0)
                        charged += u.memory_now_bytes;
        }
        printf("memory per idle session (%d live):\n", live);
        printf("  %.2f MiB each charged to the sandboxes' memory cgroups (bar: <= 6 MiB)\n",
               live ? (double)charged / 1048576.0 / live : 0);
        printf("  %.2f MiB each of MemAvailable (machine-wide, noisy; includes kernel objects)\n",
               live ? (double)(before - after) / 1024.0 / live : 0);
        for (int i = 0; i < live; i++) {
                cage_session_free(sessions[i]);
                cage_box_destroy(boxes[i]);
        }
        free(boxes);
        free(sessions);
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
                                             {"sessions", required_argument, NULL, 's'},
                                             {"seconds", required_argument, NULL, 't'},
                                             {"data", required_argument, NULL, 'd'},
                                             {"only", required_argument, NULL, 'o'},
                                             {0}};
        const char *only = NULL;
        for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
                if (c == 'r')
                        rounds = atoi(optarg);
                else if (c == 's')
                        n_sessions = atoi(optarg);
                else if (c == 't')
                        seconds = atoi(optarg);
                else if (c == 'd')
                        data_dir = optarg;
                else if (c == 'o')
                        only = optarg;
                else
                        return 2;
        }
        if (only && strcmp(only, "load") == 0) {
                mkdir(data_dir, 0700);
                bench_load();
                return 0;
        }
        char cfg_text[512];
        snprintf(cfg_text, sizeof(cfg_text),
                 "{\"data_dir\": \"%s\", \"pool_size\": 4, \"listen\": {\"unix\": null}}",
                 data_dir);
        struct cage_config *cfg = NULL;
        struct cage_service *svc = NULL;
        struct cage_error err = {0};
        if (cage_config_parse(cfg_text, strlen(cfg_text), &cfg, &err) < 0 ||
            cage_service_open(cfg, &svc, &err) < 0) {
                fprintf(stderr, "bench: %s\n", err.message);
                return 1;
        }
        double bare = 0;
        bench_baselines_and_session(&bare);
        bench_oneshot(svc, bare);
        bench_throughput(svc);
        bench_breakdown();
        bench_mcp(svc);
        bench_load();
        bench_memory();
        cage_service_close(svc);
        cage_config_free(cfg);
        return 0;
}
