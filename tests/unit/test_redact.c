/* Unit tests for secret redaction: every occurrence of every secret is
 * gone from the output, the markers name the secrets, text without secrets
 * is returned byte for byte, also in large inputs. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "services/redact.h"

static struct cage_redactor *make(const char *const *pairs)
{
        struct cage_redactor *r = NULL;
        if (cage_redactor_new(&r) < 0)
                return NULL;
        for (size_t i = 0; pairs[i]; i += 2)
                if (cage_redactor_add(r, pairs[i], pairs[i + 1], strlen(pairs[i + 1])) < 0)
                        return cage_redactor_unref(r);
        return r;
}

/* Redacts a C string; returns a malloc'ed result ("(error)" never matches). */
static char *redact_str(const struct cage_redactor *r, const char *in)
{
        char *out = NULL;
        size_t n = 0;
        if (cage_redact(r, in, strlen(in), &out, &n) < 0)
                return strdup("(error)");
        if (strlen(out) != n) {
                free(out);
                return strdup("(length mismatch)");
        }
        return out;
}

#define CHECK_REDACTS(r, in, want)                                                                 \
        do {                                                                                       \
                char *got_ = redact_str(r, in);                                                    \
                CHECK_STREQ(got_, want);                                                           \
                free(got_);                                                                        \
        } while (0)

TEST(text_without_secrets_is_unchanged)
{
        struct cage_redactor *r = make((const char *[]){"API_KEY", "sk-live-123456", NULL});
        CHECK(r != NULL);
        CHECK_REDACTS(r, "hello world\n", "hello world\n");
        CHECK_REDACTS(r, "sk-live-12345 is not the key", "sk-live-12345 is not the key");
        CHECK_REDACTS(r, "", "");
        CHECK_REDACTS(NULL, "no redactor at all", "no redactor at all");
        /* Binary input with NUL bytes survives whole. */
        const char bin[] = {'a', 0, 'b', (char)0xff, 0};
        char *out = NULL;
        size_t n = 0;
        CHECK(cage_redact(r, bin, sizeof(bin), &out, &n) == 0);
        CHECK(n == sizeof(bin) && memcmp(out, bin, n) == 0);
        free(out);
        cage_redactor_unref(r);
}

TEST(every_occurrence_of_every_secret_is_replaced)
{
        struct cage_redactor *r =
                make((const char *[]){"API_KEY", "sk-live-123456", "DB_PASS", "hunter2", NULL});
        CHECK_REDACTS(r, "key=sk-live-123456 pass=hunter2 again sk-live-123456",
                      "key=[REDACTED:API_KEY] pass=[REDACTED:DB_PASS] again [REDACTED:API_KEY]");
        CHECK_REDACTS(r, "sk-live-123456", "[REDACTED:API_KEY]");
        CHECK_REDACTS(r, "hunter2\n", "[REDACTED:DB_PASS]\n");
        CHECK_REDACTS(r, "xhunter2", "x[REDACTED:DB_PASS]");
        cage_redactor_unref(r);
}

TEST(adjacent_occurrences)
{
        struct cage_redactor *r = make((const char *[]){"A", "secretA", "B", "secretB", NULL});
        /* Repeats of one secret collapse into one marker. */
        CHECK_REDACTS(r, "secretAsecretAsecretA!", "[REDACTED:A]!");
        /* Different secrets side by side keep both names. */
        CHECK_REDACTS(r, "secretAsecretB", "[REDACTED:A][REDACTED:B]");
        CHECK_REDACTS(r, "secretA secretA", "[REDACTED:A] [REDACTED:A]");
        cage_redactor_unref(r);
}

