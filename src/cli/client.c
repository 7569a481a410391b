/* The HTTP client of `codecage sandbox` on libcurl; see client.h.
 *
 * Every request goes through request_run(): it resets the one curl handle,
 * sets the address (URL or Unix socket), the allowed protocols, the
 * headers and the body source, and routes the response body through
 * on_write(). That callback decides once, when the first bytes arrive,
 * where a body goes: a successful download to the caller's fd, a
 * successful event stream to the SSE parser, anything else (JSON answers,
 * API errors) to a bounded memory buffer. So an error answer never lands
 * in a downloaded file or on the program's stdout.
 *
 * Invariants: the token appears only in the Authorization header and is
 * wiped from our copies; no buffer grows past its documented bound; only
 * http and https URLs are fetched and redirects are not followed. */
#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define CONNECT_TIMEOUT_S  10
#define SSE_EVENT_NAME_MAX 64
#define SUN_PATH_MAX       (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

struct cage_client {
        CURL *curl;
        char *base;   /* what API paths are appended to, no trailing '/' */
        char *socket; /* Unix socket path; NULL with a URL */
        char *where;  /* the server as messages name it */
        char *auth;   /* "Authorization: Bearer ..." or NULL; wiped on free */
};

/* ---- small helpers ---------------------------------------------------- */

/* Like cage_fail() but never appends strerror: these messages are whole. */
static int __attribute__((format(printf, 3, 4)))
fail_msg(struct cage_error *err, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        err->code = code;
        return code;
}

/* A growable byte buffer, always NUL-terminated, bounded by the caller. */
struct buf {
        char *data;
        size_t len, cap;
};

static void buf_free(struct buf *b)
{
        free(b->data);
        *b = (struct buf){0};
}

static int buf_append(struct buf *b, const void *p, size_t n, uint64_t max, const char *what,
                      struct cage_error *err)
{
        if (n > max || b->len > max - n)
                return fail_msg(err, -EFBIG, "the codecage server sent %s larger than %llu MiB",
                                what, (unsigned long long)(max >> 20));
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *d = realloc(b->data, cap);
                if (!d)
                        return cage_fail(err, -ENOMEM, "reading the server's answer");
                b->data = d;
                b->cap = cap;
        }
        memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

static void slist_wipe_freep(struct curl_slist **l)
{
        for (struct curl_slist *i = *l; i; i = i->next)
                explicit_bzero(i->data, strlen(i->data)); /* one of them holds the token */
        curl_slist_free_all(*l);
}

#define _cleanup_slist_ __attribute__((cleanup(slist_wipe_freep)))

char *cage_client_escape(const char *s, bool keep_slash)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = n < SIZE_MAX / 3 ? malloc(3 * n + 1) : NULL, *o = out;
        if (!out)
                return NULL;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~", *p) || (keep_slash && *p == '/')) {
                        *o++ = (char)*p;
                        continue;
                }
                *o++ = '%';
                *o++ = hex[*p >> 4];
                *o++ = hex[*p & 15];
        }
        *o = '\0';
        return out;
}

/* ---- errors ----------------------------------------------------------- */

static int errno_for_status(long status)
{
        switch (status) {
        case 400:
                return -EINVAL;
        case 401:
                return -EACCES;
        case 403:
                return -EPERM;
        case 404:
                return -ENOENT;
        case 405:
                return -EOPNOTSUPP;
        case 409:
                return -EEXIST;
        case 413:
                return -E2BIG;
        case 415:
                return -EPROTO;
        case 507:
                return -ENOSPC;
        }
        return -EIO;
}

int cage_client_api_error(const json_t *doc, long status, struct cage_error *err)
{
        const char *msg =
                json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
        char clean[CAGE_ERROR_MESSAGE_MAX];
        int code = status ? errno_for_status(status) : -EIO;
        if (!msg && !status)
                return fail_msg(err, code, "the codecage server reported an unspecified error");
        if (!msg)
                return fail_msg(err, code, "unexpected answer from the codecage server (HTTP %ld)",
                                status);
        /* The message may quote client input: no control characters. */
        size_t i;
        for (i = 0; msg[i] && i < sizeof(clean) - 1; i++)
                clean[i] = (unsigned char)msg[i] < 0x20 || msg[i] == 0x7f ? '?' : msg[i];
        clean[i] = '\0';
        if (!status)
                return fail_msg(err, code, "%s", clean);
        return fail_msg(err, code, "%s (HTTP %ld)", clean, status);
}

