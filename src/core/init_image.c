/* The codecage-init image: the bytes of runtime/codecage-init.c's static
 * binary, carried in this library (tools/embed-binary.sh), put once per
 * process into a memfd that long-lived sandboxes exec as their pid 1.
 *
 * The memfd is sealed (no write, grow or shrink, no further seals), then
 * reopened read-only through /proc/self/fd so no writable description of it
 * exists (exec would fail with ETXTBSY, and nothing could change it later),
 * and made execute-only (mode 0111): the sandbox can run it but not read
 * it, which also makes the exec'd process non-dumpable. This is runc's
 * answer to CVE-2019-5736: no host binary that runs inside is writable. */
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

static pthread_once_t image_once = PTHREAD_ONCE_INIT;
static int image_fd = -1;
static int image_r;
static struct cage_error image_err;

static int memfd_exec(void)
{
        int fd = memfd_create("codecage-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
        if (fd < 0 && errno == EINVAL) /* kernels before 6.3 know no MFD_EXEC */
                fd = memfd_create("codecage-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        return fd < 0 ? -errno : fd;
}

static int make_image(struct cage_error *err)
{
        size_t len = (size_t)(cage_init_image_end - cage_init_image);
        _cleanup_close_ int rw = memfd_exec();
        if (rw < 0)
                return cage_fail(err, rw, "memfd for codecage-init");
        if (write_all(rw, cage_init_image, len) < 0)
                return cage_fail(err, -errno, "writing codecage-init");
        if (fcntl(rw, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return cage_fail(err, -errno, "sealing codecage-init");
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", rw);
        _cleanup_close_ int ro = open(path, O_RDONLY | O_CLOEXEC);
        if (ro < 0)
                return cage_fail(err, -errno, "reopening codecage-init read-only");
        if (fchmod(ro, 0111) < 0)
                return cage_fail(err, -errno, "making codecage-init execute-only");
        return TAKE_FD(ro);
}

static void image_once_fn(void)
{
        image_r = make_image(&image_err);
        if (image_r >= 0)
                image_fd = image_r;
}

int cage_init_image_fd(struct cage_error *err)
{
        pthread_once(&image_once, image_once_fn);
        if (image_fd < 0) {
                if (err)
                        *err = image_err;
                return image_r;
        }
        return image_fd;
}
