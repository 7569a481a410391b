/* libcurl pinned to checked addresses; see http_pin.h. */
#include "http_pin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESOLVE_MAX (HTTP_HOST_MAX + 16 + HTTP_PIN_ADDRS_MAX * (INET6_ADDRSTRLEN + 3))

int http_url_parse(const char *url, struct http_url *ret)
{
        CURLU *u = curl_url();
        char *scheme = NULL, *user = NULL, *host = NULL, *port = NULL;
        int r = -EINVAL;
        if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0) &&
            curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_NO_USER &&
            curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
            strlen(host) < sizeof(ret->host) &&
            curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
                ret->https = strcmp(scheme, "https") == 0;
                snprintf(ret->host, sizeof(ret->host), "%s", host);
                ret->port = strtol(port, NULL, 10);
                r = ret->port > 0 && ret->port < 65536 ? 0 : -EINVAL;
        }
        curl_free(scheme);
        curl_free(user);
        curl_free(host);
        curl_free(port);
        curl_url_cleanup(u);
        return r;
}

static bool same_address(const struct sockaddr *a, const struct sockaddr_storage *b)
{
        if (a->sa_family != b->ss_family)
                return false;
        if (a->sa_family == AF_INET)
                return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                              &((const struct sockaddr_in *)b)->sin_addr,
                              sizeof(struct in_addr)) == 0;
        return a->sa_family == AF_INET6 &&
               memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Refuses a connection to anything but the pinned addresses. */
static curl_socket_t on_open(void *data, curlsocktype purpose, struct curl_sockaddr *a)
{
        const struct http_pin *pin = data;
        (void)purpose;
        for (size_t i = 0; i < pin->n_addrs; i++)
                if (same_address(&a->addr, &pin->addrs[i]))
                        return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return CURL_SOCKET_BAD;
}

/* "host:port:addr,[v6addr],..." for CURLOPT_RESOLVE. */
static int resolve_entry(const struct http_pin *pin, const char *host, long port, char *out,
                         size_t size)
{
        size_t len = (size_t)snprintf(out, size, "%s:%ld:", host, port);
        for (size_t i = 0; i < pin->n_addrs && len < size; i++) {
                const struct sockaddr_storage *ss = &pin->addrs[i];
                bool v6 = ss->ss_family == AF_INET6;
                char text[INET6_ADDRSTRLEN];
                const void *bytes = v6 ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                                       : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
                if (!inet_ntop(ss->ss_family, bytes, text, sizeof(text)))
                        return -EINVAL;
                len += (size_t)snprintf(out + len, size - len, "%s%s%s%s", i ? "," : "",
                                        v6 ? "[" : "", text, v6 ? "]" : "");
        }
        return len < size ? 0 : -ENAMETOOLONG;
}

int http_pin_apply(CURL *c, struct http_pin *pin, const char *host, long port)
{
        char entry[RESOLVE_MAX];
        http_pin_done(pin);
        if (pin->n_addrs == 0 || pin->n_addrs > HTTP_PIN_ADDRS_MAX)
                return -EINVAL;
        int r = resolve_entry(pin, host, port, entry, sizeof(entry));
        if (r < 0)
                return r;
        if (!(pin->resolve = curl_slist_append(NULL, entry)))
                return -ENOMEM;
        curl_easy_setopt(c, CURLOPT_RESOLVE, pin->resolve);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, pin);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        return 0;
}

void http_pin_done(struct http_pin *pin)
{
        curl_slist_free_all(pin->resolve);
        pin->resolve = NULL;
}
