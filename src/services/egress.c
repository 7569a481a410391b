/* The egress proxy; see egress.h for the model.
 *
 * Structure: struct cage_egress owns one acceptor thread that waits (epoll)
 * on every sandbox's listening socket and pid 1's pidfd. An accepted client
 * gets a thread of its own (small stack) that reads requests, checks them,
 * connects and relays: plain HTTP request by request with the framing of
 * egress_http.c (so each request is checked and nothing is smuggled past the
 * check), CONNECT as a tunnel after the TLS ClientHello's SNI was checked.
 *
 * Locking: eg->lock guards the sandbox list, each sandbox's connection list
 * and counts, and every connection's fds while they are published there;
 * teardown shuts those fds down (never closes them) so a blocked thread
 * wakes up, and the thread closes its own fds after unpublishing them. */
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "services/audit.h"
#include "services/egress_http.h"
#include "services/metrics.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/http_pin.h"

#define CONN_STACK_BYTES (256 * 1024)
#define CONNS_TOTAL_MAX  4096
#define RBUF_BYTES       (EGRESS_HTTP_HEAD_MAX + 16 * 1024)
#define PUMP_BYTES       (32 * 1024)
#define HELLO_MAX        (16384 + 5)
#define LISTEN_BACKLOG   64
#define REASON_BYTES     640
#define ACCEPT_BATCH     32

/* Protections the unsafe debug build can switch off (CODECAGE_DEBUG_DISABLE),
 * so the security suite can show each one is what stops its attack. */
enum {
        DEBUG_POLICY = 1 << 0,  /* "egress-policy": every host allowed */
        DEBUG_ADDRESS = 1 << 1, /* "egress-address": resolved addresses unchecked */
        DEBUG_SNI = 1 << 2,     /* "egress-sni" */
        DEBUG_RECHECK = 1 << 3, /* "egress-recheck": first request only */
        DEBUG_LIMITS = 1 << 4,  /* "egress-limits" */
};

enum watch_kind { WATCH_LISTEN, WATCH_PID };

struct egress_sandbox;

struct watch {
        enum watch_kind kind;
        struct egress_sandbox *sbx;
};

struct egress_conn {
        struct egress_sandbox *sbx;
        int client, upstream; /* published under eg->lock */
        struct egress_conn *next;
        uint64_t sent, received; /* of the current request or tunnel */
        bool over_limit;
};

struct egress_sandbox {
        struct cage_egress *eg;
        unsigned refs; /* under eg->lock */
        int pidfd, listen_fd;
        struct watch w_listen, w_pid;
        struct egress_allowlist al;
        char *tenant, *sandbox, *phase;
        json_t *labels;
        unsigned n_conns;
        _Atomic uint64_t bytes;
        bool closed;
        struct egress_conn *conns;
        struct egress_sandbox *next;
};

struct cage_egress {
        const struct cage_config_network *_Atomic cfg; /* swapped on reload */
        struct cage_audit *audit;
        pthread_mutex_t lock;
        pthread_cond_t idle; /* total_conns dropped */
        int epfd, wake_fd;
        pthread_t acceptor;
        bool acceptor_running, stop;
        struct egress_sandbox *list;
        unsigned total_conns;
        unsigned debug;
};

static unsigned debug_switches(void)
{
        unsigned d = 0;
#ifdef CODECAGE_UNSAFE_DEBUG
        static const struct {
                const char *name;
                unsigned bit;
        } names[] = {{"egress-policy", DEBUG_POLICY},
                     {"egress-address", DEBUG_ADDRESS},
                     {"egress-sni", DEBUG_SNI},
                     {"egress-recheck", DEBUG_RECHECK},
                     {"egress-limits", DEBUG_LIMITS}};
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        for (size_t i = 0; off && i < sizeof(names) / sizeof(names[0]); i++)
                if (strstr(off, names[i].name))
                        d |= names[i].bit;
#endif
        return d;
}

/* ---- the checks ------------------------------------------------------------------- */

static void decide(const struct cage_config_network *cfg, const struct egress_allowlist *al,
                   const char *host, size_t len, uint16_t port, bool policy_off,
                   struct egress_decision *d)
{
        egress_decide(al, host, len, port, d);
        if (!d->allowed && policy_off) {
                bool is_addr = false;
                if (egress_host_canonical(host, len, d->host, &is_addr, &d->addr) == 0) {
                        d->allowed = true;
                        d->is_addr = is_addr;
                }
        }
        (void)cfg;
}

static int check_address(const struct cage_config_network *cfg, const struct egress_decision *d,
                         const struct egress_addr *a, bool unchecked, char *reason,
                         size_t reason_len)
{
        const char *class = NULL;
        if (unchecked ||
            egress_address_allowed(a, cfg->allow_private.rules, cfg->allow_private.n, &class))
                return 0;
        char text[64];
        egress_addr_format(a, text, sizeof(text));
        if (d->is_addr)
                snprintf(reason, reason_len, "%s is a %s address, which this server does not allow",
                         text, class);
        else
                snprintf(reason, reason_len,
                         "\"%s\" resolves to %s, a %s address, which this server does not allow",
                         d->host, text, class);
        return -EPERM;
}

