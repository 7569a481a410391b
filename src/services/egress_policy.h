/* The egress policy: what a sandbox's network traffic may reach. Pure
 * functions — no I/O, no DNS, no global state — so every decision is unit
 * tested and fuzzed (docs/NETWORK.md has the model and the syntax).
 *
 *  - Allowlist entries: "host", "*.domain" (any name with at least one more
 *    label in front of domain, on a label boundary: not "domain" itself,
 *    not "evildomain"), "*" (any host name, never an IP literal), an IP
 *    literal ("203.0.113.7", "[2001:db8::1]"), and — in the server config
 *    only — a CIDR range ("10.0.0.0/8", "[fd00::]/8"). Each may end with
 *    ":port" (1..65535); without one an entry allows ports 80 and 443.
 *  - Host names are canonicalised before anything else: lowercase, one
 *    trailing dot dropped, labels of 1..63 bytes of [a-z0-9_-], at most
 *    253 bytes. A name whose last label is numeric (or 0x...) is not a
 *    name: it must be a strict dotted quad, else it is refused, so "127.1",
 *    "2130706433", "0x7f.0.0.1" and "0177.0.0.1" never reach a resolver.
 *  - The decision on a requested (host, port) is made before any DNS
 *    lookup (egress_decide); every address a name resolves to is then
 *    checked (egress_address_allowed): loopback, private, link-local,
 *    CGNAT, ULA, multicast, unspecified, reserved, v4-mapped/compatible and
 *    other special-purpose ranges are refused unless the server config
 *    lists a range that covers the address.
 *  - Layering: a sandbox's allowlist must lie within the server's
 *    (egress_allowlist_within); a request for more is refused naming the
 *    entry. */
#ifndef CODECAGE_SERVICES_EGRESS_POLICY_H
#define CODECAGE_SERVICES_EGRESS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "codecage/codecage.h"

#define EGRESS_RULES_MAX  256 /* entries in one allowlist */
#define EGRESS_HOST_MAX   253 /* bytes of a canonical host name */
#define EGRESS_ENTRY_MAX  300 /* bytes of one allowlist entry as written */
#define EGRESS_REASON_MAX 200

enum egress_rule_kind {
        EGRESS_RULE_NAME,     /* "example.com" */
        EGRESS_RULE_WILDCARD, /* "*.example.com": host holds "example.com" */
        EGRESS_RULE_ANY,      /* "*": any host name (not an IP literal) */
        EGRESS_RULE_ADDR,     /* an IP literal or (config only) a CIDR range */
};

struct egress_addr {
        int family; /* AF_INET or AF_INET6 */
        uint8_t bytes[16];
};

struct egress_rule {
        enum egress_rule_kind kind;
        char host[EGRESS_HOST_MAX + 1];  /* NAME, WILDCARD: canonical; ADDR: "" */
        struct egress_addr addr;         /* ADDR: the network address */
        unsigned prefix;                 /* ADDR: 32 / 128 for a single address */
        uint16_t port;                   /* 0: the default ports 80 and 443 */
        char text[EGRESS_ENTRY_MAX + 1]; /* canonical text form, for messages and docs:
                                            "*.example.com", "example.com:8443",
                                            "10.0.0.0/8", "[::1]:80" */
};

struct egress_allowlist {
        struct egress_rule *rules; /* malloc'ed */
        size_t n;
};

/* Parses one entry (see above). allow_cidr: CIDR ranges are accepted (the
 * server config). -EINVAL with a message naming field and the entry, e.g.
 * "network[2]: \"*.\" is not a valid entry: \"*.\" must be followed by a
 * domain name". Ports are 1..65535 in decimal without sign or leading zero;
 * an unbracketed IPv6 address takes no port ("::1:80" is one address). The
 * text form always brackets IPv6 ("[::1]", "[fd00::]/8") and omits a /32 or
 * /128 prefix, so parsing a rule's text gives the same rule. */
int egress_rule_parse(const char *text, bool allow_cidr, const char *field, struct egress_rule *ret,
                      struct cage_error *err);

/* Parses a JSON array of entries (NULL or JSON null: an empty list). At most
 * EGRESS_RULES_MAX entries; duplicates are dropped. field names the list in
 * messages ("network", "network.allow"). */
int egress_allowlist_parse(const json_t *list, const char *field, bool allow_cidr,
                           struct egress_allowlist *ret, struct cage_error *err);
void egress_allowlist_clear(struct egress_allowlist *al);
/* The entries' canonical text forms as a new JSON array. */
json_t *egress_allowlist_to_json(const struct egress_allowlist *al);

