/* llm_query through MCP sampling: the host functions that Python code run
 * by a tool call may call (service.h, struct cage_service_host) become
 * sampling/createMessage requests to the client that made the call, over
 * the same channel (stdout, or the call's SSE stream), and the thread of
 * the run waits for the answer (mcp_session.c). Only a client that
 * declared the `sampling` capability is asked; otherwise the code gets a
 * clear exception. llm_query_batched sends one request per prompt, one
 * after the other. tools.* is served by the service's code mode
 * (src/services/upstream.c) before it gets here. The session's host_budget bounds how many calls
 * one run makes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "services/service.h"
#include "util/cleanup.h"

#define MAX_TOKENS_DEFAULT 1024
#define MAX_TOKENS_MAX     100000
#define BATCH_MAX          100

static int fail(char **error, const char *text)
{
        *error = strdup(text);
        return -1;
}

static json_t *sampling_params(const char *prompt, const json_t *kwargs)
{
        const json_t *max = json_object_get(kwargs, "max_tokens");
        json_int_t tokens = json_is_integer(max) ? json_integer_value(max) : MAX_TOKENS_DEFAULT;
        if (tokens < 1 || tokens > MAX_TOKENS_MAX)
                tokens = MAX_TOKENS_DEFAULT;
        json_t *params = json_pack("{s:[{s:s, s:{s:s, s:s}}], s:I}", "messages", "role", "user",
                                   "content", "type", "text", "text", prompt, "maxTokens", tokens);
        const json_t *system = json_object_get(kwargs, "system");
        const json_t *temperature = json_object_get(kwargs, "temperature");
        const json_t *model = json_object_get(kwargs, "model");
        if (params && json_is_string(system))
                json_object_set(params, "systemPrompt", (json_t *)system);
        if (params && json_is_number(temperature))
                json_object_set(params, "temperature", (json_t *)temperature);
        if (params && json_is_string(model))
                json_object_set_new(params, "modelPreferences",
                                    json_pack("{s:[{s:O}]}", "hints", "name", model));
        return params;
}

/* The text of a CreateMessageResult (content: one block or a list). */
static int reply_text(const json_t *result, char **text, char **error)
{
        const json_t *content = json_object_get(result, "content");
        json_auto_t *blocks = json_is_array(content)    ? json_incref((json_t *)content)
                              : json_is_object(content) ? json_pack("[O]", content)
                                                        : NULL;
        size_t len = 0, i, n_text = 0;
        const json_t *b;
        json_array_foreach(blocks, i, b)
        {
                const char *type = json_string_value(json_object_get(b, "type"));
                if (type && strcmp(type, "text") == 0 &&
                    json_is_string(json_object_get(b, "text"))) {
                        len += json_string_length(json_object_get(b, "text"));
                        n_text++;
                }
        }
        if (!n_text)
                return fail(error, "the MCP client's sampling answer holds no text content");
        char *out = malloc(len + 1);
        if (!out)
                return fail(error, "out of memory");
        size_t w = 0;
        json_array_foreach(blocks, i, b)
        {
                const char *type = json_string_value(json_object_get(b, "type"));
                const json_t *t = json_object_get(b, "text");
                if (!type || strcmp(type, "text") != 0 || !json_is_string(t))
                        continue;
                memcpy(out + w, json_string_value(t), json_string_length(t));
                w += json_string_length(t);
        }
        out[w] = '\0';
        *text = out;
        return 0;
}

int mcp_sample(struct mcp_call *c, const char *prompt, const json_t *kwargs, char **text,
               char **error)
{
        pthread_mutex_lock(&c->session->lock);
        bool sampling = c->session->sampling;
        pthread_mutex_unlock(&c->session->lock);
        if (!sampling)
                return fail(error,
                            "llm_query needs an MCP client that supports sampling, and this "
                            "client did not declare the `sampling` capability; do the work in "
                            "code, or return the question to the model as output instead");
        json_t *params = sampling_params(prompt, kwargs);
        json_auto_t *result = NULL;
        if (!params)
                return fail(error, "out of memory");
        if (mcp_call_ask(c, "sampling/createMessage", params, &result, error) < 0)
                return -1;
        return reply_text(result, text, error);
}

/* args[0], or kwargs[key]. */
static const json_t *first_arg(const json_t *args, const json_t *kwargs, const char *key)
{
        const json_t *v = json_array_get(args, 0);
        return v ? v : json_object_get(kwargs, key);
}

/* Host functions report failures through *error and return 0. */
static int host_fail(char **error, const char *text)
{
        fail(error, text);
        return 0;
}

static int llm_query(struct mcp_call *c, json_t *args, json_t *kwargs, json_t **value, char **error)
{
        const char *prompt = json_string_value(first_arg(args, kwargs, "prompt"));
        _cleanup_free_ char *text = NULL;
        if (!prompt)
                return host_fail(error, "llm_query(prompt): prompt must be a string");
        if (mcp_sample(c, prompt, kwargs, &text, error) < 0)
                return 0;
        *value = json_string(text);
        return *value ? 0 : host_fail(error, "the answer is not valid UTF-8");
}

static int llm_query_batched(struct mcp_call *c, json_t *args, json_t *kwargs, json_t **value,
                             char **error)
{
        const json_t *prompts = first_arg(args, kwargs, "prompts");
        size_t i;
        const json_t *p;
        if (!json_is_array(prompts) || json_array_size(prompts) > BATCH_MAX)
                return host_fail(error, "llm_query_batched(prompts): prompts must be a list of at "
                                        "most 100 strings");
        json_auto_t *answers = json_array();
        json_array_foreach(prompts, i, p)
        {
                _cleanup_free_ char *text = NULL;
                if (!json_is_string(p))
                        return host_fail(error,
                                         "llm_query_batched(prompts): every prompt must be a "
                                         "string");
                if (mcp_sample(c, json_string_value(p), kwargs, &text, error) < 0)
                        return 0;
                if (json_array_append_new(answers, json_string(text)) < 0)
                        return host_fail(error, "the answer is not valid UTF-8");
        }
        *value = json_incref(answers);
        return 0;
}

/* struct cage_service_host.fn */
static int host_fn(void *ctx, const char *name, json_t *args, json_t *kwargs, json_t **value,
                   char **error)
{
        struct mcp_call *c = ctx;
        if (strcmp(name, "llm_query") == 0)
                return llm_query(c, args, kwargs, value, error);
        if (strcmp(name, "llm_query_batched") == 0)
                return llm_query_batched(c, args, kwargs, value, error);
        char *text = NULL;
        if (strncmp(name, "tools.", 6) == 0) { /* code mode's tools reach the service first */
                if (asprintf(&text,
                             "%.100s: this server has no upstream MCP servers (code "
                             "mode: --upstream, or upstream_servers in the config)",
                             name) < 0)
                        text = NULL;
                *error = text;
                return 0;
        }
        if (asprintf(&text, "%.100s: this server has no such host function", name) < 0)
                text = NULL;
        *error = text;
        return 0;
}

void mcp_sampling_host(struct mcp_call *c, struct cage_service_host *ret)
{
        *ret = (struct cage_service_host){.fn = host_fn, .ctx = c, .functions = NULL};
}
