/* The registry client (OCI distribution spec over libcurl): fetches a
 * reference's manifest -- through an image index or manifest list, for the
 * configured platform -- then its config and layers into the blob store.
 *
 * Authentication: anonymous first; a 401 with `WWW-Authenticate: Bearer
 * realm=...,service=...,scope=...` gets a token from the realm (with the
 * registry's credentials, when configured, as basic auth there), one with
 * `Basic` is answered with the credentials. Credentials go only to the
 * registry's own host and its token realm, never across redirects.
 *
 * Where requests connect: redirects are followed here, one hop at a time;
 * every hop (the registry, a token realm, a redirect's target) is resolved
 * and its addresses checked by the config's network policy before libcurl,
 * pinned to them (util/http_pin.h), connects. Only hosts the images config
 * lists (plain_http, mirrors, credentials) may be private; plain HTTP only
 * to hosts in plain_http. What a redirect's target answered (status, size,
 * digest) stays out of messages.
 *
 * Nothing the registry sends is trusted: HTTPS unless the registry is
 * listed in plain_http; every body is bounded (manifests 4 MiB, configs
 * 8 MiB, layers images.max_layer_bytes, tokens 1 MiB) and every blob is
 * hashed and counted while it streams (blobs.c) against the digest and
 * size its manifest gives; a manifest fetched by digest must hash to it.
 * Each request has a connect timeout, a minimum speed, and the pull's
 * deadline; progress and cancellation are checked as bytes arrive. A blob
 * is fetched under a per-digest lock, so concurrent pulls fetch it once. */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/http_pin.h"

#define TOKEN_BODY_MAX  (1024 * 1024)
#define ERROR_BODY_MAX  (64 * 1024)
#define AUTH_HEADER_MAX 4096
#define TOKEN_MAX       (64 * 1024)
#define CONNECT_TIMEOUT 30
#define LOW_SPEED_BYTES 1024 /* per second, ... */
#define LOW_SPEED_TIME  60   /* ... for this long aborts a transfer */
#define MAX_REDIRECTS   5

static const char accept_manifests[] = "Accept: " MEDIA_OCI_INDEX ", " MEDIA_OCI_MANIFEST
                                       ", " MEDIA_DOCKER_LIST ", " MEDIA_DOCKER_MANIFEST;

struct client {
        struct cage_image_store *store;
        const struct cage_images_config *cfg;
        const struct cage_image_ref *ref;
        const struct cage_image_op *op;
        const struct cage_registry_credential *cred;
        char host[256]; /* the endpoint: the registry or a mirror */
        bool plain;
        bool basic; /* the registry asked for basic auth */
        char *token;
        uint64_t deadline_ms;
        uint64_t done, total; /* bytes of layers, for progress */
        CURL *curl;
};

struct response {
        long status;
        char content_type[128];
        char www_auth[AUTH_HEADER_MAX];
        char *body;
        size_t len, max;
        struct blob_writer *writer; /* blob bodies of 200 answers go here */
        struct cage_error *err;
        int failed;      /* -errno set by a callback */
        bool redirected; /* the answer came from a redirect's target */
        struct client *c;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
        curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- one HTTP GET ---- */

static size_t on_header(char *buf, size_t size, size_t n, void *data)
{
        struct response *r = data;
        size_t len = size * n;
        if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
                r->content_type[0] = r->www_auth[0] = '\0'; /* a new answer (redirect) */
                return len;
        }
        char *dst = NULL;
        size_t skip = 0, cap = 0;
        if (len > 13 && strncasecmp(buf, "content-type:", 13) == 0)
                dst = r->content_type, skip = 13, cap = sizeof(r->content_type);
        else if (len > 17 && strncasecmp(buf, "www-authenticate:", 17) == 0)
                dst = r->www_auth, skip = 17, cap = sizeof(r->www_auth);
        if (!dst)
                return len;
        while (skip < len && (buf[skip] == ' ' || buf[skip] == '\t'))
                skip++;
        size_t v = len - skip;
        while (v && (buf[skip + v - 1] == '\r' || buf[skip + v - 1] == '\n'))
                v--;
        if (v >= cap)
                v = cap - 1;
        memcpy(dst, buf + skip, v);
        dst[v] = '\0';
        if (dst == r->content_type)
                dst[strcspn(dst, "; ")] = '\0';
        return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *data)
{
        struct response *r = data;
        size_t len = size * n;
        long status = 0;
        curl_easy_getinfo(r->c->curl, CURLINFO_RESPONSE_CODE, &status);
        if (r->writer && status == 200) {
                int rc = blob_writer_write(r->writer, buf, len, r->err);
                if (rc < 0) {
                        r->failed = rc;
                        return 0;
                }
                r->c->done += len;
                return len;
        }
        size_t max = status == 200 ? r->max : ERROR_BODY_MAX;
        if (r->len + len > max) {
                r->failed = cage_fail_plain(r->err, -EFBIG,
                                            "registry %s: an answer longer than "
                                            "%zu bytes",
                                            r->c->host, max);
                return 0;
        }
        char *more = realloc(r->body, r->len + len + 1);
        if (!more) {
                r->failed = -ENOMEM;
                return 0;
        }
        r->body = more;
        memcpy(r->body + r->len, buf, len);
        r->len += len;
        r->body[r->len] = '\0';
        return len;
}

