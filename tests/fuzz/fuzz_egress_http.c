/* libFuzzer target for src/services/egress_http.c: the input is parsed as a
 * request head, as a response head (to a GET and to a HEAD) and as a chunked
 * body, and any broken invariant aborts:
 *  - a parsed head lies within the input and every pointer into it lies
 *    within the head; a head that parsed parses the same from exactly its
 *    bytes, and any shorter prefix of it only asks for more;
 *  - the origin head of a parsed request starts "METHOD /", has CRLF line
 *    ends only, exactly one Host and one Connection header (the ones the
 *    proxy writes), one framing header that matches the parsed body, none
 *    of the hop-by-hop headers nor any the client named in Connection, and
 *    reads back (in absolute form) as a request with the same framing;
 *  - the chunked parser never takes more than it is given, stops right
 *    after the final CRLF, and gives the same result however the input is
 *    split (in two at every position of a prefix, and byte by byte). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "services/egress_http.h"
#include "fuzz.h"

#define SPLITS_MAX 256 /* two-piece splits tried: at every position of this prefix */

static bool within(const char *buf, size_t len, const char *p, size_t n)
{
        return p >= buf && p <= buf + len && n <= (size_t)(buf + len - p);
}

static bool has_ctl(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
                        return true;
        return false;
}

static bool name_is(const char *s, size_t n, const char *name)
{
        return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

/* --- chunked bodies ------------------------------------------------------- */

struct fed {
        ssize_t r;
        bool done;
};

/* Feeds buf in pieces of at most step bytes (0: whole), plus one empty
 * feed after it is done. */
static struct fed feed_pieces(const char *buf, size_t n, size_t first, size_t step)
{
        struct egress_chunked c = {};
        struct fed f = {};
        size_t off = 0;

        for (bool first_piece = true; !f.done; first_piece = false) {
                size_t k = first_piece ? first : (step ? step : n - off);
                if (k > n - off)
                        k = n - off;
                bool done = false;
                ssize_t r = egress_chunked_feed(&c, buf + off, k, &done);
                if (r < 0)
                        return (struct fed){.r = r};
                FUZZ_CHECK((size_t)r <= k);
                FUZZ_CHECK(done || (size_t)r == k);
                f.r += r;
                f.done = done;
                off += (size_t)r;
                if (off == n && !first_piece)
                        break;
        }
        if (f.done) {
                bool again = false;
                FUZZ_CHECK(egress_chunked_feed(&c, buf, n, &again) == 0 && again);
        }
        return f;
}

static void check_chunked(const char *buf, size_t n)
{
        struct egress_chunked c = {};
        bool done = false;
        ssize_t r = egress_chunked_feed(&c, buf, n, &done);

        FUZZ_CHECK(r == -EINVAL || (r >= 0 && (size_t)r <= n));
        if (r >= 0 && !done)
                FUZZ_CHECK((size_t)r == n);
        if (r >= 0 && done)
                FUZZ_CHECK(r >= 5 && buf[r - 2] == '\r' && buf[r - 1] == '\n');

        size_t last = n < SPLITS_MAX ? n : SPLITS_MAX;
        for (size_t k = 0; k <= last; k++) {
                struct fed f = feed_pieces(buf, n, k, 0);
                FUZZ_CHECK(f.r == r && f.done == (r >= 0 && done));
        }
        struct fed b = feed_pieces(buf, n, 1, 1);
        FUZZ_CHECK(b.r == r && b.done == (r >= 0 && done));
}

/* --- requests ------------------------------------------------------------- */

static bool client_named(const struct egress_http_request *req, const char *name, size_t n)
{
        for (size_t i = 0; i < req->n_headers; i++) {
                const struct egress_http_header *h = &req->headers[i];
                if (!name_is(h->name, h->name_len, "connection"))
                        continue;
                const char *p = h->value, *end = h->value + h->value_len;
                while (p < end) {
                        const char *comma = memchr(p, ',', (size_t)(end - p));
                        const char *e = comma ? comma : end;
                        const char *a = p, *b = e;
                        while (a < b && (*a == ' ' || *a == '\t'))
                                a++;
                        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                                b--;
                        if ((size_t)(b - a) == n && strncasecmp(a, name, n) == 0)
                                return true;
                        p = comma ? comma + 1 : end;
                }
        }
        return false;
}

struct origin_counts {
        int host, connection, cl, te;
};

/* Checks one header line of the origin head. */
static void check_origin_header(const struct egress_http_request *req, const char *line, size_t n,
                                struct origin_counts *cnt)
{
        static const char *const banned[] = {"proxy-authorization",
                                             "proxy-connection",
                                             "keep-alive",
                                             "upgrade",
                                             "te",
                                             "trailer",
                                             "expect"};
        const char *colon = memchr(line, ':', n);

        FUZZ_CHECK(colon && colon > line);
        size_t name_len = (size_t)(colon - line);
        for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++)
                FUZZ_CHECK(!name_is(line, name_len, banned[i]));
        bool own = true;
        if (name_is(line, name_len, "host"))
                cnt->host++;
        else if (name_is(line, name_len, "connection"))
                cnt->connection++;
        else if (name_is(line, name_len, "content-length"))
                cnt->cl++;
        else if (name_is(line, name_len, "transfer-encoding"))
                cnt->te++;
        else
                own = false;
        if (!own)
                FUZZ_CHECK(!client_named(req, line, name_len));
}

