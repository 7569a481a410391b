/* Unit tests for the egress proxy's HTTP framing: every accept/refuse rule
 * of the request line, target, headers and body framing (with the request
 * smuggling shapes: CL+TE, odd transfer codings, differing lengths), the
 * response framing by method and status, the origin head (hop-by-hop
 * headers gone, Host from the request line, one canonical framing header),
 * and the chunked parser fed whole, split anywhere and byte by byte. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "services/egress_http.h"

static struct egress_http_request rq;
static char reason[256];

static int req(const char *s)
{
        reason[0] = '\0';
        return egress_http_parse_request(s, strlen(s), &rq, reason, sizeof(reason));
}

/* The last request req_line() built: rq points into it. */
static char line_buf[4096];

/* Parses line + CRLF + header lines + CRLF. */
static int req_line(const char *line, const char *headers)
{
        snprintf(line_buf, sizeof(line_buf), "%s\r\n%s\r\n", line, headers);
        return req(line_buf);
}

/* Parses a GET of http://h/ with the given header lines. */
static int req_headers(const char *headers)
{
        return req_line("GET http://h/ HTTP/1.1", headers);
}

static bool header_eq(size_t i, const char *name, const char *value)
{
        const struct egress_http_header *h = &rq.headers[i];
        return i < rq.n_headers && h->name_len == strlen(name) &&
               memcmp(h->name, name, h->name_len) == 0 && h->value_len == strlen(value) &&
               memcmp(h->value, value, h->value_len) == 0;
}

static bool path_is(const char *want)
{
        return rq.path && rq.path_len == strlen(want) && memcmp(rq.path, want, rq.path_len) == 0;
}

static struct egress_http_response rs;

static int resp(const char *s, bool head)
{
        return egress_http_parse_response(s, strlen(s), head, &rs);
}

/* The origin head of the request s as a malloc'ed string ("(error)" on failure). */
static char *origin(const char *s, bool keep_alive)
{
        char *out = NULL;
        size_t n = 0;
        if (req(s) != 1 || egress_http_origin_head(&rq, keep_alive, &out, &n) < 0)
                return strdup("(error)");
        if (strlen(out) != n) {
                free(out);
                return strdup("(length mismatch)");
        }
        return out;
}

#define CHECK_ORIGIN(s, keep_alive, want)                                                          \
        do {                                                                                       \
                char *got_ = origin(s, keep_alive);                                                \
                CHECK_STREQ(got_, want);                                                           \
                free(got_);                                                                        \
        } while (0)

/* --- requests: line and target -------------------------------------------- */

TEST(absolute_form_get)
{
        const char *s = "GET http://example.com/a/b?c=d HTTP/1.1\r\n"
                        "Host: example.com\r\n"
                        "User-Agent:   curl/8 \t\r\n"
                        "\r\n";
        CHECK(req(s) == 1);
        CHECK_STREQ(rq.method, "GET");
        CHECK(!rq.connect);
        CHECK_STREQ(rq.host, "example.com");
        CHECK(rq.port == 80);
        CHECK(path_is("/a/b?c=d"));
        CHECK(rq.version_minor == 1);
        CHECK(rq.n_headers == 2);
        CHECK(header_eq(0, "Host", "example.com"));
        CHECK(header_eq(1, "User-Agent", "curl/8"));
        CHECK(rq.body == EGRESS_BODY_NONE);
        CHECK(rq.keep_alive);
        CHECK(!rq.expect_continue);
        CHECK(rq.head_len == strlen(s));
}

TEST(uri_forms)
{
        CHECK(req_line("GET http://example.com:8080/x HTTP/1.1", "") == 1);
        CHECK(rq.port == 8080 && path_is("/x"));
        /* The scheme is case-insensitive; the host is kept as written. */
        CHECK(req_line("GET HTTP://Example.COM HTTP/1.1", "") == 1);
        CHECK_STREQ(rq.host, "Example.COM");
        CHECK(path_is("/"));
        /* The path "/" of an empty path still points into the buffer. */
        CHECK(rq.path >= line_buf && rq.path < line_buf + strlen(line_buf));
        CHECK(req_line("GET http://[2001:db8::1]:8080/ HTTP/1.1", "") == 1);
        CHECK_STREQ(rq.host, "2001:db8::1");
        CHECK(rq.port == 8080);
        CHECK(req_line("GET http://[::1]/ HTTP/1.1", "") == 1);
        CHECK_STREQ(rq.host, "::1");
        CHECK(rq.port == 80);
        CHECK(req_line("GET http://h:65535/ HTTP/1.1", "") == 1 && rq.port == 65535);
        CHECK(req_line("GET http://h:00443/ HTTP/1.1", "") == 1 && rq.port == 443);
        CHECK(req_line("GET http://1.2.3.4/?q=1 HTTP/1.1", "") == 1);
        CHECK(path_is("/?q=1"));
        CHECK(req_line("get http://h/ HTTP/1.0", "") == 1);
        CHECK_STREQ(rq.method, "get");
        CHECK(rq.version_minor == 0);
}

