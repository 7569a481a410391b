/* Unit tests for the HTTP server's Host / Origin policy (http_guard.c):
 * which requests a page that rebound its name to the server, or posts
 * cross-site, gets refused, and what stays open (local clients, the Unix
 * socket, health checks). */
#include <string.h>

#include "harness.h"
#include "server/http.h"

static unsigned check(const struct http_guard *g, bool unix_socket, bool health, const char *host,
                      const char *origin)
{
        struct http_guard_request rq = {
                .unix_socket = unix_socket, .health = health, .host = host, .origin = origin};
        const char *message = NULL, *reason = NULL;
        unsigned status = http_guard_check(g, &rq, &message, &reason);
        CHECK((status == 0) == (message == NULL));
        CHECK((status == 0) == (reason == NULL));
        return status;
}

TEST(loopback_listener_checks_host_and_origin)
{
        struct http_guard g;
        http_guard_init(&g, "127.0.0.2:8080", true);
        CHECK_STREQ(g.listen_host, "127.0.0.2");
        const char *ok_hosts[] = {"localhost",  "localhost:8080", "LOCALHOST:1", "127.0.0.1:8080",
                                  "[::1]:8080", "[::1]",          "127.0.0.2:9"};
        for (size_t i = 0; i < sizeof(ok_hosts) / sizeof(ok_hosts[0]); i++)
                CHECK(check(&g, false, false, ok_hosts[i], NULL) == 0);
        const char *bad_hosts[] = {"rebind.attacker.example",
                                   "rebind.attacker.example:8080",
                                   "localhost.attacker.example",
                                   "127.0.0.1.nip.io:8080",
                                   "localhost:80:80",
                                   "[::1",
                                   "[::1]x",
                                   "",
                                   ":8080",
                                   "127.0.0.3:8080"};
        for (size_t i = 0; i < sizeof(bad_hosts) / sizeof(bad_hosts[0]); i++)
                CHECK(check(&g, false, false, bad_hosts[i], NULL) == 403);
        CHECK(check(&g, false, false, NULL, NULL) == 0); /* HTTP/1.0: no browser */
        CHECK(check(&g, false, false, "localhost", "http://localhost:3000") == 0);
        CHECK(check(&g, false, false, "localhost", "https://[::1]") == 0);
        const char *bad_origins[] = {"http://rebind.attacker.example",
                                     "null",
                                     "localhost",
                                     "http://",
                                     "http:///x",
                                     "file://"};
        for (size_t i = 0; i < sizeof(bad_origins) / sizeof(bad_origins[0]); i++)
                CHECK(check(&g, false, false, "localhost", bad_origins[i]) == 403);
}

TEST(health_checks_may_use_any_host_but_not_a_foreign_origin)
{
        struct http_guard g;
        http_guard_init(&g, "127.0.0.1:8080", true);
        CHECK(check(&g, false, true, "10.0.0.5:8080", NULL) == 0);
        CHECK(check(&g, false, true, "10.0.0.5:8080", "http://evil.example") == 403);
        CHECK(check(&g, false, false, "10.0.0.5:8080", NULL) == 403);
}

TEST(unix_socket_is_out_of_a_browsers_reach)
{
        struct http_guard g;
        http_guard_init(&g, "127.0.0.1:8080", true);
        CHECK(check(&g, true, false, "evil.example", "http://evil.example") == 0);
        http_guard_init(&g, NULL, false); /* no TCP listener at all */
        CHECK_STREQ(g.listen_host, "");
        CHECK(check(&g, true, false, "evil.example", NULL) == 0);
}

TEST(wide_listener_checks_origin_only)
{
        struct http_guard g;
        http_guard_init(&g, "0.0.0.0:8080", false);
        CHECK(check(&g, false, false, "codecage.internal:8080", NULL) == 0);
        CHECK(check(&g, false, false, "codecage.internal:8080", "http://evil.example") == 403);
        CHECK(check(&g, false, false, "codecage.internal:8080", "http://localhost:8080") == 0);
}

TEST(reasons_name_the_header)
{
        struct http_guard g;
        http_guard_init(&g, "127.0.0.1:8080", true);
        struct http_guard_request host = {.host = "evil.example"};
        struct http_guard_request origin = {.host = "localhost", .origin = "http://evil.example"};
        const char *message = NULL, *reason = NULL;
        CHECK(http_guard_check(&g, &host, &message, &reason) == 403);
        CHECK_STREQ(reason, "bad_host");
        CHECK(http_guard_check(&g, &origin, &message, &reason) == 403);
        CHECK_STREQ(reason, "bad_origin");
}

RUN_TESTS(T(loopback_listener_checks_host_and_origin),
          T(health_checks_may_use_any_host_but_not_a_foreign_origin),
          T(unix_socket_is_out_of_a_browsers_reach), T(wide_listener_checks_origin_only),
          T(reasons_name_the_header))
