/* The queue behind every Server-Sent Event stream of the server (the HTTP
 * API's live output, MCP's Streamable HTTP): whole events
 *
 *   event: NAME
 *   data: TEXT                 (one line: compact JSON)
 *
 * pushed by any thread and read by the one thread that writes the
 * response. The queue holds at most max_bytes of encoded events (one event
 * larger than that still goes through alone): a producer past it waits
 * until the reader makes room, so nothing is dropped and memory stays
 * bounded. While the queue is empty the reader polls the client's socket
 * (a hang-up or half-close ends the stream), a wake-up pipe the producers
 * write to, and the server's shutdown pipe, and sends ": keepalive" after
 * SSE_KEEPALIVE_MS of silence (which also keeps an idle timeout away).
 * A stopping server closes the stream, or, when a farewell event was set,
 * sends that and ends it cleanly.
 * Events carry no ids: streams are not resumable.
 *
 * Reference counted; every function is thread-safe. */
#ifndef CODECAGE_UTIL_SSE_QUEUE_H
#define CODECAGE_UTIL_SSE_QUEUE_H

#include <stddef.h>
#include <sys/types.h>

#define SSE_KEEPALIVE_MS 15000
#define SSE_QUEUE_END    (-1) /* sse_queue_read: ended and drained */
#define SSE_QUEUE_ERROR  (-2) /* sse_queue_read: closed, client gone or server stopping */

struct sse_queue;

/* sock_fd: the client's connection (-1: none); shutdown_fd: readable once
 * the server stops (-1: none); close_fd: gets one byte when the queue
 * closes, e.g. the cancel pipe of the call that feeds it (-1: none). The
 * fds stay the caller's. NULL on failure (errno set). */
struct sse_queue *sse_queue_new(size_t max_bytes, int sock_fd, int shutdown_fd, int close_fd);
struct sse_queue *sse_queue_ref(struct sse_queue *q);
/* Accepts NULL; returns NULL. */
struct sse_queue *sse_queue_unref(struct sse_queue *q);

/* Appends "event: NAME\ndata: DATA\n\n", waiting for room: 0, -EPIPE once
 * the queue is closed or ended, -ENOMEM. data must hold no newline. */
int sse_queue_push(struct sse_queue *q, const char *event, const char *data, size_t len);
/* Appends the event only if there is room now (never waits): 0, -EAGAIN
 * when the reader is too far behind, -EPIPE, -ENOMEM. */
int sse_queue_offer(struct sse_queue *q, const char *event, const char *data, size_t len);
/* Appends len bytes as they are (a stream of another framing, e.g. the
 * Connect protocol's envelopes or NDJSON lines), waiting for room. */
int sse_queue_push_raw(struct sse_queue *q, const void *data, size_t len);
/* What the reader sends after SSE_KEEPALIVE_MS of silence instead of the
 * SSE comment (1..256 bytes): a keep-alive in the stream's own framing. */
int sse_queue_set_keepalive(struct sse_queue *q, const void *data, size_t len);
/* When the server stops (its shutdown pipe), send this event last and end
 * (a clean end of the response) rather than close; the queue keeps a copy.
 * 0 or -ENOMEM. */
int sse_queue_set_farewell(struct sse_queue *q, const char *event, const char *data, size_t len);
/* No more events: the reader ends once the queue is drained. */
void sse_queue_end(struct sse_queue *q);
/* The reader is gone or must stop: pushes fail from now on, reads too. */
void sse_queue_close(struct sse_queue *q);

/* For the reader: up to max bytes of events (or a keep-alive comment)
 * into buf, waiting while there are none; SSE_QUEUE_END or
 * SSE_QUEUE_ERROR at the end (a gone client or a stopping server closes
 * the queue). */
ssize_t sse_queue_read(struct sse_queue *q, char *buf, size_t max);

#endif