TEST(overlapping_and_nested_secrets)
{
        /* The end of A's value is the start of B's. */
        struct cage_redactor *r = make((const char *[]){"A", "abcdef", "B", "defghi", NULL});
        CHECK_REDACTS(r, "<abcdefghi>", "<[REDACTED:A][REDACTED:B]>");
        CHECK_REDACTS(r, "<defghi>", "<[REDACTED:B]>");
        cage_redactor_unref(r);

        /* A password inside a URL secret: the longest match names it. */
        r = make((const char *[]){"DB_PASS", "s3cr3tpw", "DB_URL", "pg://u:s3cr3tpw@db/x", NULL});
        CHECK_REDACTS(r, "url=pg://u:s3cr3tpw@db/x;", "url=[REDACTED:DB_URL];");
        CHECK_REDACTS(r, "pw=s3cr3tpw;", "pw=[REDACTED:DB_PASS];");
        cage_redactor_unref(r);

        /* Same start: longest first, whichever order they were added in. */
        r = make((const char *[]){"SHORT", "token", "LONG", "token-extended", NULL});
        CHECK_REDACTS(r, "token-extended token", "[REDACTED:LONG] [REDACTED:SHORT]");
        cage_redactor_unref(r);

        /* A secret overlapping itself. */
        r = make((const char *[]){"A", "aaaa", NULL});
        CHECK_REDACTS(r, "xaaaaaaay", "x[REDACTED:A]y");
        CHECK_REDACTS(r, "xaaay", "xaaay");
        cage_redactor_unref(r);
}

TEST(short_secrets_are_redacted_too)
{
        struct cage_redactor *r = make((const char *[]){"PIN", "7", "TWO", "ok", NULL});
        CHECK_REDACTS(r, "a7b", "a[REDACTED:PIN]b");
        CHECK_REDACTS(r, "7", "[REDACTED:PIN]");
        CHECK_REDACTS(r, "book", "bo[REDACTED:TWO]");
        cage_redactor_unref(r);
}

TEST(binary_secret_values)
{
        struct cage_redactor *r = NULL;
        CHECK(cage_redactor_new(&r) == 0);
        const char key[] = {'k', 0, (char)0xfe, 'y'};
        CHECK(cage_redactor_add(r, "BIN", key, sizeof(key)) == 0);
        const char in[] = {'>', 'k', 0, (char)0xfe, 'y', '<'};
        char *out = NULL;
        size_t n = 0;
        CHECK(cage_redact(r, in, sizeof(in), &out, &n) == 0);
        CHECK(n == strlen(">[REDACTED:BIN]<") && memcmp(out, ">[REDACTED:BIN]<", n) == 0);
        free(out);
        cage_redactor_unref(r);
}

TEST(bad_secrets_are_refused)
{
        struct cage_redactor *r = NULL;
        CHECK(cage_redactor_new(&r) == 0);
        CHECK(cage_redactor_add(r, "EMPTY", "", 0) == -EINVAL);
        CHECK(cage_redactor_add(r, "", "value", 5) == -EINVAL);
        CHECK(cage_redactor_add(r, "bad]name", "value", 5) == -EINVAL);
        CHECK(cage_redactor_add(r, "OK", "value", 5) == 0);
        CHECK(cage_redactor_count(r) == 1);
        CHECK(cage_redactor_ref(r) == r);
        CHECK(cage_redactor_unref(r) == NULL);
        CHECK_REDACTS(r, "a value", "a [REDACTED:OK]"); /* still alive: one ref left */
        cage_redactor_unref(r);
}

TEST(needed_reports_presence)
{
        struct cage_redactor *r = make((const char *[]){"K", "needle", NULL});
        CHECK(cage_redact_needed(r, "hay needle hay", 14));
        CHECK(!cage_redact_needed(r, "hay needl hay", 13));
        CHECK(!cage_redact_needed(NULL, "needle", 6));
        cage_redactor_unref(r);
}

