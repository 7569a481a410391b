/* Threads kept for the next task: a task goes to a thread that finished
 * one and waits for the next (keep_s seconds at most), or to a new thread.
 * Creating a thread per task, and freeing its stack after, costs more
 * than a short task itself. */
#ifndef CODECAGE_UTIL_KEPT_THREADS_H
#define CODECAGE_UTIL_KEPT_THREADS_H

#include <pthread.h>
#include <stdbool.h>

struct kept_task;

struct kept_threads {
        pthread_mutex_t lock;
        pthread_cond_t work; /* a task was queued, or closing */
        pthread_cond_t gone; /* a thread ended */
        struct kept_task *queue, **queue_end;
        unsigned idle;    /* waiting threads no queued task is promised to */
        unsigned threads; /* alive */
        unsigned keep_s;
        bool closing;
};

void kept_threads_init(struct kept_threads *k, unsigned keep_s);
/* Runs fn(arg) on a waiting thread, or else on a new one; 0, or -errno
 * when no thread could take it (fn does not run). */
int kept_threads_run(struct kept_threads *k, void (*fn)(void *), void *arg);
/* Once every task has ended: waits for the threads to go, then frees what
 * k holds. */
void kept_threads_close(struct kept_threads *k);

#endif
