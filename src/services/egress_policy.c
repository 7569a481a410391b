/* The egress policy (see egress_policy.h): host canonicalisation, allowlist
 * entries and lists, the layering check, the per-request decision, address
 * classes and the TLS SNI reader. Pure: no I/O, no DNS, no global state,
 * silent; the only allocations are an allowlist's rules array and its JSON
 * form.
 *
 * Invariants kept here: a rule's host is canonical; an ADDR rule's address
 * has no bits set beyond its prefix; a rule's text parses back to the same
 * rule; every byte read from a client is bounds-checked first, and client
 * bytes are escaped before they reach a message. */
#include "egress_policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/error.h"

#define QUOTED_MAX      128 /* bytes of an escaped excerpt in an error message */
#define REASON_HOST_MAX 96  /* the same in a decision's reason */
#define TLS_RECORD_MAX  (16384 + 2048)

/* --- small helpers --------------------------------------------------------- */

/* Escapes len bytes of s for a message: printable ASCII stays, quotes and
 * backslashes are escaped, other bytes become \xNN; long input ends in "...". */
static const char *quote(const char *s, size_t len, char *buf, size_t size)
{
        static const char hex[] = "0123456789abcdef";
        size_t w = 0;

        for (size_t i = 0; s && i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (w + 8 > size) {
                        memcpy(buf + w, "...", 4);
                        return buf;
                }
                if (c == '"' || c == '\\') {
                        buf[w++] = '\\';
                        buf[w++] = (char)c;
                } else if (c < 0x20 || c >= 0x7f) {
                        buf[w++] = '\\';
                        buf[w++] = 'x';
                        buf[w++] = hex[c >> 4];
                        buf[w++] = hex[c & 15];
                } else {
                        buf[w++] = (char)c;
                }
        }
        buf[w] = '\0';
        return buf;
}

static unsigned addr_bits(int family)
{
        return family == AF_INET ? 32 : family == AF_INET6 ? 128 : 0;
}

/* Whether a lies in net/prefix (same family, prefix within the family). */
static bool addr_in_prefix(const struct egress_addr *a, const struct egress_addr *net,
                           unsigned prefix)
{
        if (a->family != net->family || addr_bits(a->family) == 0 || prefix > addr_bits(a->family))
                return false;
        size_t full = prefix / 8;
        unsigned rest = prefix % 8;
        if (memcmp(a->bytes, net->bytes, full) != 0)
                return false;
        if (rest == 0)
                return true;
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return (a->bytes[full] & mask) == (net->bytes[full] & mask);
}

/* Whether a has no bits set after the first prefix bits. */
static bool host_bits_clear(const struct egress_addr *a, unsigned prefix)
{
        unsigned bits = addr_bits(a->family);

        for (unsigned i = prefix; i < bits; i++)
                if (a->bytes[i / 8] & (0x80 >> (i % 8)))
                        return false;
        return true;
}

/* Whether name has at least one more label than domain, ending in ".domain". */
static bool name_under(const char *name, const char *domain)
{
        size_t n = strlen(name), d = strlen(domain);

        return n > d + 1 && name[n - d - 1] == '.' && memcmp(name + n - d, domain, d) == 0;
}

/* --- host canonicalisation ------------------------------------------------- */

struct canon {
        char text[EGRESS_HOST_MAX + 1];
        bool is_addr;
        struct egress_addr addr;
};

