/* The MCP conformance suite's fixtures as a provider (mcp_fixtures.c), for
 * tests only: the command line adds it with --mcp-conformance
 * (struct mcp_options.providers); the server never names it. */
#ifndef CODECAGE_SERVER_MCP_FIXTURES_H
#define CODECAGE_SERVER_MCP_FIXTURES_H

#include "codecage/codecage.h"

struct cage_config;
struct mcp_provider;

/* An mcp_provider_new_fn. */
int mcp_fixtures_provider_new(const struct cage_config *cfg, struct mcp_provider **ret,
                              struct cage_error *err);

#endif