/* Reads the origin head back with an absolute-form request line. */
static void check_round_trip(const struct egress_http_request *req, const char *out, size_t n,
                             bool keep_alive)
{
        static struct egress_http_request back;
        size_t m = strlen(req->method);
        char *abs = malloc(n + 16);
        char reason[128];

        FUZZ_CHECK(abs);
        memcpy(abs, out, m);
        memcpy(abs + m, " http://x", 9);
        memcpy(abs + m + 9, out + m + 1, n - m - 1);
        size_t len = n + 8;
        int k = egress_http_parse_request(abs, len, &back, reason, sizeof(reason));
        FUZZ_CHECK(k == 1 || k == -E2BIG);
        if (k == 1) {
                FUZZ_CHECK(back.head_len == len);
                FUZZ_CHECK(back.body == req->body && back.content_length == req->content_length);
                FUZZ_CHECK(back.keep_alive == keep_alive && !back.expect_continue);
                FUZZ_CHECK(back.path_len == req->path_len &&
                           memcmp(back.path, req->path, req->path_len) == 0);
        }
        free(abs);
}

static void check_origin(const struct egress_http_request *req, bool keep_alive)
{
        char *out = NULL;
        size_t n = 0;
        int k = egress_http_origin_head(req, keep_alive, &out, &n);

        if (req->connect) {
                FUZZ_CHECK(k == -EINVAL);
                return;
        }
        FUZZ_CHECK(k == 0 && out && strlen(out) == n);
        size_t m = strlen(req->method);
        FUZZ_CHECK(n > m + 2 && memcmp(out, req->method, m) == 0 && memcmp(out + m, " /", 2) == 0);
        FUZZ_CHECK(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
        for (size_t i = 0; i < n; i++) {
                if (out[i] == '\r')
                        FUZZ_CHECK(i + 1 < n && out[i + 1] == '\n');
                if (out[i] == '\n')
                        FUZZ_CHECK(i > 0 && out[i - 1] == '\r');
        }

        struct origin_counts cnt = {};
        const char *p = strstr(out, "\r\n") + 2;
        while (p < out + n - 2) {
                const char *e = strstr(p, "\r\n");
                FUZZ_CHECK(e && e > p); /* no empty line before the end */
                check_origin_header(req, p, (size_t)(e - p), &cnt);
                p = e + 2;
        }
        FUZZ_CHECK(cnt.host == 1 && cnt.connection == 1);
        FUZZ_CHECK(cnt.cl == (req->body == EGRESS_BODY_LENGTH));
        FUZZ_CHECK(cnt.te == (req->body == EGRESS_BODY_CHUNKED));
        check_round_trip(req, out, n, keep_alive);
        free(out);
}

static void check_request_fields(const struct egress_http_request *r, const char *buf)
{
        size_t h = r->head_len;

        FUZZ_CHECK(strlen(r->method) >= 1 && strlen(r->method) < sizeof(r->method));
        FUZZ_CHECK(r->host[0] && strlen(r->host) <= EGRESS_HTTP_HOST_MAX);
        for (const char *c = r->host; *c; c++)
                FUZZ_CHECK(*c > 0x20 && *c < 0x7f);
        FUZZ_CHECK(r->port != 0);
        FUZZ_CHECK(r->version_minor == 0 || r->version_minor == 1);
        FUZZ_CHECK(r->n_headers <= EGRESS_HTTP_HEADERS_MAX);
        for (size_t i = 0; i < r->n_headers; i++) {
                const struct egress_http_header *hd = &r->headers[i];
                FUZZ_CHECK(hd->name_len > 0 && within(buf, h, hd->name, hd->name_len));
                FUZZ_CHECK(within(buf, h, hd->value, hd->value_len));
                FUZZ_CHECK(!has_ctl(hd->value, hd->value_len));
        }
        if (r->connect) {
                FUZZ_CHECK(r->path == NULL && r->body == EGRESS_BODY_NONE);
        } else {
                FUZZ_CHECK(r->path_len >= 1 && within(buf, h, r->path, r->path_len));
                FUZZ_CHECK(r->path[0] == '/');
        }
        FUZZ_CHECK(r->body != EGRESS_BODY_UNTIL_CLOSE);
        if (r->body != EGRESS_BODY_LENGTH)
                FUZZ_CHECK(r->content_length == 0);
}

static void check_request(const char *buf, size_t len)
{
        static struct egress_http_request r, again;
        char reason[128] = "";
        int k = egress_http_parse_request(buf, len, &r, reason, sizeof(reason));

        FUZZ_CHECK(k == 1 || k == 0 || k == -EINVAL || k == -E2BIG || k == -ENOTSUP);
        if (k < 0)
                FUZZ_CHECK(reason[0] != '\0');
        if (k == 0)
                FUZZ_CHECK(len < EGRESS_HTTP_HEAD_MAX);
        if (k != 1)
                return;
        FUZZ_CHECK(r.head_len <= len && r.head_len <= EGRESS_HTTP_HEAD_MAX);
        FUZZ_CHECK(r.head_len >= 4 && memcmp(buf + r.head_len - 4, "\r\n\r\n", 4) == 0);
        check_request_fields(&r, buf);

        /* The head alone parses the same; less of it needs more. */
        FUZZ_CHECK(egress_http_parse_request(buf, r.head_len, &again, NULL, 0) == 1);
        FUZZ_CHECK(again.head_len == r.head_len && again.body == r.body &&
                   again.content_length == r.content_length && again.keep_alive == r.keep_alive);
        FUZZ_CHECK(egress_http_parse_request(buf, r.head_len - 1, &again, NULL, 0) == 0);
        FUZZ_CHECK(egress_http_parse_request(buf, r.head_len / 2, &again, NULL, 0) == 0);

        check_origin(&r, true);
        check_origin(&r, false);
        if (r.body == EGRESS_BODY_CHUNKED)
                check_chunked(buf + r.head_len, len - r.head_len);
}

/* --- responses ------------------------------------------------------------ */

static void check_response(const char *buf, size_t len, bool head)
{
        struct egress_http_response r, again;
        int k = egress_http_parse_response(buf, len, head, &r);

        FUZZ_CHECK(k == 1 || k == 0 || k == -EINVAL || k == -E2BIG);
        if (k == 0)
                FUZZ_CHECK(len < EGRESS_HTTP_HEAD_MAX);
        if (k != 1)
                return;
        size_t h = r.head_len;
        FUZZ_CHECK(h <= len && h <= EGRESS_HTTP_HEAD_MAX && h >= 2 && buf[h - 1] == '\n');
        FUZZ_CHECK(buf[h - 2] == '\n' || (h >= 3 && buf[h - 2] == '\r' && buf[h - 3] == '\n'));
        FUZZ_CHECK(r.status >= 100 && r.status <= 599);
        if (head || r.status < 200 || r.status == 204 || r.status == 304)
                FUZZ_CHECK(r.body == EGRESS_BODY_NONE);
        if (r.body == EGRESS_BODY_UNTIL_CLOSE || r.status == 101)
                FUZZ_CHECK(!r.keep_alive);
        if (r.body != EGRESS_BODY_LENGTH)
                FUZZ_CHECK(r.content_length == 0);

        FUZZ_CHECK(egress_http_parse_response(buf, h, head, &again) == 1);
        FUZZ_CHECK(again.head_len == h && again.body == r.body && again.status == r.status);
        FUZZ_CHECK(egress_http_parse_response(buf, h - 1, head, &again) == 0);
        if (r.body == EGRESS_BODY_CHUNKED)
                check_chunked(buf + h, len - h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data;

        check_request(buf, size);
        check_response(buf, size, false);
        check_response(buf, size, true);
        check_chunked(buf, size);
        return 0;
}
