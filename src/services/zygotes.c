/* The service's zygotes (core/zygote.h): starting a template for a spec
 * (the pool's shelves and named sandboxes alike), and the templates of
 * named sandboxes, one per image, from which every named sandbox that can
 * be is forked with its session already loaded.
 *
 * A named sandbox's template is launched from the image's default policy
 * (the config's defaults; no env of a request, no secret, no network): its
 * memory is what every child starts as a copy of, so it must hold nothing
 * of any one sandbox. Each child gets its own limits, environment, working
 * directory and workspace from its spec (zygote.c). A sandbox the template
 * cannot make (mounts of its own, a requirements layer, another image root
 * than the template's, protections switched off) starts as every sandbox
 * does, as does every sandbox when `fork_sandboxes` is false.
 *
 * A template is started on the first create that wants it, again after it
 * ended (at most every ZYGOTE_RETRY_MS), and when its image's reference
 * now names another root. Forks hold a reference, so a template that is
 * replaced is freed once no fork uses it.
 *
 * A template also retires after `sandboxes_per_template` forks (config),
 * and a fresh one takes over. Every child stays linked to its template's
 * memory: the kernel's reverse map of each of those pages lists every
 * child, and the template's own lists (children, pid namespace) grow with
 * them, so costs that walk them grow with the sandboxes alive. A retired
 * template lives until its last sandbox ends (they live in its pid
 * namespace); the reaper frees it then (svc_zygotes_sweep). At most ZYGOTE_RETIRED_MAX retire per
 * image: past that, the current one goes on forking, so sandboxes that
 * outlive their generation pin a bounded number of templates. */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/zygote.h"
#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define ZYGOTE_RETRY_MS       5000  /* after a template ended or failed to start */
#define ZYGOTE_UNSUPPORTED_MS 60000 /* after an image's Python could not host one */
#define ZYGOTE_IMAGES_MAX     16    /* images with a template of their own */
#define ZYGOTE_RETIRED_MAX    8     /* retired templates kept for their sandboxes, per image */

struct zygote_ref {
        struct cage_zygote *z;
        char *rootfs;   /* the image root the template runs (its spec's image) */
        unsigned refs;  /* under the registry's lock */
        uint64_t forks; /* sandboxes it made */
};

struct named_zygote {
        char image[CAGE_IMAGE_REF_MAX];
        struct zygote_ref *ref;                              /* NULL: none running */
        uint64_t retry_ms;                                   /* no new template before */
        uint64_t forks;                                      /* sandboxes it made */
        char why[sizeof(((struct cage_error *)0)->message)]; /* the last failure, or "" */
        struct zygote_ref *retired[ZYGOTE_RETIRED_MAX];      /* with sandboxes alive */
        size_t n_retired;
};

struct svc_zygotes {
        pthread_mutex_t lock;
        struct named_zygote entries[ZYGOTE_IMAGES_MAX];
        size_t n;
};

/* ---- a template for a spec ---- */

int svc_zygote_start(struct cage_service *svc, const struct svc_spec *spec,
                     struct cage_zygote **ret, char **rootfs, struct cage_error *err)
{
        _cleanup_free_ char *env = NULL;
        struct cage_spec cs;
        struct svc_image_launch image = {0};
        struct cage_zygote_driver driver;
        driver.source = cage_session_driver_source(&driver.source_len);
        driver.pyc = cage_session_driver_bytecode(&driver.pyc_len);
        if (spec->network.n)
                return cage_fail_plain(err, -ENOTSUP, "zygote: not for networked policies");
        int r = svc_spec_check_tenant(spec, svc->cfg, NULL, err);
        if (r == 0)
                r = svc_image_acquire(svc, spec->image, NULL, NULL, &image, err);
        if (r == 0)
                r = svc_spec_to_cage(spec, svc->cfg, NULL, &image, &cs, &env, err);
        if (r == 0 && rootfs && !(*rootfs = strdup(cs.image)))
                r = cage_fail(err, -ENOMEM, "zygote");
        if (r == 0 && (r = cage_zygote_start(&cs, &driver, ret, err)) < 0 && rootfs) {
                free(*rootfs);
                *rootfs = NULL;
        }
        if (r == 0)
                svc_image_attach(cage_zygote_template(*ret), &image);
        svc_image_release(&image);
        return r;
}

