/* Workspace files of named sandboxes: each call finds the sandbox (scoped
 * to the tenant), opens its workspace (mounting it if it is not mounted:
 * files stay reachable while the sandbox is stopped) and hands the client
 * path to files.c, which resolves it beneath the workspace without ever
 * leaving it. Writes and deletes are audited with the path and size, never
 * the content. */
#include <errno.h>
#include <unistd.h>

#include "service_private.h"
#include "services/files.h"
#include "util/cleanup.h"
#include "util/error.h"

/* The workspace fd of the tenant's sandbox `name`, with a reference held. */
static int open_ws(struct cage_service *svc, const char *tenant, const char *name,
                   struct sb **ret_sb, struct cage_error *err)
{
        struct sb *sb;
        int r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&sb->lock);
        int fd = sb->removed ? cage_fail_plain(err, -ENOENT, "no sandbox named \"%s\"", name)
                             : svc_workspace_fd(sb, err);
        pthread_mutex_unlock(&sb->lock);
        if (fd < 0) {
                svc_unref(sb);
                return fd;
        }
        *ret_sb = sb;
        return fd;
}

static void audit_file(struct sb *sb, enum cage_audit_event ev, const char *path, long long size)
{
        json_t *f = json_pack("{s:s}", "path", path);
        if (size >= 0)
                json_object_set_new(f, "size", json_integer(size));
        svc_audit(sb->svc, ev, sb->tenant, sb->name, svc_labels(sb), f);
}

int cage_service_file_write(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, const void *data, size_t len, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_write(ws, path, data, len, err);
        /* The workspace's image lives in data_dir: a full data_dir, not the
         * workspace, may be what refused the bytes. */
        if ((r == -ENOSPC || r == -EIO) && svc_data_dir_room(svc, err) < 0)
                r = -ENOSPC;
        svc_audit_denied(svc, r, tenant, name, err);
        if (r == 0)
                audit_file(sb, CAGE_AUDIT_FILE_WRITE, path, (long long)len);
        svc_unref(sb);
        return r;
}

int cage_service_file_fetch(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, const char *url, const char *field,
                            struct cage_error *err)
{
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        struct sb *sb;
        int r = svc_lookup(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        r = svc_fetch_url(svc, tenant, svc_labels(sb), url, field, &data, &len, err);
        svc_unref(sb);
        if (r < 0) {
                svc_audit_denied(svc, r, tenant, name, err);
                return r;
        }
        return cage_service_file_write(svc, tenant, name, path, data, len, err);
}

int cage_service_file_read(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, size_t max, void **ret_data, size_t *ret_len,
                           struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_read(ws, path, max, ret_data, ret_len, err);
        svc_audit_denied(svc, r, tenant, name, err);
        if (r == 0)
                audit_file(sb, CAGE_AUDIT_FILE_READ, path, (long long)*ret_len);
        svc_unref(sb);
        return r;
}

int cage_service_file_list(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, json_t **ret, struct cage_error *err)
{
        return cage_service_file_list_max(svc, tenant, name, path, CAGE_FILES_LIST_MAX, ret, err);
}

int cage_service_file_list_max(struct cage_service *svc, const char *tenant, const char *name,
                               const char *path, size_t max, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_list_max(ws, path ? path : "", max, ret, err);
        svc_audit_denied(svc, r, tenant, name, err);
        svc_unref(sb);
        return r;
}

int cage_service_file_stat(struct cage_service *svc, const char *tenant, const char *name,
                           const char *path, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_stat(ws, path, ret, err);
        svc_audit_denied(svc, r, tenant, name, err);
        svc_unref(sb);
        return r;
}

int cage_service_file_mkdir(struct cage_service *svc, const char *tenant, const char *name,
                            const char *path, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_mkdir(ws, path, err);
        svc_audit_denied(svc, r, tenant, name, err);
        if (r == 0)
                audit_file(sb, CAGE_AUDIT_FILE_WRITE, path, -1);
        svc_unref(sb);
        return r;
}

int cage_service_file_delete(struct cage_service *svc, const char *tenant, const char *name,
                             const char *path, bool recursive, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_delete(ws, path, recursive, err);
        svc_audit_denied(svc, r, tenant, name, err);
        if (r == 0)
                audit_file(sb, CAGE_AUDIT_FILE_DELETE, path, -1);
        svc_unref(sb);
        return r;
}

int cage_service_file_move(struct cage_service *svc, const char *tenant, const char *name,
                           const char *from, const char *to, struct cage_error *err)
{
        struct sb *sb;
        _cleanup_close_ int ws = open_ws(svc, tenant, name, &sb, err);
        if (ws < 0)
                return ws;
        int r = cage_files_move(ws, from, to, err);
        svc_audit_denied(svc, r, tenant, name, err);
        if (r == 0) {
                audit_file(sb, CAGE_AUDIT_FILE_DELETE, from, -1);
                audit_file(sb, CAGE_AUDIT_FILE_WRITE, to, -1);
        }
        svc_unref(sb);
        return r;
}
