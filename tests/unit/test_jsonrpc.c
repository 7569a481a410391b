/* Unit tests for JSON-RPC framing (src/server/jsonrpc.c) and MCP's
 * dispatch of one message (mcp_receive, mcp_call_run): batches and
 * non-objects refused, invalid JSON, ids of every JSON type, requests,
 * notifications and responses told apart, the error codes of each
 * refusal, and which methods a server offers with and without the
 * conformance fixtures' provider. No service: only methods that need
 * none are called. */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "server/jsonrpc.h"
#include "server/mcp.h"
#include "server/mcp_fixtures.h"
#include "server/mcp_provider.h"
#include "services/config.h"

/* The error code of a JSON-RPC error response, or 0. */
static int error_code(const json_t *msg)
{
        return (int)json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));
}

static json_t *parse(const char *text, json_t **error)
{
        return jsonrpc_parse(text, strlen(text), error);
}

TEST(parse_accepts_one_object)
{
        json_t *error = NULL;
        json_t *msg = parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", &error);
        CHECK(json_is_object(msg));
        CHECK(error == NULL);
        json_decref(msg);
}

TEST(parse_refuses_batches_and_non_objects)
{
        const char *batches[] = {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", "[]",
                                 "[1, 2]"};
        for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
                json_t *error = NULL;
                CHECK(parse(batches[i], &error) == NULL);
                CHECK(error_code(error) == JSONRPC_INVALID_REQUEST);
                CHECK(json_is_null(json_object_get(error, "id")));
                CHECK_STREQ(json_string_value(json_object_get(error, "jsonrpc")), "2.0");
                json_decref(error);
        }
        /* A bare value is no JSON-RPC text at all. */
        const char *scalars[] = {"1", "\"ping\"", "null", "true"};
        for (size_t i = 0; i < sizeof(scalars) / sizeof(scalars[0]); i++) {
                json_t *error = NULL;
                CHECK(parse(scalars[i], &error) == NULL);
                CHECK(error_code(error) == JSONRPC_PARSE_ERROR);
                json_decref(error);
        }
}

TEST(parse_refuses_invalid_json)
{
        const char *texts[] = {"",
                               "{",
                               "{\"id\":1,}",
                               "{\"id\":1}{\"id\":2}",
                               "\xff\xfe",
                               "{\"a\":1,\"a\":2}" /* duplicate keys */};
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
                json_t *error = NULL;
                CHECK(parse(texts[i], &error) == NULL);
                CHECK(error_code(error) == JSONRPC_PARSE_ERROR);
                CHECK(json_is_null(json_object_get(error, "id")));
                json_decref(error);
        }
        json_t *error = NULL;
        CHECK(jsonrpc_parse("{\"id\":1}\0junk", 13, &error) == NULL); /* a NUL inside */
        CHECK(error_code(error) == JSONRPC_PARSE_ERROR);
        json_decref(error);
}

/* The kind of the message text. */
static enum jsonrpc_kind kind_of(const char *text)
{
        json_error_t jerr;
        json_t *msg = json_loads(text, 0, &jerr);
        const char *why = NULL;
        enum jsonrpc_kind k = jsonrpc_classify(msg, &why);
        CHECK((k == JSONRPC_INVALID) == (why != NULL));
        json_decref(msg);
        return k;
}

TEST(classify_ids_of_every_type)
{
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":-7,\"method\":\"m\"}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"m\"}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"\",\"method\":\"m\"}") == JSONRPC_REQUEST);
        const char *bad[] = {"null", "1.5", "true", "false", "[1]", "{}", "\"a\\u0000b\""};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[128];
                snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"m\"}",
                         bad[i]);
                CHECK(kind_of(text) == JSONRPC_INVALID);
        }
        char text[JSONRPC_ID_MAX + 64];
        snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":\"%0*d\",\"method\":\"m\"}",
                 JSONRPC_ID_MAX, 0);
        CHECK(kind_of(text) == JSONRPC_REQUEST); /* exactly the limit */
        snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":\"%0*d\",\"method\":\"m\"}",
                 JSONRPC_ID_MAX + 1, 0);
        CHECK(kind_of(text) == JSONRPC_INVALID);
}

TEST(classify_notifications_and_responses)
{
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}") ==
              JSONRPC_NOTIFICATION);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{}}") ==
              JSONRPC_NOTIFICATION);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}") == JSONRPC_RESPONSE);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":1}}") ==
              JSONRPC_RESPONSE);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{}}") ==
              JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"result\":{}}") == JSONRPC_INVALID); /* no id */
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1}") == JSONRPC_INVALID);
}

TEST(classify_refuses_bad_envelopes)
{
        const char *bad[] = {
                "{\"id\":1,\"method\":\"m\"}",                                    /* no version */
                "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"m\"}",                /* old version */
                "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"m\"}",                    /* not a string */
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}",                    /* method type */
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}",                 /* empty method */
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[1]}", /* positional */
                "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":\"x\"}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                CHECK(kind_of(bad[i]) == JSONRPC_INVALID);
        char text[JSONRPC_METHOD_MAX + 64];
        snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%0*d\"}",
                 JSONRPC_METHOD_MAX + 1, 0);
        CHECK(kind_of(text) == JSONRPC_INVALID);
}

