/* Strict base64 decoding (RFC 4648, standard alphabet; base64.c says how
 * strict). */
#ifndef CODECAGE_UTIL_BASE64_H
#define CODECAGE_UTIL_BASE64_H

#include <stddef.h>

/* Decodes s[0..len) into *ret (malloc'ed, NUL-terminated after *ret_len
 * bytes): -EINVAL for anything but canonical base64, -ENOMEM. */
int cage_base64_decode(const char *s, size_t len, void **ret, size_t *ret_len);

#endif
