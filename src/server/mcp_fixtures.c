/* The fixtures of the official MCP conformance suite as an MCP provider
 * (mcp_provider.h): tools, resources, a resource template, prompts and
 * completion, exactly as the suite's scenarios expect them. The command
 * line adds this provider only with `codecage serve --mcp-conformance`, a
 * test switch that is off by default; the server itself never names it.
 * They touch no sandbox. Their static parts are mcp_fixtures.json
 * (embedded); what they do (logging, progress, sampling, elicitation,
 * substitutions) is here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/mcp.h"
#include "server/mcp_fixtures.h"
#include "server/mcp_provider.h"
#include "util/cleanup.h"
#include "util/error.h"

extern const char cage_mcp_fixtures_json[];
extern const char cage_mcp_fixtures_json_end[];

#define TEMPLATE_PREFIX "test://template/"
#define TEMPLATE_SUFFIX "/data"
#define TEMPLATE_ID_MAX 64

/* A copy of node with the strings "@png" / "@wav" replaced by media. */
static json_t *with_media(const json_t *node, const json_t *doc)
{
        const char *s = json_string_value(node);
        if (s && (strcmp(s, "@png") == 0 || strcmp(s, "@wav") == 0))
                return json_deep_copy(json_object_get(doc, s + 1));
        json_t *out = json_is_object(node) || json_is_array(node) ? json_copy((json_t *)node)
                                                                  : json_deep_copy(node);
        const char *k;
        json_t *v;
        size_t i;
        if (json_is_object(out))
                json_object_foreach(out, k, v) json_object_set_new(out, k, with_media(v, doc));
        if (json_is_array(out))
                json_array_foreach(out, i, v) json_array_set_new(out, i, with_media(v, doc));
        return out;
}

