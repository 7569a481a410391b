/* HTTP/1.x framing for the egress proxy; the contract is in egress_http.h.
 *
 * Owns: finding the end of a head (CRLF only in requests, bare LF tolerated
 * in responses, bare CR never), the request line and its target (an
 * absolute http URI or a CONNECT authority), header-line syntax, message
 * framing (Content-Length, Transfer-Encoding, Connection), the request head
 * sent to the origin, and the chunked-body state machine.
 *
 * Invariants: every pointer in a parsed struct points into the caller's
 * buffer, before head_len; the output structs are written only on success;
 * the origin head carries exactly one framing header, written here from the
 * parsed framing (never the client's bytes), so no header the client sends
 * or names in Connection can change where the origin thinks a request ends.
 * Nothing here does I/O; only egress_http_origin_head allocates. */
#include "egress_http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/hex.h"

#define CHUNK_LINE_MAX     4096                 /* bytes of a size or trailer line */
#define CHUNK_SIZE_MAX     (UINT64_C(1) << 62)  /* largest chunk accepted */
#define CHUNK_TRAILERS_MAX EGRESS_HTTP_HEAD_MAX /* bytes of all trailer lines */
#define CL_DIGITS_MAX      19                   /* every 19-digit number fits uint64_t */

#define BAD_REQUEST_LINE "the request line is not \"METHOD URI HTTP/1.x\""

static int fail(const char **why, int code, const char *msg)
{
        *why = msg;
        return code;
}

/* --- characters and small strings ----------------------------------------- */

static bool is_digit(unsigned char c)
{
        return c >= '0' && c <= '9';
}

static bool is_alpha(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_blank(unsigned char c)
{
        return c == ' ' || c == '\t';
}

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
        return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Bytes allowed in a field value, a reason phrase, a chunk extension or a
 * trailer: HTAB, SP, VCHAR and obs-text; no other control. */
static bool is_field_char(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* RFC 3986 reg-name characters but pct-encoding: unreserved and sub-delims. */
static bool is_host_char(unsigned char c)
{
        return is_alpha(c) || is_digit(c) || (c && strchr("-._~!$&'()*+,;=", c));
}

static bool is_reg_name(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!is_host_char((unsigned char)s[i]))
                        return false;
        return true;
}

static bool is_token(const char *s, size_t n)
{
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_tchar((unsigned char)s[i]))
                        return false;
        return true;
}

