/* libFuzzer target for src/server/e2b_parse.c, the parsers of what E2B
 * clients send that is not JSON. The first byte picks the parser, the rest
 * is its input. Aborts on a broken invariant:
 *  - a Connect envelope is accepted only when its length is exactly the
 *    rest of the body, it is not compressed, and it holds a JSON object;
 *  - multipart parts lie inside the body, in order, each ending right
 *    before CRLF and the boundary; a body is walked to its end or refused
 *    in fewer steps than it has bytes;
 *  - a metadata filter either matches, does not, or is refused, and an
 *    empty metadata object matches only a filter with no pairs. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/e2b.h"
#include "util/error.h"

#define INPUT_MAX 65536

static void check_envelope(const char *s, size_t n)
{
        json_t *msg = NULL;
        struct cage_error err = {0};
        if (e2b_connect_stream_message(s, n, &msg, &err) == 0) {
                const unsigned char *p = (const unsigned char *)s;
                FUZZ_CHECK(n >= 5 && !(p[0] & 1));
                FUZZ_CHECK(((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4]) ==
                           n - 5);
                FUZZ_CHECK(json_is_object(msg));
        } else {
                FUZZ_CHECK(msg == NULL && err.message[0]);
        }
        json_decref(msg);
}

static void check_multipart(const char *s, size_t n)
{
        /* The boundary is the body's first line (what a client would have
         * put in its Content-Type). */
        const char *nl = memchr(s, '\n', n);
        if (!nl || nl == s || (size_t)(nl - s) > E2B_BOUNDARY_MAX)
                return;
        char boundary[E2B_BOUNDARY_MAX + 1];
        memcpy(boundary, s, (size_t)(nl - s));
        boundary[nl - s] = '\0';
        if (strlen(boundary) == 0)
                return;
        const char *body = nl + 1;
        size_t len = n - (size_t)(body - s), pos = 0, steps = 0;
        for (;;) {
                struct e2b_part part;
                size_t before = pos;
                int r = e2b_multipart_next(body, len, boundary, &pos, &part);
                FUZZ_CHECK(r == 1 || r == 0 || r == -EINVAL || r == -ENOMEM);
                if (r != 1)
                        break;
                FUZZ_CHECK(pos > before && pos <= len);
                FUZZ_CHECK(part.data >= body + before && part.data + part.len + 2 == body + pos);
                FUZZ_CHECK(memcmp(body + pos, boundary, strlen(boundary)) == 0);
                e2b_part_clear(&part);
                FUZZ_CHECK(++steps <= len);
        }
}

static void check_filter(const char *s)
{
        json_t *empty = json_object();
        bool m = false;
        int r = e2b_metadata_matches(s, empty, &m);
        FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
        if (r == 0 && strspn(s, "&") != strlen(s))
                FUZZ_CHECK(!m);
        json_decref(empty);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > INPUT_MAX)
                return 0;
        char *s = malloc(size);
        if (!s)
                return 0;
        memcpy(s, data + 1, size - 1);
        s[size - 1] = '\0';
        switch (data[0] % 3) {
        case 0:
                check_envelope(s, size - 1);
                break;
        case 1:
                check_multipart(s, size - 1);
                break;
        default:
                check_filter(s);
                break;
        }
        free(s);
        return 0;
}
