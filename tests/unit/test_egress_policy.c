/* Unit tests for the egress policy: these are what prove the allowlist does
 * not leak. Host canonicalisation (case, trailing dots, numeric and IPv6
 * tricks), entry and list parsing (wildcards, ports, CIDR), the layering
 * check in both directions, the per-request decision (lookalikes, apex vs
 * wildcard, ANY vs IP literals, default and explicit ports), the address
 * classes with the allowed-ranges override, and the TLS SNI reader on a real
 * ClientHello and on hand-built malformed ones. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "services/egress_policy.h"

/* --- helpers ----------------------------------------------------------------- */

/* Canonicalises a C string; returns the rc, out gets the result or "(error)". */
static int canon(const char *host, char out[EGRESS_HOST_MAX + 1], bool *is_addr)
{
        bool a = false;
        int r = egress_host_canonical(host, strlen(host), out, &a, NULL);
        if (r < 0)
                strcpy(out, "(error)");
        if (is_addr)
                *is_addr = a;
        return r;
}

#define CHECK_CANON(in, want, want_addr)                                                           \
        do {                                                                                       \
                char out_[EGRESS_HOST_MAX + 1];                                                    \
                bool addr_ = !(want_addr);                                                         \
                CHECK(canon(in, out_, &addr_) == 0);                                               \
                CHECK_STREQ(out_, want);                                                           \
                CHECK(addr_ == (want_addr));                                                       \
        } while (0)

#define CHECK_NOT_CANON(in)                                                                        \
        do {                                                                                       \
                char out_[EGRESS_HOST_MAX + 1];                                                    \
                CHECK(canon(in, out_, NULL) == -EINVAL);                                           \
        } while (0)

/* Parses one entry; returns the rc; the rule's text or the message in text. */
static int rule(const char *entry, bool cidr, struct egress_rule *r, char *text, size_t size)
{
        struct cage_error err = {};
        struct egress_rule tmp;
        int rc = egress_rule_parse(entry, cidr, "network[2]", r ? r : &tmp, &err);
        snprintf(text, size, "%s", rc == 0 ? (r ? r : &tmp)->text : err.message);
        return rc;
}

#define CHECK_RULE(entry, cidr, want_text)                                                         \
        do {                                                                                       \
                char t_[CAGE_ERROR_MESSAGE_MAX];                                                   \
                CHECK(rule(entry, cidr, NULL, t_, sizeof(t_)) == 0);                               \
                CHECK_STREQ(t_, want_text);                                                        \
        } while (0)

