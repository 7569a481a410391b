/* Unit tests for the image store through its C interface (images.h), the
 * way the service uses it: an OCI layout written here is imported, then
 * threads get and free the image while another tries to remove it (a
 * lease keeps it), several threads import the same layout at once (one
 * root), a cancelled import changes nothing, and ensure() honours the
 * allow list and the pull policy, reporting progress while it fails to
 * reach a registry. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "images/images_private.h"

#define THREADS 8

static char base[64];

static void write_at(const char *rel, const void *data, size_t len)
{
        char path[256];
        snprintf(path, sizeof(path), "%s/layout/%s", base, rel);
        FILE *f = fopen(path, "wb");
        if (f) {
                fwrite(data, 1, len, f);
                fclose(f);
        }
}

/* Writes a blob under layout/blobs/sha256 and gives its digest. */
static void put_blob(const void *data, size_t len, char digest[CAGE_IMAGE_DIGEST_LEN + 1])
{
        char rel[128];
        digest_buffer(data, len, digest);
        snprintf(rel, sizeof(rel), "blobs/sha256/%s", digest + 7);
        write_at(rel, data, len);
}

/* A one-layer layer tar holding hello.txt. */
static size_t layer_tar(char *buf, size_t size)
{
        struct archive *a = archive_write_new();
        size_t used = 0;
        archive_write_set_format_pax_restricted(a);
        archive_write_open_memory(a, buf, size, &used);
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, "hello.txt");
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, 6);
        archive_write_header(a, e);
        archive_write_data(a, "hello\n", 6);
        archive_entry_free(e);
        archive_write_close(a);
        archive_write_free(a);
        return used;
}

static void make_layout(void)
{
        static char tar[64 * 1024];
        char layer[80], config[80], manifest[80], path[128], text[2048];
        snprintf(path, sizeof(path), "%s/layout/blobs/sha256", base);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "mkdir -p %s", path);
        if (system(cmd) != 0)
                return;
        size_t n = layer_tar(tar, sizeof(tar));
        put_blob(tar, n, layer);
        snprintf(text, sizeof(text),
                 "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"A=1\"],"
                 "\"Cmd\":[\"/bin/sh\"],\"WorkingDir\":\"/w\",\"User\":\"1000\"},"
                 "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}",
                 layer);
        size_t config_len = strlen(text);
        put_blob(text, config_len, config);
        snprintf(text, sizeof(text),
                 "{\"schemaVersion\":2,\"mediaType\":\"" MEDIA_OCI_MANIFEST "\",\"config\":{"
                 "\"mediaType\":\"" MEDIA_OCI_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
                 "\"layers\":[{\"mediaType\":\"" MEDIA_OCI_LAYER "\",\"digest\":\"%s\","
                 "\"size\":%zu}]}",
                 config, config_len, layer, n);
        size_t manifest_len = strlen(text);
        put_blob(text, manifest_len, manifest);
        snprintf(text, sizeof(text),
                 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" MEDIA_OCI_MANIFEST
                 "\",\"digest\":\"%s\",\"size\":%zu}]}",
                 manifest, manifest_len);
        write_at("index.json", text, strlen(text));
        write_at("oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
}

struct fixture {
        struct cage_images_config cfg;
        struct cage_image_store *store;
        char layout[128];
};

static int setup(struct fixture *f)
{
        snprintf(base, sizeof(base), "/tmp/test-image-store-XXXXXX");
        if (!mkdtemp(base))
                return -errno;
        make_layout();
        snprintf(f->layout, sizeof(f->layout), "%s/layout", base);
        char dir[128];
        snprintf(dir, sizeof(dir), "%s/images", base);
        cage_images_config_parse(NULL, &f->cfg, NULL);
        return cage_image_store_open(dir, &f->cfg, &f->store, NULL);
}

