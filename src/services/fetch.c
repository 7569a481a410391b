/* `files` by URL: the server downloads a file for a sandbox's workspace
 * through the same checks as the sandbox's own traffic (egress.h): the
 * URL's host is decided against the server's network.allow before any DNS
 * lookup, every resolved address is checked against network.allow_private,
 * and libcurl is pinned to a checked address (CURLOPT_RESOLVE, and the
 * socket callback refuses any other). Redirects are followed here, hop by
 * hop, each one checked again; size and time are bounded by the config's
 * fetch section. Every fetch is audited like proxied traffic (kind
 * "fetch"). */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/http_pin.h"

#define URL_MAX 8192

struct fetch {
        struct cage_service *svc;
        struct http_pin pin; /* the checked addresses of the current hop */
        char *data;
        size_t len, cap, max;
        bool too_big;
};

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
        struct fetch *f = ctx;
        size_t add = size * n;
        if (f->len + add > f->max) {
                f->too_big = true;
                return 0;
        }
        if (f->len + add > f->cap) {
                size_t cap = f->cap ? f->cap : 64 * 1024;
                while (cap < f->len + add)
                        cap *= 2;
                char *more = realloc(f->data, cap);
                if (!more)
                        return 0;
                f->data = more;
                f->cap = cap;
        }
        memcpy(f->data + f->len, p, add);
        f->len += add;
        return add;
}

static void audit_fetch(struct cage_service *svc, const char *tenant, json_t *labels,
                        enum cage_audit_event ev, json_t *fields)
{
        json_object_set_new(fields, "kind", json_string("fetch"));
        svc_audit(svc, ev, tenant, NULL, labels, fields);
}

/* One hop: *ret_status is the HTTP status; *ret_location a redirect's
 * target (malloc'ed) or NULL. */
static int fetch_hop(struct fetch *f, const char *url, const struct http_url *u, int64_t deadline,
                     long *ret_status, char **ret_location, char *reason, size_t reason_len)
{
        CURL *c = curl_easy_init();
        if (!c || http_pin_apply(c, &f->pin, u->host, u->port) < 0) {
                http_pin_done(&f->pin);
                curl_easy_cleanup(c);
                return -ENOMEM;
        }
        int64_t left = deadline - (int64_t)clock_mono_ms();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(left > 1 ? left : 1));
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "codecage/" CODECAGE_VERSION);
        CURLcode cr = curl_easy_perform(c);
        char *location = NULL;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, ret_status);
        if (cr == CURLE_OK && *ret_status >= 300 && *ret_status < 400 &&
            curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
                *ret_location = strdup(location);
        int r = 0;
        if (cr != CURLE_OK) {
                snprintf(reason, reason_len, "%s",
                         f->too_big || cr == CURLE_FILESIZE_EXCEEDED
                                 ? "the file is larger than this server's fetch.max_bytes"
                                 : curl_easy_strerror(cr));
                r = cr == CURLE_OPERATION_TIMEDOUT                ? -ETIMEDOUT
                    : f->too_big || cr == CURLE_FILESIZE_EXCEEDED ? -EFBIG
                                                                  : -EREMOTEIO;
        }
        http_pin_done(&f->pin);
        curl_easy_cleanup(c);
        return r;
}

int svc_fetch_url(struct cage_service *svc, const char *tenant, json_t *labels, const char *url,
                  const char *field, void **ret_data, size_t *ret_len, struct cage_error *err)
{
        const struct cage_config *cfg = svc->cfg;
        _cleanup_free_ char *current = strdup(url);
        int64_t deadline = (int64_t)clock_mono_ms() + (int64_t)cfg->fetch.timeout_s * 1000;
        struct fetch f = {.svc = svc, .max = cfg->fetch.max_bytes};
        char reason[640] = "";
        if (!current || strlen(url) > URL_MAX)
                return cage_fail(err, -EINVAL, "%s: must be a URL of at most %d bytes", field,
                                 URL_MAX);
        for (uint32_t hop = 0;; hop++) {
                struct http_url u;
                long status = 0;
                if (http_url_parse(current, &u) < 0) {
                        free(f.data);
                        return cage_fail(err, -EINVAL,
                                         "%s: \"%.200s\" is not an http:// or https:// URL "
                                         "without user information",
                                         field, current);
                }
                struct egress_target t;
                int r = egress_resolve(&cfg->network, &cfg->network.allow, u.host, strlen(u.host),
                                       (uint16_t)u.port, &t, reason, sizeof(reason));
                json_t *fields = json_pack("{s:s, s:i}", "host", u.host, "port", (int)u.port);
                if (r < 0) {
                        json_object_set_new(fields, "reason", json_string(reason));
                        cage_metrics_egress(false, 0, 0);
                        audit_fetch(svc, tenant, labels, CAGE_AUDIT_NETWORK_DENY, fields);
                        free(f.data);
                        return cage_fail_plain(err, r == -EPERM ? -EPERM : -EHOSTUNREACH, "%s: %s",
                                               field, reason);
                }
                egress_target_pin(&t, &f.pin);
                f.len = 0;
                char *location = NULL;
                int64_t start = (int64_t)clock_mono_ms();
                r = fetch_hop(&f, current, &u, deadline, &status, &location, reason,
                              sizeof(reason));
                char addr[64];
                json_object_set_new(
                        fields, "address",
                        json_string(egress_addr_format(&t.addrs[0], addr, sizeof(addr))));
                json_object_set_new(fields, "bytes_received", json_integer((json_int_t)f.len));
                json_object_set_new(fields, "status", json_integer(status));
                json_object_set_new(fields, "duration_ms",
                                    json_integer((int64_t)clock_mono_ms() - start));
                if (r < 0)
                        json_object_set_new(fields, "error", json_string(reason));
                cage_metrics_egress(true, 0, f.len);
                audit_fetch(svc, tenant, labels, CAGE_AUDIT_NETWORK_ALLOW, fields);
                if (r < 0) {
                        free(location);
                        free(f.data);
                        return cage_fail_plain(err, r, "%s: %s", field, reason);
                }
                if (location) {
                        free(current);
                        current = location;
                        if (hop + 1 > cfg->fetch.max_redirects) {
                                free(f.data);
                                return cage_fail_plain(err, -EREMOTEIO,
                                                       "%s: more than %u redirects (the "
                                                       "server's fetch.max_redirects)",
                                                       field, cfg->fetch.max_redirects);
                        }
                        continue;
                }
                if (status < 200 || status >= 300) {
                        free(f.data);
                        return cage_fail_plain(err, -EREMOTEIO, "%s: the server answered HTTP %ld",
                                               field, status);
                }
                *ret_data = f.data ? f.data : calloc(1, 1);
                *ret_len = f.len;
                return *ret_data ? 0 : cage_fail(err, -ENOMEM, "%s", field);
        }
}
