/* Manifests, indexes and image configs: OCI image-spec v1 and Docker's
 * schema 2 (manifest list and image manifest), parsed from bytes a
 * registry or an archive chose. Pure functions, fuzzed
 * (tests/fuzz/fuzz_image_manifest.c). Every string is bounded by the field
 * it lands in, every array by a count, every digest checked for form;
 * anything else is refused with a message naming the field. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/error.h"

#define CONFIG_LIST_MAX   4096  /* Env, Cmd, Entrypoint entries */
#define CONFIG_STRING_MAX 65536 /* bytes of one of them */

static bool is_index_type(const char *t)
{
        return strcmp(t, MEDIA_OCI_INDEX) == 0 || strcmp(t, MEDIA_DOCKER_LIST) == 0;
}

static bool is_manifest_type(const char *t)
{
        return strcmp(t, MEDIA_OCI_MANIFEST) == 0 || strcmp(t, MEDIA_DOCKER_MANIFEST) == 0;
}

static int copy_field(char *dst, size_t size, json_t *obj, const char *key, bool required,
                      const char *where, struct cage_error *err)
{
        json_t *v = json_object_get(obj, key);
        if (!v && !required) {
                dst[0] = '\0';
                return 0;
        }
        if (!json_is_string(v) || json_string_length(v) >= size)
                return cage_fail_plain(err, -EBADMSG, "%s.%s: %s", where, key,
                                       v ? "not a string of the allowed length" : "missing");
        memcpy(dst, json_string_value(v), json_string_length(v) + 1);
        return strlen(dst) == json_string_length(v)
                       ? 0
                       : cage_fail_plain(err, -EBADMSG, "%s.%s: NUL byte", where, key);
}

static int parse_platform(json_t *d, struct descriptor *ret, const char *where,
                          struct cage_error *err)
{
        json_t *p = json_object_get(d, "platform");
        if (!p)
                return 0;
        if (!json_is_object(p))
                return cage_fail_plain(err, -EBADMSG, "%s.platform: not an object", where);
        int r;
        if ((r = copy_field(ret->os, sizeof(ret->os), p, "os", false, where, err)) < 0 ||
            (r = copy_field(ret->arch, sizeof(ret->arch), p, "architecture", false, where, err)) <
                    0)
                return r;
        return copy_field(ret->variant, sizeof(ret->variant), p, "variant", false, where, err);
}

static int parse_descriptor(json_t *d, const char *where, struct descriptor *ret,
                            struct cage_error *err)
{
        *ret = (struct descriptor){};
        if (!json_is_object(d))
                return cage_fail_plain(err, -EBADMSG, "%s: not an object", where);
        int r;
        if ((r = copy_field(ret->media_type, sizeof(ret->media_type), d, "mediaType", false, where,
                            err)) < 0 ||
            (r = copy_field(ret->digest, sizeof(ret->digest), d, "digest", true, where, err)) < 0)
                return r;
        if (!cage_image_digest_valid(ret->digest))
                return cage_fail_plain(err, -EBADMSG, "%s.digest: not sha256:<64 hex digits>",
                                       where);
        json_t *size = json_object_get(d, "size");
        if (!json_is_integer(size) || json_integer_value(size) < 0)
                return cage_fail_plain(err, -EBADMSG, "%s.size: not a size", where);
        ret->size = (uint64_t)json_integer_value(size);
        json_t *ann = json_object_get(d, "annotations");
        /* A layout's name for the image: containerd's full name, else OCI's
         * ref.name (often only a tag). */
        const char *name_key = json_object_get(ann, "io.containerd.image.name")
                                       ? "io.containerd.image.name"
                                       : "org.opencontainers.image.ref.name";
        if (json_is_object(ann) && (r = copy_field(ret->ref_name, sizeof(ret->ref_name), ann,
                                                   name_key, false, where, err)) < 0)
                return r;
        return parse_platform(d, ret, where, err);
}

static int parse_entries(json_t *arr, const char *key, size_t max, struct manifest *m,
                         struct cage_error *err)
{
        if (!json_is_array(arr))
                return cage_fail_plain(err, -EBADMSG, "%s: missing or not an array", key);
        size_t n = json_array_size(arr);
        if (n > max)
                return cage_fail_plain(err, -E2BIG, "%s: %zu entries, more than %zu", key, n, max);
        m->entries = calloc(n ? n : 1, sizeof(*m->entries));
        if (!m->entries)
                return cage_fail(err, -ENOMEM, "%s", key);
        for (size_t i = 0; i < n; i++) {
                char where[64];
                snprintf(where, sizeof(where), "%s[%zu]", key, i);
                int r = parse_descriptor(json_array_get(arr, i), where, &m->entries[i], err);
                if (r < 0)
                        return r;
                m->n_entries++;
        }
        return 0;
}

