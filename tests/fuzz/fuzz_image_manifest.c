/* libFuzzer target for src/images/manifest.c: the bytes are a manifest or
 * an index (under each Content-Type a registry may send) and an image
 * config. Aborts on any broken invariant:
 *  - a parsed manifest has no more layers than allowed, an index no more
 *    than INDEX_ENTRIES_MAX entries, and every digest is well-formed;
 *  - a platform picked from an index is one of its entries, for that
 *    os and architecture;
 *  - a parsed config's lists are NULL-terminated, its strings present, its
 *    diff_ids digests, and it renders back to JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "images/images_private.h"

#define MAX_LAYERS 16

static const char *const content_types[] = {NULL, MEDIA_OCI_MANIFEST, MEDIA_OCI_INDEX,
                                            MEDIA_DOCKER_LIST, MEDIA_DOCKER_MANIFEST};

static void check_manifest(const struct manifest *m)
{
        FUZZ_CHECK(m->n_entries <= (m->is_index ? INDEX_ENTRIES_MAX : MAX_LAYERS));
        if (!m->is_index)
                FUZZ_CHECK(cage_image_digest_valid(m->config.digest));
        for (size_t i = 0; i < m->n_entries; i++)
                FUZZ_CHECK(cage_image_digest_valid(m->entries[i].digest));
        if (!m->is_index)
                return;
        struct descriptor d;
        if (manifest_select(m, "linux", "amd64", "", &d, NULL) == 0)
                FUZZ_CHECK(strcmp(d.os, "linux") == 0 && strcmp(d.arch, "amd64") == 0 &&
                           cage_image_digest_valid(d.digest));
}

static void check_config(const char *buf, size_t len)
{
        struct image_config c;
        if (image_config_parse(buf, len, &c, NULL) < 0)
                return;
        FUZZ_CHECK(c.env && c.cmd && c.entrypoint && c.working_dir && c.user && c.diff_ids);
        for (size_t i = 0; i < c.n_diff_ids; i++)
                FUZZ_CHECK(cage_image_digest_valid(c.diff_ids[i]));
        FUZZ_CHECK(c.diff_ids[c.n_diff_ids] == NULL);
        json_t *j = image_config_json(&c);
        FUZZ_CHECK(j != NULL);
        json_decref(j);
        image_config_done(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data;
        for (size_t i = 0; i < sizeof(content_types) / sizeof(content_types[0]); i++) {
                struct manifest m;
                if (manifest_parse(buf, size, content_types[i], MAX_LAYERS, &m, NULL) == 0) {
                        check_manifest(&m);
                        manifest_done(&m);
                }
        }
        check_config(buf, size);
        return 0;
}
