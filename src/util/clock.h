/* The clocks codecage reads: monotonic time for deadlines and durations,
 * wall-clock time for timestamps that are stored or shown. */
#ifndef CODECAGE_UTIL_CLOCK_H
#define CODECAGE_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_mono_ms(void)
{
        return clock_mono_ns() / 1000000ULL;
}

/* A poll(2) timeout for a clock_mono_ms() deadline: 0 once it has passed,
 * at most a minute (the caller polls again, so a far deadline holds). */
static inline int clock_poll_ms_until(uint64_t deadline_ms)
{
        uint64_t now = clock_mono_ms();
        if (now >= deadline_ms)
                return 0;
        return deadline_ms - now > 60000 ? 60000 : (int)(deadline_ms - now);
}

/* Milliseconds since the Unix epoch. */
static inline int64_t clock_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
