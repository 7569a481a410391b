/* sd_notify(3) by hand: see sd_notify.h. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/sd_notify.h"

int sd_notify_send(const char *state)
{
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t len = path ? strlen(path) : 0;
        if (len == 0)
                return 0;
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@') /* the abstract namespace: a leading NUL */
                sa.sun_path[0] = '\0';
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
        ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
        return n < 0 ? -errno : 1;
}

uint64_t sd_watchdog_usec(void)
{
        const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
        if (!usec || (pid && strtol(pid, NULL, 10) != (long)getpid()))
                return 0;
        char *end;
        unsigned long long v = strtoull(usec, &end, 10);
        return *end == '\0' ? (uint64_t)v : 0;
}
