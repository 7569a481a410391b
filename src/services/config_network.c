/* The config's "network", "pip" and "fetch" sections (docs/CONFIG.md,
 * docs/NETWORK.md): what sandboxes may ever reach through the egress proxy
 * and its limits, the package index of pip requirements and the hosts its
 * install phase may reach, and the limits of `files` fetched by URL.
 *
 * Defaults: sandboxes may ask for any host name ("*", ports 80 and 443) but
 * no special-purpose address (loopback, private, ...); the public PyPI. A
 * sandbox without a `network` list of its own still has no network. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_private.h"
#include "util/error.h"

#define INDEX_URL_MAX   1024
#define DEFAULT_INDEX   "https://pypi.org/simple"
#define PYPI_FILES_HOST "files.pythonhosted.org"
#define MIB             (1024ULL * 1024)

static int parse_allow(json_t *net, struct cage_config_network *n, struct cage_error *err)
{
        json_t *allow = json_object_get(net, "allow");
        json_auto_t *dflt = NULL;
        if (!allow) {
                allow = dflt = json_pack("[s]", "*");
                if (!allow)
                        return cage_fail(err, -ENOMEM, "network.allow");
        }
        int r = egress_allowlist_parse(allow, "network.allow", true, &n->allow, err);
        if (r < 0)
                return r;
        return egress_allowlist_parse(json_object_get(net, "allow_private"),
                                      "network.allow_private", true, &n->allow_private, err);
}

static int only_ranges(const struct egress_allowlist *al, struct cage_error *err)
{
        for (size_t i = 0; i < al->n; i++)
                if (al->rules[i].kind != EGRESS_RULE_ADDR || al->rules[i].port)
                        return cage_fail(err, -EINVAL,
                                         "network.allow_private[%zu]: \"%s\" must be an IP address "
                                         "or a CIDR range without a port",
                                         i, al->rules[i].text);
        return 0;
}

static int parse_network(json_t *root, struct cage_config_network *n, struct cage_error *err)
{
        static const char *const keys[] = {"allow",     "allow_private",     "max_connections",
                                           "max_bytes", "connect_timeout_s", "idle_timeout_s",
                                           NULL};
        json_t *net = NULL;
        int r = config_get_object(root, "", "network", &net, err);
        if (r < 0 || (net && (r = config_check_keys(net, "network", keys, err)) < 0))
                return r;
        if ((r = parse_allow(net, n, err)) < 0 || (r = only_ranges(&n->allow_private, err)) < 0)
                return r;
        double v;
        n->max_connections = 16;
        n->max_bytes = 1024 * MIB;
        n->connect_timeout_s = 10;
        n->idle_timeout_s = 120;
        if ((r = config_get_number(net, "network", "max_connections", NUM_U32, 1, 1024, &v, err)) <
            0)
                return r;
        if (r)
                n->max_connections = (uint32_t)v;
        if ((r = config_get_number(net, "network", "max_bytes", NUM_U64, 1024, 1ULL << 50, &v,
                                   err)) < 0)
                return r;
        if (r)
                n->max_bytes = (uint64_t)v;
        if ((r = config_get_number(net, "network", "connect_timeout_s", NUM_U32, 1, 300, &v, err)) <
            0)
                return r;
        if (r)
                n->connect_timeout_s = (uint32_t)v;
        if ((r = config_get_number(net, "network", "idle_timeout_s", NUM_U32, 1, 86400, &v, err)) <
            0)
                return r;
        if (r)
                n->idle_timeout_s = (uint32_t)v;
        return 0;
}

/* The "host[:port]" of an http(s) URL, and whether it is plain http. */
static int url_authority(const char *url, char *out, size_t out_len, bool *plain)
{
        const char *p;
        if (strncmp(url, "https://", 8) == 0) {
                p = url + 8;
                *plain = false;
        } else if (strncmp(url, "http://", 7) == 0) {
                p = url + 7;
                *plain = true;
        } else {
                return -EINVAL;
        }
        size_t n = strcspn(p, "/?#");
        if (n == 0 || n >= out_len || memchr(p, '@', n))
                return -EINVAL;
        memcpy(out, p, n);
        out[n] = '\0';
        return 0;
}

static int add_rule(struct egress_allowlist *al, const char *text, const char *field,
                    struct cage_error *err)
{
        struct egress_rule rule;
        int r = egress_rule_parse(text, true, field, &rule, err);
        if (r < 0)
                return r;
        struct egress_rule *more = realloc(al->rules, (al->n + 1) * sizeof(*more));
        if (!more)
                return cage_fail(err, -ENOMEM, "%s", field);
        al->rules = more;
        al->rules[al->n++] = rule;
        return 0;
}