static int resolve_checked(const struct cage_config_network *cfg, struct egress_target *t,
                           bool unchecked, char *reason, size_t reason_len)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int g = getaddrinfo(t->decision.host, NULL, &hints, &res);
        if (g != 0) {
                snprintf(reason, reason_len, "\"%s\" does not resolve (%s)", t->decision.host,
                         gai_strerror(g));
                return -EHOSTUNREACH;
        }
        int r = 0;
        for (struct addrinfo *ai = res; ai && r == 0; ai = ai->ai_next) {
                struct egress_addr a;
                if (egress_addr_from_sockaddr(ai->ai_addr, &a) < 0)
                        continue;
                /* Every answer is checked: one private address among public
                 * ones refuses the name (a rebinding server mixes them). */
                r = check_address(cfg, &t->decision, &a, unchecked, reason, reason_len);
                if (r == 0 && t->n_addrs < EGRESS_ADDRS_MAX)
                        t->addrs[t->n_addrs++] = a;
        }
        freeaddrinfo(res);
        if (r == 0 && t->n_addrs == 0) {
                snprintf(reason, reason_len, "\"%s\" has no IP address", t->decision.host);
                r = -EHOSTUNREACH;
        }
        return r;
}

static int resolve_with(const struct cage_config_network *cfg, const struct egress_allowlist *al,
                        const char *host, size_t host_len, uint16_t port, unsigned debug,
                        struct egress_target *t, char *reason, size_t reason_len)
{
        memset(t, 0, sizeof(*t));
        t->port = port;
        decide(cfg, al, host, host_len, port, debug & DEBUG_POLICY, &t->decision);
        if (!t->decision.allowed) {
                snprintf(reason, reason_len, "%s", t->decision.reason);
                return -EPERM;
        }
        if (t->decision.is_addr) {
                t->addrs[0] = t->decision.addr;
                t->n_addrs = 1;
                return check_address(cfg, &t->decision, &t->addrs[0], debug & DEBUG_ADDRESS, reason,
                                     reason_len);
        }
        return resolve_checked(cfg, t, debug & DEBUG_ADDRESS, reason, reason_len);
}

int egress_resolve(const struct cage_config_network *cfg, const struct egress_allowlist *al,
                   const char *host, size_t host_len, uint16_t port, struct egress_target *ret,
                   char *reason, size_t reason_len)
{
        return resolve_with(cfg, al, host, host_len, port, debug_switches(), ret, reason,
                            reason_len);
}

int egress_resolve_host(const struct cage_config_network *cfg, const char *host, uint16_t port,
                        bool operator_listed, struct egress_target *t, char *reason,
                        size_t reason_len)
{
        struct egress_decision *d = &t->decision;
        bool unchecked = operator_listed || (debug_switches() & DEBUG_ADDRESS);
        memset(t, 0, sizeof(*t));
        t->port = port;
        if (egress_host_canonical(host, strlen(host), d->host, &d->is_addr, &d->addr) < 0) {
                snprintf(reason, reason_len, "\"%.200s\" is not a host name or an IP address",
                         host);
                return -EPERM;
        }
        d->allowed = true;
        if (!d->is_addr)
                return resolve_checked(cfg, t, unchecked, reason, reason_len);
        t->addrs[0] = d->addr;
        t->n_addrs = 1;
        return check_address(cfg, d, &t->addrs[0], unchecked, reason, reason_len);
}

void egress_target_pin(const struct egress_target *t, struct http_pin *pin)
{
        pin->n_addrs = 0;
        for (size_t i = 0; i < t->n_addrs && i < HTTP_PIN_ADDRS_MAX; i++)
                egress_addr_to_sockaddr(&t->addrs[i], t->port, &pin->addrs[pin->n_addrs++]);
}

int egress_registry_resolve(const void *policy, const char *host, long port, bool operator_listed,
                            struct http_pin *ret, char *reason, size_t reason_len)
{
        struct egress_target t;
        if (port <= 0 || port > 65535) {
                snprintf(reason, reason_len, "port %ld is not a TCP port", port);
                return -EPERM;
        }
        int r = egress_resolve_host(policy, host, (uint16_t)port, operator_listed, &t, reason,
                                    reason_len);
        if (r == 0)
                egress_target_pin(&t, ret);
        return r;
}

static int connect_one(const struct egress_addr *a, uint16_t port, unsigned timeout_ms)
{
        struct sockaddr_storage ss;
        socklen_t len = egress_addr_to_sockaddr(a, port, &ss);
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
                int e = -errno;
                close(fd);
                return e;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        do
                n = poll(&p, 1, (int)timeout_ms);
        while (n < 0 && errno == EINTR);
        int soerr = n == 0 ? ETIMEDOUT : 0;
        socklen_t sl = sizeof(soerr);
        if (n > 0)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
                close(fd);
                return -soerr;
        }
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
}

int egress_connect(const struct egress_target *t, unsigned timeout_ms, size_t *ret_index)
{
        int r = -EHOSTUNREACH;
        for (size_t i = 0; i < t->n_addrs; i++) {
                r = connect_one(&t->addrs[i], t->port, timeout_ms);
                if (r >= 0) {
                        if (ret_index)
                                *ret_index = i;
                        return r;
                }
        }
        return r;
}

/* ---- sandboxes and connections ---------------------------------------------------- */

static void sandbox_unref_locked(struct egress_sandbox *s)
{
        if (--s->refs)
                return;
        egress_allowlist_clear(&s->al);
        free(s->tenant);
        free(s->sandbox);
        free(s->phase);
        json_decref(s->labels);
        free(s);
}

/* Stops accepting and cuts every connection (their threads finish). */
static void teardown_locked(struct egress_sandbox *s)
{
        struct cage_egress *eg = s->eg;
        if (s->closed)
                return;
        s->closed = true;
        epoll_ctl(eg->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL);
        epoll_ctl(eg->epfd, EPOLL_CTL_DEL, s->pidfd, NULL);
        close(s->listen_fd);
        close(s->pidfd);
        for (struct egress_conn *c = s->conns; c; c = c->next) {
                shutdown(c->client, SHUT_RDWR);
                if (c->upstream >= 0)
                        shutdown(c->upstream, SHUT_RDWR);
        }
        for (struct egress_sandbox **p = &eg->list; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        break;
                }
        sandbox_unref_locked(s);
}

