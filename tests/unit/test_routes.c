/* Unit tests for the HTTP API's route table and request-target decoding
 * (src/server/routes.c): which handler a method and raw path reach, what
 * the decoded parameters are, and the 400 / 404 / 405 answers for bad
 * escapes, NUL bytes, invalid UTF-8 in names, "..", trailing slashes and
 * methods a path does not take. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/http.h"

/* Matches method + path; returns the status, *m filled on 0. */
static unsigned match(const char *method, const char *path, struct http_match *m, char allow[64],
                      struct cage_error *msg)
{
        *msg = (struct cage_error){0};
        unsigned status = http_route_match(method, path, m, allow, msg);
        CHECK(status == 0 || msg->message[0]);
        CHECK(status != 0 || m->fn != NULL);
        return status;
}

static unsigned status_of(const char *method, const char *path)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        unsigned status = match(method, path, &m, allow, &msg);
        http_match_clear(&m);
        return status;
}

TEST(routes_reach_their_handlers)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        CHECK(match("GET", "/healthz", &m, allow, &msg) == 0);
        CHECK(m.fn == api_healthz && (m.flags & ROUTE_PUBLIC));
        http_match_clear(&m);
        CHECK(match("POST", "/v1/sandboxes", &m, allow, &msg) == 0);
        CHECK(m.fn == api_sandbox_create && (m.flags & ROUTE_JSON_BODY));
        http_match_clear(&m);
        CHECK(match("HEAD", "/v1/sandboxes/box-1", &m, allow, &msg) == 0); /* HEAD is GET */
        CHECK(m.fn == api_sandbox_get);
        CHECK_STREQ(m.name, "box-1");
        http_match_clear(&m);
        CHECK(match("PUT", "/v1/sandboxes/b/files/a/b.txt", &m, allow, &msg) == 0);
        CHECK(m.fn == api_file_put && (m.flags & ROUTE_RAW_BODY));
        CHECK_STREQ(m.name, "b");
        CHECK_STREQ(m.path, "a/b.txt");
        http_match_clear(&m);
        CHECK(match("GET", "/v1/runs/r.1_x/files/output/p.png", &m, allow, &msg) == 0);
        CHECK(m.fn == api_run_file);
        CHECK_STREQ(m.run_id, "r.1_x");
        CHECK_STREQ(m.path, "output/p.png");
        http_match_clear(&m);
        CHECK(match("GET", "/v1/pool", &m, allow, &msg) == 0);
        CHECK(m.flags & ROUTE_OPERATOR);
        http_match_clear(&m);
        CHECK(m.fn == NULL && m.name == NULL && m.path == NULL);
}

TEST(parameters_are_percent_decoded_one_by_one)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        CHECK(match("GET", "/v1/sandboxes/%62%4F%78", &m, allow, &msg) == 0);
        CHECK_STREQ(m.name, "bOx");
        http_match_clear(&m);
        /* An escaped "/" in a path stays inside its segment's bytes. */
        CHECK(match("GET", "/v1/sandboxes/b/files/a%2Fb%20c", &m, allow, &msg) == 0);
        CHECK_STREQ(m.path, "a/b c");
        http_match_clear(&m);
        /* "+" is no space in a path. */
        CHECK(match("GET", "/v1/sandboxes/b/files/a+b", &m, allow, &msg) == 0);
        CHECK_STREQ(m.path, "a+b");
        http_match_clear(&m);
        /* Literal segments are compared as sent: an escaped literal is no route. */
        CHECK(status_of("GET", "/v1/%73andboxes") == 404);
}

TEST(bad_escapes_and_nul_are_400)
{
        const char *bad[] = {
                "/v1/sandboxes/%zz",   "/v1/sandboxes/%4",           "/v1/sandboxes/%",
                "/v1/sandboxes/a%00b", "/v1/sandboxes/b/files/a%00", "/v1/sandboxes/b/files/%g0",
                "/v1/runs/%2/files/x"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                CHECK(status_of("GET", bad[i]) == 400);
}

TEST(names_are_checked_after_decoding)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        CHECK(match("GET", "/v1/sandboxes/%C3%A9t%C3%A9", &m, allow, &msg) == 400);
        CHECK(strstr(msg.message, "%C3%A9t%C3%A9") != NULL); /* quoted, not raw bytes */
        CHECK(m.name == NULL);
        CHECK(match("GET", "/v1/sandboxes/%ff%fe", &m, allow, &msg) == 400); /* not UTF-8 */
        CHECK(strstr(msg.message, "%FF%FE") != NULL);
        CHECK(match("GET", "/v1/sandboxes/a%2Fb", &m, allow, &msg) == 400);
        CHECK(match("GET", "/v1/sandboxes/-lead", &m, allow, &msg) == 400);
        CHECK(match("GET", "/v1/sandboxes/..", &m, allow, &msg) == 400);
        char name[HTTP_NAME_MAX + 32];
        snprintf(name, sizeof(name), "/v1/sandboxes/%0*d", HTTP_NAME_MAX, 0);
        CHECK(status_of("GET", name) == 0);
        snprintf(name, sizeof(name), "/v1/sandboxes/%0*d", HTTP_NAME_MAX + 1, 0);
        CHECK(status_of("GET", name) == 400);
}

