/* Unit tests for the kept threads (src/util/kept_threads.c): a task runs
 * on the thread a finished one left waiting; tasks given while that thread
 * already has one run at the same time, not one after the other; closing
 * waits for the threads to end. */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <time.h>

#include "harness.h"
#include "util/kept_threads.h"

struct probe {
        pthread_mutex_t lock;
        pthread_cond_t changed;
        int ran;
        bool released;  /* set by the second task */
        bool timed_out; /* the first waited in vain */
        pthread_t threads[2];
};

static struct probe probe = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .changed = PTHREAD_COND_INITIALIZER};

static void note(struct probe *p, int slot)
{
        pthread_mutex_lock(&p->lock);
        if (slot >= 0)
                p->threads[slot] = pthread_self();
        p->ran++;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
}

static void wait_ran(struct probe *p, int n)
{
        pthread_mutex_lock(&p->lock);
        while (p->ran < n)
                pthread_cond_wait(&p->changed, &p->lock);
        pthread_mutex_unlock(&p->lock);
}

static void first_task(void *arg)
{
        note(arg, 0);
}

static void again_task(void *arg)
{
        note(arg, 1);
}

/* Waits (20 s at most) for release_task. */
static void blocked_task(void *arg)
{
        struct probe *p = arg;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 20;
        pthread_mutex_lock(&p->lock);
        while (!p->released && !p->timed_out)
                p->timed_out = pthread_cond_timedwait(&p->changed, &p->lock, &until) != 0;
        pthread_mutex_unlock(&p->lock);
        note(p, -1);
}

static void release_task(void *arg)
{
        struct probe *p = arg;
        pthread_mutex_lock(&p->lock);
        p->released = true;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
        note(p, -1);
}

/* The thread that ran a task runs the next one, once it waits again. */
static void wait_idle(struct kept_threads *k, unsigned n)
{
        for (;;) {
                pthread_mutex_lock(&k->lock);
                bool idle = k->idle >= n;
                pthread_mutex_unlock(&k->lock);
                if (idle)
                        return;
                sched_yield();
        }
}

/* k with one thread, which ran a task and now waits for the next. */
static void one_waiting_thread(struct kept_threads *k)
{
        kept_threads_init(k, 30);
        probe.ran = 0;
        CHECK(kept_threads_run(k, first_task, &probe) == 0);
        wait_ran(&probe, 1);
        wait_idle(k, 1);
}

TEST(a_finished_thread_takes_the_next_task)
{
        struct kept_threads k;
        one_waiting_thread(&k);
        CHECK(kept_threads_run(&k, again_task, &probe) == 0);
        wait_ran(&probe, 2);
        CHECK(pthread_equal(probe.threads[0], probe.threads[1]));
        CHECK(k.threads == 1);
        kept_threads_close(&k);
}

TEST(tasks_given_together_run_at_once)
{
        struct kept_threads k;
        one_waiting_thread(&k);
        /* One thread waits; the second task must not queue behind the first. */
        CHECK(kept_threads_run(&k, blocked_task, &probe) == 0);
        CHECK(kept_threads_run(&k, release_task, &probe) == 0);
        wait_ran(&probe, 3);
        CHECK(probe.released && !probe.timed_out);
        kept_threads_close(&k);
        CHECK(k.threads == 0);
}

RUN_TESTS(T(a_finished_thread_takes_the_next_task), T(tasks_given_together_run_at_once))
