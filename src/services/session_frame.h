/* The session channel's frames from the driver (docs/SESSION-PROTOCOL.md),
 * without I/O: the reader that assembles them from whatever bytes arrive,
 * and the filter of the driver's "done" message. Everything here handles
 * bytes a sandboxed program chose, so session.c keeps its recv() and poll()
 * and this file keeps the decisions (and its fuzz target,
 * tests/fuzz/fuzz_session_frame.c, has no socket to mock). */
#ifndef CODECAGE_SERVICES_SESSION_FRAME_H
#define CODECAGE_SERVICES_SESSION_FRAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct session_frame_reader {
        unsigned char hdr[8];
        size_t got; /* bytes of header + json read so far */
        uint32_t json_len, blob_len;
        char *json;
};

/* Where the next bytes go and how many the frame still needs (0: the
 * frame is complete, take it with session_frame_take()). Never more than
 * the current frame needs, so a read of at most that size never eats into
 * the next frame. */
size_t session_frame_want(const struct session_frame_reader *rd, char **dst);
/* n bytes were written to where session_frame_want() said: 0, or -EPROTO
 * for a header the driver may not send (JSON shorter than 2 bytes or
 * longer than SESSION_JSON_MAX, any blob), or -ENOMEM. */
int session_frame_got(struct session_frame_reader *rd, size_t n);
/* The most heap one frame's JSON may take to read: jansson holds a
 * document in up to ~84 times its size (a list of empty dicts), so the
 * length alone does not bound it. 256 MiB holds every `done` the driver
 * sends (its value at most 1 MiB of JSON), and values and host-call
 * arguments of any size made of strings, floats, dicts with keys or
 * variable lists; only bulky shapes of many small containers or integers
 * are refused (16 MiB of small integers would take ~385 MiB). */
#define SESSION_PARSE_MAX (256 * 1024 * 1024)

/* The complete frame's message, a JSON object with a string "op" without
 * NUL (a new reference in *ret); -E2BIG when it would take more than
 * SESSION_PARSE_MAX to read, else -EPROTO. The reader is empty again
 * either way. Other strings may hold NUL: read them with their length. */
int session_frame_take(struct session_frame_reader *rd, json_t **ret);

/* Whether v nests arrays and objects more than limit deep (a scalar: 0).
 * Recurses at most limit levels. */
bool session_nests_deeper(const json_t *v, unsigned limit);
/* Whether the value v from the driver may go out: 0; -ELOOP when it nests
 * deeper than SESSION_DEPTH_MAX, -E2BIG when its compact JSON takes more
 * than max bytes (floats counted at 15 digits, never longer than the
 * driver's shortest repr, so an honest value is never refused). */
int session_value_check(const json_t *v, size_t max);
/* A string of at most max bytes: text (a string) cut on a UTF-8
 * boundary, as a new reference; NULL when text is not a string. */
json_t *session_text_cut(const json_t *text, size_t max);
void session_frame_reset(struct session_frame_reader *rd);

/* Sets return_value, return_repr (a string or null) and error (null or
 * {type, message, traceback}, all strings) of the result o from the
 * driver's "done" message (NULL: none came), and images (1..16 strings:
 * the run's figures as base64 PNG) when it has any: only the fields the
 * contract names go out, whatever else the driver put there. A
 * return_value the driver may not send (more than return_max bytes of
 * JSON, deeper than SESSION_DEPTH_MAX) becomes null with a note saying so
 * in return_repr; return_repr is cut to return_max bytes. */
#define SESSION_IMAGES_MAX 16
void session_copy_done(json_t *o, const json_t *done, size_t return_max);

#endif
