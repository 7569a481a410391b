/* Unit tests for src/core/output.c: head + tail capture (cap boundaries, the
 * tail ring, lazy allocation, the marker line, cuts on UTF-8 boundaries) and
 * the sanitiser (invalid UTF-8, control characters, the streaming form). */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/output.h"
#include "util/cleanup.h"
#include "harness.h"

#define FFFD "\xef\xbf\xbd"

/* Feeds len bytes in chunks of `chunk` (0: one feed) and finishes. */
static struct cage_stream capture(uint64_t cap, const void *data, size_t len, size_t chunk)
{
        struct output_capture c;
        struct cage_stream s = {};
        const char *p = data;

        CHECK(output_capture_init(&c, cap) == 0);
        if (chunk == 0)
                chunk = len ? len : 1;
        for (size_t off = 0; off < len; off += chunk) {
                size_t n = len - off < chunk ? len - off : chunk;
                CHECK(output_capture_feed(&c, p + off, n) == 0);
        }
        CHECK(output_capture_finish(&c, &s) == 0);
        CHECK(c.head == NULL && c.tail == NULL && c.total == 0);
        output_capture_free(&c);
        return s;
}

static char *sanitize(const char *in, size_t len)
{
        char *out = NULL;
        size_t n = SIZE_MAX;

        CHECK(cage_sanitize_text(in, len, &out, &n) == 0);
        CHECK(out && n == strlen(out));
        return out;
}

#define CHECK_SANITIZED(in, expected)                                                              \
        do {                                                                                       \
                char *out_ = sanitize(in, sizeof(in) - 1);                                         \
                CHECK_STREQ(out_, expected);                                                       \
                free(out_);                                                                        \
        } while (0)

static char *marker(uint64_t n)
{
        char *m = NULL;
        CHECK(asprintf(&m, "\n[... %" PRIu64 " bytes truncated ...]\n", n) > 0);
        return m;
}

/* The expected text of a capture of ASCII-only data. */
static char *expected_cut(const char *data, size_t len, uint64_t cap)
{
        if (len <= cap)
                return strndup(data, len);
        size_t head = cap / 2, tail = cap - cap / 2;
        char *m = marker(len - cap), *r = NULL;
        CHECK(asprintf(&r, "%.*s%s%.*s", (int)head, data, m, (int)tail, data + len - tail) > 0);
        free(m);
        return r;
}

static void fill_pattern(char *buf, size_t len, unsigned seed)
{
        for (size_t i = 0; i < len; i++)
                buf[i] = (char)('!' + (i * 7 + seed + i / 94) % 94);
}

TEST(small_output_kept_whole)
{
        struct cage_stream s = capture(1024, "hello\nworld\n", 12, 0);

        CHECK_STREQ(s.data, "hello\nworld\n");
        CHECK(s.len == 12 && s.total == 12 && s.kept == 12 && !s.truncated);
        free(s.data);
}

TEST(empty_output)
{
        struct cage_stream s = capture(1024, NULL, 0, 0);

        CHECK_STREQ(s.data, "");
        CHECK(s.len == 0 && s.total == 0 && s.kept == 0 && !s.truncated);
        free(s.data);
}

TEST(cap_boundary_exact)
{
        struct cage_stream s = capture(10, "0123456789", 10, 0);

        CHECK_STREQ(s.data, "0123456789");
        CHECK(s.len == 10 && s.total == 10 && s.kept == 10 && !s.truncated);
        free(s.data);

        s = capture(10, "0123456789", 10, 1);
        CHECK_STREQ(s.data, "0123456789");
        CHECK(!s.truncated);
        free(s.data);
}

TEST(cap_boundary_plus_one)
{
        struct cage_stream s = capture(10, "0123456789A", 11, 0);

        CHECK_STREQ(s.data, "01234\n[... 1 bytes truncated ...]\n6789A");
        CHECK(s.total == 11 && s.kept == 10 && s.truncated);
        CHECK(s.len == strlen(s.data));
        free(s.data);

        s = capture(10, "0123456789A", 11, 3);
        CHECK_STREQ(s.data, "01234\n[... 1 bytes truncated ...]\n6789A");
        free(s.data);
}

