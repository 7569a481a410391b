/* The Server-Sent Event queue of sse_queue.h: a list of whole encoded
 * events under one lock, a condition producers wait on for room, and a
 * non-blocking wake-up pipe the reader polls next to the client's socket
 * and the server's shutdown pipe.
 *
 * Locking: q->lock guards the list, `queued`, `ended` and `closed`; no
 * other lock is taken under it, and nothing blocks while it is held
 * except pthread_cond_wait on q->room. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/sse_queue.h"

static const char sse_keepalive[] = ": keepalive\n\n";
#define KEEPALIVE_MAX 256

struct event {
        struct event *next;
        size_t len, off;
        char data[];
};

struct sse_queue {
        int refs;
        pthread_mutex_t lock;
        pthread_cond_t room; /* the reader took something, or the queue ended or closed */
        struct event *head, *tail;
        struct event *farewell; /* sent, then the end, when the server stops */
        size_t queued, max_bytes;
        bool ended, closed;
        int wake[2];
        int sock_fd, shutdown_fd, close_fd;
        char keepalive[KEEPALIVE_MAX]; /* sent after SSE_KEEPALIVE_MS of silence */
        size_t keepalive_len;
};

struct sse_queue *sse_queue_new(size_t max_bytes, int sock_fd, int shutdown_fd, int close_fd)
{
        struct sse_queue *q = calloc(1, sizeof(*q));
        if (!q)
                return NULL;
        *q = (struct sse_queue){.refs = 1,
                                .max_bytes = max_bytes,
                                .sock_fd = sock_fd,
                                .shutdown_fd = shutdown_fd,
                                .close_fd = close_fd,
                                .keepalive_len = sizeof(sse_keepalive) - 1};
        memcpy(q->keepalive, sse_keepalive, sizeof(sse_keepalive) - 1);
        pthread_mutex_init(&q->lock, NULL);
        pthread_cond_init(&q->room, NULL);
        if (pipe2(q->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                int e = errno;
                q->wake[0] = q->wake[1] = -1;
                sse_queue_unref(q);
                errno = e;
                return NULL;
        }
        return q;
}

struct sse_queue *sse_queue_ref(struct sse_queue *q)
{
        __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
        return q;
}

struct sse_queue *sse_queue_unref(struct sse_queue *q)
{
        if (!q || __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return NULL;
        for (struct event *ev = q->head, *next; ev; ev = next) {
                next = ev->next;
                free(ev);
        }
        free(q->farewell);
        for (int i = 0; i < 2; i++)
                if (q->wake[i] >= 0)
                        close(q->wake[i]);
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->room);
        free(q);
        return NULL;
}

static void wake(int fd)
{
        if (fd >= 0)
                (void)!write(fd, "x", 1); /* a full pipe is awake already */
}

static struct event *event_new(const char *name, const char *data, size_t n)
{
        size_t head = strlen("event: ") + strlen(name) + strlen("\ndata: ");
        size_t len = head + n + 2;
        struct event *ev = malloc(sizeof(*ev) + len);
        if (!ev)
                return NULL;
        *ev = (struct event){.len = len};
        char *p = stpcpy(stpcpy(stpcpy(ev->data, "event: "), name), "\ndata: ");
        memcpy(p, data, n);
        memcpy(p + n, "\n\n", 2);
        return ev;
}

int sse_queue_set_keepalive(struct sse_queue *q, const void *data, size_t len)
{
        if (len == 0 || len > KEEPALIVE_MAX)
                return -EINVAL;
        pthread_mutex_lock(&q->lock);
        memcpy(q->keepalive, data, len);
        q->keepalive_len = len;
        pthread_mutex_unlock(&q->lock);
        return 0;
}

static bool no_room(const struct sse_queue *q, const struct event *ev)
{
        return !q->closed && !q->ended && q->queued > 0 && q->queued + ev->len > q->max_bytes;
}

/* Queues ev (taken), waiting for room when wait, else -EAGAIN. */
static int push_event(struct sse_queue *q, struct event *ev, bool wait)
{
        if (!ev)
                return -ENOMEM;
        pthread_mutex_lock(&q->lock);
        while (wait && no_room(q, ev))
                pthread_cond_wait(&q->room, &q->lock);
        int r = q->closed || q->ended ? -EPIPE : no_room(q, ev) ? -EAGAIN : 0;
        if (r == 0) {
                if (q->tail)
                        q->tail->next = ev;
                else
                        q->head = ev;
                q->tail = ev;
                q->queued += ev->len;
                ev = NULL;
        }
        pthread_mutex_unlock(&q->lock);
        free(ev);
        if (r == 0)
                wake(q->wake[1]);
        return r;
}

int sse_queue_push(struct sse_queue *q, const char *name, const char *data, size_t len)
{
        return push_event(q, event_new(name, data, len), true);
}

int sse_queue_offer(struct sse_queue *q, const char *name, const char *data, size_t len)
{
        return push_event(q, event_new(name, data, len), false);
}

int sse_queue_push_raw(struct sse_queue *q, const void *data, size_t len)
{
        struct event *ev = malloc(sizeof(*ev) + len);
        if (ev) {
                *ev = (struct event){.len = len};
                memcpy(ev->data, data, len);
        }
        return push_event(q, ev, true);
}

int sse_queue_set_farewell(struct sse_queue *q, const char *name, const char *data, size_t len)
{
        struct event *ev = event_new(name, data, len);
        if (!ev)
                return -ENOMEM;
        pthread_mutex_lock(&q->lock);
        free(q->farewell);
        q->farewell = ev;
        pthread_mutex_unlock(&q->lock);
        return 0;
}

/* The server stops: a queue with a farewell sends it last and ends (true);
 * one without closes. */
static bool say_farewell(struct sse_queue *q)
{
        pthread_mutex_lock(&q->lock);
        struct event *ev = q->closed || q->ended ? NULL : q->farewell;
        if (ev) {
                q->farewell = NULL;
                if (q->tail)
                        q->tail->next = ev;
                else
                        q->head = ev;
                q->tail = ev;
                q->queued += ev->len;
                q->ended = true;
                pthread_cond_broadcast(&q->room);
        }
        pthread_mutex_unlock(&q->lock);
        return ev != NULL;
}

/* Sets *flag; true when it was not set yet. */
static bool set_flag(struct sse_queue *q, bool *flag)
{
        pthread_mutex_lock(&q->lock);
        bool first = !*flag;
        *flag = true;
        pthread_cond_broadcast(&q->room);
        pthread_mutex_unlock(&q->lock);
        wake(q->wake[1]);
        return first;
}

void sse_queue_end(struct sse_queue *q)
{
        set_flag(q, &q->ended);
}

void sse_queue_close(struct sse_queue *q)
{
        if (set_flag(q, &q->closed))
                wake(q->close_fd);
}

/* ---- the reader ------------------------------------------------------------------------ */

/* Copies up to max queued bytes; with the lock held. */
static size_t take(struct sse_queue *q, char *buf, size_t max)
{
        size_t w = 0;
        while (q->head && w < max) {
                struct event *ev = q->head;
                size_t n = ev->len - ev->off < max - w ? ev->len - ev->off : max - w;
                memcpy(buf + w, ev->data + ev->off, n);
                ev->off += n;
                w += n;
                if (ev->off < ev->len)
                        break;
                q->head = ev->next;
                if (!q->head)
                        q->tail = NULL;
                q->queued -= ev->len;
                free(ev);
        }
        pthread_cond_broadcast(&q->room);
        return w;
}

/* 1 woken, 0 keep-alive due (timeout), -1 the client is gone (its socket
 * hung up), -2 the server is stopping. */
static int wait_event(struct sse_queue *q, int timeout_ms)
{
        struct pollfd p[3] = {
                {.fd = q->sock_fd, .events = POLLRDHUP},
                {.fd = q->wake[0], .events = POLLIN},
                {.fd = q->shutdown_fd, .events = POLLIN},
        };
        int n = poll(p, 3, timeout_ms);
        if (n < 0)
                return errno == EINTR ? 1 : -1;
        if (n == 0)
                return 0;
        if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
                return -1;
        if (p[2].revents)
                return -2;
        char drain[64];
        while (read(q->wake[0], drain, sizeof(drain)) > 0)
                ;
        return 1;
}

ssize_t sse_queue_read(struct sse_queue *q, char *buf, size_t max)
{
        uint64_t quiet_since = clock_mono_ms();
        for (;;) {
                char ka[KEEPALIVE_MAX];
                pthread_mutex_lock(&q->lock);
                size_t n = q->closed ? 0 : take(q, buf, max), ka_len = q->keepalive_len;
                bool done = q->ended && !q->head, closed = q->closed;
                memcpy(ka, q->keepalive, ka_len);
                pthread_mutex_unlock(&q->lock);
                if (n > 0)
                        return (ssize_t)n;
                if (closed)
                        return SSE_QUEUE_ERROR;
                if (done)
                        return SSE_QUEUE_END;
                uint64_t quiet = clock_mono_ms() - quiet_since;
                int w = wait_event(q,
                                   quiet >= SSE_KEEPALIVE_MS ? 0 : (int)(SSE_KEEPALIVE_MS - quiet));
                if (w == -2 && say_farewell(q))
                        continue;
                if (w < 0) {
                        sse_queue_close(q);
                        return SSE_QUEUE_ERROR;
                }
                if (w == 0 && max >= ka_len) {
                        memcpy(buf, ka, ka_len);
                        return (ssize_t)ka_len;
                }
        }
}
