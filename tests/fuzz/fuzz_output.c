/* libFuzzer target for src/core/output.c: drives output capture and the
 * sanitiser with fuzzer-chosen caps and chunkings and aborts on any broken
 * invariant. It carries its own UTF-8 validator and a reference sanitiser
 * written as the WHATWG byte-at-a-time decoder, so it checks the library
 * against an independent reading of the rules rather than against itself.
 *
 * Input layout: byte 0 picks the cap, byte 1 the chunk sizes (low 3 bits: the
 * largest chunk; the rest seeds the sizes), the remaining bytes are the
 * stream. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/output.h"
#include "fuzz.h"

#define FFFD 0xfffdu

/* --- independent checks --------------------------------------------------- */

/* True when p is well-formed UTF-8 free of C0 (but \t \n \r), DEL and C1. */
FUZZ_REFERENCE static bool clean_utf8(const unsigned char *p, size_t len)
{
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};

        for (size_t i = 0; i < len;) {
                unsigned char b = p[i];
                uint32_t cp;
                size_t n;

                if (b < 0x80) {
                        cp = b, n = 1;
                } else if ((b & 0xe0) == 0xc0) {
                        cp = b & 0x1fu, n = 2;
                } else if ((b & 0xf0) == 0xe0) {
                        cp = b & 0x0fu, n = 3;
                } else if ((b & 0xf8) == 0xf0) {
                        cp = b & 0x07u, n = 4;
                } else {
                        return false;
                }
                if (len - i < n)
                        return false;
                for (size_t k = 1; k < n; k++) {
                        if ((p[i + k] & 0xc0) != 0x80)
                                return false;
                        cp = cp << 6 | (p[i + k] & 0x3fu);
                }
                if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                if (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r')
                        return false;
                if (cp >= 0x7f && cp <= 0x9f)
                        return false;
                i += n;
        }
        return true;
}

