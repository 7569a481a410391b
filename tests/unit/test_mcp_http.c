/* Unit tests for MCP's Streamable HTTP transport (src/server/mcp_http.c)
 * on a real listener of the server library, as a client sees it: the
 * Mcp-Session-Id life cycle (issued by initialize, required after,
 * another tenant's id is unknown, DELETE ends it), MCP-Protocol-Version,
 * Accept (event streams for tools/call and GET, 406 without), the JSON
 * Content-Type, the methods /mcp takes, and the Host / Origin policy
 * (http_guard.c) in front of it. Opens a service on a fresh data
 * directory; tools/call names no tool, so nothing is launched. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "server/http.h"
#include "server/jsonrpc.h"
#include "server/mcp_http.h"
#include "services/config.h"
#include "services/service.h"

#define ALICE "alice-token-0123456789"
#define BOB   "bob-token-0123456789ab"

static struct cage_config *cfg;
static struct cage_service *svc;
static struct cage_http_server *server;
static int port;
static char data_dir[] = "/tmp/test-mcp-http-XXXXXX";

static bool start(void)
{
        char text[512];
        struct cage_error err = {0};
        if (server)
                return true;
        if (!mkdtemp(data_dir))
                return false;
        snprintf(text, sizeof(text),
                 "{\"data_dir\": \"%s\", \"pool_size\": 0, \"listen\": {\"http\": "
                 "\"127.0.0.1:0\", \"unix\": null}, \"tenants\": [{\"name\": \"alice\", "
                 "\"token\": \"" ALICE "\"}, {\"name\": \"bob\", \"token\": \"" BOB "\"}]}",
                 data_dir);
        if (cage_config_parse(text, strlen(text), &cfg, &err) < 0 ||
            cage_service_open(cfg, &svc, &err) < 0 ||
            cage_http_start(cfg, svc, &server, &err) < 0) {
                fprintf(stderr, "  start: %s\n", err.message);
                return false;
        }
        const char *at = strstr(cage_http_describe(server), "127.0.0.1:");
        port = at ? atoi(at + 10) : 0;
        return port > 0;
}

struct reply {
        unsigned status;
        char head[4096]; /* status line and headers */
        char *body;
};

static int connect_server(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        struct timeval tv = {.tv_sec = 20};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Reads until end of stream, or only until `until` appears when set. */
static char *read_reply(int fd, const char *until)
{
        size_t len = 0, cap = 65536;
        char *buf = calloc(1, cap + 1);
        ssize_t n;
        while (buf && len < cap && (n = read(fd, buf + len, cap - len)) > 0) {
                len += (size_t)n;
                buf[len] = '\0';
                if (until && strstr(buf, until))
                        break;
        }
        return buf;
}

static void parse_reply(char *raw, struct reply *r)
{
        char *end = raw ? strstr(raw, "\r\n\r\n") : NULL;
        *r = (struct reply){0};
        if (!end) {
                free(raw);
                return;
        }
        snprintf(r->head, sizeof(r->head), "%.*s", (int)(end - raw), raw);
        r->status = (unsigned)atoi(raw + 9);
        r->body = strdup(end + 4);
        free(raw);
}

/* Sends one request with extra header lines (each ending in \r\n). */
static int send_request(const char *method, const char *target, const char *headers,
                        const char *body)
{
        char *req = NULL;
        int fd = connect_server();
        if (fd < 0 ||
            asprintf(&req,
                     "%s %s HTTP/1.1\r\n%s%sContent-Length: %zu\r\nConnection: close"
                     "\r\n\r\n%s",
                     method, target, strstr(headers, "Host:") ? "" : "Host: 127.0.0.1\r\n", headers,
                     body ? strlen(body) : 0, body ? body : "") < 0)
                return -1;
        (void)!write(fd, req, strlen(req));
        free(req);
        return fd;
}

static struct reply request(const char *method, const char *headers, const char *body)
{
        struct reply r = {0};
        int fd = send_request(method, "/mcp", headers, body);
        if (fd >= 0) {
                parse_reply(read_reply(fd, NULL), &r);
                close(fd);
        }
        return r;
}

static void reply_clear(struct reply *r)
{
        free(r->body);
        r->body = NULL;
}

/* The value of header name in r (case-insensitive name), in out. */
static bool header_of(const struct reply *r, const char *name, char *out, size_t n)
{
        for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, strlen(name)) == 0 && p[2 + strlen(name)] == ':') {
                        const char *v = p + 3 + strlen(name);
                        v += strspn(v, " ");
                        snprintf(out, n, "%.*s", (int)strcspn(v, "\r"), v);
                        return true;
                }
        return false;
}

