/* The Host / Origin policy of every HTTP route (/v1, /mcp, /healthz)
 * alike (docs/API.md, "DNS rebinding"): where a request on a TCP listener
 * says it was sent and where it comes from. Pure functions of header
 * values, so the unit test reaches them without a server.
 *
 *  - The Unix socket is out of a browser's reach: nothing is checked.
 *  - TCP, any listener: a request with an `Origin` header (browsers send
 *    one with every cross-origin request and every POST) must come from
 *    localhost, 127.0.0.1, [::1] or the host of listen.http, any port;
 *    anything else, "null" included, is 403. codecage serves no page, so
 *    no legitimate browser request comes from elsewhere.
 *  - TCP on a loopback address (where no token may be needed): `Host`,
 *    when present, must name one of those hosts too, so a page whose name
 *    was rebound to 127.0.0.1 cannot reach the API. /healthz and /readyz are
 *    exempt from this one check, so health checkers may address the server by any
 *    name: it runs nothing and tells only that the server is up and its
 *    version.
 *  - A listener beyond loopback requires bearer tokens (config.c), which a
 *    rebinding page cannot know: its Host is not checked.
 *
 * Builds made with -Dunsafe_debug=true switch the whole policy off when
 * CODECAGE_DEBUG_DISABLE names "http-host", so the security suite can show
 * it is what stops the attack; normal builds have no such switch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http.h"
#include "util/cleanup.h"

/* The host of "host[:port]" / "[v6]:port" into out; false when malformed. */
bool http_host_part(const char *hostport, char out[HTTP_HOST_MAX + 1])
{
        const char *end;
        if (hostport[0] == '[') {
                end = strchr(hostport, ']');
                if (!end || (end[1] && end[1] != ':'))
                        return false;
                hostport++;
        } else {
                end = strchr(hostport, ':');
                if (!end)
                        end = hostport + strlen(hostport);
                else if (strchr(end + 1, ':'))
                        return false;
        }
        size_t n = (size_t)(end - hostport);
        if (n == 0 || n > HTTP_HOST_MAX)
                return false;
        memcpy(out, hostport, n);
        out[n] = '\0';
        return true;
}

static bool host_allowed(const struct http_guard *g, const char *hostport)
{
        static const char *const local[] = {"localhost", "127.0.0.1", "::1"};
        char host[HTTP_HOST_MAX + 1];
        if (!http_host_part(hostport, host))
                return false;
        for (size_t i = 0; i < ELEMENTSOF(local); i++)
                if (strcasecmp(host, local[i]) == 0)
                        return true;
        return g->listen_host[0] && strcasecmp(host, g->listen_host) == 0;
}

/* "scheme://host[:port]" with an allowed host. */
static bool origin_allowed(const struct http_guard *g, const char *origin)
{
        const char *p = strstr(origin, "://");
        char hostport[HTTP_HOST_MAX + 8];
        if (!p)
                return false;
        p += 3;
        size_t n = strcspn(p, "/?#");
        if (n == 0 || n >= sizeof(hostport))
                return false;
        memcpy(hostport, p, n);
        hostport[n] = '\0';
        return host_allowed(g, hostport);
}

static bool switched_off(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "http-host"))
                return true;
#endif
        return false;
}

void http_guard_init(struct http_guard *g, const char *listen_http, bool loopback)
{
        *g = (struct http_guard){.loopback = loopback, .off = switched_off()};
        if (!listen_http || !http_host_part(listen_http, g->listen_host))
                g->listen_host[0] = '\0';
}

unsigned http_guard_check(const struct http_guard *g, const struct http_guard_request *rq,
                          const char **message, const char **reason)
{
        if (g->off || rq->unix_socket)
                return 0;
        if (rq->origin && !origin_allowed(g, rq->origin)) {
                *reason = "bad_origin";
                *message = "forbidden Origin: this server does not answer requests made by web "
                           "pages of other sites";
                return 403;
        }
        if (g->loopback && !rq->health && rq->host && !host_allowed(g, rq->host)) {
                *reason = "bad_host";
                *message = "forbidden Host: this server answers only requests addressed to "
                           "localhost, 127.0.0.1, [::1] or its listen address (DNS rebinding "
                           "protection)";
                return 403;
        }
        return 0;
}
