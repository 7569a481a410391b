/* Server-Sent Event streams of MCP's Streamable HTTP transport.
 *
 *   event: message
 *   data: {"jsonrpc":"2.0", ...}      (compact JSON: one line)
 *
 * Any thread pushes messages through the stream's sink (a tool call's
 * worker: progress, log messages, sampling requests, then its response).
 * The queue holds whole events, at most STREAM_QUEUE_MAX bytes (one event
 * larger than that still goes through alone): a producer past it waits
 * until the client reads, so nothing is dropped and memory stays bounded.
 * libmicrohttpd pulls on the connection's thread; while the queue is
 * empty the reader polls the client socket (a hang-up or half-close ends
 * the stream), a wake-up pipe and the server's shutdown pipe, and sends
 * ": keepalive" after STREAM_KEEPALIVE_MS of silence (which also keeps
 * MHD's idle timeout away). Events carry no ids: streams are not
 * resumable, so clients do not try to resume them. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/http.h"
#include "server/mcp.h"
#include "util/cleanup.h"
#include "util/clock.h"

#define STREAM_QUEUE_MAX    (4 * 1024 * 1024)
#define STREAM_BLOCK_SIZE   (32 * 1024)
#define STREAM_KEEPALIVE_MS 15000

static const char keepalive[] = ": keepalive\n\n";

struct event {
        struct event *next;
        size_t len, off;
        char data[];
};

struct mcp_stream {
        struct mcp_sink sink; /* first: the sink is the object */
        int refs;
        pthread_mutex_t lock;
        pthread_cond_t room; /* the reader took something, or closed */
        struct event *head, *tail;
        size_t queued;
        bool ended, closed;
        int wake[2];
        int sock_fd, shutdown_fd;
};

static struct event *event_new(const json_t *msg)
{
        static const char head[] = "event: message\ndata: ";
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return NULL;
        size_t n = strlen(text), len = sizeof(head) - 1 + n + 2;
        struct event *ev = malloc(sizeof(*ev) + len);
        if (!ev)
                return NULL;
        *ev = (struct event){.len = len};
        memcpy(ev->data, head, sizeof(head) - 1);
        memcpy(ev->data + sizeof(head) - 1, text, n);
        memcpy(ev->data + len - 2, "\n\n", 2);
        return ev;
}

/* struct mcp_sink.send */
static int stream_send(struct mcp_sink *sink, const json_t *msg)
{
        struct mcp_stream *st = (struct mcp_stream *)sink;
        struct event *ev = event_new(msg);
        if (!ev)
                return -ENOMEM;
        pthread_mutex_lock(&st->lock);
        while (!st->closed && !st->ended && st->queued > 0 &&
               st->queued + ev->len > STREAM_QUEUE_MAX)
                pthread_cond_wait(&st->room, &st->lock);
        int r = st->closed || st->ended ? -EPIPE : 0;
        if (r == 0) {
                if (st->tail)
                        st->tail->next = ev;
                else
                        st->head = ev;
                st->tail = ev;
                st->queued += ev->len;
                ev = NULL;
        }
        pthread_mutex_unlock(&st->lock);
        free(ev);
        if (r == 0)
                (void)!write(st->wake[1], "x", 1); /* a full pipe is awake already */
        return r;
}

struct mcp_stream *mcp_stream_new(int sock_fd, int shutdown_fd)
{
        struct mcp_stream *st = calloc(1, sizeof(*st));
        if (!st)
                return NULL;
        st->sink.send = stream_send;
        st->refs = 1;
        st->sock_fd = sock_fd;
        st->shutdown_fd = shutdown_fd;
        pthread_mutex_init(&st->lock, NULL);
        pthread_cond_init(&st->room, NULL);
        if (pipe2(st->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                st->wake[0] = st->wake[1] = -1;
                return mcp_stream_unref(st);
        }
        return st;
}

struct mcp_stream *mcp_stream_ref(struct mcp_stream *st)
{
        __atomic_add_fetch(&st->refs, 1, __ATOMIC_ACQ_REL);
        return st;
}

struct mcp_stream *mcp_stream_unref(struct mcp_stream *st)
{
        if (!st || __atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return NULL;
        for (struct event *ev = st->head, *next; ev; ev = next) {
                next = ev->next;
                free(ev);
        }
        for (int i = 0; i < 2; i++)
                if (st->wake[i] >= 0)
                        close(st->wake[i]);
        pthread_mutex_destroy(&st->lock);
        pthread_cond_destroy(&st->room);
        free(st);
        return NULL;
}

struct mcp_sink *mcp_stream_sink(struct mcp_stream *st)
{
        return &st->sink;
}

static void set_flag(struct mcp_stream *st, bool *flag)
{
        pthread_mutex_lock(&st->lock);
        *flag = true;
        pthread_cond_broadcast(&st->room);
        pthread_mutex_unlock(&st->lock);
        (void)!write(st->wake[1], "x", 1);
}

void mcp_stream_end(struct mcp_stream *st)
{
        set_flag(st, &st->ended);
}

void mcp_stream_close(struct mcp_stream *st)
{
        set_flag(st, &st->closed);
}

/* ---- the reader (libmicrohttpd's content callback) ------------------------------- */

/* Copies up to max queued bytes; with the lock held. */
static size_t take(struct mcp_stream *st, char *buf, size_t max)
{
        size_t w = 0;
        while (st->head && w < max) {
                struct event *ev = st->head;
                size_t n = ev->len - ev->off < max - w ? ev->len - ev->off : max - w;
                memcpy(buf + w, ev->data + ev->off, n);
                ev->off += n;
                w += n;
                if (ev->off < ev->len)
                        break;
                st->head = ev->next;
                if (!st->head)
                        st->tail = NULL;
                st->queued -= ev->len;
                free(ev);
        }
        pthread_cond_broadcast(&st->room);
        return w;
}

static int wait_event(struct mcp_stream *st, int timeout_ms)
{
        return sse_wait_event(st->sock_fd, st->wake[0], st->shutdown_fd, timeout_ms);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct mcp_stream *st = cls;
        uint64_t quiet_since = clock_mono_ms();
        for (;;) {
                pthread_mutex_lock(&st->lock);
                size_t n = st->closed ? 0 : take(st, buf, max);
                bool done = st->ended && !st->head, closed = st->closed;
                pthread_mutex_unlock(&st->lock);
                if (n > 0)
                        return (ssize_t)n;
                if (closed)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                uint64_t quiet = clock_mono_ms() - quiet_since;
                int w = wait_event(
                        st, quiet >= STREAM_KEEPALIVE_MS ? 0 : (int)(STREAM_KEEPALIVE_MS - quiet));
                if (w < 0) {
                        mcp_stream_close(st);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (w == 0 && max >= sizeof(keepalive) - 1) {
                        memcpy(buf, keepalive, sizeof(keepalive) - 1);
                        return (ssize_t)(sizeof(keepalive) - 1);
                }
        }
}

static void response_free(void *cls)
{
        mcp_stream_unref(cls);
}

struct MHD_Response *mcp_stream_response(struct mcp_stream *st)
{
        struct MHD_Response *resp = MHD_create_response_from_callback(
                MHD_SIZE_UNKNOWN, STREAM_BLOCK_SIZE, reader, st, response_free);
        if (!resp)
                return NULL;
        mcp_stream_ref(st);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return resp;
}
