/* `codecage run --image REF` in the full binary: the image from the
 * config's store (pulled when missing) becomes the run's root, leased until
 * the run ends. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "images/images.h"
#include "run.h"
#include "util/error.h"

struct run_image {
        struct cli_image_store store;
        struct cage_image *image;
        char user_env[2][96]; /* its USER= and LOGNAME= */
};

/* --image REF: the image from the store (pulled when missing and the
 * config's pull_policy allows) as the root, its Env under --env, its
 * WorkingDir and User unless --workdir / --user say otherwise. */
int run_use_image(struct run_args *a, struct cage_error *err)
{
        const char *ref = a->spec.image;
        if (strcmp(ref, "host") == 0 || ref[0] == '/')
                return 0;
        struct run_image *img = a->image = calloc(1, sizeof(*a->image));
        if (!img)
                return cage_fail(err, -ENOMEM, "--image");
        int r = cli_image_store_open(a->config, &img->store, err);
        if (r < 0)
                return r;
        struct cage_image_op op = {
                .progress = cli_image_progress, .userdata = &img->store, .cancel_fd = -1};
        r = cage_image_ensure(img->store.store, ref, &op, &img->image, err);
        cli_image_progress_end(&img->store);
        if (r < 0)
                return r;
        a->spec.image = img->image->rootfs;
        if (!a->workdir_set && cage_image_workdir(img->image))
                a->spec.workdir = cage_image_workdir(img->image);
        if (!a->user_set && (r = cage_image_user(img->image, &a->spec.uid, &a->spec.gid, err)) < 0)
                return r;
        /* USER and LOGNAME, then the image's Env, then --env: later ones win. */
        const char *front[CAGE_ENV_MAX];
        size_t n = 0;
        char name[64];
        cage_image_user_name(img->image, name, sizeof(name));
        if (name[0]) {
                snprintf(img->user_env[0], sizeof(img->user_env[0]), "USER=%s", name);
                snprintf(img->user_env[1], sizeof(img->user_env[1]), "LOGNAME=%s", name);
                front[n++] = img->user_env[0];
                front[n++] = img->user_env[1];
        }
        for (size_t i = 0; img->image->env[i]; i++) {
                if (n == CAGE_ENV_MAX)
                        return cage_fail(err, -EINVAL, "the image has more than %d variables",
                                         CAGE_ENV_MAX);
                front[n++] = img->image->env[i];
        }
        if (a->spec.n_env + n > CAGE_ENV_MAX)
                return cage_fail(err, -EINVAL, "--env: at most %d variables with the image's",
                                 CAGE_ENV_MAX);
        memmove(&a->spec.env[n], &a->spec.env[0], a->spec.n_env * sizeof(a->spec.env[0]));
        memcpy(&a->spec.env[0], front, n * sizeof(front[0]));
        a->spec.n_env += n;
        a->spec.env[a->spec.n_env] = NULL;
        return 0;
}

struct run_image *run_image_free(struct run_image *img)
{
        if (!img)
                return NULL;
        cage_image_free(img->image);
        cli_image_store_close(&img->store);
        free(img);
        return NULL;
}
