/* libFuzzer target for src/services/egress_policy.c: the same bytes are a
 * host to canonicalise, an allowlist entry, a request to decide against a
 * fixed allowlist, and a TLS ClientHello to read the SNI from. Aborts on
 * any broken invariant:
 *  - a canonical host is short, lowercase, made of allowed bytes, and
 *    canonicalising it again changes nothing; an address's text is
 *    inet_ntop's;
 *  - an entry's canonical text parses back to the same rule, an ADDR rule
 *    has no bits beyond its prefix, and a rule within the fixed list lets
 *    its hosts and ports through egress_decide;
 *  - a decision that allows names a rule of the list that matches the host
 *    (checked here independently) and the port;
 *  - the SNI reader never writes past out_len, always NUL-terminates, gives
 *    the same answer for any out_len that fits, and never changes its mind
 *    once it has decided on a prefix of the bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/egress_policy.h"
#include "fuzz.h"

#define INPUT_MAX 4096 /* bytes used as a host or entry; the SNI reader gets all */

static const char *const fixed_entries[] = {
        "example.com", "*.example.org",      "api.test:8443",   "*:22",          "203.0.113.7",
        "10.0.0.0/8",  "[2001:db8::1]:8080", "[fd00::]/8:5432", "*.deep.sub.io",
};

static const uint16_t ports[] = {0, 22, 80, 443, 5432, 8080, 8443};

static const struct egress_allowlist *fixed_list(void)
{
        static struct egress_rule rules[sizeof(fixed_entries) / sizeof(fixed_entries[0])];
        static struct egress_allowlist al;

        if (al.n == 0) {
                for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
                        struct cage_error err = {};
                        FUZZ_CHECK(egress_rule_parse(fixed_entries[i], true, "fixed", &rules[i],
                                                     &err) == 0);
                }
                al = (struct egress_allowlist){.rules = rules,
                                               .n = sizeof(rules) / sizeof(rules[0])};
        }
        return &al;
}

/* --- independent checks --------------------------------------------------------- */

static unsigned family_bits(int family)
{
        return family == AF_INET ? 32 : 128;
}

static bool bit(const struct egress_addr *a, unsigned i)
{
        return a->bytes[i / 8] >> (7 - i % 8) & 1;
}

static bool in_prefix(const struct egress_addr *a, const struct egress_addr *net, unsigned prefix)
{
        if (a->family != net->family)
                return false;
        for (unsigned i = 0; i < prefix; i++)
                if (bit(a, i) != bit(net, i))
                        return false;
        return true;
}

/* Whether a canonical name is a proper subdomain of domain. */
static bool under(const char *name, const char *domain)
{
        size_t n = strlen(name), d = strlen(domain);
        return n >= d + 2 && name[n - d - 1] == '.' && strcmp(name + n - d, domain) == 0;
}

static bool port_ok(uint16_t rule_port, uint16_t port)
{
        return port != 0 && (rule_port ? port == rule_port : port == 80 || port == 443);
}

static void check_name_bytes(const char *s)
{
        size_t len = strlen(s);
        FUZZ_CHECK(len >= 1 && len <= EGRESS_HOST_MAX);
        FUZZ_CHECK(s[0] != '.' && s[len - 1] != '.' && !strstr(s, ".."));
        for (size_t i = 0; i < len; i++)
                FUZZ_CHECK((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                           s[i] == '-' || s[i] == '_' || s[i] == '.');
        /* A name ending in a number would be an address to a resolver. */
        const char *last = strrchr(s, '.') ? strrchr(s, '.') + 1 : s;
        FUZZ_CHECK(strncmp(last, "0x", 2) != 0 && strspn(last, "0123456789") != strlen(last));
}

/* --- canonicalisation ----------------------------------------------------------- */

static int check_canonical(const char *host, size_t len, char out[EGRESS_HOST_MAX + 1],
                           bool *is_addr, struct egress_addr *a)
{
        char again[EGRESS_HOST_MAX + 1], text[64];
        bool again_addr = false;
        struct egress_addr again_a = {};

        int r = egress_host_canonical(host, len, out, is_addr, a);
        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r < 0)
                return r;
        FUZZ_CHECK(strlen(out) <= EGRESS_HOST_MAX);
        if (*is_addr)
                FUZZ_CHECK(strcmp(egress_addr_format(a, text, sizeof(text)), out) == 0);
        else
                check_name_bytes(out);
        FUZZ_CHECK(egress_host_canonical(out, strlen(out), again, &again_addr, &again_a) == 0);
        FUZZ_CHECK(strcmp(again, out) == 0 && again_addr == *is_addr);
        if (*is_addr)
                FUZZ_CHECK(memcmp(&again_a, a, sizeof(*a)) == 0);
        return 0;
}

