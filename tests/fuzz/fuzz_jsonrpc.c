/* libFuzzer target for JSON-RPC framing (src/server/jsonrpc.c) and MCP's
 * dispatch of one message (mcp_receive): the bytes are one message, sent
 * to a fresh, initialized session of a server without a service. Aborts
 * on a broken invariant:
 *  - parsing gives a JSON object, or else an error response with code
 *    -32700 or -32600 and a null id, never both;
 *  - a request's id is a usable id with a canonical key that fits;
 *  - notifications and responses are never answered; requests and invalid
 *    messages are answered with one well-formed response (jsonrpc "2.0",
 *    an id, exactly one of result and error, an error with a known code
 *    and a message) that encodes as JSON, with the request's id;
 *  - a tools/call becomes a call; its arguments checked against the
 *    tool's inputSchema give either nothing or an isError result.
 * Calls are not run and codecage:// reads are not made: they would reach
 * the service, which is not here. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/jsonrpc.h"
#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "services/config.h"

#define INPUT_MAX (64 * 1024)

static int no_send(struct mcp_sink *sink, const json_t *msg)
{
        return -1;
}

static struct mcp_sink sink = {.send = no_send};

static struct mcp_server *server(void)
{
        static struct mcp_server *srv;
        static struct cage_config *cfg;
        struct cage_error err = {0};
        if (!srv) {
                FUZZ_CHECK(cage_config_defaults(&cfg, &err) == 0);
                FUZZ_CHECK(mcp_server_new(cfg, NULL, NULL, &srv, &err) == 0);
        }
        return srv;
}

static bool known_code(int code)
{
        return code == JSONRPC_PARSE_ERROR || code == JSONRPC_INVALID_REQUEST ||
               code == JSONRPC_METHOD_NOT_FOUND || code == JSONRPC_INVALID_PARAMS ||
               code == JSONRPC_INTERNAL_ERROR || code == JSONRPC_RESOURCE_NOT_FOUND;
}

static void check_response(const json_t *answer, const json_t *id)
{
        const json_t *error = json_object_get(answer, "error");
        FUZZ_CHECK(json_is_object(answer));
        const char *version = json_string_value(json_object_get(answer, "jsonrpc"));
        FUZZ_CHECK(version && strcmp(version, "2.0") == 0);
        FUZZ_CHECK(json_object_get(answer, "id") != NULL);
        FUZZ_CHECK((json_object_get(answer, "result") != NULL) != (error != NULL));
        if (error) {
                FUZZ_CHECK(known_code((int)json_integer_value(json_object_get(error, "code"))));
                FUZZ_CHECK(json_is_string(json_object_get(error, "message")));
        }
        if (id)
                FUZZ_CHECK(json_equal(json_object_get(answer, "id"), id));
        char *text = json_dumps(answer, JSON_COMPACT);
        FUZZ_CHECK(text != NULL);
        free(text);
}

static void check_parse_error(const json_t *error)
{
        int code =
                (int)json_integer_value(json_object_get(json_object_get(error, "error"), "code"));
        FUZZ_CHECK(code == JSONRPC_PARSE_ERROR || code == JSONRPC_INVALID_REQUEST);
        FUZZ_CHECK(json_is_null(json_object_get(error, "id")));
        check_response(error, NULL);
}

/* The arguments of a tools/call against its tool's inputSchema. */
static void check_arguments(const struct mcp_server *srv, const json_t *params)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        const json_t *args = json_object_get(params, "arguments");
        size_t i;
        const json_t *tool;
        if (!name || !json_is_object(args))
                return;
        json_array_foreach(srv->providers[0]->tools, i, tool)
        {
                if (strcmp(json_string_value(json_object_get(tool, "name")), name) != 0)
                        continue;
                json_t *bad = mcp_tool_args_check(name, json_object_get(tool, "inputSchema"), args);
                FUZZ_CHECK(!bad || json_is_true(json_object_get(bad, "isError")));
                FUZZ_CHECK(!bad ||
                           json_is_string(json_object_get(
                                   json_array_get(json_object_get(bad, "content"), 0), "text")));
                json_decref(bad);
        }
}

/* A resources/read of codecage's own URIs would reach the service. */
static bool reaches_service(const json_t *msg)
{
        const char *method = json_string_value(json_object_get(msg, "method"));
        const char *uri = json_string_value(json_object_get(json_object_get(msg, "params"), "uri"));
        return method && strcmp(method, "resources/read") == 0 && uri &&
               strncmp(uri, "codecage://", 11) == 0;
}

static void dispatch(struct mcp_session *s, const json_t *msg)
{
        const char *why = NULL;
        enum jsonrpc_kind kind = jsonrpc_classify(msg, &why);
        json_t *answer = NULL;
        struct mcp_call *call = NULL;
        FUZZ_CHECK((kind == JSONRPC_INVALID) == (why != NULL));
        if (kind == JSONRPC_REQUEST) {
                char key[JSONRPC_KEY_MAX];
                FUZZ_CHECK(jsonrpc_id(msg) != NULL);
                FUZZ_CHECK(jsonrpc_id_key(jsonrpc_id(msg), key) == 0);
                FUZZ_CHECK(strlen(key) < JSONRPC_KEY_MAX);
        }
        if (reaches_service(msg))
                return;
        enum mcp_route route = mcp_receive(s, &sink, msg, &answer, &call, NULL);
        if (kind == JSONRPC_NOTIFICATION || kind == JSONRPC_RESPONSE)
                FUZZ_CHECK(route == MCP_DONE && !answer && !call);
        if (route == MCP_CALL) {
                FUZZ_CHECK(kind == JSONRPC_REQUEST && call && !answer && mcp_is_call(msg));
                check_arguments(s->srv, json_object_get(msg, "params"));
                mcp_call_free(call);
        }
        if (route == MCP_ANSWER)
                check_response(answer, kind == JSONRPC_REQUEST ? jsonrpc_id(msg) : NULL);
        FUZZ_CHECK(route != MCP_ANSWER || answer);
        json_decref(answer);
}

static struct mcp_session *initialized_session(void)
{
        static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\","
                                   "\"params\":{\"protocolVersion\":\"2025-11-25\","
                                   "\"capabilities\":{\"sampling\":{}}}}";
        struct mcp_session *s = mcp_session_new(server(), "default");
        json_t *error = NULL, *answer = NULL;
        struct mcp_call *call = NULL;
        json_t *msg = jsonrpc_parse(init, sizeof(init) - 1, &error);
        FUZZ_CHECK(s && msg);
        FUZZ_CHECK(mcp_receive(s, &sink, msg, &answer, &call, NULL) == MCP_ANSWER);
        FUZZ_CHECK(json_object_get(answer, "result") != NULL);
        json_decref(answer);
        json_decref(msg);
        return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_t *error = NULL;
        json_t *msg =
                jsonrpc_parse((const char *)data, size < INPUT_MAX ? size : INPUT_MAX, &error);
        FUZZ_CHECK((msg == NULL) != (error == NULL));
        if (!msg) {
                check_parse_error(error);
                json_decref(error);
                return 0;
        }
        FUZZ_CHECK(json_is_object(msg));
        struct mcp_session *s = initialized_session();
        dispatch(s, msg);
        mcp_session_close(s);
        mcp_session_unref(s);
        json_decref(msg);
        return 0;
}
