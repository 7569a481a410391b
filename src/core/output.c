/* Output capture and text sanitising; see output.h.
 *
 * This file owns how a stream's bytes are kept (a head that grows as data
 * arrives up to cap/2, then a tail ring of at most cap - cap/2 bytes that is
 * allocated only once the head is full and grows until it wraps), how the
 * cut between them is placed on UTF-8 character boundaries, the marker line,
 * and the byte-level sanitiser shared by the whole-buffer and streaming
 * paths.
 *
 * Sanitising follows the Unicode "maximal subpart" practice (as WHATWG's
 * decoder does): each maximal prefix of a well-formed sequence that cannot
 * be completed becomes one U+FFFD, and each other ill-formed byte becomes one
 * U+FFFD. Every input byte thus produces at most 3 output bytes, which is
 * what the buffer sizes below rely on. Printable ASCII is copied in runs
 * found a word at a time; only control bytes and non-ASCII take the slow
 * path.
 *
 * Errors are -ENOMEM only. A failed feed stores and counts nothing; a failed
 * finish leaves the capture as it was, so it can be retried or freed. */
#include "core/output.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROW_MIN   256
#define MARKER_MAX 64

enum {
        SEQ_OK,    /* a well-formed sequence */
        SEQ_BAD,   /* an ill-formed maximal subpart */
        SEQ_SHORT, /* a well-formed prefix cut by the end of the input */
};

static const unsigned char replacement[3] = {0xef, 0xbf, 0xbd}; /* U+FFFD */

/* Bytes copied unchanged: printable ASCII, \t, \n, \r. */
static const bool safe_byte[256] = {
        ['\t'] = true,
        ['\n'] = true,
        ['\r'] = true,
        [0x20 ... 0x7e] = true,
};

static size_t min_size(size_t a, size_t b)
{
        return a < b ? a : b;
}

static size_t clamp_size(uint64_t v)
{
#if UINT64_MAX > SIZE_MAX
        if (v > SIZE_MAX)
                return SIZE_MAX;
#endif
        return (size_t)v;
}

/* --- sanitiser ------------------------------------------------------------ */

static uint64_t load64(const unsigned char *p)
{
        uint64_t w;
        memcpy(&w, p, sizeof(w));
        return w;
}

/* True when none of the 8 bytes is >= 0x80, < 0x20 or 0x7f. */
static bool word_is_plain(uint64_t w)
{
        const uint64_t ones = UINT64_C(0x0101010101010101);
        const uint64_t highs = UINT64_C(0x8080808080808080);
        uint64_t del = w ^ (ones * 0x7f);

        if (w & highs)
                return false;
        if ((w - ones * 0x20) & ~w & highs) /* some byte < 0x20 */
                return false;
        return !((del - ones) & ~del & highs); /* no byte == 0x7f */
}

/* Length of the prefix of p made of bytes that are copied unchanged. */
static size_t safe_run(const unsigned char *p, size_t len)
{
        size_t i = 0;

        for (;;) {
                while (len - i >= 8 && word_is_plain(load64(p + i)))
                        i += 8;
                size_t end = min_size(len, i + 8);
                while (i < end && safe_byte[p[i]])
                        i++;
                if (i < end || i == len)
                        return i;
        }
}

/* Classifies the sequence at p (avail >= 1 bytes); *ret_n is its length, the
 * length of its maximal subpart, or avail when it is cut short. */
