/* envd's filesystem.Filesystem over Connect and its /files routes
 * (e2b.h), on the service's workspace file API: every path is beneath
 * /workspace (relative paths are relative to it, as commands start there),
 * resolved by the service without following links out of it.
 *
 *   Stat, ListDir (depth 1..E2B_DEPTH_MAX), MakeDir (already_exists for an
 *   existing entry, which the SDK turns into false), Remove (recursive, as
 *   envd's), Move (creates the destination's parents)
 *   GET /files?path=P           the file's bytes
 *   POST /files?path=P          multipart/form-data (one part per file,
 *                               its filename the path when the query has
 *                               none) or application/octet-stream
 * Entries carry what the service knows: name, type, absolute path, size,
 * modification time (no owner, group or mode). Watching is not served. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/e2b.h"
#include "services/config.h"
#include "services/service.h"
#include "util/json_bounded.h"
#include "util/cleanup.h"
#include "util/error.h"

#define E2B_DEPTH_MAX    16
#define LIST_ENTRIES_MAX 10000
#define PARTS_MAX        1000
#define PATH_MAX_LEN     1024
#define WS               "/workspace"

int e2b_workspace_path(const char *path, char *out, size_t out_len, struct cage_error *err)
{
        if (!path || !*path)
                return cage_fail(err, -EINVAL, "path: required");
        const char *rel = path;
        if (strncmp(path, WS, strlen(WS)) == 0 && (path[strlen(WS)] == '/' || !path[strlen(WS)]))
                rel = path + strlen(WS);
        else if (path[0] == '/')
                return cage_fail(err, -EINVAL,
                                 "path \"%.300s\": codecage's sandboxes keep files in /workspace; "
                                 "use a path beneath it or a relative one",
                                 path);
        while (*rel == '/')
                rel++;
        if (strlen(rel) >= out_len)
                return cage_fail(err, -ENAMETOOLONG, "path: longer than %zu bytes", out_len - 1);
        snprintf(out, out_len, "%s", rel);
        return 0;
}

/* ---- entries ---------------------------------------------------------------- */

static const char *file_type(const char *type)
{
        if (!type)
                return "FILE_TYPE_UNSPECIFIED";
        if (strcmp(type, "file") == 0)
                return "FILE_TYPE_FILE";
        if (strcmp(type, "dir") == 0)
                return "FILE_TYPE_DIRECTORY";
        if (strcmp(type, "symlink") == 0)
                return "FILE_TYPE_SYMLINK";
        return "FILE_TYPE_UNSPECIFIED";
}

/* A service entry {name, path, type, size, mtime} -> an EntryInfo. */
static json_t *entry_info(const json_t *e)
{
        const char *rel = json_string_value(json_object_get(e, "path"));
        char abs[PATH_MAX_LEN + 16], when[32] = "";
        snprintf(abs, sizeof(abs), "%s%s%s", WS, rel && *rel ? "/" : "", rel ? rel : "");
        time_t mtime = (time_t)json_integer_value(json_object_get(e, "mtime"));
        struct tm tm;
        if (gmtime_r(&mtime, &tm))
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name)
                name = rel && strrchr(rel, '/') ? strrchr(rel, '/') + 1 : (rel ? rel : "");
        return json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", name, "type",
                         file_type(json_string_value(json_object_get(e, "type"))), "path", abs,
                         "size", json_integer_value(json_object_get(e, "size")), "modifiedTime",
                         when);
}

static void fail(struct e2b_reply *reply, int r, const char *message)
{
        e2b_connect_error(reply, e2b_connect_code_of(r), message);
}

static int message_path(struct e2b_call *c, const char *key, char *rel, json_t **ret,
                        struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_error_t jerr;
        json_t *msg = json_load_request(c->body, c->body_len, JSON_REJECT_DUPLICATES, &jerr, NULL);
        if (!json_is_object(msg)) {
                json_decref(msg);
                e2b_connect_error(reply, CONNECT_INVALID_ARGUMENT,
                                  "the request must be a JSON object");
                return -EINVAL;
        }
        int r = e2b_workspace_path(json_string_value(json_object_get(msg, key)), rel,
                                   PATH_MAX_LEN + 1, &err);
        if (r < 0) {
                json_decref(msg);
                fail(reply, r, err.message);
                return r;
        }
        *ret = msg;
        return 0;
}

static int stat_entry(struct e2b_call *c, const char *rel, json_t **ret, struct cage_error *err)
{
        json_auto_t *st = NULL;
        int r = cage_service_file_stat(c->svc, c->box->tenant, c->box->id, rel, &st, err);
        if (r < 0)
                return r;
        *ret = entry_info(st);
        return *ret ? 0 : cage_fail(err, -ENOMEM, "entry");
}

static void answer_entry(struct e2b_call *c, const char *rel, struct e2b_reply *reply)
{
        struct cage_error err = {0};
        json_t *entry = NULL;
        int r = stat_entry(c, rel, &entry, &err);
        if (r < 0)
                return fail(reply, r, err.message);
        reply->status = 200;
        reply->json = json_pack("{s:o}", "entry", entry);
}