static int parse_index(json_t *pip, struct cage_config_pip *p, struct cage_error *err)
{
        const char *url = DEFAULT_INDEX;
        char authority[EGRESS_ENTRY_MAX + 1];
        bool plain;
        int r = config_get_string(pip, "pip", "index_url", INDEX_URL_MAX, &url, err);
        if (r < 0)
                return r;
        if (url_authority(url, authority, sizeof(authority), &plain) < 0)
                return cage_fail(err, -EINVAL,
                                 "pip.index_url: \"%s\" must be an http:// or https:// URL "
                                 "without user information",
                                 url);
        if (!(p->index_url = strdup(url)))
                return cage_fail(err, -ENOMEM, "pip.index_url");
        if (plain && !(p->trusted_host = strdup(authority)))
                return cage_fail(err, -ENOMEM, "pip.index_url");
        /* An authority without a port must be allowed on the scheme's port. */
        if ((r = add_rule(&p->hosts, authority, "pip.index_url", err)) < 0)
                return r;
        if (strcmp(url, DEFAULT_INDEX) == 0)
                return add_rule(&p->hosts, PYPI_FILES_HOST, "pip.index_url", err);
        return 0;
}

static int parse_pip(json_t *root, struct cage_config_pip *p, struct cage_error *err)
{
        static const char *const keys[] = {"index_url", "extra_hosts", "timeout_s", "max_mib",
                                           NULL};
        json_t *pip = NULL;
        int r = config_get_object(root, "", "pip", &pip, err);
        if (r < 0 || (pip && (r = config_check_keys(pip, "pip", keys, err)) < 0))
                return r;
        if ((r = parse_index(pip, p, err)) < 0)
                return r;
        struct egress_allowlist extra = {0};
        if ((r = egress_allowlist_parse(json_object_get(pip, "extra_hosts"), "pip.extra_hosts",
                                        true, &extra, err)) < 0)
                return r;
        for (size_t i = 0; i < extra.n && r == 0; i++)
                r = add_rule(&p->hosts, extra.rules[i].text, "pip.extra_hosts", err);
        egress_allowlist_clear(&extra);
        double v;
        p->timeout_s = 600;
        p->max_mib = 2048;
        if (r < 0 ||
            (r = config_get_number(pip, "pip", "timeout_s", NUM_U64, 10, 7200, &v, err)) < 0)
                return r;
        if (r)
                p->timeout_s = (uint64_t)v;
        if ((r = config_get_number(pip, "pip", "max_mib", NUM_U64, 64, 1 << 20, &v, err)) < 0)
                return r;
        if (r)
                p->max_mib = (uint64_t)v;
        return 0;
}

static int parse_fetch(json_t *root, struct cage_config_fetch *f, struct cage_error *err)
{
        static const char *const keys[] = {"max_bytes", "timeout_s", "max_redirects", NULL};
        json_t *fetch = NULL;
        int r = config_get_object(root, "", "fetch", &fetch, err);
        if (r < 0 || (fetch && (r = config_check_keys(fetch, "fetch", keys, err)) < 0))
                return r;
        double v;
        f->max_bytes = 100 * MIB;
        f->timeout_s = 60;
        f->max_redirects = 5;
        if ((r = config_get_number(fetch, "fetch", "max_bytes", NUM_U64, 1, 1ULL << 40, &v, err)) <
            0)
                return r;
        if (r)
                f->max_bytes = (uint64_t)v;
        if ((r = config_get_number(fetch, "fetch", "timeout_s", NUM_U64, 1, 3600, &v, err)) < 0)
                return r;
        if (r)
                f->timeout_s = (uint64_t)v;
        if ((r = config_get_number(fetch, "fetch", "max_redirects", NUM_U32, 0, 20, &v, err)) < 0)
                return r;
        if (r)
                f->max_redirects = (uint32_t)v;
        return 0;
}

int config_parse_network(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        int r = parse_network(root, &cfg->network, err);
        if (r == 0)
                r = parse_pip(root, &cfg->pip, err);
        if (r == 0)
                r = parse_fetch(root, &cfg->fetch, err);
        return r;
}

void config_free_network(struct cage_config *cfg)
{
        egress_allowlist_clear(&cfg->network.allow);
        egress_allowlist_clear(&cfg->network.allow_private);
        egress_allowlist_clear(&cfg->pip.hosts);
        free(cfg->pip.index_url);
        free(cfg->pip.trusted_host);
}
