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
        return NULL;
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

static json_t *get_prompt(const struct mcp_provider *p, const json_t *params, struct mcp_error *e)
{
        const char *name = json_string_value(json_object_get(params, "name"));
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
        };
        *ret = p;
        return 0;
}