static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ult,
                       curl_off_t ulnow)
{
        struct response *r = data;
        (void)dltotal, (void)dlnow, (void)ult, (void)ulnow;
        if (op_cancelled(r->c->op)) {
                r->failed = cage_fail_plain(r->err, -ECANCELED, "cancelled");
                return 1;
        }
        if (r->writer)
                op_progress(r->c->op, r->c->done, r->c->total, "pulling %s", r->c->ref->full);
        return 0;
}

static void set_auth(struct client *c, struct curl_slist **headers, bool token_request)
{
        char line[TOKEN_MAX + 32];
        if (!token_request && c->token) {
                snprintf(line, sizeof(line), "Authorization: Bearer %s", c->token);
                *headers = curl_slist_append(*headers, line);
        } else if (c->cred && (token_request || c->basic)) {
                curl_easy_setopt(c->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
                curl_easy_setopt(c->curl, CURLOPT_USERNAME, c->cred->username);
                curl_easy_setopt(c->curl, CURLOPT_PASSWORD, c->cred->password);
        }
}

/* Whether host:port is named in the images config (plain_http, mirrors,
 * credentials): the operator's own registries, which may be private. */
static bool listed_in(char *const *list, size_t n, const struct http_url *u)
{
        char with_port[HTTP_HOST_MAX + 8];
        long default_port = u->https ? 443 : 80;
        snprintf(with_port, sizeof(with_port), "%s:%ld", u->host, u->port);
        for (size_t i = 0; i < n; i++)
                if (strcasecmp(list[i], with_port) == 0 ||
                    (u->port == default_port && strcasecmp(list[i], u->host) == 0))
                        return true;
        return false;
}

static bool operator_listed(const struct cage_images_config *cfg, const struct http_url *u)
{
        if (listed_in(cfg->plain_http, cfg->n_plain_http, u))
                return true;
        for (size_t i = 0; i < cfg->n_mirrors; i++)
                if (listed_in(&cfg->mirrors[i].registry, 1, u) ||
                    listed_in(cfg->mirrors[i].mirrors, cfg->mirrors[i].n_mirrors, u))
                        return true;
        for (size_t i = 0; i < cfg->n_credentials; i++)
                if (listed_in(&cfg->credentials[i].registry, 1, u))
                        return true;
        return false;
}

/* Checks one hop before any connection: an http:// URL only to a host
 * listed in plain_http, and its addresses through the network policy
 * (private ones only for a host the operator listed). Pins the handle. */
static int check_hop(struct client *c, const char *url, int hop, struct http_pin *pin,
                     struct cage_error *err)
{
        struct http_url u;
        char reason[512] = "";
        const char *what = hop ? "a redirect" : "a request";
        if (http_url_parse(url, &u) < 0)
                return cage_fail_plain(err, -EPROTO,
                                       "registry %s: %s to a URL that is not http(s) without "
                                       "user information, refused",
                                       c->host, what);
        if (!u.https && !listed_in(c->cfg->plain_http, c->cfg->n_plain_http, &u))
                return cage_fail_plain(err, -EPERM,
                                       "registry %s: %s to http://%s:%ld refused: only hosts "
                                       "in images.plain_http are reached over plain HTTP",
                                       c->host, what, u.host, u.port);
        if (!c->cfg->resolve)
                return cage_fail_plain(err, -EPERM,
                                       "registry %s: refused: no network policy to check its "
                                       "address against",
                                       c->host);
        int rc = c->cfg->resolve(c->cfg->resolve_policy, u.host, u.port,
                                 operator_listed(c->cfg, &u), pin, reason, sizeof(reason));
        if (rc < 0)
                return cage_fail_plain(err, rc == -EPERM ? -EPERM : -EHOSTUNREACH,
                                       "registry %s: %s to %s:%ld refused: %s%s", c->host, what,
                                       u.host, u.port, reason,
                                       rc == -EPERM ? " (a registry listed in images.plain_http, "
                                                      "images.mirrors or images.credentials may "
                                                      "be private; others need "
                                                      "network.allow_private)"
                                                    : "");
        rc = http_pin_apply(c->curl, pin, u.host, u.port);
        if (rc < 0)
                return cage_fail(err, rc, "registry %s", c->host);
        curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, u.https ? "https" : "http");
        return 0;
}