/* ---- the registry ---- */

int svc_zygotes_open(struct cage_service *svc, struct cage_error *err)
{
        struct svc_zygotes *zs = calloc(1, sizeof(*zs));
        if (!zs)
                return cage_fail(err, -ENOMEM, "zygotes");
        pthread_mutex_init(&zs->lock, NULL);
        svc->zygotes = zs;
        return 0;
}

/* Under the lock. */
static void unref(struct zygote_ref *ref)
{
        if (!ref || --ref->refs)
                return;
        cage_zygote_free(ref->z);
        free(ref->rootfs);
        free(ref);
}

void svc_zygotes_close(struct cage_service *svc)
{
        struct svc_zygotes *zs = svc->zygotes;
        if (!zs)
                return;
        for (size_t i = 0; i < zs->n; i++) {
                unref(zs->entries[i].ref);
                for (size_t j = 0; j < zs->entries[i].n_retired; j++)
                        unref(zs->entries[i].retired[j]);
        }
        pthread_mutex_destroy(&zs->lock);
        free(zs);
        svc->zygotes = NULL;
}

static struct named_zygote *entry_of(struct svc_zygotes *zs, const char *image)
{
        for (size_t i = 0; i < zs->n; i++)
                if (strcmp(zs->entries[i].image, image) == 0)
                        return &zs->entries[i];
        if (zs->n == ZYGOTE_IMAGES_MAX)
                return NULL;
        struct named_zygote *e = &zs->entries[zs->n++];
        *e = (struct named_zygote){0};
        snprintf(e->image, sizeof(e->image), "%s", image);
        return e;
}

/* Under the lock: a template for the image with its default policy. */
static void start_template(struct cage_service *svc, struct named_zygote *e)
{
        struct cage_error err = {0};
        struct svc_spec *spec = NULL;
        struct zygote_ref *ref = calloc(1, sizeof(*ref));
        json_auto_t *req = json_pack("{s:s}", "image", e->image);
        int r = ref && req ? svc_spec_parse(svc->cfg, req, false, NULL, &spec, &err)
                           : cage_fail(&err, -ENOMEM, "zygote");
        if (r == 0)
                r = svc_zygote_start(svc, spec, &ref->z, &ref->rootfs, &err);
        svc_spec_free(spec);
        if (r < 0) {
                free(ref);
                e->retry_ms =
                        clock_mono_ms() + (r == -ENOTSUP ? ZYGOTE_UNSUPPORTED_MS : ZYGOTE_RETRY_MS);
                snprintf(e->why, sizeof(e->why), "%s", err.message);
                return;
        }
        ref->refs = 1;
        e->ref = ref;
        e->why[0] = '\0';
}

/* Under the lock: frees the retired templates whose sandboxes all ended. */
static void sweep_locked(struct named_zygote *e)
{
        size_t kept = 0;
        for (size_t i = 0; i < e->n_retired; i++) {
                struct zygote_ref *ref = e->retired[i];
                if (cage_zygote_sandboxes(ref->z) == 0 || !cage_zygote_alive(ref->z))
                        unref(ref);
                else
                        e->retired[kept++] = ref;
        }
        e->n_retired = kept;
}

/* Under the lock: the current template makes way for a fresh one once it
 * made a generation of sandboxes, if another may retire. */
static void retire_locked(struct named_zygote *e, uint32_t generation)
{
        if (!e->ref || e->ref->forks < generation)
                return;
        sweep_locked(e);
        if (e->n_retired == ZYGOTE_RETIRED_MAX)
                return;
        e->retired[e->n_retired++] = e->ref;
        e->ref = NULL;
}

void svc_zygotes_sweep(struct cage_service *svc)
{
        struct svc_zygotes *zs = svc->zygotes;
        if (!zs)
                return;
        pthread_mutex_lock(&zs->lock);
        for (size_t i = 0; i < zs->n; i++)
                sweep_locked(&zs->entries[i]);
        pthread_mutex_unlock(&zs->lock);
}