static int rpc_code(const struct reply *r)
{
        json_error_t jerr;
        json_t *doc = r->body ? json_loads(r->body, 0, &jerr) : NULL;
        int code = (int)json_integer_value(json_object_get(json_object_get(doc, "error"), "code"));
        json_decref(doc);
        return code;
}

#define AUTH_A "Authorization: Bearer " ALICE "\r\n"
#define AUTH_B "Authorization: Bearer " BOB "\r\n"
#define JSON   "Content-Type: application/json\r\n"
#define INIT                                                                                       \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":" \
        "\"2025-11-25\",\"capabilities\":{}}}"
#define PING "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}"

/* Opens a session of alice; its id in id. */
static bool open_session(char id[64])
{
        struct reply r = request("POST", AUTH_A JSON, INIT);
        bool ok = r.status == 200 && header_of(&r, "Mcp-Session-Id", id, 64);
        CHECK(ok);
        CHECK(strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32);
        reply_clear(&r);
        return ok;
}

/* POST of body by alice in session id with more header lines. */
static struct reply post_in(const char *id, const char *more, const char *body)
{
        char headers[512];
        snprintf(headers, sizeof(headers), AUTH_A JSON "Mcp-Session-Id: %s\r\n%s", id, more);
        return request("POST", headers, body);
}

#define NEED_SERVER()                                                                              \
        do {                                                                                       \
                if (!start())                                                                      \
                        SKIP("cannot open a service and a listener here");                         \
        } while (0)

TEST(session_id_life_cycle)
{
        char id[64], headers[512];
        NEED_SERVER();
        if (!open_session(id))
                return;
        struct reply r = post_in(id, "", PING);
        CHECK(r.status == 200 && rpc_code(&r) == 0 && strstr(r.body, "\"result\""));
        reply_clear(&r);
        r = request("POST", AUTH_A JSON, PING); /* no id */
        CHECK(r.status == 400 && rpc_code(&r) == JSONRPC_INVALID_REQUEST);
        reply_clear(&r);
        r = post_in("0123456789abcdef0123456789abcdef", "", PING);
        CHECK(r.status == 404);
        reply_clear(&r);
        snprintf(headers, sizeof(headers), AUTH_B JSON "Mcp-Session-Id: %s\r\n", id);
        r = request("POST", headers, PING); /* another tenant's session: unknown */
        CHECK(r.status == 404);
        reply_clear(&r);
        snprintf(headers, sizeof(headers), AUTH_A "Mcp-Session-Id: %s\r\n", id);
        r = request("DELETE", headers, NULL);
        CHECK(r.status == 200);
        reply_clear(&r);
        r = post_in(id, "", PING);
        CHECK(r.status == 404);
        reply_clear(&r);
        r = request("DELETE", headers, NULL);
        CHECK(r.status == 404);
        reply_clear(&r);
}

TEST(failed_initialize_issues_no_session)
{
        NEED_SERVER();
        struct reply r = request("POST", AUTH_A JSON,
                                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}");
        char id[64];
        CHECK(r.status == 200 && rpc_code(&r) == JSONRPC_INVALID_PARAMS);
        CHECK(!header_of(&r, "Mcp-Session-Id", id, sizeof(id)));
        reply_clear(&r);
        r = request("POST", AUTH_A JSON, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x/y\"}");
        CHECK(r.status == 200 && rpc_code(&r) == JSONRPC_METHOD_NOT_FOUND);
        reply_clear(&r);
}