static void sleep_ms(long ms)
{
        struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static json_t *text_result(const char *text)
{
        return json_pack("{s:[o]}", "content", mcp_text_block(text));
}

/* ---- tools ------------------------------------------------------------------------ */

static json_t *with_logging(struct mcp_call *c)
{
        mcp_call_log(c, MCP_LOG_INFO, "Tool execution started");
        sleep_ms(50);
        mcp_call_log(c, MCP_LOG_INFO, "Tool processing data");
        sleep_ms(50);
        mcp_call_log(c, MCP_LOG_INFO, "Tool execution completed");
        return text_result("Tool with logging executed successfully");
}

static json_t *with_progress(struct mcp_call *c)
{
        for (int step = 0; step <= 2; step++) {
                if (step)
                        sleep_ms(50);
                json_t *params = c->progress_token ? json_pack("{s:O, s:i, s:i}", "progressToken",
                                                               c->progress_token, "progress",
                                                               step * 50, "total", 100)
                                                   : NULL;
                if (params)
                        (void)mcp_call_notify(c, "notifications/progress", params);
        }
        return text_result("Tool with progress executed successfully");
}

static json_t *sampling(struct mcp_call *c, const json_t *args)
{
        _cleanup_free_ char *text = NULL, *error = NULL, *out = NULL;
        json_auto_t *kwargs = json_pack("{s:i}", "max_tokens", 100);
        if (mcp_sample(c, json_string_value(json_object_get(args, "prompt")), kwargs, &text,
                       &error) < 0)
                return mcp_result_error("test_sampling: %s", error ? error : "failed");
        if (asprintf(&out, "LLM response: %s", text) < 0)
                return NULL;
        return text_result(out);
}

static json_t *elicitation(const json_t *doc, struct mcp_call *c, const char *name,
                           const json_t *args)
{
        pthread_mutex_lock(&c->session->lock);
        bool able = c->session->elicitation;
        pthread_mutex_unlock(&c->session->lock);
        if (!able)
                return mcp_result_error("%s: the client does not support elicitation", name);
        const json_t *schema = json_object_get(json_object_get(doc, "elicitations"), name);
        const char *message = json_string_value(json_object_get(args, "message"));
        json_t *params = json_pack("{s:s, s:O}", "message",
                                   message ? message : "Please provide the requested values",
                                   "requestedSchema", schema);
        json_auto_t *answer = NULL;
        _cleanup_free_ char *error = NULL, *content = NULL, *out = NULL;
        if (!params || mcp_call_ask(c, "elicitation/create", params, &answer, &error) < 0)
                return mcp_result_error("%s: %s", name, error ? error : "failed");
        content = json_dumps(json_object_get(answer, "content"), JSON_ENCODE_ANY | JSON_COMPACT);
        const char *action = json_string_value(json_object_get(answer, "action"));
        int n = strcmp(name, "test_elicitation") == 0
                        ? asprintf(&out, "User response: <action: %s, content: %s>",
                                   action ? action : "?", content ? content : "null")
                        : asprintf(&out, "Elicitation completed: action=%s, content=%s",
                                   action ? action : "?", content ? content : "null");
        return n < 0 ? NULL : text_result(out);
}

/* ---- input-required results and tasks (2026-07-28) --------------------------------- */

/* Sleeps seconds (at most 600) unless c is cancelled first. */
static void nap(struct mcp_call *c, double seconds)
{
        long ms = seconds > 600 ? 600000 : seconds > 0 ? (long)(seconds * 1000) : 0;
        for (; ms > 0 && !mcp_call_cancelled(c); ms -= 50)
                sleep_ms(ms < 50 ? ms : 50);
}

/* responses[key].content[field] as a string, or "?". */
static const char *answer_str(const json_t *responses, const char *key, const char *field)
{
        const json_t *content = json_object_get(json_object_get(responses, key), "content");
        const char *s = json_string_value(json_object_get(content, field));
        return s ? s : "?";
}

/* The input requests of doc's inputs[key], only those whose capability
 * the client declared when `declared_only`. */
static json_t *requests_of(const json_t *doc, struct mcp_call *c, const char *key,
                           bool declared_only)
{
        json_t *all = json_deep_copy(json_object_get(json_object_get(doc, "inputs"), key));
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(all, tmp, k, v)
        {
                const char *method = json_string_value(json_object_get(v, "method"));
                const char *cap = !method                                   ? "?"
                                  : strncmp(method, "elicitation", 11) == 0 ? "elicitation"
                                  : strncmp(method, "sampling", 8) == 0     ? "sampling"
                                                                            : "roots";
                if (declared_only && !mcp_call_declares(c, cap))
                        json_object_del(all, k);
        }
        return all;
}

static json_t *roots_text(const json_t *responses, const char *key)
{
        json_auto_t *uris = json_array();
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(json_object_get(responses, key), "roots"), i, r)
                json_array_append(uris, json_object_get(r, "uri"));
        _cleanup_free_ char *list = json_dumps(uris, JSON_COMPACT);
        _cleanup_free_ char *out = NULL;
        if (!list || asprintf(&out, "Client roots: %s", list) < 0)
                return NULL;
        return text_result(out);
}

static json_t *after_input(struct mcp_call *c, const char *name, const json_t *got,
                           const json_t *args)
{
        _cleanup_free_ char *out = NULL;
        const char *file = json_string_value(json_object_get(args, "filename"));
        int n = -1;
        if (strcmp(name, "test_input_required_result_sampling") == 0)
                n = asprintf(&out, "LLM response: %s", answer_str(got, "capital_question", "text"));
        else if (strcmp(name, "test_input_required_result_list_roots") == 0)
                return roots_text(got, "client_roots");
        else if (strcmp(name, "test_input_required_result_request_state") == 0 ||
                 strcmp(name, "test_input_required_result_tampered_state") == 0)
                n = asprintf(
                        &out, "state-ok: the requestState was valid; confirmed: %s",
                        json_is_true(json_object_get(
                                json_object_get(json_object_get(got, "confirm"), "content"), "ok"))
                                ? "yes"
                                : "no");
        else if (strcmp(name, "test_input_required_result_multiple_inputs") == 0 ||
                 strcmp(name, "test_input_required_result_capabilities") == 0)
                n = asprintf(&out, "Received %zu input responses (name: %s)", json_object_size(got),
                             answer_str(got, "user_name", "name"));
        else if (strcmp(name, "confirm_delete") == 0)
                n = asprintf(&out, "%s %s",
                             json_is_true(json_object_get(
                                     json_object_get(json_object_get(got, "confirm"), "content"),
                                     "confirm"))
                                     ? "Deleted"
                                     : "Kept",
                             file ? file : "the file");
        else if (strcmp(name, "multi_input") == 0)
                n = asprintf(&out, "Answers: %s, %s", answer_str(got, "first", "answer"),
                             answer_str(got, "second", "answer"));
        else
                n = asprintf(&out, "Hello, %s!", answer_str(got, "user_name", "name"));
        return n < 0 ? NULL : text_result(out);
}