TEST(uri_refusals)
{
        CHECK(req_line("GET https://example.com/ HTTP/1.1", "") == -ENOTSUP);
        CHECK(strstr(reason, "CONNECT") != NULL);
        CHECK(req_line("GET HTTPS://example.com/ HTTP/1.1", "") == -ENOTSUP);
        CHECK(req_line("GET /index.html HTTP/1.1", "Host: example.com\r\n") == -ENOTSUP);
        CHECK(strstr(reason, "not a proxy request") != NULL);
        CHECK(req_line("OPTIONS * HTTP/1.1", "") == -ENOTSUP);
        CHECK(req_line("GET ftp://h/ HTTP/1.1", "") == -ENOTSUP);
        CHECK(req_line("GET http:/h/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET h/x HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://user:pw@h/ HTTP/1.1", "") == -EINVAL);
        CHECK(strstr(reason, "user") != NULL);
        CHECK(req_line("GET http://good.com@evil.com/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/x#frag HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h#frag HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h?q HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http:///x HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://:80/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:0/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:65536/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:8a/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:+80/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h:80:80/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://%65vil.com/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://a\\b/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://[::1/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://[]/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://[abc]/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://[::1]x/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://[fe80::1%25eth0]/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/\x7f HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/\xc3\xa9 HTTP/1.1", "") == -EINVAL);
}

TEST(host_length_limit)
{
        char line[600], host[300];
        memset(host, 'a', 260);
        host[260] = '\0';
        snprintf(line, sizeof(line), "GET http://%s/ HTTP/1.1", host);
        CHECK(req_line(line, "") == 1);
        CHECK(strlen(rq.host) == 260);
        snprintf(line, sizeof(line), "GET http://%s:8080/ HTTP/1.1", host);
        CHECK(req_line(line, "") == 1);
        host[260] = 'a';
        host[261] = '\0';
        snprintf(line, sizeof(line), "GET http://%s/ HTTP/1.1", host);
        CHECK(req_line(line, "") == -EINVAL);
        snprintf(line, sizeof(line), "CONNECT %s:443 HTTP/1.1", host);
        CHECK(req_line(line, "") == -EINVAL);
}