/* ---- the SSE parser --------------------------------------------------- */

struct sse {
        struct buf line, data;
        char event[SSE_EVENT_NAME_MAX + 1];
        bool has_data;
        cage_client_event_fn fn;
        void *ctx;
};

static int sse_dispatch(struct sse *s, struct cage_error *err)
{
        int r = 0;
        if (s->has_data)
                r = s->fn(s->ctx, s->event[0] ? s->event : "message",
                          s->data.data ? s->data.data : "", s->data.len, err);
        s->data.len = 0;
        s->has_data = false;
        s->event[0] = '\0';
        return r;
}

/* One line of the stream (without its line ending). Fields: event, data;
 * id, retry, comments and unknown fields are ignored. */
static int sse_line(struct sse *s, char *line, size_t len, struct cage_error *err)
{
        if (len == 0)
                return sse_dispatch(s, err);
        char *colon = memchr(line, ':', len);
        if (colon == line)
                return 0;
        size_t flen = colon ? (size_t)(colon - line) : len;
        const char *value = colon ? colon + 1 : line + len;
        if (colon && *value == ' ')
                value++;
        size_t vlen = (size_t)(line + len - value);
        if (flen == 5 && memcmp(line, "event", 5) == 0) {
                size_t n = vlen < SSE_EVENT_NAME_MAX ? vlen : SSE_EVENT_NAME_MAX;
                memcpy(s->event, value, n);
                s->event[n] = '\0';
                return 0;
        }
        if (flen != 4 || memcmp(line, "data", 4) != 0)
                return 0;
        int r = s->has_data ? buf_append(&s->data, "\n", 1, CAGE_CLIENT_SSE_MAX, "an event", err)
                            : 0;
        if (r == 0)
                r = buf_append(&s->data, value, vlen, CAGE_CLIENT_SSE_MAX, "an event", err);
        s->has_data = true;
        return r;
}

static int sse_feed(struct sse *s, const char *p, size_t n, struct cage_error *err)
{
        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t chunk = nl ? (size_t)(nl - p) : n;
                int r = buf_append(&s->line, p, chunk, CAGE_CLIENT_SSE_MAX, "a line", err);
                if (r < 0)
                        return r;
                p += chunk;
                n -= chunk;
                if (!nl)
                        break;
                p++, n--;
                size_t len = s->line.len;
                if (len > 0 && s->line.data[len - 1] == '\r')
                        len--;
                s->line.len = 0;
                if ((r = sse_line(s, s->line.data ? s->line.data : (char *)"", len, err)) < 0)
                        return r;
        }
        return 0;
}

/* End of stream: a last line without its newline and a last event without
 * its blank line still count (the server may close right after them). */
static int sse_finish(struct sse *s, struct cage_error *err)
{
        int r = 0;
        if (s->line.len > 0)
                r = sse_line(s, s->line.data, s->line.len, err);
        s->line.len = 0;
        return r < 0 ? r : sse_dispatch(s, err);
}

/* ---- one request ------------------------------------------------------ */

enum sink {
        SINK_MEMORY, /* keep the body (JSON answers) */
        SINK_FD,     /* a 2xx body goes to fd (downloads) */
        SINK_SSE,    /* a 2xx text/event-stream body goes to the parser */
};

struct request {
        const char *method, *path, *accept;
        const char *body; /* in-memory body, or NULL */
        size_t body_len;
        int upload_fd; /* or a body read from this fd (PUT); -1: none */
        uint64_t upload_size;
        enum sink sink;
};

struct xfer {
        struct cage_client *c;
        struct cage_error *err;
        const struct request *rq;
        struct buf body;
        bool decided, sinking;
        int fd;
        uint64_t written, max, uploaded;
        struct sse sse;
        int failed; /* -errno from a callback; err is filled */
};

static void decide(struct xfer *x)
{
        long status = 0;
        char *ct = NULL;
        curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(x->c->curl, CURLINFO_CONTENT_TYPE, &ct);
        bool ok = status >= 200 && status < 300;
        x->decided = true;
        x->sinking =
                ok && (x->rq->sink == SINK_FD || (x->rq->sink == SINK_SSE && ct &&
                                                  strncasecmp(ct, "text/event-stream", 17) == 0));
}