static void rpc_stat(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        json_auto_t *msg = NULL;
        if (message_path(c, "path", rel, &msg, reply) == 0)
                answer_entry(c, rel, reply);
}

/* Appends to out the entries of rel, up to LIST_ENTRIES_MAX in all, and
 * to dirs the paths of its directories. Only what fits is read, and the
 * listing is freed before the caller descends. */
static int list_level(struct e2b_call *c, const char *rel, json_t *out, json_t *dirs,
                      struct cage_error *err)
{
        json_auto_t *doc = NULL;
        size_t room = LIST_ENTRIES_MAX - json_array_size(out);
        int r = cage_service_file_list_max(c->svc, c->box->tenant, c->box->id, rel, room, &doc,
                                           err);
        if (r < 0)
                return r;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(doc, "entries"), i, e)
        {
                if (json_array_size(out) >= LIST_ENTRIES_MAX)
                        break;
                json_array_append_new(out, entry_info(e));
                const char *type = json_string_value(json_object_get(e, "type"));
                if (dirs && type && strcmp(type, "dir") == 0)
                        json_array_append(dirs, json_object_get(e, "path"));
        }
        return 0;
}

/* Appends the entries of rel (and, depth > 1, of its directories). A
 * directory below rel that cannot be listed by the path the listing gave
 * (gone meanwhile, or a name the listing could only show sanitized) is
 * left out, not an error. */
static int list_into(struct e2b_call *c, const char *rel, unsigned depth, json_t *out,
                     struct cage_error *err)
{
        json_auto_t *dirs = depth > 1 ? json_array() : NULL;
        if (depth > 1 && !dirs)
                return -ENOMEM;
        int r = list_level(c, rel, out, dirs, err);
        if (r < 0)
                return r;
        size_t i;
        json_t *d;
        json_array_foreach(dirs, i, d)
        {
                if (json_array_size(out) >= LIST_ENTRIES_MAX)
                        break;
                struct cage_error sub = {0};
                if ((r = list_into(c, json_string_value(d), depth - 1, out, &sub)) == -ENOMEM)
                        return cage_fail(err, r, "%s", sub.message);
        }
        return 0;
}

static void rpc_list(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        json_auto_t *msg = NULL;
        struct cage_error err = {0};
        if (message_path(c, "path", rel, &msg, reply) < 0)
                return;
        json_int_t depth = json_integer_value(json_object_get(msg, "depth"));
        if (depth < 1)
                depth = 1;
        if (depth > E2B_DEPTH_MAX)
                return e2b_connect_error(reply, CONNECT_INVALID_ARGUMENT,
                                         "depth: at most 16 levels");
        json_t *entries = json_array();
        int r = entries ? list_into(c, rel, (unsigned)depth, entries, &err) : -ENOMEM;
        if (r < 0) {
                json_decref(entries);
                return fail(reply, r, err.message);
        }
        reply->status = 200;
        reply->json = json_pack("{s:o}", "entries", entries);
}

static void rpc_make_dir(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        json_auto_t *msg = NULL, *st = NULL;
        struct cage_error err = {0};
        if (message_path(c, "path", rel, &msg, reply) < 0)
                return;
        if (cage_service_file_stat(c->svc, c->box->tenant, c->box->id, rel, &st, &err) == 0)
                return e2b_connect_error(reply, CONNECT_ALREADY_EXISTS, "the path exists already");
        int r = cage_service_file_mkdir(c->svc, c->box->tenant, c->box->id, rel, &err);
        if (r < 0)
                return fail(reply, r, err.message);
        answer_entry(c, rel, reply);
}

static void rpc_remove(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        json_auto_t *msg = NULL;
        struct cage_error err = {0};
        if (message_path(c, "path", rel, &msg, reply) < 0)
                return;
        int r = cage_service_file_delete(c->svc, c->box->tenant, c->box->id, rel, true, &err);
        if (r < 0)
                return fail(reply, r, err.message);
        reply->status = 200;
        reply->json = json_object();
}

static void rpc_move(struct e2b_call *c, struct e2b_reply *reply)
{
        char from[PATH_MAX_LEN + 1], to[PATH_MAX_LEN + 1];
        json_auto_t *msg = NULL;
        struct cage_error err = {0};
        if (message_path(c, "source", from, &msg, reply) < 0)
                return;
        int r = e2b_workspace_path(json_string_value(json_object_get(msg, "destination")), to,
                                   sizeof(to), &err);
        if (r == 0)
                r = cage_service_file_move(c->svc, c->box->tenant, c->box->id, from, to, &err);
        if (r < 0)
                return fail(reply, r, err.message);
        answer_entry(c, to, reply);
}

/* ---- /files ----------------------------------------------------------------- */

static void http_fail(struct e2b_reply *reply, int r, const char *message)
{
        reply->status = (unsigned)cage_service_http_status(r);
        json_decref(reply->json);
        reply->json = e2b_error_doc(reply->status, message);
}