/* One request to url, without following a redirect; credentials only when
 * with_auth (the first hop: they never cross a redirect). */
static int http_get_once(struct client *c, const char *url, const char *accept, bool token_request,
                         bool with_auth, struct http_pin *pin, struct response *r,
                         struct cage_error *err)
{
        uint64_t now = clock_mono_ms();
        if (now >= c->deadline_ms)
                return cage_fail_plain(err, -ETIMEDOUT, "pulling %s: more than %u s", c->ref->full,
                                       c->cfg->pull_timeout_s);
        struct curl_slist *headers = accept ? curl_slist_append(NULL, accept) : NULL;
        r->c = c;
        r->err = err;
        curl_easy_reset(c->curl);
        int rc = check_hop(c, url, r->redirected, pin, err);
        if (rc < 0) {
                curl_slist_free_all(headers);
                return rc;
        }
        if (with_auth)
                set_auth(c, &headers, token_request);
        curl_easy_setopt(c->curl, CURLOPT_URL, url);
        curl_easy_setopt(c->curl, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT);
        curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, (long)LOW_SPEED_BYTES);
        curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, (long)LOW_SPEED_TIME);
        curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, (long)(c->deadline_ms - now));
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "codecage/" CODECAGE_VERSION);
        curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, r);
        curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, 0L);
        CURLcode cc = curl_easy_perform(c->curl);
        curl_slist_free_all(headers);
        http_pin_done(pin);
        if (r->failed)
                return r->failed;
        if (cc != CURLE_OK)
                return cage_fail_plain(err, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO,
                                       "registry %s: %s", c->host,
                                       r->redirected ? "a redirect's target failed"
                                                     : curl_easy_strerror(cc));
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
        return 0;
}

/* The target of a redirect answer (malloc'ed), or NULL for any other. */
static char *redirect_target(struct client *c, const struct response *r)
{
        char *location = NULL;
        if (r->status < 300 || r->status >= 400 ||
            curl_easy_getinfo(c->curl, CURLINFO_REDIRECT_URL, &location) != CURLE_OK || !location)
                return NULL;
        return strdup(location);
}

static void response_reset(struct response *r)
{
        free(r->body);
        struct blob_writer *w = r->writer;
        size_t max = r->max;
        *r = (struct response){.writer = w, .max = max};
}

/* GET url, following redirects here one checked hop at a time. */
static int http_get(struct client *c, const char *url, const char *accept, bool token_request,
                    struct response *r, struct cage_error *err)
{
        struct http_pin pin = {};
        _cleanup_free_ char *current = strdup(url);
        if (!current)
                return cage_fail(err, -ENOMEM, "registry %s", c->host);
        r->redirected = false;
        for (int hop = 0;; hop++) {
                int rc = http_get_once(c, current, accept, token_request, hop == 0, &pin, r, err);
                char *next = rc < 0 ? NULL : redirect_target(c, r);
                if (!next)
                        return rc;
                free(current);
                current = next;
                if (hop == MAX_REDIRECTS)
                        return cage_fail_plain(err, -EIO, "registry %s: more than %d redirects",
                                               c->host, MAX_REDIRECTS);
                response_reset(r);
                r->redirected = true;
        }
}

/* ---- authentication ---- */