static void check_address(const struct egress_addr *a)
{
        const char *class = NULL;
        struct egress_rule all = {.kind = EGRESS_RULE_ADDR, .addr = {.family = a->family}};

        bool ok = egress_address_allowed(a, NULL, 0, &class);
        FUZZ_CHECK(class && ok == (strcmp(class, "public") == 0));
        /* A range holding every address of the family allows any of them. */
        FUZZ_CHECK(egress_address_allowed(a, &all, 1, NULL));
        all.addr.family = a->family == AF_INET ? AF_INET6 : AF_INET;
        FUZZ_CHECK(egress_address_allowed(a, &all, 1, NULL) == ok);
}

/* --- decisions ---------------------------------------------------------------------- */

static bool rule_matches(const struct egress_rule *r, const char *host, bool is_addr,
                         const struct egress_addr *a)
{
        if (is_addr)
                return r->kind == EGRESS_RULE_ADDR && in_prefix(a, &r->addr, r->prefix);
        switch (r->kind) {
        case EGRESS_RULE_NAME:
                return strcmp(r->host, host) == 0;
        case EGRESS_RULE_WILDCARD:
                return under(host, r->host);
        case EGRESS_RULE_ANY:
                return true;
        default:
                return false;
        }
}

static bool check_decide(const struct egress_allowlist *al, const char *host, size_t len,
                         uint16_t port)
{
        struct egress_decision d;
        char canon[EGRESS_HOST_MAX + 1];
        bool is_addr = false;
        struct egress_addr a = {};

        egress_decide(al, host, len, port, &d);
        FUZZ_CHECK(memchr(d.reason, '\0', sizeof(d.reason)));
        int r = egress_host_canonical(host, len, canon, &is_addr, &a);
        if (!d.allowed) {
                FUZZ_CHECK(d.rule == NULL && d.reason[0] != '\0');
                return false;
        }
        FUZZ_CHECK(r == 0 && strcmp(d.host, canon) == 0 && d.is_addr == is_addr);
        FUZZ_CHECK(d.rule >= al->rules && d.rule < al->rules + al->n);
        FUZZ_CHECK(rule_matches(d.rule, canon, is_addr, &a));
        FUZZ_CHECK(port_ok(d.rule->port, port));
        return true;
}

static void check_decisions(const char *host, size_t len)
{
        const struct egress_allowlist *al = fixed_list();
        char canon[EGRESS_HOST_MAX + 1];
        bool is_addr = false;
        struct egress_addr a = {};
        int r = check_canonical(host, len, canon, &is_addr, &a);

        for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
                bool ok = check_decide(al, host, len, ports[i]);
                /* Deciding on the canonical form gives the same answer. */
                if (r == 0)
                        FUZZ_CHECK(check_decide(al, canon, strlen(canon), ports[i]) == ok);
                else
                        FUZZ_CHECK(!ok);
        }
        if (r == 0 && is_addr)
                check_address(&a);
}

/* --- entries ----------------------------------------------------------------------- */

static void check_rule_fields(const struct egress_rule *r, bool cidr)
{
        char canon[EGRESS_HOST_MAX + 1];
        bool is_addr = true;

        FUZZ_CHECK(strlen(r->text) <= EGRESS_ENTRY_MAX);
        if (r->kind == EGRESS_RULE_ADDR) {
                unsigned bits = family_bits(r->addr.family);
                FUZZ_CHECK(r->addr.family == AF_INET || r->addr.family == AF_INET6);
                FUZZ_CHECK(r->host[0] == '\0' && r->prefix <= bits && (cidr || r->prefix == bits));
                for (unsigned i = r->prefix; i < bits; i++)
                        FUZZ_CHECK(!bit(&r->addr, i));
        } else if (r->kind == EGRESS_RULE_ANY) {
                FUZZ_CHECK(r->host[0] == '\0');
        } else {
                FUZZ_CHECK(egress_host_canonical(r->host, strlen(r->host), canon, &is_addr, NULL) ==
                           0);
                FUZZ_CHECK(!is_addr && strcmp(canon, r->host) == 0);
        }
}