static bool is_name_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static char ascii_lower(char c)
{
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static const char *canon_ipv6(const char *s, size_t len, struct canon *c)
{
        char tmp[INET6_ADDRSTRLEN];

        if (memchr(s, '%', len))
                return "IPv6 zone ids (\"%...\") are not allowed";
        if (len == 0 || len >= sizeof(tmp) || memchr(s, '\0', len))
                return "it is not a valid IPv6 address";
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        c->addr = (struct egress_addr){.family = AF_INET6};
        if (inet_pton(AF_INET6, tmp, c->addr.bytes) != 1)
                return "it is not a valid IPv6 address";
        if (!inet_ntop(AF_INET6, c->addr.bytes, c->text, sizeof(c->text)))
                return "it is not a valid IPv6 address";
        c->is_addr = true;
        return NULL;
}

/* A lowercase name of len bytes: every label 1..63 bytes of [a-z0-9_-]. */
static const char *check_labels(const char *name, size_t len)
{
        size_t label = 0;

        for (size_t i = 0; i < len; i++) {
                if (name[i] == '.') {
                        if (label == 0)
                                return "it has an empty label";
                        label = 0;
                        continue;
                }
                if (!is_name_char(name[i]))
                        return "it has a character other than a-z, 0-9, '-', '_' and '.'";
                if (++label > 63)
                        return "a label is longer than 63 bytes";
        }
        return label == 0 ? "it has an empty label" : NULL;
}

/* The WHATWG URL rule: a last label that is all digits or 0x... makes the
 * name a number, which resolvers would read as an IPv4 address. */
static bool ends_in_number(const char *name, size_t len)
{
        const char *dot = memrchr(name, '.', len);
        const char *last = dot ? dot + 1 : name;
        size_t n = len - (size_t)(last - name);

        if (n >= 2 && last[0] == '0' && last[1] == 'x')
                return true;
        for (size_t i = 0; i < n; i++)
                if (last[i] < '0' || last[i] > '9')
                        return false;
        return n > 0;
}

static const char *canon_ipv4(const char *name, struct canon *c)
{
        c->addr = (struct egress_addr){.family = AF_INET};
        /* inet_pton(AF_INET) takes only a strict dotted quad: no octal, hex,
         * leading zeros or fewer than four parts. */
        if (inet_pton(AF_INET, name, c->addr.bytes) != 1 ||
            !inet_ntop(AF_INET, c->addr.bytes, c->text, sizeof(c->text)))
                return "it ends in a number but is not a dotted-quad IPv4 address";
        c->is_addr = true;
        return NULL;
}

static const char *canon_name(const char *s, size_t len, struct canon *c)
{
        char name[EGRESS_HOST_MAX + 1];

        if (len > 0 && s[len - 1] == '.')
                len--;
        if (len == 0)
                return "it is empty";
        if (len > EGRESS_HOST_MAX)
                return "it is longer than 253 bytes";
        for (size_t i = 0; i < len; i++)
                name[i] = ascii_lower(s[i]);
        name[len] = '\0';
        const char *why = check_labels(name, len);
        if (why)
                return why;
        if (ends_in_number(name, len))
                return canon_ipv4(name, c);
        memcpy(c->text, name, len + 1);
        return NULL;
}

/* Canonicalises a host; NULL on success, else why it is refused. */
static const char *canonicalise(const char *s, size_t len, struct canon *c)
{
        *c = (struct canon){};
        if (!s || len == 0)
                return "it is empty";
        if (s[0] == '[') {
                if (len < 2 || s[len - 1] != ']')
                        return "it has an unclosed '['";
                return canon_ipv6(s + 1, len - 2, c);
        }
        if (memchr(s, ':', len))
                return canon_ipv6(s, len, c);
        return canon_name(s, len, c);
}

int egress_host_canonical(const char *host, size_t len, char out[EGRESS_HOST_MAX + 1],
                          bool *ret_is_addr, struct egress_addr *ret_addr)
{
        struct canon c;

        if (canonicalise(host, len, &c))
                return -EINVAL;
        memcpy(out, c.text, strlen(c.text) + 1);
        if (ret_is_addr)
                *ret_is_addr = c.is_addr;
        if (ret_addr && c.is_addr)
                *ret_addr = c.addr;
        return 0;
}

/* --- one allowlist entry --------------------------------------------------- */

/* An entry split into host, "/prefix" and ":port" (pointers into the entry). */
struct entry_parts {
        const char *host, *prefix, *port;
        size_t host_len, prefix_len, port_len;
        bool bracketed, has_prefix, has_port;
};

static void split_prefix(struct entry_parts *p)
{
        const char *slash = memchr(p->host, '/', p->host_len);

        if (!slash)
                return;
        p->has_prefix = true;
        p->prefix = slash + 1;
        p->prefix_len = p->host_len - (size_t)(p->prefix - p->host);
        p->host_len = (size_t)(slash - p->host);
}

/* "[v6]", "[v6]/n", "[v6]:port", "[v6]/n:port". */
static const char *split_bracketed(const char *s, size_t len, struct entry_parts *p)
{
        const char *close = memchr(s, ']', len), *end = s + len;

        if (!close)
                return "it has an unclosed '['";
        p->bracketed = true;
        p->host = s + 1;
        p->host_len = (size_t)(close - p->host);
        const char *rest = close + 1;
        if (rest < end && *rest == '/') {
                const char *colon = memchr(rest, ':', (size_t)(end - rest));
                p->has_prefix = true;
                p->prefix = rest + 1;
                rest = colon ? colon : end;
                p->prefix_len = (size_t)(rest - p->prefix);
        }
        if (rest < end && *rest == ':') {
                p->has_port = true;
                p->port = rest + 1;
                p->port_len = (size_t)(end - p->port);
                rest = end;
        }
        return rest == end ? NULL : "only \"/prefix\" or \":port\" may follow ']'";
}

static const char *split_entry(const char *s, size_t len, struct entry_parts *p)
{
        *p = (struct entry_parts){};
        if (len > 0 && s[0] == '[')
                return split_bracketed(s, len, p);
        p->host = s;
        p->host_len = len;
        const char *colon = memchr(s, ':', len);
        /* One colon separates a port; more make an IPv6 address, which
         * needs brackets to carry a port. */
        if (colon && !memchr(colon + 1, ':', len - (size_t)(colon + 1 - s))) {
                p->has_port = true;
                p->port = colon + 1;
                p->port_len = len - (size_t)(p->port - s);
                p->host_len = (size_t)(colon - s);
        }
        split_prefix(p);
        return NULL;
}

/* Decimal digits only, no sign, no leading zero (but "0"), at most max_digits. */
static bool parse_decimal(const char *s, size_t len, size_t max_digits, unsigned *ret)
{
        unsigned v = 0;

        if (len == 0 || len > max_digits || (len > 1 && s[0] == '0'))
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        *ret = v;
        return true;
}

static const char *parse_port(const struct entry_parts *p, struct egress_rule *r)
{
        unsigned port;

        if (!p->has_port)
                return NULL;
        if (!parse_decimal(p->port, p->port_len, 5, &port) || port < 1 || port > 65535)
                return "the port must be a number from 1 to 65535";
        r->port = (uint16_t)port;
        return NULL;
}

static const char *parse_wildcard(const char *suffix, size_t len, struct egress_rule *r)
{
        struct canon c;

        if (len == 0)
                return "\"*.\" must be followed by a domain name";
        if (memchr(suffix, '*', len))
                return "'*' may only stand alone or as the first label (\"*.example.com\")";
        const char *why = canonicalise(suffix, len, &c);
        if (why)
                return why;
        if (c.is_addr)
                return "\"*.\" must be followed by a domain name, not an IP address";
        r->kind = EGRESS_RULE_WILDCARD;
        memcpy(r->host, c.text, strlen(c.text) + 1);
        return NULL;
}

/* The host part: "*", "*.domain", a name or an IP literal. */
static const char *parse_host(const struct entry_parts *p, struct egress_rule *r)
{
        struct canon c;
        const char *why;

        if (p->host_len == 1 && p->host[0] == '*') {
                r->kind = EGRESS_RULE_ANY;
                return NULL;
        }
        if (p->host_len >= 2 && p->host[0] == '*' && p->host[1] == '.')
                return parse_wildcard(p->host + 2, p->host_len - 2, r);
        if (memchr(p->host, '*', p->host_len))
                return "'*' may only stand alone or as the first label (\"*.example.com\")";
        c = (struct canon){};
        /* Brackets hold an IPv6 address and nothing else. */
        why = p->bracketed ? canon_ipv6(p->host, p->host_len, &c)
                           : canonicalise(p->host, p->host_len, &c);
        if (why)
                return why;
        if (c.is_addr) {
                r->kind = EGRESS_RULE_ADDR;
                r->addr = c.addr;
                r->prefix = addr_bits(c.addr.family);
        } else {
                r->kind = EGRESS_RULE_NAME;
                memcpy(r->host, c.text, strlen(c.text) + 1);
        }
        return NULL;
}

static const char *parse_prefix(const struct entry_parts *p, bool allow_cidr, struct egress_rule *r)
{
        unsigned prefix;

        if (!p->has_prefix)
                return NULL;
        if (r->kind != EGRESS_RULE_ADDR)
                return "a prefix length (\"/n\") may only follow an IP address";
        if (!allow_cidr)
                return "CIDR ranges are only allowed in the server config";
        if (!parse_decimal(p->prefix, p->prefix_len, 3, &prefix) ||
            prefix > addr_bits(r->addr.family))
                return r->addr.family == AF_INET ? "the prefix length must be 0..32"
                                                 : "the prefix length must be 0..128";
        r->prefix = prefix;
        return NULL;
}

static void rule_format_text(struct egress_rule *r)
{
        char buf[INET6_ADDRSTRLEN], port[8] = "", prefix[8] = "";
        const char *a;

        if (r->port)
                snprintf(port, sizeof(port), ":%u", (unsigned)r->port);
        switch (r->kind) {
        case EGRESS_RULE_ANY:
                snprintf(r->text, sizeof(r->text), "*%s", port);
                break;
        case EGRESS_RULE_WILDCARD:
                snprintf(r->text, sizeof(r->text), "*.%s%s", r->host, port);
                break;
        case EGRESS_RULE_NAME:
                snprintf(r->text, sizeof(r->text), "%s%s", r->host, port);
                break;
        case EGRESS_RULE_ADDR:
                a = egress_addr_format(&r->addr, buf, sizeof(buf));
                if (r->prefix != addr_bits(r->addr.family))
                        snprintf(prefix, sizeof(prefix), "/%u", r->prefix);
                snprintf(r->text, sizeof(r->text),
                         r->addr.family == AF_INET6 ? "[%s]%s%s" : "%s%s%s", a, prefix, port);
                break;
        }
}

static int entry_fail(struct cage_error *err, const char *field, const char *text, const char *why)
{
        char q[QUOTED_MAX];

        return cage_fail(err, -EINVAL, "%s: \"%s\" is not a valid entry: %s",
                         field ? field : "network", quote(text, strlen(text), q, sizeof(q)), why);
}

int egress_rule_parse(const char *text, bool allow_cidr, const char *field, struct egress_rule *ret,
                      struct cage_error *err)
{
        struct egress_rule r = {};
        struct entry_parts p;
        const char *why;
        size_t len = text ? strlen(text) : 0;

        if (len == 0)
                return entry_fail(err, field, "", "it is empty");
        if (len > EGRESS_ENTRY_MAX)
                return entry_fail(err, field, text, "it is longer than 300 bytes");
        why = split_entry(text, len, &p);
        if (!why)
                why = parse_port(&p, &r);
        if (!why)
                why = parse_host(&p, &r);
        if (!why)
                why = parse_prefix(&p, allow_cidr, &r);
        if (why)
                return entry_fail(err, field, text, why);
        if (r.kind == EGRESS_RULE_ADDR && !host_bits_clear(&r.addr, r.prefix)) {
                char a[INET6_ADDRSTRLEN], q[QUOTED_MAX];
                struct egress_addr net = r.addr;
                for (unsigned i = r.prefix; i < addr_bits(net.family); i++)
                        net.bytes[i / 8] &= (uint8_t) ~(0x80 >> (i % 8));
                return cage_fail(err, -EINVAL,
                                 "%s: \"%s\" is not a valid entry: the address has bits set "
                                 "beyond the /%u prefix (the network is %s/%u)",
                                 field ? field : "network", quote(text, len, q, sizeof(q)),
                                 r.prefix, egress_addr_format(&net, a, sizeof(a)), r.prefix);
        }
        rule_format_text(&r);
        *ret = r;
        return 0;
}

/* --- allowlists ------------------------------------------------------------ */

static bool has_text(const struct egress_rule *rules, size_t n, const char *text)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(rules[i].text, text) == 0)
                        return true;
        return false;
}

