/* Unit tests for the Server-Sent Event queue (src/util/sse_queue.c) that
 * every stream of the server uses: events come out whole and in order, in
 * reads of any size; the end drains first; a producer past the bound waits
 * for the reader, while one event larger than the bound still goes
 * through alone; closing fails pushes and reads and tells the close fd
 * once; a client that hangs up or a server that stops closes the queue,
 * unless the queue has a farewell for the server's stop: then it is sent
 * last and the queue ends. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "util/sse_queue.h"

/* Reads everything until the end or an error into out; returns the last
 * read's result. */
static ssize_t drain(struct sse_queue *q, char *out, size_t cap, size_t chunk)
{
        size_t w = 0;
        for (;;) {
                ssize_t n = sse_queue_read(q, out + w, chunk < cap - w ? chunk : cap - w);
                if (n <= 0) {
                        out[w] = '\0';
                        return n;
                }
                w += (size_t)n;
        }
}

TEST(events_come_out_whole_and_in_order)
{
        struct sse_queue *q = sse_queue_new(1024, -1, -1, -1);
        char out[256];
        CHECK(q != NULL);
        CHECK(sse_queue_push(q, "message", "{\"a\":1}", 7) == 0);
        CHECK(sse_queue_push(q, "stdout", "{\"data\":\"x\"}", 12) == 0);
        sse_queue_end(q);
        CHECK(sse_queue_push(q, "late", "{}", 2) == -EPIPE);
        CHECK(drain(q, out, sizeof(out), 5) == SSE_QUEUE_END); /* reads of 5 bytes */
        CHECK_STREQ(out,
                    "event: message\ndata: {\"a\":1}\n\nevent: stdout\ndata: {\"data\":\"x\"}\n\n");
        CHECK(sse_queue_read(q, out, sizeof(out)) == SSE_QUEUE_END);
        sse_queue_unref(q);
}

TEST(close_fails_pushes_and_reads_and_tells_once)
{
        int p[2];
        char out[64], byte;
        CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
        struct sse_queue *q = sse_queue_new(1024, -1, -1, p[1]);
        CHECK(sse_queue_push(q, "message", "1", 1) == 0);
        sse_queue_close(q);
        sse_queue_close(q);
        CHECK(read(p[0], &byte, 1) == 1);
        CHECK(read(p[0], &byte, 1) < 0 && errno == EAGAIN); /* only once */
        CHECK(sse_queue_push(q, "message", "2", 1) == -EPIPE);
        CHECK(sse_queue_read(q, out, sizeof(out)) == SSE_QUEUE_ERROR); /* queued data dropped */
        sse_queue_unref(q);
        close(p[0]);
        close(p[1]);
}

struct producer {
        struct sse_queue *q;
        int pushed;
        int result;
};

static void *produce(void *arg)
{
        struct producer *pr = arg;
        for (int i = 0; i < 4; i++) {
                pr->result = sse_queue_push(pr->q, "e", "0123456789", 10);
                if (pr->result < 0)
                        break;
                __atomic_add_fetch(&pr->pushed, 1, __ATOMIC_SEQ_CST);
        }
        return NULL;
}

TEST(a_full_queue_makes_the_producer_wait)
{
        /* One event is "event: e\ndata: 0123456789\n\n": 27 bytes; room for two. */
        struct producer pr = {.q = sse_queue_new(60, -1, -1, -1)};
        pthread_t t;
        char out[256];
        CHECK(pthread_create(&t, NULL, produce, &pr) == 0);
        usleep(100 * 1000);
        CHECK(__atomic_load_n(&pr.pushed, __ATOMIC_SEQ_CST) == 2);
        CHECK(sse_queue_read(pr.q, out, 27) == 27); /* room for one more */
        usleep(100 * 1000);
        CHECK(__atomic_load_n(&pr.pushed, __ATOMIC_SEQ_CST) == 3);
        sse_queue_close(pr.q); /* the waiting producer gives up */
        pthread_join(t, NULL);
        CHECK(pr.result == -EPIPE && pr.pushed == 3);
        sse_queue_unref(pr.q);
}

