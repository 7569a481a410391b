/* The sealed memfds of the runtime images the library carries (init_image.c). */
#ifndef CODECAGE_CORE_INIT_IMAGE_H
#define CODECAGE_CORE_INIT_IMAGE_H

#include <sys/types.h>

#include "codecage/codecage.h"

/* The memfd (made once per process, kept open; do not close it), or
 * -errno. Safe from any thread. */
int cage_init_image_fd(struct cage_error *err);
/* The same for the zygote's spawn object (runtime/zygote_child.c). */
int cage_zygote_child_image_fd(struct cage_error *err);
/* A new memfd holding len bytes: sealed, reopened read-only, mode `mode`
 * (the caller closes it), or -errno. */
int cage_sealed_memfd(const char *name, const void *bytes, size_t len, mode_t mode,
                      struct cage_error *err);

#endif