static const char *body_type(json_t *root, const char *content_type)
{
        const char *t = json_string_value(json_object_get(root, "mediaType"));
        if (t)
                return t;
        if (content_type && (is_index_type(content_type) || is_manifest_type(content_type)))
                return content_type;
        /* OCI allows mediaType to be absent: tell by the shape. */
        return json_object_get(root, "manifests") ? MEDIA_OCI_INDEX : MEDIA_OCI_MANIFEST;
}

static int parse_root(json_t *root, const char *content_type, uint32_t max_layers,
                      struct manifest *m, struct cage_error *err)
{
        if (!json_is_object(root))
                return cage_fail_plain(err, -EBADMSG, "manifest: not a JSON object");
        json_t *version = json_object_get(root, "schemaVersion");
        if (!json_is_integer(version) || json_integer_value(version) != 2)
                return cage_fail_plain(err, -EPROTONOSUPPORT,
                                       "manifest: schemaVersion is not 2 (schema 1 manifests "
                                       "are not supported)");
        const char *type = body_type(root, content_type);
        if (is_index_type(type)) {
                m->is_index = true;
                return parse_entries(json_object_get(root, "manifests"), "manifests",
                                     INDEX_ENTRIES_MAX, m, err);
        }
        if (!is_manifest_type(type))
                return cage_fail_plain(err, -EPROTONOSUPPORT,
                                       "manifest: media type \"%.100s\" "
                                       "is not an image manifest or index",
                                       type);
        int r = parse_descriptor(json_object_get(root, "config"), "config", &m->config, err);
        if (r < 0)
                return r;
        return parse_entries(json_object_get(root, "layers"), "layers", max_layers, m, err);
}

int manifest_parse(const char *buf, size_t len, const char *content_type, uint32_t max_layers,
                   struct manifest *ret, struct cage_error *err)
{
        struct manifest m = {};
        if (len > MANIFEST_MAX)
                return cage_fail_plain(err, -EFBIG, "manifest: more than %d bytes", MANIFEST_MAX);
        json_error_t jerr;
        json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return cage_fail_plain(err, -EBADMSG, "manifest: invalid JSON (%.100s)", jerr.text);
        int r = parse_root(root, content_type, max_layers, &m, err);
        json_decref(root);
        if (r < 0) {
                manifest_done(&m);
                return r;
        }
        *ret = m;
        return 0;
}

void manifest_done(struct manifest *m)
{
        free(m->entries);
        *m = (struct manifest){};
}

int manifest_select(const struct manifest *index, const char *os, const char *arch,
                    const char *variant, struct descriptor *ret, struct cage_error *err)
{
        for (size_t i = 0; i < index->n_entries; i++) {
                const struct descriptor *d = &index->entries[i];
                if (strcmp(d->os, os) != 0 || strcmp(d->arch, arch) != 0)
                        continue;
                if (variant[0] && d->variant[0] && strcmp(d->variant, variant) != 0)
                        continue;
                *ret = *d;
                return 0;
        }
        return cage_fail_plain(err, -ENOENT, "the image index has no manifest for %s/%s%s%s", os,
                               arch, variant[0] ? "/" : "", variant);
}

/* ---- image config ---- */

static int string_list(json_t *v, const char *key, char ***ret, struct cage_error *err)
{
        size_t n = json_is_array(v) ? json_array_size(v) : 0;
        if (v && !json_is_null(v) && !json_is_array(v))
                return cage_fail_plain(err, -EBADMSG, "image config: %s is not a list", key);
        if (n > CONFIG_LIST_MAX)
                return cage_fail_plain(err, -E2BIG, "image config: %s has more than %d entries",
                                       key, CONFIG_LIST_MAX);
        char **list = calloc(n + 1, sizeof(char *));
        if (!list)
                return cage_fail(err, -ENOMEM, "image config");
        *ret = list;
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(v, i);
                if (!json_is_string(e) || json_string_length(e) > CONFIG_STRING_MAX ||
                    strlen(json_string_value(e)) != json_string_length(e))
                        return cage_fail_plain(err, -EBADMSG,
                                               "image config: %s[%zu] is not a "
                                               "string of the allowed length",
                                               key, i);
                if (!(list[i] = strdup(json_string_value(e))))
                        return cage_fail(err, -ENOMEM, "image config");
        }
        return 0;
}

