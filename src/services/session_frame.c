/* The session channel's frames from the driver, without I/O: the frame
 * reader and the "done" filter (session_frame.h). A frame is two 32-bit
 * big-endian lengths (JSON, blob) and the JSON; the driver never sends a
 * blob, and the JSON is bounded before anything is allocated for it.
 * Strings in it may hold NUL; the op may not. */
#include "session_frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

void session_frame_reset(struct session_frame_reader *rd)
{
        free(rd->json);
        memset(rd, 0, sizeof(*rd));
}

size_t session_frame_want(const struct session_frame_reader *rd, char **dst)
{
        if (rd->got < 8) {
                *dst = (char *)rd->hdr + rd->got;
                return 8 - rd->got;
        }
        *dst = rd->json + (rd->got - 8);
        return 8 + rd->json_len - rd->got;
}

int session_frame_got(struct session_frame_reader *rd, size_t n)
{
        rd->got += n;
        if (rd->got != 8)
                return 0;
        memcpy(&rd->json_len, rd->hdr, 4);
        memcpy(&rd->blob_len, rd->hdr + 4, 4);
        rd->json_len = ntohl(rd->json_len);
        rd->blob_len = ntohl(rd->blob_len);
        /* The driver never sends blobs. */
        if (rd->json_len < 2 || rd->json_len > SESSION_JSON_MAX || rd->blob_len)
                return -EPROTO;
        if (!(rd->json = malloc(rd->json_len)))
                return -ENOMEM;
        return 0;
}

/* A string whose C text is all of it (no NUL inside). */
static bool whole_string(const json_t *v)
{
        return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

int session_frame_take(struct session_frame_reader *rd, json_t **ret)
{
        /* A string value may hold NUL ("\u0000"): the code's own strings
         * cross exactly. Fields read as C strings are checked for it. */
        json_t *msg =
                json_loadb(rd->json, rd->json_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
        session_frame_reset(rd);
        if (!json_is_object(msg) || !whole_string(json_object_get(msg, "op"))) {
                json_decref(msg);
                return -EPROTO;
        }
        *ret = msg;
        return 0;
}

/* The figures of a run ("images": PNG in base64), when there are any: at
 * most SESSION_IMAGES_MAX strings, anything else dropped. */
static void copy_images(json_t *o, const json_t *images)
{
        if (!json_is_array(images) || json_array_size(images) == 0)
                return;
        json_t *out = json_array();
        size_t i;
        const json_t *v;
        json_array_foreach((json_t *)images, i, v)
        {
                if (out && json_is_string(v) && json_array_size(out) < SESSION_IMAGES_MAX)
                        json_array_append(out, (json_t *)v);
        }
        if (out && json_array_size(out) > 0)
                json_object_set_new(o, "images", out);
        else
                json_decref(out);
}

void session_copy_done(json_t *o, const json_t *done)
{
        json_t *rv = json_object_get(done, "return_value");
        json_t *repr = json_object_get(done, "return_repr");
        json_t *error = json_object_get(done, "error");
        json_object_set(o, "return_value", rv ? rv : json_null());
        json_object_set(o, "return_repr", json_is_string(repr) ? repr : json_null());
        if (json_is_object(error)) {
                json_t *e = json_object();
                static const char *const keys[] = {"type", "message", "traceback"};
                for (size_t i = 0; i < 3; i++) {
                        json_t *v = json_object_get(error, keys[i]);
                        json_object_set_new(e, keys[i],
                                            json_is_string(v) ? json_incref(v) : json_string(""));
                }
                json_object_set_new(o, "error", e);
        } else {
                json_object_set_new(o, "error", json_null());
        }
        copy_images(o, json_object_get(done, "images"));
}