static void teardown(struct fixture *f)
{
        cage_image_store_close(f->store);
        cage_images_config_done(&f->cfg);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
        if (system(cmd) != 0)
                fprintf(stderr, "  could not remove %s\n", base);
}

static size_t count_roots(void)
{
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "ls %s/images/roots | wc -l", base);
        FILE *p = popen(cmd, "r");
        unsigned n = 0;
        if (p) {
                if (fscanf(p, "%u", &n) != 1)
                        n = 0;
                pclose(p);
        }
        return n;
}

TEST(import_and_get)
{
        struct fixture f;
        struct cage_error err = {};
        CHECK(setup(&f) == 0);
        json_t *ids = NULL;
        CHECK(cage_image_import(f.store, f.layout, "t/x:1", NULL, &ids, &err) == 0);
        CHECK(json_array_size(ids) == 1);
        json_decref(ids);
        struct cage_image *img = NULL;
        CHECK(cage_image_get(f.store, "t/x:1", &img, &err) == 0);
        if (img) {
                CHECK_STREQ(img->ref, "docker.io/t/x:1");
                CHECK_STREQ(img->env[0], "A=1");
                CHECK(img->env[1] == NULL);
                CHECK_STREQ(img->cmd[0], "/bin/sh");
                CHECK(img->entrypoint[0] == NULL);
                CHECK_STREQ(img->working_dir, "/w");
                CHECK_STREQ(img->user, "1000");
                char path[512];
                snprintf(path, sizeof(path), "%s/hello.txt", img->rootfs);
                CHECK(access(path, R_OK) == 0);
                CHECK(img->rootfs[0] == '/');
        }
        cage_image_free(img);
        CHECK(cage_image_get(f.store, "t/y:1", &img, &err) == -ENOENT);
        CHECK(strstr(err.message, "docker.io/t/y:1") != NULL);
        teardown(&f);
}

struct getter {
        struct cage_image_store *store;
        pthread_barrier_t *held, *release;
        int rc;
};

static void *get_and_hold(void *arg)
{
        struct getter *g = arg;
        struct cage_image *img = NULL;
        g->rc = cage_image_get(g->store, "t/x:1", &img, NULL);
        pthread_barrier_wait(g->held);
        pthread_barrier_wait(g->release);
        cage_image_free(img);
        return NULL;
}

TEST(a_leased_image_is_not_removed)
{
        struct fixture f;
        struct cage_error err = {};
        pthread_barrier_t held, release;
        pthread_t t[THREADS];
        struct getter g[THREADS];
        CHECK(setup(&f) == 0);
        CHECK(cage_image_import(f.store, f.layout, "t/x:1", NULL, NULL, &err) == 0);
        pthread_barrier_init(&held, NULL, THREADS + 1);
        pthread_barrier_init(&release, NULL, THREADS + 1);
        for (int i = 0; i < THREADS; i++) {
                g[i] = (struct getter){f.store, &held, &release, -1};
                pthread_create(&t[i], NULL, get_and_hold, &g[i]);
        }
        pthread_barrier_wait(&held);
        CHECK(cage_image_remove(f.store, "t/x:1", NULL, &err) == -EBUSY);
        json_t *report = NULL;
        CHECK(cage_image_prune(f.store, &report, &err) == 0);
        CHECK(json_array_size(json_object_get(report, "removed")) == 0);
        json_decref(report);
        pthread_barrier_wait(&release);
        for (int i = 0; i < THREADS; i++) {
                pthread_join(t[i], NULL);
                CHECK(g[i].rc == 0);
        }
        char id[CAGE_IMAGE_DIGEST_LEN + 1];
        CHECK(cage_image_remove(f.store, "t/x:1", id, &err) == 0);
        CHECK(cage_image_digest_valid(id));
        CHECK(count_roots() == 0);
        pthread_barrier_destroy(&held);
        pthread_barrier_destroy(&release);
        teardown(&f);
}

struct importer {
        struct fixture *f;
        int rc;
};

