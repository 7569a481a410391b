/* Jobs: the tool calls of revision 2026-07-28, which has no requests from
 * server to client. Such a call runs on a thread of its own (a job, with
 * a stateless session and call of its own) while the request that
 * started it waits (a thread that finished a job waits JOB_THREAD_KEEP_S
 * for the next: no thread is started per call); the request is answered
 * when the job
 *   - ends: its result (the job is gone then, unless it is a task);
 *   - asks for input (llm_query's sampling, a fixture's elicitation):
 *     an InputRequiredResult with the requests and a requestState. The
 *     job stays paused, its sandbox alive, until the client calls the
 *     tool again with the inputResponses and that requestState, or until
 *     the run's timeout has passed since the job started (then the run
 *     is cancelled). A requestState is "<id>.<round>.<HMAC-SHA256>" over
 *     the tenant, the job id, the round and the tool name with a key
 *     drawn at random when the process starts: a tampered one fails its
 *     check, one of another tenant or tool fails it too, and one whose
 *     round was answered already (or whose job ended) names nothing;
 *   - is a task (the request declared the io.modelcontextprotocol/tasks
 *     extension and the tool supports tasks): a CreateTaskResult at once.
 *     tasks/get shows its status, the latest lines of its output, the
 *     input it waits for and, once it ended, its result; tasks/update
 *     answers its input requests (any subset at a time); tasks/cancel
 *     kills its run. An ended task is kept MCP_TASK_TTL_MS.
 *
 * One registry (process-wide: job ids are 128 random bits) under one
 * mutex; its condition variable is broadcast on every change of any job.
 * A tenant has at most MCP_JOBS_PER_TENANT_MAX jobs and keeps at most
 * MCP_TASK_BYTES_PER_TENANT_MAX bytes of ended tasks' results (the oldest
 * ended tasks make room). A job is freed under the mutex by a sweep once
 * its thread is done with it and no request waits on it (a task: once
 * its time is up). Lock order: the registry, then a session's lock.
 *
 * Builds made with -Dunsafe_debug=true stop checking, when
 * CODECAGE_DEBUG_DISABLE names them, the requestState's MAC
 * ("mcp-state-mac"), that its round is the one waiting
 * ("mcp-state-once") and that a job belongs to the request's tenant
 * ("mcp-job-tenant"), so the security suite can show each check is what
 * keeps an attacker out; normal builds have no such switch. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "services/config.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/kept_threads.h"

#define JOB_ID_LEN        32 /* lowercase hex */
#define MAC_LEN           32
#define STATE_MAX         (JOB_ID_LEN + 1 + 10 + 1 + 2 * MAC_LEN)
#define WAIT_SLICE_MS     100
#define JOB_THREAD_KEEP_S 30   /* an idle job thread waits this long for another job */
#define TAIL_MAX          2048 /* bytes of output kept for tasks/get */
#define TOOL_NAME_MAX     128
#define ERR_MISSING       (-32021)

enum job_state { WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED };
static const char *const state_names[] = {"working", "input_required", "completed", "failed",
                                          "cancelled"};

struct mcp_job {
        struct mcp_job *next;
        struct mcp_sink sink; /* the job call's messages go to the waiting request */
        struct mcp_server *srv;
        char id[JOB_ID_LEN + 1];
        char tenant[CAGE_CONFIG_TENANT_NAME_MAX + 1];
        char tool[TOOL_NAME_MAX + 1];
        bool task;
        bool may_task;  /* the request allows a task, the tool decides when */
        bool announced; /* a CreateTaskResult went out */
        bool done;      /* its thread is finished with it */
        bool cancelled; /* tasks/cancel, its request left, the server stops */
        bool timed_out; /* no input came within the run's timeout */
        enum job_state state;
        uint32_t round;          /* of the input requests; a requestState names it */
        json_t *requests;        /* the input requests still unanswered */
        json_t *responses;       /* the answers gathered so far */
        json_t *answer;          /* the job call's JSON-RPC response, once ended */
        json_t *seed;            /* inputResponses of the first request: its first ask's */
        struct mcp_call *call;   /* while it runs */
        struct mcp_call *waiter; /* the request waiting on it */
        int waiters, sending;
        uint64_t input_deadline;  /* monotonic ms: start + the run's timeout */
        uint64_t expires;         /* monotonic ms: an ended task is dropped */
        int64_t created, updated; /* wall ms */
        size_t bytes;             /* of its answer, counted against the tenant */
        char tail[TAIL_MAX + 1];
        size_t tail_len;
};

