/* The runtime images the library carries as bytes (tools/embed-binary.sh),
 * each put once per process into a sealed memfd:
 *  - codecage-init, runtime/codecage-init.c's static binary, which
 *    long-lived sandboxes exec as their pid 1;
 *  - the zygote's spawn, runtime/zygote_child.c's shared object, which a
 *    zygote template's python3 loads (src/core/zygote.c).
 *
 * A memfd is sealed (no write, grow or shrink, no further seals), then
 * reopened read-only through /proc/self/fd so no writable description of it
 * exists (exec would fail with ETXTBSY, and nothing could change it later).
 * codecage-init is made execute-only (mode 0111): the sandbox can run it
 * but not read it, which also makes the exec'd process non-dumpable. This
 * is runc's answer to CVE-2019-5736: no host binary that runs inside is
 * writable. The spawn object is mode 0555: the template's loader reads it
 * (it holds nothing secret, and no sandbox ever sees its fd). */
#include "init_image.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

extern const unsigned char cage_init_image[];
extern const unsigned char cage_init_image_end[];
extern const unsigned char cage_zygote_child_image[];
extern const unsigned char cage_zygote_child_image_end[];

struct runtime_image {
        const char *name;
        const unsigned char *start, *end;
        mode_t mode;
        pthread_once_t once;
        int fd; /* or -errno */
        struct cage_error err;
};

static struct runtime_image init_image = {
        "codecage-init", cage_init_image, cage_init_image_end, 0111, PTHREAD_ONCE_INIT, -1, {0}};
static struct runtime_image zygote_child_image = {"codecage-zygote-child",
                                                  cage_zygote_child_image,
                                                  cage_zygote_child_image_end,
                                                  0555,
                                                  PTHREAD_ONCE_INIT,
                                                  -1,
                                                  {0}};

static int memfd_exec(const char *name)
{
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
        if (fd < 0 && errno == EINVAL) /* kernels before 6.3 know no MFD_EXEC */
                fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        return fd < 0 ? -errno : fd;
}

int cage_sealed_memfd(const char *name, const void *bytes, size_t len, mode_t mode,
                      struct cage_error *err)
{
        _cleanup_close_ int rw = memfd_exec(name);
        if (rw < 0)
                return cage_fail(err, rw, "memfd for %s", name);
        if (write_all(rw, bytes, len) < 0)
                return cage_fail(err, -errno, "writing %s", name);
        if (fcntl(rw, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return cage_fail(err, -errno, "sealing %s", name);
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", rw);
        _cleanup_close_ int ro = open(path, O_RDONLY | O_CLOEXEC);
        if (ro < 0)
                return cage_fail(err, -errno, "reopening %s read-only", name);
        if (fchmod(ro, mode) < 0)
                return cage_fail(err, -errno, "setting the mode of %s", name);
        return TAKE_FD(ro);
}

static int make_image(const struct runtime_image *img, struct cage_error *err)
{
        return cage_sealed_memfd(img->name, img->start, (size_t)(img->end - img->start), img->mode,
                                 err);
}

static void init_image_once(void)
{
        init_image.fd = make_image(&init_image, &init_image.err);
}

static void zygote_child_image_once(void)
{
        zygote_child_image.fd = make_image(&zygote_child_image, &zygote_child_image.err);
}

static int image_fd(struct runtime_image *img, void (*once)(void), struct cage_error *err)
{
        pthread_once(&img->once, once);
        if (img->fd < 0 && err)
                *err = img->err;
        return img->fd;
}

int cage_init_image_fd(struct cage_error *err)
{
        return image_fd(&init_image, init_image_once, err);
}

int cage_zygote_child_image_fd(struct cage_error *err)
{
        return image_fd(&zygote_child_image, zygote_child_image_once, err);
}