/* The value of key="value" (or key=value) in a WWW-Authenticate header. */
static bool auth_param(const char *h, const char *key, char *out, size_t size)
{
        size_t klen = strlen(key);
        for (const char *p = h; (p = strcasestr(p, key)); p += klen) {
                if ((p != h && p[-1] != ' ' && p[-1] != ',') || p[klen] != '=')
                        continue;
                const char *v = p + klen + 1;
                bool quoted = *v == '"';
                size_t n = quoted ? strcspn(++v, "\"") : strcspn(v, ", ");
                if (n >= size)
                        return false;
                memcpy(out, v, n);
                out[n] = '\0';
                return true;
        }
        return false;
}

static int url_escape(struct client *c, const char *s, char *out, size_t size)
{
        char *e = curl_easy_escape(c->curl, s, 0);
        int n = e ? snprintf(out, size, "%s", e) : -1;
        curl_free(e);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int token_url(struct client *c, const char *h, char *url, size_t size,
                     struct cage_error *err)
{
        char realm[1024], service[512] = "", scope[1024], esc_service[1024], esc_scope[2048];
        if (!auth_param(h, "realm", realm, sizeof(realm)))
                return cage_fail_plain(err, -EPROTO,
                                       "registry %s: a Bearer challenge without a "
                                       "realm",
                                       c->host);
        if (strncmp(realm, "https://", 8) != 0 && !(c->plain && strncmp(realm, "http://", 7) == 0))
                return cage_fail_plain(err, -EPROTO,
                                       "registry %s: token realm \"%.200s\" is not "
                                       "https",
                                       c->host, realm);
        auth_param(h, "service", service, sizeof(service));
        if (!auth_param(h, "scope", scope, sizeof(scope)))
                snprintf(scope, sizeof(scope), "repository:%s:pull", c->ref->repository);
        if (url_escape(c, service, esc_service, sizeof(esc_service)) < 0 ||
            url_escape(c, scope, esc_scope, sizeof(esc_scope)) < 0 ||
            snprintf(url, size, "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
                     esc_service, esc_scope) >= (int)size)
                return cage_fail_plain(err, -ENAMETOOLONG, "registry %s: token URL too long",
                                       c->host);
        return 0;
}

static int fetch_token(struct client *c, const char *challenge, struct cage_error *err)
{
        char url[4096];
        struct response r = {.max = TOKEN_BODY_MAX};
        int rc = token_url(c, challenge, url, sizeof(url), err);
        if (rc >= 0)
                rc = http_get(c, url, NULL, true, &r, err);
        if (rc >= 0 && r.status != 200)
                rc = cage_fail_plain(err, r.status == 401 || r.status == 403 ? -EACCES : -EIO,
                                     "registry %s: the token service answered HTTP %ld%s", c->host,
                                     r.status, c->cred ? "" : " (no credentials configured)");
        json_t *j = rc >= 0 ? json_loadb(r.body ? r.body : "", r.len, 0, NULL) : NULL;
        const char *tok = json_string_value(json_object_get(j, "token"));
        if (!tok)
                tok = json_string_value(json_object_get(j, "access_token"));
        if (rc >= 0 && (!tok || !tok[0] || strlen(tok) >= TOKEN_MAX || strpbrk(tok, "\r\n")))
                rc = cage_fail_plain(err, -EPROTO,
                                     "registry %s: no usable token in the token "
                                     "service's answer",
                                     c->host);
        if (rc >= 0) {
                free(c->token);
                c->token = strdup(tok);
                rc = c->token ? 0 : -ENOMEM;
        }
        json_decref(j);
        free(r.body);
        return rc;
}

/* Answers a 401: true when the request is worth repeating. */
static int authenticate(struct client *c, const struct response *r, struct cage_error *err)
{
        if (strncasecmp(r->www_auth, "Bearer", 6) == 0 && !c->token)
                return fetch_token(c, r->www_auth, err);
        if (strncasecmp(r->www_auth, "Basic", 5) == 0 && c->cred && !c->basic) {
                c->basic = true;
                return 0;
        }
        return cage_fail_plain(err, -EACCES, "registry %s: access to %s denied%s", c->host,
                               c->ref->repository, c->cred ? "" : " (no credentials configured)");
}

/* GET with authentication: repeats once after answering a 401. */
static int get_authed(struct client *c, const char *path, const char *accept, struct response *r,
                      struct cage_error *err)
{
        char url[1024];
        snprintf(url, sizeof(url), "%s://%s%s", c->plain ? "http" : "https", c->host, path);
        for (int attempt = 0;; attempt++) {
                int rc = http_get(c, url, accept, false, r, err);
                if (rc < 0 || r->status != 401 || attempt == 2)
                        return rc;
                if ((rc = authenticate(c, r, err)) < 0)
                        return rc;
                response_reset(r);
        }
}

static int status_error(struct client *c, const struct response *r, const char *what,
                        struct cage_error *err)
{
        int code = r->status == 404                       ? -ENOENT
                   : r->status == 401 || r->status == 403 ? -EACCES
                                                          : -EIO;
        if (r->redirected) /* what another host answered is not ours to tell */
                return cage_fail_plain(err, code, "registry %s: %s: a redirect's target refused",
                                       c->host, what);
        return cage_fail_plain(err, code, "registry %s: %s: HTTP %ld", c->host, what, r->status);
}

/* ---- manifests and blobs ---- */

static int fetch_manifest(struct client *c, const char *reference, const char *expect,
                          struct manifest *ret, char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1],
                          struct cage_error *err)
{
        char path[1024];
        struct response r = {.max = MANIFEST_MAX};
        snprintf(path, sizeof(path), "/v2/%s/manifests/%s", c->ref->repository, reference);
        op_progress(c->op, 0, 0, "resolving %s", c->ref->full);
        int rc = get_authed(c, path, accept_manifests, &r, err);
        if (rc >= 0 && r.status != 200)
                rc = status_error(c, &r, c->ref->full, err);
        if (rc >= 0)
                rc = blob_put_buffer(c->store, r.body ? r.body : "", r.len, ret_digest, err);
        if (rc >= 0 && expect && strcmp(expect, ret_digest) != 0 && image_guard_on(GUARD_DIGEST))
                rc = r.redirected ? cage_fail_plain(err, -EBADMSG,
                                                    "registry %s: the manifest %s a redirect led "
                                                    "to does not match its digest",
                                                    c->host, expect)
                                  : cage_fail_plain(err, -EBADMSG,
                                                    "registry %s: the manifest of %s has digest "
                                                    "%s",
                                                    c->host, expect, ret_digest);
        if (rc >= 0)
                rc = manifest_parse(r.body, r.len, r.content_type, c->cfg->max_layers, ret, err);
        free(r.body);
        return rc;
}