/* A rule within the fixed list lets a host it names through on its ports. */
static void check_within_implies_decide(const struct egress_rule *r)
{
        const struct egress_allowlist *al = fixed_list();
        struct egress_allowlist one = {.rules = (struct egress_rule *)r, .n = 1};
        struct cage_error err = {};
        char host[EGRESS_HOST_MAX + 8], text[64];

        FUZZ_CHECK(egress_allowlist_within(&one, &one, "f", &err) == 0);
        if (egress_allowlist_within(&one, al, "f", &err) < 0) {
                FUZZ_CHECK(err.code == -EPERM && strncmp(err.message, "f: \"", 4) == 0);
                return;
        }
        if (r->kind == EGRESS_RULE_ADDR)
                snprintf(host, sizeof(host), "%s",
                         egress_addr_format(&r->addr, text, sizeof(text)));
        else if (r->kind == EGRESS_RULE_WILDCARD && strlen(r->host) <= EGRESS_HOST_MAX - 2)
                snprintf(host, sizeof(host), "x.%s", r->host);
        else if (r->kind == EGRESS_RULE_ANY)
                snprintf(host, sizeof(host), "any-name.invalid");
        else
                snprintf(host, sizeof(host), "%s", r->host);
        if (r->kind == EGRESS_RULE_WILDCARD && strlen(r->host) > EGRESS_HOST_MAX - 2)
                return;
        FUZZ_CHECK(check_decide(al, host, strlen(host), r->port ? r->port : 443));
        if (!r->port)
                FUZZ_CHECK(check_decide(al, host, strlen(host), 80));
}

static bool rule_equal(const struct egress_rule *a, const struct egress_rule *b)
{
        return a->kind == b->kind && strcmp(a->host, b->host) == 0 &&
               a->addr.family == b->addr.family &&
               memcmp(a->addr.bytes, b->addr.bytes, sizeof(a->addr.bytes)) == 0 &&
               a->prefix == b->prefix && a->port == b->port && strcmp(a->text, b->text) == 0;
}

static int check_parse(const char *entry, bool cidr, struct egress_rule *r)
{
        struct egress_rule back;
        struct cage_error err = {};

        int rc = egress_rule_parse(entry, cidr, "f", r, &err);
        FUZZ_CHECK(rc == 0 || rc == -EINVAL);
        if (rc < 0) {
                /* Messages name the field and carry no raw client bytes. */
                FUZZ_CHECK(err.code == -EINVAL && strncmp(err.message, "f: \"", 4) == 0);
                for (const char *p = err.message; *p; p++)
                        FUZZ_CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
                return rc;
        }
        check_rule_fields(r, cidr);
        FUZZ_CHECK(egress_rule_parse(r->text, true, "f", &back, &err) == 0);
        FUZZ_CHECK(rule_equal(&back, r));
        check_within_implies_decide(r);
        return 0;
}

static void check_rule(const char *entry)
{
        struct egress_rule plain, cidr;

        int rp = check_parse(entry, false, &plain);
        int rc = check_parse(entry, true, &cidr);
        /* allow_cidr only adds entries. */
        if (rp == 0)
                FUZZ_CHECK(rc == 0 && rule_equal(&plain, &cidr));
}

/* --- TLS SNI --------------------------------------------------------------------------- */

/* Runs the SNI reader with out_len bytes of room and canaries behind them. */
static int sni(const uint8_t *data, size_t size, size_t out_len, char *name)
{
        char buf[300];

        memset(buf, 0xaa, sizeof(buf));
        int r = egress_tls_sni(data, size, buf, out_len);
        FUZZ_CHECK(r == 1 || r == 0 || r == -EAGAIN || r == -EINVAL);
        for (size_t i = out_len; i < sizeof(buf); i++)
                FUZZ_CHECK((unsigned char)buf[i] == 0xaa);
        if (r == 1) {
                FUZZ_CHECK(memchr(buf, '\0', out_len));
                size_t n = strlen(buf);
                FUZZ_CHECK(n >= 1 && n < out_len);
                memcpy(name, buf, n + 1);
        }
        return r;
}

static void check_sni(const uint8_t *data, size_t size)
{
        char name[300], small[300];
        const size_t cuts[] = {0, 1, 4, 5, 6, 9, 43, 44, 100, size / 2, size ? size - 1 : 0};

        int r = sni(data, size, 256, name);
        int rs = sni(data, size, 16, small);
        if (r == 1 && strlen(name) < 16)
                FUZZ_CHECK(rs == 1 && strcmp(small, name) == 0);
        else
                FUZZ_CHECK(rs == (r == 1 ? -EINVAL : r));
        FUZZ_CHECK(egress_tls_sni(data, size, NULL, 0) == (r == 1 ? -EINVAL : r));

        /* Once a prefix decides, more bytes do not change the answer. */
        for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
                size_t k = cuts[i];
                if (k >= size)
                        continue;
                int rk = sni(data, k, 256, small);
                if (rk != -EAGAIN)
                        FUZZ_CHECK(rk == r && (r != 1 || strcmp(small, name) == 0));
        }
        if (r == 1)
                check_decisions(name, strlen(name));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_sni(data, size);
        if (size > INPUT_MAX)
                return 0;
        char *entry = malloc(size + 1);
        FUZZ_CHECK(entry);
        memcpy(entry, data, size);
        entry[size] = '\0';
        check_decisions((const char *)data, size);
        check_rule(entry);
        free(entry);
        return 0;
}
