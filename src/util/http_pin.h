/* Requests that connect only where a check said they may: libcurl pinned to
 * addresses resolved and checked beforehand (CURLOPT_RESOLVE maps the URL's
 * host to them, and the open-socket callback refuses any other address, so
 * neither a second DNS answer nor a proxy nor a redirect followed by libcurl
 * reaches anything else), and the parts of a URL such a check needs. Shared
 * by the server's `files`-by-URL downloads (services/fetch.c) and the
 * registry client (images/registry.c), which both follow redirects
 * themselves, one checked hop at a time. */
#ifndef CODECAGE_UTIL_HTTP_PIN_H
#define CODECAGE_UTIL_HTTP_PIN_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define HTTP_PIN_ADDRS_MAX 16
#define HTTP_HOST_MAX      256

/* The checked addresses one request may connect to (ports are ignored). */
struct http_pin {
        struct sockaddr_storage addrs[HTTP_PIN_ADDRS_MAX];
        size_t n_addrs;
        struct curl_slist *resolve; /* owned; freed by http_pin_done() */
};

/* The scheme, host and port of an absolute http:// or https:// URL without
 * user information (the port is the scheme's default when absent); host is
 * as the URL writes it, an IPv6 address in brackets. -EINVAL otherwise. */
struct http_url {
        bool https;
        char host[HTTP_HOST_MAX];
        long port;
};
int http_url_parse(const char *url, struct http_url *ret);

/* Pins c to pin's addresses for host:port: sets CURLOPT_RESOLVE,
 * CURLOPT_OPENSOCKETFUNCTION/DATA (pin must outlive the transfer) and
 * CURLOPT_NOPROXY "*". -EINVAL without addresses, -ENOMEM. */
int http_pin_apply(CURL *c, struct http_pin *pin, const char *host, long port);
/* Frees what apply allocated; the pin may be applied again afterwards. */
void http_pin_done(struct http_pin *pin);

#endif
