/* Pause points for crash tests (debug_pause.h); only in unsafe debug builds. */
#include "debug_pause.h"

#ifdef CODECAGE_UNSAFE_DEBUG
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdutil.h"

bool debug_pause_wanted(const char *point)
{
        const char *list = getenv("CODECAGE_DEBUG_PAUSE");
        size_t len = strlen(point);
        for (const char *p = list; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != '\0'))
                if (strncmp(p, point, len) == 0 && (p[len] == ',' || p[len] == '\0'))
                        return true;
        return false;
}

void debug_pause_point(const char *point)
{
        if (!debug_pause_wanted(point))
                return;
        char msg[128];
        int n = snprintf(msg, sizeof(msg), "codecage: debug pause at %s\n", point);
        if (n > 0)
                (void)write_all(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : 0);
        for (;;)
                pause();
}
#endif