static int download_blob(struct client *c, const struct descriptor *d, uint64_t max,
                         struct cage_error *err)
{
        char path[1024];
        struct blob_writer w;
        int rc = blob_writer_open(c->store, d->digest, (int64_t)d->size, max, &w, err);
        if (rc < 0)
                return rc;
        struct response r = {.writer = &w};
        snprintf(path, sizeof(path), "/v2/%s/blobs/%s", c->ref->repository, d->digest);
        rc = get_authed(c, path, NULL, &r, err);
        if (rc >= 0 && r.status != 200)
                rc = status_error(c, &r, d->digest, err);
        free(r.body);
        if (rc < 0) {
                blob_writer_abort(c->store, &w);
                return rc;
        }
        rc = blob_writer_commit(c->store, &w, NULL, err);
        if (rc == -EBADMSG && r.redirected) /* no sizes or digests of another host's answer */
                rc = cage_fail_plain(err, rc,
                                     "registry %s: blob %s: what a redirect led to does not "
                                     "match its size and digest",
                                     c->host, d->digest);
        return rc;
}

/* Fetches a blob unless the store has it, once however many want it. */
static int fetch_blob(struct client *c, const struct descriptor *d, uint64_t max,
                      struct cage_error *err)
{
        if (blob_exists(c->store, d->digest)) {
                c->done += d->size;
                return 0;
        }
        _cleanup_close_ int lock = store_lock_named(c->store, "blob", d->digest, c->op, err);
        if (lock < 0)
                return lock;
        if (blob_exists(c->store, d->digest)) {
                c->done += d->size;
                return 0;
        }
        return download_blob(c, d, max, err);
}

