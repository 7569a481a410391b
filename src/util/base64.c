/* Strict base64 (RFC 4648, standard alphabet) for file contents sent in
 * JSON: the length is a multiple of 4, "=" appears only as the final one
 * or two characters, no whitespace or line breaks, and the unused bits of
 * the last group are zero -- so every byte string has exactly one accepted
 * encoding and a garbled upload is refused instead of silently altered. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/base64.h"
#include "util/cleanup.h"

static int sextet(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

/* One group of 4 characters, of which the last `pad` are "=". */
static int decode_group(const char *s, size_t pad, unsigned char *out)
{
        uint32_t v = 0;
        for (size_t i = 0; i < 4; i++) {
                int x = i < 4 - pad ? sextet(s[i]) : (s[i] == '=' ? 0 : -1);
                if (x < 0)
                        return -EINVAL;
                v = v << 6 | (uint32_t)x;
        }
        if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
                return -EINVAL; /* non-zero unused bits */
        out[0] = (unsigned char)(v >> 16);
        out[1] = (unsigned char)(v >> 8);
        out[2] = (unsigned char)v;
        return (int)(3 - pad);
}

int cage_base64_decode(const char *s, size_t len, void **ret, size_t *ret_len)
{
        if (len % 4 != 0)
                return -EINVAL;
        _cleanup_free_ unsigned char *out = malloc(len / 4 * 3 + 1);
        size_t w = 0;
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < len; i += 4) {
                bool last = i + 4 == len;
                size_t pad = !last ? 0 : s[i + 3] != '=' ? 0 : s[i + 2] != '=' ? 1 : 2;
                int n = decode_group(s + i, pad, out + w);
                if (n < 0)
                        return n;
                w += (size_t)n;
        }
        out[w] = '\0';
        *ret = TAKE_PTR(out);
        *ret_len = w;
        return 0;
}
