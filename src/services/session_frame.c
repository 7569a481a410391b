/* The session channel's frames from the driver, without I/O: the frame
 * reader and the "done" filter (session_frame.h). A frame is two 32-bit
 * big-endian lengths (JSON, blob) and the JSON; the driver never sends a
 * blob, and the JSON is bounded before anything is allocated for it, and
 * what reading it may allocate while it is read (util/json_bounded.h).
 * Strings in it may hold NUL; the op may not. */
#include "session_frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "util/json_bounded.h"

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
        bool over_budget = false;
        json_t *msg =
                json_loadb_bounded(rd->json, rd->json_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                                   SESSION_PARSE_MAX, NULL, &over_budget);
        session_frame_reset(rd);
        if (over_budget)
                return -E2BIG;
        if (!json_is_object(msg) || !whole_string(json_object_get(msg, "op"))) {
                json_decref(msg);
                return -EPROTO;
        }
        *ret = msg;
        return 0;
}

bool session_nests_deeper(const json_t *v, unsigned limit)
{
        size_t i;
        const char *k;
        json_t *e;
        if (!json_is_array(v) && !json_is_object(v))
                return false;
        if (limit == 0)
                return true;
        if (json_is_array(v)) {
                json_array_foreach((json_t *)v, i, e)
                {
                        if (session_nests_deeper(e, limit - 1))
                                return true;
                }
                return false;
        }
        json_object_foreach((json_t *)v, k, e)
        {
                if (session_nests_deeper(e, limit - 1))
                        return true;
        }
        return false;
}

struct json_size {
        size_t len, max;
};

/* json_dump_callback()'s sink: counts, and stops past the limit. */
static int count_json(const char *buf, size_t size, void *data)
{
        (void)buf;
        struct json_size *n = data;
        n->len += size;
        return n->len > n->max ? -1 : 0;
}

int session_value_check(const json_t *v, size_t max)
{
        if (session_nests_deeper(v, SESSION_DEPTH_MAX))
                return -ELOOP;
        struct json_size n = {.max = max};
        size_t flags = JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15);
        return json_dump_callback(v, count_json, &n, flags) < 0 ? -E2BIG : 0;
}

json_t *session_text_cut(const json_t *text, size_t max)
{
        if (!json_is_string(text))
                return NULL;
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        if (len <= max)
                return json_incref((json_t *)text);
        while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
                max--; /* not inside a character */
        return json_stringn(s, max);
}

/* The run's return_value and return_repr: a value the driver may not send
 * is dropped, and the note why is its repr. */
static void copy_return(json_t *o, const json_t *done, size_t return_max)
{
        json_t *rv = json_object_get(done, "return_value");
        json_t *repr = session_text_cut(json_object_get(done, "return_repr"), return_max);
        int r = rv ? session_value_check(rv, return_max) : 0;
        if (r < 0) {
                char note[160];
                if (r == -ELOOP)
                        snprintf(note, sizeof(note),
                                 "<return_value dropped by the server: nested more than %d deep>",
                                 SESSION_DEPTH_MAX);
                else
                        snprintf(note, sizeof(note),
                                 "<return_value dropped by the server: more than %zu bytes of "
                                 "JSON>",
                                 return_max);
                rv = NULL;
                json_decref(repr);
                repr = json_string(note);
        }
        json_object_set(o, "return_value", rv ? rv : json_null());
        json_object_set_new(o, "return_repr", repr ? repr : json_null());
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

void session_copy_done(json_t *o, const json_t *done, size_t return_max)
{
        json_t *error = json_object_get(done, "error");
        copy_return(o, done, return_max);
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