static int sink_fd(struct xfer *x, const char *p, size_t n)
{
        if (n > x->max || x->written > x->max - n)
                return fail_msg(x->err, -EFBIG, "the file is larger than the %llu MiB allowed",
                                (unsigned long long)(x->max >> 20));
        int r = write_all(x->fd, p, n);
        if (r < 0)
                return cage_fail(x->err, r, "writing the downloaded data");
        x->written += n;
        return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *userdata)
{
        struct xfer *x = userdata;
        size_t n = size * nmemb;
        if (!x->decided)
                decide(x);
        int r;
        if (!x->sinking)
                r = buf_append(&x->body, p, n, CAGE_CLIENT_JSON_MAX, "an answer", x->err);
        else if (x->rq->sink == SINK_FD)
                r = sink_fd(x, p, n);
        else
                r = sse_feed(&x->sse, p, n, x->err);
        if (r < 0) {
                x->failed = r;
                return n == 0 ? 1 : 0; /* anything but n aborts the transfer */
        }
        return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *userdata)
{
        struct xfer *x = userdata;
        size_t n = size * nmemb;
        uint64_t left = x->rq->upload_size - x->uploaded;
        if (n > left)
                n = (size_t)left; /* never send more than the announced length */
        if (n == 0)
                return 0;
        ssize_t got;
        do
                got = read(x->rq->upload_fd, p, n);
        while (got < 0 && errno == EINTR);
        if (got < 0) {
                x->failed = cage_fail(x->err, -errno, "reading the file to upload");
                return CURL_READFUNC_ABORT;
        }
        if (got == 0) {
                x->failed = fail_msg(x->err, -EIO, "the file to upload shrank while being sent");
                return CURL_READFUNC_ABORT;
        }
        x->uploaded += (uint64_t)got;
        return (size_t)got;
}

static int curl_failure(struct xfer *x, CURLcode rc, const char *errbuf)
{
        const char *detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
        switch (rc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
                return fail_msg(x->err, -ECONNREFUSED,
                                "cannot reach the codecage server at %s: is `codecage serve` "
                                "running?",
                                x->c->where);
        case CURLE_OPERATION_TIMEDOUT:
                return fail_msg(x->err, -ETIMEDOUT, "the codecage server at %s: %s", x->c->where,
                                detail);
        case CURLE_OUT_OF_MEMORY:
                return fail_msg(x->err, -ENOMEM, "talking to the codecage server: out of memory");
        default:
                return fail_msg(x->err, -EIO, "talking to the codecage server at %s: %s",
                                x->c->where, detail);
        }
}

static int set_protocols(CURL *curl)
{
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: CURLOPT_PROTOCOLS_STR */
        return curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK ? 0 : -EIO;
#else
        return curl_easy_setopt(curl, CURLOPT_PROTOCOLS,
                                (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) == CURLE_OK
                       ? 0
                       : -EIO;
#endif
}

static int build_headers(struct cage_client *c, const struct request *rq,
                         struct curl_slist **headers)
{
        char accept[64];
        snprintf(accept, sizeof(accept), "Accept: %s", rq->accept);
        const char *ctype = rq->body             ? "Content-Type: application/json"
                            : rq->upload_fd >= 0 ? "Content-Type: application/octet-stream"
                                                 : "Content-Type:"; /* none at all */
        const char *list[] = {accept, ctype, c->auth};
        for (size_t i = 0; i < ELEMENTSOF(list); i++) {
                if (!list[i])
                        continue;
                struct curl_slist *l = curl_slist_append(*headers, list[i]);
                if (!l)
                        return -ENOMEM;
                *headers = l;
        }
        return 0;
}

static int set_method(CURL *curl, const struct request *rq, struct xfer *x)
{
        CURLcode rc = CURLE_OK;
        if (rq->upload_fd >= 0) {
                curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L); /* PUT */
                curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_read);
                curl_easy_setopt(curl, CURLOPT_READDATA, x);
                rc = curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_size);
        } else if (strcmp(rq->method, "POST") == 0) {
                curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
                rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        } else if (strcmp(rq->method, "GET") != 0) {
                rc = curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, rq->method);
        }
        return rc == CURLE_OK ? 0 : -EIO;
}