static int parse_item(const json_t *v, const char *field, size_t i, bool allow_cidr,
                      struct egress_rule *ret, struct cage_error *err)
{
        char name[128];

        snprintf(name, sizeof(name), "%s[%zu]", field, i);
        if (!json_is_string(v))
                return cage_fail(err, -EINVAL, "%s must be a string", name);
        if (json_string_length(v) != strlen(json_string_value(v)))
                return cage_fail(err, -EINVAL, "%s must not contain a NUL character", name);
        return egress_rule_parse(json_string_value(v), allow_cidr, name, ret, err);
}

int egress_allowlist_parse(const json_t *list, const char *field, bool allow_cidr,
                           struct egress_allowlist *ret, struct cage_error *err)
{
        _cleanup_free_ struct egress_rule *rules = NULL;
        size_t n = 0;

        field = field ? field : "network";
        if (!list || json_is_null(list)) {
                *ret = (struct egress_allowlist){};
                return 0;
        }
        if (!json_is_array(list))
                return cage_fail(err, -EINVAL, "%s must be an array of strings", field);
        size_t size = json_array_size(list);
        if (size > EGRESS_RULES_MAX)
                return cage_fail(err, -EINVAL, "%s has %zu entries; at most %d are allowed", field,
                                 size, EGRESS_RULES_MAX);
        if (size > 0 && !(rules = calloc(size, sizeof(*rules))))
                return cage_fail(err, -ENOMEM, "%s", field);
        for (size_t i = 0; i < size; i++) {
                int r = parse_item(json_array_get(list, i), field, i, allow_cidr, &rules[n], err);
                if (r < 0)
                        return r;
                if (!has_text(rules, n, rules[n].text))
                        n++;
        }
        *ret = (struct egress_allowlist){.rules = n ? TAKE_PTR(rules) : NULL, .n = n};
        return 0;
}

