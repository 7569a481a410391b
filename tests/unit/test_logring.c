/* Unit tests for the log ring behind `sandbox logs`: lines come back in
 * order as its table grows, the oldest go first past the line and byte
 * bounds, partial lines join, and a cleared ring starts empty. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "services/logring.h"

/* Line i of the ring's tail (all lines), or NULL. */
static const char *line_at(json_t *tail, size_t i)
{
        return json_string_value(json_array_get(json_object_get(tail, "lines"), i));
}

static size_t count(json_t *tail)
{
        return json_array_size(json_object_get(tail, "lines"));
}

static bool truncated(json_t *tail)
{
        return json_is_true(json_object_get(tail, "truncated"));
}

static void append_numbered(struct log_ring *r, size_t from, size_t to)
{
        char buf[32];
        for (size_t i = from; i < to; i++) {
                int n = snprintf(buf, sizeof(buf), "line %zu\n", i);
                log_ring_append(r, buf, (size_t)n);
        }
}

TEST(an_empty_ring_holds_no_table)
{
        struct log_ring r = {0};
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == 0 && !truncated(t));
        CHECK(r.lines == NULL && r.cap == 0);
        json_decref(t);
        log_ring_clear(&r);
}

TEST(lines_stay_in_order_while_the_table_grows)
{
        struct log_ring r = {0};
        append_numbered(&r, 0, 1000);
        CHECK(r.cap >= 1000 && r.cap <= LOG_RING_LINES);
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == 1000 && !truncated(t));
        CHECK_STREQ(line_at(t, 0), "line 0");
        CHECK_STREQ(line_at(t, 999), "line 999");
        json_decref(t);
        t = log_ring_tail(&r, 3);
        CHECK(count(t) == 3 && truncated(t));
        CHECK_STREQ(line_at(t, 0), "line 997");
        json_decref(t);
        log_ring_clear(&r);
}

TEST(the_oldest_lines_go_first_past_the_line_bound)
{
        struct log_ring r = {0};
        append_numbered(&r, 0, LOG_RING_LINES + 500);
        CHECK(r.cap == LOG_RING_LINES);
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == LOG_RING_LINES && truncated(t));
        CHECK_STREQ(line_at(t, 0), "line 500");
        char want[32];
        snprintf(want, sizeof(want), "line %d", LOG_RING_LINES + 499);
        CHECK_STREQ(line_at(t, LOG_RING_LINES - 1), want);
        json_decref(t);
        log_ring_clear(&r);
}

TEST(the_byte_bound_evicts_long_lines)
{
        struct log_ring r = {0};
        static char big[LOG_RING_LINE_MAX + 1];
        memset(big, 'x', LOG_RING_LINE_MAX);
        big[LOG_RING_LINE_MAX] = '\n';
        size_t fit = LOG_RING_BYTES / LOG_RING_LINE_MAX;
        for (size_t i = 0; i < fit + 10; i++)
                log_ring_append(&r, big, sizeof(big));
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == fit && truncated(t));
        CHECK(r.bytes <= LOG_RING_BYTES);
        json_decref(t);
        log_ring_clear(&r);
}

TEST(partial_lines_join_and_end_with_their_block)
{
        struct log_ring r = {0};
        log_ring_append(&r, "ab", 2);
        log_ring_append(&r, "c\nde", 4);
        log_ring_end_block(&r);
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == 2);
        CHECK_STREQ(line_at(t, 0), "abc");
        CHECK_STREQ(line_at(t, 1), "de");
        json_decref(t);
        log_ring_clear(&r);
}

TEST(a_cleared_ring_starts_again_empty)
{
        struct log_ring r = {0};
        append_numbered(&r, 0, LOG_RING_LINES + 1);
        log_ring_clear(&r);
        CHECK(r.lines == NULL && r.n == 0 && r.bytes == 0);
        append_numbered(&r, 7, 9);
        json_t *t = log_ring_tail(&r, 0);
        CHECK(count(t) == 2 && !truncated(t));
        CHECK_STREQ(line_at(t, 0), "line 7");
        json_decref(t);
        log_ring_clear(&r);
}

RUN_TESTS(T(an_empty_ring_holds_no_table), T(lines_stay_in_order_while_the_table_grows),
          T(the_oldest_lines_go_first_past_the_line_bound), T(the_byte_bound_evicts_long_lines),
          T(partial_lines_join_and_end_with_their_block), T(a_cleared_ring_starts_again_empty))
