/* The parsers of what E2B clients send that are not JSON (e2b.h), pure
 * functions without I/O so a unit test and a fuzz target
 * (tests/fuzz/fuzz_e2b.c) reach them:
 *
 *  - a Connect stream request: exactly one envelope (1 byte of flags, a
 *    4-byte big-endian length, that many bytes of one JSON object);
 *  - multipart/form-data uploads: the boundary of the Content-Type, then
 *    one part after another, each with its headers (only the filename of
 *    Content-Disposition is read) and the bytes up to the next boundary;
 *  - the `metadata` filter of a sandbox list ("k=v&k2=v2", each key and
 *    value percent-encoded once more).
 * Every length comes from the bounded body; nothing is read past it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/e2b.h"
#include "util/json_bounded.h"
#include "util/cleanup.h"
#include "util/error.h"

#define FLAG_COMPRESSED 0x01

int e2b_connect_stream_message(const char *body, size_t len, json_t **ret, struct cage_error *err)
{
        if (len < 5)
                return cage_fail(err, -EINVAL, "a Connect stream request needs one envelope");
        const unsigned char *p = (const unsigned char *)body;
        size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (p[0] & FLAG_COMPRESSED)
                return cage_fail(err, -EINVAL, "compressed envelopes are not accepted");
        if (n != len - 5)
                return cage_fail(err, -EINVAL, "the request must be exactly one envelope");
        json_error_t jerr;
        json_t *msg = json_load_request(body + 5, n, JSON_REJECT_DUPLICATES, &jerr, NULL);
        if (!json_is_object(msg)) {
                json_decref(msg);
                return cage_fail(err, -EINVAL, "the request message must be a JSON object");
        }
        *ret = msg;
        return 0;
}

bool e2b_multipart_boundary(const char *content_type, char *out, size_t out_len)
{
        const char *b = content_type ? strcasestr(content_type, "boundary=") : NULL;
        if (!b)
                return false;
        b += strlen("boundary=");
        bool quoted = *b == '"';
        b += quoted;
        size_t n = strcspn(b, quoted ? "\"" : "; \t");
        if (n == 0 || n > E2B_BOUNDARY_MAX || n + 3 > out_len)
                return false;
        snprintf(out, out_len, "--%.*s", (int)n, b);
        return true;
}

/* The filename="..." of a part's headers, %-decoded (browsers and undici
 * escape '"', CR and LF that way); -ENOENT without one. */
static int part_filename(const char *head, size_t len, char **ret)
{
        static const char key[] = "filename=\"";
        const char *f = memmem(head, len, key, sizeof(key) - 1);
        if (!f)
                return -ENOENT;
        f += sizeof(key) - 1;
        const char *end = memchr(f, '"', (size_t)(head + len - f));
        if (!end)
                return -EINVAL;
        return http_decode(f, (size_t)(end - f), false, ret);
}

int e2b_multipart_next(const char *body, size_t len, const char *boundary, size_t *pos,
                       struct e2b_part *ret)
{
        size_t blen = strlen(boundary);
        const char *end = body + len, *p = body + *pos;
        *ret = (struct e2b_part){0};
        if (*pos > len || blen == 0)
                return -EINVAL;
        const char *b = memmem(p, (size_t)(end - p), boundary, blen);
        if (!b)
                return -EINVAL; /* no closing boundary */
        const char *after = b + blen;
        if (end - after >= 2 && after[0] == '-' && after[1] == '-')
                return 0; /* the closing boundary */
        const char *head_end = memmem(after, (size_t)(end - after), "\r\n\r\n", 4);
        if (!head_end)
                return -EINVAL;
        const char *data = head_end + 4;
        const char *next = memmem(data, (size_t)(end - data), boundary, blen);
        if (!next || next - data < 2 || next[-2] != '\r' || next[-1] != '\n')
                return -EINVAL;
        int r = part_filename(after, (size_t)(head_end - after), &ret->filename);
        if (r < 0 && r != -ENOENT)
                return r;
        ret->data = data;
        ret->len = (size_t)(next - 2 - data);
        *pos = (size_t)(next - body);
        return 1;
}

void e2b_part_clear(struct e2b_part *part)
{
        free(part->filename);
        *part = (struct e2b_part){0};
}

int e2b_metadata_matches(const char *filter, const json_t *metadata, bool *ret)
{
        _cleanup_free_ char *copy = strdup(filter);
        if (!copy)
                return -ENOMEM;
        *ret = true;
        char *save = NULL;
        for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(pair, '=');
                _cleanup_free_ char *k = NULL, *v = NULL;
                if (!eq)
                        return -EINVAL;
                *eq = '\0';
                if (http_decode(pair, strlen(pair), true, &k) < 0 ||
                    http_decode(eq + 1, strlen(eq + 1), true, &v) < 0)
                        return -EINVAL;
                const char *have = json_string_value(json_object_get(metadata, k));
                if (!have || strcmp(have, v) != 0)
                        *ret = false;
        }
        return 0;
}