/* Whether every entry of narrow is covered by an entry of wide: same or
 * wider host set (a name by an equal name, a wildcard over it or "*"; a
 * wildcard by a wildcard over an equal or parent domain or "*"; an address
 * by an equal address or a range holding it) and the same ports (an entry
 * without a port needs one without a port). -EPERM naming the first entry
 * that is not covered: "network: \"evil.com\" is not within this server's
 * network allowlist (network.allow in its config)". */
int egress_allowlist_within(const struct egress_allowlist *narrow,
                            const struct egress_allowlist *wide, const char *field,
                            struct cage_error *err);

/* Canonicalises a host as a client names it (a CONNECT authority without
 * its port, the host of an absolute URI, a TLS SNI): len bytes, not
 * NUL-terminated. IPv6 literals may come with or without brackets; zone ids
 * ("%eth0") are refused. On success out holds the canonical name (or the
 * address's text form) and *ret_is_addr tells whether it is an IP literal
 * (then *ret_addr is set). -EINVAL for anything else. */
int egress_host_canonical(const char *host, size_t len, char out[EGRESS_HOST_MAX + 1],
                          bool *ret_is_addr, struct egress_addr *ret_addr);

struct egress_decision {
        bool allowed;
        bool is_addr;                   /* host is an IP literal */
        struct egress_addr addr;        /* when is_addr */
        char host[EGRESS_HOST_MAX + 1]; /* canonical (when it could be made) */
        const struct egress_rule *rule; /* the entry that allowed it */
        char reason[EGRESS_REASON_MAX]; /* when denied, a sentence for the 403 */
};

/* The decision on a request for host:port, before any DNS lookup: the host
 * is canonicalised (refused when it cannot be), an IP literal is refused
 * unless an ADDR entry covers it, and a name is refused unless a NAME,
 * WILDCARD or ANY entry matches it with that port. Never fails: the
 * outcome is in ret (reasons such as "host \"evil.com\" is not in this
 * sandbox's network allowlist", "port 22 is not allowed for
 * \"example.com\" (allowed: 80, 443)", "IP address 1.2.3.4 is not in this
 * sandbox's network allowlist"). */
void egress_decide(const struct egress_allowlist *al, const char *host, size_t host_len,
                   uint16_t port, struct egress_decision *ret);

/* Whether a resolved (or literal) address may be connected to: public
 * unicast yes; a special-purpose address only when one of ranges (ADDR
 * rules: the config's network.allow_private) covers it. *ret_class (may be
 * NULL) names the address's class for messages: "public", "loopback",
 * "private", "link-local", "shared (CGNAT)", "unique-local", "multicast",
 * "unspecified", "broadcast", "reserved", "documentation", "benchmarking",
 * "v4-mapped", "v4-compatible", "NAT64", "6to4", "Teredo",
 * "IETF protocol assignments", ... */
bool egress_address_allowed(const struct egress_addr *a, const struct egress_rule *ranges,
                            size_t n_ranges, const char **ret_class);

/* Converts to/from socket addresses and text. */
int egress_addr_from_sockaddr(const struct sockaddr *sa, struct egress_addr *ret);
/* Fills ss with a's address and port; returns its length. */
socklen_t egress_addr_to_sockaddr(const struct egress_addr *a, uint16_t port,
                                  struct sockaddr_storage *ss);
/* "203.0.113.7" or "2001:db8::1" (no brackets); buf of at least 46 bytes.
 * Returns buf, or the constant "(invalid address)" when a is not an IPv4 or
 * IPv6 address or buf is too small. */
const char *egress_addr_format(const struct egress_addr *a, char *buf, size_t len);

/* The server name (SNI) of a TLS ClientHello at the start of buf (the
 * first bytes a client sends through a CONNECT tunnel). Returns 1 and the
 * name (raw, at most out_len - 1 bytes, NUL-terminated) when there is one,
 * 0 for a ClientHello without SNI, -EAGAIN when more bytes are needed to
 * decide (len is less than the record), -EINVAL when the bytes are not a
 * TLS handshake record holding a ClientHello (or are malformed, or a
 * ClientHello longer than one record). -EINVAL comes as soon as the bytes
 * there are show it (a first byte other than 0x16 needs no more), so a
 * prefix that is decided stays decided. An empty name, a name holding a NUL,
 * one that does not fit out_len - 1 or a second server_name extension is
 * -EINVAL. Bounds-checked against any input. */
int egress_tls_sni(const uint8_t *buf, size_t len, char *out, size_t out_len);

#endif