static void conn_set_upstream(struct egress_conn *c, int fd)
{
        struct cage_egress *eg = c->sbx->eg;
        pthread_mutex_lock(&eg->lock);
        int old = c->upstream;
        c->upstream = fd;
        if (fd >= 0 && c->sbx->closed)
                shutdown(fd, SHUT_RDWR);
        pthread_mutex_unlock(&eg->lock);
        if (old >= 0)
                close(old);
}

static void conn_end(struct egress_conn *c)
{
        struct egress_sandbox *s = c->sbx;
        struct cage_egress *eg = s->eg;
        conn_set_upstream(c, -1);
        pthread_mutex_lock(&eg->lock);
        for (struct egress_conn **p = &s->conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        s->n_conns--;
        eg->total_conns--;
        pthread_cond_broadcast(&eg->idle);
        sandbox_unref_locked(s);
        pthread_mutex_unlock(&eg->lock);
        close(c->client);
        free(c);
}

/* Counts n bytes against the sandbox's budget; false once it is spent. */
static bool count_bytes(struct egress_conn *c, size_t n, bool upstream_bound)
{
        if (upstream_bound)
                c->sent += n;
        else
                c->received += n;
        uint64_t total = atomic_fetch_add(&c->sbx->bytes, n) + n;
        if (total > c->sbx->eg->cfg->max_bytes && !(c->sbx->eg->debug & DEBUG_LIMITS))
                c->over_limit = true;
        return !c->over_limit;
}

/* ---- audit ------------------------------------------------------------------------ */

static void audit(struct egress_sandbox *s, enum cage_audit_event ev, json_t *fields)
{
        if (fields && s->phase)
                json_object_set_new(fields, "phase", json_string(s->phase));
        if (s->eg->audit && fields)
                (void)cage_audit_record(s->eg->audit, ev, s->tenant, s->sandbox, s->labels, fields,
                                        NULL);
        json_decref(fields);
}

static void audit_deny(struct egress_sandbox *s, const char *kind, const char *host, uint16_t port,
                       const char *reason)
{
        cage_metrics_egress(false, 0, 0);
        audit(s, CAGE_AUDIT_NETWORK_DENY,
              json_pack("{s:s, s:s, s:i, s:s}", "kind", kind, "host", host, "port", (int)port,
                        "reason", reason));
}

struct exchange {
        const char *kind; /* "http" or "connect" */
        const char *method;
        const struct egress_target *t;
        size_t addr_index;
        int status; /* HTTP status of the origin's answer, 0 for tunnels */
        int64_t start_ms;
        const char *error; /* why it ended early, or NULL */
};

static void audit_allow(struct egress_conn *c, const struct exchange *x)
{
        char addr[64] = "";
        if (x->t->n_addrs)
                egress_addr_format(&x->t->addrs[x->addr_index], addr, sizeof(addr));
        json_t *f = json_pack("{s:s, s:s, s:i, s:s, s:I, s:I, s:I}", "kind", x->kind, "host",
                              x->t->decision.host, "port", (int)x->t->port, "address", addr,
                              "bytes_sent", (json_int_t)c->sent, "bytes_received",
                              (json_int_t)c->received, "duration_ms",
                              (json_int_t)(clock_mono_ms() - x->start_ms));
        if (f && x->method)
                json_object_set_new(f, "method", json_string(x->method));
        if (f && x->status)
                json_object_set_new(f, "status", json_integer(x->status));
        if (f && (x->error || c->over_limit))
                json_object_set_new(f, "error",
                                    json_string(c->over_limit ? "the sandbox's network byte "
                                                                "limit was reached"
                                                              : x->error));
        cage_metrics_egress(true, c->sent, c->received);
        audit(c->sbx, CAGE_AUDIT_NETWORK_ALLOW, f);
}

/* ---- socket I/O ------------------------------------------------------------------- */

struct rbuf {
        char *data;
        size_t start, end;
};

static ssize_t recv_some(int fd, void *buf, size_t n)
{
        ssize_t r;
        do
                r = recv(fd, buf, n, 0);
        while (r < 0 && errno == EINTR);
        return r < 0 ? -errno : r;
}

static int send_all(int fd, const void *buf, size_t n)
{
        const char *p = buf;
        while (n) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EPIPE;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Reads more into b (compacting first); 0 at end of stream. */
static ssize_t rbuf_fill(int fd, struct rbuf *b)
{
        if (b->start == b->end)
                b->start = b->end = 0;
        if (b->end == RBUF_BYTES && b->start) {
                memmove(b->data, b->data + b->start, b->end - b->start);
                b->end -= b->start;
                b->start = 0;
        }
        if (b->end == RBUF_BYTES)
                return -ENOBUFS;
        ssize_t n = recv_some(fd, b->data + b->end, RBUF_BYTES - b->end);
        if (n > 0)
                b->end += (size_t)n;
        return n;
}

static void set_timeouts(int fd, unsigned seconds)
{
        struct timeval tv = {.tv_sec = seconds};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Sends an error answer to the sandbox's client and ends the connection.
 * Head and body go in one send: a second small write would wait for the
 * client's ACK of the first (Nagle), and a close with the client's request
 * still unread resets the connection, discarding what was not sent yet. */
static void reply_error(struct egress_conn *c, int status, const char *reason)
{
        static const struct {
                int status;
                const char *text;
        } texts[] = {{400, "Bad Request"},     {403, "Forbidden"},   {413, "Content Too Large"},
                     {501, "Not Implemented"}, {502, "Bad Gateway"}, {504, "Gateway Timeout"}};
        const char *text = "Error";
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
                if (texts[i].status == status)
                        text = texts[i].text;
        char body[REASON_BYTES + 64], msg[sizeof(body) + 256];
        int blen = snprintf(body, sizeof(body), "codecage egress proxy: %s\n", reason);
        if (blen < 0)
                return;
        if (blen >= (int)sizeof(body))
                blen = (int)sizeof(body) - 1;
        int n = snprintf(msg, sizeof(msg),
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         "Content-Length: %d\r\nConnection: close\r\n"
                         "X-Codecage-Egress: denied\r\n\r\n%s",
                         status, text, blen, body);
        if (n > 0 && n < (int)sizeof(msg))
                (void)send_all(c->client, msg, (size_t)n);
}

/* ---- relaying bodies -------------------------------------------------------------- */

/* Copies exactly n bytes from src (buffered b first) to dst. */
static int relay_length(struct egress_conn *c, int src, struct rbuf *b, int dst, uint64_t n,
                        bool upstream_bound)
{
        while (n) {
                if (b->start == b->end) {
                        ssize_t got = rbuf_fill(src, b);
                        if (got <= 0)
                                return got < 0 ? (int)got : -EPIPE;
                }
                size_t take = b->end - b->start;
                if (take > n)
                        take = (size_t)n;
                int r = send_all(dst, b->data + b->start, take);
                if (r < 0)
                        return r;
                b->start += take;
                n -= take;
                if (!count_bytes(c, take, upstream_bound))
                        return -EDQUOT;
        }
        return 0;
}

static int relay_chunked(struct egress_conn *c, int src, struct rbuf *b, int dst,
                         bool upstream_bound)
{
        struct egress_chunked ch = {0};
        bool done = false;
        while (!done) {
                if (b->start == b->end) {
                        ssize_t got = rbuf_fill(src, b);
                        if (got <= 0)
                                return got < 0 ? (int)got : -EPIPE;
                }
                ssize_t used =
                        egress_chunked_feed(&ch, b->data + b->start, b->end - b->start, &done);
                if (used < 0)
                        return (int)used;
                int r = send_all(dst, b->data + b->start, (size_t)used);
                if (r < 0)
                        return r;
                b->start += (size_t)used;
                if (!count_bytes(c, (size_t)used, upstream_bound))
                        return -EDQUOT;
        }
        return 0;
}

static int relay_until_close(struct egress_conn *c, int src, struct rbuf *b, int dst)
{
        for (;;) {
                if (b->start == b->end) {
                        ssize_t got = rbuf_fill(src, b);
                        if (got == 0)
                                return 0;
                        if (got < 0)
                                return (int)got;
                }
                size_t n = b->end - b->start;
                int r = send_all(dst, b->data + b->start, n);
                if (r < 0)
                        return r;
                b->start += n;
                if (!count_bytes(c, n, false))
                        return -EDQUOT;
        }
}

static int relay_body(struct egress_conn *c, enum egress_http_body kind, uint64_t length, int src,
                      struct rbuf *b, int dst, bool upstream_bound)
{
        switch (kind) {
        case EGRESS_BODY_LENGTH:
                return relay_length(c, src, b, dst, length, upstream_bound);
        case EGRESS_BODY_CHUNKED:
                return relay_chunked(c, src, b, dst, upstream_bound);
        case EGRESS_BODY_UNTIL_CLOSE:
                return relay_until_close(c, src, b, dst);
        default:
                return 0;
        }
}

/* ---- plain HTTP ------------------------------------------------------------------- */

struct http_state {
        struct rbuf in;  /* from the sandbox */
        struct rbuf out; /* from the origin */
        char up_host[EGRESS_HOST_MAX + 1];
        uint16_t up_port;
        struct egress_target target; /* of the current upstream connection */
        size_t addr_index;
        unsigned requests;
};

/* Reads the origin's answer head (forwarding 1xx heads) into *resp. */
static int read_response_head(struct egress_conn *c, struct http_state *h, bool head_req,
                              struct egress_http_response *resp)
{
        for (;;) {
                int p = egress_http_parse_response(h->out.data + h->out.start,
                                                   h->out.end - h->out.start, head_req, resp);
                if (p < 0)
                        return p;
                if (p == 0) {
                        ssize_t got = rbuf_fill(c->upstream, &h->out);
                        if (got <= 0)
                                return got < 0 ? (int)got : -EPIPE;
                        continue;
                }
                if (resp->status == 101)
                        return -EPROTO; /* Upgrade was not forwarded: no switch may happen */
                int r = send_all(c->client, h->out.data + h->out.start, resp->head_len);
                if (r < 0)
                        return r;
                h->out.start += resp->head_len;
                if (!count_bytes(c, resp->head_len, false))
                        return -EDQUOT;
                if (resp->status >= 200)
                        return 0;
        }
}

/* Whether a kept-alive origin connection is still open and quiet: an
 * origin that closed it (or sent something unasked) is not reused. */
static bool upstream_idle(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, 0) == 0;
}

/* Makes sure c->upstream is a checked connection to req's host and port:
 * the policy is decided for every request, the connection reused only for
 * the same destination. */
static int http_upstream(struct egress_conn *c, struct http_state *h,
                         const struct egress_http_request *req, char *reason, size_t reason_len,
                         int *status)
{
        struct cage_egress *eg = c->sbx->eg;
        struct egress_target t;
        unsigned debug = eg->debug;
        if (h->requests > 1 && (debug & DEBUG_RECHECK))
                debug |= DEBUG_POLICY | DEBUG_ADDRESS;
        int r = resolve_with(eg->cfg, &c->sbx->al, req->host, strlen(req->host), req->port, debug,
                             &t, reason, reason_len);
        if (r < 0) {
                *status = r == -EPERM ? 403 : 502;
                return r;
        }
        if (c->upstream >= 0 && h->up_port == req->port &&
            strcmp(h->up_host, t.decision.host) == 0 && upstream_idle(c->upstream))
                return 0;
        int fd = egress_connect(&t, eg->cfg->connect_timeout_s * 1000u, &h->addr_index);
        if (fd < 0) {
                snprintf(reason, reason_len, "cannot connect to %s:%u (%s)", t.decision.host,
                         (unsigned)req->port, strerror(-fd));
                *status = fd == -ETIMEDOUT ? 504 : 502;
                return fd;
        }
        set_timeouts(fd, eg->cfg->idle_timeout_s);
        conn_set_upstream(c, fd);
        h->out.start = h->out.end = 0;
        h->target = t;
        snprintf(h->up_host, sizeof(h->up_host), "%s", t.decision.host);
        h->up_port = req->port;
        return 0;
}

/* Sends the request to the origin and its answer back. */
static int http_forward(struct egress_conn *c, struct http_state *h,
                        const struct egress_http_request *req, bool *keep_alive, struct exchange *x)
{
        _cleanup_free_ char *head = NULL;
        size_t head_len;
        if (egress_http_origin_head(req, true, &head, &head_len) < 0)
                return -ENOMEM;
        if (req->expect_continue && send_all(c->client, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
                return -EPIPE;
        int r = send_all(c->upstream, head, head_len);
        if (r == 0 && !count_bytes(c, head_len, true))
                r = -EDQUOT;
        if (r == 0)
                r = relay_body(c, req->body, req->content_length, c->client, &h->in, c->upstream,
                               true);
        struct egress_http_response resp;
        bool head_req = strcmp(req->method, "HEAD") == 0;
        if (r == 0)
                r = read_response_head(c, h, head_req, &resp);
        if (r < 0)
                return r;
        x->status = resp.status;
        r = relay_body(c, resp.body, resp.content_length, c->upstream, &h->out, c->client, false);
        *keep_alive = r == 0 && req->keep_alive && resp.keep_alive;
        if (!resp.keep_alive || h->out.start != h->out.end)
                conn_set_upstream(c, -1); /* the origin closes, or sent more than it said */
        return r;
}

/* One request: check, connect, forward; false when the connection ends. */
static bool http_exchange(struct egress_conn *c, struct http_state *h,
                          const struct egress_http_request *req)
{
        char reason[REASON_BYTES] = "";
        int status = 0;
        struct exchange x = {.kind = "http", .method = req->method, .start_ms = clock_mono_ms()};
        c->sent = c->received = 0;
        h->requests++;
        int r = http_upstream(c, h, req, reason, sizeof(reason), &status);
        if (r == -EPERM) {
                audit_deny(c->sbx, "http", req->host, req->port, reason);
                reply_error(c, status, reason);
                return false;
        }
        if (r < 0) {
                struct egress_target t = {.port = req->port}; /* no address was used */
                snprintf(t.decision.host, sizeof(t.decision.host), "%.253s", req->host);
                x.t = &t;
                x.error = reason;
                audit_allow(c, &x);
                reply_error(c, status, reason);
                return false;
        }
        x.t = &h->target;
        x.addr_index = h->addr_index;
        bool keep_alive = false;
        r = http_forward(c, h, req, &keep_alive, &x);
        if (r < 0)
                x.error = r == -EDQUOT ? NULL : strerror(-r);
        audit_allow(c, &x);
        if (r == -EDQUOT && x.status == 0)
                reply_error(c, 403, "this sandbox's network byte limit was reached");
        return r == 0 && keep_alive;
}

/* ---- CONNECT tunnels -------------------------------------------------------------- */

/* Reads the client's first bytes through the tunnel until the TLS
 * ClientHello is complete, and checks that its SNI names the host. */
static int check_client_hello(struct egress_conn *c, struct rbuf *b,
                              const struct egress_decision *d, char *reason, size_t reason_len)
{
        char sni[EGRESS_HOST_MAX + 2];
        for (;;) {
                size_t len = b->end - b->start;
                int r = egress_tls_sni((const uint8_t *)b->data + b->start, len, sni, sizeof(sni));
                if (r == -EAGAIN && len < HELLO_MAX) {
                        ssize_t got = rbuf_fill(c->client, b);
                        if (got > 0)
                                continue;
                        snprintf(reason, reason_len,
                                 "the tunnel to \"%s\" ended before a TLS ClientHello", d->host);
                        return -EPROTO;
                }
                if (r < 0) {
                        snprintf(reason, reason_len,
                                 "the tunnel to \"%s\" does not start with a TLS ClientHello (only "
                                 "TLS may pass through CONNECT)",
                                 d->host);
                        return -EPROTO;
                }
                if (r == 0) {
                        if (d->is_addr)
                                return 0; /* clients send no SNI for an IP address */
                        snprintf(reason, reason_len,
                                 "the TLS ClientHello names no server (SNI); it must name \"%s\"",
                                 d->host);
                        return -EPERM;
                }
                /* A name (or, for an IP-literal CONNECT, the same address
                 * spelt as one): an origin serving several names behind one
                 * allowed address would otherwise serve any of them. */
                char canon[EGRESS_HOST_MAX + 1];
                bool is_addr;
                struct egress_addr a;
                if (egress_host_canonical(sni, strlen(sni), canon, &is_addr, &a) == 0 &&
                    strcmp(canon, d->host) == 0)
                        return 0;
                snprintf(reason, reason_len,
                         "the TLS server name \"%.100s\" does not match the CONNECT host \"%s\"",
                         sni, d->host);
                return -EPERM;
        }
}

struct pipe_dir {
        int from, to;
        char buf[PUMP_BYTES];
        size_t len, off;
        bool eof;
        bool upstream_bound;
};

/* Moves what is readable/writable in one direction; -errno on failure. */
static int pump_step(struct egress_conn *c, struct pipe_dir *d, short revents_from,
                     short revents_to)
{
        if (d->len == 0 && !d->eof && (revents_from & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t n = recv_some(d->from, d->buf, sizeof(d->buf));
                if (n < 0 && n != -EAGAIN)
                        return (int)n;
                if (n == 0) {
                        d->eof = true;
                        shutdown(d->to, SHUT_WR);
                } else if (n > 0) {
                        d->len = (size_t)n;
                        d->off = 0;
                        if (!count_bytes(c, (size_t)n, d->upstream_bound))
                                return -EDQUOT;
                }
        }
        if (d->len && (revents_to & POLLOUT)) {
                ssize_t w = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (w > 0) {
                        d->off += (size_t)w;
                        if (d->off == d->len)
                                d->len = d->off = 0;
                }
        }
        return 0;
}

static int pump(struct egress_conn *c, struct pipe_dir *up, struct pipe_dir *down)
{
        int idle_ms = (int)c->sbx->eg->cfg->idle_timeout_s * 1000;
        fcntl(c->client, F_SETFL, fcntl(c->client, F_GETFL) | O_NONBLOCK);
        fcntl(c->upstream, F_SETFL, fcntl(c->upstream, F_GETFL) | O_NONBLOCK);
        while (!(up->eof && down->eof && !up->len && !down->len)) {
                struct pollfd p[2] = {{.fd = c->client}, {.fd = c->upstream}};
                if (!up->len && !up->eof)
                        p[0].events |= POLLIN;
                if (!down->len && !down->eof)
                        p[1].events |= POLLIN;
                if (up->len)
                        p[1].events |= POLLOUT;
                if (down->len)
                        p[0].events |= POLLOUT;
                /* poll() reports POLLHUP whatever was asked: a socket shut
                 * down both ways that we wait nothing of would wake it at
                 * once, again and again, and the idle timeout never come. */
                for (int i = 0; i < 2; i++)
                        if (!p[i].events)
                                p[i].fd = -1;
                int n = poll(p, 2, idle_ms);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n == 0 ? -ETIMEDOUT : -errno;
                if ((p[0].revents | p[1].revents) & POLLNVAL)
                        return -EBADF;
                int r = pump_step(c, up, p[0].revents, p[1].revents);
                if (r == 0)
                        r = pump_step(c, down, p[1].revents, p[0].revents);
                if (r < 0)
                        return r;
                if ((p[0].revents & POLLERR) || (p[1].revents & POLLERR))
                        return -ECONNRESET;
        }
        return 0;
}

static void tunnel(struct egress_conn *c, struct rbuf *in, const struct egress_http_request *req)
{
        struct cage_egress *eg = c->sbx->eg;
        char reason[REASON_BYTES] = "";
        struct egress_target t;
        struct exchange x = {.kind = "connect", .t = &t, .start_ms = clock_mono_ms()};
        int r = resolve_with(eg->cfg, &c->sbx->al, req->host, strlen(req->host), req->port,
                             eg->debug, &t, reason, sizeof(reason));
        if (r < 0) {
                if (r == -EPERM)
                        audit_deny(c->sbx, "connect", req->host, req->port, reason);
                reply_error(c, r == -EPERM ? 403 : 502, reason);
                return;
        }
        int fd = egress_connect(&t, eg->cfg->connect_timeout_s * 1000u, &x.addr_index);
        if (fd < 0) {
                snprintf(reason, sizeof(reason), "cannot connect to %s:%u (%s)", t.decision.host,
                         (unsigned)t.port, strerror(-fd));
                x.error = reason;
                audit_allow(c, &x);
                reply_error(c, fd == -ETIMEDOUT ? 504 : 502, reason);
                return;
        }
        conn_set_upstream(c, fd);
        static const char established[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        if (send_all(c->client, established, sizeof(established) - 1) < 0)
                return;
        if (!(eg->debug & DEBUG_SNI)) {
                r = check_client_hello(c, in, &t.decision, reason, sizeof(reason));
                if (r < 0) {
                        audit_deny(c->sbx, "connect", t.decision.host, t.port, reason);
                        return; /* after "200", closing is the only answer left */
                }
        }
        /* What the client sent so far (the ClientHello) goes first. */
        size_t pending = in->end - in->start;
        r = send_all(c->upstream, in->data + in->start, pending);
        if (r == 0 && !count_bytes(c, pending, true))
                r = -EDQUOT;
        if (r == 0) {
                _cleanup_free_ struct pipe_dir *dirs = calloc(2, sizeof(*dirs));
                if (!dirs)
                        return;
                dirs[0] = (struct pipe_dir){
                        .from = c->client, .to = c->upstream, .upstream_bound = true};
                dirs[1] = (struct pipe_dir){.from = c->upstream, .to = c->client};
                r = pump(c, &dirs[0], &dirs[1]);
        }
        /* A reset or broken pipe is how many clients end a tunnel. */
        if (r < 0 && r != -EDQUOT && r != -ECONNRESET && r != -EPIPE)
                x.error = strerror(-r);
        audit_allow(c, &x);
}

/* ---- one client connection -------------------------------------------------------- */

static void serve_client(struct egress_conn *c, struct http_state *h)
{
        struct cage_egress *eg = c->sbx->eg;
        set_timeouts(c->client, eg->cfg->idle_timeout_s);
        for (;;) {
                struct egress_http_request req;
                char reason[EGRESS_HTTP_REASON_MAX] = "";
                int p;
                while ((p = egress_http_parse_request(h->in.data + h->in.start,
                                                      h->in.end - h->in.start, &req, reason,
                                                      sizeof(reason))) == 0) {
                        if (rbuf_fill(c->client, &h->in) <= 0)
                                return; /* closed, or idle too long */
                }
                if (p < 0) {
                        audit_deny(c->sbx, "http", "", 0, reason);
                        reply_error(c, p == -ENOTSUP ? 501 : p == -E2BIG ? 413 : 400, reason);
                        return;
                }
                h->in.start += req.head_len;
                if (req.connect) {
                        tunnel(c, &h->in, &req);
                        return;
                }
                if (!http_exchange(c, h, &req))
                        return;
        }
}

static void *conn_main(void *arg)
{
        struct egress_conn *c = arg;
        struct http_state *h = calloc(1, sizeof(*h));
        if (h) {
                h->in.data = malloc(RBUF_BYTES);
                h->out.data = malloc(RBUF_BYTES);
                if (h->in.data && h->out.data)
                        serve_client(c, h);
                free(h->in.data);
                free(h->out.data);
                free(h);
        }
        conn_end(c);
        return NULL;
}

/* ---- accepting -------------------------------------------------------------------- */

/* On the acceptor thread: the answer must never block (a new socket's
 * send buffer takes the short 403 whole). */
static void refuse_client(struct egress_sandbox *s, int fd, const char *reason)
{
        struct egress_conn tmp = {.sbx = s, .client = fd, .upstream = -1};
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        audit_deny(s, "connect", "", 0, reason);
        reply_error(&tmp, 403, reason);
        /* The request already sent, unread, would turn the close into a
         * reset, which may reach the client before it read the answer:
         * read what is there (without waiting; bounded) and end with FIN. */
        shutdown(fd, SHUT_WR);
        char sink[4096];
        for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
                ;
        close(fd);
}

/* With eg->lock held: a connection for client fd, or NULL when a limit
 * says no (*why set). */
static struct egress_conn *admit_locked(struct egress_sandbox *s, int fd, const char **why)
{
        struct cage_egress *eg = s->eg;
        bool limits = !(eg->debug & DEBUG_LIMITS);
        if (limits && s->n_conns >= eg->cfg->max_connections) {
                *why = "this sandbox has too many open network connections (the server's "
                       "network.max_connections)";
                return NULL;
        }
        if (limits && atomic_load(&s->bytes) >= eg->cfg->max_bytes) {
                *why = "this sandbox's network byte limit was reached (the server's "
                       "network.max_bytes)";
                return NULL;
        }
        if (eg->total_conns >= CONNS_TOTAL_MAX) {
                *why = "the server has too many open proxy connections";
                return NULL;
        }
        struct egress_conn *c = calloc(1, sizeof(*c));
        if (!c) {
                *why = "out of memory";
                return NULL;
        }
        *c = (struct egress_conn){.sbx = s, .client = fd, .upstream = -1, .next = s->conns};
        s->conns = c;
        s->n_conns++;
        s->refs++;
        eg->total_conns++;
        return c;
}

/* Accepts what is pending, at most ACCEPT_BATCH at a time so that one
 * sandbox cannot keep the acceptor to itself (epoll reports the rest). */
static void accept_clients(struct egress_sandbox *s)
{
        struct cage_egress *eg = s->eg;
        for (int i = 0; i < ACCEPT_BATCH; i++) {
                int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        return;
                const char *why = NULL;
                pthread_mutex_lock(&eg->lock);
                struct egress_conn *c = admit_locked(s, fd, &why);
                pthread_mutex_unlock(&eg->lock);
                if (!c) {
                        refuse_client(s, fd, why);
                        continue;
                }
                pthread_attr_t attr;
                pthread_t t;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&attr, CONN_STACK_BYTES);
                if (pthread_create(&t, &attr, conn_main, c) != 0)
                        conn_end(c);
                pthread_attr_destroy(&attr);
        }
}

static void *acceptor_main(void *arg)
{
        struct cage_egress *eg = arg;
        for (;;) {
                struct epoll_event evs[16];
                struct egress_sandbox *held[16];
                int n = epoll_wait(eg->epfd, evs, 16, -1);
                if (n < 0 && errno != EINTR)
                        break;
                pthread_mutex_lock(&eg->lock);
                bool stop = eg->stop;
                /* A reference on every sandbox of the batch first: tearing
                 * one down must not free it under a later event of the
                 * same batch. */
                for (int i = 0; i < n; i++) {
                        struct watch *w = evs[i].data.ptr;
                        held[i] = w ? w->sbx : NULL;
                        if (held[i])
                                held[i]->refs++;
                }
                for (int i = 0; i < n && !stop; i++) {
                        struct watch *w = evs[i].data.ptr;
                        if (!w || w->sbx->closed)
                                continue; /* the wake-up eventfd, or gone already */
                        if (w->kind == WATCH_PID) {
                                teardown_locked(w->sbx);
                                continue;
                        }
                        pthread_mutex_unlock(&eg->lock);
                        accept_clients(w->sbx);
                        pthread_mutex_lock(&eg->lock);
                }
                for (int i = 0; i < n; i++)
                        if (held[i])
                                sandbox_unref_locked(held[i]);
                pthread_mutex_unlock(&eg->lock);
                if (stop)
                        break;
        }
        return NULL;
}

/* ---- the listener inside the sandbox's network namespace ---------------------- */

struct listen_job {
        int pidfd;
        int fd; /* result, or -errno */
};

static void *listen_in_netns(void *arg)
{
        struct listen_job *j = arg;
        /* Only this short-lived thread enters the namespace; the socket it
         * creates stays bound there after the thread is gone. */
        if (setns(j->pidfd, CLONE_NEWNET) < 0) {
                j->fd = -errno;
                return NULL;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
                j->fd = -errno;
                return NULL;
        }
        struct sockaddr_in sin = {.sin_family = AF_INET,
                                  .sin_port = htons(CAGE_EGRESS_PORT),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
                j->fd = -errno;
                close(fd);
                return NULL;
        }
        j->fd = fd;
        return NULL;
}

static int listen_for(int pidfd, struct cage_error *err)
{
        struct listen_job j = {.pidfd = pidfd, .fd = -EIO};
        pthread_t t;
        int r = pthread_create(&t, NULL, listen_in_netns, &j);
        if (r != 0)
                return cage_fail(err, -r, "egress proxy: starting a thread");
        pthread_join(t, NULL);
        if (j.fd < 0)
                return cage_fail(err, j.fd, "egress proxy: listening in the sandbox's network");
        return j.fd;
}

static int sandbox_new(const struct egress_allowlist *al, const struct cage_egress_owner *o,
                       struct egress_sandbox **ret)
{
        struct egress_sandbox *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->pidfd = s->listen_fd = -1;
        s->refs = 1;
        s->al.rules = al->n ? malloc(al->n * sizeof(*al->rules)) : NULL;
        s->al.n = al->n;
        if (al->n && s->al.rules)
                memcpy(s->al.rules, al->rules, al->n * sizeof(*al->rules));
        s->tenant = o->tenant ? strdup(o->tenant) : NULL;
        s->sandbox = o->sandbox ? strdup(o->sandbox) : NULL;
        s->phase = o->phase ? strdup(o->phase) : NULL;
        s->labels = o->labels ? json_deep_copy(o->labels) : NULL;
        if ((al->n && !s->al.rules) || (o->tenant && !s->tenant) || (o->sandbox && !s->sandbox) ||
            (o->phase && !s->phase)) {
                sandbox_unref_locked(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

int cage_egress_attach(struct cage_egress *eg, int pidfd, const struct egress_allowlist *al,
                       const struct cage_egress_owner *owner, struct cage_error *err)
{
        struct egress_sandbox *s;
        if (sandbox_new(al, owner, &s) < 0)
                return cage_fail(err, -ENOMEM, "egress proxy");
        s->eg = eg;
        s->pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
        int r = s->pidfd < 0 ? cage_fail(err, -errno, "egress proxy: pidfd") : 0;
        if (r == 0 && (r = listen_for(s->pidfd, err)) >= 0) {
                s->listen_fd = r;
                r = 0;
        }
        s->w_listen = (struct watch){WATCH_LISTEN, s};
        s->w_pid = (struct watch){WATCH_PID, s};
        pthread_mutex_lock(&eg->lock);
        if (r == 0) {
                struct epoll_event el = {.events = EPOLLIN, .data.ptr = &s->w_listen};
                struct epoll_event ep = {.events = EPOLLIN, .data.ptr = &s->w_pid};
                if (epoll_ctl(eg->epfd, EPOLL_CTL_ADD, s->listen_fd, &el) < 0 ||
                    epoll_ctl(eg->epfd, EPOLL_CTL_ADD, s->pidfd, &ep) < 0)
                        r = cage_fail(err, -errno, "egress proxy: epoll");
        }
        if (r == 0) {
                s->next = eg->list;
                eg->list = s;
        } else {
                s->closed = true;
                epoll_ctl(eg->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL);
                if (s->listen_fd >= 0)
                        close(s->listen_fd);
                if (s->pidfd >= 0)
                        close(s->pidfd);
                sandbox_unref_locked(s);
        }
        pthread_mutex_unlock(&eg->lock);
        return r;
}

/* ---- open and close --------------------------------------------------------------- */

void cage_egress_set_config(struct cage_egress *eg, const struct cage_config_network *cfg)
{
        if (eg)
                eg->cfg = cfg;
}

int cage_egress_open(const struct cage_config_network *cfg, struct cage_audit *audit,
                     struct cage_egress **ret, struct cage_error *err)
{
        struct cage_egress *eg = calloc(1, sizeof(*eg));
        if (!eg)
                return cage_fail(err, -ENOMEM, "egress proxy");
        eg->cfg = cfg;
        eg->audit = audit;
        eg->debug = debug_switches();
        pthread_mutex_init(&eg->lock, NULL);
        pthread_cond_init(&eg->idle, NULL);
        eg->epfd = epoll_create1(EPOLL_CLOEXEC);
        eg->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        int r = 0;
        if (eg->epfd < 0 || eg->wake_fd < 0 ||
            epoll_ctl(eg->epfd, EPOLL_CTL_ADD, eg->wake_fd, &ev) < 0)
                r = cage_fail(err, -errno, "egress proxy: epoll");
        if (r == 0 && (r = -pthread_create(&eg->acceptor, NULL, acceptor_main, eg)) < 0)
                cage_fail(err, r, "egress proxy: starting its thread");
        eg->acceptor_running = r == 0;
        if (r < 0) {
                cage_egress_close(eg);
                return r;
        }
        *ret = eg;
        return 0;
}

struct cage_egress *cage_egress_close(struct cage_egress *eg)
{
        if (!eg)
                return NULL;
        pthread_mutex_lock(&eg->lock);
        eg->stop = true;
        pthread_mutex_unlock(&eg->lock);
        if (eg->acceptor_running) {
                uint64_t one = 1;
                (void)!write(eg->wake_fd, &one, sizeof(one));
                pthread_join(eg->acceptor, NULL);
        }
        pthread_mutex_lock(&eg->lock);
        while (eg->list)
                teardown_locked(eg->list);
        while (eg->total_conns)
                pthread_cond_wait(&eg->idle, &eg->lock);
        pthread_mutex_unlock(&eg->lock);
        if (eg->epfd >= 0)
                close(eg->epfd);
        if (eg->wake_fd >= 0)
                close(eg->wake_fd);
        pthread_mutex_destroy(&eg->lock);
        pthread_cond_destroy(&eg->idle);
        free(eg);
        return NULL;
}
