/* Error object helpers; see error.h. Messages are truncated, never overrun. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int fail(struct cage_error *err, int code, bool errno_text, const char *fmt, va_list ap)
{
        if (code >= 0)
                code = -EIO;
        if (!err)
                return code;
        int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
        if (errno_text && n >= 0 && (size_t)n < sizeof(err->message) - 3 && code != -EINVAL)
                snprintf(err->message + n, sizeof(err->message) - (size_t)n, ": %s",
                         strerror(-code));
        err->code = code;
        return code;
}

int cage_fail(struct cage_error *err, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = fail(err, code, true, fmt, ap);
        va_end(ap);
        return r;
}

int cage_fail_plain(struct cage_error *err, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = fail(err, code, false, fmt, ap);
        va_end(ap);
        return r;
}

void cage_error_clear(struct cage_error *err)
{
        if (err) {
                err->code = 0;
                err->message[0] = '\0';
        }
}
