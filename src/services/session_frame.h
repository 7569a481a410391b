/* The session channel's frames from the driver (docs/SESSION-PROTOCOL.md),
 * without I/O: the reader that assembles them from whatever bytes arrive,
 * and the filter of the driver's "done" message. Everything here handles
 * bytes a sandboxed program chose, so session.c keeps its recv() and poll()
 * and this file keeps the decisions (and its fuzz target,
 * tests/fuzz/fuzz_session_frame.c, has no socket to mock). */
#ifndef CODECAGE_SERVICES_SESSION_FRAME_H
#define CODECAGE_SERVICES_SESSION_FRAME_H

#include <jansson.h>
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
/* The complete frame's message, a JSON object with a string "op" without
 * NUL (a new reference in *ret), or -EPROTO; the reader is empty again
 * either way. Other strings may hold NUL: read them with their length. */
int session_frame_take(struct session_frame_reader *rd, json_t **ret);
void session_frame_reset(struct session_frame_reader *rd);

/* Sets return_value, return_repr (a string or null) and error (null or
 * {type, message, traceback}, all strings) of the result o from the
 * driver's "done" message (NULL: none came), and images (1..16 strings:
 * the run's figures as base64 PNG) when it has any: only the fields the
 * contract names go out, whatever else the driver put there. */
#define SESSION_IMAGES_MAX 16
void session_copy_done(json_t *o, const json_t *done);

#endif
