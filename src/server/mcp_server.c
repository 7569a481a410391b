/* The MCP server object shared by every session of one process: the
 * service, the config, the providers of its tools, resources and prompts
 * (codecage's own first, then those the options add), the hub of its
 * subscriptions (mcp_listen.c). Live output is redacted with the
 * service's redactor of the moment, so a reload's secrets apply.
 * Read-only once created, so any thread may use
 * it. Also the options of `codecage serve` and code mode's upstreams. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/mcp.h"
#include "server/mcp_provider.h"
#include "services/redact.h"
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

static int add_providers(struct mcp_server *srv, const struct mcp_options *opts,
                         struct cage_error *err)
{
        struct mcp_provider *p = NULL;
        int r = mcp_codecage_provider_new(srv->cfg, opts ? opts->tools : NULL, &p, err);
        if (r == 0)
                r = mcp_providers_add(srv, p, err);
        for (size_t i = 0; r == 0 && opts && i < opts->n_providers; i++) {
                p = NULL;
                r = opts->providers[i](srv->cfg, &p, err);
                if (r == 0)
                        r = mcp_providers_add(srv, p, err);
        }
        return r;
}

int mcp_server_new(const struct cage_config *cfg, struct cage_service *svc,
                   const struct mcp_options *opts, struct mcp_server **ret, struct cage_error *err)
{
        struct mcp_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return cage_fail(err, -ENOMEM, "mcp server");
        srv->cfg = cfg;
        srv->svc = svc;
        int r = add_providers(srv, opts, err);
        if (r == 0 && (r = mcp_listen_new(svc, &srv->listen)) < 0)
                r = cage_fail(err, r, "mcp subscriptions");
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
        mcp_jobs_stop(srv);
        srv->listen = mcp_listen_free(srv->listen);
        for (size_t i = 0; i < srv->n_providers; i++)
                mcp_provider_free(srv->providers[i]);
        free(srv);
        return NULL;
}