static int utf8_scan(const unsigned char *p, size_t avail, size_t *ret_n)
{
        unsigned char b = p[0], lo = 0x80, hi = 0xbf;
        size_t need;

        if (b < 0x80) {
                *ret_n = 1;
                return SEQ_OK;
        } else if (b >= 0xc2 && b <= 0xdf) {
                need = 2;
        } else if (b >= 0xe0 && b <= 0xef) {
                need = 3;
                lo = b == 0xe0 ? 0xa0 : 0x80; /* overlong */
                hi = b == 0xed ? 0x9f : 0xbf; /* surrogates */
        } else if (b >= 0xf0 && b <= 0xf4) {
                need = 4;
                lo = b == 0xf0 ? 0x90 : 0x80; /* overlong */
                hi = b == 0xf4 ? 0x8f : 0xbf; /* > U+10FFFF */
        } else {
                *ret_n = 1;
                return SEQ_BAD;
        }

        for (size_t k = 1; k < need; k++) {
                if (k == avail) {
                        *ret_n = k;
                        return SEQ_SHORT;
                }
                if (p[k] < lo || p[k] > hi) {
                        *ret_n = k;
                        return SEQ_BAD;
                }
                lo = 0x80;
                hi = 0xbf;
        }
        *ret_n = need;
        return SEQ_OK;
}

static size_t put_replacement(unsigned char *out)
{
        memcpy(out, replacement, sizeof(replacement));
        return sizeof(replacement);
}

/* An ASCII byte that is not copied: C0 -> U+2400 + c, DEL -> U+2421. */
static size_t put_control(unsigned char *out, unsigned char b)
{
        if (safe_byte[b]) {
                out[0] = b;
                return 1;
        }
        out[0] = 0xe2;
        out[1] = 0x90;
        out[2] = b == 0x7f ? 0xa1 : (unsigned char)(0x80 + b);
        return 3;
}

/* A well-formed sequence of n bytes; C1 controls (C2 80..C2 9F) -> U+FFFD. */
static size_t put_char(unsigned char *out, const unsigned char *p, size_t n)
{
        if (n == 1)
                return put_control(out, p[0]);
        if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
                return put_replacement(out);
        memcpy(out, p, n);
        return n;
}

static size_t put_scanned(unsigned char *out, int r, const unsigned char *p, size_t n)
{
        return r == SEQ_OK ? put_char(out, p, n) : put_replacement(out);
}

/* Sanitises p into out up to the end or up to a sequence cut short by the
 * end; *ret_used is how far it got. Returns bytes written. */
static size_t sanitize_core(const unsigned char *p, size_t len, unsigned char *out,
                            size_t *ret_used)
{
        size_t i = 0, o = 0;

        while (i < len) {
                size_t run = safe_run(p + i, len - i), n;

                memcpy(out + o, p + i, run);
                i += run;
                o += run;
                if (i == len)
                        break;

                int r = utf8_scan(p + i, len - i, &n);
                if (r == SEQ_SHORT)
                        break;
                o += put_scanned(out + o, r, p + i, n);
                i += n;
        }
        *ret_used = i;
        return o;
}

/* Completes the pending sequence with bytes from p, if it can be decided.
 * Returns bytes written; *ret_used is how many bytes of p it took. */
static size_t resolve_pending(struct text_sanitizer *s, const unsigned char *p, size_t len,
                              unsigned char *out, size_t *ret_used)
{
        unsigned char buf[4];
        size_t np = s->n_pending, take = min_size(len, sizeof(buf) - np), n;

        memcpy(buf, s->pending, np);
        memcpy(buf + np, p, take);
        int r = utf8_scan(buf, np + take, &n);
        if (r == SEQ_SHORT) {
                memcpy(s->pending + np, p, take);
                s->n_pending = np + take;
                *ret_used = take;
                return 0;
        }
        /* The pending bytes were a well-formed prefix, so n >= np. */
        s->n_pending = 0;
        *ret_used = n - np;
        return put_scanned(out, r, buf, n);
}

size_t text_sanitizer_feed(struct text_sanitizer *s, const void *in, size_t len, char *out,
                           bool flush)
{
        const unsigned char *p = in;
        unsigned char *o = (unsigned char *)out;
        size_t w = 0, used;

        if (s->n_pending > 0 && len > 0) {
                w += resolve_pending(s, p, len, o, &used);
                p += used;
                len -= used;
        }
        if (s->n_pending == 0 && len > 0) {
                w += sanitize_core(p, len, o + w, &used);
                if (used < len) {
                        memcpy(s->pending, p + used, len - used);
                        s->n_pending = len - used;
                }
        }
        if (flush && s->n_pending > 0) {
                w += put_replacement(o + w);
                s->n_pending = 0;
        }
        return w;
}

