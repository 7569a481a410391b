/* libFuzzer target for the session channel's frames from the driver
 * (src/services/session_frame.c; docs/SESSION-PROTOCOL.md): the bytes are
 * what a sandboxed driver writes back to the server, read once as large as
 * the reader asks and once in small pieces, as recv() may hand them over.
 * Each message that comes out of a "done" frame also goes through the
 * filter that builds the run's result. Aborts on a broken invariant:
 *  - the reader never asks for more than the rest of its frame, and a
 *    header it accepts declares 2..SESSION_JSON_MAX bytes of JSON and no
 *    blob;
 *  - every message is a JSON object with a string "op" that holds no NUL
 *    (other strings may: "\u0000" in a value is the code's own);
 *  - how the bytes are split does not change the messages or the error;
 *  - the "done" filter leaves exactly return_value, return_repr (a string
 *    or null) and error (null, or an object of exactly the strings type,
 *    message and traceback), and images only as 1..16 strings, and owns
 *    nothing after (LeakSanitizer). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "services/session.h"
#include "services/session_frame.h"

#define EVENTS_MAX 64

struct events {
        char *msg[EVENTS_MAX];
        size_t n;
        int error; /* 0: the input ended inside or between frames */
};

static void check_done(const json_t *msg)
{
        json_t *o = json_object();
        FUZZ_CHECK(o);
        session_copy_done(o, msg, SESSION_RETURN_MAX);
        json_t *images = json_object_get(o, "images");
        FUZZ_CHECK(json_object_size(o) == (images ? 4u : 3u));
        if (images) {
                FUZZ_CHECK(json_is_array(images) && json_array_size(images) >= 1 &&
                           json_array_size(images) <= SESSION_IMAGES_MAX);
                size_t i;
                json_t *v;
                json_array_foreach(images, i, v) FUZZ_CHECK(json_is_string(v));
        }
        FUZZ_CHECK(json_object_get(o, "return_value"));
        json_t *repr = json_object_get(o, "return_repr"), *err = json_object_get(o, "error");
        FUZZ_CHECK(json_is_string(repr) || json_is_null(repr));
        FUZZ_CHECK(json_is_null(err) || (json_is_object(err) && json_object_size(err) == 3));
        if (json_is_object(err)) {
                FUZZ_CHECK(json_is_string(json_object_get(err, "type")));
                FUZZ_CHECK(json_is_string(json_object_get(err, "message")));
                FUZZ_CHECK(json_is_string(json_object_get(err, "traceback")));
        }
        json_decref(o);
}

/* Feeds data in pieces of at most `piece` bytes (0: as much as asked). */
static void feed(const uint8_t *data, size_t size, size_t piece, struct events *ev)
{
        struct session_frame_reader rd = {0};
        size_t off = 0;
        memset(ev, 0, sizeof(*ev));
        for (;;) {
                char *dst;
                size_t want = session_frame_want(&rd, &dst);
                FUZZ_CHECK(want <= (rd.got < 8 ? 8 : 8 + (size_t)rd.json_len));
                if (want == 0) {
                        json_t *msg = NULL;
                        int r = session_frame_take(&rd, &msg);
                        FUZZ_CHECK(rd.got == 0 && !rd.json);
                        if (r < 0) {
                                FUZZ_CHECK(r == -EPROTO && !msg);
                                ev->error = r;
                                break;
                        }
                        FUZZ_CHECK(json_is_object(msg));
                        const char *op = json_string_value(json_object_get(msg, "op"));
                        FUZZ_CHECK(op &&
                                   strlen(op) == json_string_length(json_object_get(msg, "op")));
                        if (strcmp(op, "done") == 0)
                                check_done(msg);
                        ev->msg[ev->n++] = json_dumps(msg, JSON_SORT_KEYS | JSON_COMPACT);
                        json_decref(msg);
                        if (ev->n == EVENTS_MAX)
                                break;
                        continue;
                }
                size_t n = size - off < want ? size - off : want;
                if (piece && n > piece)
                        n = piece;
                if (n == 0)
                        break; /* the driver stopped writing */
                memcpy(dst, data + off, n);
                off += n;
                int r = session_frame_got(&rd, n);
                if (r < 0) {
                        FUZZ_CHECK(r == -EPROTO || r == -ENOMEM);
                        ev->error = r;
                        break;
                }
                if (rd.got >= 8)
                        FUZZ_CHECK(rd.json_len >= 2 && rd.json_len <= SESSION_JSON_MAX &&
                                   rd.blob_len == 0 && rd.json);
        }
        session_frame_reset(&rd);
}

static void events_clear(struct events *ev)
{
        for (size_t i = 0; i < ev->n; i++)
                free(ev->msg[i]);
}

/* Whether a frame header in data declares 64 KiB..SESSION_JSON_MAX bytes:
 * the reader takes those exactly like shorter ones but allocates them
 * whole, which would only slow the campaign down. */
static bool declares_large(const uint8_t *data, size_t size)
{
        for (size_t off = 0; off + 8 <= size;) {
                uint32_t len = (uint32_t)data[off] << 24 | (uint32_t)data[off + 1] << 16 |
                               (uint32_t)data[off + 2] << 8 | data[off + 3];
                if (len >= 65536 && len <= SESSION_JSON_MAX)
                        return true;
                off += 8 + (size_t)len;
        }
        return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct events whole, pieces;
        if (declares_large(data, size))
                return 0;
        feed(data, size, 0, &whole);
        feed(data, size, size ? 1 + data[0] % 7 : 1, &pieces);
        FUZZ_CHECK(whole.error == pieces.error && whole.n == pieces.n);
        for (size_t i = 0; i < whole.n; i++)
                FUZZ_CHECK(whole.msg[i] && pieces.msg[i] &&
                           strcmp(whole.msg[i], pieces.msg[i]) == 0);
        events_clear(&whole);
        events_clear(&pieces);
        return 0;
}
