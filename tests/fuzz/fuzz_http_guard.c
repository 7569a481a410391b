/* libFuzzer target for src/server/http_guard.c: the bytes, split at the
 * first NUL, are a Host and an Origin header. Aborts on a broken
 * invariant:
 *  - the policy answers 0 or 403, and a 403 always says why (message and
 *    reason);
 *  - the Unix socket, and a build switched off, answer 0 whatever the
 *    headers;
 *  - without an Origin, a listener beyond loopback answers 0, and
 *    /healthz answers 0 on any listener;
 *  - a Host whose host part is one of the local names passes on loopback;
 *    http_host_part() writes a non-empty, NUL-terminated host that
 *    appears in its input. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "server/http.h"

#define INPUT_MAX 1024

static unsigned check(const struct http_guard *g, bool unix_socket, bool health, const char *host,
                      const char *origin)
{
        struct http_guard_request rq = {
                .unix_socket = unix_socket, .health = health, .host = host, .origin = origin};
        const char *message = NULL, *reason = NULL;
        unsigned status = http_guard_check(g, &rq, &message, &reason);
        FUZZ_CHECK(status == 0 || status == 403);
        FUZZ_CHECK((status == 403) == (message != NULL && reason != NULL));
        return status;
}

static void check_host_part(const char *host)
{
        char out[HTTP_HOST_MAX + 1];
        memset(out, 'x', sizeof(out));
        if (!http_host_part(host, out))
                return;
        size_t n = strnlen(out, sizeof(out));
        FUZZ_CHECK(n > 0 && n < sizeof(out));
        FUZZ_CHECK(strstr(host, out) != NULL);
}

static bool local(const char *hostport)
{
        char host[HTTP_HOST_MAX + 1];
        return http_host_part(hostport, host) &&
               (strcasecmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0 ||
                strcmp(host, "::1") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char buf[2 * INPUT_MAX + 2];
        size_t n = size < 2 * INPUT_MAX ? size : 2 * INPUT_MAX;
        memcpy(buf, data, n);
        buf[n] = buf[n + 1] = '\0';
        const char *host = buf, *origin = buf + strlen(buf) + 1;
        struct http_guard loop, wide;
        http_guard_init(&loop, "127.0.0.1:8080", true);
        http_guard_init(&wide, "0.0.0.0:8080", false);
        check_host_part(host);
        FUZZ_CHECK(check(&loop, true, false, host, origin) == 0);
        FUZZ_CHECK(check(&wide, false, false, host, NULL) == 0);
        FUZZ_CHECK(check(&loop, false, true, host, NULL) == 0);
        if (local(host))
                FUZZ_CHECK(check(&loop, false, false, host, NULL) == 0);
        (void)check(&loop, false, false, host, origin);
        (void)check(&wide, false, false, host, origin);
        return 0;
}