/* Shrinks a buffer sized for the worst case when that wasted a lot. */
static char *shrink(char *buf, size_t alloc, size_t used)
{
        if (alloc - used < 4096)
                return buf;
        char *p = realloc(buf, used);
        return p ? p : buf;
}

int cage_sanitize_text(const void *in, size_t len, char **ret, size_t *ret_len)
{
        struct text_sanitizer s = {};

        if (len > SIZE_MAX / 3 - 16)
                return -ENOMEM;
        size_t alloc = 3 * (len + 4) + 1;
        char *buf = malloc(alloc);
        if (!buf)
                return -ENOMEM;
        size_t n = text_sanitizer_feed(&s, in, len, buf, true);
        buf[n] = '\0';
        *ret = shrink(buf, alloc, n + 1);
        if (ret_len)
                *ret_len = n;
        return 0;
}

/* --- capture -------------------------------------------------------------- */

static size_t head_max(const struct output_capture *c)
{
        return clamp_size(c->cap / 2);
}

static size_t tail_max(const struct output_capture *c)
{
        return clamp_size(c->cap - c->cap / 2);
}

/* Grows *buf to hold need bytes (need <= limit): doubling, never past limit. */
static int grow(char **buf, size_t *cap, size_t need, size_t limit)
{
        if (need <= *cap)
                return 0;
        size_t n = *cap > limit / 2 ? limit : *cap * 2;
        if (n < need)
                n = need;
        if (n < GROW_MIN)
                n = GROW_MIN;
        if (n > limit)
                n = limit;
        char *p = realloc(*buf, n);
        if (!p)
                return -ENOMEM;
        *buf = p;
        *cap = n;
        return 0;
}

/* Makes room for n more tail bytes. Until the ring reaches its full size its
 * data is linear from offset 0, so growing keeps it in place. */
static int tail_reserve(struct output_capture *c, size_t n)
{
        size_t limit = tail_max(c);

        if (c->tail_len + n <= c->tail_cap || c->tail_cap == limit)
                return 0;
        size_t need = n > limit - c->tail_len ? limit : c->tail_len + n;
        int r = grow(&c->tail, &c->tail_cap, need, limit);
        if (r < 0)
                return r;
        c->tail_pos = c->tail_len;
        return 0;
}

/* Writes n <= tail_cap bytes into the ring, overwriting the oldest. */
static void tail_write(struct output_capture *c, const char *p, size_t n)
{
        if (n == 0)
                return;
        size_t first = min_size(n, c->tail_cap - c->tail_pos);
        memcpy(c->tail + c->tail_pos, p, first);
        memcpy(c->tail, p + first, n - first);
        c->tail_pos = (c->tail_pos + n) % c->tail_cap;
        c->tail_len = min_size(c->tail_len + n, c->tail_cap);
}

int output_capture_init(struct output_capture *c, uint64_t cap)
{
        *c = (struct output_capture){.cap = cap};
        return 0;
}

int output_capture_feed(struct output_capture *c, const void *buf, size_t len)
{
        const char *p = buf;
        size_t to_head = min_size(len, head_max(c) - c->head_len);
        size_t to_tail = min_size(len - to_head, tail_max(c));
        int r;

        if (len == 0)
                return 0;
        if (to_head > 0) {
                r = grow(&c->head, &c->head_cap, c->head_len + to_head, head_max(c));
                if (r < 0)
                        return r;
        }
        if (to_tail > 0) {
                r = tail_reserve(c, to_tail);
                if (r < 0)
                        return r;
        }
        if (to_head > 0) {
                memcpy(c->head + c->head_len, p, to_head);
                c->head_len += to_head;
        }
        /* Only the last to_tail bytes can still be in the tail at the end. */
        tail_write(c, p + len - to_tail, to_tail);
        c->total += len;
        return 0;
}

