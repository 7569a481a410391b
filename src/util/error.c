/* Error object helpers; see error.h. Messages are truncated, never overrun. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cage_fail(struct cage_error *err, int code, const char *fmt, ...)
{
        if (code >= 0)
                code = -EIO;
        if (!err)
                return code;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof(err->message) - 3 && code != -EINVAL)
                snprintf(err->message + n, sizeof(err->message) - (size_t)n, ": %s",
                         strerror(-code));
        err->code = code;
        return code;
}

void cage_error_clear(struct cage_error *err)
{
        if (err) {
                err->code = 0;
                err->message[0] = '\0';
        }
}