static json_t *input_tool(const json_t *doc, struct mcp_call *c, const char *name,
                          const json_t *args)
{
        bool multi_round = strcmp(name, "test_input_required_result_multi_round") == 0;
        bool subset = strcmp(name, "test_input_required_result_capabilities") == 0;
        json_t *requests = requests_of(doc, c, multi_round ? "step1" : name, subset);
        json_t *got = NULL;
        _cleanup_free_ char *error = NULL;
        if (subset && json_object_size(requests) == 0) {
                json_decref(requests);
                return text_result("The client declared none of elicitation, sampling and roots: "
                                   "nothing to ask");
        }
        if (!requests || mcp_call_input(c, requests, &got, &error) < 0)
                return mcp_result_error("%s: %s", name, error ? error : "out of memory");
        json_auto_t *first = got;
        if (strcmp(name, "test_tool_with_task") == 0)
                mcp_call_escalate(c); /* gathered its input: the rest runs as a task */
        if (!multi_round)
                return after_input(c, name, first, args);
        json_t *second = NULL;
        requests = requests_of(doc, c, "step2", false);
        if (!requests || mcp_call_input(c, requests, &second, &error) < 0)
                return mcp_result_error("%s: %s", name, error ? error : "out of memory");
        json_auto_t *got2 = second;
        _cleanup_free_ char *out = NULL;
        if (asprintf(&out, "Hello %s, your favorite color is %s",
                     answer_str(first, "step1", "name"), answer_str(got2, "step2", "color")) < 0)
                return NULL;
        return text_result(out);
}

static json_t *task_tool(struct mcp_call *c, const char *name, const json_t *args)
{
        _cleanup_free_ char *out = NULL;
        if (strcmp(name, "greet") == 0) {
                const char *who = json_string_value(json_object_get(args, "name"));
                return asprintf(&out, "Hello, %s!", who ? who : "world") < 0 ? NULL
                                                                             : text_result(out);
        }
        if (strcmp(name, "failing_job") == 0) {
                nap(c, 1);
                return mcp_result_error("failing_job: this job always fails");
        }
        if (strcmp(name, "protocol_error_job") == 0)
                return NULL; /* a protocol error (-32603) */
        const json_t *seconds = json_object_get(args, "seconds");
        const char *label = json_string_value(json_object_get(args, "label"));
        nap(c, json_is_number(seconds) ? json_number_value(seconds) : 1);
        return asprintf(&out, "Computed %s", label ? label : "the result") < 0 ? NULL
                                                                               : text_result(out);
}

static bool task_later(const char *name)
{
        return strcmp(name, "test_tool_with_task") == 0;
}

static bool is_input_tool(const char *name)
{
        static const char *const names[] = {"confirm_delete", "multi_input", "test_tool_with_task",
                                            "test_streaming_elicitation"};
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (strcmp(name, names[i]) == 0)
                        return true;
        return strncmp(name, "test_input_required_result_", 27) == 0;
}

