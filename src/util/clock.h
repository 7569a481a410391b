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

/* Milliseconds since the Unix epoch. */
static inline int64_t clock_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
