/* The sealed, execute-only memfd holding codecage-init (init_image.c). */
#ifndef CODECAGE_CORE_INIT_IMAGE_H
#define CODECAGE_CORE_INIT_IMAGE_H

#include "codecage/codecage.h"

/* The memfd (made once per process, kept open; do not close it), or
 * -errno. Safe from any thread. */
int cage_init_image_fd(struct cage_error *err);

#endif
