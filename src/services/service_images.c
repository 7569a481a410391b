/* Images for the service's sandboxes: the store under <data_dir>/images
 * (src/images), and an image got — or pulled on first use, as the config's
 * pull_policy allows, audited as image.pull — when a sandbox with that
 * image starts, with its User and WorkingDir (images/launch.c). The image stays leased (in the
 * store) as long as the sandbox that uses it exists: the lease is attached to the box. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/box.h"
#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

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
        cage_metrics_image_pull(r == 0);
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
        if (r == 0 && (r = cage_image_user(image, &ret->uid, &ret->gid, err)) < 0)
                image = cage_image_free(image);
        ret->image = image;
        ret->workdir = image ? cage_image_workdir(image) : NULL;
        if (image)
                cage_image_user_name(image, ret->user_name, sizeof(ret->user_name));
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

/* ---- the images API ---- */

int cage_service_images_list(struct cage_service *svc, json_t **ret, struct cage_error *err)
{
        return cage_image_list(svc->images, ret, err);
}

int cage_service_image_inspect(struct cage_service *svc, const char *ref, json_t **ret,
                               struct cage_error *err)
{
        return cage_image_inspect(svc->images, ref, ret, err);
}

int cage_service_image_pull(struct cage_service *svc, const char *tenant, const json_t *req,
                            const struct cage_service_io *io, json_t **ret, struct cage_error *err)
{
        const char *text = json_string_value(json_object_get(req, "ref"));
        struct cage_image_ref ref;
        struct cage_image *image = NULL;
        if (!json_is_object(req) || json_object_size(req) != 1 || !text)
                return cage_fail(err, -EINVAL, "the body must be {\"ref\": \"<image reference>\"}");
        int r = cage_image_ref_parse(text, &ref, err);
        if (r < 0)
                return r;
        if (!cage_images_config_allows(&svc->cfg->images, ref.full))
                r = cage_fail_plain(err, -EPERM,
                                    "ref: \"%.300s\" is not allowed by this server (images.allow)",
                                    ref.full);
        else if (svc->cfg->images.pull_policy == CAGE_PULL_NEVER)
                r = cage_fail_plain(err, -EPERM,
                                    "this server does not pull images (pull_policy \"never\")");
        if (r == 0 && (r = pull(svc, ref.full, tenant, io, &image, err)) == 0)
                r = cage_image_inspect(svc->images, image->id, ret, err);
        cage_image_free(image);
        svc_audit_denied(svc, r, tenant, NULL, err);
        return r;
}

/* The upload into a file of the store's own directory, then imported. */
int cage_service_image_import(struct cage_service *svc, const char *tenant, const void *data,
                              size_t len, const char *tag, json_t **ret, struct cage_error *err)
{
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/images/upload-XXXXXX", svc->cfg->data_dir) < 0)
                return cage_fail(err, -ENOMEM, "paths");
        _cleanup_close_ int fd = mkostemp(path, O_CLOEXEC);
        if (fd < 0)
                return cage_fail(err, -errno, "storing the upload");
        int r = write_all(fd, data, len);
        if (r < 0)
                r = cage_fail(err, r, "storing the upload");
        else
                r = cage_image_import(svc->images, path, tag, NULL, ret, err);
        unlink(path);
        if (r == 0)
                svc_audit(svc, CAGE_AUDIT_IMAGE_IMPORT, tenant, NULL, NULL,
                          json_pack("{s:s, s:O}", "path", "upload", "images", *ret));
        return r;
}

int cage_service_image_remove(struct cage_service *svc, const char *tenant, const char *ref,
                              json_t **ret, struct cage_error *err)
{
        char id[CAGE_IMAGE_DIGEST_LEN + 1] = "";
        int r = cage_image_remove(svc->images, ref, id, err);
        if (r < 0)
                return r;
        svc_audit(svc, CAGE_AUDIT_IMAGE_REMOVE, tenant, NULL, NULL,
                  json_pack("{s:s, s:s}", "ref", ref, "id", id));
        *ret = json_pack("{s:s, s:s}", "removed", ref, "id", id);
        return *ret ? 0 : cage_fail(err, -ENOMEM, "reply");
}