TEST(odd_cap_splits_head_and_tail)
{
        /* cap 7: head 3, tail 4 */
        struct cage_stream s = capture(7, "abcdefghijkl", 12, 0);

        CHECK_STREQ(s.data, "abc\n[... 5 bytes truncated ...]\nijkl");
        CHECK(s.total == 12 && s.kept == 7 && s.truncated);
        free(s.data);
}

TEST(head_tail_marker_byte_feeds)
{
        const char *alpha = "abcdefghijklmnopqrstuvwxyz";
        struct cage_stream s = capture(8, alpha, 26, 1);

        CHECK_STREQ(s.data, "abcd\n[... 18 bytes truncated ...]\nwxyz");
        CHECK(s.total == 26 && s.kept == 8 && s.truncated);
        CHECK(s.len == strlen(s.data));
        free(s.data);
}

TEST(head_ending_in_newline)
{
        struct cage_stream s = capture(8, "abc\nMIDDLEwxyz", 14, 0);

        CHECK_STREQ(s.data, "abc\n\n[... 6 bytes truncated ...]\nwxyz");
        free(s.data);
}

TEST(tail_ring_wraps_many_small_feeds)
{
        enum { LEN = 5000 };
        static const size_t chunks[] = {1, 2, 3, 5, 7, 9, 10, 11, 19, 64, 999};
        static const uint64_t caps[] = {1, 2, 3, 20, 21, 512, 513, 4999, 5000, 5001};
        char *data = malloc(LEN);

        CHECK(data);
        fill_pattern(data, LEN, 3);
        for (size_t i = 0; i < ELEMENTSOF(caps); i++)
                for (size_t j = 0; j < ELEMENTSOF(chunks); j++) {
                        struct cage_stream s = capture(caps[i], data, LEN, chunks[j]);
                        char *want = expected_cut(data, LEN, caps[i]);
                        CHECK_STREQ(s.data, want);
                        CHECK(s.total == LEN);
                        CHECK(s.kept == (caps[i] < LEN ? caps[i] : LEN));
                        CHECK(s.truncated == (caps[i] < LEN));
                        free(want);
                        free(s.data);
                }
        free(data);
}

TEST(tail_ring_varying_feeds)
{
        enum { LEN = 20000 };
        char *data = malloc(LEN);
        struct output_capture c;
        struct cage_stream s;
        size_t off = 0, step = 0;

        CHECK(data);
        fill_pattern(data, LEN, 11);
        CHECK(output_capture_init(&c, 1000) == 0);
        while (off < LEN) {
                size_t n = (step++ * 37) % 1700;
                if (n > LEN - off)
                        n = LEN - off;
                CHECK(output_capture_feed(&c, data + off, n) == 0);
                off += n;
        }
        CHECK(c.head_cap <= 500 && c.tail_cap <= 500);
        CHECK(output_capture_finish(&c, &s) == 0);
        char *want = expected_cut(data, LEN, 1000);
        CHECK_STREQ(s.data, want);
        CHECK(s.kept == 1000 && s.total == LEN);
        free(want);
        free(s.data);
        free(data);
}

TEST(one_huge_feed)
{
        enum { LEN = 4 << 20 };
        char *data = malloc(LEN);

        CHECK(data);
        fill_pattern(data, LEN, 5);
        struct cage_stream s = capture(1001, data, LEN, 0);
        char *want = expected_cut(data, LEN, 1001);
        CHECK_STREQ(s.data, want);
        CHECK(s.total == LEN && s.kept == 1001 && s.truncated);
        free(want);
        free(s.data);
        free(data);
}

TEST(huge_feed_after_partial_tail)
{
        enum { LEN = 100000 };
        char *data = malloc(LEN);
        struct output_capture c;
        struct cage_stream s;

        CHECK(data);
        fill_pattern(data, LEN, 9);
        CHECK(output_capture_init(&c, 600) == 0);
        CHECK(output_capture_feed(&c, data, 310) == 0); /* head full, 10 in tail */
        CHECK(c.tail_len == 10);
        CHECK(output_capture_feed(&c, data + 310, 7) == 0);
        CHECK(output_capture_feed(&c, data + 317, LEN - 317) == 0);
        CHECK(output_capture_finish(&c, &s) == 0);
        char *want = expected_cut(data, LEN, 600);
        CHECK_STREQ(s.data, want);
        free(want);
        free(s.data);
        free(data);
}

