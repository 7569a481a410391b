/* Output capture and text sanitising.
 *
 * struct output_capture keeps the head and the tail of one stream (what the
 * program wrote can be far larger than what is kept) and counts the total.
 * output_capture_finish() turns it into a struct cage_stream whose text is
 * valid UTF-8 (invalid bytes become U+FFFD), has terminal control sequences
 * neutralised (C0 controls other than \t \n \r become their visible Control
 * Pictures, e.g. ESC -> U+241B; DEL -> U+2421; C1 controls -> U+FFFD) and,
 * when cut, a marker line "[... N bytes truncated ...]" between head and tail.
 *
 * struct text_sanitizer does the same neutralising on a live byte stream
 * (for output shown on a terminal), carrying incomplete UTF-8 sequences from
 * one chunk to the next. */
#ifndef CODECAGE_CORE_OUTPUT_H
#define CODECAGE_CORE_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"

struct output_capture {
        uint64_t cap;   /* bytes kept at most: head (cap/2) + tail (rest) */
        uint64_t total; /* bytes fed */
        char *head;
        size_t head_len, head_cap;
        char *tail; /* ring buffer of tail_cap bytes */
        size_t tail_cap, tail_pos, tail_len;
};

int output_capture_init(struct output_capture *c, uint64_t cap);
int output_capture_feed(struct output_capture *c, const void *buf, size_t len);
/* Fills *ret (ret->data is malloc'ed, NUL-terminated) and resets c. */
int output_capture_finish(struct output_capture *c, struct cage_stream *ret);
void output_capture_free(struct output_capture *c);

/* Sanitises a whole buffer; *ret is malloc'ed and NUL-terminated. */
int cage_sanitize_text(const void *in, size_t len, char **ret, size_t *ret_len);

struct text_sanitizer {
        unsigned char pending[4];
        size_t n_pending;
};

/* Sanitises `len` bytes of a stream into out (at most 3 * (len + 4) bytes are
 * written; size out accordingly); returns bytes written. flush=true emits
 * whatever incomplete sequence is pending (as U+FFFD). */
size_t text_sanitizer_feed(struct text_sanitizer *s, const void *in, size_t len, char *out,
                           bool flush);

#endif