static json_t *call_tool(const struct mcp_provider *p, struct mcp_call *c, const char *name,
                         const json_t *args)
{
        const json_t *fixed = json_object_get(json_object_get(p->data, "results"), name);
        if (fixed)
                return json_deep_copy(fixed);
        if (strcmp(name, "test_tool_with_logging") == 0 || strcmp(name, "test_logging_tool") == 0)
                return with_logging(c);
        if (strcmp(name, "test_missing_capability") == 0)
                return mcp_call_has_capability(c, "sampling")
                               ? text_result("the client declared sampling")
                               : NULL;
        if (strcmp(name, "test_tool_with_progress") == 0)
                return with_progress(c);
        if (strcmp(name, "test_sampling") == 0)
                return sampling(c, args);
        if (strncmp(name, "test_elicitation", 16) == 0)
                return elicitation(p->data, c, name, args);
        if (is_input_tool(name))
                return input_tool(p->data, c, name, args);
        return task_tool(c, name, args);
}

/* ---- resources ----------------------------------------------------------------------- */

static json_t *template_resource(const char *uri)
{
        size_t plen = strlen(TEMPLATE_PREFIX), slen = strlen(TEMPLATE_SUFFIX), len = strlen(uri);
        if (len <= plen + slen || strncmp(uri, TEMPLATE_PREFIX, plen) != 0 ||
            strcmp(uri + len - slen, TEMPLATE_SUFFIX) != 0)
                return NULL;
        size_t id_len = len - plen - slen;
        char id[TEMPLATE_ID_MAX + 1];
        if (id_len > TEMPLATE_ID_MAX || memchr(uri + plen, '/', id_len))
                return NULL;
        memcpy(id, uri + plen, id_len);
        id[id_len] = '\0';
        json_auto_t *data = json_pack("{s:s, s:b, s:s+}", "id", id, "templateTest", 1, "data",
                                      "Data for ID: ", id);
        _cleanup_free_ char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
        return text ? json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType",
                                "application/json", "text", text)
                    : NULL;
}

static int read_resource(const struct mcp_provider *p, struct mcp_session *s, const char *uri,
                         json_t **ret, struct mcp_error *e)
{
        const json_t *fixed = json_object_get(json_object_get(p->data, "contents"), uri);
        *ret = fixed ? json_deep_copy(fixed) : template_resource(uri);
        return *ret ? 1 : 0;
}

/* ---- prompts and completion ----------------------------------------------------------- */

static json_t *user_text(const char *text)
{
        return json_pack("{s:s, s:{s:s, s:s}}", "role", "user", "content", "type", "text", "text",
                         text);
}

static json_t *prompt_messages(const json_t *doc, const char *name, const json_t *args,
                               struct mcp_error *e)
{
        const char *arg1 = json_string_value(json_object_get(args, "arg1"));
        const char *arg2 = json_string_value(json_object_get(args, "arg2"));
        const char *res = json_string_value(json_object_get(args, "resourceUri"));
        if (strcmp(name, "test_simple_prompt") == 0)
                return json_pack("[o]", user_text("This is a simple prompt for testing."));
        if (strcmp(name, "test_prompt_with_arguments") == 0) {
                _cleanup_free_ char *text = NULL;
                if (!arg1 || !arg2)
                        return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                        "prompts/get: arguments arg1 and arg2 are required");
                if (asprintf(&text, "Prompt with arguments: arg1='%s', arg2='%s'", arg1, arg2) < 0)
                        return NULL;
                return json_pack("[o]", user_text(text));
        }
        if (strcmp(name, "test_prompt_with_embedded_resource") == 0) {
                if (!res)
                        return mcp_fail(e, JSONRPC_INVALID_PARAMS,
                                        "prompts/get: argument resourceUri is required");
                return json_pack("[{s:s, s:{s:s, s:{s:s, s:s, s:s}}}, o]", "role", "user",
                                 "content", "type", "resource", "resource", "uri", res, "mimeType",
                                 "text/plain", "text", "Embedded resource content for testing.",
                                 user_text("Please process the embedded resource above."));
        }
        if (strcmp(name, "test_prompt_with_image") == 0)
                return json_pack("[{s:s, s:{s:s, s:O, s:s}}, o]", "role", "user", "content", "type",
                                 "image", "data", json_object_get(doc, "png"), "mimeType",
                                 "image/png", user_text("Please analyze the image above."));
        return mcp_fail(e, JSONRPC_INVALID_PARAMS, "prompts/get: unknown prompt %.100s", name);
}

