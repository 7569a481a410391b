/* Python sessions through the C API (src/services/session.c with the
 * driver in runtime/python): state across runs, return values, errors,
 * output capture (including a child process's), interrupt with state kept,
 * an unstoppable loop reported as state_lost, host calls and their budget,
 * variables, values the channel cannot carry. Launches real sandboxes; the
 * frame reader's own cases need none. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "core/box.h"
#include "harness.h"
#include "services/session.h"
#include "services/session_frame.h"

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

/* The message session_frame_take() makes of one frame holding json. */
static int take(const char *json, json_t **msg)
{
        struct session_frame_reader rd = {0};
        char frame[256];
        size_t len = strlen(json), off = 0, want;
        uint32_t hdr[2] = {htonl((uint32_t)len), 0};
        char *dst;
        int r = 0;
        memcpy(frame, hdr, 8);
        memcpy(frame + 8, json, len);
        *msg = NULL;
        while (r == 0 && (want = session_frame_want(&rd, &dst)) > 0) {
                memcpy(dst, frame + off, want);
                off += want;
                r = session_frame_got(&rd, want);
        }
        if (r == 0)
                r = session_frame_take(&rd, msg);
        session_frame_reset(&rd);
        return r;
}

TEST(frame_strings_may_hold_nul_but_not_the_op)
{
        json_t *msg = NULL;
        CHECK(take("{\"op\":\"done\",\"return_value\":\"a\\u0000b\"}", &msg) == 0);
        json_t *rv = json_object_get(msg, "return_value");
        CHECK(json_string_length(rv) == 3 && memcmp(json_string_value(rv), "a\0b", 3) == 0);
        json_decref(msg);
        CHECK(take("{\"op\":\"done\\u0000x\"}", &msg) == -EPROTO && !msg);
        /* What the driver must never send: jansson refuses it, and the
         * session would be lost. */
        CHECK(take("{\"op\":\"done\",\"return_value\":{\"a\\u0000\":1}}", &msg) == -EPROTO);
        CHECK(take("{\"op\":\"done\",\"return_value\":18446744073709551616}", &msg) == -EPROTO);
        CHECK(take("{\"op\":\"done\",\"return_value\":\"\\ud800\"}", &msg) == -EPROTO);
}

static int nested_host(void *ctx, const char *fn, json_t *args, json_t *kwargs, json_t **value,
                       char **error)
{
        (void)ctx, (void)fn, (void)args, (void)error;
        json_t *v = json_integer(0);
        for (json_int_t i = 0; i < json_integer_value(json_object_get(kwargs, "depth")); i++)
                v = json_pack("[o]", v);
        *value = v;
        return 0;
}

TEST(values_the_channel_cannot_carry_keep_the_session)
{
        struct fixture f;
        struct cage_error err = {0};
        json_t *answer = NULL;
        CHECK(setup(&f));
        if (!f.s)
                return teardown(&f);
        json_decref(run(f.s, "kept = 7", 5000, NULL, NULL, 0));
        json_t *r = run(f.s, "'a\\x00b'", 5000, NULL, NULL, 0);
        json_t *rv = json_object_get(r, "return_value");
        CHECK(json_string_length(rv) == 3 && memcmp(json_string_value(rv), "a\0b", 3) == 0);
        json_decref(r);
        r = run(f.s, "[2**64, '\\ud800']", 5000, NULL, NULL, 0);
        CHECK(json_is_null(json_object_get(r, "return_value")));
        CHECK_STREQ(str(r, "return_repr"), "[18446744073709551616, '\\ud800']");
        json_decref(r);
        /* A value nested deeper than the driver reads is refused before it is sent. */
        json_t *deep = json_integer(1);
        for (int i = 0; i < SESSION_DEPTH_MAX + 1; i++)
                deep = json_pack("[o]", deep);
        json_t *set = json_pack("{s:s, s:s, s:o}", "op", "set", "name", "deep", "value", deep);
        CHECK(cage_session_request(f.s, set, NULL, 0, 5000, &answer, &err) == -EINVAL);
        CHECK(strstr(err.message, "deep") != NULL);
        json_decref(set);
        /* So is a host's answer: the code gets an error. */
        int depth = SESSION_DEPTH_MAX;
        char code[128];
        snprintf(code, sizeof(code),
                 "v = tools.nest(depth=%d)\ntry:\n    tools.nest(depth=%d)\n"
                 "except HostCallError as e:\n    err = str(e)\n[kept, err]",
                 depth, depth + 1);
        r = run(f.s, code, 5000, nested_host, NULL, 2);
        CHECK_STREQ(str(r, "status"), "ok");
        rv = json_object_get(r, "return_value");
        const char *message = json_string_value(json_array_get(rv, 1));
        CHECK(json_integer_value(json_array_get(rv, 0)) == 7);
        CHECK(message && strstr(message, "nests"));
        json_decref(r);
        CHECK(cage_session_alive(f.s));
        teardown(&f);
}

RUN_TESTS(T(state_return_values_and_output), T(errors_come_with_the_users_traceback),
          T(timeout_interrupts_and_keeps_state), T(unstoppable_code_loses_the_session_and_says_so),
          T(host_calls_and_their_budget), T(variables_round_trip),
          T(frame_strings_may_hold_nul_but_not_the_op),
          T(values_the_channel_cannot_carry_keep_the_session))
