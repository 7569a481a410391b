/* pip requirements: installed once per requirement set into a cached,
 * read-only layer (docs/NETWORK.md, "pip requirements").
 *
 * A layer is keyed by the SHA-256 of the interpreter (its resolved path,
 * size and mtime), the index URL and the sorted requirement set. It is a
 * disk-capped workspace image (workspace.h) under <data_dir>/requirements/
 * <key>/, filled by `pip install --target` in a separate sandbox whose
 * only reachable hosts are the configured index's (through the egress
 * proxy, with the server's address checks), and complete only once the
 * marker file <key>/installed exists. Later sandboxes get the layer mounted
 * read-only at SVC_REQUIREMENTS_DIR with PYTHONPATH pointing there; their
 * own code runs under their own network policy. Concurrent requests for
 * one key wait for the first install; a failed install leaves nothing. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define PYTHON      "/usr/bin/python3"
#define MARKER      "installed"
#define KEY_LEN     64
#define INSTALL_MIB 1024

enum layer_state { LAYER_INSTALLING, LAYER_READY };

struct layer {
        char key[KEY_LEN + 1];
        enum layer_state state;
        char *dir; /* the mounted layer (READY) */
        struct layer *next;
};

struct svc_layers {
        pthread_mutex_t lock;
        pthread_cond_t changed;
        char *base;
        struct layer *list;
};

/* ---- the key ---------------------------------------------------------------------- */

/* The interpreter a layer is for: the host's python3 (path, size, mtime),
 * or an image's, which its id (the config digest) names exactly. */
static int interpreter_id(const char *image_id, char *buf, size_t size, struct cage_error *err)
{
        char real[4096];
        struct stat st;
        if (image_id) {
                snprintf(buf, size, "image %s", image_id);
                return 0;
        }
        if (!realpath(PYTHON, real) || stat(real, &st) < 0)
                return cage_fail(err, -errno, "requirements: finding the interpreter %s", PYTHON);
        snprintf(buf, size, "%s\n%lld\n%lld", real, (long long)st.st_size, (long long)st.st_mtime);
        return 0;
}

static int layer_key(const struct cage_config *cfg, const json_t *reqs, const char *image_id,
                     char out[KEY_LEN + 1], struct cage_error *err)
{
        char interp[4096 + 64];
        int r = interpreter_id(image_id, interp, sizeof(interp), err);
        if (r < 0)
                return r;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        char head[4096 + 256];
        int n = snprintf(head, sizeof(head), "layer-v1\n%s\n%s\n", interp, cfg->pip.index_url);
        bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
                  EVP_DigestUpdate(md, head, (size_t)n);
        size_t i;
        const json_t *v;
        json_array_foreach(reqs, i, v)
        {
                ok = ok && EVP_DigestUpdate(md, json_string_value(v), json_string_length(v) + 1);
        }
        ok = ok && EVP_DigestFinal_ex(md, digest, &len);
        EVP_MD_CTX_free(md);
        if (!ok || len * 2 != KEY_LEN)
                return cage_fail(err, -EIO, "requirements: hashing the requirement set");
        for (unsigned k = 0; k < len; k++)
                snprintf(out + 2 * k, 3, "%02x", digest[k]);
        return 0;
}

/* ---- installing ------------------------------------------------------------------- */

/* The install phase's spec: the server's defaults, more memory and time,
 * and the index's hosts as its only network. */