TEST(ten_megabytes_with_thirty_secrets)
{
        enum { N = 30, SIZE = 10 * 1024 * 1024 };
        struct cage_redactor *r = NULL;
        char names[N][16], values[N][40];
        CHECK(cage_redactor_new(&r) == 0);
        for (int i = 0; i < N; i++) {
                snprintf(names[i], sizeof(names[i]), "SECRET_%d", i);
                snprintf(values[i], sizeof(values[i]), "tok_%02d_%08x%08x", i,
                         (unsigned)(i * 2654435761u), (unsigned)(i * 40503u + 7));
                CHECK(cage_redactor_add(r, names[i], values[i], strlen(values[i])) == 0);
        }
        char *in = malloc(SIZE);
        CHECK(in != NULL);
        if (!in)
                return;
        /* Log-like text with a secret every ~100 KiB. */
        uint32_t x = 12345;
        for (size_t i = 0; i < SIZE; i++) {
                x = x * 1103515245u + 12345u;
                in[i] = (x >> 16) % 97 == 0 ? '\n' : (char)('a' + (x >> 16) % 26);
        }
        size_t planted = 0;
        for (size_t pos = 5000; pos + 64 < SIZE; pos += 100 * 1024, planted++) {
                const char *v = values[planted % N];
                memcpy(in + pos, v, strlen(v));
        }

        char *out = NULL;
        size_t n = 0;
        CHECK(cage_redact(r, in, SIZE, &out, &n) == 0);
        size_t markers = 0;
        for (const char *p = out; (p = strstr(p, "[REDACTED:SECRET_")); p++)
                markers++;
        CHECK(markers == planted);
        for (int i = 0; i < N; i++)
                CHECK(memmem(out, n, values[i], strlen(values[i])) == NULL);
        free(out);

        /* The same input without secrets comes back identical. */
        for (size_t pos = 5000; pos + 64 < SIZE; pos += 100 * 1024)
                memset(in + pos, 'z', 40);
        CHECK(cage_redact(r, in, SIZE, &out, &n) == 0);
        CHECK(n == SIZE && memcmp(out, in, SIZE) == 0);
        free(out);
        free(in);
        cage_redactor_unref(r);
}

/* Brute force against a reference: over a two-letter alphabet (where
 * overlaps are everywhere), the plain bytes of the output are exactly the
 * input bytes no occurrence covers, and no secret survives. */
TEST(random_inputs_match_reference_coverage)
{
        uint32_t x = 99;
#define RND() (x = x * 1103515245u + 12345u, (x >> 16))
        for (int round = 0; round < 2000; round++) {
                struct cage_redactor *r = NULL;
                CHECK(cage_redactor_new(&r) == 0);
                char secrets[3][6];
                size_t lens[3];
                int ns = 1 + (int)(RND() % 3);
                for (int s = 0; s < ns; s++) {
                        lens[s] = 1 + RND() % 5;
                        for (size_t i = 0; i < lens[s]; i++)
                                secrets[s][i] = RND() % 2 ? 'a' : 'b';
                        char name[2] = {(char)('X' + s), 0};
                        CHECK(cage_redactor_add(r, name, secrets[s], lens[s]) == 0);
                }
                char in[40];
                size_t len = RND() % sizeof(in);
                for (size_t i = 0; i < len; i++)
                        in[i] = RND() % 5 ? (RND() % 2 ? 'a' : 'b') : '.';
                bool covered[40] = {false};
                for (int s = 0; s < ns; s++)
                        for (size_t i = 0; i + lens[s] <= len; i++)
                                if (memcmp(in + i, secrets[s], lens[s]) == 0)
                                        for (size_t j = 0; j < lens[s]; j++)
                                                covered[i + j] = true;
                char want[40];
                size_t nwant = 0;
                for (size_t i = 0; i < len; i++)
                        if (!covered[i])
                                want[nwant++] = in[i];

                char *out = NULL;
                size_t n = 0;
                CHECK(cage_redact(r, in, len, &out, &n) == 0);
                /* Strip markers: they hold no 'a', 'b' or '.'. */
                char plain[40];
                size_t np = 0;
                bool ok = true;
                for (size_t i = 0; i < n; i++) {
                        if (out[i] == '[') {
                                const char *close = memchr(out + i, ']', n - i);
                                ok = ok && close && strncmp(out + i, "[REDACTED:", 10) == 0;
                                if (!close)
                                        break;
                                i = (size_t)(close - out);
                                continue;
                        }
                        if (np < sizeof(plain))
                                plain[np++] = out[i];
                        else
                                ok = false;
                }
                CHECK(ok);
                CHECK(np == nwant && memcmp(plain, want, np) == 0);
                free(out);
                cage_redactor_unref(r);
                if (test_failures_in_case)
                        break;
        }
#undef RND
}

RUN_TESTS(T(text_without_secrets_is_unchanged), T(every_occurrence_of_every_secret_is_replaced),
          T(adjacent_occurrences), T(overlapping_and_nested_secrets),
          T(short_secrets_are_redacted_too), T(binary_secret_values), T(bad_secrets_are_refused),
          T(needed_reports_presence), T(ten_megabytes_with_thirty_secrets),
          T(random_inputs_match_reference_coverage))