TEST(memory_grows_with_data)
{
        struct output_capture c;
        struct cage_stream s;
        char buf[100];

        memset(buf, 'x', sizeof(buf));
        CHECK(output_capture_init(&c, UINT64_MAX) == 0);
        CHECK(c.head == NULL && c.tail == NULL);
        CHECK(output_capture_feed(&c, buf, 10) == 0);
        CHECK(c.head_cap > 0 && c.head_cap <= 4096 && c.tail == NULL);
        output_capture_free(&c);

        /* a 2 MB cap: the tail ring is only allocated once the head is full
         * and then only as large as what arrived */
        CHECK(output_capture_init(&c, 2 << 20) == 0);
        for (int i = 0; i < 10; i++)
                CHECK(output_capture_feed(&c, buf, sizeof(buf)) == 0);
        CHECK(c.head_cap <= 4096 && c.tail == NULL);
        char *big = calloc(1, 1 << 20);
        CHECK(big);
        CHECK(output_capture_feed(&c, big, (1 << 20) - 1000) == 0);
        CHECK(c.head_len == 1 << 20 && c.tail == NULL);
        CHECK(output_capture_feed(&c, buf, 10) == 0);
        CHECK(c.tail && c.tail_cap <= 4096 && c.tail_len == 10);
        CHECK(output_capture_finish(&c, &s) == 0);
        CHECK(s.total == (1 << 20) + 10 && !s.truncated);
        CHECK(s.len == 3 * ((1 << 20) - 1000) + 1010); /* NULs become U+2400 */
        free(s.data);
        free(big);
        output_capture_free(&c);
}

TEST(keep_everything_large)
{
        enum { LEN = 3 << 20 };
        char *data = malloc(LEN);

        CHECK(data);
        fill_pattern(data, LEN, 1);
        struct cage_stream s = capture(UINT64_MAX, data, LEN, 65536);
        CHECK(s.len == LEN && !s.truncated && s.kept == LEN);
        CHECK(s.data && memcmp(s.data, data, LEN) == 0);
        free(s.data);

        s = capture(UINT64_MAX - 1, data, LEN, 0);
        CHECK(s.len == LEN && !s.truncated);
        free(s.data);
        free(data);
}

TEST(cap_zero_counts_only)
{
        struct output_capture c;
        struct cage_stream s;

        CHECK(output_capture_init(&c, 0) == 0);
        CHECK(output_capture_feed(&c, "hello", 5) == 0);
        CHECK(output_capture_feed(&c, "world", 5) == 0);
        CHECK(c.head == NULL && c.tail == NULL && c.total == 10);
        CHECK(output_capture_finish(&c, &s) == 0);
        CHECK_STREQ(s.data, "\n[... 10 bytes truncated ...]\n");
        CHECK(s.total == 10 && s.kept == 0 && s.truncated);
        free(s.data);

        s = capture(0, NULL, 0, 0);
        CHECK_STREQ(s.data, "");
        CHECK(!s.truncated && s.total == 0);
        free(s.data);
}

TEST(cap_one_keeps_last_byte)
{
        struct cage_stream s = capture(1, "abc", 3, 1);

        CHECK_STREQ(s.data, "\n[... 2 bytes truncated ...]\nc");
        CHECK(s.kept == 1 && s.total == 3);
        free(s.data);
}

TEST(reuse_after_finish)
{
        struct output_capture c;
        struct cage_stream s;

        CHECK(output_capture_init(&c, 4) == 0);
        CHECK(output_capture_feed(&c, "abcdefgh", 8) == 0);
        CHECK(output_capture_finish(&c, &s) == 0);
        CHECK_STREQ(s.data, "ab\n[... 4 bytes truncated ...]\ngh");
        free(s.data);
        CHECK(c.cap == 4 && c.total == 0 && c.head_len == 0 && c.tail_len == 0);
        CHECK(output_capture_feed(&c, "xyz", 3) == 0);
        CHECK(output_capture_finish(&c, &s) == 0);
        CHECK_STREQ(s.data, "xyz");
        CHECK(s.total == 3 && !s.truncated);
        free(s.data);
        output_capture_free(&c);
}

