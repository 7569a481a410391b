/* The MCP server object shared by every session of one process: the
 * service, the config, the enabled tools (and conformance fixtures), the
 * secret redactor for live output. Read-only once created, so any thread
 * may use it. Also the small shared helpers of the protocol layer: error
 * filling and log level names. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/mcp.h"
#include "services/redact.h"
#include "util/cleanup.h"
#include "util/error.h"

static struct mcp_options serve_options;

void mcp_serve_options_set(const struct mcp_options *opts)
{
        serve_options = *opts;
}

const struct mcp_options *mcp_serve_options(void)
{
        return &serve_options;
}

uint64_t mcp_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

json_t *mcp_fail(struct mcp_error *e, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        e->code = code;
        return NULL;
}

static const char *const level_names[] = {
        [MCP_LOG_DEBUG] = "debug",   [MCP_LOG_INFO] = "info",
        [MCP_LOG_NOTICE] = "notice", [MCP_LOG_WARNING] = "warning",
        [MCP_LOG_ERROR] = "error",   [MCP_LOG_CRITICAL] = "critical",
        [MCP_LOG_ALERT] = "alert",   [MCP_LOG_EMERGENCY] = "emergency",
};

const char *mcp_log_level_to_string(enum mcp_log_level l)
{
        return (size_t)l < ELEMENTSOF(level_names) ? level_names[l] : "info";
}

int mcp_log_level_from_string(const char *s)
{
        for (size_t i = 0; s && i < ELEMENTSOF(level_names); i++)
                if (strcmp(s, level_names[i]) == 0)
                        return (int)i;
        return -1;
}

int mcp_options_apply(const struct mcp_options *opts, struct cage_config *cfg,
                      struct cage_error *err)
{
        for (size_t i = 0; opts && i < opts->n_upstreams; i++) {
                int r = cage_config_add_upstream(cfg, opts->upstreams[i], err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* "a, b": the names of the config's upstream servers, or NULL. */
static char *upstream_names(const struct cage_config *cfg)
{
        char *text = NULL;
        size_t n = 0, i;
        json_t *e;
        if (!json_array_size(cfg->upstream_servers))
                return NULL;
        FILE *f = open_memstream(&text, &n);
        if (!f)
                return NULL;
        json_array_foreach(cfg->upstream_servers, i, e)
                fprintf(f, "%s%s", i ? ", " : "", json_string_value(json_object_get(e, "name")));
        fclose(f);
        return text;
}

/* Code mode: run_python's description names the upstream tools. */
static int announce_upstreams(struct mcp_server *srv, struct cage_error *err)
{
        size_t i;
        json_t *tool;
        _cleanup_free_ char *names = upstream_names(srv->cfg);
        json_array_foreach(srv->tools, i, tool)
        {
                const char *name = json_string_value(json_object_get(tool, "name"));
                _cleanup_free_ char *desc = NULL;
                if (strcmp(name, "run_python") != 0)
                        continue;
                if (!names ||
                    asprintf(&desc,
                             "%s Code mode: the tools of the upstream MCP servers %s are Python "
                             "functions here: tools.list() lists them (name, server, "
                             "description, input_schema); tools.<name>(**arguments) calls one "
                             "and returns its structured result or its text; a failing tool "
                             "raises HostCallError. Prefer one program that calls several tools "
                             "over many separate tool calls.",
                             json_string_value(json_object_get(tool, "description")), names) < 0)
                        return cage_fail(err, -ENOMEM, "tool table");
                json_object_set_new(tool, "description", json_string(desc));
        }
        return 0;
}

int mcp_server_new(const struct cage_config *cfg, struct cage_service *svc,
                   const struct mcp_options *opts, struct mcp_server **ret, struct cage_error *err)
{
        struct mcp_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return cage_fail(err, -ENOMEM, "mcp server");
        srv->cfg = cfg;
        srv->svc = svc;
        srv->conformance = opts && opts->conformance;
        int r = cage_config_redactor(cfg, &srv->redactor, err);
        if (r == 0)
                r = mcp_tools_load(srv, opts ? opts->tools : NULL, err);
        if (r == 0 && srv->conformance)
                r = mcp_fixtures_load(srv, err);
        if (r == 0 && json_array_size(cfg->upstream_servers))
                r = announce_upstreams(srv, err);
        if (r < 0) {
                mcp_server_free(srv);
                return r;
        }
        *ret = srv;
        return 0;
}

struct mcp_server *mcp_server_free(struct mcp_server *srv)
{
        if (!srv)
                return NULL;
        cage_redactor_unref(srv->redactor);
        json_decref(srv->tools);
        json_decref(srv->fixtures);
        free(srv);
        return NULL;
}