TEST(connect_targets)
{
        CHECK(req_line("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443\r\n") == 1);
        CHECK(rq.connect);
        CHECK_STREQ(rq.method, "CONNECT");
        CHECK_STREQ(rq.host, "example.com");
        CHECK(rq.port == 443);
        CHECK(rq.path == NULL);
        CHECK(rq.body == EGRESS_BODY_NONE);
        CHECK(req_line("CONNECT [2001:db8::1]:443 HTTP/1.1", "") == 1);
        CHECK_STREQ(rq.host, "2001:db8::1");
        /* A body header does not make a tunnel's bytes a body. */
        CHECK(req_line("CONNECT h:443 HTTP/1.1", "Content-Length: 5\r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_NONE && rq.content_length == 0);

        CHECK(req_line("CONNECT example.com HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT example.com: HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT example.com:0 HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT [::1] HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT :443 HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT u@h:443 HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT http://h:443/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("CONNECT h:443/x HTTP/1.1", "") == -EINVAL);
        /* Methods are case-sensitive: "connect" is an ordinary method. */
        CHECK(req_line("connect h:443 HTTP/1.1", "") == -EINVAL);
}

TEST(request_line_refusals)
{
        CHECK(req_line("ABCDEFGHIJKLMNOPQRSTUVW http://h/ HTTP/1.1", "") == 1);
        CHECK(req_line("ABCDEFGHIJKLMNOPQRSTUVWX http://h/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET  http://h/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/  HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/ HTTP/1.1 ", "") == -EINVAL);
        CHECK(req_line("GET http://h/ HTTP/1.2", "") == -EINVAL);
        CHECK(req_line("GET http://h/ HTTP/2.0", "") == -EINVAL);
        CHECK(req_line("GET http://h/ http/1.1", "") == -EINVAL);
        CHECK(req_line("GET http://h/", "") == -EINVAL);
        CHECK(req_line("G(T http://h/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line(" GET http://h/ HTTP/1.1", "") == -EINVAL);
        CHECK(req_line("GET\thttp://h/ HTTP/1.1", "") == -EINVAL);
        CHECK(strstr(reason, "METHOD URI HTTP/1.x") != NULL);
        /* An empty line before the request line is refused, not skipped. */
        CHECK(req("\r\nGET http://h/ HTTP/1.1\r\n\r\n") == -EINVAL);
}

/* --- requests: head boundaries ---------------------------------------------- */

TEST(incomplete_heads_need_more)
{
        const char *s = "GET http://h/ HTTP/1.1\r\nA: b\r\n\r\n";
        size_t n = strlen(s);
        bool all_zero = true;
        for (size_t k = 0; k < n; k++)
                if (egress_http_parse_request(s, k, &rq, reason, sizeof(reason)) != 0)
                        all_zero = false;
        CHECK(all_zero);
        CHECK(egress_http_parse_request(s, n, &rq, reason, sizeof(reason)) == 1);
        CHECK(egress_http_parse_request("", 0, &rq, NULL, 0) == 0);
}

TEST(line_ends_are_crlf_only)
{
        CHECK(req("GET http://h/ HTTP/1.1\n\n") == -EINVAL);
        CHECK(strstr(reason, "LF") != NULL);
        CHECK(req("GET http://h/ HTTP/1.1\r\nA: b\n\r\n") == -EINVAL);
        CHECK(req("GET http://h/ HTTP/1.1\r\nA: b\r\n\n") == -EINVAL);
        CHECK(req("GET http://h/ HTTP/1.1\rA: b\r\n\r\n") == -EINVAL);
        CHECK(req("GET http://h/ HTTP/1.1\r\nA: b\rc\r\n\r\n") == -EINVAL);
        /* Refused as soon as it is seen, not after waiting for a CRLFCRLF. */
        CHECK(req("GET http://h/ HTTP/1.1\nHost") == -EINVAL);
        CHECK(req("GET http://h/ HTTP/1.1\rHost") == -EINVAL);
        CHECK(strstr(reason, "CR") != NULL);
        CHECK(req("GET http://h/ HTTP/1.1\r") == 0);
        CHECK(resp("HTTP/1.1 200 OK\rX", false) == -EINVAL);
}

TEST(head_size_limit)
{
        size_t max = EGRESS_HTTP_HEAD_MAX;
        char *buf = malloc(max + 16);
        const char *line = "GET http://h/ HTTP/1.1\r\nX: ";
        size_t n = strlen(line);

        /* A head of exactly the limit is accepted. */
        memcpy(buf, line, n);
        memset(buf + n, 'v', max - n - 4);
        memcpy(buf + max - 4, "\r\n\r\n", 4);
        CHECK(egress_http_parse_request(buf, max, &rq, reason, sizeof(reason)) == 1);
        CHECK(rq.head_len == max);
        CHECK(rq.headers[0].value_len == max - n - 4);
        /* One byte more is not, whether or not its end has arrived. */
        memset(buf + n, 'v', max - n - 3);
        memcpy(buf + max - 3, "\r\n\r\n", 4);
        CHECK(egress_http_parse_request(buf, max + 1, &rq, reason, sizeof(reason)) == -E2BIG);
        CHECK(egress_http_parse_request(buf, max, &rq, reason, sizeof(reason)) == -E2BIG);
        CHECK(egress_http_parse_request(buf, max - 1, &rq, reason, sizeof(reason)) == 0);
        free(buf);
}

TEST(pipelined_requests)
{
        const char *s = "POST http://h/a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                        "GET http://other.example/b HTTP/1.1\r\nHost: x\r\n\r\n";
        size_t len = strlen(s);
        CHECK(egress_http_parse_request(s, len, &rq, reason, sizeof(reason)) == 1);
        CHECK(rq.head_len == strlen("POST http://h/a HTTP/1.1\r\nContent-Length: 5\r\n\r\n"));
        CHECK(rq.body == EGRESS_BODY_LENGTH && rq.content_length == 5);
        CHECK(memcmp(s + rq.head_len, "hello", 5) == 0);
        size_t next = rq.head_len + 5;
        CHECK(egress_http_parse_request(s + next, len - next, &rq, reason, sizeof(reason)) == 1);
        CHECK_STREQ(rq.host, "other.example");
        CHECK(path_is("/b"));
        CHECK(next + rq.head_len == len);

        /* Without a body the second request starts right at head_len. */
        s = "GET http://a/ HTTP/1.1\r\n\r\nGET http://b/ HTTP/1.1\r\n\r\n";
        CHECK(req(s) == 1);
        CHECK(strncmp(s + rq.head_len, "GET http://b/", 13) == 0);
}

/* --- requests: headers ----------------------------------------------------- */

TEST(header_syntax)
{
        CHECK(req_headers("X-A: \t v a \t \r\nX-Empty:\r\nX-Tab: a\tb\r\nX-8: caf\xc3\xa9\r\n") ==
              1);
        CHECK(header_eq(0, "X-A", "v a"));
        CHECK(header_eq(1, "X-Empty", ""));
        CHECK(header_eq(2, "X-Tab", "a\tb"));
        CHECK(header_eq(3, "X-8", "caf\xc3\xa9"));
        CHECK(req_headers("Host : h\r\n") == -EINVAL);
        CHECK(strstr(reason, "colon") != NULL);
        CHECK(req_headers("Host\t: h\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length : 5\r\n") == -EINVAL);
        CHECK(req_headers("X-A: a\r\n b\r\n") == -EINVAL);
        CHECK(strstr(reason, "folding") != NULL);
        CHECK(req_headers("X-A: a\r\n\tb\r\n") == -EINVAL);
        CHECK(req_headers("NoColon\r\n") == -EINVAL);
        CHECK(req_headers(": empty-name\r\n") == -EINVAL);
        CHECK(req_headers("X(A): b\r\n") == -EINVAL);
        CHECK(req_headers("X-A: a\x01"
                          "b\r\n") == -EINVAL);
        CHECK(req_headers("X-A: a\x7f\r\n") == -EINVAL);
        CHECK(strstr(reason, "control") != NULL);
        const char nul[] = "GET http://h/ HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
        CHECK(egress_http_parse_request(nul, sizeof(nul) - 1, &rq, reason, sizeof(reason)) ==
              -EINVAL);
}

TEST(header_count_limit)
{
        char *h = malloc(EGRESS_HTTP_HEADERS_MAX * 16 + 64), *buf = malloc(8192);
        size_t n = 0;
        for (int i = 0; i < EGRESS_HTTP_HEADERS_MAX; i++)
                n += (size_t)sprintf(h + n, "X-%d: v\r\n", i);
        sprintf(buf, "GET http://h/ HTTP/1.1\r\n%s\r\n", h);
        CHECK(req(buf) == 1);
        CHECK(rq.n_headers == EGRESS_HTTP_HEADERS_MAX);
        sprintf(buf, "GET http://h/ HTTP/1.1\r\n%sX-Last: v\r\n\r\n", h);
        CHECK(req(buf) == -E2BIG);
        free(h);
        free(buf);
}

/* --- requests: framing ------------------------------------------------------- */

TEST(request_body_framing)
{
        CHECK(req_headers("Content-Length: 42\r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_LENGTH && rq.content_length == 42);
        CHECK(req_headers("Content-Length: 0\r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_LENGTH && rq.content_length == 0);
        CHECK(req_headers("Transfer-Encoding: chunked\r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_CHUNKED);
        CHECK(req_headers("transfer-encoding: Chunked \r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_CHUNKED);
        CHECK(req_headers("X-A: b\r\n") == 1);
        CHECK(rq.body == EGRESS_BODY_NONE);
        CHECK(req_headers("Content-Length: 9999999999999999999\r\n") == 1);
        CHECK(rq.content_length == UINT64_C(9999999999999999999));
        /* Identical repeated lengths are one length. */
        CHECK(req_headers("Content-Length: 7\r\nContent-Length: 7\r\n") == 1);
        CHECK(rq.content_length == 7);
        CHECK(req_headers("Content-Length: 7\r\nContent-Length: 007\r\n") == 1);
}

TEST(smuggling_shapes_are_refused)
{
        CHECK(req_headers("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") == -EINVAL);
        CHECK(req_headers("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") == -EINVAL);
        CHECK(req_headers("Transfer-Encoding: identity\r\nContent-Length: 5\r\n") == -EINVAL);
        CHECK(req_headers("Transfer-Encoding: chunked, identity\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: gzip, chunked\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: identity\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: xchunked\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: chunked-x\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: \"chunked\"\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding:\r\n") == -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") ==
              -ENOTSUP);
        CHECK(req_headers("Transfer-Encoding: chunked,\r\n") == -ENOTSUP);
        CHECK(req_line("POST http://h/ HTTP/1.0", "Transfer-Encoding: chunked\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 5\r\nContent-Length: 6\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 5, 5\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: +5\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: -5\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 5 5\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 0x5\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 5.0\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length:\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 10000000000000000000\r\n") == -EINVAL);
        CHECK(req_headers("Content-Length: 5\r\n Transfer-Encoding: chunked\r\n") == -EINVAL);
        CHECK(req_headers("Transfer-Encoding : chunked\r\n") == -EINVAL);
}

TEST(keep_alive_and_expect)
{
        CHECK(req_headers("") == 1 && rq.keep_alive);
        CHECK(req_headers("Connection: close\r\n") == 1 && !rq.keep_alive);
        CHECK(req_headers("Connection: Keep-Alive, CLOSE\r\n") == 1 && !rq.keep_alive);
        CHECK(req_headers("Connection: x-foo, , close,\r\n") == 1 && !rq.keep_alive);
        CHECK(req_headers("Connection: closed\r\n") == 1 && rq.keep_alive);
        CHECK(req_headers("Connection: a\r\nConnection: close\r\n") == 1 && !rq.keep_alive);
        CHECK(req_line("GET http://h/ HTTP/1.0", "") == 1 && !rq.keep_alive);
        CHECK(req_line("GET http://h/ HTTP/1.0", "Connection: keep-alive\r\n") == 1);
        CHECK(rq.keep_alive);
        CHECK(req_line("GET http://h/ HTTP/1.0", "Connection: keep-alive, close\r\n") == 1);
        CHECK(!rq.keep_alive);
        CHECK(req_headers("Connection: a b\r\n") == -EINVAL);
        CHECK(req_headers("Connection: \"close\"\r\n") == -EINVAL);

        CHECK(req_headers("Expect: 100-continue\r\n") == 1 && rq.expect_continue);
        CHECK(req_headers("Expect: 100-Continue\r\n") == 1 && rq.expect_continue);
        CHECK(req_headers("Expect: 100-continue-x\r\n") == 1 && !rq.expect_continue);
}

/* --- the origin head -------------------------------------------------------- */

TEST(origin_head_rewrites_host)
{
        CHECK_ORIGIN("GET http://good.example/p?q HTTP/1.1\r\n"
                     "Host: evil.com\r\n"
                     "Accept: */*\r\n"
                     "\r\n",
                     true,
                     "GET /p?q HTTP/1.1\r\n"
                     "Accept: */*\r\n"
                     "Host: good.example\r\n"
                     "Connection: keep-alive\r\n"
                     "\r\n");
        CHECK_ORIGIN("GET http://h:8080 HTTP/1.0\r\nHost: h\r\nHOST: other\r\n\r\n", false,
                     "GET / HTTP/1.1\r\nHost: h:8080\r\nConnection: close\r\n\r\n");
        CHECK_ORIGIN(
                "GET http://[2001:db8::1]:8443/ HTTP/1.1\r\n\r\n", true,
                "GET / HTTP/1.1\r\nHost: [2001:db8::1]:8443\r\nConnection: keep-alive\r\n\r\n");
        CHECK_ORIGIN("GET http://[::1]:80/ HTTP/1.1\r\n\r\n", true,
                     "GET / HTTP/1.1\r\nHost: [::1]\r\nConnection: keep-alive\r\n\r\n");
}

TEST(origin_head_drops_hop_by_hop)
{
        CHECK_ORIGIN("PUT http://h/x HTTP/1.1\r\n"
                     "Proxy-Authorization: Basic c2VjcmV0\r\n"
                     "Proxy-Connection: keep-alive\r\n"
                     "Keep-Alive: timeout=5\r\n"
                     "Connection: X-Secret, close\r\n"
                     "X-Secret: token\r\n"
                     "x-secret: token2\r\n"
                     "Upgrade: websocket\r\n"
                     "TE: trailers\r\n"
                     "Trailer: X-T\r\n"
                     "Expect: 100-continue\r\n"
                     "X-Kept: yes\r\n"
                     "Content-Length: 3\r\n"
                     "\r\n",
                     false,
                     "PUT /x HTTP/1.1\r\n"
                     "X-Kept: yes\r\n"
                     "Host: h\r\n"
                     "Content-Length: 3\r\n"
                     "Connection: close\r\n"
                     "\r\n");
}

TEST(origin_head_writes_its_own_framing)
{
        /* Lengths are written in canonical form, once. */
        CHECK_ORIGIN("POST http://h/ HTTP/1.1\r\nContent-Length: 007\r\nContent-Length: 7\r\n\r\n",
                     true,
                     "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 7\r\n"
                     "Connection: keep-alive\r\n\r\n");
        CHECK_ORIGIN("POST http://h/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", true,
                     "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: keep-alive\r\n\r\n");
        /* Naming a framing header in Connection cannot strip the framing. */
        CHECK_ORIGIN("POST http://h/ HTTP/1.1\r\nConnection: transfer-encoding, host\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n",
                     true,
                     "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: keep-alive\r\n\r\n");
        CHECK_ORIGIN("POST http://h/ HTTP/1.1\r\nConnection: content-length\r\n"
                     "Content-Length: 0\r\n\r\n",
                     true,
                     "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n"
                     "Connection: keep-alive\r\n\r\n");

        char *out = NULL;
        size_t n = 0;
        CHECK(req("CONNECT h:443 HTTP/1.1\r\n\r\n") == 1);
        CHECK(egress_http_origin_head(&rq, true, &out, &n) == -EINVAL);
        CHECK(out == NULL);
}

/* --- responses --------------------------------------------------------------- */

TEST(response_framing)
{
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", false) == 1);
        CHECK(rs.status == 200 && rs.version_minor == 1);
        CHECK(rs.body == EGRESS_BODY_LENGTH && rs.content_length == 12);
        CHECK(rs.keep_alive);
        CHECK(rs.head_len == strlen("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"));
        CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_CHUNKED && rs.keep_alive);
        CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, CHUNKED\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_CHUNKED);
        CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_UNTIL_CLOSE && !rs.keep_alive);
        CHECK(resp("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_UNTIL_CLOSE && !rs.keep_alive);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", false) ==
              1);
        CHECK(rs.body == EGRESS_BODY_LENGTH && !rs.keep_alive);
        CHECK(resp("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", false) == 1);
        CHECK(!rs.keep_alive && rs.version_minor == 0);
        CHECK(resp("HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n",
                   false) == 1);
        CHECK(rs.keep_alive);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", false) ==
              1);
}

TEST(responses_without_body)
{
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", true) == 1);
        CHECK(rs.body == EGRESS_BODY_NONE && rs.keep_alive);
        CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true) == 1);
        CHECK(rs.body == EGRESS_BODY_NONE);
        CHECK(resp("HTTP/1.1 204 No Content\r\n\r\n", false) == 1);
        CHECK(rs.status == 204 && rs.body == EGRESS_BODY_NONE && rs.keep_alive);
        CHECK(resp("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_NONE && rs.keep_alive);
        /* Framing headers of a bodiless response describe another message. */
        CHECK(resp("HTTP/1.1 304 Not Modified\r\nContent-Length: x\r\n\r\n", false) == 1);
        CHECK(resp("HTTP/1.1 100 Continue\r\n\r\n", false) == 1);
        CHECK(rs.status == 100 && rs.body == EGRESS_BODY_NONE && rs.keep_alive);
        CHECK(resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false) == 1);
        CHECK(rs.body == EGRESS_BODY_NONE && !rs.keep_alive);
}

TEST(response_syntax)
{
        CHECK(resp("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", false) == 1);
        CHECK(resp("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", false) == 1);
        CHECK(resp("HTTP/1.1 404 Not  Found\tx\r\nContent-Length: 0\r\n\r\n", false) == 1);
        CHECK(rs.status == 404);
        /* Bare LF is tolerated in responses; bare CR never. */
        CHECK(resp("HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", false) == 1);
        CHECK(rs.head_len == strlen("HTTP/1.1 200 OK\nContent-Length: 3\n\n"));
        CHECK(rs.content_length == 3);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 3\n\r\n", false) == 1);
        CHECK(resp("HTTP/1.1 200 OK\rContent-Length: 3\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", false) == 0);
        CHECK(resp("HTTP/1.1 200 OK", false) == 0);
        CHECK(resp("HTTP/1.1 099 X\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 600 X\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 2x0 X\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 20 X\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200OK\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/2 200 OK\r\n\r\n", false) == -EINVAL);
        CHECK(resp("http/1.1 200 OK\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200 O\x01K\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200 OK\r\nX : a\r\n\r\n", false) == -EINVAL);

        char line[400];
        memset(line, 'r', sizeof(line));
        memcpy(line, "HTTP/1.1 200 ", 13);
        strcpy(line + 13 + EGRESS_HTTP_REASON_MAX, "\r\n\r\n");
        CHECK(resp(line, true) == 1);
        memset(line + 13, 'r', EGRESS_HTTP_REASON_MAX + 1);
        strcpy(line + 13 + EGRESS_HTTP_REASON_MAX + 1, "\r\n\r\n");
        CHECK(resp(line, true) == -EINVAL);
}

TEST(response_framing_refusals)
{
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                   false) == -EINVAL);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", false) ==
              -EINVAL);
        CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false) == -EINVAL);
        CHECK(resp("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false) == -EINVAL);
        size_t max = EGRESS_HTTP_HEAD_MAX;
        char *buf = malloc(max);
        memset(buf, 'a', max);
        memcpy(buf, "HTTP/1.1 200 OK\r\nX: ", 20);
        CHECK(egress_http_parse_response(buf, max, false, &rs) == -E2BIG);
        CHECK(egress_http_parse_response(buf, max - 1, false, &rs) == 0);
        free(buf);
}

/* --- chunked bodies ---------------------------------------------------------- */

struct fed {
        ssize_t r; /* consumed, or -errno */
        bool done;
};

static struct fed feed_whole(const char *s, size_t n)
{
        struct egress_chunked c = {};
        struct fed f = {};
        f.r = egress_chunked_feed(&c, s, n, &f.done);
        return f;
}

/* Feeds s in the pieces cut at the given positions (ascending, <= n). */
static struct fed feed_cut(const char *s, size_t n, const size_t *cuts, size_t n_cuts)
{
        struct egress_chunked c = {};
        struct fed f = {};
        size_t from = 0;
        for (size_t i = 0; i <= n_cuts; i++) {
                size_t to = i < n_cuts ? cuts[i] : n;
                ssize_t r = egress_chunked_feed(&c, s + from, to - from, &f.done);
                if (r < 0)
                        return (struct fed){.r = r};
                f.r += r;
                if (f.done)
                        return f;
                from = to;
        }
        return f;
}

/* Whether every two-piece split and byte-by-byte feeding agree with whole. */
static bool splits_agree(const char *s, size_t n)
{
        struct fed w = feed_whole(s, n);
        size_t *all = malloc((n + 1) * sizeof(size_t));
        bool ok = true;
        for (size_t k = 0; k <= n; k++) {
                struct fed f = feed_cut(s, n, &k, 1);
                ok = ok && f.r == w.r && f.done == w.done;
                all[k] = k;
        }
        struct fed b = feed_cut(s, n, all + 1, n > 0 ? n - 1 : 0);
        free(all);
        return ok && b.r == w.r && b.done == w.done;
}

static struct fed feed_str(const char *s)
{
        CHECK(splits_agree(s, strlen(s)));
        return feed_whole(s, strlen(s));
}

TEST(chunked_bodies)
{
        struct fed f = feed_str("5\r\nhello\r\n0\r\n\r\n");
        CHECK(f.done && f.r == 15);
        f = feed_str("5\r\nhello\r\n0\r\n\r\nGET http://h/ HTTP/1.1\r\n\r\n");
        CHECK(f.done && f.r == 15);
        f = feed_str("A\r\n0123456789\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n");
        CHECK(f.done &&
              f.r == (ssize_t)strlen(
                             "A\r\n0123456789\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"));
        f = feed_str("000\r\n\r\n");
        CHECK(f.done && f.r == 7);
        /* Extensions and trailers. */
        f = feed_str("5;name=val;q=\"a b\"\r\nhello\r\n0;last\r\nX-T: 1\r\nX-U: 2\r\n\r\nrest");
        CHECK(f.done && f.r == (ssize_t)strlen("5;name=val;q=\"a b\"\r\nhello\r\n0;last\r\n"
                                               "X-T: 1\r\nX-U: 2\r\n\r\n"));
        /* Not done yet: everything fed belongs to the body. */
        f = feed_str("5\r\nhel");
        CHECK(!f.done && f.r == 6);
        f = feed_str("5\r\nhello\r\n0\r\nX-T: 1\r\n");
        CHECK(!f.done && f.r == 21);
        /* Data bytes are data, whatever they look like. */
        f = feed_str("4\r\n\r\n\r\n\r\n0\r\n\r\n");
        CHECK(f.done && f.r == 14);
}

TEST(chunked_refusals)
{
        CHECK(feed_str("g\r\n").r == -EINVAL);
        CHECK(feed_str("\r\n").r == -EINVAL);
        CHECK(feed_str(";x\r\n").r == -EINVAL);
        CHECK(feed_str("-5\r\n").r == -EINVAL);
        CHECK(feed_str("0x5\r\n").r == -EINVAL);
        CHECK(feed_str(" 5\r\n").r == -EINVAL);
        CHECK(feed_str("5 \r\n").r == -EINVAL);
        CHECK(feed_str("5\nhello\r\n").r == -EINVAL);
        CHECK(feed_str("5\rhello\r\n").r == -EINVAL);
        CHECK(feed_str("5\r\nhelloX\r\n").r == -EINVAL);
        CHECK(feed_str("5\r\nhello\n0\r\n\r\n").r == -EINVAL);
        CHECK(feed_str("5;a\x01\r\n").r == -EINVAL);
        CHECK(feed_str("0\r\nX-T: 1\n\r\n").r == -EINVAL);
        CHECK(feed_str("0\r\n\n").r == -EINVAL);
        CHECK(feed_str("0\r\n\rX").r == -EINVAL);
        CHECK(feed_str("0\r\nX-T: a\x7f\r\n\r\n").r == -EINVAL);
        CHECK(feed_str("0\r\nX-T: 1\r\n folded\r\n\r\n").r == -EINVAL);
        /* Errors stick. */
        struct egress_chunked c = {};
        bool done = false;
        CHECK(egress_chunked_feed(&c, "z", 1, &done) == -EINVAL);
        CHECK(egress_chunked_feed(&c, "0\r\n\r\n", 5, &done) == -EINVAL);
}

TEST(chunked_bounds)
{
        /* 2^62 is the largest chunk size. */
        struct fed f = feed_str("4000000000000000\r\nabc");
        CHECK(!f.done && f.r == 21);
        CHECK(feed_str("4000000000000001\r\n").r == -EINVAL);
        CHECK(feed_str("10000000000000000\r\n").r == -EINVAL);
        CHECK(feed_str("ffffffffffffffffffff\r\n").r == -EINVAL);
        f = feed_str("00000000000000000000000000000005\r\nhello\r\n0\r\n\r\n");
        CHECK(f.done);

        /* Lines of up to 4096 bytes. */
        static char s[16384];
        strcpy(s, "1;");
        memset(s + 2, 'e', 4094);
        strcpy(s + 4096, "\r\nx\r\n0\r\n\r\n");
        CHECK(feed_whole(s, strlen(s)).done);
        strcpy(s, "1;");
        memset(s + 2, 'e', 4095);
        strcpy(s + 4097, "\r\nx\r\n0\r\n\r\n");
        CHECK(feed_whole(s, strlen(s)).r == -EINVAL);
        strcpy(s, "0\r\nX: ");
        memset(s + 6, 'v', 5000);
        strcpy(s + 5006, "\r\n\r\n");
        CHECK(feed_whole(s, strlen(s)).r == -EINVAL);

        /* Trailers are bounded in total too. */
        size_t big = EGRESS_HTTP_HEAD_MAX + 4096;
        char *t = malloc(big + 16);
        size_t n = (size_t)sprintf(t, "0\r\n");
        while (n + 1000 < big)
                n += (size_t)sprintf(t + n, "X: %0995d\r\n", 0);
        strcpy(t + n, "\r\n");
        CHECK(feed_whole(t, n + 2).r == -EINVAL);
        free(t);
}

TEST(chunked_after_done)
{
        struct egress_chunked c = {};
        bool done = false;
        CHECK(egress_chunked_feed(&c, "0\r\n\r\nGET", 8, &done) == 5);
        CHECK(done);
        done = false;
        CHECK(egress_chunked_feed(&c, "GET", 3, &done) == 0);
        CHECK(done);
        CHECK(egress_chunked_feed(&c, "", 0, &done) == 0);
        struct egress_chunked fresh = {};
        CHECK(egress_chunked_feed(&fresh, "", 0, &done) == 0);
        CHECK(!done);
}

RUN_TESTS(T(absolute_form_get), T(uri_forms), T(uri_refusals), T(host_length_limit),
          T(connect_targets), T(request_line_refusals), T(incomplete_heads_need_more),
          T(line_ends_are_crlf_only), T(head_size_limit), T(pipelined_requests), T(header_syntax),
          T(header_count_limit), T(request_body_framing), T(smuggling_shapes_are_refused),
          T(keep_alive_and_expect), T(origin_head_rewrites_host), T(origin_head_drops_hop_by_hop),
          T(origin_head_writes_its_own_framing), T(response_framing), T(responses_without_body),
          T(response_syntax), T(response_framing_refusals), T(chunked_bodies), T(chunked_refusals),
          T(chunked_bounds), T(chunked_after_done))
