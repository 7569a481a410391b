/* The content-addressed blob store: <store>/blobs/sha256/<hex>, each file
 * named by the SHA-256 of its bytes. A blob is written to <store>/tmp,
 * hashed and counted while it streams, checked against the digest and size
 * it was announced with, and only then renamed into place (read-only), so
 * the blobs directory never holds a partial or unverified file. Also: the
 * per-digest locks that make concurrent pulls of one blob happen once, and
 * the progress and cancel plumbing of long operations. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define COPY_CHUNK (128 * 1024)

bool image_guard_on(enum image_guard guard)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        static const char *const names[] = {
                [GUARD_PATH] = "image-path",         [GUARD_SYMLINK] = "image-symlink",
                [GUARD_HARDLINK] = "image-hardlink", [GUARD_DEVICES] = "image-devices",
                [GUARD_SETUID] = "image-setuid",     [GUARD_WHITEOUT] = "image-whiteout",
                [GUARD_BOUNDS] = "image-bounds",     [GUARD_DIGEST] = "image-digest",
                [GUARD_ACCOUNTS] = "image-accounts",
        };
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, names[guard]))
                return false;
#else
        (void)guard;
#endif
        return true;
}

static void digest_text(const unsigned char *md, char ret[CAGE_IMAGE_DIGEST_LEN + 1])
{
        memcpy(ret, "sha256:", 7);
        for (int i = 0; i < 32; i++)
                snprintf(ret + 7 + 2 * i, 3, "%02x", md[i]);
}

int digest_buffer(const void *buf, size_t len, char ret[CAGE_IMAGE_DIGEST_LEN + 1])
{
        unsigned char md[32];
        unsigned int n = 0;
        if (!EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL))
                return -EIO;
        digest_text(md, ret);
        return 0;
}

static void blob_rel(const char *digest, char buf[96])
{
        snprintf(buf, 96, "blobs/sha256/%s", digest + 7);
}

bool blob_exists(struct cage_image_store *store, const char *digest)
{
        char rel[96];
        struct stat st;
        if (!cage_image_digest_valid(digest))
                return false;
        blob_rel(digest, rel);
        return fstatat(store_dir_fd(store), rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISREG(st.st_mode);
}

int blob_open(struct cage_image_store *store, const char *digest, struct cage_error *err)
{
        char rel[96];
        if (!cage_image_digest_valid(digest))
                return cage_fail_plain(err, -EINVAL, "invalid digest \"%.80s\"", digest);
        blob_rel(digest, rel);
        int fd = openat(store_dir_fd(store), rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return cage_fail(err, -errno, "blob %s", digest);
        return fd;
}

int blob_read(struct cage_image_store *store, const char *digest, size_t max, char **ret,
              size_t *ret_len, struct cage_error *err)
{
        _cleanup_close_ int fd = blob_open(store, digest, err);
        struct stat st;
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "blob %s", digest);
        if ((uint64_t)st.st_size > max)
                return cage_fail_plain(err, -EFBIG, "blob %s: %lld bytes, more than %zu", digest,
                                       (long long)st.st_size, max);
        _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
        if (!buf)
                return cage_fail(err, -ENOMEM, "blob %s", digest);
        ssize_t n = read_full(fd, buf, (size_t)st.st_size);
        if (n != st.st_size)
                return cage_fail(err, n < 0 ? (int)n : -EIO, "reading blob %s", digest);
        buf[n] = '\0';
        *ret_len = (size_t)n;
        *ret = TAKE_PTR(buf);
        return 0;
}

int blob_writer_open(struct cage_image_store *store, const char *expect, int64_t expect_size,
                     uint64_t max, struct blob_writer *w, struct cage_error *err)
{
        *w = (struct blob_writer){.fd = -1, .max = max, .expect_size = expect_size};
        /* A writer that failed to open is safe to abort: nothing to undo. */
        if (expect)
                snprintf(w->expect, sizeof(w->expect), "%s", expect);
        if (expect_size >= 0 && (uint64_t)expect_size > max && image_guard_on(GUARD_BOUNDS))
                return cage_fail_plain(err, -EFBIG,
                                       "blob %s: %lld bytes, more than the %llu "
                                       "allowed",
                                       expect ? expect : "", (long long)expect_size,
                                       (unsigned long long)max);
        unsigned rnd = (unsigned)getpid() ^ (unsigned)clock();
        static unsigned counter;
        snprintf(w->tmp_name, sizeof(w->tmp_name), "tmp/blob-%d-%u-%u", getpid(), rnd,
                 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
        w->fd = openat(store_dir_fd(store), w->tmp_name,
                       O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (w->fd < 0) {
                w->tmp_name[0] = '\0';
                return cage_fail(err, -errno, "creating a blob in the image store");
        }
        w->md = EVP_MD_CTX_new();
        if (!w->md || !EVP_DigestInit_ex(w->md, EVP_sha256(), NULL)) {
                blob_writer_abort(store, w);
                return cage_fail(err, -ENOMEM, "sha256");
        }
        return 0;
}

int blob_writer_write(struct blob_writer *w, const void *buf, size_t len, struct cage_error *err)
{
        bool bounded = image_guard_on(GUARD_BOUNDS);
        if (bounded && (w->size + len > w->max))
                return cage_fail_plain(err, -EFBIG, "blob %s: more than the %llu bytes allowed",
                                       w->expect, (unsigned long long)w->max);
        if (w->expect_size >= 0 && w->size + len > (uint64_t)w->expect_size &&
            image_guard_on(GUARD_DIGEST))
                return cage_fail_plain(err, -EBADMSG, "blob %s: more bytes than its %lld",
                                       w->expect, (long long)w->expect_size);
        if (!EVP_DigestUpdate(w->md, buf, len))
                return cage_fail(err, -EIO, "sha256");
        int r = write_all(w->fd, buf, len);
        if (r < 0)
                return cage_fail(err, r, "writing a blob to the image store");
        w->size += len;
        return 0;
}

static int writer_verify(struct blob_writer *w, char digest[CAGE_IMAGE_DIGEST_LEN + 1],
                         struct cage_error *err)
{
        unsigned char md[32];
        unsigned int n = 0;
        if (!EVP_DigestFinal_ex(w->md, md, &n))
                return cage_fail(err, -EIO, "sha256");
        digest_text(md, digest);
        if (!image_guard_on(GUARD_DIGEST))
                return 0;
        if (w->expect_size >= 0 && w->size != (uint64_t)w->expect_size)
                return cage_fail_plain(err, -EBADMSG, "blob %s: %llu bytes, not the %lld announced",
                                       w->expect, (unsigned long long)w->size,
                                       (long long)w->expect_size);
        if (w->expect[0] && strcmp(w->expect, digest) != 0)
                return cage_fail_plain(err, -EBADMSG, "blob %s: its content has digest %s",
                                       w->expect, digest);
        return 0;
}

int blob_writer_commit(struct cage_image_store *store, struct blob_writer *w,
                       char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        char digest[CAGE_IMAGE_DIGEST_LEN + 1], rel[96];
        int r = writer_verify(w, digest, err);
        if (r < 0) {
                blob_writer_abort(store, w);
                return r;
        }
        /* Unverified content can only land under the announced name when
         * the digest guard is off (the unsafe build's tests). */
        const char *name = w->expect[0] ? w->expect : digest;
        blob_rel(name, rel);
        if (fchmod(w->fd, 0444) < 0 || fsync(w->fd) < 0 ||
            renameat(store_dir_fd(store), w->tmp_name, store_dir_fd(store), rel) < 0) {
                r = cage_fail(err, -errno, "storing blob %s", name);
                blob_writer_abort(store, w);
                return r;
        }
        w->tmp_name[0] = '\0';
        blob_writer_abort(store, w);
        if (ret_digest)
                memcpy(ret_digest, name, CAGE_IMAGE_DIGEST_LEN + 1);
        return 0;
}

void blob_writer_abort(struct cage_image_store *store, struct blob_writer *w)
{
        if (w->fd >= 0)
                close(w->fd);
        if (w->tmp_name[0])
                unlinkat(store_dir_fd(store), w->tmp_name, 0);
        EVP_MD_CTX_free(w->md);
        *w = (struct blob_writer){.fd = -1};
}

int blob_put_fd(struct cage_image_store *store, int fd, const char *expect, int64_t expect_size,
                uint64_t max, char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        struct blob_writer w;
        int r = blob_writer_open(store, expect, expect_size, max, &w, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *buf = malloc(COPY_CHUNK);
        if (!buf) {
                blob_writer_abort(store, &w);
                return cage_fail(err, -ENOMEM, "copying a blob");
        }
        for (;;) {
                ssize_t n = read(fd, buf, COPY_CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        r = cage_fail(err, -errno, "reading a blob");
                if (n <= 0)
                        break;
                if ((r = blob_writer_write(&w, buf, (size_t)n, err)) < 0)
                        break;
        }
        if (r < 0) {
                blob_writer_abort(store, &w);
                return r;
        }
        return blob_writer_commit(store, &w, ret_digest, err);
}

int blob_put_buffer(struct cage_image_store *store, const void *buf, size_t len,
                    char ret_digest[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        struct blob_writer w;
        int r = blob_writer_open(store, NULL, -1, len, &w, err);
        if (r < 0 || (r = blob_writer_write(&w, buf, len, err)) < 0) {
                blob_writer_abort(store, &w);
                return r;
        }
        return blob_writer_commit(store, &w, ret_digest, err);
}

bool op_cancelled(const struct cage_image_op *op)
{
        if (!op)
                return false;
        if (op->cancelled && *op->cancelled)
                return true;
        if (op->cancel_fd >= 0) {
                struct pollfd p = {.fd = op->cancel_fd, .events = POLLIN};
                return poll(&p, 1, 0) > 0;
        }
        return false;
}

void op_progress(const struct cage_image_op *op, uint64_t done, uint64_t total, const char *fmt,
                 ...)
{
        char text[256];
        if (!op || !op->progress)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        op->progress(op->userdata, done, total, text);
}

int store_lock_named(struct cage_image_store *store, const char *kind, const char *digest,
                     const struct cage_image_op *op, struct cage_error *err)
{
        char rel[128];
        snprintf(rel, sizeof(rel), "tmp/%s-%s.lock", kind,
                 cage_image_digest_valid(digest) ? digest + 7 : digest);
        _cleanup_close_ int fd =
                openat(store_dir_fd(store), rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cage_fail(err, -errno, "lock %s", rel);
        /* flock locks belong to the open file description: this fd conflicts
         * with every other open of the file, other threads' included. */
        while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK && errno != EINTR)
                        return cage_fail(err, -errno, "lock %s", rel);
                if (op_cancelled(op))
                        return cage_fail_plain(err, -ECANCELED, "cancelled");
                struct timespec ts = {0, 50 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        return TAKE_FD(fd);
}