/* The entry is refused and the message contains want. */
#define CHECK_BAD_RULE(entry, cidr, want)                                                          \
        do {                                                                                       \
                char t_[CAGE_ERROR_MESSAGE_MAX];                                                   \
                CHECK(rule(entry, cidr, NULL, t_, sizeof(t_)) == -EINVAL);                         \
                if (!strstr(t_, want)) {                                                           \
                        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", t_, want);              \
                        CHECK(strstr(t_, want));                                                   \
                }                                                                                  \
        } while (0)

/* An allowlist from JSON text (aborts the test on a parse failure). */
static struct egress_allowlist list(const char *json, bool cidr)
{
        struct egress_allowlist al = {};
        struct cage_error err = {};
        json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
        if (!j || egress_allowlist_parse(j, "network", cidr, &al, &err) < 0) {
                fprintf(stderr, "  cannot parse %s: %s\n", json, err.message);
                abort();
        }
        json_decref(j);
        return al;
}

static bool allows(const struct egress_allowlist *al, const char *host, uint16_t port)
{
        struct egress_decision d;
        egress_decide(al, host, strlen(host), port, &d);
        if (d.allowed && (!d.rule || d.rule < al->rules || d.rule >= al->rules + al->n))
                return false;
        return d.allowed;
}

static int within(const char *narrow, const char *wide, char *msg, size_t size)
{
        struct egress_allowlist n = list(narrow, false), w = list(wide, true);
        struct cage_error err = {};
        int r = egress_allowlist_within(&n, &w, "network", &err);
        snprintf(msg, size, "%s", r < 0 ? err.message : "");
        egress_allowlist_clear(&n);
        egress_allowlist_clear(&w);
        return r;
}

static struct egress_addr addr(const char *text)
{
        struct egress_addr a = {};
        a.family = strchr(text, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(a.family, text, a.bytes) != 1)
                abort();
        return a;
}

static const char *class_of(const char *text)
{
        const char *class = "(unset)";
        struct egress_addr a = addr(text);
        egress_address_allowed(&a, NULL, 0, &class);
        return class;
}

static bool public(const char *text)
{
        struct egress_addr a = addr(text);
        return egress_address_allowed(&a, NULL, 0, NULL);
}

/* --- host canonicalisation --------------------------------------------------- */

TEST(canonical_names)
{
        CHECK_CANON("example.com", "example.com", false);
        CHECK_CANON("ExAmPlE.CoM", "example.com", false);
        CHECK_CANON("example.com.", "example.com", false);
        CHECK_CANON("_dmarc.my-host.example", "_dmarc.my-host.example", false);
        CHECK_CANON("localhost", "localhost", false);
        CHECK_CANON("123.example.com", "123.example.com", false);
        CHECK_CANON("example.com1", "example.com1", false);
        CHECK_NOT_CANON("example.com..");
        CHECK_NOT_CANON("a..example.com");
        CHECK_NOT_CANON(".example.com");
        CHECK_NOT_CANON(".");
        CHECK_NOT_CANON("");
        CHECK_NOT_CANON("exa mple.com");
        CHECK_NOT_CANON("user@example.com");
        CHECK_NOT_CANON("example.com%2f");
        CHECK_NOT_CANON("example.com:443");
        CHECK_NOT_CANON("*.example.com");
        CHECK_NOT_CANON("ex\xc3\xa4mple.com");
        CHECK_NOT_CANON("example.com/");
        CHECK_NOT_CANON("example.com\\");
        /* An embedded NUL is refused, not cut at. */
        char out[EGRESS_HOST_MAX + 1];
        CHECK(egress_host_canonical("evil.com\0.example.com", 21, out, NULL, NULL) == -EINVAL);
}

TEST(canonical_lengths)
{
        char label[80], host[300], out[EGRESS_HOST_MAX + 1];
        memset(label, 'a', 63);
        label[63] = '\0';
        CHECK(canon(label, out, NULL) == 0);
        label[63] = 'a';
        label[64] = '\0';
        CHECK(canon(label, out, NULL) == -EINVAL);

        /* 253 bytes: four labels of 63 and a dot each, then "b". */
        memset(host, 0, sizeof(host));
        for (int i = 0; i < 4; i++) {
                memset(host + i * 64, 'a', 63);
                host[i * 64 + 63] = '.';
        }
        host[256] = '\0';
        host[253] = '\0';
        host[252] = 'b';
        CHECK(strlen(host) == 253);
        CHECK(canon(host, out, NULL) == 0 && strlen(out) == 253);
        host[253] = '.'; /* a trailing dot does not count */
        host[254] = '\0';
        CHECK(canon(host, out, NULL) == 0 && strlen(out) == 253);
        host[253] = 'c'; /* 254 bytes */
        CHECK(canon(host, out, NULL) == -EINVAL);
}

TEST(canonical_numeric_hosts)
{
        struct egress_addr a = {};
        bool is_addr = false;
        char out[EGRESS_HOST_MAX + 1];

        CHECK(egress_host_canonical("127.0.0.1", 9, out, &is_addr, &a) == 0);
        CHECK(is_addr && a.family == AF_INET && a.bytes[0] == 127 && a.bytes[3] == 1);
        CHECK_CANON("203.0.113.7.", "203.0.113.7", true);
        CHECK_NOT_CANON("127.1");
        CHECK_NOT_CANON("127.0.1");
        CHECK_NOT_CANON("0177.0.0.1");
        CHECK_NOT_CANON("2130706433");
        CHECK_NOT_CANON("0x7f.0.0.1");
        CHECK_NOT_CANON("0x7f000001");
        CHECK_NOT_CANON("0X7F000001");
        CHECK_NOT_CANON("127.0.0.0x1");
        CHECK_NOT_CANON("1.2.3.4.5");
        CHECK_NOT_CANON("256.0.0.1");
        CHECK_NOT_CANON("example.123");
        CHECK_NOT_CANON("example.0x");
        CHECK_NOT_CANON("127.0.0.01");
}

TEST(canonical_ipv6)
{
        CHECK_CANON("::1", "::1", true);
        CHECK_CANON("[::1]", "::1", true);
        CHECK_CANON("2001:DB8:0:0:0:0:0:1", "2001:db8::1", true);
        CHECK_CANON("[::FFFF:127.0.0.1]", "::ffff:127.0.0.1", true);
        CHECK_CANON("[::ffff:7f00:1]", "::ffff:127.0.0.1", true);
        CHECK_NOT_CANON("fe80::1%eth0");
        CHECK_NOT_CANON("[fe80::1%25eth0]");
        CHECK_NOT_CANON("[::1");
        CHECK_NOT_CANON("::1]");
        CHECK_NOT_CANON("[]");
        CHECK_NOT_CANON("[1.2.3.4]");
        CHECK_NOT_CANON("[example.com]");
        CHECK_NOT_CANON("[::1]:80");
        CHECK_NOT_CANON("::ffff:0177.0.0.1");
        CHECK_NOT_CANON("1::2::3");
}

/* --- entries ----------------------------------------------------------------- */

TEST(rule_kinds_and_text)
{
        struct egress_rule r;
        char t[CAGE_ERROR_MESSAGE_MAX];

        CHECK(rule("Example.COM.", false, &r, t, sizeof(t)) == 0);
        CHECK(r.kind == EGRESS_RULE_NAME && r.port == 0);
        CHECK_STREQ(r.host, "example.com");
        CHECK_STREQ(r.text, "example.com");
        CHECK(rule("*.Example.com:8443", false, &r, t, sizeof(t)) == 0);
        CHECK(r.kind == EGRESS_RULE_WILDCARD && r.port == 8443);
        CHECK_STREQ(r.host, "example.com");
        CHECK_STREQ(r.text, "*.example.com:8443");
        CHECK(rule("*", false, &r, t, sizeof(t)) == 0 && r.kind == EGRESS_RULE_ANY);
        CHECK_RULE("*:22", false, "*:22");
        CHECK_RULE("*.internal", false, "*.internal");
        CHECK(rule("203.0.113.7:5432", false, &r, t, sizeof(t)) == 0);
        CHECK(r.kind == EGRESS_RULE_ADDR && r.prefix == 32 && r.port == 5432);
        CHECK(r.addr.family == AF_INET && r.host[0] == '\0');
        CHECK_STREQ(r.text, "203.0.113.7:5432");
        CHECK(rule("[::1]:80", false, &r, t, sizeof(t)) == 0);
        CHECK(r.kind == EGRESS_RULE_ADDR && r.prefix == 128 && r.port == 80);
        CHECK_STREQ(r.text, "[::1]:80");
        CHECK_RULE("[2001:DB8::1]", false, "[2001:db8::1]");
        CHECK_RULE("2001:db8::1", false, "[2001:db8::1]");
        CHECK_RULE("example.com:65535", false, "example.com:65535");
        CHECK_RULE("example.com:1", false, "example.com:1");
        /* Without brackets every colon belongs to the address. */
        CHECK_RULE("2001:db8::1:80", false, "[2001:db8::1:80]");
}

TEST(rule_refusals)
{
        CHECK_BAD_RULE("*.", false, "network[2]: \"*.\" is not a valid entry: ");
        CHECK_BAD_RULE("*.*.x", false, "'*' may only stand alone");
        CHECK_BAD_RULE("a.*.b", false, "'*' may only stand alone");
        CHECK_BAD_RULE("*x.com", false, "'*' may only stand alone");
        CHECK_BAD_RULE("**", false, "'*' may only stand alone");
        CHECK_BAD_RULE("*.1.2.3.4", false, "not an IP address");
        CHECK_BAD_RULE("", false, "is empty");
        CHECK_BAD_RULE(":80", false, "is not a valid entry");
        CHECK_BAD_RULE("example.com:", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:0", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:65536", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:+80", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:080", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:123456", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:8o", false, "1 to 65535");
        CHECK_BAD_RULE("example.com:80:90", false, "IPv6");
        CHECK_BAD_RULE("[example.com]:80", false, "IPv6");
        CHECK_BAD_RULE("[::1]80", false, "may follow ']'");
        CHECK_BAD_RULE("[::1", false, "unclosed");
        CHECK_BAD_RULE("fe80::1%eth0", false, "zone");
        CHECK_BAD_RULE("127.1", false, "dotted-quad");
        CHECK_BAD_RULE("0x7f.0.0.1:80", false, "dotted-quad");
        CHECK_BAD_RULE("exa mple.com", false, "character");
        CHECK_BAD_RULE("http://example.com", false, "is not a valid entry");
        /* Client bytes are escaped in messages. */
        CHECK_BAD_RULE("a\"b\n", false, "\"a\\\"b\\x0a\"");
        char longer[EGRESS_ENTRY_MAX + 2];
        memset(longer, 'a', sizeof(longer) - 1);
        longer[sizeof(longer) - 1] = '\0';
        CHECK_BAD_RULE(longer, false, "longer than 300 bytes");
        CHECK(egress_rule_parse(NULL, false, "x", &(struct egress_rule){}, NULL) == -EINVAL);
}

TEST(rule_cidr)
{
        struct egress_rule r;
        char t[CAGE_ERROR_MESSAGE_MAX];

        CHECK(rule("10.0.0.0/8", true, &r, t, sizeof(t)) == 0);
        CHECK(r.kind == EGRESS_RULE_ADDR && r.prefix == 8 && r.addr.bytes[0] == 10);
        CHECK_STREQ(r.text, "10.0.0.0/8");
        CHECK_BAD_RULE("10.0.0.0/8", false, "only allowed in the server config");
        CHECK_BAD_RULE("10.0.0.1/8", true,
                       "the address has bits set beyond the /8 prefix (the network is 10.0.0.0/8)");
        CHECK_RULE("[fd00::]/8", true, "[fd00::]/8");
        CHECK_RULE("fd00::/8", true, "[fd00::]/8");
        CHECK_RULE("[fd00::]/8:5432", true, "[fd00::]/8:5432");
        CHECK_RULE("10.1.0.0/16:443", true, "10.1.0.0/16:443");
        CHECK_RULE("1.2.3.4/32", true, "1.2.3.4");
        CHECK_RULE("[::1]/128", true, "[::1]");
        CHECK_RULE("0.0.0.0/0", true, "0.0.0.0/0");
        CHECK_BAD_RULE("fd00::1/8", true, "the network is fd00::/8");
        CHECK_BAD_RULE("10.0.0.0/33", true, "0..32");
        CHECK_BAD_RULE("[fd00::]/129", true, "0..128");
        CHECK_BAD_RULE("10.0.0.0/08", true, "0..32");
        CHECK_BAD_RULE("10.0.0.0/", true, "0..32");
        CHECK_BAD_RULE("10.0.0.0/-8", true, "0..32");
        CHECK_BAD_RULE("example.com/8", true, "may only follow an IP address");
        CHECK_BAD_RULE("*.example.com/8", true, "may only follow an IP address");
        CHECK_BAD_RULE("[fd00::/8]", true, "IPv6");
}

/* --- lists ------------------------------------------------------------------- */

TEST(allowlist_parse_and_json)
{
        struct egress_allowlist al = {.n = 99};
        struct cage_error err = {};

        CHECK(egress_allowlist_parse(NULL, "network", false, &al, &err) == 0 && al.n == 0);
        json_t *j = json_null();
        CHECK(egress_allowlist_parse(j, "network", false, &al, &err) == 0 && al.n == 0);
        json_decref(j);

        j = json_loads("\"example.com\"", JSON_DECODE_ANY, NULL);
        CHECK(egress_allowlist_parse(j, "network", false, &al, &err) == -EINVAL);
        CHECK_STREQ(err.message, "network must be an array of strings");
        json_decref(j);

        j = json_loads("[\"example.com\", 443]", 0, NULL);
        CHECK(egress_allowlist_parse(j, "network", false, &al, &err) == -EINVAL);
        CHECK_STREQ(err.message, "network[1] must be a string");
        json_decref(j);

        j = json_loads("[\"a.com\", \"b.com\", \"*.\"]", 0, NULL);
        CHECK(egress_allowlist_parse(j, "network.allow", false, &al, &err) == -EINVAL);
        CHECK(strncmp(err.message, "network.allow[2]: \"*.\" is not a valid entry: ", 45) == 0);
        json_decref(j);

        j = json_array();
        for (int i = 0; i <= EGRESS_RULES_MAX; i++)
                json_array_append_new(j, json_sprintf("h%d.example.com", i));
        CHECK(egress_allowlist_parse(j, "network", false, &al, &err) == -EINVAL);
        CHECK(strstr(err.message, "at most 256") != NULL);
        json_array_remove(j, 0);
        CHECK(egress_allowlist_parse(j, "network", false, &al, &err) == 0 && al.n == 256);
        egress_allowlist_clear(&al);
        CHECK(al.rules == NULL && al.n == 0);
        json_decref(j);

        al = list("[\"Example.com\", \"example.com.\", \"*.example.com\", \"example.com:443\","
                  " \"EXAMPLE.COM\", \"[::1]\", \"::1\"]",
                  false);
        CHECK(al.n == 4);
        j = egress_allowlist_to_json(&al);
        char *dump = json_dumps(j, JSON_COMPACT);
        CHECK_STREQ(dump, "[\"example.com\",\"*.example.com\",\"example.com:443\",\"[::1]\"]");
        free(dump);
        json_decref(j);
        egress_allowlist_clear(&al);
        egress_allowlist_clear(NULL);
}

TEST(within_hosts)
{
        char m[CAGE_ERROR_MESSAGE_MAX];
        const char *wide = "[\"example.com\", \"*.corp.example\", \"*\", \"10.0.0.0/8\","
                           " \"[fd00::]/8\", \"203.0.113.7\"]";

        CHECK(within("[]", "[]", m, sizeof(m)) == 0);
        CHECK(within("[\"example.com\", \"a.corp.example\", \"*.corp.example\"]", wide, m,
                     sizeof(m)) == 0);
        CHECK(within("[\"*.x.corp.example\", \"anything.org\", \"*.org\", \"*\"]", wide, m,
                     sizeof(m)) == 0);
        CHECK(within("[\"10.1.2.3\", \"[fd12::1]\", \"203.0.113.7\"]", wide, m, sizeof(m)) == 0);

        /* "*" never covers IP literals. */
        CHECK(within("[\"1.2.3.4\"]", "[\"*\"]", m, sizeof(m)) == -EPERM);
        CHECK_STREQ(m, "network: \"1.2.3.4\" is not within this server's network allowlist "
                       "(network.allow in its config)");
        CHECK(within("[\"[2606:4700::1111]\"]", "[\"*\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"203.0.113.8\"]", wide, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"[fe80::1]\"]", wide, m, sizeof(m)) == -EPERM);

        /* Narrower host sets do not cover wider ones. */
        const char *names = "[\"example.com\", \"*.corp.example\"]";
        CHECK(within("[\"*\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"*.example.com\"]", names, m, sizeof(m)) == -EPERM);
        CHECK_STREQ(m, "network: \"*.example.com\" is not within this server's network allowlist "
                       "(network.allow in its config)");
        CHECK(within("[\"corp.example\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"*.example\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"evilcorp.example\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"example.com.evil.com\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(within("[\"www.example.com\"]", names, m, sizeof(m)) == -EPERM);
        /* The first entry that is not covered is named. */
        CHECK(within("[\"example.com\", \"b.org\", \"c.org\"]", names, m, sizeof(m)) == -EPERM);
        CHECK(strstr(m, "\"b.org\"") != NULL);
}

TEST(within_ports_and_ranges)
{
        char m[CAGE_ERROR_MESSAGE_MAX];

        CHECK(within("[\"a.com:443\", \"a.com:80\"]", "[\"a.com\"]", m, sizeof(m)) == 0);
        CHECK(within("[\"a.com:8443\"]", "[\"a.com\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"a.com\"]", "[\"a.com:443\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"a.com\"]", "[\"a.com:443\", \"a.com:80\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"a.com:8443\"]", "[\"a.com:8443\"]", m, sizeof(m)) == 0);
        CHECK(within("[\"a.com:8443\"]", "[\"*.com:8443\"]", m, sizeof(m)) == 0);
        CHECK(within("[\"a.com:22\"]", "[\"*:22\"]", m, sizeof(m)) == 0);
        CHECK(within("[\"*:22\"]", "[\"*\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"10.0.0.5:5432\"]", "[\"10.0.0.0/24:5432\"]", m, sizeof(m)) == 0);
        CHECK(within("[\"10.0.0.5:5433\"]", "[\"10.0.0.0/24:5432\"]", m, sizeof(m)) == -EPERM);
        CHECK(within("[\"10.0.1.5\"]", "[\"10.0.0.0/24\"]", m, sizeof(m)) == -EPERM);
        /* A v4-mapped address is not its IPv4 address. */
        CHECK(within("[\"[::ffff:10.0.0.1]\"]", "[\"10.0.0.0/8\"]", m, sizeof(m)) == -EPERM);
        /* A range in the narrow list must lie inside one in the wide list. */
        struct egress_allowlist n = list("[\"10.0.0.0/16\"]", true);
        struct egress_allowlist w = list("[\"10.0.0.0/8\"]", true);
        struct cage_error err = {};
        CHECK(egress_allowlist_within(&n, &w, "network", &err) == 0);
        CHECK(egress_allowlist_within(&w, &n, "network", &err) == -EPERM);
        CHECK(egress_allowlist_within(NULL, &w, "network", &err) == 0);
        CHECK(egress_allowlist_within(&n, NULL, "network", &err) == -EPERM);
        egress_allowlist_clear(&n);
        egress_allowlist_clear(&w);
}

/* --- decisions --------------------------------------------------------------- */

TEST(decide_names_and_lookalikes)
{
        struct egress_allowlist al = list("[\"allowed.com\", \"*.example.com\"]", false);

        CHECK(allows(&al, "allowed.com", 443));
        CHECK(allows(&al, "ALLOWED.com.", 80));
        CHECK(!allows(&al, "allowed.com..", 443));
        CHECK(!allows(&al, "evil.com.allowed.com", 443)); /* a subdomain is not the name */
        CHECK(!allows(&al, "allowed.com.evil.com", 443));
        CHECK(!allows(&al, "evilallowed.com", 443));
        CHECK(!allows(&al, "allowed.co", 443));
        CHECK(!allows(&al, "allowed.com@evil.com", 443));
        CHECK(!allows(&al, "allowed%2ecom", 443));

        CHECK(allows(&al, "a.example.com", 443));
        CHECK(allows(&al, "A.B.Example.Com.", 443));
        CHECK(!allows(&al, "example.com", 443)); /* the apex is not under the wildcard */
        CHECK(!allows(&al, "badexample.com", 443));
        CHECK(!allows(&al, "example.com.evil.com", 443));
        CHECK(!allows(&al, ".example.com", 443));
        CHECK(!allows(&al, "a..example.com", 443));

        struct egress_decision d;
        egress_decide(&al, "evil.com", 8, 443, &d);
        CHECK(!d.allowed && d.rule == NULL);
        CHECK_STREQ(d.reason, "host \"evil.com\" is not in this sandbox's network allowlist");
        egress_decide(&al, "Www.Example.com", 15, 443, &d);
        CHECK(d.allowed && d.rule == &al.rules[1] && !d.is_addr);
        CHECK_STREQ(d.host, "www.example.com");
        egress_decide(&al, "allowed.com\0.x", 14, 443, &d); /* no cut at a NUL */
        CHECK(!d.allowed);
        egress_decide(&al, "allowed.com", 12, 443, &d);
        CHECK(!d.allowed);
        egress_decide(&al, "bad\x01host", 9, 443, &d);
        CHECK(!d.allowed && strstr(d.reason, "bad\\x01host") != NULL);
        egress_decide(NULL, "allowed.com", 11, 443, &d);
        CHECK(!d.allowed);
        egress_allowlist_clear(&al);
}

TEST(decide_ports)
{
        struct egress_allowlist al =
                list("[\"example.com\", \"example.com:8443\", \"db.example:5432\"]", false);
        struct egress_decision d;

        CHECK(allows(&al, "example.com", 80));
        CHECK(allows(&al, "example.com", 443));
        CHECK(allows(&al, "example.com", 8443));
        CHECK(!allows(&al, "example.com", 22));
        CHECK(!allows(&al, "example.com", 0));
        CHECK(allows(&al, "db.example", 5432));
        CHECK(!allows(&al, "db.example", 443));
        egress_decide(&al, "example.com", 11, 22, &d);
        CHECK_STREQ(d.reason,
                    "port 22 is not allowed for \"example.com\" (allowed: 80, 443, 8443)");
        egress_decide(&al, "db.example", 10, 80, &d);
        CHECK_STREQ(d.reason, "port 80 is not allowed for \"db.example\" (allowed: 5432)");
        egress_decide(&al, "example.com", 11, 0, &d);
        CHECK(!d.allowed && strstr(d.reason, "port 0") != NULL);
        egress_allowlist_clear(&al);
}

TEST(decide_ip_literals)
{
        struct egress_allowlist al = list(
                "[\"*\", \"203.0.113.7\", \"[2001:db8::1]:8080\", \"[::ffff:7f00:1]\"]", false);
        struct egress_decision d;

        CHECK(allows(&al, "anything.example", 443));
        CHECK(allows(&al, "203.0.113.7", 443));
        CHECK(allows(&al, "203.0.113.7.", 80));
        CHECK(!allows(&al, "203.0.113.7", 8080));
        CHECK(!allows(&al, "203.0.113.8", 443)); /* "*" never matches an IP literal */
        CHECK(!allows(&al, "8.8.8.8", 443));
        CHECK(!allows(&al, "127.1", 443));
        CHECK(!allows(&al, "2130706433", 443));
        CHECK(allows(&al, "[2001:db8::1]", 8080));
        CHECK(allows(&al, "2001:DB8:0::1", 8080));
        CHECK(!allows(&al, "[2001:db8::1]", 443));
        CHECK(!allows(&al, "[2001:db8::1%eth0]", 8080));
        CHECK(allows(&al, "[::ffff:127.0.0.1]", 443));
        CHECK(!allows(&al, "127.0.0.1", 443)); /* the mapped rule is not the IPv4 one */
        egress_decide(&al, "1.2.3.4", 7, 443, &d);
        CHECK(!d.allowed && d.is_addr && d.addr.family == AF_INET);
        CHECK_STREQ(d.reason, "IP address 1.2.3.4 is not in this sandbox's network allowlist");
        egress_decide(&al, "[2001:db8::1]", 13, 443, &d);
        CHECK_STREQ(d.reason, "port 443 is not allowed for 2001:db8::1 (allowed: 8080)");
        CHECK_STREQ(d.host, "2001:db8::1");
        egress_allowlist_clear(&al);

        al = list("[\"10.0.0.0/8\"]", true);
        CHECK(allows(&al, "10.200.0.1", 443));
        CHECK(!allows(&al, "11.0.0.1", 443));
        egress_allowlist_clear(&al);
}

/* --- address classes --------------------------------------------------------- */

TEST(address_classes_ipv4)
{
        CHECK_STREQ(class_of("0.0.0.0"), "unspecified");
        CHECK_STREQ(class_of("0.1.2.3"), "unspecified");
        CHECK_STREQ(class_of("10.1.2.3"), "private");
        CHECK_STREQ(class_of("100.64.0.1"), "shared (CGNAT)");
        CHECK_STREQ(class_of("100.127.255.255"), "shared (CGNAT)");
        CHECK_STREQ(class_of("100.128.0.1"), "public");
        CHECK_STREQ(class_of("127.0.0.1"), "loopback");
        CHECK_STREQ(class_of("169.254.169.254"), "link-local");
        CHECK_STREQ(class_of("172.16.0.1"), "private");
        CHECK_STREQ(class_of("172.31.255.255"), "private");
        CHECK_STREQ(class_of("172.32.0.1"), "public");
        CHECK_STREQ(class_of("192.0.0.8"), "IETF protocol assignments");
        CHECK_STREQ(class_of("192.0.2.1"), "documentation");
        CHECK_STREQ(class_of("198.51.100.1"), "documentation");
        CHECK_STREQ(class_of("203.0.113.1"), "documentation");
        CHECK_STREQ(class_of("192.88.99.1"), "6to4");
        CHECK_STREQ(class_of("192.168.1.1"), "private");
        CHECK_STREQ(class_of("198.18.0.1"), "benchmarking");
        CHECK_STREQ(class_of("198.19.255.255"), "benchmarking");
        CHECK_STREQ(class_of("224.0.0.1"), "multicast");
        CHECK_STREQ(class_of("239.255.255.250"), "multicast");
        CHECK_STREQ(class_of("240.0.0.1"), "reserved");
        CHECK_STREQ(class_of("255.255.255.254"), "reserved");
        CHECK_STREQ(class_of("255.255.255.255"), "broadcast");
        CHECK(public("8.8.8.8"));
        CHECK(public("1.1.1.1"));
        CHECK(!public("127.0.0.1"));
        CHECK(!public("169.254.169.254"));
}

TEST(address_classes_ipv6)
{
        CHECK_STREQ(class_of("::"), "unspecified");
        CHECK_STREQ(class_of("::1"), "loopback");
        CHECK_STREQ(class_of("::ffff:127.0.0.1"), "v4-mapped");
        CHECK_STREQ(class_of("::ffff:8.8.8.8"), "v4-mapped");
        CHECK_STREQ(class_of("::8.8.8.8"), "v4-compatible");
        CHECK_STREQ(class_of("64:ff9b::808:808"), "NAT64");
        CHECK_STREQ(class_of("64:ff9b:1::1"), "NAT64");
        CHECK_STREQ(class_of("100::1"), "discard");
        CHECK_STREQ(class_of("2001::1"), "Teredo");
        CHECK_STREQ(class_of("2001:db8::1"), "documentation");
        CHECK_STREQ(class_of("2002:7f00:1::1"), "6to4");
        CHECK_STREQ(class_of("fc00::1"), "unique-local");
        CHECK_STREQ(class_of("fd12:3456::1"), "unique-local");
        CHECK_STREQ(class_of("fe80::1"), "link-local");
        CHECK_STREQ(class_of("fec0::1"), "site-local");
        CHECK_STREQ(class_of("ff02::1"), "multicast");
        CHECK_STREQ(class_of("4000::1"), "reserved");
        CHECK_STREQ(class_of("::2"), "v4-compatible");
        CHECK_STREQ(class_of("2606:4700::1111"), "public");
        CHECK(public("2606:4700::1111"));
        CHECK(public("2a00:1450:4001::200e"));
        CHECK(!public("::ffff:8.8.8.8"));
        CHECK(!public("fe80::1"));
        CHECK(!public("1::"));
}

TEST(address_allowed_ranges)
{
        struct egress_allowlist r = list("[\"127.0.0.1/32\", \"10.0.0.0/8\", \"[fd00::]/8\","
                                         " \"example.com\", \"*\"]",
                                         true);
        struct egress_addr a;
        const char *class = NULL;

        a = addr("127.0.0.1");
        CHECK(egress_address_allowed(&a, r.rules, r.n, &class));
        CHECK_STREQ(class, "loopback");
        a = addr("127.0.0.2");
        CHECK(!egress_address_allowed(&a, r.rules, r.n, &class));
        a = addr("10.9.8.7");
        CHECK(egress_address_allowed(&a, r.rules, r.n, NULL));
        a = addr("192.168.0.1");
        CHECK(!egress_address_allowed(&a, r.rules, r.n, NULL));
        a = addr("fd00::5");
        CHECK(egress_address_allowed(&a, r.rules, r.n, NULL));
        a = addr("fe80::1");
        CHECK(!egress_address_allowed(&a, r.rules, r.n, NULL));
        /* Families do not mix: ::ffff:127.0.0.1 is not 127.0.0.1. */
        a = addr("::ffff:127.0.0.1");
        CHECK(!egress_address_allowed(&a, r.rules, r.n, NULL));
        a = addr("::1");
        CHECK(!egress_address_allowed(&a, r.rules, r.n, NULL));
        a = addr("8.8.8.8");
        CHECK(egress_address_allowed(&a, r.rules, r.n, &class));
        CHECK_STREQ(class, "public");
        a = (struct egress_addr){.family = AF_UNIX};
        CHECK(!egress_address_allowed(&a, r.rules, r.n, NULL));
        CHECK(!egress_address_allowed(NULL, r.rules, r.n, NULL));
        egress_allowlist_clear(&r);
}

TEST(address_helpers)
{
        struct sockaddr_storage ss;
        struct egress_addr a = addr("2001:db8::7"), b = {};
        char buf[64];

        socklen_t n = egress_addr_to_sockaddr(&a, 8443, &ss);
        CHECK(n == sizeof(struct sockaddr_in6));
        CHECK(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == 8443);
        CHECK(egress_addr_from_sockaddr((struct sockaddr *)&ss, &b) == 0);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        CHECK_STREQ(egress_addr_format(&b, buf, sizeof(buf)), "2001:db8::7");

        a = addr("203.0.113.7");
        CHECK(egress_addr_to_sockaddr(&a, 80, &ss) == sizeof(struct sockaddr_in));
        CHECK(((struct sockaddr_in *)&ss)->sin_port == htons(80));
        CHECK(egress_addr_from_sockaddr((struct sockaddr *)&ss, &b) == 0);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        CHECK_STREQ(egress_addr_format(&b, buf, sizeof(buf)), "203.0.113.7");

        ss.ss_family = AF_UNIX;
        CHECK(egress_addr_from_sockaddr((struct sockaddr *)&ss, &b) == -EAFNOSUPPORT);
        b.family = AF_UNIX;
        CHECK(egress_addr_to_sockaddr(&b, 80, &ss) == 0);
}

/* --- TLS SNI ----------------------------------------------------------------- */

/* A ClientHello Python's ssl module (OpenSSL 3.0) sent for example.com. */
static const uint8_t real_hello[] = {
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x7b, 0x6b, 0x3c, 0xe2,
        0x40, 0x8e, 0x91, 0xb3, 0x1a, 0x6b, 0x7c, 0x42, 0xab, 0xe3, 0x26, 0x6a, 0x13, 0x62, 0xf8,
        0x0c, 0x7a, 0xe4, 0xe2, 0x1c, 0xcf, 0x93, 0xd6, 0x03, 0xfb, 0x0e, 0x15, 0xfd, 0x20, 0x4d,
        0x3d, 0xe1, 0x80, 0xeb, 0x79, 0x0a, 0x5f, 0xd5, 0xa7, 0x2c, 0x2c, 0x67, 0x98, 0x64, 0x0b,
        0x50, 0x9e, 0xe3, 0x1d, 0xab, 0xac, 0xd1, 0x3b, 0x30, 0x3b, 0x2f, 0xe0, 0xd2, 0xb4, 0xd4,
        0x0a, 0x00, 0x24, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0xc0, 0x2b,
        0xc0, 0x2f, 0xcc, 0xa9, 0xcc, 0xa8, 0xc0, 0x24, 0xc0, 0x28, 0xc0, 0x23, 0xc0, 0x27, 0x00,
        0x9f, 0x00, 0x9e, 0x00, 0x6b, 0x00, 0x67, 0x00, 0xff, 0x01, 0x00, 0x01, 0x8f, 0x00, 0x00,
        0x00, 0x10, 0x00, 0x0e, 0x00, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e,
        0x63, 0x6f, 0x6d, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16,
        0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01,
        0x01, 0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00,
        0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06,
        0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05,
        0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04,
        0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03, 0x00,
        0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20,
        0xe0, 0xba, 0x27, 0xd7, 0x38, 0xe0, 0x87, 0xa8, 0x08, 0xea, 0xca, 0x0c, 0xca, 0x24, 0xb4,
        0xec, 0x2b, 0xbe, 0x2b, 0xc1, 0x4d, 0xe0, 0x6e, 0x69, 0x9b, 0xa7, 0x48, 0xd6, 0xd3, 0xe2,
        0x83, 0x4b, 0x00, 0x15, 0x00, 0xe2, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

struct hello_opts {
        const char *sni;  /* NULL: no server_name extension */
        size_t sni_len;   /* bytes of sni */
        bool dup_sni;     /* two server_name extensions */
        int hs_len_delta; /* added to the handshake length */
        int ext_len_delta;
        size_t session_id;
};

static size_t put16(uint8_t *p, size_t at, size_t v)
{
        p[at] = (uint8_t)(v >> 8);
        p[at + 1] = (uint8_t)v;
        return at + 2;
}

static size_t put_sni_ext(uint8_t *p, size_t at, const struct hello_opts *o)
{
        at = put16(p, at, 0);              /* server_name */
        at = put16(p, at, o->sni_len + 5); /* extension length */
        at = put16(p, at, o->sni_len + 3); /* server_name_list length */
        p[at++] = 0;                       /* host_name */
        at = put16(p, at, o->sni_len);
        memcpy(p + at, o->sni, o->sni_len);
        return at + o->sni_len;
}

/* A minimal TLS 1.2-style ClientHello in one record; returns its length. */
static size_t build_hello(uint8_t *p, const struct hello_opts *o)
{
        size_t at = 9, ext_at;

        at = put16(p, at, 0x0303);
        memset(p + at, 0xab, 32);
        at += 32;
        p[at++] = (uint8_t)o->session_id;
        memset(p + at, 0x11, o->session_id);
        at += o->session_id;
        at = put16(p, at, 4);
        at = put16(p, at, 0x1301);
        at = put16(p, at, 0xc02f);
        p[at++] = 1;
        p[at++] = 0;
        ext_at = at;
        at += 2;
        at = put16(p, at, 0x000a); /* supported_groups */
        at = put16(p, at, 4);
        at = put16(p, at, 2);
        at = put16(p, at, 0x001d);
        if (o->sni)
                at = put_sni_ext(p, at, o);
        if (o->sni && o->dup_sni)
                at = put_sni_ext(p, at, o);
        put16(p, ext_at, (size_t)((int)(at - ext_at - 2) + o->ext_len_delta));
        p[0] = 0x16;
        put16(p, 1, 0x0301);
        put16(p, 3, at - 5);
        p[5] = 1;
        size_t hs = (size_t)((int)(at - 9) + o->hs_len_delta);
        p[6] = (uint8_t)(hs >> 16);
        put16(p, 7, hs);
        return at;
}

TEST(sni_real_client_hello)
{
        char out[256];

        CHECK(egress_tls_sni(real_hello, sizeof(real_hello), out, sizeof(out)) == 1);
        CHECK_STREQ(out, "example.com");
        CHECK(egress_tls_sni(real_hello, sizeof(real_hello), out, 12) == 1);
        CHECK(egress_tls_sni(real_hello, sizeof(real_hello), out, 11) == -EINVAL);
        /* Bytes after the record (the next record) do not matter. */
        uint8_t more[sizeof(real_hello) + 8];
        memcpy(more, real_hello, sizeof(real_hello));
        memset(more + sizeof(real_hello), 0x17, 8);
        CHECK(egress_tls_sni(more, sizeof(more), out, sizeof(out)) == 1);
        /* Every prefix needs more bytes; none is misread. */
        bool all_again = true;
        for (size_t n = 0; n < sizeof(real_hello); n++)
                if (egress_tls_sni(real_hello, n, out, sizeof(out)) != -EAGAIN)
                        all_again = false;
        CHECK(all_again);
        /* A changed byte in the name's length field breaks the bounds. */
        uint8_t bad[sizeof(real_hello)];
        memcpy(bad, real_hello, sizeof(bad));
        bad[125] = 0xff; /* the high byte of the host_name length */
        CHECK(egress_tls_sni(bad, sizeof(bad), out, sizeof(out)) == -EINVAL);
}

TEST(sni_built_client_hellos)
{
        uint8_t p[1024];
        char out[64];
        size_t n;

        n = build_hello(p, &(struct hello_opts){.sni = "Api.Example.com", .sni_len = 15});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == 1);
        CHECK_STREQ(out, "Api.Example.com"); /* raw: canonicalising is the caller's job */
        n = build_hello(p, &(struct hello_opts){.sni = "a.b", .sni_len = 3, .session_id = 32});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == 1);
        n = build_hello(p, &(struct hello_opts){.sni = "a.b", .sni_len = 3, .session_id = 33});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){0});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == 0);
        n = build_hello(p, &(struct hello_opts){.sni = "a\0b.com", .sni_len = 7});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){.sni = "", .sni_len = 0});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){.sni = "a.com", .sni_len = 5, .dup_sni = true});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        /* A ClientHello that says it goes on in the next record. */
        n = build_hello(p, &(struct hello_opts){.sni = "a.com", .sni_len = 5, .hs_len_delta = 1});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){.sni = "a.com", .sni_len = 5, .ext_len_delta = 1});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){.sni = "a.com", .sni_len = 5, .ext_len_delta = -1});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        /* A name longer than out is refused, never cut. */
        char longname[300];
        memset(longname, 'x', sizeof(longname));
        n = build_hello(p, &(struct hello_opts){.sni = longname, .sni_len = 64});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == -EINVAL);
        n = build_hello(p, &(struct hello_opts){.sni = longname, .sni_len = 63});
        CHECK(egress_tls_sni(p, n, out, sizeof(out)) == 1 && strlen(out) == 63);
        CHECK(egress_tls_sni(p, n, NULL, 0) == -EINVAL);
}

