/* Python sessions through the C API (src/services/session.c with the
 * driver in runtime/python): state across runs, return values, errors,
 * output capture (including a child process's), interrupt with state kept,
 * an unstoppable loop reported as state_lost, host calls and their budget,
 * variables. Launches real sandboxes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/box.h"
#include "harness.h"
#include "services/session.h"

struct fixture {
        struct cage_box *box;
        struct cage_session *s;
};

static bool setup(struct fixture *f)
{
        struct cage_spec spec;
        struct cage_error err = {0};
        memset(f, 0, sizeof(*f));
        cage_spec_init(&spec);
        if (cage_box_start(&spec, &f->box, &err) < 0 ||
            cage_session_start(f->box, NULL, &f->s, &err) < 0) {
                fprintf(stderr, "  setup: %s\n", err.message);
                return false;
        }
        return true;
}

static void teardown(struct fixture *f)
{
        cage_session_free(f->s);
        cage_box_destroy(f->box);
}

static json_t *run(struct cage_session *s, const char *code, uint64_t timeout_ms,
                   cage_session_host_fn host, void *ctx, uint32_t budget)
{
        struct cage_session_run r = {.code = code,
                                     .code_len = strlen(code),
                                     .timeout_ms = timeout_ms,
                                     .grace_ms = 1000,
                                     .output_max_bytes = 65536,
                                     .host = host,
                                     .host_ctx = ctx,
                                     .host_budget = budget,
                                     .cancel_fd = -1};
        struct cage_error err = {0};
        json_t *res = NULL;
        if (cage_session_run(s, &r, &res, &err) < 0)
                fprintf(stderr, "  run: %s\n", err.message);
        return res;
}

static const char *str(json_t *o, const char *key)
{
        const char *v = json_string_value(json_object_get(o, key));
        return v ? v : "";
}

static const char *error_type(json_t *res)
{
        return json_string_value(json_object_get(json_object_get(res, "error"), "type"));
}

TEST(state_return_values_and_output)
{
        struct fixture f;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_t *r = run(f.s, "x = 41\nprint('hello')", 5000, NULL, NULL, 0);
        CHECK_STREQ(str(r, "status"), "ok");
        CHECK_STREQ(str(r, "stdout"), "hello\n");
        json_decref(r);
        r = run(f.s, "x + 1", 5000, NULL, NULL, 0);
        CHECK(json_integer_value(json_object_get(r, "return_value")) == 42);
        json_decref(r);
        r = run(f.s, "import subprocess\nsubprocess.run(['echo', 'from a child'])\nNone", 5000,
                NULL, NULL, 0);
        CHECK_STREQ(str(r, "stdout"), "from a child\n");
        json_decref(r);
        r = run(f.s, "object()", 5000, NULL, NULL, 0);
        CHECK(json_is_null(json_object_get(r, "return_value")));
        CHECK(strncmp(str(r, "return_repr"), "<object object at", 17) == 0);
        json_decref(r);
        teardown(&f);
}

TEST(errors_come_with_the_users_traceback)
{
        struct fixture f;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_t *r = run(f.s, "def f():\n    return 1 / 0\nf()", 5000, NULL, NULL, 0);
        CHECK_STREQ(str(r, "status"), "error");
        CHECK_STREQ(error_type(r), "ZeroDivisionError");
        const char *tb =
                json_string_value(json_object_get(json_object_get(r, "error"), "traceback"));
        CHECK(tb && strstr(tb, "return 1 / 0") && !strstr(tb, "codecage_session"));
        json_decref(r);
        r = run(f.s, "def broken(:\n", 5000, NULL, NULL, 0);
        CHECK_STREQ(error_type(r), "SyntaxError");
        json_decref(r);
        teardown(&f);
}

TEST(timeout_interrupts_and_keeps_state)
{
        struct fixture f;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_decref(run(f.s, "kept = 'yes'", 5000, NULL, NULL, 0));
        json_t *r = run(f.s, "while True: pass", 500, NULL, NULL, 0);
        CHECK_STREQ(str(r, "status"), "timeout");
        CHECK(json_is_false(json_object_get(r, "state_lost")));
        json_decref(r);
        r = run(f.s, "kept", 5000, NULL, NULL, 0);
        CHECK_STREQ(json_string_value(json_object_get(r, "return_value")), "yes");
        json_decref(r);
        teardown(&f);
}

TEST(unstoppable_code_loses_the_session_and_says_so)
{
        struct fixture f;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_t *r = run(f.s,
                        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                        "while True: pass",
                        500, NULL, NULL, 0);
        CHECK_STREQ(str(r, "status"), "timeout");
        CHECK(json_is_true(json_object_get(r, "state_lost")));
        CHECK(strstr(str(r, "reason"), "lost") != NULL);
        json_decref(r);
        CHECK(!cage_session_alive(f.s));
        teardown(&f);
}

static int echo_host(void *ctx, const char *fn, json_t *args, json_t *kwargs, json_t **value,
                     char **error)
{
        (void)kwargs;
        int *calls = ctx;
        (*calls)++;
        if (strcmp(fn, "llm_query") != 0) {
                *error = strdup("unknown function");
                return 0;
        }
        char buf[256];
        snprintf(buf, sizeof(buf), "answer to %s", json_string_value(json_array_get(args, 0)));
        *value = json_string(buf);
        return 0;
}

TEST(host_calls_and_their_budget)
{
        struct fixture f;
        int calls = 0;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_t *r = run(f.s, "llm_query('q1')", 5000, echo_host, &calls, 2);
        CHECK_STREQ(json_string_value(json_object_get(r, "return_value")), "answer to q1");
        json_decref(r);
        r = run(f.s, "[llm_query(str(i)) for i in range(3)]", 5000, echo_host, &calls, 2);
        CHECK_STREQ(error_type(r), "HostCallBudgetExceeded");
        CHECK(calls == 3); /* the third call never left the sandbox */
        json_decref(r);
        r = run(f.s, "llm_query('x')", 5000, NULL, NULL, 0);
        CHECK_STREQ(str(r, "status"), "error");
        json_decref(r);
        teardown(&f);
}