static int setup(struct cage_client *c, const struct request *rq, struct xfer *x,
                 struct curl_slist *headers, const char *url)
{
        CURL *curl = c->curl;
        curl_easy_reset(curl);
        int r = set_protocols(curl);
        if (r < 0 || curl_easy_setopt(curl, CURLOPT_URL, url) != CURLE_OK ||
            (c->socket && curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, c->socket) != CURLE_OK))
                return -EIO;
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
        curl_easy_setopt(curl, CURLOPT_USERAGENT, "codecage/" CODECAGE_VERSION);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, x);
        return set_method(curl, rq, x);
}

/* Runs rq; returns the HTTP status (2xx) or -errno. x->body holds what was
 * not sunk. Statuses other than 2xx become errors here. */
static int request_run(struct cage_client *c, const struct request *rq, struct xfer *x)
{
        _cleanup_slist_ struct curl_slist *headers = NULL;
        _cleanup_free_ char *url = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";
        if (asprintf(&url, "%s%s", c->base, rq->path) < 0) {
                url = NULL;
                return cage_fail(x->err, -ENOMEM, "request");
        }
        if (build_headers(c, rq, &headers) < 0)
                return cage_fail(x->err, -ENOMEM, "request headers");
        if (setup(c, rq, x, headers, url) < 0)
                return fail_msg(x->err, -EIO, "cannot set up the request to %s", rq->path);
        curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, errbuf);
        CURLcode rc = curl_easy_perform(c->curl);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
        long status = 0;
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
        if (x->failed)
                return x->failed;
        /* A server refusing a body (413) may answer and close before it is
         * all sent: its answer says more than the send error. */
        if (rc != CURLE_OK && (status < 400 || x->body.len == 0))
                return curl_failure(x, rc, errbuf);
        if (status >= 200 && status < 300)
                return (int)status;
        _cleanup_json_ json_t *doc =
                x->body.len ? json_loadb(x->body.data, x->body.len, 0, NULL) : NULL;
        return cage_client_api_error(doc, status, x->err);
}

static void xfer_done(struct xfer *x)
{
        buf_free(&x->body);
        buf_free(&x->sse.line);
        buf_free(&x->sse.data);
}

static int parse_body(struct xfer *x, json_t **ret)
{
        json_error_t jerr;
        *ret = NULL;
        if (x->body.len == 0)
                return 0;
        *ret = json_loadb(x->body.data, x->body.len, 0, &jerr);
        if (!*ret)
                return fail_msg(x->err, -EPROTO,
                                "the codecage server sent invalid JSON (line %d: %s)", jerr.line,
                                jerr.text);
        return 0;
}

/* ---- the API ---------------------------------------------------------- */

int cage_client_json(struct cage_client *c, const char *method, const char *path,
                     const json_t *body, json_t **ret, struct cage_error *err)
{
        _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        if (body && !text)
                return cage_fail(err, -ENOMEM, "encoding the request");
        struct request rq = {.method = method,
                             .path = path,
                             .accept = "application/json",
                             .body = text,
                             .body_len = text ? strlen(text) : 0,
                             .upload_fd = -1,
                             .sink = SINK_MEMORY};
        struct xfer x = {.c = c, .err = err, .rq = &rq, .fd = -1};
        int r = request_run(c, &rq, &x);
        if (r >= 0)
                r = parse_body(&x, ret);
        xfer_done(&x);
        return r;
}

int cage_client_stream(struct cage_client *c, const char *path, const json_t *body,
                       cage_client_event_fn on_event, void *ctx, json_t **ret_json,
                       struct cage_error *err)
{
        _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
        if (!text)
                return cage_fail(err, -ENOMEM, "encoding the request");
        struct request rq = {.method = "POST",
                             .path = path,
                             .accept = "text/event-stream",
                             .body = text,
                             .body_len = strlen(text),
                             .upload_fd = -1,
                             .sink = SINK_SSE};
        struct xfer x = {.c = c, .err = err, .rq = &rq, .fd = -1};
        x.sse.fn = on_event;
        x.sse.ctx = ctx;
        *ret_json = NULL;
        int r = request_run(c, &rq, &x);
        if (r >= 0)
                r = x.sinking ? sse_finish(&x.sse, err) : parse_body(&x, ret_json);
        xfer_done(&x);
        return r;
}

