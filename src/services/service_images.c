/* Images for the service's sandboxes: the store under <data_dir>/images
 * (src/images), an image got — or pulled on first use, as the config's
 * pull_policy allows, audited as image.pull — when a sandbox with that
 * image starts, and its User resolved in the image's own passwd and group
 * files. The image stays leased (in the store) as long as the sandbox that
 * uses it exists: the lease is attached to the box. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/box.h"
#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define ACCOUNTS_FILE_MAX (1024 * 1024) /* bytes read of an image's passwd or group */
#define ID_MAX            4294967294ULL

int svc_images_open(struct cage_service *svc, struct cage_error *err)
{
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/images", svc->cfg->data_dir) < 0)
                return cage_fail(err, -ENOMEM, "paths");
        return cage_image_store_open(dir, &svc->cfg->images, &svc->images, err);
}

void svc_images_close(struct cage_service *svc)
{
        svc->images = cage_image_store_close(svc->images);
}

/* ---- pulling on first use ---- */

struct pull_progress {
        const struct cage_service_io *io;
        uint64_t last_ms;
};

static void on_pull_progress(void *userdata, uint64_t done, uint64_t total, const char *status)
{
        struct pull_progress *p = userdata;
        uint64_t now = clock_mono_ms();
        if (!p->io || !p->io->on_status || now - p->last_ms < 500)
                return;
        p->last_ms = now;
        char line[256];
        if (total)
                snprintf(line, sizeof(line), "%s (%llu of %llu MiB)", status,
                         (unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
        else
                snprintf(line, sizeof(line), "%s", status);
        p->io->on_status(p->io->on_status_ctx, line);
}

/* A registry that cannot be reached or answers nonsense fails the request
 * as a gateway does (502), not as codecage's own failure. */
static int registry_error(int r)
{
        switch (r) {
        case 0:
        case -ENOENT: /* no such image or tag: 404 */
        case -EPERM:
        case -EACCES:
        case -EINVAL:
        case -ETIMEDOUT:
        case -ECANCELED:
        case -ENOMEM:
        case -ENOSPC:
        case -EDQUOT:
        case -E2BIG:
        case -EFBIG:
                return r;
        }
        return -EREMOTEIO;
}

static int pull(struct cage_service *svc, const char *ref, const char *tenant,
                const struct cage_service_io *io, struct cage_image **ret, struct cage_error *err)
{
        struct pull_progress progress = {.io = io};
        struct cage_image_op op = {.progress = on_pull_progress,
                                   .userdata = &progress,
                                   .cancel_fd = io ? io->cancel_fd : -1};
        if (io && io->on_status)
                io->on_status(io->on_status_ctx, "pulling the image");
        uint64_t t0 = clock_mono_ms();
        int r = registry_error(cage_image_pull(svc->images, ref, &op, ret, err));
        json_t *fields = json_pack("{s:s, s:s, s:I}", "ref", ref, "status", r < 0 ? "failed" : "ok",
                                   "duration_ms", (json_int_t)(clock_mono_ms() - t0));
        if (r < 0)
                json_object_set_new(fields, "reason", json_string(err->message));
        else
                json_object_update_new(fields,
                                       json_pack("{s:s, s:s}", "id", (*ret)->id, "manifest_digest",
                                                 (*ret)->manifest_digest));
        svc_audit(svc, CAGE_AUDIT_IMAGE_PULL, tenant, NULL, NULL, fields);
        return r;
}

/* The image, from the store or pulled when the pull policy allows. */
static int obtain(struct cage_service *svc, const char *ref, const char *tenant,
                  const struct cage_service_io *io, struct cage_image **ret, struct cage_error *err)
{
        int r = cage_image_get(svc->images, ref, ret, err);
        if (r != -ENOENT)
                return r;
        if (svc->cfg->images.pull_policy == CAGE_PULL_NEVER)
                return cage_fail_plain(err, -ENOENT,
                                       "image: \"%s\" is not on this server and its pull_policy "
                                       "is \"never\" (codecage image pull or import it first)",
                                       ref);
        return pull(svc, ref, tenant, io, ret, err);
}

/* ---- the image's user ---- */

/* Reads etc/<name> of the image's root into a NUL-terminated buffer;
 * every path component resolves inside that root. */
static int read_accounts(const char *rootfs, const char *name, char **ret)
{
        _cleanup_close_ int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return -errno;
        char rel[32];
        snprintf(rel, sizeof(rel), "etc/%s", name);
        struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
        if (fd < 0)
                return -errno;
        char *buf = malloc(ACCOUNTS_FILE_MAX + 1);
        if (!buf)
                return -ENOMEM;
        ssize_t n = read_full(fd, buf, ACCOUNTS_FILE_MAX);
        if (n < 0) {
                free(buf);
                return (int)n;
        }
        buf[n] = '\0';
        *ret = buf;
        return 0;
}

static bool parse_id(const char *s, uint32_t *ret)
{
        char *end;
        if (!s[0] || s[0] < '0' || s[0] > '9')
                return false;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end || v > ID_MAX)
                return false;
        *ret = (uint32_t)v;
        return true;
}

/* Finds `name` in passwd/group text ("name:x:id:gid:..."): its id (field
 * 3) and, for passwd, its group (field 4). */
static bool lookup(const char *text, const char *name, uint32_t *id, uint32_t *gid)
{
        size_t len = strlen(name);
        for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
                if (strncmp(line, name, len) != 0 || line[len] != ':')
                        continue;
                char fields[4][24] = {{0}};
                const char *p = line + len + 1;
                for (int f = 0; f < 3 && p; f++) {
                        p = strchr(p, ':');
                        if (!p)
                                break;
                        p++;
                        size_t n = strcspn(p, ":\n");
                        snprintf(fields[f], sizeof(fields[f]), "%.*s", (int)n, p);
                }
                return parse_id(fields[0], id) && (!gid || parse_id(fields[1], gid));
        }
        return false;
}

