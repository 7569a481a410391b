/* Threads that do upkeep (the pool's refills and disposals, removing
 * sandboxes, reaping idle ones) rather than answer a caller. */
#ifndef CODECAGE_UTIL_BACKGROUND_H
#define CODECAGE_UTIL_BACKGROUND_H

#include <pthread.h>
#include <sched.h>

/* SCHED_BATCH for the calling thread: the same fair share of CPU, but a
 * wake-up never preempts the running thread. Without it, a request thread
 * that wakes a refill thread (on taking a pooled sandbox) loses its CPU to
 * it on a small machine: ~0.6 ms of a pooled run's latency on 2 cores.
 * Threads and processes it creates inherit the policy: one that must not
 * (the launcher thread, whose clones are sandboxes) is created with an
 * explicit SCHED_OTHER. Best effort: a kernel that refuses leaves the
 * thread as it was. */
static inline void thread_mark_background(void)
{
        struct sched_param sp = {.sched_priority = 0};
        (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
}

#endif