void egress_allowlist_clear(struct egress_allowlist *al)
{
        if (!al)
                return;
        free(al->rules);
        *al = (struct egress_allowlist){};
}

json_t *egress_allowlist_to_json(const struct egress_allowlist *al)
{
        json_t *a = json_array();

        for (size_t i = 0; a && al && i < al->n; i++)
                if (json_array_append_new(a, json_string(al->rules[i].text)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

/* Whether wide's hosts include all of narrow's. ANY never covers addresses. */
static bool hosts_cover(const struct egress_rule *wide, const struct egress_rule *narrow)
{
        switch (narrow->kind) {
        case EGRESS_RULE_NAME:
                return wide->kind == EGRESS_RULE_ANY ||
                       (wide->kind == EGRESS_RULE_NAME && strcmp(wide->host, narrow->host) == 0) ||
                       (wide->kind == EGRESS_RULE_WILDCARD && name_under(narrow->host, wide->host));
        case EGRESS_RULE_WILDCARD:
                return wide->kind == EGRESS_RULE_ANY || (wide->kind == EGRESS_RULE_WILDCARD &&
                                                         (strcmp(wide->host, narrow->host) == 0 ||
                                                          name_under(narrow->host, wide->host)));
        case EGRESS_RULE_ANY:
                return wide->kind == EGRESS_RULE_ANY;
        case EGRESS_RULE_ADDR:
                return wide->kind == EGRESS_RULE_ADDR && wide->prefix <= narrow->prefix &&
                       addr_in_prefix(&narrow->addr, &wide->addr, wide->prefix);
        }
        return false;
}

/* Whether a rule's port setting allows port (0 in a rule: 80 and 443). */
static bool port_allowed(uint16_t rule_port, unsigned port)
{
        return rule_port ? rule_port == port : port == 80 || port == 443;
}

static bool ports_cover(const struct egress_rule *wide, const struct egress_rule *narrow)
{
        if (narrow->port == 0)
                return wide->port == 0;
        return port_allowed(wide->port, narrow->port);
}

static bool covered(const struct egress_rule *narrow, const struct egress_allowlist *wide)
{
        for (size_t i = 0; wide && i < wide->n; i++)
                if (hosts_cover(&wide->rules[i], narrow) && ports_cover(&wide->rules[i], narrow))
                        return true;
        return false;
}

int egress_allowlist_within(const struct egress_allowlist *narrow,
                            const struct egress_allowlist *wide, const char *field,
                            struct cage_error *err)
{
        for (size_t i = 0; narrow && i < narrow->n; i++)
                if (!covered(&narrow->rules[i], wide))
                        return cage_fail_plain(err, -EPERM,
                                               "%s: \"%s\" is not within this server's network "
                                               "allowlist (network.allow in its config)",
                                               field ? field : "network", narrow->rules[i].text);
        return 0;
}

/* --- the decision on a request ----------------------------------------------- */

static bool rule_matches_host(const struct egress_rule *r, const struct canon *c)
{
        if (c->is_addr)
                return r->kind == EGRESS_RULE_ADDR && addr_in_prefix(&c->addr, &r->addr, r->prefix);
        switch (r->kind) {
        case EGRESS_RULE_NAME:
                return strcmp(r->host, c->text) == 0;
        case EGRESS_RULE_WILDCARD:
                return name_under(c->text, r->host);
        case EGRESS_RULE_ANY:
                return true;
        case EGRESS_RULE_ADDR:
                return false;
        }
        return false;
}

/* The smallest port above after that a rule matching the host allows; 0 if none. */
static unsigned next_allowed_port(const struct egress_allowlist *al, const struct canon *c,
                                  unsigned after)
{
        unsigned best = 65536;

        for (size_t i = 0; i < al->n; i++) {
                const struct egress_rule *r = &al->rules[i];
                if (!rule_matches_host(r, c))
                        continue;
                unsigned cand[2] = {r->port ? r->port : 80, r->port ? r->port : 443};
                for (size_t k = 0; k < 2; k++)
                        if (cand[k] > after && cand[k] < best)
                                best = cand[k];
        }
        return best == 65536 ? 0 : best;
}

/* "80, 443, 8443" (", ..." when they do not fit). */
static void format_allowed_ports(const struct egress_allowlist *al, const struct canon *c,
                                 char *buf, size_t size)
{
        size_t w = 0;

        buf[0] = '\0';
        for (unsigned p = next_allowed_port(al, c, 0); p; p = next_allowed_port(al, c, p)) {
                if (w + 16 > size) {
                        snprintf(buf + w, size - w, ", ...");
                        return;
                }
                w += (size_t)snprintf(buf + w, size - w, "%s%u", w ? ", " : "", p);
        }
}

static void deny_port(const struct egress_allowlist *al, const struct canon *c, uint16_t port,
                      struct egress_decision *ret)
{
        char q[REASON_HOST_MAX], ports[64];

        format_allowed_ports(al, c, ports, sizeof(ports));
        quote(c->text, strlen(c->text), q, sizeof(q));
        snprintf(ret->reason, sizeof(ret->reason),
                 c->is_addr ? "port %u is not allowed for %s (allowed: %s)"
                            : "port %u is not allowed for \"%s\" (allowed: %s)",
                 (unsigned)port, q, ports);
}

static void deny_host(const struct canon *c, struct egress_decision *ret)
{
        char q[REASON_HOST_MAX];

        quote(c->text, strlen(c->text), q, sizeof(q));
        snprintf(ret->reason, sizeof(ret->reason),
                 c->is_addr ? "IP address %s is not in this sandbox's network allowlist"
                            : "host \"%s\" is not in this sandbox's network allowlist",
                 q);
}

void egress_decide(const struct egress_allowlist *al, const char *host, size_t host_len,
                   uint16_t port, struct egress_decision *ret)
{
        static const struct egress_allowlist empty = {};
        struct canon c;
        char q[REASON_HOST_MAX];
        bool host_matched = false;

        *ret = (struct egress_decision){};
        al = al ? al : &empty;
        const char *why = canonicalise(host, host_len, &c);
        if (why) {
                snprintf(ret->reason, sizeof(ret->reason), "host \"%s\" is refused: %s",
                         quote(host, host_len, q, sizeof(q)), why);
                return;
        }
        memcpy(ret->host, c.text, strlen(c.text) + 1);
        ret->is_addr = c.is_addr;
        ret->addr = c.addr;
        if (port == 0) {
                snprintf(ret->reason, sizeof(ret->reason), "port 0 is not allowed");
                return;
        }
        for (size_t i = 0; i < al->n; i++) {
                if (!rule_matches_host(&al->rules[i], &c))
                        continue;
                host_matched = true;
                if (port_allowed(al->rules[i].port, port)) {
                        ret->allowed = true;
                        ret->rule = &al->rules[i];
                        return;
                }
        }
        if (host_matched)
                deny_port(al, &c, port, ret);
        else
                deny_host(&c, ret);
}

/* --- address classes ----------------------------------------------------------- */

struct special_range {
        uint8_t net[16];
        unsigned prefix;
        const char *class;
};

/* IANA special-purpose registries (RFC 6890 and successors); first match wins. */
static const struct special_range special_v4[] = {
        {{0}, 8, "unspecified"},
        {{10}, 8, "private"},
        {{100, 64}, 10, "shared (CGNAT)"},
        {{127}, 8, "loopback"},
        {{169, 254}, 16, "link-local"},
        {{172, 16}, 12, "private"},
        {{192, 0, 0}, 24, "IETF protocol assignments"},
        {{192, 0, 2}, 24, "documentation"},
        {{192, 88, 99}, 24, "6to4"},
        {{192, 168}, 16, "private"},
        {{198, 18}, 15, "benchmarking"},
        {{198, 51, 100}, 24, "documentation"},
        {{203, 0, 113}, 24, "documentation"},
        {{224}, 4, "multicast"},
        {{255, 255, 255, 255}, 32, "broadcast"},
        {{240}, 4, "reserved"},
};

static const struct special_range special_v6[] = {
        {{0}, 128, "unspecified"},
        {{[15] = 1}, 128, "loopback"},
        {{[10] = 0xff, [11] = 0xff}, 96, "v4-mapped"},
        {{0}, 96, "v4-compatible"},
        {{0, 0x64, 0xff, 0x9b}, 96, "NAT64"},
        {{0, 0x64, 0xff, 0x9b, 0, 1}, 48, "NAT64"},
        {{0x01, 0x00}, 64, "discard"},
        {{0x20, 0x01, 0x0d, 0xb8}, 32, "documentation"},
        {{0x20, 0x01, 0x00, 0x00}, 32, "Teredo"},
        {{0x20, 0x01, 0x00, 0x00}, 23, "IETF protocol assignments"},
        {{0x20, 0x02}, 16, "6to4"},
        {{0x3f, 0xff}, 20, "documentation"},
        {{0xfc}, 7, "unique-local"},
        {{0xfe, 0x80}, 10, "link-local"},
        {{0xfe, 0xc0}, 10, "site-local"},
        {{0xff}, 8, "multicast"},
        {{0x20}, 3, NULL}, /* global unicast: public */
};

static const char *address_class(const struct egress_addr *a)
{
        const struct special_range *t = a->family == AF_INET ? special_v4 : special_v6;
        size_t n = a->family == AF_INET ? ELEMENTSOF(special_v4) : ELEMENTSOF(special_v6);

        for (size_t i = 0; i < n; i++) {
                struct egress_addr net = {.family = a->family};
                memcpy(net.bytes, t[i].net, sizeof(net.bytes));
                if (addr_in_prefix(a, &net, t[i].prefix))
                        return t[i].class ? t[i].class : "public";
        }
        /* IPv4 outside the table is public; IPv6 outside 2000::/3 is not. */
        return a->family == AF_INET ? "public" : "reserved";
}

bool egress_address_allowed(const struct egress_addr *a, const struct egress_rule *ranges,
                            size_t n_ranges, const char **ret_class)
{
        const char *class = "not an IP address";

        if (a && addr_bits(a->family))
                class = address_class(a);
        if (ret_class)
                *ret_class = class;
        if (!a || !addr_bits(a->family))
                return false;
        if (strcmp(class, "public") == 0)
                return true;
        for (size_t i = 0; ranges && i < n_ranges; i++)
                if (ranges[i].kind == EGRESS_RULE_ADDR &&
                    addr_in_prefix(a, &ranges[i].addr, ranges[i].prefix))
                        return true;
        return false;
}

/* --- socket addresses and text -------------------------------------------------- */

int egress_addr_from_sockaddr(const struct sockaddr *sa, struct egress_addr *ret)
{
        struct egress_addr a = {};

        if (!sa)
                return -EINVAL;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                a.family = AF_INET;
                memcpy(a.bytes, &in->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                a.family = AF_INET6;
                memcpy(a.bytes, &in6->sin6_addr, 16);
        } else {
                return -EAFNOSUPPORT;
        }
        *ret = a;
        return 0;
}

socklen_t egress_addr_to_sockaddr(const struct egress_addr *a, uint16_t port,
                                  struct sockaddr_storage *ss)
{
        memset(ss, 0, sizeof(*ss));
        if (a->family == AF_INET) {
                struct sockaddr_in *in = (struct sockaddr_in *)ss;
                in->sin_family = AF_INET;
                in->sin_port = htons(port);
                memcpy(&in->sin_addr, a->bytes, 4);
                return sizeof(*in);
        }
        if (a->family == AF_INET6) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons(port);
                memcpy(&in6->sin6_addr, a->bytes, 16);
                return sizeof(*in6);
        }
        return 0;
}

const char *egress_addr_format(const struct egress_addr *a, char *buf, size_t len)
{
        if (!a || !buf || len == 0 || !addr_bits(a->family))
                return "(invalid address)";
        if (!inet_ntop(a->family, a->bytes, buf, (socklen_t)len))
                return "(invalid address)";
        return buf;
}

/* --- TLS ClientHello ------------------------------------------------------------ */

/* A bounds-checked reader over untrusted bytes. */
struct cursor {
        const uint8_t *p;
        size_t n;
};

static bool take_uint(struct cursor *c, size_t width, size_t *ret)
{
        size_t v = 0;

        if (c->n < width)
                return false;
        for (size_t i = 0; i < width; i++)
                v = v << 8 | c->p[i];
        c->p += width;
        c->n -= width;
        *ret = v;
        return true;
}

static bool skip(struct cursor *c, size_t k)
{
        if (c->n < k)
                return false;
        c->p += k;
        c->n -= k;
        return true;
}

/* A vector with a width-byte length prefix; ret covers its contents. */
static bool take_vector(struct cursor *c, size_t width, struct cursor *ret)
{
        size_t len;

        if (!take_uint(c, width, &len) || len > c->n)
                return false;
        *ret = (struct cursor){c->p, len};
        return skip(c, len);
}

/* server_name extension data: the first host_name entry, or none (n = 0). */
static int sni_from_extension(struct cursor ext, struct cursor *ret)
{
        struct cursor list, name;
        size_t type;

        if (!take_vector(&ext, 2, &list) || ext.n != 0)
                return -EINVAL;
        *ret = (struct cursor){};
        while (list.n > 0) {
                if (!take_uint(&list, 1, &type) || !take_vector(&list, 2, &name))
                        return -EINVAL;
                if (type == 0 && !ret->p)
                        *ret = name;
        }
        return 0;
}

/* Walks the extensions block; a second server_name extension is malformed. */
static int sni_from_extensions(struct cursor exts, struct cursor *ret)
{
        bool seen = false;

        *ret = (struct cursor){};
        while (exts.n > 0) {
                size_t type;
                struct cursor data;
                if (!take_uint(&exts, 2, &type) || !take_vector(&exts, 2, &data))
                        return -EINVAL;
                if (type != 0)
                        continue;
                if (seen || sni_from_extension(data, ret) < 0)
                        return -EINVAL;
                seen = true;
        }
        return 0;
}

static int sni_from_hello(struct cursor h, struct cursor *ret)
{
        struct cursor v, exts;

        *ret = (struct cursor){};
        if (!skip(&h, 2 + 32)) /* legacy_version, random */
                return -EINVAL;
        if (!take_vector(&h, 1, &v) || v.n > 32) /* session id */
                return -EINVAL;
        if (!take_vector(&h, 2, &v) || v.n == 0 || v.n % 2 != 0) /* cipher suites */
                return -EINVAL;
        if (!take_vector(&h, 1, &v) || v.n == 0) /* compression methods */
                return -EINVAL;
        if (h.n == 0) /* no extensions at all */
                return 0;
        if (!take_vector(&h, 2, &exts) || h.n != 0)
                return -EINVAL;
        return sni_from_extensions(exts, ret);
}

/* Checks the bytes there are of the record header; 0 when the record is whole. */
static int record_check(const uint8_t *buf, size_t len, size_t *ret_len)
{
        if (len > 0 && !buf)
                return -EINVAL;
        if (len >= 1 && buf[0] != 0x16) /* handshake */
                return -EINVAL;
        if (len >= 2 && buf[1] != 3)
                return -EINVAL;
        if (len < 5)
                return -EAGAIN;
        size_t rec = (size_t)buf[3] << 8 | buf[4];
        if (rec == 0 || rec > TLS_RECORD_MAX)
                return -EINVAL;
        if (len >= 6 && buf[5] != 1) /* client_hello */
                return -EINVAL;
        if (len - 5 < rec)
                return -EAGAIN;
        *ret_len = rec;
        return 0;
}

int egress_tls_sni(const uint8_t *buf, size_t len, char *out, size_t out_len)
{
        size_t rec_len, type, hello_len;
        struct cursor name;

        int r = record_check(buf, len, &rec_len);
        if (r < 0)
                return r;
        struct cursor rec = {buf + 5, rec_len};
        if (!take_uint(&rec, 1, &type) || type != 1)
                return -EINVAL;
        /* A ClientHello longer than its record continues in the next one. */
        if (!take_uint(&rec, 3, &hello_len) || hello_len > rec.n)
                return -EINVAL;
        r = sni_from_hello((struct cursor){rec.p, hello_len}, &name);
        if (r < 0)
                return r;
        if (!name.p)
                return 0;
        if (name.n == 0 || memchr(name.p, '\0', name.n) || !out || name.n >= out_len)
                return -EINVAL;
        memcpy(out, name.p, name.n);
        out[name.n] = '\0';
        return 1;
}
