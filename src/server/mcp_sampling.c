/* llm_query through MCP sampling: the host functions that Python code run
 * by a tool call may call (service.h, struct cage_service_host) become
 * sampling/createMessage requests to the client that made the call, over
 * the same channel (stdout, or the call's SSE stream), and the thread of
 * the run waits for the answer (mcp_session.c). Only a client that
 * declared the `sampling` capability is asked; otherwise the code gets a
 * clear exception. llm_query_batched sends one request per prompt, one
 * after the other. In revision 2026-07-28 (no requests to the client) the
 * prompts become the inputRequests of an InputRequiredResult, all of a
 * batch in one round, while the run waits paused (mcp_job.c). tools.* is served by the service's
 * code mode (src/services/upstream.c) before it gets here. The session's host_budget bounds how
 * many calls one run makes. */
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

/* prompt: a JSON string, passed on whole (it may hold NUL). */
static json_t *sampling_params(const json_t *prompt, const json_t *kwargs)
{
        const json_t *max = json_object_get(kwargs, "max_tokens");
        json_int_t tokens = json_is_integer(max) ? json_integer_value(max) : MAX_TOKENS_DEFAULT;
        if (tokens < 1 || tokens > MAX_TOKENS_MAX)
                tokens = MAX_TOKENS_DEFAULT;
        json_t *params = json_pack("{s:[{s:s, s:{s:s, s:O}}], s:I}", "messages", "role", "user",
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

bool mcp_call_declares(struct mcp_call *c, const char *name)
{
        struct mcp_session *s = c->session;
        if (s->stateless) {
                const json_t *meta = json_object_get(c->params, "_meta");
                return json_is_object(json_object_get(json_object_get(meta, MCP_META_CAPS), name));
        }
        pthread_mutex_lock(&s->lock);
        bool has = strcmp(name, "sampling") == 0      ? s->sampling
                   : strcmp(name, "elicitation") == 0 ? s->elicitation
                                                      : false;
        pthread_mutex_unlock(&s->lock);
        return has;
}

int mcp_call_input(struct mcp_call *c, json_t *requests, json_t **responses, char **error)
{
        if (c->job)
                return mcp_job_input(c->job, requests, responses, error);
        json_auto_t *owned = requests;
        if (c->session->stateless)
                return fail(error, "this call cannot ask the client for input");
        json_auto_t *out = json_object();
        const char *key;
        const json_t *req;
        if (!out)
                return fail(error, "out of memory");
        json_object_foreach(owned, key, req)
        {
                const char *method = json_string_value(json_object_get(req, "method"));
                json_t *params = json_deep_copy(json_object_get(req, "params"));
                json_t *result = NULL;
                if (!method || !params) {
                        json_decref(params);
                        return fail(error, "out of memory");
                }
                if (mcp_call_ask(c, method, params, &result, error) < 0)
                        return -1;
                json_object_set_new(out, key, result);
        }
        *responses = json_incref(out);
        return 0;
}

/* Asks the client's model each prompt of the array prompts (in the
 * session era one after the other, in 2026-07-28 in one input round):
 * 0 with *answers (an array of strings), or -1 with *error. */
static int sample_all(struct mcp_call *c, const json_t *prompts, const json_t *kwargs,
                      json_t **answers, char **error)
{
        if (!mcp_call_declares(c, "sampling"))
                return fail(error,
                            "llm_query needs an MCP client that supports sampling, and this "
                            "client did not declare the `sampling` capability; do the work in "
                            "code, or return the question to the model as output instead");
        json_auto_t *requests = json_object();
        json_auto_t *out = json_array();
        json_t *responses = NULL;
        size_t i;
        const json_t *p;
        char key[32];
        json_array_foreach(prompts, i, p)
        {
                json_t *params = sampling_params(p, kwargs);
                snprintf(key, sizeof(key), "llm_query_%zu", i);
                if (!params ||
                    json_object_set_new(requests, key,
                                        json_pack("{s:s, s:o}", "method", "sampling/createMessage",
                                                  "params", params)) < 0)
                        return fail(error, "out of memory");
        }
        if (!out || mcp_call_input(c, json_incref(requests), &responses, error) < 0)
                return -1;
        json_auto_t *got = responses;
        json_array_foreach(prompts, i, p)
        {
                _cleanup_free_ char *text = NULL;
                snprintf(key, sizeof(key), "llm_query_%zu", i);
                if (reply_text(json_object_get(got, key), &text, error) < 0)
                        return -1;
                json_t *s = json_string(text);
                if (!s || json_array_append_new(out, s) < 0)
                        return fail(error, "the answer is not valid UTF-8");
        }
        *answers = json_incref(out);
        return 0;
}

int mcp_sample(struct mcp_call *c, const char *prompt, const json_t *kwargs, char **text,
               char **error)
{
        json_auto_t *prompts = json_pack("[s]", prompt ? prompt : "");
        json_auto_t *answers = NULL;
        if (!prompts)
                return fail(error, "out of memory");
        if (sample_all(c, prompts, kwargs, &answers, error) < 0)
                return -1;
        *text = strdup(json_string_value(json_array_get(answers, 0)));
        return *text ? 0 : fail(error, "out of memory");
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
        const json_t *prompt = first_arg(args, kwargs, "prompt");
        json_t *answers = NULL;
        if (!json_is_string(prompt))
                return host_fail(error, "llm_query(prompt): prompt must be a string");
        json_auto_t *prompts = json_pack("[O]", prompt);
        if (!prompts)
                return host_fail(error, "out of memory");
        if (sample_all(c, prompts, kwargs, &answers, error) < 0)
                return 0;
        *value = json_incref(json_array_get(answers, 0));
        json_decref(answers);
        return 0;
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
        json_array_foreach(prompts, i, p)
        {
                if (!json_is_string(p))
                        return host_fail(error,
                                         "llm_query_batched(prompts): every prompt must be a "
                                         "string");
        }
        if (sample_all(c, prompts, kwargs, value, error) < 0)
                *value = NULL;
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
