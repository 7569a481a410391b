/* Error objects: cage_fail() fills a caller-owned struct cage_error with a
 * -errno code and a formatted one-line message, and returns the code, so
 * error paths read `return cage_fail(err, -errno, "open %s", path);`.
 * The errno text is appended, except for -EINVAL: validation messages are
 * complete sentences naming the field and its allowed range. */
#ifndef CODECAGE_UTIL_ERROR_H
#define CODECAGE_UTIL_ERROR_H

#include "codecage/codecage.h"

int cage_fail(struct cage_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* The same without the errno text: for messages that say it all already
 * ("no sandbox named ..."), which clients and models read as they are. */
int cage_fail_plain(struct cage_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void cage_error_clear(struct cage_error *err);

#endif
