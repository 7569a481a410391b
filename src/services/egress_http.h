/* HTTP/1.x message framing for the egress proxy: parsing request and
 * response heads, rewriting a proxy request for the origin server, and
 * finding where a chunked body ends. Pure functions over buffers — no I/O —
 * unit tested and fuzzed.
 *
 * Strict where strictness protects the policy: a request must be
 * absolute-form ("GET http://host/path HTTP/1.1") or a CONNECT with an
 * authority; its line ends are CRLF; obsolete line folding, a request with
 * both Content-Length and Transfer-Encoding, differing Content-Lengths and
 * any transfer coding but "chunked" are refused, so the proxy and the
 * origin can never disagree about where one request ends and the next
 * begins (request smuggling past the per-request policy check). The host
 * the proxy checks is the one in the request line; the Host header the
 * origin sees is rewritten to match it. */
#ifndef CODECAGE_SERVICES_EGRESS_HTTP_H
#define CODECAGE_SERVICES_EGRESS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EGRESS_HTTP_HEAD_MAX    (64 * 1024) /* bytes of a request or response head */
#define EGRESS_HTTP_HEADERS_MAX 128
#define EGRESS_HTTP_HOST_MAX    260 /* bytes of the host as written (brackets included) */
#define EGRESS_HTTP_REASON_MAX  160

struct egress_http_header {
        const char *name; /* points into the parsed buffer */
        size_t name_len;
        const char *value; /* leading and trailing blanks removed */
        size_t value_len;
};

enum egress_http_body {
        EGRESS_BODY_NONE,
        EGRESS_BODY_LENGTH,     /* content_length bytes */
        EGRESS_BODY_CHUNKED,    /* egress_chunked_feed finds the end */
        EGRESS_BODY_UNTIL_CLOSE /* responses only: until the server closes */
};

struct egress_http_request {
        bool connect;                        /* CONNECT host:port */
        char method[24];                     /* "GET", "CONNECT", ... */
        char host[EGRESS_HTTP_HOST_MAX + 1]; /* as in the request line, not canonical;
                                               IPv6 without brackets */
        uint16_t port;                       /* from the target; 80 when an http URI has none */
        const char *path;                    /* origin-form target ("/x?y"; "/" when empty);
                                                points into the buffer; not for CONNECT */
        size_t path_len;
        int version_minor; /* HTTP/1.0 or HTTP/1.1 */
        struct egress_http_header headers[EGRESS_HTTP_HEADERS_MAX];
        size_t n_headers;
        enum egress_http_body body; /* NONE, LENGTH or CHUNKED */
        uint64_t content_length;
        bool keep_alive;      /* false: HTTP/1.0 without keep-alive, or Connection: close */
        bool expect_continue; /* Expect: 100-continue */
        size_t head_len;      /* bytes of the head, up to and including the empty line */
};

/* Parses a request head at the start of buf. Returns 1 when a complete,
 * valid head was parsed (*ret filled; headers point into buf), 0 when more
 * bytes are needed (no complete head yet and len < EGRESS_HTTP_HEAD_MAX),
 * -EINVAL for a malformed or refused request, -E2BIG for a head over
 * EGRESS_HTTP_HEAD_MAX, -ENOTSUP for a transfer coding other than chunked
 * or an origin-form request (not a proxy request). On errors reason gets a
 * sentence for the 4xx reply ("the request line is not \"METHOD URI
 * HTTP/1.x\""). Only "http" URIs are accepted in absolute form.
 * Clarified: more than EGRESS_HTTP_HEADERS_MAX header lines is -E2BIG too;
 * a bare LF or CR is refused as soon as it is seen, complete head or not;
 * repeated Content-Lengths are accepted only with equal values; a
 * Transfer-Encoding in an HTTP/1.0 request is refused (-EINVAL). */
int egress_http_parse_request(const char *buf, size_t len, struct egress_http_request *ret,
                              char *reason, size_t reason_len);

struct egress_http_response {
        int status;
        int version_minor;
        enum egress_http_body body; /* from the status, the request's method and the headers */
        uint64_t content_length;
        bool keep_alive; /* false: the connection ends after this response */
        size_t head_len;
};

/* Parses a response head at the start of buf. request_was_head: the
 * response to a HEAD has no body whatever its headers say (so do 1xx, 204
 * and 304). Returns 1, 0 (need more) or -EINVAL / -E2BIG as above.
 * Clarified: lines may end in LF alone, never in CR alone; a reason over
 * EGRESS_HTTP_REASON_MAX is refused; a response with a body and both
 * Content-Length and Transfer-Encoding (or Transfer-Encoding in HTTP/1.0)
 * is -EINVAL, since the head is forwarded unchanged; a bodiless response's
 * framing headers are not judged. keep_alive is false after a 101. */
int egress_http_parse_response(const char *buf, size_t len, bool request_was_head,
                               struct egress_http_response *ret);

/* The request head to send the origin server: "METHOD path HTTP/1.1",
 * then the client's headers except the hop-by-hop ones (Connection and the
 * headers it names, Proxy-Connection, Proxy-Authorization, Keep-Alive,
 * Upgrade, TE, Trailer) and Expect and Host, then "Host: <host[:port]>"
 * from the request line and "Connection: keep-alive" or "close". *ret is
 * malloc'ed (free it). -ENOMEM. Clarified: the client's Content-Length and
 * Transfer-Encoding are dropped too and the parsed framing is written once
 * in canonical form ("Content-Length: N" or "Transfer-Encoding: chunked",
 * between Host and Connection), so a Connection header naming them cannot
 * unframe the body. -EINVAL for a CONNECT request (nothing to forward). */
int egress_http_origin_head(const struct egress_http_request *req, bool keep_alive, char **ret,
                            size_t *ret_len);

/* A streaming parser that finds where a chunked body ends without changing
 * its bytes (chunk sizes, extensions and trailers are bounded). */
struct egress_chunked {
        int state;
        uint64_t remaining; /* data bytes left in the current chunk (in the
                               trailers: trailer bytes so far, at most 64 KiB) */
        size_t line_len;    /* bytes of the current size or trailer line */
};

/* Feeds n bytes that follow what was fed before. Returns how many of them
 * belong to the body (all n unless the body ends inside them) and sets
 * *done once the final CRLF after the trailers was consumed. -EINVAL for
 * malformed framing (a bad size, a size over 2^62, a line over 4 KiB).
 * A zeroed struct starts a body. Line ends must be CRLF. After *done,
 * further calls return 0; after -EINVAL they keep returning -EINVAL. */
ssize_t egress_chunked_feed(struct egress_chunked *c, const char *buf, size_t n, bool *done);

#endif
