/* The service manager's notification protocol (sd_notify(3)), written by
 * hand: one datagram of "KEY=VALUE\n" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or "@name" in the abstract namespace). Without
 * that variable every call is a no-op, so a server not run by systemd pays
 * nothing. No libsystemd: the protocol is a sendto(), and the lean binary
 * stays free of another shared library. */
#ifndef CODECAGE_UTIL_SD_NOTIFY_H
#define CODECAGE_UTIL_SD_NOTIFY_H

#include <stdint.h>

/* Sends state (e.g. "READY=1\nSTATUS=serving"). 1 sent, 0 no manager,
 * -errno when the send failed. */
int sd_notify_send(const char *state);
/* The watchdog interval the manager asked for ($WATCHDOG_USEC, for this
 * process per $WATCHDOG_PID), in microseconds; 0 when none. */
uint64_t sd_watchdog_usec(void);

#endif