int cage_client_upload(struct cage_client *c, const char *path, int fd, uint64_t size,
                       struct cage_error *err)
{
        struct request rq = {.method = "PUT",
                             .path = path,
                             .accept = "application/json",
                             .upload_fd = fd,
                             .upload_size = size,
                             .sink = SINK_MEMORY};
        struct xfer x = {.c = c, .err = err, .rq = &rq, .fd = -1};
        int r = request_run(c, &rq, &x);
        xfer_done(&x);
        return r < 0 ? r : 0;
}

int cage_client_download(struct cage_client *c, const char *path, int fd, uint64_t max,
                         uint64_t *ret_len, struct cage_error *err)
{
        struct request rq = {
                .method = "GET", .path = path, .accept = "*/*", .upload_fd = -1, .sink = SINK_FD};
        struct xfer x = {.c = c, .err = err, .rq = &rq, .fd = fd, .max = max};
        int r = request_run(c, &rq, &x);
        xfer_done(&x);
        if (r >= 0 && ret_len)
                *ret_len = x.written;
        return r < 0 ? r : 0;
}

/* ---- lifetime --------------------------------------------------------- */

static bool has_control_chars(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        return true;
        return false;
}

static int set_address(struct cage_client *c, const struct cage_client_target *t,
                       struct cage_error *err)
{
        if (t->socket) {
                if (t->socket[0] == '\0' || strlen(t->socket) > SUN_PATH_MAX)
                        return fail_msg(err, -EINVAL,
                                        "--socket: \"%s\" is empty or longer than the %zu bytes a "
                                        "Unix socket path may have",
                                        t->socket, SUN_PATH_MAX);
                c->socket = strdup(t->socket);
                c->where = strdup(t->socket);
                c->base = strdup("http://localhost");
        } else {
                const char *u = t->url;
                if ((strncasecmp(u, "http://", 7) != 0 && strncasecmp(u, "https://", 8) != 0) ||
                    has_control_chars(u) || strpbrk(u, " ?#"))
                        return fail_msg(err, -EINVAL,
                                        "--url: \"%s\" is not an http://HOST:PORT or "
                                        "https://HOST:PORT address",
                                        u);
                c->base = strdup(u);
                c->where = strdup(u);
                for (size_t n = c->base ? strlen(c->base) : 0; n > 8 && c->base[n - 1] == '/'; n--)
                        c->base[n - 1] = '\0';
        }
        if (!c->base || !c->where || (t->socket && !c->socket))
                return cage_fail(err, -ENOMEM, "client");
        return 0;
}

static int set_token(struct cage_client *c, const char *token, struct cage_error *err)
{
        if (!token)
                return 0;
        /* Never echo the token, not even in this message. */
        if (!token[0] || has_control_chars(token))
                return fail_msg(err, -EINVAL,
                                "the token (--token or CODECAGE_TOKEN) is empty or contains "
                                "control characters");
        if (asprintf(&c->auth, "Authorization: Bearer %s", token) < 0) {
                c->auth = NULL;
                return cage_fail(err, -ENOMEM, "client");
        }
        return 0;
}

int cage_client_new(const struct cage_client_target *target, struct cage_client **ret,
                    struct cage_error *err)
{
        static bool curl_ready;
        if (!!target->url == !!target->socket)
                return fail_msg(err, -EINVAL, "give either --url or --socket, not both");
        if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return fail_msg(err, -EIO, "cannot initialise libcurl");
        curl_ready = true;
        struct cage_client *c = calloc(1, sizeof(*c));
        if (!c)
                return cage_fail(err, -ENOMEM, "client");
        int r = set_address(c, target, err);
        if (r == 0)
                r = set_token(c, target->token, err);
        if (r == 0 && !(c->curl = curl_easy_init()))
                r = fail_msg(err, -EIO, "cannot initialise libcurl");
        if (r < 0) {
                cage_client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

struct cage_client *cage_client_free(struct cage_client *c)
{
        if (!c)
                return NULL;
        if (c->curl)
                curl_easy_cleanup(c->curl);
        if (c->auth)
                explicit_bzero(c->auth, strlen(c->auth));
        free(c->auth);
        free(c->base);
        free(c->socket);
        free(c->where);
        free(c);
        return NULL;
}