static int install_spec(struct cage_service *svc, const struct svc_spec *user,
                        struct svc_spec **ret, struct cage_error *err)
{
        const struct cage_config *cfg = svc->cfg;
        json_auto_t *empty = json_object();
        struct svc_spec *s;
        int r = svc_spec_parse(cfg, empty, false, NULL, &s, err);
        if (r < 0)
                return r;
        if (s->memory_mib < INSTALL_MIB)
                s->memory_mib = INSTALL_MIB;
        s->timeout_s_ms = cfg->pip.timeout_s * 1000;
        s->network.rules = malloc(cfg->pip.hosts.n * sizeof(*s->network.rules));
        if (!s->network.rules) {
                svc_spec_free(s);
                return cage_fail(err, -ENOMEM, "requirements");
        }
        memcpy(s->network.rules, cfg->pip.hosts.rules,
               cfg->pip.hosts.n * sizeof(*s->network.rules));
        s->network.n = cfg->pip.hosts.n;
        json_decref(s->labels);
        s->labels = json_deep_copy(user->labels);
        /* The run's own image: its python3 -m pip installs for its python3. */
        snprintf(s->image, sizeof(s->image), "%s", user->image);
        *ret = s;
        return 0;
}

static char **pip_argv(const struct cage_config *cfg, const json_t *reqs)
{
        static const char *const fixed[] = {"python3",
                                            "-m",
                                            "pip",
                                            "install",
                                            "--no-cache-dir",
                                            "--disable-pip-version-check",
                                            "--no-input",
                                            "--progress-bar",
                                            "off",
                                            "--no-warn-script-location",
                                            "--target",
                                            "/workspace/site-packages",
                                            "--index-url"};
        size_t nf = sizeof(fixed) / sizeof(fixed[0]);
        char **argv = calloc(nf + 4 + json_array_size(reqs) + 2, sizeof(char *));
        if (!argv)
                return NULL;
        size_t n = 0;
        for (size_t i = 0; i < nf; i++)
                argv[n++] = (char *)fixed[i];
        argv[n++] = cfg->pip.index_url;
        if (cfg->pip.trusted_host) {
                argv[n++] = "--trusted-host";
                argv[n++] = cfg->pip.trusted_host;
        }
        argv[n++] = "--";
        size_t i;
        const json_t *v;
        json_array_foreach(reqs, i, v) argv[n++] = (char *)json_string_value(v);
        return argv;
}

/* The last non-empty line of pip's output: what went wrong, usually. */
static json_t *last_line(const struct cage_stream *s)
{
        if (!s->data || !s->len)
                return json_string("pip failed without a message");
        size_t end = s->len;
        while (end && (s->data[end - 1] == '\n' || s->data[end - 1] == '\r'))
                end--;
        size_t start = end;
        while (start && s->data[start - 1] != '\n')
                start--;
        return json_stringn(s->data + start, end - start);
}

static int run_pip(struct cage_service *svc, const struct svc_spec *user, const char *tenant,
                   const char *dir, struct cage_result *res, struct cage_error *err)
{
        struct svc_spec *ispec = NULL;
        struct cage_box *box = NULL;
        _cleanup_free_ char **argv = pip_argv(svc->cfg, user->requirements);
        /* No NO_PROXY: an index on 127.0.0.1 is the host's (through the
         * proxy), not the install sandbox's own loopback. */
        static char *const env[] = {"HOME=/tmp", "NO_PROXY=", "no_proxy=", NULL};
        if (!argv)
                return cage_fail(err, -ENOMEM, "requirements");
        int r = install_spec(svc, user, &ispec, err);
        if (r == 0)
                r = svc_box_start(svc, ispec, dir, tenant, NULL, "requirements", NULL, &box, NULL,
                                  err);
        if (r == 0) {
                struct cage_exec ex = {.argv = argv,
                                       .env = env,
                                       .timeout_ms = ispec->timeout_s_ms,
                                       .output_max_bytes = ispec->output_max_bytes,
                                       .output_stop_bytes = 64ULL << 20};
                struct cage_run_options opts = {.keep_output = true, .cancel_fd = -1};
                r = cage_box_exec(box, &ex, &opts, res, err);
        }
        cage_box_destroy(box);
        svc_spec_free(ispec);
        return r;
}