static bool switched_off(const char *check)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, check))
                return true;
#endif
        (void)check;
        return false;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;
/* Threads that ran a job wait JOB_THREAD_KEEP_S for the next one: a call
 * is then handed over instead of paying for a thread's start and end. */
static struct kept_threads job_threads;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct mcp_job *jobs;
static unsigned char mac_key[32];
static bool key_ok;

static void init_once(void)
{
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&changed, &attr);
        pthread_condattr_destroy(&attr);
        kept_threads_init(&job_threads, JOB_THREAD_KEEP_S);
        key_ok = getrandom(mac_key, sizeof(mac_key), 0) == (ssize_t)sizeof(mac_key);
}

static void wait_slice(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&changed, &lock, &ts);
}

/* ---- the registry (with the lock held) ------------------------------------------- */

static void job_free(struct mcp_job *j)
{
        json_decref(j->requests);
        json_decref(j->responses);
        json_decref(j->answer);
        json_decref(j->seed);
        free(j);
}

static void unlink_job(struct mcp_job *j)
{
        for (struct mcp_job **p = &jobs; *p; p = &(*p)->next)
                if (*p == j) {
                        *p = j->next;
                        return;
                }
}

static bool sweepable(const struct mcp_job *j, uint64_t now)
{
        if (!j->done || j->waiters || j->sending)
                return false;
        return !j->task || now >= j->expires;
}

static void sweep(void)
{
        uint64_t now = clock_mono_ms();
        for (struct mcp_job **p = &jobs; *p;) {
                struct mcp_job *j = *p;
                if (sweepable(j, now)) {
                        *p = j->next;
                        job_free(j);
                } else {
                        p = &j->next;
                }
        }
}

static struct mcp_job *find(const char *tenant, const char *id)
{
        bool any_tenant = switched_off("mcp-job-tenant");
        for (struct mcp_job *j = jobs; j; j = j->next)
                if (strcmp(j->id, id) == 0 && (any_tenant || strcmp(j->tenant, tenant) == 0))
                        return j;
        return NULL;
}

/* The oldest ended task of tenant that nobody waits on, or NULL. */
static struct mcp_job *oldest_ended(const char *tenant)
{
        struct mcp_job *best = NULL;
        for (struct mcp_job *j = jobs; j; j = j->next)
                if (strcmp(j->tenant, tenant) == 0 && j->done && !j->waiters && !j->sending &&
                    (!best || j->updated < best->updated))
                        best = j;
        return best;
}

static void tenant_usage(const char *tenant, size_t *count, size_t *bytes)
{
        *count = *bytes = 0;
        for (struct mcp_job *j = jobs; j; j = j->next)
                if (strcmp(j->tenant, tenant) == 0) {
                        (*count)++;
                        *bytes += j->bytes;
                }
}

/* Drops the oldest ended tasks of tenant until it has room for one more
 * job (extra = 1) or for `extra` more bytes; false if it cannot. */
static bool make_room(const char *tenant, size_t jobs_more, size_t bytes_more)
{
        for (;;) {
                size_t count, bytes;
                tenant_usage(tenant, &count, &bytes);
                if (count + jobs_more <= MCP_JOBS_PER_TENANT_MAX &&
                    bytes + bytes_more <= MCP_TASK_BYTES_PER_TENANT_MAX)
                        return true;
                struct mcp_job *old = oldest_ended(tenant);
                if (!old)
                        return false;
                unlink_job(old);
                job_free(old);
        }
}

/* ---- requestState ------------------------------------------------------------------ */

