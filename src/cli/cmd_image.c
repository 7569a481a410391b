/* `codecage image pull|import|ls|inspect|rm|prune`: the local image store
 * (docs/IMAGES.md), without a server. The store is <data_dir>/images of
 * the config `--config` names (the same one `codecage serve` uses), opened
 * with its `images` section by cli/image_store.c, and every command is safe
 * while a server uses it (src/images/store.c locks). Progress of a pull or
 * an import goes to stderr; results to stdout. Exit status: 0, or
 * EXIT_CODECAGE_FAILED after a one-line message. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "images/images.h"
#include "util/cleanup.h"
#include "util/error.h"

#define ARGS_MAX 64

struct image_args {
        const char *config;
        const char *tag;
        bool json;
        const char *cmd;
        const char *pos[ARGS_MAX];
        size_t n_pos;
};

struct image_ctx {
        struct image_args a;
        struct cli_image_store s;
        struct cage_image_store *store; /* s.store */
};

static void usage(FILE *f)
{
        fprintf(f,
                "usage: codecage image [--config FILE] COMMAND [ARGS...]\n\n"
                "The local image store (<data_dir>/images of the config; docs/IMAGES.md).\n"
                "No server is needed, and a running `codecage serve` may share the store.\n\n"
                "commands:\n"
                "  pull REF                 pull an image from its registry\n"
                "  import PATH [--tag REF]  import a `docker save` archive or an OCI layout\n"
                "                           (a tar, compressed or not, or a directory)\n"
                "  ls                       list local images\n"
                "  inspect REF|ID           show an image: digests, layers, config, root\n"
                "  rm REF|ID...             remove references (an image goes with its last one;\n"
                "                           one in use by a sandbox is kept: error)\n"
                "  prune                    remove unnamed images, leftovers and unused blobs,\n"
                "                           then least recently used images beyond "
                "images.max_store_mib\n\n"
                "options:\n"
                "  --config FILE   the server config (docs/CONFIG.md): data_dir and images\n"
                "  --json          print JSON (pull, import, ls, inspect, rm, prune)\n"
                "  --tag REF       name the imported image (the archive must hold one)\n"
                "  --help          show this help\n\n"
                "References are normalised as Docker does: python:3.12-slim is\n"
                "docker.io/library/python:3.12-slim. An ID is sha256:<64 hex digits>.\n"
                "Exit status: 0, or %d after a message on stderr.\n",
                EXIT_CODECAGE_FAILED);
}

static int take_value(int argc, char **argv, int *i, const char **ret)
{
        if (*i + 1 >= argc) {
                fprintf(stderr, "codecage: image: %s needs a value\n", argv[*i]);
                return -EINVAL;
        }
        *ret = argv[++*i];
        return 0;
}

/* Options may come before or after the command word. 1 = help shown. */
static int parse_args(int argc, char **argv, struct image_args *a)
{
        for (int i = 1; i < argc; i++) {
                const char *s = argv[i];
                int r = 0;
                if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
                        usage(stdout);
                        return 1;
                } else if (strcmp(s, "--json") == 0) {
                        a->json = true;
                } else if (strcmp(s, "--config") == 0) {
                        r = take_value(argc, argv, &i, &a->config);
                } else if (strcmp(s, "--tag") == 0) {
                        r = take_value(argc, argv, &i, &a->tag);
                } else if (s[0] == '-' && s[1]) {
                        fprintf(stderr, "codecage: image: unknown option %s\n", s);
                        r = -EINVAL;
                } else if (!a->cmd) {
                        a->cmd = s;
                } else if (a->n_pos < ARGS_MAX) {
                        a->pos[a->n_pos++] = s;
                } else {
                        fprintf(stderr, "codecage: image: too many arguments\n");
                        r = -EINVAL;
                }
                if (r < 0)
                        return r;
        }
        if (!a->cmd) {
                usage(stderr);
                return -EINVAL;
        }
        return 0;
}

/* ---- output ---- */

static void print_json(json_t *j)
{
        char *text = json_dumps(j, JSON_INDENT(2));
        if (text)
                puts(text);
        free(text);
}

static void format_size(uint64_t bytes, char *buf, size_t size)
{
        if (bytes >= 1024ULL * 1024 * 1024)
                snprintf(buf, size, "%.1fGB", bytes / (1024.0 * 1024 * 1024));
        else if (bytes >= 1024 * 1024)
                snprintf(buf, size, "%.1fMB", bytes / (1024.0 * 1024));
        else
                snprintf(buf, size, "%.1fkB", bytes / 1024.0);
}