static int query_path(struct e2b_call *c, char *rel, bool *given, struct cage_error *err)
{
        _cleanup_free_ char *path = NULL;
        int r = http_query_get(c->query, "path", &path);
        if (r < 0)
                return cage_fail(err, -EINVAL, "path: a bad %%-escape");
        *given = r > 0 && *path;
        if (!*given)
                return 0;
        return e2b_workspace_path(path, rel, PATH_MAX_LEN + 1, err);
}

static void files_get(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        bool given;
        struct cage_error err = {0};
        void *data = NULL;
        size_t len = 0;
        int r = query_path(c, rel, &given, &err);
        if (r == 0 && !given)
                r = cage_fail(&err, -EINVAL, "path: required");
        if (r == 0)
                r = cage_service_file_read(c->svc, c->box->tenant, c->box->id, rel,
                                           c->cfg->limits.max_body_bytes, &data, &len, &err);
        if (r < 0)
                return http_fail(reply, r, err.message);
        reply->status = 200;
        reply->raw = data;
        reply->raw_len = len;
        reply->content_type = "application/octet-stream";
}

static int write_one(struct e2b_call *c, const char *rel, const void *data, size_t len, json_t *out,
                     struct cage_error *err)
{
        int r = cage_service_file_write(c->svc, c->box->tenant, c->box->id, rel, data, len, err);
        if (r < 0)
                return r;
        json_auto_t *st = NULL;
        if ((r = cage_service_file_stat(c->svc, c->box->tenant, c->box->id, rel, &st, err)) < 0)
                return r;
        json_t *e = entry_info(st);
        json_object_del(e, "size");
        json_object_del(e, "modifiedTime");
        json_object_set_new(e, "type", json_string("file"));
        return json_array_append_new(out, e) < 0 ? -ENOMEM : 0;
}

static int multipart(struct e2b_call *c, const char *path_rel, bool path_given, json_t *out,
                     struct cage_error *err)
{
        char boundary[E2B_BOUNDARY_MAX + 3];
        const char *ct =
                MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!e2b_multipart_boundary(ct, boundary, sizeof(boundary)))
                return cage_fail(err, -EINVAL, "a multipart body needs its boundary");
        size_t pos = 0;
        for (unsigned n = 0; n < PARTS_MAX; n++) {
                struct e2b_part part;
                char rel[PATH_MAX_LEN + 1];
                int r = e2b_multipart_next(c->body, c->body_len, boundary, &pos, &part);
                if (r <= 0)
                        return r < 0 ? cage_fail(err, r, "a malformed multipart body") : 0;
                if (!path_given && !part.filename)
                        r = cage_fail(err, -EINVAL,
                                      "path: required (in the query or as the part's filename)");
                else if (!path_given)
                        r = e2b_workspace_path(part.filename, rel, sizeof(rel), err);
                if (r >= 0)
                        r = write_one(c, path_given ? path_rel : rel, part.data, part.len, out,
                                      err);
                e2b_part_clear(&part);
                if (r < 0)
                        return r;
        }
        return cage_fail(err, -E2BIG, "more than %d parts", PARTS_MAX);
}

static void files_post(struct e2b_call *c, struct e2b_reply *reply)
{
        char rel[PATH_MAX_LEN + 1];
        bool given;
        struct cage_error err = {0};
        const char *ct =
                MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *enc = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_ENCODING);
        json_t *out = json_array();
        int r = out ? query_path(c, rel, &given, &err) : -ENOMEM;
        if (r == 0 && enc && strcasecmp(enc, "identity") != 0)
                r = cage_fail(&err, -EINVAL,
                              "Content-Encoding %.32s: codecage takes uploads "
                              "uncompressed (leave gzip off)",
                              enc);
        else if (r == 0 && ct && strncasecmp(ct, "multipart/form-data", 19) == 0)
                r = multipart(c, rel, given, out, &err);
        else if (r == 0 && !given)
                r = cage_fail(&err, -EINVAL, "path: required");
        else if (r == 0)
                r = write_one(c, rel, c->body, c->body_len, out, &err);
        if (r < 0) {
                json_decref(out);
                return http_fail(reply, r, err.message);
        }
        reply->status = 200;
        reply->json = out;
}

int e2b_fs(struct e2b_call *c, struct e2b_reply *reply)
{
        static const char watching[] = "codecage does not offer watching directories";
        static const struct e2b_method methods[] = {
                {"Stat", rpc_stat, NULL},          {"ListDir", rpc_list, NULL},
                {"MakeDir", rpc_make_dir, NULL},   {"Remove", rpc_remove, NULL},
                {"Move", rpc_move, NULL},          {"WatchDir", NULL, watching},
                {"CreateWatcher", NULL, watching}, {"GetWatcherEvents", NULL, watching},
                {"RemoveWatcher", NULL, watching},
        };
        if (strcmp(c->path, "/files") == 0) {
                if (strcmp(c->method, "GET") == 0 || strcmp(c->method, "HEAD") == 0)
                        files_get(c, reply);
                else if (strcmp(c->method, "POST") == 0)
                        files_post(c, reply);
                else
                        http_fail(reply, -EINVAL, "/files takes GET and POST");
                return 0;
        }
        return e2b_connect_dispatch(c, reply, "/filesystem.Filesystem/", methods,
                                    sizeof(methods) / sizeof(methods[0]));
}
