/* The config's "e2b" section (docs/CONFIG.md, docs/E2B.md): the address of
 * the E2B-compatible listener, the longest lifetime a sandbox made through
 * it may ask for, and whether such a sandbox may have the network at all
 * ("internet_access": false keeps every one offline, whatever the create
 * asks: some SDK versions ask for the network on every create). Without
 * the section (or with "listen": null) the listener is off. As for
 * listen.http, an address beyond loopback needs tenants with tokens: the
 * E2B API keys are the tenants' tokens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_private.h"
#include "util/error.h"

#define E2B_ADDR_MAX        64
#define E2B_TIMEOUT_DEFAULT 3600
#define E2B_TIMEOUT_MAX     86400

static int parse_e2b_listen(json_t *obj, struct cage_config *cfg, struct cage_error *err)
{
        json_t *v = json_object_get(obj, "listen");
        const char *s = NULL;
        if (!v || json_is_null(v))
                return 0;
        int r = config_get_string(obj, "e2b", "listen", E2B_ADDR_MAX, &s, err);
        if (r < 0)
                return r;
        if ((r = config_parse_addr("e2b.listen", s, &cfg->e2b.addr, &cfg->e2b.addr_len,
                                   &cfg->e2b.loopback, err)) < 0)
                return r;
        if (!cfg->e2b.loopback && cfg->n_tenants == 0)
                return cage_fail(err, -EINVAL,
                                 "e2b.listen: \"%s\" is not a loopback address, and no tenants "
                                 "with tokens are configured; the E2B API keys are the tenants' "
                                 "tokens: add tenants, or listen on 127.0.0.1 or [::1]",
                                 s);
        cfg->e2b.listen = strdup(s);
        return cfg->e2b.listen ? 0 : cage_fail(err, -ENOMEM, "e2b.listen");
}

int config_parse_e2b(json_t *root, struct cage_config *cfg, struct cage_error *err)
{
        static const char *const keys[] = {"listen", "timeout_s_max", "internet_access", NULL};
        json_t *obj = NULL;
        double v;
        cfg->e2b.timeout_s_max = E2B_TIMEOUT_DEFAULT;
        cfg->e2b.internet_access = true;
        int r = config_get_object(root, "", "e2b", &obj, err);
        if (r <= 0)
                return r;
        if ((r = config_check_keys(obj, "e2b", keys, err)) < 0 ||
            (r = parse_e2b_listen(obj, cfg, err)) < 0)
                return r;
        r = config_get_number(obj, "e2b", "timeout_s_max", NUM_U64, 1, E2B_TIMEOUT_MAX, &v, err);
        if (r < 0)
                return r;
        if (r)
                cfg->e2b.timeout_s_max = (uint64_t)v;
        json_t *net = json_object_get(obj, "internet_access");
        if (net && !json_is_boolean(net))
                return cage_fail(err, -EINVAL, "e2b.internet_access: must be true or false");
        if (net)
                cfg->e2b.internet_access = json_is_true(net);
        return 0;
}