static int mac_of(const struct mcp_job *j, const char *tenant, const char *id, uint32_t round,
                  const char *tool, unsigned char out[MAC_LEN])
{
        char buf[CAGE_CONFIG_TENANT_NAME_MAX + JOB_ID_LEN + TOOL_NAME_MAX + 32];
        int n = snprintf(buf, sizeof(buf), "%s%c%s%c%" PRIu32 "%c%s", tenant, 0, id, 0, round, 0,
                         tool);
        unsigned len = MAC_LEN;
        (void)j;
        if (!key_ok || n < 0 || (size_t)n >= sizeof(buf))
                return -EINVAL;
        if (!HMAC(EVP_sha256(), mac_key, sizeof(mac_key), (unsigned char *)buf, (size_t)n, out,
                  &len) ||
            len != MAC_LEN)
                return -EIO;
        return 0;
}

static char *state_of(const struct mcp_job *j)
{
        unsigned char mac[MAC_LEN];
        char *s = malloc(STATE_MAX + 1);
        if (!s || mac_of(j, j->tenant, j->id, j->round, j->tool, mac) < 0) {
                free(s);
                return NULL;
        }
        int n = snprintf(s, STATE_MAX + 1, "%s.%" PRIu32 ".", j->id, j->round);
        for (size_t i = 0; i < MAC_LEN; i++)
                n += snprintf(s + n, STATE_MAX + 1 - (size_t)n, "%02x", mac[i]);
        return s;
}