TEST(variables_round_trip)
{
        struct fixture f;
        struct cage_error err = {0};
        json_t *answer = NULL;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_t *set = json_pack("{s:s, s:s, s:{s:[i,i]}}", "op", "set", "name", "data", "value",
                                "k", 1, 2);
        CHECK(cage_session_request(f.s, set, NULL, 0, 5000, &answer, &err) == 0);
        json_decref(set);
        json_decref(answer);
        json_t *text = json_pack("{s:s, s:s}", "op", "set_text", "name", "context");
        CHECK(cage_session_request(f.s, text, "a long text", 11, 5000, &answer, &err) == 0);
        json_decref(text);
        json_decref(answer);
        json_t *r = run(f.s, "_hidden = 1\n(data['k'][1], len(context))", 5000, NULL, NULL, 0);
        CHECK(json_integer_value(json_array_get(json_object_get(r, "return_value"), 1)) == 11);
        json_decref(r);
        json_t *list = json_pack("{s:s}", "op", "list");
        CHECK(cage_session_request(f.s, list, NULL, 0, 5000, &answer, &err) == 0);
        json_t *vars = json_object_get(answer, "variables");
        CHECK(json_array_size(vars) == 2);
        size_t i;
        json_t *v;
        json_array_foreach(vars, i, v) CHECK(str(v, "name")[0] != '_');
        json_decref(list);
        json_decref(answer);
        json_t *get = json_pack("{s:s, s:s}", "op", "get", "name", "nope");
        CHECK(cage_session_request(f.s, get, NULL, 0, 5000, &answer, &err) == -EINVAL);
        json_decref(get);
        teardown(&f);
}

RUN_TESTS(T(state_return_values_and_output), T(errors_come_with_the_users_traceback),
          T(timeout_interrupts_and_keeps_state), T(unstoppable_code_loses_the_session_and_says_so),
          T(host_calls_and_their_budget), T(variables_round_trip))