TEST(cut_drops_split_characters)
{
        /* head 4 bytes: "ab" + 2 of 3 bytes of the euro sign; tail 4 bytes:
         * the last 2 bytes of a euro sign + "yz" */
        const char in[] = "ab\xe2\x82\xac"
                          "MIDDLE"
                          "\xe2\x82\xacyz";
        struct cage_stream s = capture(8, in, sizeof(in) - 1, 0);

        CHECK_STREQ(s.data, "ab\n[... 12 bytes truncated ...]\nyz");
        CHECK(s.kept == 4 && s.total == 16 && s.truncated);
        CHECK(!strstr(s.data, FFFD));
        free(s.data);
}

TEST(cut_splits_emoji_every_way)
{
        /* U+1F600 at every offset against a head of 4 and a tail of 4 */
        const char *emoji = "\xf0\x9f\x98\x80";

        for (size_t lead = 0; lead <= 4; lead++) {
                char in[64];
                size_t n = 0;
                memset(in, 'a', lead);
                n += lead;
                memcpy(in + n, emoji, 4);
                n += 4;
                memcpy(in + n, "------", 6);
                n += 6;
                for (size_t t = 0; t <= 4; t++) {
                        /* tail = the last t bytes of an emoji + 4 - t 'z' */
                        char buf[64];
                        memcpy(buf, in, n);
                        memcpy(buf + n, emoji, 4);
                        memset(buf + n + 4, 'z', 4 - t);
                        size_t len = n + 8 - t;
                        buf[len] = '\0';
                        struct cage_stream s = capture(8, buf, len, 1);

                        size_t head_kept = lead == 0 || lead == 4 ? 4 : lead;
                        size_t tail_kept = t == 4 ? 4 : 4 - t;
                        CHECK(s.kept == head_kept + tail_kept);
                        CHECK(s.total == len && s.truncated);
                        CHECK(!strstr(s.data, FFFD));
                        CHECK(memcmp(s.data, buf, head_kept) == 0);
                        char *m = marker(len - head_kept - tail_kept);
                        CHECK(strncmp(s.data + head_kept, m, strlen(m)) == 0);
                        CHECK_STREQ(s.data + head_kept + strlen(m), buf + len - tail_kept);
                        free(m);
                        free(s.data);
                }
        }
}

TEST(cut_keeps_invalid_bytes_visible)
{
        /* a stray continuation byte that is not the tail's first 3 stays */
        const char in[] = "\xff"
                          "abc"
                          "MIDDLE"
                          "z\x80yz";
        struct cage_stream s = capture(8, in, sizeof(in) - 1, 0);

        CHECK_STREQ(s.data, FFFD "abc\n[... 6 bytes truncated ...]\nz" FFFD "yz");
        CHECK(s.kept == 8);
        free(s.data);
}

TEST(capture_sanitises_head_and_tail)
{
        const char in[] = "\x1b[1mHEAD"
                          "................"
                          "TAIL\x1b[0m";
        struct cage_stream s = capture(16, in, sizeof(in) - 1, 5);

        CHECK_STREQ(s.data,
                    "\xe2\x90\x9b[1mHEAD\n[... 16 bytes truncated ...]\nTAIL\xe2\x90\x9b[0m");
        CHECK(s.kept == 16);
        CHECK(s.len == strlen(s.data));
        free(s.data);
}