static bool is_hex(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Takes a requestState apart and checks its MAC: 0 with id and round,
 * else -EBADMSG. */
static int state_check(const char *state, const char *tenant, const char *tool,
                       char id[JOB_ID_LEN + 1], uint32_t *round)
{
        size_t len = strnlen(state, STATE_MAX + 1);
        const char *dot = len > JOB_ID_LEN ? state + JOB_ID_LEN : NULL;
        const char *dot2 = dot && *dot == '.' ? strchr(dot + 1, '.') : NULL;
        if (len > STATE_MAX || !dot2 || !is_hex(state, JOB_ID_LEN) ||
            strlen(dot2 + 1) != 2 * MAC_LEN || !is_hex(dot2 + 1, 2 * MAC_LEN) ||
            dot2 - dot - 1 < 1 || dot2 - dot - 1 > 10 || strlen(tool) > TOOL_NAME_MAX)
                return -EBADMSG;
        char digits[11];
        memcpy(digits, dot + 1, (size_t)(dot2 - dot - 1));
        digits[dot2 - dot - 1] = '\0';
        char *end;
        unsigned long long r = strtoull(digits, &end, 10);
        if (*end || r > UINT32_MAX || (digits[0] == '0' && digits[1]))
                return -EBADMSG;
        memcpy(id, state, JOB_ID_LEN);
        id[JOB_ID_LEN] = '\0';
        unsigned char mac[MAC_LEN], given[MAC_LEN];
        for (size_t i = 0; i < MAC_LEN; i++) {
                unsigned v;
                sscanf(dot2 + 1 + 2 * i, "%2x", &v);
                given[i] = (unsigned char)v;
        }
        if (mac_of(NULL, tenant, id, (uint32_t)r, tool, mac) < 0 ||
            (CRYPTO_memcmp(mac, given, MAC_LEN) != 0 && !switched_off("mcp-state-mac")))
                return -EBADMSG;
        *round = (uint32_t)r;
        return 0;
}

/* ---- results ------------------------------------------------------------------------- */

static char *iso_time(int64_t ms)
{
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        char buf[40];
        gmtime_r(&t, &tm);
        size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
        return strdup(buf);
}

static json_t *task_base(const struct mcp_job *j)
{
        _cleanup_free_ char *created = iso_time(j->created), *updated = iso_time(j->updated);
        return json_pack("{s:s, s:s, s:s?, s:s?, s:i, s:i}", "taskId", j->id, "status",
                         state_names[j->state], "createdAt", created, "lastUpdatedAt", updated,
                         "ttlMs", MCP_TASK_TTL_MS, "pollIntervalMs", MCP_TASK_POLL_MS);
}

static json_t *input_required(const struct mcp_job *j)
{
        _cleanup_free_ char *state = state_of(j);
        if (!state)
                return NULL;
        /* A copy: the reply is written out after the lock is released,
         * while tasks/update may delete from j->requests. */
        return json_pack("{s:s, s:o, s:s}", "resultType", "input_required", "inputRequests",
                         json_deep_copy(j->requests), "requestState", state);
}

/* The job's answer as the answer to request id. */
static json_t *answer_for(const json_t *id, const json_t *answer)
{
        const json_t *result = json_object_get(answer, "result");
        const json_t *error = json_object_get(answer, "error");
        if (result)
                return jsonrpc_result(id, json_deep_copy(result));
        if (error)
                return json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", id, "error", error);
        return jsonrpc_error(id, JSONRPC_INTERNAL_ERROR, "Internal error");
}

/* ---- the job's thread ------------------------------------------------------------------ */

static int job_send(struct mcp_sink *sink, const json_t *msg)
{
        struct mcp_job *j = (struct mcp_job *)((char *)sink - offsetof(struct mcp_job, sink));
        pthread_mutex_lock(&lock);
        struct mcp_call *w = j->waiter;
        if (w)
                j->sending++;
        pthread_mutex_unlock(&lock);
        if (!w)
                return 0; /* nobody listens: a task is polled */
        (void)w->sink->send(w->sink, msg);
        pthread_mutex_lock(&lock);
        j->sending--;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        return 0;
}

static void run_job(void *arg)
{
        struct mcp_job *j = arg;
        json_t *answer = mcp_call_run(j->call);
        pthread_mutex_lock(&lock);
        struct mcp_call *call = TAKE_PTR(j->call);
        pthread_mutex_unlock(&lock);
        mcp_call_free(call);
        size_t bytes = 0;
        if (answer && j->may_task) { /* what a task keeps counts against its tenant */
                _cleanup_free_ char *text = json_dumps(answer, JSON_COMPACT);
                bytes = text ? strlen(text) : 0;
        }
        pthread_mutex_lock(&lock);
        j->answer = answer;
        j->state = !answer || j->cancelled            ? CANCELLED
                   : json_object_get(answer, "error") ? FAILED
                                                      : COMPLETED;
        json_decref(TAKE_PTR(j->requests));
        if (j->task && !make_room(j->tenant, 0, bytes)) {
                json_auto_t *id = json_string("job");
                json_decref(j->answer);
                j->answer = jsonrpc_error(id, JSONRPC_INTERNAL_ERROR,
                                          "the task's result is larger than this server keeps");
                j->state = FAILED;
                bytes = 0;
        }
        j->bytes = j->task ? bytes : 0;
        j->updated = clock_wall_ms();
        j->expires = clock_mono_ms() + MCP_TASK_TTL_MS;
        j->done = true;
        pthread_cond_broadcast(&changed);
        sweep();
        pthread_mutex_unlock(&lock);
}

/* Under the lock: j runs on a kept thread, or on a new one. */
static int run_on_a_thread(struct mcp_job *j)
{
        return kept_threads_run(&job_threads, run_job, j);
}

/* ---- starting one ---------------------------------------------------------------------- */

static bool declares_tasks(const json_t *params)
{
        const json_t *caps = json_object_get(json_object_get(params, "_meta"), MCP_META_CAPS);
        return json_is_object(
                json_object_get(json_object_get(caps, "extensions"), MCP_TASKS_EXTENSION));
}

static uint64_t timeout_ms_of(const struct mcp_server *srv, const json_t *args)
{
        const json_t *t = json_object_get(args, "timeout_s");
        const struct cage_config *cfg = cage_service_config(srv->svc);
        uint64_t s = cfg->defaults.timeout_s;
        if (json_is_integer(t) && json_integer_value(t) > 0 &&
            (uint64_t)json_integer_value(t) <= cfg->limits.timeout_s_max)
                s = (uint64_t)json_integer_value(t);
        uint64_t ms = s * 1000;
        return ms < MCP_CLIENT_WAIT_MS ? ms : MCP_CLIENT_WAIT_MS;
}

static int new_id(char id[JOB_ID_LEN + 1])
{
        unsigned char raw[JOB_ID_LEN / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(id + 2 * i, 3, "%02x", raw[i]);
        return 0;
}

/* The job's own call of the tool: the request's params without the
 * fields of a retry. */
static int job_call(struct mcp_job *j, const json_t *params)
{
        json_auto_t *p = json_deep_copy(params);
        if (!p)
                return -ENOMEM;
        json_object_del(p, "requestState");
        json_object_del(p, "inputResponses");
        json_object_del(p, "task");
        json_auto_t *msg = json_pack("{s:s, s:s, s:s, s:O}", "jsonrpc", "2.0", "id", "job",
                                     "method", "tools/call", "params", p);
        struct mcp_session *s = mcp_session_new_stateless(j->srv, j->tenant);
        if (!msg || !s) {
                mcp_session_unref(s);
                return -ENOMEM;
        }
        int r = mcp_call_new(s, &j->sink, msg, &j->call);
        mcp_session_unref(s); /* the call holds its own reference */
        if (r == 0)
                j->call->job = j;
        return r;
}

static json_t *refuse(const json_t *id, int code, const char *message)
{
        return jsonrpc_error(id, code, message);
}

static json_t *missing_tasks(const json_t *id, const char *what)
{
        json_t *a = jsonrpc_errorf(
                id, ERR_MISSING,
                "Missing required client capability: %s needs the " MCP_TASKS_EXTENSION
                " extension (declare it in clientCapabilities.extensions)",
                what);
        json_object_set_new(json_object_get(a, "error"), "data",
                            json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions",
                                      MCP_TASKS_EXTENSION));
        return a;
}

/* A new job for call c; with the lock held, it counts c as its waiter. */
static json_t *start(struct mcp_call *c, struct mcp_job **ret)
{
        struct mcp_session *s = c->session;
        const char *tool = json_string_value(json_object_get(c->params, "name"));
        const char *support = tool ? mcp_providers_task_support(s->srv, tool) : "forbidden";
        bool tasks = declares_tasks(c->params);
        if (strcmp(support, "required") == 0 && !tasks)
                return missing_tasks(c->id, "this tool");
        struct mcp_job *j = calloc(1, sizeof(*j));
        if (!j || new_id(j->id) < 0) {
                free(j);
                return refuse(c->id, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
        }
        j->sink.send = job_send;
        j->srv = s->srv;
        j->may_task = tasks && strcmp(support, "forbidden") != 0;
        j->task = j->may_task && !mcp_providers_task_later(s->srv, tool ? tool : "");
        snprintf(j->tenant, sizeof(j->tenant), "%s", s->tenant);
        snprintf(j->tool, sizeof(j->tool), "%.*s", TOOL_NAME_MAX, tool ? tool : "");
        j->created = j->updated = clock_wall_ms();
        j->input_deadline =
                clock_mono_ms() + timeout_ms_of(s->srv, json_object_get(c->params, "arguments"));
        const json_t *seed = json_object_get(c->params, "inputResponses");
        if (json_is_object(seed))
                j->seed = json_deep_copy(seed);
        if (job_call(j, c->params) < 0) {
                mcp_call_free(j->call);
                free(j);
                return refuse(c->id, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
        }
        pthread_mutex_lock(&lock);
        sweep();
        if (!make_room(j->tenant, 1, 0)) {
                pthread_mutex_unlock(&lock);
                mcp_call_free(j->call);
                free(j);
                return refuse(c->id, JSONRPC_INTERNAL_ERROR,
                              "Server busy: this tenant has too many running or paused tool "
                              "calls and tasks; wait for some to end or cancel them");
        }
        j->next = jobs;
        jobs = j;
        j->waiters = 1;
        if (run_on_a_thread(j) < 0) {
                unlink_job(j);
                pthread_mutex_unlock(&lock);
                mcp_call_free(j->call);
                free(j);
                return refuse(c->id, JSONRPC_INTERNAL_ERROR, "Internal error: no thread");
        }
        *ret = j;
        return NULL; /* the lock stays held */
}

/* Takes the answers to pending requests out of responses (extra keys,
 * and values that are not objects, are ignored). */
static void take_responses(struct mcp_job *j, const json_t *responses)
{
        const char *key;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(j->requests, tmp, key, v)
        {
                const json_t *r = json_object_get(responses, key);
                if (!json_is_object(r))
                        continue;
                json_object_set(j->responses, key, (json_t *)r);
                json_object_del(j->requests, key);
        }
        j->updated = clock_wall_ms();
        if (json_object_size(j->requests) == 0) {
                j->state = WORKING;
                pthread_cond_broadcast(&changed);
        }
}

/* A retry with requestState; with the lock held, it counts c as a waiter
 * of the job. */
static json_t *resume(struct mcp_call *c, struct mcp_job **ret)
{
        const json_t *state = json_object_get(c->params, "requestState");
        const json_t *responses = json_object_get(c->params, "inputResponses");
        const char *tool = json_string_value(json_object_get(c->params, "name"));
        char id[JOB_ID_LEN + 1];
        uint32_t round;
        if (!json_is_string(state) || !tool ||
            state_check(json_string_value(state), c->session->tenant, tool, id, &round) < 0)
                return refuse(c->id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: requestState failed its integrity check (it must "
                              "be sent back exactly as this server gave it, with the same tool)");
        if (responses && !json_is_object(responses))
                return refuse(c->id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: inputResponses must be an object keyed by the "
                              "inputRequests' keys");
        pthread_mutex_lock(&lock);
        struct mcp_job *j = find(c->session->tenant, id);
        if (!j || j->task || j->state != INPUT_REQUIRED ||
            (j->round != round && !switched_off("mcp-state-once"))) {
                pthread_mutex_unlock(&lock);
                return refuse(c->id, JSONRPC_INVALID_PARAMS,
                              "Invalid params: requestState names no paused call (its input was "
                              "sent already, or the call ended or timed out); call the tool "
                              "again without requestState");
        }
        j->round++; /* this requestState is spent */
        take_responses(j, responses);
        j->waiters++;
        *ret = j;
        return NULL;
}

/* ---- waiting ---------------------------------------------------------------------------- */

static void cancel_job(struct mcp_job *j)
{
        j->cancelled = true;
        if (j->call)
                mcp_call_cancel(j->call);
        pthread_cond_broadcast(&changed);
}

/* With the lock held and c counted as a waiter: what to answer c. */
static json_t *wait_job(struct mcp_call *c, struct mcp_job *j)
{
        json_t *answer = NULL;
        j->waiter = c;
        for (;;) {
                if (j->task) {
                        json_t *r = task_base(j);
                        if (r)
                                json_object_set_new(r, "resultType", json_string("task"));
                        answer = r ? jsonrpc_result(c->id, r) : NULL;
                        j->announced = true;
                        pthread_cond_broadcast(&changed);
                        break;
                }
                if (j->done) {
                        answer = answer_for(c->id, j->answer);
                        break;
                }
                if (j->state == INPUT_REQUIRED && json_object_size(j->requests)) {
                        json_t *r = input_required(j);
                        answer = r ? jsonrpc_result(c->id, r) : NULL;
                        break;
                }
                if (mcp_call_cancelled(c)) {
                        cancel_job(j);
                        break;
                }
                wait_slice();
        }
        j->waiter = NULL;
        while (j->sending)
                wait_slice();
        j->waiters--;
        sweep();
        return answer;
}

json_t *mcp_job_call(struct mcp_call *c)
{
        struct mcp_job *j = NULL;
        pthread_once(&once, init_once);
        json_t *refused = json_object_get(c->params, "requestState") ? resume(c, &j) : start(c, &j);
        if (refused)
                return refused;
        json_t *answer = wait_job(c, j);
        pthread_mutex_unlock(&lock);
        if (!answer && !mcp_call_cancelled(c))
                answer = jsonrpc_error(c->id, JSONRPC_INTERNAL_ERROR,
                                       "Internal error: out of memory");
        return answer;
}

/* ---- the tool's side ---------------------------------------------------------------------- */

int mcp_job_input(struct mcp_job *j, json_t *requests, json_t **responses, char **error)
{
        pthread_mutex_lock(&lock);
        if (j->cancelled) {
                pthread_mutex_unlock(&lock);
                json_decref(requests);
                *error = strdup("the tool call was cancelled");
                return -1;
        }
        json_decref(j->requests);
        json_decref(j->responses);
        j->requests = requests;
        j->responses = json_object();
        j->state = INPUT_REQUIRED;
        j->round++;
        if (j->seed) { /* the first request brought answers along */
                take_responses(j, j->seed);
                json_decref(TAKE_PTR(j->seed));
        }
        j->updated = clock_wall_ms();
        pthread_cond_broadcast(&changed);
        while (j->state == INPUT_REQUIRED && !j->cancelled && clock_mono_ms() < j->input_deadline)
                wait_slice();
        int r = 0;
        if (j->state == INPUT_REQUIRED) {
                j->timed_out = !j->cancelled;
                j->state = WORKING;
                j->round++;
                json_decref(TAKE_PTR(j->requests));
                cancel_job(j);
                *error = strdup(j->timed_out ? "the MCP client did not send the input within the "
                                               "run's timeout"
                                             : "the tool call was cancelled");
                r = -1;
        } else {
                *responses = TAKE_PTR(j->responses);
        }
        j->updated = clock_wall_ms();
        pthread_mutex_unlock(&lock);
        if (r == 0 && !*responses)
                r = -1, *error = strdup("out of memory");
        return r;
}

void mcp_call_escalate(struct mcp_call *c)
{
        struct mcp_job *j = c->job;
        if (!j)
                return;
        pthread_mutex_lock(&lock);
        if (j->may_task && !j->task) {
                j->task = true;
                pthread_cond_broadcast(&changed);
                while (!j->announced && j->waiters && !j->cancelled)
                        wait_slice();
        }
        pthread_mutex_unlock(&lock);
}

void mcp_job_output(struct mcp_job *j, const void *buf, size_t len)
{
        pthread_mutex_lock(&lock);
        if (len >= TAIL_MAX) {
                memcpy(j->tail, (const char *)buf + len - TAIL_MAX, TAIL_MAX);
                j->tail_len = TAIL_MAX;
        } else {
                size_t keep = j->tail_len + len > TAIL_MAX ? TAIL_MAX - len : j->tail_len;
                memmove(j->tail, j->tail + j->tail_len - keep, keep);
                memcpy(j->tail + keep, buf, len);
                j->tail_len = keep + len;
        }
        j->tail[j->tail_len] = '\0';
        j->updated = clock_wall_ms();
        pthread_mutex_unlock(&lock);
}

/* ---- tasks/get, tasks/update, tasks/cancel ---------------------------------------------- */

/* The task of params.taskId for the request's tenant, with the lock
 * held; NULL with e (the lock released). */
static struct mcp_job *task_of(struct mcp_session *s, const json_t *params, const char *method,
                               struct mcp_error *e)
{
        const char *id = json_string_value(json_object_get(params, "taskId"));
        pthread_once(&once, init_once);
        if (!declares_tasks(params)) {
                e->code = ERR_MISSING;
                snprintf(e->message, sizeof(e->message),
                         "Missing required client capability: %s needs the " MCP_TASKS_EXTENSION
                         " extension",
                         method);
                e->data = json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions",
                                    MCP_TASKS_EXTENSION);
                return NULL;
        }
        if (!id) {
                mcp_fail(e, JSONRPC_INVALID_PARAMS, "%s: params.taskId (a string) is required",
                         method);
                return NULL;
        }
        pthread_mutex_lock(&lock);
        sweep();
        struct mcp_job *j = find(s->tenant, id);
        if (!j || !j->task) {
                pthread_mutex_unlock(&lock);
                mcp_fail(e, JSONRPC_INVALID_PARAMS,
                         "%s: no task %.64s (unknown, or its results "
                         "were dropped after %d s)",
                         method, id, MCP_TASK_TTL_MS / 1000);
                return NULL;
        }
        return j;
}

static char *latest_lines(const struct mcp_job *j)
{
        const char *start = j->tail;
        int lines = 0;
        for (const char *p = j->tail + j->tail_len; p > j->tail; p--)
                if (p[-1] == '\n' && p != j->tail + j->tail_len && ++lines == 5) {
                        start = p;
                        break;
                }
        size_t n = (size_t)(j->tail + j->tail_len - start);
        char *s = malloc(n + 1);
        if (!s)
                return NULL;
        for (size_t i = 0; i < n; i++) /* control characters and invalid UTF-8 are harmless here: */
                s[i] = (start[i] < 0x20 && start[i] != '\n' && start[i] != '\t') ? ' ' : start[i];
        s[n] = '\0';
        if (!mcp_utf8_valid(s, n)) { /* a multi-byte character cut at the start */
                size_t skip = 0;
                while (skip < n && ((unsigned char)s[skip] & 0xc0) == 0x80)
                        skip++;
                memmove(s, s + skip, n - skip + 1);
                if (!mcp_utf8_valid(s, strlen(s)))
                        s[0] = '\0';
        }
        return s;
}

json_t *mcp_tasks_get(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        struct mcp_job *j = task_of(s, params, "tasks/get", e);
        if (!j)
                return NULL;
        json_t *r = task_base(j);
        _cleanup_free_ char *lines = j->tail_len ? latest_lines(j) : NULL;
        if (r && lines && *lines)
                json_object_set_new(r, "statusMessage", json_string(lines));
        if (r && j->timed_out)
                json_object_set_new(r, "statusMessage",
                                    json_string("cancelled: no input came within the run's "
                                                "timeout"));
        /* Copies, never the job's own objects: r is written out after the
         * lock is released, while tasks/update deletes from j->requests. */
        if (r && j->state == INPUT_REQUIRED && json_object_size(j->requests))
                json_object_set_new(r, "inputRequests", json_deep_copy(j->requests));
        const json_t *result = json_object_get(j->answer, "result");
        const json_t *error = json_object_get(j->answer, "error");
        if (r && j->done && result && j->state != FAILED) {
                json_t *copy = json_deep_copy(result);
                json_object_del(copy, "resultType");
                json_object_set_new(r, "result", copy);
        }
        if (r && j->done && error)
                json_object_set_new(r, "error", json_deep_copy(error));
        pthread_mutex_unlock(&lock);
        return r;
}

json_t *mcp_tasks_update(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        const json_t *responses = json_object_get(params, "inputResponses");
        struct mcp_job *j = task_of(s, params, "tasks/update", e);
        if (!j)
                return NULL;
        if (responses && !json_is_object(responses)) {
                pthread_mutex_unlock(&lock);
                return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                "tasks/update: params.inputResponses must be an object");
        }
        if (j->state == INPUT_REQUIRED && responses)
                take_responses(j, responses);
        pthread_mutex_unlock(&lock);
        return json_object();
}

json_t *mcp_tasks_cancel(struct mcp_session *s, const json_t *params, struct mcp_error *e)
{
        struct mcp_job *j = task_of(s, params, "tasks/cancel", e);
        if (!j)
                return NULL;
        if (!j->done)
                cancel_job(j);
        pthread_mutex_unlock(&lock);
        return json_object();
}

/* ---- the server stops ---------------------------------------------------------------------- */

void mcp_jobs_stop(struct mcp_server *srv)
{
        pthread_once(&once, init_once);
        pthread_mutex_lock(&lock);
        for (struct mcp_job *j = jobs; j; j = j->next)
                if (j->srv == srv && !j->done)
                        cancel_job(j);
        for (;;) {
                bool busy = false;
                for (struct mcp_job *j = jobs; j; j = j->next)
                        busy |= j->srv == srv && (!j->done || j->waiters || j->sending);
                if (!busy)
                        break;
                wait_slice();
        }
        for (struct mcp_job **p = &jobs; *p;) {
                struct mcp_job *j = *p;
                if (j->srv == srv) {
                        *p = j->next;
                        job_free(j);
                } else {
                        p = &j->next;
                }
        }
        pthread_mutex_unlock(&lock);
}