static json_t *failure_doc(struct cage_service *svc, struct cage_result *res)
{
        json_auto_t *none = json_array();
        json_t *doc = svc_result_json(svc, res, none);
        if (!doc)
                return NULL;
        if (res->status == CAGE_STATUS_OK || res->status == CAGE_STATUS_ERROR) {
                json_object_set_new(doc, "status", json_string("error"));
                json_t *line = last_line(&res->err);
                json_object_set_new(doc, "reason",
                                    json_sprintf("pip could not install the requirements: %s",
                                                 json_string_value(line)));
                json_decref(line);
        }
        json_object_set_new(doc, "requirements", json_pack("{s:b}", "installed", 0));
        return doc;
}

static int mark_installed(const char *base, const char *key, const json_t *reqs)
{
        _cleanup_free_ char *path = NULL;
        _cleanup_free_ char *text = json_dumps(reqs, JSON_COMPACT);
        if (asprintf(&path, "%s/%s/" MARKER, base, key) < 0 || !text)
                return -ENOMEM;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
                return -errno;
        return 0;
}

/* Installs into a fresh layer: 0 (*failed set when pip failed) or < 0. */
static int install(struct cage_service *svc, const struct svc_spec *spec, const char *tenant,
                   const char *key, char **ret_dir, json_t **failed, struct cage_error *err)
{
        const char *base = svc->layers->base;
        struct cage_result res = {0};
        (void)cage_workspace_destroy(base, key, NULL);
        int r = cage_workspace_create(base, key, svc->cfg->pip.max_mib << 20, svc->ws_backend, err);
        if (r == 0)
                r = cage_workspace_mount(base, key, ret_dir, err);
        if (r == 0)
                r = run_pip(svc, spec, tenant, *ret_dir, &res, err);
        if (r == 0 && res.status != CAGE_STATUS_OK && !(*failed = failure_doc(svc, &res)))
                r = cage_fail(err, -ENOMEM, "requirements");
        if (r == 0 && !*failed && (r = mark_installed(base, key, spec->requirements)) < 0)
                cage_fail(err, r, "requirements: marking the layer complete");
        cage_result_free(&res);
        if (r < 0 || *failed) {
                free(*ret_dir);
                *ret_dir = NULL;
                (void)cage_workspace_destroy(base, key, NULL);
        }
        return r;
}

/* A layer installed before (by this server or an earlier run of it). */
static bool load_installed(struct svc_layers *l, const char *key, char **ret_dir)
{
        _cleanup_free_ char *marker = NULL;
        if (asprintf(&marker, "%s/%s/" MARKER, l->base, key) < 0 || access(marker, F_OK) < 0)
                return false;
        return cage_workspace_mount(l->base, key, ret_dir, NULL) == 0;
}

/* ---- the cache -------------------------------------------------------------------- */

static struct layer *find_locked(struct svc_layers *l, const char *key)
{
        for (struct layer *e = l->list; e; e = e->next)
                if (strcmp(e->key, key) == 0)
                        return e;
        return NULL;
}

static void remove_locked(struct svc_layers *l, struct layer *gone)
{
        for (struct layer **p = &l->list; *p; p = &(*p)->next)
                if (*p == gone) {
                        *p = gone->next;
                        break;
                }
        free(gone->dir);
        free(gone);
}

/* Makes the layer READY (installing it if needed): 0 (*failed set when pip
 * failed: nothing is cached) or < 0. */
static int obtain(struct cage_service *svc, const struct svc_spec *spec, const char *tenant,
                  const char *key, const char **ret_dir, bool *cached, json_t **failed,
                  struct cage_error *err)
{
        struct svc_layers *l = svc->layers;
        pthread_mutex_lock(&l->lock);
        struct layer *e;
        while ((e = find_locked(l, key)) && e->state == LAYER_INSTALLING)
                pthread_cond_wait(&l->changed, &l->lock);
        int r = 0;
        *cached = e != NULL;
        if (!e) {
                e = calloc(1, sizeof(*e));
                if (!e) {
                        pthread_mutex_unlock(&l->lock);
                        return cage_fail(err, -ENOMEM, "requirements");
                }
                snprintf(e->key, sizeof(e->key), "%s", key);
                e->next = l->list;
                l->list = e;
                pthread_mutex_unlock(&l->lock);
                char *dir = NULL;
                *cached = load_installed(l, key, &dir);
                if (!*cached)
                        r = install(svc, spec, tenant, key, &dir, failed, err);
                pthread_mutex_lock(&l->lock);
                e->dir = dir;
                e->state = LAYER_READY;
                if (r < 0 || *failed) {
                        remove_locked(l, e);
                        e = NULL;
                }
                pthread_cond_broadcast(&l->changed);
        }
        if (e)
                *ret_dir = e->dir; /* lives as long as the service */
        pthread_mutex_unlock(&l->lock);
        return r;
}

