/* Threads kept for the next task; see kept_threads.h. */
#include "kept_threads.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

struct kept_task {
        void (*fn)(void *);
        void *arg;
        struct kept_task *next;
};

struct thread_start {
        struct kept_threads *k;
        struct kept_task *first;
};

void kept_threads_init(struct kept_threads *k, unsigned keep_s)
{
        *k = (struct kept_threads){.keep_s = keep_s};
        k->queue_end = &k->queue;
        pthread_mutex_init(&k->lock, NULL);
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&k->work, &attr);
        pthread_cond_init(&k->gone, &attr);
        pthread_condattr_destroy(&attr);
}

static void run_task(struct kept_task *task)
{
        void (*fn)(void *) = task->fn;
        void *arg = task->arg;
        free(task);
        fn(arg);
}

/* With k->lock held: the next task handed to this thread, waiting up to
 * keep_s for one; NULL when none came or closing. */
static struct kept_task *next_task(struct kept_threads *k)
{
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += k->keep_s;
        k->idle++;
        while (!k->queue && !k->closing)
                if (pthread_cond_timedwait(&k->work, &k->lock, &until) == ETIMEDOUT)
                        break;
        struct kept_task *task = k->queue;
        if (!task) {
                k->idle--;
                return NULL;
        }
        if (!(k->queue = task->next)) /* whoever queued it took us off idle */
                k->queue_end = &k->queue;
        return task;
}

static void *thread_main(void *arg)
{
        struct kept_threads *k = ((struct thread_start *)arg)->k;
        struct kept_task *task = ((struct thread_start *)arg)->first;
        free(arg);
        while (task) {
                run_task(task);
                pthread_mutex_lock(&k->lock);
                task = next_task(k);
                pthread_mutex_unlock(&k->lock);
        }
        pthread_mutex_lock(&k->lock);
        k->threads--;
        pthread_cond_broadcast(&k->gone);
        pthread_mutex_unlock(&k->lock);
        return NULL;
}

static int start_thread(struct kept_threads *k, struct kept_task *task)
{
        struct thread_start *start = malloc(sizeof(*start));
        if (!start)
                return -ENOMEM;
        *start = (struct thread_start){.k = k, .first = task};
        pthread_mutex_lock(&k->lock);
        k->threads++;
        pthread_mutex_unlock(&k->lock);
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = pthread_create(&thread, &attr, thread_main, start);
        pthread_attr_destroy(&attr);
        if (r == 0)
                return 0;
        free(start);
        pthread_mutex_lock(&k->lock);
        k->threads--;
        pthread_mutex_unlock(&k->lock);
        return -r;
}

int kept_threads_run(struct kept_threads *k, void (*fn)(void *), void *arg)
{
        struct kept_task *task = malloc(sizeof(*task));
        if (!task)
                return -ENOMEM;
        *task = (struct kept_task){.fn = fn, .arg = arg};
        pthread_mutex_lock(&k->lock);
        if (k->idle > 0) {
                k->idle--;
                *k->queue_end = task;
                k->queue_end = &task->next;
                /* Signalled after the unlock: the woken thread does not
                 * wake only to wait for the lock we hold. */
                pthread_mutex_unlock(&k->lock);
                pthread_cond_signal(&k->work);
                return 0;
        }
        pthread_mutex_unlock(&k->lock);
        int r = start_thread(k, task);
        if (r < 0)
                free(task);
        return r;
}

void kept_threads_close(struct kept_threads *k)
{
        pthread_mutex_lock(&k->lock);
        k->closing = true;
        pthread_cond_broadcast(&k->work);
        while (k->threads > 0)
                pthread_cond_wait(&k->gone, &k->lock);
        pthread_mutex_unlock(&k->lock);
        pthread_cond_destroy(&k->work);
        pthread_cond_destroy(&k->gone);
        pthread_mutex_destroy(&k->lock);
}