static void *import_one(void *arg)
{
        struct importer *im = arg;
        im->rc = cage_image_import(im->f->store, im->f->layout, "t/x:1", NULL, NULL, NULL);
        return NULL;
}

TEST(concurrent_imports_unpack_once)
{
        struct fixture f;
        pthread_t t[THREADS];
        struct importer im[THREADS];
        CHECK(setup(&f) == 0);
        for (int i = 0; i < THREADS; i++) {
                im[i] = (struct importer){&f, -1};
                pthread_create(&t[i], NULL, import_one, &im[i]);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(t[i], NULL);
                CHECK(im[i].rc == 0);
        }
        CHECK(count_roots() == 1);
        json_t *list = NULL;
        CHECK(cage_image_list(f.store, &list, NULL) == 0);
        CHECK(json_array_size(list) == 1);
        json_decref(list);
        teardown(&f);
}

TEST(a_cancelled_import_changes_nothing)
{
        struct fixture f;
        struct cage_error err = {};
        volatile int cancelled = 1;
        struct cage_image_op op = {.cancel_fd = -1, .cancelled = &cancelled};
        CHECK(setup(&f) == 0);
        CHECK(cage_image_import(f.store, f.layout, "t/x:1", &op, NULL, &err) == -ECANCELED);
        json_t *list = NULL;
        CHECK(cage_image_list(f.store, &list, NULL) == 0);
        CHECK(json_array_size(list) == 0);
        json_decref(list);
        CHECK(count_roots() == 0);
        teardown(&f);
}

static void note_progress(void *userdata, uint64_t done, uint64_t total, const char *status)
{
        (void)done, (void)total;
        if (strstr(status, "resolving"))
                (*(int *)userdata)++;
}

TEST(ensure_policy_allow_and_progress)
{
        struct fixture f;
        struct cage_error err = {};
        struct cage_image *img = NULL;
        CHECK(setup(&f) == 0);
        CHECK(cage_image_import(f.store, f.layout, "t/x:1", NULL, NULL, &err) == 0);
        CHECK(cage_image_ensure(f.store, "t/x:1", NULL, &img, &err) == 0); /* present: no pull */
        img = cage_image_free(img);
        f.cfg.pull_policy = CAGE_PULL_NEVER;
        CHECK(cage_image_ensure(f.store, "t/absent:1", NULL, &img, &err) == -ENOENT);
        CHECK(strstr(err.message, "never") != NULL);
        f.cfg.pull_policy = CAGE_PULL_MISSING;
        char *allow[] = {"docker.io/library/*"};
        f.cfg.allow = allow;
        f.cfg.n_allow = 1;
        CHECK(cage_image_ensure(f.store, "t/x:1", NULL, &img, &err) == -EPERM);
        CHECK(strstr(err.message, "images.allow") != NULL);
        f.cfg.allow = NULL;
        f.cfg.n_allow = 0;
        /* Nothing listens on port 1: the pull fails, saying where, after progress. */
        char *plain[] = {"127.0.0.1:1"};
        f.cfg.plain_http = plain;
        f.cfg.n_plain_http = 1;
        int resolving = 0;
        struct cage_image_op op = {
                .progress = note_progress, .userdata = &resolving, .cancel_fd = -1};
        CHECK(cage_image_ensure(f.store, "127.0.0.1:1/absent:1", &op, &img, &err) < 0);
        CHECK(strstr(err.message, "registry 127.0.0.1:1") != NULL);
        CHECK(resolving == 1);
        CHECK(img == NULL);
        f.cfg.plain_http = NULL;
        f.cfg.n_plain_http = 0;
        teardown(&f);
}

RUN_TESTS(T(import_and_get), T(a_leased_image_is_not_removed), T(concurrent_imports_unpack_once),
          T(a_cancelled_import_changes_nothing), T(ensure_policy_allow_and_progress))