TEST(an_event_larger_than_the_bound_goes_alone)
{
        struct sse_queue *q = sse_queue_new(16, -1, -1, -1);
        char big[100], out[512];
        memset(big, 'x', sizeof(big));
        CHECK(sse_queue_push(q, "e", big, sizeof(big)) == 0);
        sse_queue_end(q);
        CHECK(drain(q, out, sizeof(out), 7) == SSE_QUEUE_END);
        CHECK(strlen(out) == strlen("event: e\ndata: \n\n") + sizeof(big));
        sse_queue_unref(q);
}

TEST(a_client_that_hangs_up_closes_the_queue)
{
        int sv[2], p[2];
        char out[64], byte;
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
        struct sse_queue *q = sse_queue_new(1024, sv[0], -1, p[1]);
        shutdown(sv[1], SHUT_WR); /* a half-close counts as gone */
        CHECK(sse_queue_read(q, out, sizeof(out)) == SSE_QUEUE_ERROR);
        CHECK(read(p[0], &byte, 1) == 1);
        CHECK(sse_queue_push(q, "e", "1", 1) == -EPIPE);
        sse_queue_unref(q);
        for (int i = 0; i < 2; i++) {
                close(sv[i]);
                close(p[i]);
        }
}

TEST(a_stopping_server_closes_the_queue)
{
        int stop[2];
        char out[64];
        CHECK(pipe2(stop, O_CLOEXEC) == 0);
        struct sse_queue *q = sse_queue_new(1024, -1, stop[0], -1);
        CHECK(write(stop[1], "x", 1) == 1);
        CHECK(sse_queue_read(q, out, sizeof(out)) == SSE_QUEUE_ERROR);
        sse_queue_unref(q);
        close(stop[0]);
        close(stop[1]);
}

TEST(a_stopping_server_ends_a_queue_with_its_farewell)
{
        int stop[2];
        char out[256];
        CHECK(pipe2(stop, O_CLOEXEC) == 0);
        struct sse_queue *q = sse_queue_new(1024, -1, stop[0], -1);
        CHECK(sse_queue_set_farewell(q, "message", "{\"bye\":1}", 9) == 0);
        CHECK(sse_queue_push(q, "message", "{\"a\":1}", 7) == 0);
        CHECK(write(stop[1], "x", 1) == 1);
        /* what was queued, then the farewell, then a clean end */
        CHECK(drain(q, out, sizeof(out), sizeof(out)) == SSE_QUEUE_END);
        CHECK_STREQ(out,
                    "event: message\ndata: {\"a\":1}\n\nevent: message\ndata: {\"bye\":1}\n\n");
        CHECK(sse_queue_push(q, "late", "{}", 2) == -EPIPE);
        sse_queue_unref(q);
        /* a client that is gone gets no farewell: the queue closes */
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        q = sse_queue_new(1024, sv[0], stop[0], -1);
        CHECK(sse_queue_set_farewell(q, "message", "{}", 2) == 0);
        close(sv[1]);
        CHECK(sse_queue_read(q, out, sizeof(out)) == SSE_QUEUE_ERROR);
        sse_queue_unref(q);
        close(sv[0]);
        close(stop[0]);
        close(stop[1]);
}

static void *push_later(void *arg)
{
        usleep(100 * 1000);
        sse_queue_push(arg, "late", "{}", 2);
        return NULL;
}

TEST(a_reader_waits_for_the_next_event)
{
        struct sse_queue *q = sse_queue_new(1024, -1, -1, -1);
        pthread_t t;
        char out[64];
        CHECK(pthread_create(&t, NULL, push_later, q) == 0);
        ssize_t n = sse_queue_read(q, out, sizeof(out) - 1);
        CHECK(n > 0);
        out[n > 0 ? n : 0] = '\0';
        CHECK_STREQ(out, "event: late\ndata: {}\n\n");
        pthread_join(t, NULL);
        sse_queue_unref(q);
        CHECK(sse_queue_unref(NULL) == NULL);
}

RUN_TESTS(T(events_come_out_whole_and_in_order), T(close_fails_pushes_and_reads_and_tells_once),
          T(a_full_queue_makes_the_producer_wait), T(an_event_larger_than_the_bound_goes_alone),
          T(a_client_that_hangs_up_closes_the_queue), T(a_stopping_server_closes_the_queue),
          T(a_stopping_server_ends_a_queue_with_its_farewell), T(a_reader_waits_for_the_next_event))