static int config_string(json_t *obj, const char *key, char **ret, struct cage_error *err)
{
        json_t *v = json_object_get(obj, key);
        if (v && !json_is_string(v) && !json_is_null(v))
                return cage_fail_plain(err, -EBADMSG, "image config: %s is not a string", key);
        const char *s = json_string_value(v) ? json_string_value(v) : "";
        if (strlen(s) > CONFIG_STRING_MAX)
                return cage_fail_plain(err, -E2BIG, "image config: %s is too long", key);
        *ret = strdup(s);
        return *ret ? 0 : cage_fail(err, -ENOMEM, "image config");
}

static int parse_config_root(json_t *root, struct image_config *c, struct cage_error *err)
{
        if (!json_is_object(root))
                return cage_fail_plain(err, -EBADMSG, "image config: not a JSON object");
        json_t *cfg = json_object_get(root, "config");
        if (cfg && !json_is_object(cfg) && !json_is_null(cfg))
                return cage_fail_plain(err, -EBADMSG, "image config: config is not an object");
        int r;
        if ((r = string_list(json_object_get(cfg, "Env"), "Env", &c->env, err)) < 0 ||
            (r = string_list(json_object_get(cfg, "Cmd"), "Cmd", &c->cmd, err)) < 0 ||
            (r = string_list(json_object_get(cfg, "Entrypoint"), "Entrypoint", &c->entrypoint,
                             err)) < 0 ||
            (r = config_string(cfg, "WorkingDir", &c->working_dir, err)) < 0 ||
            (r = config_string(cfg, "User", &c->user, err)) < 0)
                return r;
        if ((r = copy_field(c->os, sizeof(c->os), root, "os", false, "image config", err)) < 0 ||
            (r = copy_field(c->arch, sizeof(c->arch), root, "architecture", false, "image config",
                            err)) < 0 ||
            (r = copy_field(c->variant, sizeof(c->variant), root, "variant", false, "image config",
                            err)) < 0)
                return r;
        json_t *rootfs = json_object_get(root, "rootfs");
        if ((r = string_list(json_object_get(rootfs, "diff_ids"), "rootfs.diff_ids", &c->diff_ids,
                             err)) < 0)
                return r;
        for (; c->diff_ids[c->n_diff_ids]; c->n_diff_ids++)
                if (!cage_image_digest_valid(c->diff_ids[c->n_diff_ids]))
                        return cage_fail_plain(err, -EBADMSG,
                                               "image config: rootfs.diff_ids[%zu] is not a digest",
                                               c->n_diff_ids);
        return 0;
}

int image_config_parse(const char *buf, size_t len, struct image_config *ret,
                       struct cage_error *err)
{
        struct image_config c = {};
        if (len > IMAGE_CONFIG_MAX)
                return cage_fail_plain(err, -EFBIG, "image config: more than %d bytes",
                                       IMAGE_CONFIG_MAX);
        json_error_t jerr;
        json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return cage_fail_plain(err, -EBADMSG, "image config: invalid JSON (%.100s)",
                                       jerr.text);
        int r = parse_config_root(root, &c, err);
        json_decref(root);
        if (r < 0) {
                image_config_done(&c);
                return r;
        }
        *ret = c;
        return 0;
}

static void free_list(char **list)
{
        for (size_t i = 0; list && list[i]; i++)
                free(list[i]);
        free(list);
}

void image_config_done(struct image_config *c)
{
        free_list(c->env);
        free_list(c->cmd);
        free_list(c->entrypoint);
        free_list(c->diff_ids);
        free(c->working_dir);
        free(c->user);
        *c = (struct image_config){};
}

static json_t *list_json(char **list)
{
        json_t *a = json_array();
        for (size_t i = 0; list && list[i]; i++)
                json_array_append_new(a, json_string(list[i]));
        return a;
}

json_t *image_config_json(const struct image_config *c)
{
        return json_pack("{s:o,s:s,s:s,s:o,s:o}", "Env", list_json(c->env), "WorkingDir",
                         c->working_dir ? c->working_dir : "", "User", c->user ? c->user : "",
                         "Cmd", list_json(c->cmd), "Entrypoint", list_json(c->entrypoint));
}