/* 2026-07-28: a prompt that asks for input first (no requestState: the
 * answer itself is all it needs). */
static json_t *input_prompt(const json_t *doc, const json_t *params)
{
        const char *key = "test_input_required_result_prompt";
        const json_t *answer =
                json_object_get(json_object_get(params, "inputResponses"), "user_context");
        if (!json_is_object(answer))
                return json_pack("{s:s, s:O}", "resultType", "input_required", "inputRequests",
                                 json_object_get(json_object_get(doc, "inputs"), key));
        const char *context =
                answer_str(json_object_get(params, "inputResponses"), "user_context", "context");
        _cleanup_free_ char *text = NULL;
        if (asprintf(&text, "Use this context: %s", context) < 0)
                return NULL;
        return json_pack("{s:[o]}", "messages", user_text(text));
}

static json_t *get_prompt(const struct mcp_provider *p, const json_t *params, struct mcp_error *e)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        if (name && strcmp(name, "test_input_required_result_prompt") == 0)
                return input_prompt(p->data, params);
        json_t *messages = prompt_messages(p->data, name, json_object_get(params, "arguments"), e);
        return messages ? json_pack("{s:o}", "messages", messages) : NULL;
}

/* The dispatch has checked params.ref and params.argument.value. */
static json_t *complete(const struct mcp_provider *p, const json_t *params, struct mcp_error *e)
{
        static const char *const words[] = {"paris", "park", "party"};
        const char *value =
                json_string_value(json_object_get(json_object_get(params, "argument"), "value"));
        json_t *values = json_array();
        for (size_t i = 0; values && i < ELEMENTSOF(words); i++)
                if (strncmp(words[i], value, strlen(value)) == 0)
                        json_array_append_new(values, json_string(words[i]));
        return json_pack("{s:{s:o, s:I, s:b}}", "completion", "values", values, "total",
                         (json_int_t)json_array_size(values), "hasMore", 0);
}

/* ---- the provider ------------------------------------------------------------------- */

static void free_doc(void *data)
{
        json_decref(data);
}

static json_t *part(const json_t *doc, const char *key)
{
        return json_incref(json_object_get(doc, key));
}

int mcp_fixtures_provider_new(const struct cage_config *cfg, struct mcp_provider **ret,
                              struct cage_error *err)
{
        json_error_t jerr;
        size_t len = (size_t)(cage_mcp_fixtures_json_end - cage_mcp_fixtures_json);
        json_auto_t *raw = json_loadb(cage_mcp_fixtures_json, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!raw)
                return cage_fail(err, -EINVAL, "mcp_fixtures.json: line %d: %s", jerr.line,
                                 jerr.text);
        json_t *doc = with_media(raw, raw);
        struct mcp_provider *p = doc ? calloc(1, sizeof(*p)) : NULL;
        if (!p) {
                json_decref(doc);
                return cage_fail(err, -ENOMEM, "fixtures");
        }
        *p = (struct mcp_provider){
                .name = "conformance fixtures",
                .data = doc,
                .free_data = free_doc,
                .tools = part(doc, "tools"),
                .call = call_tool,
                .resources = part(doc, "resources"),
                .resource_templates = part(doc, "resourceTemplates"),
                .subscribe = true,
                .read = read_resource,
                .prompts = part(doc, "prompts"),
                .prompt = get_prompt,
                .complete = complete,
                .task_later = task_later,
        };
        *ret = p;
        return 0;
}
