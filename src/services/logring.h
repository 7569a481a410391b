/* A bounded ring of text lines: the past exec output of a named sandbox
 * that `logs` shows. At most LOG_RING_LINES lines and LOG_RING_BYTES bytes
 * are kept (the oldest go first); a line longer than LOG_RING_LINE_MAX is
 * cut with a marker. The line table grows with the lines kept (an idle
 * sandbox with no output holds none). Not thread-safe: the owner locks. */
#ifndef CODECAGE_SERVICES_LOGRING_H
#define CODECAGE_SERVICES_LOGRING_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define LOG_RING_LINES    2000
#define LOG_RING_BYTES    (512 * 1024)
#define LOG_RING_LINE_MAX 4096

struct log_ring {
        char **lines; /* a ring of cap slots, cap <= LOG_RING_LINES */
        size_t cap, start, n, bytes;
        bool dropped;  /* lines were evicted */
        char *partial; /* an unfinished last line */
        size_t partial_len;
};

/* Appends text (valid UTF-8, already redacted); a trailing piece without a
 * newline is completed by log_ring_end_block(). */
void log_ring_append(struct log_ring *r, const char *text, size_t len);
/* Ends the current block (one exec's stream): a pending partial line becomes
 * a line of its own. */
void log_ring_end_block(struct log_ring *r);
/* {"lines": [...last `tail` lines, 0 = all...], "truncated": bool}. */
json_t *log_ring_tail(const struct log_ring *r, size_t tail);
/* Drops every line and the table. */
void log_ring_clear(struct log_ring *r);

#endif