TEST(invalid_bytes_become_replacement)
{
        CHECK_SANITIZED("a\xff"
                        "b",
                        "a" FFFD "b");
        CHECK_SANITIZED("\xc0\xaf", FFFD FFFD);                   /* overlong '/' */
        CHECK_SANITIZED("\xe0\x80\xaf", FFFD FFFD FFFD);          /* overlong */
        CHECK_SANITIZED("\xed\xa0\x80", FFFD FFFD FFFD);          /* surrogate */
        CHECK_SANITIZED("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD); /* > U+10FFFF */
        CHECK_SANITIZED("\xf5\x80", FFFD FFFD);
        CHECK_SANITIZED("\xe2\x82", FFFD); /* cut at the end */
        CHECK_SANITIZED("\xe2\x82X", FFFD "X");
        CHECK_SANITIZED("\xf0\x9f\x98"
                        "A",
                        FFFD "A");
        CHECK_SANITIZED("\x80\xbf", FFFD FFFD);
        /* Unicode 15, table 3-8 */
        CHECK_SANITIZED("\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64",
                        "a" FFFD FFFD FFFD "b" FFFD "c" FFFD FFFD "d");
}

TEST(valid_utf8_kept)
{
        CHECK_SANITIZED("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",
                        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
        CHECK_SANITIZED("\xc2\xa0\xef\xbf\xbd\xed\x9f\xbf\xee\x80\x80",
                        "\xc2\xa0\xef\xbf\xbd\xed\x9f\xbf\xee\x80\x80");
}

TEST(controls_neutralised)
{
        CHECK_SANITIZED("\x1b[31mred", "\xe2\x90\x9b[31mred");
        CHECK_SANITIZED("\x07", "\xe2\x90\x87");
        CHECK_SANITIZED("\x7f", "\xe2\x90\xa1");
        CHECK_SANITIZED("\xc2\x9b"
                        "2J",
                        FFFD "2J"); /* C1 CSI */
        CHECK_SANITIZED("\xc2\x80\xc2\x85\xc2\x9f", FFFD FFFD FFFD);

        for (int b = 0; b < 0x20; b++) {
                char in[1] = {(char)b}, *out = sanitize(in, 1);
                if (b == '\t' || b == '\n' || b == '\r') {
                        CHECK(out && out[0] == b && out[1] == '\0');
                } else {
                        char want[4] = {'\xe2', '\x90', (char)(0x80 + b), 0};
                        CHECK_STREQ(out, want);
                }
                free(out);
        }
}

TEST(tab_newline_cr_kept)
{
        CHECK_SANITIZED("a\tb\nc\r\nd", "a\tb\nc\r\nd");
}

TEST(nul_bytes)
{
        char *out = NULL;
        size_t n = 0;

        CHECK(cage_sanitize_text("a\0b\0", 4, &out, &n) == 0);
        CHECK_STREQ(out, "a\xe2\x90\x80"
                         "b\xe2\x90\x80");
        CHECK(n == 8 && n == strlen(out));
        free(out);

        struct cage_stream s = capture(100, "\0\0x", 3, 1);
        CHECK_STREQ(s.data, "\xe2\x90\x80\xe2\x90\x80x");
        CHECK(s.len == strlen(s.data) && s.len == 7 && s.kept == 3);
        free(s.data);
}

TEST(controls_at_every_word_offset)
{
        /* exercises the word-at-a-time fast path at every alignment */
        static const char specials[] = {0x1b, 0x00, 0x7f, '\n', '\t', (char)0xff};

        for (size_t k = 0; k < sizeof(specials); k++)
                for (size_t pos = 0; pos < 40; pos++) {
                        char in[40], want[64];
                        memset(in, 'q', sizeof(in));
                        in[pos] = specials[k];
                        char *out = sanitize(in, sizeof(in));
                        size_t w = 0;
                        memset(want, 'q', pos);
                        w += pos;
                        unsigned char b = (unsigned char)specials[k];
                        if (b == '\n' || b == '\t') {
                                want[w++] = (char)b;
                        } else if (b == 0xff) {
                                memcpy(want + w, FFFD, 3);
                                w += 3;
                        } else {
                                want[w++] = '\xe2';
                                want[w++] = '\x90';
                                want[w++] = (char)(b == 0x7f ? 0xa1 : 0x80 + b);
                        }
                        memset(want + w, 'q', 39 - pos);
                        w += 39 - pos;
                        want[w] = '\0';
                        CHECK_STREQ(out, want);
                        free(out);
                }
}

TEST(empty_input_sanitised)
{
        char *out = NULL;
        size_t n = 1;

        CHECK(cage_sanitize_text(NULL, 0, &out, &n) == 0);
        CHECK_STREQ(out, "");
        CHECK(n == 0);
        free(out);
}

TEST(stream_emoji_split_in_four)
{
        struct text_sanitizer s = {};
        const char *emoji = "\xf0\x9f\x98\x80";
        char out[3 * (1 + 4)];

        CHECK(text_sanitizer_feed(&s, emoji, 1, out, false) == 0);
        CHECK(s.n_pending == 1);
        CHECK(text_sanitizer_feed(&s, emoji + 1, 1, out, false) == 0);
        CHECK(text_sanitizer_feed(&s, emoji + 2, 1, out, false) == 0);
        CHECK(s.n_pending == 3);
        size_t n = text_sanitizer_feed(&s, emoji + 3, 1, out, false);
        CHECK(n == 4 && memcmp(out, emoji, 4) == 0);
        CHECK(s.n_pending == 0);
}

TEST(stream_flush_pending)
{
        struct text_sanitizer s = {};
        char out[64];

        CHECK(text_sanitizer_feed(&s, "ok\xf0\x9f", 4, out, false) == 2);
        CHECK(memcmp(out, "ok", 2) == 0 && s.n_pending == 2);
        size_t n = text_sanitizer_feed(&s, NULL, 0, out, true);
        CHECK(n == 3 && memcmp(out, FFFD, 3) == 0);
        CHECK(s.n_pending == 0);

        /* a pending lead byte broken by the next chunk */
        CHECK(text_sanitizer_feed(&s, "\xe2", 1, out, false) == 0);
        n = text_sanitizer_feed(&s, "A\x1b", 2, out, true);
        CHECK(n == 7 && memcmp(out, FFFD "A\xe2\x90\x9b", 7) == 0);

        /* a pending prefix broken after one more good byte */
        CHECK(text_sanitizer_feed(&s, "\xf0", 1, out, false) == 0);
        n = text_sanitizer_feed(&s, "\x90Z", 2, out, false);
        CHECK(n == 4 && memcmp(out, FFFD "Z", 4) == 0);

        /* a split C1 control */
        CHECK(text_sanitizer_feed(&s, "\xc2", 1, out, false) == 0);
        n = text_sanitizer_feed(&s, "\x9b", 1, out, true);
        CHECK(n == 3 && memcmp(out, FFFD, 3) == 0);
}

TEST(stream_matches_whole_buffer)
{
        static const char in[] = "a\x1b[0m\xe2\x82\xac\xf0\x9f\x98\x80\xff\xc2\x85\xed\xa0\x80"
                                 "\xf1\x80\x80\xe1\x80\xc2\x62\x00\x7f\t\r\n\xc3\xa9\xf4\x90z";
        const size_t len = sizeof(in) - 1;
        char *whole = sanitize(in, len);

        /* every split into two chunks, then every chunk size */
        for (size_t cut = 0; cut <= len; cut++) {
                struct text_sanitizer s = {};
                char out[3 * (sizeof(in) + 8)];
                size_t n = text_sanitizer_feed(&s, in, cut, out, false);
                n += text_sanitizer_feed(&s, in + cut, len - cut, out + n, true);
                out[n] = '\0';
                CHECK_STREQ(out, whole);
        }
        for (size_t chunk = 1; chunk <= len; chunk++) {
                struct text_sanitizer s = {};
                char out[3 * (sizeof(in) + 8)];
                size_t n = 0;
                for (size_t off = 0; off < len; off += chunk) {
                        size_t k = len - off < chunk ? len - off : chunk;
                        size_t w = text_sanitizer_feed(&s, in + off, k, out + n, false);
                        CHECK(w <= 3 * (k + 4));
                        n += w;
                }
                n += text_sanitizer_feed(&s, NULL, 0, out + n, true);
                out[n] = '\0';
                CHECK_STREQ(out, whole);
        }
        free(whole);
}

RUN_TESTS(T(small_output_kept_whole), T(empty_output), T(cap_boundary_exact),
          T(cap_boundary_plus_one), T(odd_cap_splits_head_and_tail), T(head_tail_marker_byte_feeds),
          T(head_ending_in_newline), T(tail_ring_wraps_many_small_feeds),
          T(tail_ring_varying_feeds), T(one_huge_feed), T(huge_feed_after_partial_tail),
          T(memory_grows_with_data), T(keep_everything_large), T(cap_zero_counts_only),
          T(cap_one_keeps_last_byte), T(reuse_after_finish), T(cut_drops_split_characters),
          T(cut_splits_emoji_every_way), T(cut_keeps_invalid_bytes_visible),
          T(capture_sanitises_head_and_tail), T(invalid_bytes_become_replacement),
          T(valid_utf8_kept), T(controls_neutralised), T(tab_newline_cr_kept), T(nul_bytes),
          T(controls_at_every_word_offset), T(empty_input_sanitised), T(stream_emoji_split_in_four),
          T(stream_flush_pending), T(stream_matches_whole_buffer))