TEST(sni_not_a_client_hello)
{
        char out[64];
        static const uint8_t http[] = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
        static const uint8_t app_data[] = {0x17, 0x03, 0x03, 0x00, 0x01, 0x00};
        static const uint8_t server_hello[] = {0x16, 0x03, 0x03, 0x00, 0x04, 0x02, 0, 0, 0};
        static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x00, 0x02};
        static const uint8_t huge[] = {0x16, 0x03, 0x01, 0x48, 0x01};
        static const uint8_t empty_record[] = {0x16, 0x03, 0x01, 0x00, 0x00};
        static const uint8_t short_hs[] = {0x16, 0x03, 0x01, 0x00, 0x02, 0x01, 0x00};
        static const uint8_t version2[] = {0x16, 0x02, 0x00, 0x00, 0x05};

        CHECK(egress_tls_sni(http, sizeof(http) - 1, out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(app_data, sizeof(app_data), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(server_hello, sizeof(server_hello), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(sslv2, sizeof(sslv2), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(huge, sizeof(huge), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(empty_record, sizeof(empty_record), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(short_hs, sizeof(short_hs), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(version2, sizeof(version2), out, sizeof(out)) == -EINVAL);
        CHECK(egress_tls_sni(NULL, 0, out, sizeof(out)) == -EAGAIN);
        CHECK(egress_tls_sni(real_hello, 4, out, sizeof(out)) == -EAGAIN);
        CHECK(egress_tls_sni(real_hello, 5, out, sizeof(out)) == -EAGAIN);
}

RUN_TESTS(T(canonical_names), T(canonical_lengths), T(canonical_numeric_hosts), T(canonical_ipv6),
          T(rule_kinds_and_text), T(rule_refusals), T(rule_cidr), T(allowlist_parse_and_json),
          T(within_hosts), T(within_ports_and_ranges), T(decide_names_and_lookalikes),
          T(decide_ports), T(decide_ip_literals), T(address_classes_ipv4), T(address_classes_ipv6),
          T(address_allowed_ranges), T(address_helpers), T(sni_real_client_hello),
          T(sni_built_client_hellos), T(sni_not_a_client_hello))