FUZZ_REFERENCE static size_t encode(uint32_t cp, unsigned char *out)
{
        if (cp < 0x80) {
                out[0] = (unsigned char)cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (unsigned char)(0xc0 | cp >> 6);
                out[1] = (unsigned char)(0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (unsigned char)(0xe0 | cp >> 12);
                out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
                out[2] = (unsigned char)(0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (unsigned char)(0xf0 | cp >> 18);
        out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        out[3] = (unsigned char)(0x80 | (cp & 0x3f));
        return 4;
}

FUZZ_REFERENCE static size_t emit(uint32_t cp, unsigned char *out)
{
        if (cp == '\t' || cp == '\n' || cp == '\r')
                return encode(cp, out);
        if (cp < 0x20)
                return encode(0x2400 + cp, out);
        if (cp == 0x7f)
                return encode(0x2421, out);
        if (cp >= 0x80 && cp <= 0x9f)
                return encode(FFFD, out);
        return encode(cp, out);
}

/* The WHATWG "UTF-8 decoder" state machine. */
struct decoder {
        uint32_t cp;
        unsigned needed, seen;
        unsigned char lower, upper;
};

FUZZ_REFERENCE static void decoder_reset(struct decoder *d)
{
        *d = (struct decoder){.lower = 0x80, .upper = 0xbf};
}

/* Feeds one byte; returns bytes written; *reprocess when b must be fed again. */
FUZZ_REFERENCE static size_t decoder_byte(struct decoder *d, unsigned char b, unsigned char *out,
                                          bool *reprocess)
{
        *reprocess = false;
        if (d->needed == 0) {
                if (b <= 0x7f)
                        return emit(b, out);
                if (b >= 0xc2 && b <= 0xdf) {
                        d->needed = 1;
                        d->cp = b & 0x1fu;
                } else if (b >= 0xe0 && b <= 0xef) {
                        if (b == 0xe0)
                                d->lower = 0xa0;
                        if (b == 0xed)
                                d->upper = 0x9f;
                        d->needed = 2;
                        d->cp = b & 0xfu;
                } else if (b >= 0xf0 && b <= 0xf4) {
                        if (b == 0xf0)
                                d->lower = 0x90;
                        if (b == 0xf4)
                                d->upper = 0x8f;
                        d->needed = 3;
                        d->cp = b & 0x7u;
                } else {
                        return emit(FFFD, out);
                }
                return 0;
        }
        if (b < d->lower || b > d->upper) {
                decoder_reset(d);
                *reprocess = true;
                return emit(FFFD, out);
        }
        d->lower = 0x80;
        d->upper = 0xbf;
        d->cp = d->cp << 6 | (b & 0x3fu);
        if (++d->seen < d->needed)
                return 0;
        uint32_t cp = d->cp;
        decoder_reset(d);
        return emit(cp, out);
}

/* Reference sanitiser; returns a malloc'ed NUL-terminated string. */
FUZZ_REFERENCE static char *reference(const unsigned char *p, size_t len, size_t *ret_len)
{
        unsigned char *out = malloc(3 * len + 4);
        struct decoder d;
        size_t w = 0;
        bool again;

        FUZZ_CHECK(out);
        decoder_reset(&d);
        for (size_t i = 0; i < len; i++) {
                w += decoder_byte(&d, p[i], out + w, &again);
                if (again)
                        i--;
        }
        if (d.needed)
                w += emit(FFFD, out + w);
        out[w] = '\0';
        *ret_len = w;
        return (char *)out;
}

/* Bytes at the end of p that are an unfinished sequence, by the decoder. */
FUZZ_REFERENCE static size_t unfinished_suffix(const unsigned char *p, size_t len)
{
        struct decoder d;
        unsigned char scratch[8];
        size_t start = 0;
        bool again;

        decoder_reset(&d);
        for (size_t i = 0; i < len; i++) {
                if (d.needed == 0)
                        start = i;
                decoder_byte(&d, p[i], scratch, &again);
                if (again)
                        i--;
        }
        return d.needed ? len - start : 0;
}

/* --- driving -------------------------------------------------------------- */

static uint64_t pick_cap(uint8_t b)
{
        if (b == 0xff)
                return UINT64_MAX;
        if (b == 0xfe)
                return UINT64_MAX - 1;
        if (b >= 0xc0)
                return (uint64_t)(b - 0xc0) * 61;
        return b;
}

struct chunker {
        uint32_t state;
        size_t max;
};

static struct chunker chunker_new(uint8_t b)
{
        static const size_t maxes[8] = {1, 2, 3, 4, 7, 16, 64, SIZE_MAX};
        return (struct chunker){.state = 0x9e3779b9u ^ b, .max = maxes[b & 7]};
}

static size_t chunker_next(struct chunker *ch, size_t left)
{
        ch->state ^= ch->state << 13;
        ch->state ^= ch->state >> 17;
        ch->state ^= ch->state << 5;
        size_t n = ch->max == SIZE_MAX ? left : 1 + ch->state % ch->max;
        return n < left ? n : left;
}

static char *sanitize_whole(const unsigned char *p, size_t len, size_t *ret_len)
{
        char *out = NULL;
        FUZZ_CHECK(cage_sanitize_text(p, len, &out, ret_len) == 0);
        FUZZ_CHECK(out && *ret_len == strlen(out));
        FUZZ_CHECK(clean_utf8((const unsigned char *)out, *ret_len));
        return out;
}

static void check_stream(const unsigned char *p, size_t len, uint8_t chunk_byte)
{
        struct text_sanitizer s = {};
        struct chunker ch = chunker_new(chunk_byte);
        char *acc = malloc(3 * len + 16);
        /* Each chunk's output buffer is exactly the documented bound and ends
         * where this allocation ends, so ASan sees one byte too many. */
        size_t room = 3 * (len + 4);
        char *outbuf = malloc(room);
        size_t n = 0, whole_len, ref_len;

        FUZZ_CHECK(acc && outbuf);
        for (size_t off = 0; off < len;) {
                size_t k = chunker_next(&ch, len - off);
                bool last = off + k == len;
                char *out = outbuf + room - 3 * (k + 4);
                size_t w = text_sanitizer_feed(&s, p + off, k, out, last && (ch.state & 1));
                FUZZ_CHECK(w <= 3 * (k + 4));
                FUZZ_CHECK(s.n_pending < 4);
                memcpy(acc + n, out, w);
                n += w;
                off += k;
        }
        free(outbuf);
        n += text_sanitizer_feed(&s, NULL, 0, acc + n, true);
        FUZZ_CHECK(s.n_pending == 0);
        FUZZ_CHECK(n <= 3 * len);

        char *whole = sanitize_whole(p, len, &whole_len);
        char *ref = reference(p, len, &ref_len);
        FUZZ_CHECK(whole_len == ref_len && memcmp(whole, ref, ref_len) == 0);
        FUZZ_CHECK(n == whole_len && memcmp(acc, whole, n) == 0);
        free(whole);
        free(ref);
        free(acc);
}

static void check_idempotent(const unsigned char *p, size_t len)
{
        size_t n1, n2;
        char *once = sanitize_whole(p, len, &n1);
        char *twice = sanitize_whole((const unsigned char *)once, n1, &n2);

        FUZZ_CHECK(n1 == n2 && memcmp(once, twice, n1) == 0);
        free(once);
        free(twice);
}

/* The text a capture must produce, derived from the reference sanitiser. */
static char *expected_capture(const unsigned char *p, size_t len, uint64_t cap, uint64_t *ret_kept)
{
        size_t hlen, tlen, mlen, ref_h, ref_t;

        if (len <= cap) {
                *ret_kept = len;
                return reference(p, len, &hlen);
        }
        size_t head = (size_t)(cap / 2), tail = (size_t)(cap - cap / 2);
        const unsigned char *t = p + len - tail;
        hlen = head - unfinished_suffix(p, head);
        size_t skip = 0;
        while (skip < 3 && skip < tail && (t[skip] & 0xc0) == 0x80)
                skip++;
        tlen = tail - skip;
        *ret_kept = hlen + tlen;

        char *h = reference(p, hlen, &ref_h), *tr = reference(t + skip, tlen, &ref_t);
        char marker[64];
        mlen = (size_t)snprintf(marker, sizeof(marker), "\n[... %" PRIu64 " bytes truncated ...]\n",
                                (uint64_t)len - *ret_kept);
        char *r = malloc(ref_h + mlen + ref_t + 1);
        FUZZ_CHECK(r);
        memcpy(r, h, ref_h);
        memcpy(r + ref_h, marker, mlen);
        memcpy(r + ref_h + mlen, tr, ref_t + 1);
        free(h);
        free(tr);
        return r;
}

static void check_capture(const unsigned char *p, size_t len, uint64_t cap, uint8_t chunk_byte)
{
        struct output_capture c;
        struct cage_stream s;
        struct chunker ch = chunker_new(chunk_byte);
        uint64_t want_kept;

        FUZZ_CHECK(output_capture_init(&c, cap) == 0);
        for (size_t off = 0; off < len;) {
                size_t k = chunker_next(&ch, len - off);
                FUZZ_CHECK(output_capture_feed(&c, p + off, k) == 0);
                FUZZ_CHECK(c.head_cap <= cap / 2 && c.tail_cap <= cap - cap / 2);
                FUZZ_CHECK(c.head_cap <= 2 * c.total + 256 && c.tail_cap <= 2 * c.total + 256);
                off += k;
        }
        FUZZ_CHECK(c.total == len);
        FUZZ_CHECK(output_capture_finish(&c, &s) == 0);
        FUZZ_CHECK(c.total == 0 && !c.head && !c.tail);
        output_capture_free(&c);

        FUZZ_CHECK(s.data && s.len == strlen(s.data));
        FUZZ_CHECK(clean_utf8((const unsigned char *)s.data, s.len));
        FUZZ_CHECK(s.total == len);
        FUZZ_CHECK(s.kept <= s.total && s.kept <= cap);
        FUZZ_CHECK(s.truncated == (len > cap));
        if (s.truncated)
                FUZZ_CHECK(s.kept + 6 >= cap);

        char *want = expected_capture(p, len, cap, &want_kept);
        FUZZ_CHECK(s.kept == want_kept);
        FUZZ_CHECK(strcmp(s.data, want) == 0);
        free(want);

        /* a cut never adds a U+FFFD to text that had none */
        size_t n;
        char *whole = sanitize_whole(p, len, &n);
        if (!strstr(whole, "\xef\xbf\xbd"))
                FUZZ_CHECK(!strstr(s.data, "\xef\xbf\xbd"));
        free(whole);
        free(s.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        const unsigned char *p = data + 2;
        size_t len = size - 2;

        check_capture(p, len, pick_cap(data[0]), data[1]);
        check_stream(p, len, data[1]);
        check_idempotent(p, len);
        return 0;
}