TEST(protocol_version_header)
{
        char id[64];
        NEED_SERVER();
        if (!open_session(id))
                return;
        struct reply r = post_in(id, "MCP-Protocol-Version: 2025-06-18\r\n", PING);
        CHECK(r.status == 200);
        reply_clear(&r);
        r = post_in(id, "MCP-Protocol-Version: 2025-03-26\r\n", PING);
        CHECK(r.status == 200);
        reply_clear(&r);
        r = post_in(id, "MCP-Protocol-Version: 2024-11-05\r\n", PING);
        CHECK(r.status == 400 && rpc_code(&r) == JSONRPC_INVALID_REQUEST);
        reply_clear(&r);
        r = post_in(id, "MCP-Protocol-Version: \r\n", PING);
        CHECK(r.status == 400);
        reply_clear(&r);
        char headers[512];
        snprintf(headers, sizeof(headers),
                 AUTH_A "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n"
                        "MCP-Protocol-Version: 1.0\r\n",
                 id);
        r = request("GET", headers, NULL);
        CHECK(r.status == 400);
        reply_clear(&r);
}

TEST(content_type_must_be_json)
{
        NEED_SERVER();
        const char *bad[] = {"", "Content-Type: text/plain\r\n",
                             "Content-Type: application/jsonx\r\n",
                             "Content-Type: application/x-www-form-urlencoded\r\n"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char headers[256];
                snprintf(headers, sizeof(headers), AUTH_A "%s", bad[i]);
                struct reply r = request("POST", headers, INIT);
                CHECK(r.status == 415);
                reply_clear(&r);
        }
        struct reply r =
                request("POST", AUTH_A "Content-Type: Application/JSON; charset=utf-8\r\n", INIT);
        CHECK(r.status == 200);
        reply_clear(&r);
}