TEST(id_keys_tell_types_apart)
{
        char a[JSONRPC_KEY_MAX], b[JSONRPC_KEY_MAX];
        json_t *five = json_integer(5), *five_s = json_string("5");
        CHECK(jsonrpc_id_key(five, a) == 0);
        CHECK(jsonrpc_id_key(five_s, b) == 0);
        CHECK_STREQ(a, "5");
        CHECK_STREQ(b, "\"5\"");
        json_decref(five);
        json_decref(five_s);
        json_t *quoted = json_string("\x01\"");
        CHECK(jsonrpc_id_key(quoted, a) == 0);
        CHECK_STREQ(a, "\"\\u0001\\\"\"");
        json_decref(quoted);
}

TEST(error_builder_cleans_the_message)
{
        json_t *id = json_string("q");
        json_t *e = jsonrpc_errorf(id, JSONRPC_INVALID_PARAMS, "bad \xff uri \x1b[2J");
        const char *msg =
                json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        CHECK(msg != NULL);
        CHECK(msg && !strchr(msg, '\x1b'));
        CHECK(error_code(e) == JSONRPC_INVALID_PARAMS);
        CHECK_STREQ(json_string_value(json_object_get(e, "id")), "q");
        json_decref(e);
        e = jsonrpc_error(NULL, JSONRPC_INTERNAL_ERROR, "x");
        CHECK(json_is_null(json_object_get(e, "id")));
        json_decref(e);
        json_decref(id);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static int no_send(struct mcp_sink *sink, const json_t *msg)
{
        return -EPIPE;
}

static struct mcp_sink sink = {.send = no_send};

struct fixture {
        struct cage_config *cfg;
        struct mcp_server *srv;
        struct mcp_session *s;
};

static bool setup(struct fixture *f, bool conformance)
{
        struct cage_error err = {0};
        struct mcp_options opts = {0};
        if (conformance)
                opts.providers[opts.n_providers++] = mcp_fixtures_provider_new;
        *f = (struct fixture){0};
        if (cage_config_defaults(&f->cfg, &err) < 0 ||
            mcp_server_new(f->cfg, NULL, &opts, &f->srv, &err) < 0) {
                fprintf(stderr, "  setup: %s\n", err.message);
                return false;
        }
        f->s = mcp_session_new(f->srv, "default");
        return f->s != NULL;
}

static void teardown(struct fixture *f)
{
        mcp_session_close(f->s);
        mcp_session_unref(f->s);
        mcp_server_free(f->srv);
        cage_config_free(f->cfg);
}

/* Sends text; returns the answer (NULL when there is none) and the route. */
static json_t *send_text(struct fixture *f, const char *text, enum mcp_route *route)
{
        json_error_t jerr;
        json_t *msg = json_loads(text, 0, &jerr), *answer = NULL;
        struct mcp_call *call = NULL;
        *route = mcp_receive(f->s, &sink, msg, &answer, &call, NULL);
        if (call) {
                answer = mcp_call_run(call);
                mcp_call_free(call);
        }
        json_decref(msg);
        return answer;
}

/* The error code of the answer to a request (0: a result). */
static int answer_code(struct fixture *f, const char *text)
{
        enum mcp_route route;
        json_t *answer = send_text(f, text, &route);
        CHECK(answer != NULL);
        int code = error_code(answer);
        CHECK(code != 0 || json_object_get(answer, "result"));
        json_decref(answer);
        return code;
}

static void initialize(struct fixture *f)
{
        CHECK(answer_code(f, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
                             "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}") == 0);
}

TEST(dispatch_before_and_after_initialize)
{
        struct fixture f;
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}") == 0);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}") ==
              JSONRPC_INVALID_REQUEST);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\"}") ==
              JSONRPC_INVALID_PARAMS);
        initialize(&f);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":"
                              "{\"protocolVersion\":\"2025-11-25\"}}") == JSONRPC_INVALID_REQUEST);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":\"t\",\"method\":\"tools/list\"}") == 0);
        teardown(&f);
}

TEST(dispatch_error_codes)
{
        struct fixture f;
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        initialize(&f);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"no/such\"}") ==
              JSONRPC_METHOD_NOT_FOUND);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\","
                              "\"params\":{\"level\":\"loud\"}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                              "\"params\":{\"name\":\"no_such_tool\"}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\","
                              "\"params\":{}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\","
                              "\"params\":{\"name\":\"run_shell\",\"arguments\":[]}}") ==
              JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"resources/read\","
                              "\"params\":{\"uri\":\"file:///etc/passwd\"}}") ==
              JSONRPC_RESOURCE_NOT_FOUND);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/read\","
                              "\"params\":{}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/list\","
                              "\"params\":{\"cursor\":\"o:x\"}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"ping\"}") ==
              JSONRPC_INVALID_REQUEST);
        teardown(&f);
}

