/* Scope-bound cleanup helpers (systemd style): variables declared with
 * _cleanup_free_ / _cleanup_close_ are released when they go out of scope;
 * TAKE_PTR / TAKE_FD hand ownership over explicitly. Destructors accept
 * NULL / -1. */
#ifndef CODECAGE_UTIL_CLEANUP_H
#define CODECAGE_UTIL_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p)
{
        free(*(void **)p);
}

static inline void cleanup_closep(const int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

static inline void cleanup_fclosep(FILE **f)
{
        if (*f)
                fclose(*f);
}

static inline void cleanup_closedirp(DIR **d)
{
        if (*d)
                closedir(*d);
}

#define _cleanup_free_     __attribute__((cleanup(cleanup_freep)))
#define _cleanup_close_    __attribute__((cleanup(cleanup_closep)))
#define _cleanup_fclose_   __attribute__((cleanup(cleanup_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(cleanup_closedirp)))

#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) taken_ = (p);                                                        \
                (p) = NULL;                                                                        \
                taken_;                                                                            \
        })

#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int taken_ = (fd);                                                                 \
                (fd) = -1;                                                                         \
                taken_;                                                                            \
        })

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

#endif