static void capture_reset(struct output_capture *c)
{
        free(c->head);
        free(c->tail);
        *c = (struct output_capture){.cap = c->cap};
}

void output_capture_free(struct output_capture *c)
{
        if (c)
                capture_reset(c);
}

/* A byte range; the tail ring is read as two of them. */
struct piece {
        const unsigned char *p;
        size_t len;
};

static void tail_pieces(const struct output_capture *c, struct piece ret[2])
{
        if (c->tail_cap == 0) {
                ret[0] = ret[1] = (struct piece){NULL, 0};
                return;
        }
        size_t start = (c->tail_pos + c->tail_cap - c->tail_len) % c->tail_cap;
        size_t first = min_size(c->tail_len, c->tail_cap - start);

        ret[0] = (struct piece){(const unsigned char *)c->tail + start, first};
        ret[1] = (struct piece){(const unsigned char *)c->tail, c->tail_len - first};
}

/* Bytes at the end of the head that start a character the cut split. */
static size_t head_partial(const unsigned char *p, size_t len)
{
        for (size_t k = 1; k <= 3 && k <= len; k++) {
                unsigned char b = p[len - k];
                size_t n;

                if (b < 0x80)
                        return 0;
                if (b >= 0xc0)
                        return utf8_scan(p + len - k, k, &n) == SEQ_SHORT ? k : 0;
        }
        return 0;
}

/* Drops up to 3 continuation bytes that start the tail; returns how many. */
static size_t tail_skip_partial(struct piece t[2])
{
        size_t k = 0;

        while (k < 3) {
                struct piece *s = t[0].len > 0 ? &t[0] : &t[1];
                if (s->len == 0 || (s->p[0] & 0xc0) != 0x80)
                        break;
                s->p++;
                s->len--;
                k++;
        }
        return k;
}

static size_t sanitize_pieces(const struct piece *pieces, size_t n, char *out)
{
        struct text_sanitizer s = {};
        size_t w = 0;

        for (size_t i = 0; i < n; i++)
                w += text_sanitizer_feed(&s, pieces[i].p, pieces[i].len, out + w, i + 1 == n);
        return w;
}

int output_capture_finish(struct output_capture *c, struct cage_stream *ret)
{
        struct piece head = {(const unsigned char *)c->head, c->head_len}, tail[2];
        bool truncated = c->total > c->cap;
        char marker[MARKER_MAX] = "";
        size_t marker_len = 0;

        tail_pieces(c, tail);
        if (truncated) {
                head.len -= head_partial(head.p, head.len);
                tail_skip_partial(tail);
        }
        size_t kept = head.len + tail[0].len + tail[1].len;
        if (truncated)
                marker_len = (size_t)snprintf(marker, sizeof(marker),
                                              "\n[... %" PRIu64 " bytes truncated ...]\n",
                                              c->total - (uint64_t)kept);

        if (kept > (SIZE_MAX - MARKER_MAX) / 3 - 16)
                return -ENOMEM;
        size_t alloc = 3 * kept + marker_len + 1;
        char *buf = malloc(alloc);
        if (!buf)
                return -ENOMEM;

        size_t w;
        if (truncated) {
                w = sanitize_pieces(&head, 1, buf);
                memcpy(buf + w, marker, marker_len);
                w += marker_len;
                w += sanitize_pieces(tail, 2, buf + w);
        } else {
                struct piece all[3] = {head, tail[0], tail[1]};
                w = sanitize_pieces(all, 3, buf);
        }
        buf[w] = '\0';

        *ret = (struct cage_stream){
                .data = shrink(buf, alloc, w + 1),
                .len = w,
                .total = c->total,
                .kept = kept,
                .truncated = truncated,
        };
        capture_reset(c);
        return 0;
}