/* One side of User ("name" or "1000") against an accounts file. */
static int resolve_one(const char *rootfs, const char *file, const char *what, uint32_t *id,
                       uint32_t *gid, const char *image_ref, struct cage_error *err)
{
        if (parse_id(what, id))
                return 1; /* numeric: no lookup, gid unknown */
        _cleanup_free_ char *text = NULL;
        int r = read_accounts(rootfs, file, &text);
        if (r == 0 && lookup(text, what, id, gid))
                return 0;
        return cage_fail_plain(err, -EINVAL,
                               "image \"%s\": its User \"%s\" is not in its /etc/%s; use an image "
                               "whose User exists",
                               image_ref, what, file);
}

/* User is "user", "uid", "user:group" or "uid:gid"; unset means root, as
 * image authors expect. Whatever it is, it maps to the sandbox's own
 * unprivileged host id. */
static int resolve_user(const struct cage_image *image, struct svc_image_launch *launch,
                        struct cage_error *err)
{
        char user[256], *group;
        launch->uid = launch->gid = 0;
        if (!image->user[0])
                return 0;
        snprintf(user, sizeof(user), "%s", image->user);
        group = strchr(user, ':');
        if (group)
                *group++ = '\0';
        const char *ref = image->ref[0] ? image->ref : image->id;
        int r = resolve_one(image->rootfs, "passwd", user, &launch->uid, &launch->gid, ref, err);
        if (r < 0)
                return r;
        if (r == 1 && !group)
                launch->gid = launch->uid;
        if (group && resolve_one(image->rootfs, "group", group, &launch->gid, NULL, ref, err) < 0)
                return -EINVAL;
        return 0;
}

/* WorkingDir, when it is a clean absolute path of a directory the image
 * has (resolved inside its root); the sandbox cannot make one, its root
 * being read-only, so another leaves /workspace. */
static const char *usable_workdir(const struct cage_image *image)
{
        const char *wd = image->working_dir;
        if (wd[0] != '/' || strstr(wd, "/./") || strstr(wd, "/../") || strstr(wd, "//") ||
            strlen(wd) > 1024)
                return NULL;
        _cleanup_close_ int root = open(image->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        int fd = root < 0 ? -1 : (int)syscall(SYS_openat2, root, wd + 1, &how, sizeof(how));
        if (fd < 0)
                return wd[1] ? NULL : wd;
        close(fd);
        return wd;
}

/* ---- for a launch ---- */

int svc_image_acquire(struct cage_service *svc, const char *ref, const char *tenant,
                      const struct cage_service_io *io, struct svc_image_launch *ret,
                      struct cage_error *err)
{
        struct cage_image *image = NULL;
        memset(ret, 0, sizeof(*ret));
        if (strcmp(ref, "host") == 0)
                return 0;
        int r = obtain(svc, ref, tenant, io, &image, err);
        if (r == 0 && (r = resolve_user(image, ret, err)) < 0)
                image = cage_image_free(image);
        ret->image = image;
        ret->workdir = image ? usable_workdir(image) : NULL;
        return r;
}

static void release_image(void *data)
{
        cage_image_free(data);
}

void svc_image_attach(struct cage_box *box, struct svc_image_launch *launch)
{
        if (launch->image)
                cage_box_attach(box, launch->image, release_image);
        launch->image = NULL;
}

void svc_image_release(struct svc_image_launch *launch)
{
        launch->image = cage_image_free(launch->image);
}