static void format_time(json_int_t ms, char *buf, size_t size)
{
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        if (!localtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M", &tm))
                snprintf(buf, size, "-");
}

static void print_table(json_t *list)
{
        size_t i;
        json_t *e;
        printf("%-50s %-19s %-9s %-16s %s\n", "REFERENCE", "ID", "SIZE", "LAST-USED", "IN-USE");
        json_array_foreach(list, i, e)
        {
                char size[32], used[32];
                const char *ref = json_string_value(json_object_get(e, "ref"));
                format_size((uint64_t)json_integer_value(json_object_get(e, "size")), size,
                            sizeof(size));
                format_time(json_integer_value(json_object_get(e, "last_used")), used,
                            sizeof(used));
                printf("%-50s %-19.19s %-9s %-16s %s\n", ref ? ref : "<none>",
                       json_string_value(json_object_get(e, "id")), size, used,
                       json_is_true(json_object_get(e, "in_use")) ? "yes" : "no");
        }
}

/* ---- commands ---- */

static int need_args(struct image_ctx *c, size_t lo, size_t hi)
{
        if (c->a.n_pos >= lo && c->a.n_pos <= hi)
                return 0;
        fprintf(stderr, "codecage: image %s: expected %zu%s argument%s; see --help\n", c->a.cmd, lo,
                hi > lo ? " or more" : "", lo == 1 && hi == 1 ? "" : "s");
        return -EINVAL;
}

static int do_pull(struct image_ctx *c, struct cage_error *err)
{
        struct cage_image_op op = {
                .progress = cli_image_progress, .userdata = &c->s, .cancel_fd = -1};
        struct cage_image *img = NULL;
        int r = cage_image_pull(c->store, c->a.pos[0], &op, &img, err);
        cli_image_progress_end(&c->s);
        if (r < 0)
                return r;
        cli_image_audit(&c->s, CAGE_AUDIT_IMAGE_PULL,
                        json_pack("{s:s,s:s,s:s,s:s}", "ref", img->ref, "id", img->id,
                                  "manifest_digest", img->manifest_digest, "status", "ok"));
        if (c->a.json) {
                json_auto_t *j = json_pack("{s:s,s:s,s:s}", "ref", img->ref, "id", img->id,
                                           "manifest_digest", img->manifest_digest);
                print_json(j);
        } else {
                printf("%s %s\n", img->ref, img->id);
        }
        cage_image_free(img);
        return 0;
}

static int do_import(struct image_ctx *c, struct cage_error *err)
{
        struct cage_image_op op = {
                .progress = cli_image_progress, .userdata = &c->s, .cancel_fd = -1};
        json_auto_t *ids = NULL;
        int r = cage_image_import(c->store, c->a.pos[0], c->a.tag, &op, &ids, err);
        cli_image_progress_end(&c->s);
        if (r < 0)
                return r;
        cli_image_audit(&c->s, CAGE_AUDIT_IMAGE_IMPORT,
                        json_pack("{s:s,s:O}", "path", c->a.pos[0], "images", ids));
        if (c->a.json) {
                print_json(ids);
                return 0;
        }
        size_t i;
        json_t *e;
        json_array_foreach(ids, i, e)
        {
                const char *ref = json_string_value(json_object_get(e, "ref"));
                printf("%s %s\n", ref ? ref : "<none>",
                       json_string_value(json_object_get(e, "id")));
        }
        return 0;
}

static int do_ls(struct image_ctx *c, struct cage_error *err)
{
        json_auto_t *list = NULL;
        int r = cage_image_list(c->store, &list, err);
        if (r < 0)
                return r;
        if (c->a.json)
                print_json(list);
        else
                print_table(list);
        return 0;
}

static void print_strv(const char *key, json_t *arr)
{
        size_t i;
        json_t *v;
        printf("%-16s", key);
        json_array_foreach(arr, i, v) printf(" %s", json_string_value(v));
        printf("\n");
}

static int do_inspect(struct image_ctx *c, struct cage_error *err)
{
        json_auto_t *j = NULL;
        int r = cage_image_inspect(c->store, c->a.pos[0], &j, err);
        if (r < 0)
                return r;
        if (c->a.json) {
                print_json(j);
                return 0;
        }
        json_t *cfg = json_object_get(j, "config");
        char size[32];
        format_size((uint64_t)json_integer_value(json_object_get(j, "size")), size, sizeof(size));
        print_strv("refs", json_object_get(j, "refs"));
        printf("%-16s %s\n%-16s %s\n%-16s %s\n%-16s %s\n%-16s %s\n", "id",
               json_string_value(json_object_get(j, "id")), "manifest",
               json_string_value(json_object_get(j, "manifest_digest")), "platform",
               json_string_value(json_object_get(j, "platform")), "size", size, "rootfs",
               json_string_value(json_object_get(j, "rootfs")));
        print_strv("layers", json_object_get(j, "layers"));
        print_strv("env", json_object_get(cfg, "Env"));
        print_strv("entrypoint", json_object_get(cfg, "Entrypoint"));
        print_strv("cmd", json_object_get(cfg, "Cmd"));
        printf("%-16s %s\n%-16s %s\n", "workdir",
               json_string_value(json_object_get(cfg, "WorkingDir")), "user",
               json_string_value(json_object_get(cfg, "User")));
        return 0;
}

static int do_rm(struct image_ctx *c, struct cage_error *err)
{
        int failed = 0;
        json_auto_t *out = json_array();
        for (size_t i = 0; i < c->a.n_pos; i++) {
                char id[CAGE_IMAGE_DIGEST_LEN + 1];
                struct cage_error one = {};
                if (cage_image_remove(c->store, c->a.pos[i], id, &one) < 0) {
                        fprintf(stderr, "codecage: image rm: %s\n", one.message);
                        *err = one;
                        failed = one.code;
                        continue;
                }
                cli_image_audit(&c->s, CAGE_AUDIT_IMAGE_REMOVE,
                                json_pack("{s:s,s:s}", "ref", c->a.pos[i], "id", id));
                if (c->a.json)
                        json_array_append_new(out,
                                              json_pack("{s:s,s:s}", "ref", c->a.pos[i], "id", id));
                else
                        printf("%s\n", c->a.pos[i]);
        }
        if (c->a.json)
                print_json(out);
        return failed ? -EEXIST : 0; /* each failure was reported already */
}

static int do_prune(struct image_ctx *c, struct cage_error *err)
{
        json_auto_t *report = NULL;
        int r = cage_image_prune(c->store, &report, err);
        if (r < 0)
                return r;
        if (c->a.json) {
                print_json(report);
                return 0;
        }
        char freed[32], size[32];
        format_size((uint64_t)json_integer_value(json_object_get(report, "bytes_freed")), freed,
                    sizeof(freed));
        format_size((uint64_t)json_integer_value(json_object_get(report, "size")), size,
                    sizeof(size));
        printf("removed %zu image(s), freed %s; the store holds %s\n",
               json_array_size(json_object_get(report, "removed")), freed, size);
        return 0;
}

static const struct {
        const char *name;
        int (*fn)(struct image_ctx *c, struct cage_error *err);
        size_t min_args, max_args;
} image_commands[] = {
        {"pull", do_pull, 1, 1},       {"import", do_import, 1, 1}, {"ls", do_ls, 0, 0},
        {"inspect", do_inspect, 1, 1}, {"rm", do_rm, 1, ARGS_MAX},  {"prune", do_prune, 0, 0},
};

int cmd_image(int argc, char **argv)
{
        struct image_ctx c = {};
        struct cage_error err = {};
        int r = parse_args(argc, argv, &c.a);
        if (r != 0)
                return r > 0 ? 0 : EXIT_CODECAGE_FAILED;
        size_t i = 0;
        while (i < ELEMENTSOF(image_commands) && strcmp(image_commands[i].name, c.a.cmd) != 0)
                i++;
        if (i == ELEMENTSOF(image_commands)) {
                fprintf(stderr, "codecage: image: unknown command \"%s\"\n", c.a.cmd);
                usage(stderr);
                return EXIT_CODECAGE_FAILED;
        }
        if (c.a.tag && strcmp(c.a.cmd, "import") != 0) {
                fprintf(stderr, "codecage: image: --tag is an option of import\n");
                return EXIT_CODECAGE_FAILED;
        }
        if (need_args(&c, image_commands[i].min_args, image_commands[i].max_args) < 0)
                return EXIT_CODECAGE_FAILED;
        r = cli_image_store_open(c.a.config, &c.s, &err);
        c.store = c.s.store;
        if (r >= 0)
                r = image_commands[i].fn(&c, &err);
        if (r < 0 && r != -EEXIST)
                fprintf(stderr, "codecage: image %s: %s\n", c.a.cmd, err.message);
        cli_image_store_close(&c.s);
        return r < 0 ? EXIT_CODECAGE_FAILED : 0;
}