TEST(paths_keep_invalid_utf8_but_refuse_dotdot)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        /* The service judges file names; the router only refuses NUL and "..". */
        CHECK(match("GET", "/v1/sandboxes/b/files/%ff.bin", &m, allow, &msg) == 0);
        CHECK(m.path && (unsigned char)m.path[0] == 0xff);
        http_match_clear(&m);
        CHECK(status_of("GET", "/v1/sandboxes/b/files/../etc/passwd") == 400);
        CHECK(status_of("GET", "/v1/sandboxes/b/files/a/%2e%2e/b") == 400);
        CHECK(status_of("GET", "/v1/sandboxes/b/files/a%2F..%2Fb") == 400);
        CHECK(status_of("GET", "/v1/sandboxes/b/files/...") == 0);
        CHECK(status_of("GET", "/v1/sandboxes/b/files/..a") == 0);
}

TEST(trailing_slashes_and_empty_segments)
{
        CHECK(status_of("GET", "/v1/sandboxes/") == 404);
        CHECK(status_of("GET", "/v1/sandboxes/b/") == 404);
        CHECK(status_of("GET", "/v1/sandboxes//logs") == 404);
        CHECK(status_of("GET", "/healthz/") == 404);
        CHECK(status_of("GET", "//healthz") == 404);
        CHECK(status_of("GET", "healthz") == 404);
        CHECK(status_of("GET", "") == 404);
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        CHECK(match("GET", "/v1/sandboxes/b/files/dir/", &m, allow, &msg) == 0);
        CHECK_STREQ(m.path, "dir/"); /* {path} takes the rest as sent */
        http_match_clear(&m);
}

TEST(method_mismatch_is_405_with_allow)
{
        struct http_match m;
        struct cage_error msg;
        char allow[64];
        CHECK(match("PATCH", "/v1/sandboxes", &m, allow, &msg) == 405);
        CHECK(strstr(allow, "POST") && strstr(allow, "GET"));
        CHECK(match("DELETE", "/healthz", &m, allow, &msg) == 405);
        CHECK_STREQ(allow, "GET");
        CHECK(match("GET", "/v1/sandboxes/b/stop", &m, allow, &msg) == 405);
        CHECK_STREQ(allow, "POST");
        CHECK(match("get", "/healthz", &m, allow, &msg) == 405); /* methods are case-sensitive */
        CHECK(match("GET", "/v1/nothing", &m, allow, &msg) == 404);
        CHECK_STREQ(allow, "");
}

TEST(too_many_segments_is_404)
{
        char path[3 * (HTTP_SEGMENTS_MAX + 2) + 64];
        size_t w = (size_t)snprintf(path, sizeof(path), "/v1/sandboxes/b/files");
        for (int i = 0; i < HTTP_SEGMENTS_MAX; i++)
                w += (size_t)snprintf(path + w, sizeof(path) - w, "/a");
        CHECK(status_of("GET", path) == 404);
}

TEST(decode_and_query)
{
        char *out = NULL;
        CHECK(http_decode("a+b%20c", 7, true, &out) == 0);
        CHECK_STREQ(out, "a b c");
        free(out);
        CHECK(http_decode("%41%", 4, false, &out) == -EINVAL);
        CHECK(http_decode("%%41", 4, false, &out) == -EINVAL);
        CHECK(http_decode("abc", 2, false, &out) == 0); /* only len bytes */
        CHECK_STREQ(out, "ab");
        free(out);
        CHECK(http_query_get("tail=10&follow", "tail", &out) == 1);
        CHECK_STREQ(out, "10");
        free(out);
        CHECK(http_query_get("tail=10&follow", "follow", &out) == 1);
        CHECK_STREQ(out, "");
        free(out);
        CHECK(http_query_get("t%61il=5", "tail", &out) == 1);
        CHECK_STREQ(out, "5");
        free(out);
        CHECK(http_query_get("tail=1%0", "tail", &out) == -EINVAL);
        CHECK(http_query_get("tail=%00", "tail", &out) == -EINVAL);
        CHECK(http_query_get("tails=1", "tail", &out) == 0);
        CHECK(http_query_get("", "tail", &out) == 0);
}

TEST(name_rules)
{
        CHECK(http_name_is_valid("a"));
        CHECK(http_name_is_valid("A.b-c_9"));
        CHECK(!http_name_is_valid(""));
        CHECK(!http_name_is_valid(".a"));
        CHECK(!http_name_is_valid("_a"));
        CHECK(!http_name_is_valid("a b"));
        CHECK(!http_name_is_valid("a/b"));
        CHECK(!http_name_is_valid("\xc3\xa9"));
}

RUN_TESTS(T(routes_reach_their_handlers), T(parameters_are_percent_decoded_one_by_one),
          T(bad_escapes_and_nul_are_400), T(names_are_checked_after_decoding),
          T(paths_keep_invalid_utf8_but_refuse_dotdot), T(trailing_slashes_and_empty_segments),
          T(method_mismatch_is_405_with_allow), T(too_many_segments_is_404), T(decode_and_query),
          T(name_rules))