/* A reference to the running template of image whose root is rootfs,
 * started if need be; NULL with *why when there is none. */
static struct zygote_ref *acquire(struct cage_service *svc, const char *image, const char *rootfs,
                                  struct cage_error *err)
{
        struct svc_zygotes *zs = svc->zygotes;
        pthread_mutex_lock(&zs->lock);
        struct named_zygote *e = entry_of(zs, image);
        if (e && e->ref && (!cage_zygote_alive(e->ref->z) || strcmp(e->ref->rootfs, rootfs))) {
                unref(e->ref); /* ended, or the reference names another root now */
                e->ref = NULL;
        }
        if (e)
                retire_locked(e, svc->cfg->sandboxes_per_template);
        if (e && !e->ref && clock_mono_ms() >= e->retry_ms)
                start_template(svc, e);
        struct zygote_ref *ref = e ? e->ref : NULL;
        if (ref && strcmp(ref->rootfs, rootfs) == 0)
                ref->refs++;
        else
                ref = NULL;
        if (!ref)
                cage_fail_plain(err, -ENOTSUP, "%s",
                                !e          ? "zygote: too many images"
                                : e->why[0] ? e->why
                                            : "zygote: none");
        pthread_mutex_unlock(&zs->lock);
        return ref;
}

static void release(struct cage_service *svc, struct zygote_ref *ref, const char *image,
                    const struct cage_error *failed)
{
        struct svc_zygotes *zs = svc->zygotes;
        pthread_mutex_lock(&zs->lock);
        struct named_zygote *e = entry_of(zs, image);
        if (e && !failed) {
                e->forks++;
                ref->forks++;
        } else if (e)
                snprintf(e->why, sizeof(e->why), "%s", failed->message);
        /* A template that did not answer in time, or is gone, is replaced:
         * every create would wait for it again. */
        bool broken = failed && (failed->code == -ETIMEDOUT || failed->code == -ESRCH ||
                                 failed->code == -EPROTO);
        if (e && broken && e->ref == ref) {
                unref(e->ref);
                e->ref = NULL;
                e->retry_ms = clock_mono_ms() + ZYGOTE_RETRY_MS;
        }
        unref(ref);
        pthread_mutex_unlock(&zs->lock);
}

/* What the template cannot give a sandbox of spec. */
static bool forkable(const struct cage_service *svc, const struct svc_spec *spec)
{
        return svc->cfg->fork_sandboxes && !spec->n_mounts && !spec->requirements_dir;
}

int svc_zygote_fork(struct cage_service *svc, const struct svc_spec *spec,
                    const struct cage_spec *cs, struct cage_box **box,
                    struct cage_session **session, struct cage_error *err)
{
        if (!forkable(svc, spec))
                return cage_fail_plain(err, -ENOTSUP, "zygote: not for this spec");
        struct zygote_ref *ref = acquire(svc, spec->image, cs->image, err);
        if (!ref)
                return -ENOTSUP;
        struct cage_box_proc *driver;
        int chan;
        int r = cage_zygote_fork(ref->z, cs, box, &driver, &chan, err);
        if (r == 0 && (r = cage_session_adopt(*box, driver, chan, session, err)) < 0)
                *box = cage_box_destroy(*box);
        release(svc, ref, spec->image, r < 0 ? err : NULL);
        return r;
}

json_t *svc_zygotes_stats(struct cage_service *svc)
{
        struct svc_zygotes *zs = svc->zygotes;
        json_t *a = json_array();
        pthread_mutex_lock(&zs->lock);
        for (size_t i = 0; a && i < zs->n; i++) {
                const struct named_zygote *e = &zs->entries[i];
                json_t *o = json_pack("{s:s, s:b, s:I, s:I}", "image", e->image, "running",
                                      e->ref && cage_zygote_alive(e->ref->z), "forks",
                                      (json_int_t)e->forks, "retired", (json_int_t)e->n_retired);
                if (o && e->why[0])
                        json_object_set_new(o, "error", json_string(e->why));
                json_array_append_new(a, o);
        }
        pthread_mutex_unlock(&zs->lock);
        return a;
}