static int fetch_image(struct client *c, char ret[CAGE_IMAGE_DIGEST_LEN + 1],
                       struct cage_error *err)
{
        const struct cage_images_config *cfg = c->cfg;
        const char *reference = c->ref->digest[0] ? c->ref->digest : c->ref->tag;
        struct manifest m = {};
        int rc = fetch_manifest(c, reference, c->ref->digest[0] ? c->ref->digest : NULL, &m, ret,
                                err);
        if (rc >= 0 && m.is_index) {
                struct descriptor pick;
                rc = manifest_select(&m, cfg->platform_os, cfg->platform_arch,
                                     cfg->platform_variant, &pick, err);
                manifest_done(&m);
                if (rc >= 0)
                        rc = fetch_manifest(c, pick.digest, pick.digest, &m, ret, err);
                if (rc >= 0 && m.is_index)
                        rc = cage_fail_plain(err, -EBADMSG, "%s: an index inside an index",
                                             c->ref->full);
        }
        for (size_t i = 0; rc >= 0 && i < m.n_entries; i++)
                c->total += m.entries[i].size;
        if (rc >= 0)
                rc = fetch_blob(c, &m.config, IMAGE_CONFIG_MAX, err);
        for (size_t i = 0; rc >= 0 && i < m.n_entries; i++)
                rc = fetch_blob(c, &m.entries[i], cfg->max_layer_bytes, err);
        manifest_done(&m);
        return rc;
}

/* ---- endpoints ---- */

static const struct cage_registry_credential *find_cred(const struct cage_images_config *cfg,
                                                        const char *registry)
{
        for (size_t i = 0; i < cfg->n_credentials; i++)
                if (strcmp(cfg->credentials[i].registry, registry) == 0)
                        return &cfg->credentials[i];
        return NULL;
}

static bool is_plain(const struct cage_images_config *cfg, const char *host)
{
        for (size_t i = 0; i < cfg->n_plain_http; i++)
                if (strcmp(cfg->plain_http[i], host) == 0)
                        return true;
        return false;
}

/* Mirrors of the registry first (in order), then the registry itself. */
static size_t endpoints(const struct cage_images_config *cfg, const char *registry,
                        const char **out, size_t max)
{
        size_t n = 0;
        for (size_t i = 0; i < cfg->n_mirrors; i++)
                if (strcmp(cfg->mirrors[i].registry, registry) == 0)
                        for (size_t j = 0; j < cfg->mirrors[i].n_mirrors && n + 1 < max; j++)
                                out[n++] = cfg->mirrors[i].mirrors[j];
        out[n++] = strcmp(registry, "docker.io") == 0 ? "registry-1.docker.io" : registry;
        return n;
}

static int pull_from(struct client *c, const char *host, char ret[CAGE_IMAGE_DIGEST_LEN + 1],
                     struct cage_error *err)
{
        snprintf(c->host, sizeof(c->host), "%s", host);
        c->plain = is_plain(c->cfg, host);
        c->basic = false;
        free(c->token);
        c->token = NULL;
        c->done = c->total = 0;
        /* Credentials are the registry's; a mirror gets its own, if any. */
        c->cred = find_cred(c->cfg, strcmp(host, "registry-1.docker.io") == 0 ? "docker.io" : host);
        if (!c->cred && strcmp(host, "registry-1.docker.io") == 0)
                c->cred = find_cred(c->cfg, c->ref->registry);
        return fetch_image(c, ret, err);
}

int registry_pull(struct cage_image_store *store, const struct cage_image_ref *ref,
                  const struct cage_image_op *op, char ret_manifest[CAGE_IMAGE_DIGEST_LEN + 1],
                  struct cage_error *err)
{
        const struct cage_images_config *cfg = store_config(store);
        struct client c = {.store = store,
                           .cfg = cfg,
                           .ref = ref,
                           .op = op,
                           .deadline_ms = clock_mono_ms() + cfg->pull_timeout_s * 1000ULL};
        const char *hosts[CAGE_IMAGES_PATTERNS_MAX + 1];
        pthread_once(&curl_once, curl_init);
        if (!(c.curl = curl_easy_init()))
                return cage_fail(err, -ENOMEM, "curl");
        size_t n = endpoints(cfg, ref->registry, hosts, ELEMENTSOF(hosts));
        int rc = -ENOENT;
        for (size_t i = 0; i < n; i++) {
                rc = pull_from(&c, hosts[i], ret_manifest, err);
                if (rc >= 0 || rc == -ECANCELED || rc == -EBADMSG)
                        break; /* a mirror that lies is an error, not a miss */
        }
        if (c.token)
                explicit_bzero(c.token, strlen(c.token));
        free(c.token);
        curl_easy_cleanup(c.curl);
        return rc;
}