/* The id of the run's image ("" for the host's), got or pulled now: the
 * layer is for that image's interpreter. */
static int image_id_of(struct cage_service *svc, const struct svc_spec *spec, const char *tenant,
                       char id[CAGE_IMAGE_DIGEST_LEN + 1], struct cage_error *err)
{
        struct svc_image_launch launch;
        int r = svc_image_acquire(svc, spec->image, tenant, NULL, &launch, err);
        if (r == 0 && launch.image)
                snprintf(id, CAGE_IMAGE_DIGEST_LEN + 1, "%s", launch.image->id);
        svc_image_release(&launch);
        return r;
}

int svc_requirements_prepare(struct cage_service *svc, struct svc_spec *spec, const char *tenant,
                             json_t **ret_info, json_t **ret_failed, struct cage_error *err)
{
        char key[KEY_LEN + 1];
        *ret_info = *ret_failed = NULL;
        if (!json_array_size(spec->requirements))
                return 0;
        char image_id[CAGE_IMAGE_DIGEST_LEN + 1] = "";
        int r = image_id_of(svc, spec, tenant, image_id, err);
        if (r == 0)
                r = layer_key(svc->cfg, spec->requirements, image_id[0] ? image_id : NULL, key,
                              err);
        if (r < 0)
                return r;
        uint64_t start = clock_mono_ms();
        bool cached = false;
        const char *dir = NULL;
        r = obtain(svc, spec, tenant, key, &dir, &cached, ret_failed, err);
        uint64_t took = clock_mono_ms() - start;
        const char *status = r < 0 ? "internal_error" : *ret_failed ? "failed" : "ok";
        if (!cached || strcmp(status, "ok") != 0)
                svc_audit(svc, CAGE_AUDIT_REQUIREMENTS_INSTALL, tenant,
                          spec->name[0] ? spec->name : NULL, spec->labels,
                          json_pack("{s:O, s:s, s:s, s:I}", "requirements", spec->requirements,
                                    "layer", key, "status", status, "duration_ms",
                                    (json_int_t)took));
        if (r < 0 || *ret_failed)
                return r;
        spec->requirements_dir = dir;
        *ret_info = json_pack("{s:b, s:b, s:I}", "installed", 1, "cached", cached, "duration_ms",
                              (json_int_t)took);
        return 0;
}

int svc_layers_open(struct cage_service *svc, struct cage_error *err)
{
        struct svc_layers *l = calloc(1, sizeof(*l));
        if (!l || asprintf(&l->base, "%s/requirements", svc->cfg->data_dir) < 0) {
                free(l);
                return cage_fail(err, -ENOMEM, "requirements");
        }
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->changed, NULL);
        svc->layers = l;
        if (mkdir(l->base, 0700) < 0 && errno != EEXIST)
                return cage_fail(err, -errno, "creating %s", l->base);
        /* Leftovers of a crash: mounts, loop devices, half-made layers. */
        int r = cage_workspace_sweep(l->base, err);
        return r < 0 ? r : 0;
}

void svc_layers_close(struct cage_service *svc)
{
        struct svc_layers *l = svc->layers;
        if (!l)
                return;
        while (l->list) {
                (void)cage_workspace_unmount(l->base, l->list->key, NULL);
                remove_locked(l, l->list);
        }
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->changed);
        free(l->base);
        free(l);
        svc->layers = NULL;
}
