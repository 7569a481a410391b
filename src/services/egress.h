/* The egress proxy: the only way out of a sandbox's network namespace
 * (docs/NETWORK.md).
 *
 * A sandbox whose spec lists hosts gets a listening socket on
 * 127.0.0.1:CAGE_EGRESS_PORT created inside its own network namespace (a
 * short-lived thread enters the namespace, listens and leaves), served by
 * this process: no extra process, no host network changes, and a program
 * that ignores the proxy has nowhere to connect to. The proxy speaks HTTP
 * CONNECT (the tunnel must carry TLS whose SNI equals the CONNECT host) and
 * absolute-form plain HTTP (every request of a kept-alive connection is
 * checked on its own, its Host header rewritten to the checked host). Each
 * destination goes through egress_resolve(): the policy decision before
 * any DNS lookup, then every resolved address checked, then a connection to
 * a checked address only. Every decision is audited ("network.allow" with
 * the bytes moved, "network.deny" with the reason); denials are answered
 * with HTTP 403 and the reason.
 *
 * A sandbox's proxy ends by itself when the sandbox's pid 1 exits (its
 * pidfd is watched), cutting its connections. Threads: one acceptor, one
 * short thread per connection; everything here is safe from any thread. */
#ifndef CODECAGE_SERVICES_EGRESS_H
#define CODECAGE_SERVICES_EGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "codecage/codecage.h"
#include "services/config.h"
#include "services/egress_policy.h"

#define CAGE_EGRESS_PORT      3128
#define CAGE_EGRESS_PROXY_URL "http://127.0.0.1:3128"
#define EGRESS_ADDRS_MAX      16 /* resolved addresses considered per name */

struct cage_audit;
struct cage_egress;
struct http_pin;

/* Who a sandbox's traffic is audited as. */
struct cage_egress_owner {
        const char *tenant;
        const char *sandbox; /* NULL for one-shot runs */
        json_t *labels;      /* borrowed; copied */
        const char *phase;   /* NULL, or e.g. "requirements" */
};

/* The server's network section from now on (a config reload: new
 * connections see its limits; the old section must stay alive). */
void cage_egress_set_config(struct cage_egress *eg, const struct cage_config_network *cfg);
int cage_egress_open(const struct cage_config_network *cfg, struct cage_audit *audit,
                     struct cage_egress **ret, struct cage_error *err);
/* Cuts every connection, waits for their threads, frees. Accepts NULL. */
struct cage_egress *cage_egress_close(struct cage_egress *eg);

/* Starts the proxy of the sandbox whose pid 1 is pidfd (duplicated here),
 * allowing what al allows (copied). */
int cage_egress_attach(struct cage_egress *eg, int pidfd, const struct egress_allowlist *al,
                       const struct cage_egress_owner *owner, struct cage_error *err);

/* A destination that passed every check. */
struct egress_target {
        struct egress_decision decision;
        struct egress_addr addrs[EGRESS_ADDRS_MAX]; /* each checked */
        size_t n_addrs;
        uint16_t port;
};

/* The whole check of one destination: egress_decide() against al, then
 * (for names) getaddrinfo and egress_address_allowed() on every answer
 * with cfg->allow_private. -EPERM with the reason in reason when the policy
 * refuses, -EHOSTUNREACH when the name does not resolve. */
int egress_resolve(const struct cage_config_network *cfg, const struct egress_allowlist *al,
                   const char *host, size_t host_len, uint16_t port, struct egress_target *ret,
                   char *reason, size_t reason_len);

/* The check of a host the server itself reaches for a tenant where no
 * allowlist applies (an image's registry, docs/IMAGES.md): any canonical
 * name or address, every resolved address checked with cfg->allow_private
 * unless operator_listed (a host the operator named in the config, which
 * may be private). Errors as egress_resolve(). */
int egress_resolve_host(const struct cage_config_network *cfg, const char *host, uint16_t port,
                        bool operator_listed, struct egress_target *ret, char *reason,
                        size_t reason_len);

/* egress_resolve_host() for the image store's registry requests: policy
 * is a struct cage_config_network (a cage_registry_resolve_fn). */
int egress_registry_resolve(const void *policy, const char *host, long port, bool operator_listed,
                            struct http_pin *ret, char *reason, size_t reason_len);

/* The addresses of t as the pin of a libcurl request (util/http_pin.h). */
void egress_target_pin(const struct egress_target *t, struct http_pin *pin);

/* Connects to the first reachable address of t within timeout_ms.
 * Returns a blocking socket, or -errno. *ret_index: the address used. */
int egress_connect(const struct egress_target *t, unsigned timeout_ms, size_t *ret_index);

#endif