TEST(dispatch_invalid_message_echoes_a_usable_id)
{
        struct fixture f;
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        enum mcp_route route;
        json_t *a = send_text(&f, "{\"jsonrpc\":\"2.0\",\"id\":\"k\",\"method\":7}", &route);
        CHECK(route == MCP_ANSWER);
        CHECK_STREQ(json_string_value(json_object_get(a, "id")), "k");
        json_decref(a);
        a = send_text(&f, "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", &route);
        CHECK(route == MCP_ANSWER);
        CHECK(json_is_null(json_object_get(a, "id")));
        CHECK(error_code(a) == JSONRPC_INVALID_REQUEST);
        json_decref(a);
        teardown(&f);
}

TEST(dispatch_notifications_and_responses_get_no_answer)
{
        struct fixture f;
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        const char *quiet[] = {
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                "\"params\":{\"requestId\":42}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"no/such/notification\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}", /* answers nothing we asked */
        };
        for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
                enum mcp_route route;
                json_t *a = send_text(&f, quiet[i], &route);
                CHECK(route == MCP_DONE);
                CHECK(a == NULL);
        }
        teardown(&f);
}

TEST(dispatch_tools_call_is_a_call)
{
        struct fixture f;
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        initialize(&f);
        json_error_t jerr;
        json_t *msg = json_loads("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\","
                                 "\"params\":{\"name\":\"nope\"}}",
                                 0, &jerr);
        json_t *answer = NULL;
        struct mcp_call *call = NULL, *again = NULL;
        CHECK(mcp_is_call(msg));
        CHECK(mcp_receive(f.s, &sink, msg, &answer, &call, NULL) == MCP_CALL);
        CHECK(call != NULL && answer == NULL);
        /* The same id again while the first is in flight. */
        CHECK(mcp_receive(f.s, &sink, msg, &answer, &again, NULL) == MCP_ANSWER);
        CHECK(again == NULL && error_code(answer) == JSONRPC_INVALID_REQUEST);
        CHECK(mcp_session_calls(f.s) == 1);
        json_decref(answer);
        mcp_call_free(call);
        CHECK(mcp_session_calls(f.s) == 0);
        json_decref(msg);
        teardown(&f);
}

/* Whether method is answered (not -32601) after initialize. */
static bool offered(struct fixture *f, const char *method, const char *params)
{
        char text[512];
        snprintf(text, sizeof(text),
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}", method, params);
        return answer_code(f, text) != JSONRPC_METHOD_NOT_FOUND;
}

TEST(fixtures_only_with_their_provider)
{
        struct fixture f;
        const char *ref = "{\"ref\":{\"type\":\"ref/prompt\",\"name\":\"p\"},"
                          "\"argument\":{\"name\":\"a\",\"value\":\"pa\"}}";
        if (!setup(&f, false))
                SKIP("no MCP server without a config");
        initialize(&f);
        CHECK(!offered(&f, "prompts/list", "{}"));
        CHECK(!offered(&f, "completion/complete", ref));
        CHECK(!offered(&f, "resources/subscribe", "{\"uri\":\"test://static-text\"}"));
        CHECK(answer_code(&f,
                          "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                          "\"params\":{\"name\":\"test_simple_text\"}}") == JSONRPC_INVALID_PARAMS);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/read\","
                              "\"params\":{\"uri\":\"test://static-text\"}}") ==
              JSONRPC_RESOURCE_NOT_FOUND);
        teardown(&f);

        if (!setup(&f, true))
                SKIP("no MCP server without a config");
        initialize(&f);
        CHECK(offered(&f, "prompts/list", "{}"));
        CHECK(offered(&f, "completion/complete", ref));
        CHECK(offered(&f, "resources/subscribe", "{\"uri\":\"test://static-text\"}"));
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
                              "\"params\":{\"name\":\"test_simple_text\"}}") == 0);
        CHECK(answer_code(&f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/read\","
                              "\"params\":{\"uri\":\"test://static-text\"}}") == 0);
        teardown(&f);
}

TEST(providers_refuse_a_tool_twice)
{
        struct cage_config *cfg = NULL;
        struct cage_error err = {0};
        struct mcp_server *srv = NULL;
        if (cage_config_defaults(&cfg, &err) < 0)
                SKIP("no config: %s", err.message);
        struct mcp_options opts = {.n_providers = 2};
        opts.providers[0] = opts.providers[1] = mcp_fixtures_provider_new;
        CHECK(mcp_server_new(cfg, NULL, &opts, &srv, &err) == -EEXIST);
        CHECK(srv == NULL);
        CHECK(strstr(err.message, "test_") != NULL);
        cage_config_free(cfg);
}

RUN_TESTS(T(parse_accepts_one_object), T(parse_refuses_batches_and_non_objects),
          T(parse_refuses_invalid_json), T(classify_ids_of_every_type),
          T(classify_notifications_and_responses), T(classify_refuses_bad_envelopes),
          T(id_keys_tell_types_apart), T(error_builder_cleans_the_message),
          T(dispatch_before_and_after_initialize), T(dispatch_error_codes),
          T(dispatch_invalid_message_echoes_a_usable_id),
          T(dispatch_notifications_and_responses_get_no_answer), T(dispatch_tools_call_is_a_call),
          T(fixtures_only_with_their_provider), T(providers_refuse_a_tool_twice))
