/* The E2B listener's parsers (src/server/e2b_parse.c): Connect stream
 * envelopes, multipart/form-data bodies as the SDKs (undici's FormData)
 * send them, and the metadata filter of a sandbox list. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/e2b.h"
#include "util/error.h"

static int envelope(const char *json, size_t json_len, unsigned char flags, size_t claimed,
                    json_t **ret)
{
        char buf[256];
        struct cage_error err = {0};
        buf[0] = (char)flags;
        buf[1] = (char)(claimed >> 24);
        buf[2] = (char)(claimed >> 16);
        buf[3] = (char)(claimed >> 8);
        buf[4] = (char)claimed;
        memcpy(buf + 5, json, json_len);
        return e2b_connect_stream_message(buf, json_len + 5, ret, &err);
}

TEST(connect_envelopes)
{
        json_t *msg = NULL;
        const char ok[] = "{\"process\":{\"pid\":1000}}";
        CHECK(envelope(ok, strlen(ok), 0, strlen(ok), &msg) == 0);
        CHECK(msg &&
              json_integer_value(json_object_get(json_object_get(msg, "process"), "pid")) == 1000);
        json_decref(msg);
        msg = NULL;
        CHECK(envelope(ok, strlen(ok), 1, strlen(ok), &msg) == -EINVAL);     /* compressed */
        CHECK(envelope(ok, strlen(ok), 0, strlen(ok) + 1, &msg) == -EINVAL); /* short */
        CHECK(envelope(ok, strlen(ok), 0, strlen(ok) - 1, &msg) == -EINVAL); /* trailing bytes */
        CHECK(envelope("[1]", 3, 0, 3, &msg) == -EINVAL);                    /* not an object */
        CHECK(envelope("{\"a\":1,\"a\":2}", 13, 0, 13, &msg) == -EINVAL);    /* duplicate key */
        struct cage_error err = {0};
        CHECK(e2b_connect_stream_message("\0\0\0", 3, &msg, &err) == -EINVAL);
        CHECK(msg == NULL);
}

TEST(multipart_boundaries)
{
        char b[E2B_BOUNDARY_MAX + 3];
        CHECK(e2b_multipart_boundary("multipart/form-data; boundary=----formdata-undici-0123", b,
                                     sizeof(b)));
        CHECK_STREQ(b, "------formdata-undici-0123");
        CHECK(e2b_multipart_boundary("multipart/form-data; BOUNDARY=\"a b\"; x=y", b, sizeof(b)));
        CHECK_STREQ(b, "--a b");
        CHECK(!e2b_multipart_boundary("multipart/form-data", b, sizeof(b)));
        CHECK(!e2b_multipart_boundary("multipart/form-data; boundary=", b, sizeof(b)));
        CHECK(!e2b_multipart_boundary(NULL, b, sizeof(b)));
        char tiny[4];
        CHECK(!e2b_multipart_boundary("multipart/form-data; boundary=abcdef", tiny, sizeof(tiny)));
}

#define BODY                                                                                       \
        "------b\r\n"                                                                              \
        "Content-Disposition: form-data; name=\"file\"; filename=\"dir/a%22b.txt\"\r\n"            \
        "Content-Type: application/octet-stream\r\n\r\n"                                           \
        "hello\r\n--not the boundary\r\n"                                                          \
        "------b\r\n"                                                                              \
        "Content-Disposition: form-data; name=\"file\"\r\n\r\n"                                    \
        "\r\n"                                                                                     \
        "------b--\r\n"

TEST(multipart_parts)
{
        const char body[] = BODY;
        size_t pos = 0;
        struct e2b_part part;
        CHECK(e2b_multipart_next(body, sizeof(body) - 1, "------b", &pos, &part) == 1);
        CHECK_STREQ(part.filename, "dir/a\"b.txt");
        CHECK(part.len == strlen("hello\r\n--not the boundary") &&
              memcmp(part.data, "hello\r\n--not the boundary", part.len) == 0);
        e2b_part_clear(&part);
        CHECK(e2b_multipart_next(body, sizeof(body) - 1, "------b", &pos, &part) == 1);
        CHECK(part.filename == NULL && part.len == 0);
        e2b_part_clear(&part);
        CHECK(e2b_multipart_next(body, sizeof(body) - 1, "------b", &pos, &part) == 0);
        /* Cut anywhere before its closing boundary, the body is malformed, never over-read. */
        for (size_t cut = 0; cut < sizeof(body) - 1 - strlen("------b--\r\n"); cut++) {
                char *copy = malloc(cut ? cut : 1);
                memcpy(copy, body, cut);
                size_t p = 0;
                int r;
                do {
                        r = e2b_multipart_next(copy, cut, "------b", &p, &part);
                        e2b_part_clear(&part);
                } while (r == 1);
                CHECK(r == -EINVAL);
                free(copy);
        }
}

TEST(metadata_filters)
{
        json_t *meta = json_pack("{s:s, s:s}", "team", "data", "a b", "x&y");
        bool m = false;
        CHECK(e2b_metadata_matches("team=data", meta, &m) == 0 && m);
        CHECK(e2b_metadata_matches("team=data&a%20b=x%26y", meta, &m) == 0 && m);
        CHECK(e2b_metadata_matches("team=ops", meta, &m) == 0 && !m);
        CHECK(e2b_metadata_matches("team=data&missing=1", meta, &m) == 0 && !m);
        CHECK(e2b_metadata_matches("team", meta, &m) == -EINVAL);
        CHECK(e2b_metadata_matches("team=%zz", meta, &m) == -EINVAL);
        CHECK(e2b_metadata_matches("", meta, &m) == 0 && m);
        json_decref(meta);
}

RUN_TESTS(T(connect_envelopes), T(multipart_boundaries), T(multipart_parts), T(metadata_filters))