static char lower(char c)
{
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether two byte strings are equal, ignoring ASCII case. */
static bool mem_eq_ci(const char *a, size_t a_len, const char *b, size_t b_len)
{
        if (a_len != b_len)
                return false;
        for (size_t i = 0; i < a_len; i++)
                if (lower(a[i]) != lower(b[i]))
                        return false;
        return true;
}

static bool eq_ci(const char *s, size_t n, const char *lit)
{
        return mem_eq_ci(s, n, lit, strlen(lit));
}

static bool header_is(const struct egress_http_header *h, const char *name)
{
        return eq_ci(h->name, h->name_len, name);
}

/* The next element of a comma-separated list (blanks around it trimmed,
 * empty elements skipped), from *pos on; false at the end of the list. */
static bool next_element(const char *v, size_t n, size_t *pos, const char **ret, size_t *ret_len)
{
        while (*pos < n) {
                size_t start = *pos, end;
                const char *comma = memchr(v + start, ',', n - start);
                end = comma ? (size_t)(comma - v) : n;
                *pos = comma ? end + 1 : n;
                while (start < end && is_blank((unsigned char)v[start]))
                        start++;
                while (end > start && is_blank((unsigned char)v[end - 1]))
                        end--;
                if (end > start) {
                        *ret = v + start;
                        *ret_len = end - start;
                        return true;
                }
        }
        return false;
}

/* Digits only, at most CL_DIGITS_MAX of them. */
static bool parse_decimal(const char *s, size_t n, uint64_t *ret)
{
        uint64_t v = 0;

        if (n == 0 || n > CL_DIGITS_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                if (!is_digit((unsigned char)s[i]))
                        return false;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        *ret = v;
        return true;
}

/* --- the head and its lines ----------------------------------------------- */

/* Finds the end of the head at the start of buf: returns 1 with *ret_len
 * through the empty line, 0 when more bytes are needed. A CR not followed
 * by LF is refused at once, and so is a LF without CR when strict: waiting
 * for a CRLFCRLF that a bare-LF client never sends would only stall it. */
static int find_head_end(const char *buf, size_t len, bool strict, size_t *ret_len,
                         const char **why)
{
        size_t window = len < EGRESS_HTTP_HEAD_MAX ? len : EGRESS_HTTP_HEAD_MAX;
        size_t line_start = 0;

        for (size_t i = 0; i < window; i++) {
                if (buf[i] == '\r') {
                        if (i + 1 < len && buf[i + 1] != '\n')
                                return fail(why, -EINVAL, "a line ends in a bare CR");
                        continue;
                }
                if (buf[i] != '\n')
                        continue;
                bool crlf = i > 0 && buf[i - 1] == '\r';
                if (strict && !crlf)
                        return fail(why, -EINVAL, "a line ends in a bare LF, not CRLF");
                if (i - line_start == (crlf ? 1u : 0u)) {
                        *ret_len = i + 1;
                        return 1;
                }
                line_start = i + 1;
        }
        if (len >= EGRESS_HTTP_HEAD_MAX)
                return fail(why, -E2BIG, "the head is larger than 64 KiB");
        return 0;
}

struct cursor {
        const char *buf;
        size_t pos, end; /* end: the head's length; the head ends in LF */
};

/* The next line of the head without its line end; false for the empty
 * line that ends the head. */
static bool next_line(struct cursor *c, const char **ret, size_t *ret_len)
{
        const char *p = c->buf + c->pos;
        const char *nl = memchr(p, '\n', c->end - c->pos);
        size_t n = (size_t)(nl - p);

        c->pos += n + 1;
        if (n > 0 && p[n - 1] == '\r')
                n--;
        *ret = p;
        *ret_len = n;
        return n > 0;
}

static int parse_header(const char *line, size_t n, struct egress_http_header *h, const char **why)
{
        if (is_blank((unsigned char)line[0]))
                return fail(why, -EINVAL,
                            "obsolete line folding (a header line starting "
                            "with a space or tab) is refused");
        const char *colon = memchr(line, ':', n);
        if (!colon)
                return fail(why, -EINVAL, "a header line is not \"Name: value\"");
        size_t name_len = (size_t)(colon - line);
        if (name_len > 0 && is_blank((unsigned char)line[name_len - 1]))
                return fail(why, -EINVAL,
                            "whitespace between a header name and its colon "
                            "is refused");
        if (!is_token(line, name_len))
                return fail(why, -EINVAL, "a header name is not a token");

        const char *v = colon + 1, *e = line + n;
        while (v < e && is_blank((unsigned char)*v))
                v++;
        while (e > v && is_blank((unsigned char)e[-1]))
                e--;
        for (const char *p = v; p < e; p++)
                if (!is_field_char((unsigned char)*p))
                        return fail(why, -EINVAL, "a header value holds a control character");
        *h = (struct egress_http_header){
                .name = line, .name_len = name_len, .value = v, .value_len = (size_t)(e - v)};
        return 0;
}

/* Parses the header lines up to the empty line that ends the head. */
static int parse_headers(struct cursor *c, struct egress_http_header *hs, size_t *ret_n,
                         const char **why)
{
        const char *line;
        size_t len, n = 0;

        while (next_line(c, &line, &len)) {
                if (n == EGRESS_HTTP_HEADERS_MAX)
                        return fail(why, -E2BIG, "the head has more than 128 header lines");
                int r = parse_header(line, len, &hs[n], why);
                if (r < 0)
                        return r;
                n++;
        }
        *ret_n = n;
        return 0;
}

/* --- framing --------------------------------------------------------------- */

/* What the headers say about framing and the connection. Nothing is
 * refused here: requests and responses judge these facts differently. */
struct framing {
        bool has_cl, cl_bad; /* cl_bad: not digits, or Content-Lengths that differ */
        uint64_t cl;
        size_t n_te;                      /* Transfer-Encoding header lines */
        bool te_only_chunked;             /* the last one is exactly "chunked" */
        bool te_last_chunked;             /* the last coding of the last one is chunked */
        bool close, keep_alive, conn_bad; /* Connection tokens; conn_bad: not a token */
        bool expect_continue;
};

static void note_content_length(const struct egress_http_header *h, struct framing *f)
{
        uint64_t v;

        if (!parse_decimal(h->value, h->value_len, &v))
                f->cl_bad = true;
        else if (f->has_cl && v != f->cl)
                f->cl_bad = true;
        f->has_cl = true;
        f->cl = v;
}

static void note_transfer_encoding(const struct egress_http_header *h, struct framing *f)
{
        const char *e, *last = NULL;
        size_t pos = 0, n, last_len = 0;

        f->n_te++;
        f->te_only_chunked = eq_ci(h->value, h->value_len, "chunked");
        while (next_element(h->value, h->value_len, &pos, &e, &n))
                last = e, last_len = n;
        f->te_last_chunked = last && eq_ci(last, last_len, "chunked");
}

static void note_connection(const struct egress_http_header *h, struct framing *f)
{
        const char *e;
        size_t pos = 0, n;

        while (next_element(h->value, h->value_len, &pos, &e, &n)) {
                if (!is_token(e, n))
                        f->conn_bad = true;
                else if (eq_ci(e, n, "close"))
                        f->close = true;
                else if (eq_ci(e, n, "keep-alive"))
                        f->keep_alive = true;
        }
}

static void scan_framing(const struct egress_http_header *hs, size_t n, struct framing *ret)
{
        struct framing f = {};

        for (size_t i = 0; i < n; i++) {
                const struct egress_http_header *h = &hs[i];
                if (header_is(h, "Content-Length"))
                        note_content_length(h, &f);
                else if (header_is(h, "Transfer-Encoding"))
                        note_transfer_encoding(h, &f);
                else if (header_is(h, "Connection"))
                        note_connection(h, &f);
                else if (header_is(h, "Expect"))
                        f.expect_continue = eq_ci(h->value, h->value_len, "100-continue");
        }
        *ret = f;
}

/* HTTP/1.1 keeps the connection unless told "close"; HTTP/1.0 closes it
 * unless told "keep-alive". */
static bool keeps_alive(const struct framing *f, int version_minor)
{
        if (f->close)
                return false;
        return version_minor >= 1 || f->keep_alive;
}

/* --- request line and target ----------------------------------------------- */

static int parse_port(const char *s, size_t n, uint16_t *ret, const char **why)
{
        unsigned v = 0;

        if (n == 0 || n > 5)
                return fail(why, -EINVAL, "the port is not a number from 1 to 65535");
        for (size_t i = 0; i < n; i++) {
                if (!is_digit((unsigned char)s[i]))
                        return fail(why, -EINVAL, "the port is not a number from 1 to 65535");
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return fail(why, -EINVAL, "the port is not a number from 1 to 65535");
        *ret = (uint16_t)v;
        return 0;
}

/* "[v6]" at the start of a: the address between the brackets; *ret_end
 * just after "]". A colon is required, so a stored host holds a colon
 * exactly when it was an IPv6 literal. */
static int parse_ip_literal(const char *a, size_t n, const char **ret_host, size_t *ret_len,
                            size_t *ret_end, const char **why)
{
        const char *close = memchr(a, ']', n);

        if (!close)
                return fail(why, -EINVAL, "an IPv6 address in the URI lacks its \"]\"");
        size_t len = (size_t)(close - a) - 1;
        if (!memchr(a + 1, ':', len))
                return fail(why, -EINVAL, "the host in brackets is not an IPv6 address");
        for (size_t i = 1; i <= len; i++)
                if (hex_digit_value((unsigned char)a[i]) < 0 && a[i] != ':' && a[i] != '.')
                        return fail(why, -EINVAL, "the host in brackets is not an IPv6 address");
        *ret_host = a + 1;
        *ret_len = len;
        *ret_end = len + 2;
        return 0;
}

/* host[:port] (port_required for CONNECT); fills host and port. */
static int parse_authority(const char *a, size_t n, bool port_required,
                           struct egress_http_request *r, const char **why)
{
        const char *host = a;
        size_t host_len, end;

        if (memchr(a, '@', n))
                return fail(why, -EINVAL, "user information (\"user@\") in the URI is refused");
        if (n > 0 && a[0] == '[') {
                int k = parse_ip_literal(a, n, &host, &host_len, &end, why);
                if (k < 0)
                        return k;
        } else {
                const char *colon = memchr(a, ':', n);
                host_len = end = colon ? (size_t)(colon - a) : n;
                if (!is_reg_name(a, host_len))
                        return fail(why, -EINVAL, "the host holds a character not allowed there");
        }
        if (host_len == 0)
                return fail(why, -EINVAL, "the URI has no host");
        if (end > EGRESS_HTTP_HOST_MAX)
                return fail(why, -EINVAL, "the host is longer than 260 bytes");
        if (end == n) {
                if (port_required)
                        return fail(why, -EINVAL, "a CONNECT target is not \"host:port\"");
                r->port = 80;
        } else if (a[end] != ':') {
                return fail(why, -EINVAL, "the host is followed by neither \":port\" nor a path");
        } else {
                int k = parse_port(a + end + 1, n - end - 1, &r->port, why);
                if (k < 0)
                        return k;
        }
        memcpy(r->host, host, host_len);
        r->host[host_len] = '\0';
        return 0;
}

/* The length of a URI scheme at the start of t, followed by "://"; 0 when
 * there is none. */
static size_t scheme_len(const char *t, size_t n)
{
        size_t i = 0;

        if (n == 0 || !is_alpha((unsigned char)t[0]))
                return 0;
        while (i < n && (is_alpha((unsigned char)t[i]) || is_digit((unsigned char)t[i]) ||
                         t[i] == '+' || t[i] == '-' || t[i] == '.'))
                i++;
        if (n - i < 3 || memcmp(t + i, "://", 3) != 0)
                return 0;
        return i;
}

/* "http://authority[/path[?query]]": host, port and the origin-form path. */
static int parse_absolute(const char *t, size_t n, struct egress_http_request *r, const char **why)
{
        if (t[0] == '/' || (n == 1 && t[0] == '*'))
                return fail(why, -ENOTSUP,
                            "not a proxy request: the request target must be an "
                            "absolute URI (\"GET http://host/path HTTP/1.1\")");
        if (memchr(t, '#', n))
                return fail(why, -EINVAL, "a fragment (\"#\") in the request target is refused");
        size_t s = scheme_len(t, n);
        if (s == 0)
                return fail(why, -EINVAL, "the request target is not an absolute http URI");
        if (eq_ci(t, s, "https"))
                return fail(why, -ENOTSUP,
                            "https URIs are not proxied as plain requests: use "
                            "CONNECT (an https proxy tunnel) for https");
        if (!eq_ci(t, s, "http"))
                return fail(why, -ENOTSUP, "only http URIs are proxied (use CONNECT for others)");

        const char *a = t + s + 3, *e = t + n, *p = a;
        while (p < e && *p != '/' && *p != '?')
                p++;
        if (p < e && *p == '?')
                return fail(why, -EINVAL, "the URI has a query but no path");
        int k = parse_authority(a, (size_t)(p - a), false, r, why);
        if (k < 0)
                return k;
        if (p == e) {
                /* An empty path is "/": the second slash of "://" stands
                 * for it, so that path still points into the buffer. */
                r->path = t + s + 2;
                r->path_len = 1;
        } else {
                r->path = p;
                r->path_len = (size_t)(e - p);
        }
        return 0;
}

static int parse_request_line(const char *line, size_t n, struct egress_http_request *r,
                              const char **why)
{
        const char *end = line + n;
        const char *sp1 = memchr(line, ' ', n);
        if (!sp1)
                return fail(why, -EINVAL, BAD_REQUEST_LINE);
        const char *target = sp1 + 1;
        const char *sp2 = memchr(target, ' ', (size_t)(end - target));
        if (!sp2)
                return fail(why, -EINVAL, BAD_REQUEST_LINE);
        size_t m_len = (size_t)(sp1 - line), t_len = (size_t)(sp2 - target);
        const char *v = sp2 + 1;
        if (!is_token(line, m_len) || t_len == 0 || end - v != 8 || memcmp(v, "HTTP/1.", 7) != 0 ||
            (v[7] != '0' && v[7] != '1'))
                return fail(why, -EINVAL, BAD_REQUEST_LINE);
        if (m_len >= sizeof(r->method))
                return fail(why, -EINVAL, "the method is longer than 23 bytes");
        for (size_t i = 0; i < t_len; i++)
                if ((unsigned char)target[i] <= 0x20 || (unsigned char)target[i] >= 0x7f)
                        return fail(why, -EINVAL,
                                    "the request target holds a byte that is not "
                                    "printable ASCII");

        memcpy(r->method, line, m_len);
        r->method[m_len] = '\0';
        r->version_minor = v[7] - '0';
        r->connect = strcmp(r->method, "CONNECT") == 0;
        if (r->connect)
                return parse_authority(target, t_len, true, r, why);
        return parse_absolute(target, t_len, r, why);
}

static int refuse_request_framing(const struct framing *f, int version_minor, const char **why)
{
        if (f->conn_bad)
                return fail(why, -EINVAL, "the Connection header is not a list of tokens");
        if (f->cl_bad)
                return fail(why, -EINVAL, "Content-Length is not a number, or differs");
        if (f->has_cl && f->n_te > 0)
                return fail(why, -EINVAL, "both Content-Length and Transfer-Encoding: refused");
        if (f->n_te > 0 && version_minor == 0)
                return fail(why, -EINVAL, "Transfer-Encoding in an HTTP/1.0 request is refused");
        if (f->n_te > 1 || (f->n_te == 1 && !f->te_only_chunked))
                return fail(why, -ENOTSUP,
                            "the only transfer coding supported is one "
                            "\"Transfer-Encoding: chunked\"");
        return 0;
}

/* Refuses every framing the proxy and an origin could read differently. */
static int request_framing(struct egress_http_request *r, const char **why)
{
        struct framing f;

        scan_framing(r->headers, r->n_headers, &f);
        int k = refuse_request_framing(&f, r->version_minor, why);
        if (k < 0)
                return k;
        /* After a CONNECT head come the tunnel's bytes, never a body. */
        r->body = EGRESS_BODY_NONE;
        r->content_length = 0;
        if (!r->connect && f.n_te > 0) {
                r->body = EGRESS_BODY_CHUNKED;
        } else if (!r->connect && f.has_cl) {
                r->body = EGRESS_BODY_LENGTH;
                r->content_length = f.cl;
        }
        r->keep_alive = keeps_alive(&f, r->version_minor);
        r->expect_continue = f.expect_continue;
        return 0;
}

static int parse_request(const char *buf, size_t len, struct egress_http_request *ret,
                         const char **why)
{
        struct egress_http_request r = {};
        struct cursor c = {.buf = buf};
        const char *line;
        size_t n;

        int k = find_head_end(buf, len, true, &c.end, why);
        if (k <= 0)
                return k;
        if (!next_line(&c, &line, &n))
                return fail(why, -EINVAL, BAD_REQUEST_LINE);
        k = parse_request_line(line, n, &r, why);
        if (k < 0)
                return k;
        k = parse_headers(&c, r.headers, &r.n_headers, why);
        if (k < 0)
                return k;
        k = request_framing(&r, why);
        if (k < 0)
                return k;
        r.head_len = c.end;
        *ret = r;
        return 1;
}

int egress_http_parse_request(const char *buf, size_t len, struct egress_http_request *ret,
                              char *reason, size_t reason_len)
{
        const char *why = "the request is malformed";
        int r = parse_request(buf, len, ret, &why);

        if (r < 0 && reason && reason_len > 0)
                snprintf(reason, reason_len, "%s", why);
        return r;
}

/* --- responses ------------------------------------------------------------- */

/* "HTTP/1.x SP 3DIGIT [SP reason]". */
static int parse_status_line(const char *line, size_t n, struct egress_http_response *r)
{
        if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || !is_digit((unsigned char)line[7]) ||
            line[8] != ' ')
                return -EINVAL;
        int status = 0;
        for (size_t i = 9; i < 12; i++) {
                if (!is_digit((unsigned char)line[i]))
                        return -EINVAL;
                status = status * 10 + (line[i] - '0');
        }
        if (status < 100 || status > 599)
                return -EINVAL;
        if (n > 12 && (line[12] != ' ' || n - 13 > EGRESS_HTTP_REASON_MAX))
                return -EINVAL;
        for (size_t i = 13; i < n; i++)
                if (!is_field_char((unsigned char)line[i]))
                        return -EINVAL;
        r->status = status;
        r->version_minor = line[7] - '0';
        return 0;
}

/* The body's framing: none for HEAD, 1xx, 204 and 304 (their framing
 * headers describe another message and are not judged); otherwise chunked
 * when it is the final coding, else the Content-Length, else until close.
 * Both headers together, or Transfer-Encoding in HTTP/1.0, are refused:
 * the proxy forwards the head unchanged and cannot drop the stale one. */
static int response_framing(struct egress_http_response *r, const struct framing *f,
                            bool request_was_head)
{
        int s = r->status;

        r->body = EGRESS_BODY_NONE;
        r->content_length = 0;
        if (request_was_head || s < 200 || s == 204 || s == 304)
                return 0;
        if (f->cl_bad || (f->has_cl && f->n_te > 0) || (f->n_te > 0 && r->version_minor == 0))
                return -EINVAL;
        if (f->n_te > 0)
                r->body = f->te_last_chunked ? EGRESS_BODY_CHUNKED : EGRESS_BODY_UNTIL_CLOSE;
        else if (f->has_cl)
                r->body = EGRESS_BODY_LENGTH;
        else
                r->body = EGRESS_BODY_UNTIL_CLOSE;
        if (r->body == EGRESS_BODY_LENGTH)
                r->content_length = f->cl;
        return 0;
}

int egress_http_parse_response(const char *buf, size_t len, bool request_was_head,
                               struct egress_http_response *ret)
{
        struct egress_http_response r = {};
        struct egress_http_header hs[EGRESS_HTTP_HEADERS_MAX];
        struct cursor c = {.buf = buf};
        struct framing f;
        const char *line, *why;
        size_t n, n_headers;

        int k = find_head_end(buf, len, false, &c.end, &why);
        if (k <= 0)
                return k;
        if (!next_line(&c, &line, &n) || parse_status_line(line, n, &r) < 0)
                return -EINVAL;
        k = parse_headers(&c, hs, &n_headers, &why);
        if (k < 0)
                return k;
        scan_framing(hs, n_headers, &f);
        k = response_framing(&r, &f, request_was_head);
        if (k < 0)
                return k;
        /* After a 101 the connection speaks another protocol. */
        r.keep_alive = keeps_alive(&f, r.version_minor) && r.body != EGRESS_BODY_UNTIL_CLOSE &&
                       r.status != 101;
        r.head_len = c.end;
        *ret = r;
        return 1;
}

/* --- the head for the origin ----------------------------------------------- */

/* Writes into buf when it is set, else only counts. */
struct out {
        char *buf;
        size_t len;
};

static void put(struct out *o, const char *s, size_t n)
{
        if (o->buf)
                memcpy(o->buf + o->len, s, n);
        o->len += n;
}

static void put_str(struct out *o, const char *s)
{
        put(o, s, strlen(s));
}

/* Whether a Connection header of req lists the header name. */
static bool named_by_connection(const struct egress_http_request *req, const char *name,
                                size_t name_len)
{
        for (size_t i = 0; i < req->n_headers; i++) {
                const struct egress_http_header *h = &req->headers[i];
                const char *e;
                size_t pos = 0, n;
                if (!header_is(h, "Connection"))
                        continue;
                while (next_element(h->value, h->value_len, &pos, &e, &n))
                        if (mem_eq_ci(e, n, name, name_len))
                                return true;
        }
        return false;
}

/* Hop-by-hop headers, those this proxy answers itself (Expect) and those
 * it writes itself (Host and the framing header). */
static bool forwarded(const struct egress_http_request *req, const struct egress_http_header *h)
{
        static const char *const dropped[] = {
                "Connection",
                "Proxy-Connection",
                "Proxy-Authorization",
                "Keep-Alive",
                "Upgrade",
                "TE",
                "Trailer",
                "Expect",
                "Host",
                "Content-Length",
                "Transfer-Encoding",
        };

        for (size_t i = 0; i < ELEMENTSOF(dropped); i++)
                if (header_is(h, dropped[i]))
                        return false;
        return !named_by_connection(req, h->name, h->name_len);
}

static void write_host(const struct egress_http_request *req, struct out *o)
{
        bool v6 = strchr(req->host, ':') != NULL;
        char port[8];

        put_str(o, "Host: ");
        put_str(o, v6 ? "[" : "");
        put_str(o, req->host);
        put_str(o, v6 ? "]" : "");
        if (req->port != 80) {
                snprintf(port, sizeof(port), ":%u", (unsigned)req->port);
                put_str(o, port);
        }
        put_str(o, "\r\n");
}

static void write_framing(const struct egress_http_request *req, struct out *o)
{
        char n[32];

        if (req->body == EGRESS_BODY_CHUNKED) {
                put_str(o, "Transfer-Encoding: chunked\r\n");
        } else if (req->body == EGRESS_BODY_LENGTH) {
                snprintf(n, sizeof(n), "Content-Length: %" PRIu64 "\r\n", req->content_length);
                put_str(o, n);
        }
}

static void write_origin_head(const struct egress_http_request *req, bool keep_alive, struct out *o)
{
        put_str(o, req->method);
        put_str(o, " ");
        put(o, req->path, req->path_len);
        put_str(o, " HTTP/1.1\r\n");
        for (size_t i = 0; i < req->n_headers; i++) {
                const struct egress_http_header *h = &req->headers[i];
                if (!forwarded(req, h))
                        continue;
                put(o, h->name, h->name_len);
                put_str(o, ": ");
                put(o, h->value, h->value_len);
                put_str(o, "\r\n");
        }
        write_host(req, o);
        write_framing(req, o);
        put_str(o, keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
}

int egress_http_origin_head(const struct egress_http_request *req, bool keep_alive, char **ret,
                            size_t *ret_len)
{
        struct out o = {};

        if (req->connect || !req->path)
                return -EINVAL;
        write_origin_head(req, keep_alive, &o);
        _cleanup_free_ char *buf = malloc(o.len + 1);
        if (!buf)
                return -ENOMEM;
        o = (struct out){.buf = buf};
        write_origin_head(req, keep_alive, &o);
        buf[o.len] = '\0';
        *ret = TAKE_PTR(buf);
        *ret_len = o.len;
        return 0;
}

/* --- chunked bodies -------------------------------------------------------- */

enum {
        CH_SIZE_START, /* the first hex digit of a chunk size (the zero state) */
        CH_SIZE,       /* more hex digits, ";" or CR */
        CH_EXT,        /* a chunk extension, up to CR */
        CH_SIZE_LF,    /* the LF ending a size line */
        CH_DATA,       /* remaining bytes of chunk data */
        CH_DATA_CR,    /* the CRLF after chunk data */
        CH_DATA_LF,
        CH_TRAILER_START, /* a trailer line, or CR of the final empty line */
        CH_TRAILER,       /* inside a trailer line, up to CR */
        CH_TRAILER_LF,
        CH_FINAL_LF,
        CH_DONE,
        CH_ERROR,
};

/* Counts one byte of the current line; false when the line is too long. */
static bool line_byte(struct egress_chunked *c)
{
        return ++c->line_len <= CHUNK_LINE_MAX;
}

static int size_byte(struct egress_chunked *c, unsigned char b)
{
        int d = hex_digit_value(b);

        if (d >= 0) {
                if (c->remaining > (CHUNK_SIZE_MAX - (uint64_t)d) >> 4)
                        return CH_ERROR;
                c->remaining = c->remaining << 4 | (uint64_t)d;
                return line_byte(c) ? CH_SIZE : CH_ERROR;
        }
        if (c->state == CH_SIZE_START)
                return CH_ERROR;
        if (b == ';')
                return line_byte(c) ? CH_EXT : CH_ERROR;
        return b == '\r' ? CH_SIZE_LF : CH_ERROR;
}

static int ext_byte(struct egress_chunked *c, unsigned char b)
{
        if (b == '\r')
                return CH_SIZE_LF;
        return is_field_char(b) && line_byte(c) ? CH_EXT : CH_ERROR;
}

/* Trailer lines are bounded one by one and together; remaining counts
 * their bytes (no chunk data is left once trailers begin). */
static int trailer_byte(struct egress_chunked *c, unsigned char b)
{
        if (b == '\r')
                return c->state == CH_TRAILER_START ? CH_FINAL_LF : CH_TRAILER_LF;
        if (c->state == CH_TRAILER_START && is_blank(b))
                return CH_ERROR; /* obsolete line folding */
        if (!is_field_char(b) || !line_byte(c) || ++c->remaining > CHUNK_TRAILERS_MAX)
                return CH_ERROR;
        return CH_TRAILER;
}

/* The state after one framing byte (chunk data is taken in bulk). */
static int chunk_step(struct egress_chunked *c, unsigned char b)
{
        switch (c->state) {
        case CH_SIZE_START:
        case CH_SIZE:
                return size_byte(c, b);
        case CH_EXT:
                return ext_byte(c, b);
        case CH_SIZE_LF:
                if (b != '\n')
                        return CH_ERROR;
                c->line_len = 0;
                return c->remaining > 0 ? CH_DATA : CH_TRAILER_START;
        case CH_DATA_CR:
                return b == '\r' ? CH_DATA_LF : CH_ERROR;
        case CH_DATA_LF:
                return b == '\n' ? CH_SIZE_START : CH_ERROR;
        case CH_TRAILER_START:
        case CH_TRAILER:
                return trailer_byte(c, b);
        case CH_TRAILER_LF:
                c->line_len = 0;
                return b == '\n' ? CH_TRAILER_START : CH_ERROR;
        case CH_FINAL_LF:
                return b == '\n' ? CH_DONE : CH_ERROR;
        default:
                return CH_ERROR;
        }
}

ssize_t egress_chunked_feed(struct egress_chunked *c, const char *buf, size_t n, bool *done)
{
        size_t i = 0;

        while (i < n && c->state != CH_DONE && c->state != CH_ERROR) {
                if (c->state == CH_DATA) {
                        size_t k = c->remaining < n - i ? (size_t)c->remaining : n - i;
                        i += k;
                        c->remaining -= k;
                        if (c->remaining == 0)
                                c->state = CH_DATA_CR;
                        continue;
                }
                c->state = chunk_step(c, (unsigned char)buf[i++]);
        }
        if (c->state == CH_ERROR)
                return -EINVAL;
        *done = c->state == CH_DONE;
        return (ssize_t)i;
}