TEST(bodies_that_are_not_one_message)
{
        char id[64];
        NEED_SERVER();
        if (!open_session(id))
                return;
        struct reply r = post_in(id, "", "{\"jsonrpc\":");
        CHECK(r.status == 400 && rpc_code(&r) == JSONRPC_PARSE_ERROR);
        reply_clear(&r);
        r = post_in(id, "", "[" PING "]");
        CHECK(r.status == 400 && rpc_code(&r) == JSONRPC_INVALID_REQUEST);
        reply_clear(&r);
        r = post_in(id, "", "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        CHECK(r.status == 202);
        reply_clear(&r);
        r = post_in(id, "", "{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}");
        CHECK(r.status == 202);
        reply_clear(&r);
}

TEST(accept_decides_stream_or_json)
{
        char id[64];
        const char *call = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":"
                           "{\"name\":\"no_such_tool\"}}";
        NEED_SERVER();
        if (!open_session(id))
                return;
        struct reply r = post_in(id, "Accept: application/json\r\n", call);
        char type[128] = "";
        CHECK(r.status == 200 && rpc_code(&r) == JSONRPC_INVALID_PARAMS);
        CHECK(header_of(&r, "Content-Type", type, sizeof(type)) &&
              strcmp(type, "application/json") == 0);
        reply_clear(&r);
        r = post_in(id, "Accept: application/json, text/event-stream\r\n", call);
        CHECK(r.status == 200);
        CHECK(header_of(&r, "Content-Type", type, sizeof(type)) &&
              strcmp(type, "text/event-stream") == 0);
        CHECK(r.body && strstr(r.body, "event: message\ndata: {") && strstr(r.body, "-32602"));
        reply_clear(&r);
        /* Other requests answer JSON whatever Accept says. */
        r = post_in(id, "Accept: text/event-stream\r\n", PING);
        CHECK(header_of(&r, "Content-Type", type, sizeof(type)) &&
              strcmp(type, "application/json") == 0);
        reply_clear(&r);
}

TEST(get_stream_needs_accept_and_is_one_per_session)
{
        char id[64], headers[512];
        NEED_SERVER();
        if (!open_session(id))
                return;
        snprintf(headers, sizeof(headers), AUTH_A "Mcp-Session-Id: %s\r\n", id);
        struct reply r = request("GET", headers, NULL);
        CHECK(r.status == 406);
        reply_clear(&r);
        snprintf(headers, sizeof(headers),
                 AUTH_A "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n", id);
        int fd = send_request("GET", "/mcp", headers, NULL);
        struct reply first;
        parse_reply(read_reply(fd, "\r\n\r\n"), &first);
        CHECK(first.status == 200 && strstr(first.head, "text/event-stream"));
        reply_clear(&first);
        r = request("GET", headers, NULL);
        CHECK(r.status == 409);
        reply_clear(&r);
        close(fd);
        r = request("GET", AUTH_A "Accept: text/event-stream\r\n", NULL);
        CHECK(r.status == 400);
        reply_clear(&r);
}

TEST(methods_and_authentication)
{
        NEED_SERVER();
        char allow[64] = "";
        struct reply r = request("PUT", AUTH_A JSON, INIT);
        CHECK(r.status == 405);
        CHECK(header_of(&r, "Allow", allow, sizeof(allow)) &&
              strcmp(allow, "GET, POST, DELETE") == 0);
        reply_clear(&r);
        r = request("POST", JSON, INIT);
        CHECK(r.status == 401);
        reply_clear(&r);
        r = request("POST", "Authorization: Bearer wrong-token-0123456789\r\n" JSON, INIT);
        CHECK(r.status == 401);
        reply_clear(&r);
        r = request("DELETE", AUTH_A, NULL);
        CHECK(r.status == 400);
        reply_clear(&r);
}

TEST(host_and_origin_guard_the_endpoint)
{
        NEED_SERVER();
        struct reply r = request("POST", "Host: rebind.attacker.example\r\n" AUTH_A JSON, INIT);
        CHECK(r.status == 403);
        reply_clear(&r);
        r = request("POST", "Origin: http://attacker.example\r\n" AUTH_A JSON, INIT);
        CHECK(r.status == 403);
        reply_clear(&r);
        r = request("POST", "Host: localhost\r\nOrigin: http://localhost\r\n" AUTH_A JSON, INIT);
        CHECK(r.status == 200);
        reply_clear(&r);
        r = request("POST", "Origin: null\r\n" AUTH_A JSON, INIT);
        CHECK(r.status == 403);
        reply_clear(&r);
}

TEST(endpoint_is_exactly_mcp)
{
        NEED_SERVER();
        CHECK(mcp_http_is_endpoint("/mcp"));
        CHECK(mcp_http_is_endpoint("/mcp?x=1"));
        CHECK(!mcp_http_is_endpoint("/mcp/"));
        CHECK(!mcp_http_is_endpoint("/mcpx"));
        CHECK(!mcp_http_is_endpoint("/MCP"));
        int fd = send_request("POST", "/mcp/", AUTH_A JSON, INIT);
        struct reply r;
        parse_reply(read_reply(fd, NULL), &r);
        close(fd);
        CHECK(r.status == 404);
        reply_clear(&r);
}

static void stop(void)
{
        char cmd[128];
        cage_http_stop(server);
        cage_service_close(svc);
        cage_config_free(cfg);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", data_dir);
        if (strncmp(data_dir, "/tmp/test-mcp-http-", 19) == 0 && !strchr(data_dir, '\''))
                (void)!system(cmd);
}

/* Last: stopping the server closes its listener (and frees the rest). */
TEST(stop_closes_the_listener)
{
        if (!server)
                SKIP("no server was started");
        stop();
        int fd = connect_server();
        CHECK(fd < 0);
        if (fd >= 0)
                close(fd);
}

RUN_TESTS(T(session_id_life_cycle), T(failed_initialize_issues_no_session),
          T(protocol_version_header), T(content_type_must_be_json),
          T(bodies_that_are_not_one_message), T(accept_decides_stream_or_json),
          T(get_stream_needs_accept_and_is_one_per_session), T(methods_and_authentication),
          T(host_and_origin_guard_the_endpoint), T(endpoint_is_exactly_mcp),
          T(stop_closes_the_listener))
