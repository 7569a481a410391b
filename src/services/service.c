/* The sandbox service: opening (and recovering after a crash), the
 * registry of named sandboxes, their lifecycle (create, start, stop, kill,
 * remove), info documents, logs, the idle reaper. See service.h for the
 * contract and service_private.h for the locking rules.
 *
 * Crash recovery rests on three facts: a sandbox's pid 1 dies with the
 * server (parent-death signal, set on a thread that lives as long as the
 * process), its cgroup carries the server's pid in its name and is swept
 * once that pid is gone, and workspace mounts live in the server's own
 * mount namespace. What the store still says is "running" is then marked
 * stopped, after checking that no process it names is left. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cgroup.h"
#include "core/launcher.h"
#include "core/spec.h"
#include "core/zygote.h"
#include "service_private.h"
#include "util/background.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/debug_pause.h"
#include "util/error.h"
#include "util/fdutil.h"

#define REAPER_PERIOD_S     1
#define STORE_FILE          "sandboxes.db"
#define INDEX_BUCKETS       8192    /* chains of the registry's index (~8 long at 65536) */
#define PARK_AFTER_MS       2000    /* idle this long: cgroup fds closed (park_locked) */
#define NOFILE_WANT         1048576 /* the server's RLIMIT_NOFILE, when it may raise it */
#define STALE_SWEEP_WAIT_MS 2000    /* for a dead server's sandboxes to empty */

int cage_service_http_status(int r)
{
        switch (r) {
        case -EINVAL:
        case -ENOEXEC: /* the image cannot run what was asked (no python3) */
        case -EISDIR:
        case -ENOTDIR:
        case -ENAMETOOLONG:
                return 400;
        case -EPERM:
        case -EACCES:
        case -ELOOP: /* a link where a file was expected, or one leading out */
        case -EXDEV:
                return 403;
        case -ENOENT:
                return 404;
        case -EEXIST:
        case -EBUSY:
        case -ENOTEMPTY: /* a directory delete without recursive */
                return 409;
        case -E2BIG:
        case -EFBIG:
                return 413;
        case -ENOSPC:
        case -EDQUOT:
                return 507;
        case -EREMOTEIO: /* a `files` URL's server failed us */
        case -EHOSTUNREACH:
                return 502;
        case -ETIMEDOUT:
                return 504;
        case -EUSERS: /* over a quota, or the launch queue is full */
                return 429;
        default:
                return r >= 0 ? 200 : 500;
        }
}

void cage_service_watch(struct cage_service *svc, cage_service_watch_fn fn, void *arg)
{
        pthread_mutex_lock(&svc->watch_lock);
        svc->watch_fn = fn;
        svc->watch_arg = arg;
        pthread_mutex_unlock(&svc->watch_lock);
}

/* Tells the watcher of a change the audit record describes. */
static void watch_change(struct cage_service *svc, enum cage_audit_event ev, const char *tenant,
                         const char *sandbox, const json_t *fields)
{
        const char *path = NULL;
        switch (ev) {
        case CAGE_AUDIT_FILE_WRITE:
        case CAGE_AUDIT_FILE_DELETE:
                if (!(path = json_string_value(json_object_get(fields, "path"))))
                        return;
                break;
        case CAGE_AUDIT_EXEC_END:
        case CAGE_AUDIT_SANDBOX_REMOVE:
                break;
        default:
                return;
        }
        if (!tenant || !sandbox)
                return;
        pthread_mutex_lock(&svc->watch_lock);
        if (svc->watch_fn)
                svc->watch_fn(svc->watch_arg, tenant, sandbox, path);
        pthread_mutex_unlock(&svc->watch_lock);
}

void svc_audit(struct cage_service *svc, enum cage_audit_event ev, const char *tenant,
               const char *sandbox, json_t *labels, json_t *fields)
{
        if (svc->audit)
                (void)cage_audit_record(svc->audit, ev, tenant, sandbox, labels, fields, NULL);
        watch_change(svc, ev, tenant, sandbox, fields);
        json_decref(fields);
}

void cage_service_audit_auth_deny(struct cage_service *svc, const char *reason, const char *remote,
                                  const char *method, const char *route)
{
        svc_audit(svc, CAGE_AUDIT_AUTH_DENY, NULL, NULL, NULL,
                  json_pack("{s:s, s:s?, s:s?, s:s?}", "reason", reason, "remote", remote, "method",
                            method, "route", route));
}

/* Records a request refused by policy (-EPERM: a limit, a mount;
 * -EUSERS: a quota; -ELOOP/-EXDEV: a path leading out of the workspace). */
void svc_audit_denied(struct cage_service *svc, int r, const char *tenant, const char *sandbox,
                      const struct cage_error *err)
{
        if (r != -EPERM && r != -ELOOP && r != -EXDEV && r != -EUSERS)
                return;
        char field[65] = "";
        const char *colon = strchr(err->message, ':');
        if (colon && colon - err->message < 64 && !memchr(err->message, ' ', colon - err->message))
                snprintf(field, sizeof(field), "%.*s", (int)(colon - err->message), err->message);
        svc_audit(
                svc, CAGE_AUDIT_POLICY_DENY, tenant, sandbox, NULL,
                json_pack("{s:s, s:s?}", "reason", err->message, "field", field[0] ? field : NULL));
}

/* ---- registry ---- */

static struct sb *sb_new(struct cage_service *svc, const char *tenant, const char *name,
                         const char *id)
{
        struct sb *sb = calloc(1, sizeof(*sb));
        if (!sb)
                return NULL;
        sb->svc = svc;
        snprintf(sb->tenant, sizeof(sb->tenant), "%s", tenant);
        snprintf(sb->name, sizeof(sb->name), "%s", name);
        snprintf(sb->id, sizeof(sb->id), "%s", id ? id : "");
        pthread_mutex_init(&sb->lock, NULL);
        pthread_mutex_init(&sb->py_lock, NULL);
        pthread_cond_init(&sb->changed, NULL);
        return sb;
}

static void sb_free(struct sb *sb)
{
        svc_spec_free(sb->spec);
        json_decref(sb->stored_doc);
        free(sb->workspace);
        log_ring_clear(&sb->logs);
        pthread_mutex_destroy(&sb->lock);
        pthread_mutex_destroy(&sb->py_lock);
        pthread_cond_destroy(&sb->changed);
        free(sb);
}

/* The registry: a doubly linked list of every entry and an index by
 * (tenant, name), so that lookups, creations and removals cost the same
 * with 10 or 10,000 sandboxes. Both under svc->lock. */
static struct sb **bucket(struct cage_service *svc, const char *tenant, const char *name)
{
        uint32_t h = 2166136261u; /* FNV-1a over "tenant\0name" */
        for (const char *p = tenant;; p++) {
                h = (h ^ (unsigned char)*p) * 16777619u;
                if (!*p)
                        break;
        }
        for (const char *p = name; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
        return &svc->index[h % INDEX_BUCKETS];
}

static struct sb *find_locked(struct cage_service *svc, const char *tenant, const char *name)
{
        for (struct sb *sb = *bucket(svc, tenant, name); sb; sb = sb->hnext)
                if (strcmp(sb->tenant, tenant) == 0 && strcmp(sb->name, name) == 0)
                        return sb;
        return NULL;
}

static void link_locked(struct cage_service *svc, struct sb *sb)
{
        sb->prev = NULL;
        sb->next = svc->list;
        if (svc->list)
                svc->list->prev = sb;
        svc->list = sb;
        struct sb **b = bucket(svc, sb->tenant, sb->name);
        sb->hnext = *b;
        *b = sb;
        svc->count++;
}

static void unlink_locked(struct cage_service *svc, struct sb *gone)
{
        if (gone->prev)
                gone->prev->next = gone->next;
        else
                svc->list = gone->next;
        if (gone->next)
                gone->next->prev = gone->prev;
        for (struct sb **p = bucket(svc, gone->tenant, gone->name); *p; p = &(*p)->hnext)
                if (*p == gone) {
                        *p = gone->hnext;
                        break;
                }
        svc->count--;
}

int svc_lookup(struct cage_service *svc, const char *tenant, const char *name, struct sb **ret,
               struct cage_error *err)
{
        if (!svc_name_valid(name))
                return cage_fail(err, -EINVAL,
                                 "sandbox name \"%.64s\" is invalid: 1..63 characters of letters, "
                                 "digits, '_', '.' and '-'",
                                 name ? name : "");
        pthread_mutex_lock(&svc->lock);
        struct sb *sb = find_locked(svc, tenant, name);
        if (sb)
                sb->refs++;
        pthread_mutex_unlock(&svc->lock);
        if (!sb)
                return cage_fail_plain(err, -ENOENT, "no sandbox named \"%s\"", name);
        *ret = sb;
        return 0;
}

void svc_unref(struct sb *sb)
{
        struct cage_service *svc = sb->svc;
        pthread_mutex_lock(&svc->lock);
        bool last = --sb->refs == 0 && sb->removed;
        pthread_mutex_unlock(&svc->lock);
        if (last)
                sb_free(sb);
}

/* Looks up and locks; -ENOENT for a sandbox removed meanwhile. */
static int lookup_locked(struct cage_service *svc, const char *tenant, const char *name,
                         struct sb **ret, struct cage_error *err)
{
        int r = svc_lookup(svc, tenant, name, ret, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&(*ret)->lock);
        if ((*ret)->removed) {
                pthread_mutex_unlock(&(*ret)->lock);
                svc_unref(*ret);
                return cage_fail_plain(err, -ENOENT, "no sandbox named \"%s\"", name);
        }
        return 0;
}

static void unlock_unref(struct sb *sb)
{
        pthread_mutex_unlock(&sb->lock);
        svc_unref(sb);
}

static struct sb **snapshot(struct cage_service *svc, const char *tenant, size_t *ret_n);

/* ---- lifecycle (sb->lock held) ---- */

json_t *svc_labels(const struct sb *sb)
{
        return sb->spec ? sb->spec->labels : json_object_get(sb->stored_doc, "labels");
}

int svc_workspace_fd(struct sb *sb, struct cage_error *err)
{
        if (!sb->workspace) {
                int r = cage_workspace_mount(sb->svc->ws_base, sb->id, &sb->workspace, err);
                if (r < 0)
                        return r;
        }
        int fd = open(sb->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? cage_fail(err, -errno, "opening the workspace") : fd;
}

/* Forked from the image's zygote with its session loaded (*session) where
 * one can make it, else started as every sandbox (*session stays NULL). */
static int launch_box(struct cage_service *svc, const struct svc_spec *spec,
                      const struct cage_spec *cs, struct cage_box **ret,
                      struct cage_session **session, struct cage_error *err)
{
        if (session) {
                *session = NULL;
                struct cage_error why = {0};
                if (svc_zygote_fork(svc, spec, cs, ret, session, &why) == 0)
                        return 0;
        }
        return cage_box_start(cs, ret, err);
}

int svc_box_start(struct cage_service *svc, const struct svc_spec *spec, const char *workspace,
                  const char *tenant, const char *name, const char *phase,
                  const struct cage_service_io *io, struct cage_box **ret,
                  struct cage_session **session, struct cage_error *err)
{
        _cleanup_free_ char *env = NULL;
        struct cage_spec cs;
        struct svc_image_launch image = {0};
        /* Every launch, restarts too: the config may have changed since. */
        int r = svc_spec_check_tenant(spec, svc->cfg, tenant, err);
        if (r == 0)
                r = svc_image_acquire(svc, spec->image, tenant, io, &image, err);
        if (r == 0)
                r = svc_spec_to_cage(spec, svc->cfg, workspace, &image, &cs, &env, err);
        /* Requests' launches pass the gate; the pool's threads bound its own. */
        bool gated = !phase || strcmp(phase, "pool") != 0;
        if (r == 0 && gated)
                r = svc_launch_acquire(svc, io, err);
        if (r == 0) {
                r = launch_box(svc, spec, &cs, ret, session, err);
                if (gated)
                        svc_launch_release(svc);
        }
        if (r == 0)
                svc_image_attach(*ret, &image);
        svc_image_release(&image);
        if (r < 0 || !spec->network.n)
                return r;
        struct cage_egress_owner owner = {
                .tenant = tenant, .sandbox = name, .labels = spec->labels, .phase = phase};
        r = cage_egress_attach(svc->egress, cage_box_pidfd(*ret), &spec->network, &owner, err);
        if (r < 0 && session)
                *session = cage_session_free(*session);
        if (r < 0)
                *ret = cage_box_destroy(*ret);
        return r;
}

/* How the warm pool starts its sandboxes: like every launch, with its
 * image got (or pulled) from the store. */
static int pool_start_box(void *ctx, const struct svc_spec *spec, struct cage_box **ret)
{
        struct cage_error err = {0};
        return svc_box_start(ctx, spec, NULL, NULL, NULL, "pool", NULL, ret, NULL, &err);
}

/* A zygote for a pool shelf (zygotes.c). Networked policies have none:
 * their egress is attached per sandbox. */
static int pool_start_zygote(void *ctx, const struct svc_spec *spec, struct cage_zygote **ret,
                             struct cage_error *err)
{
        return svc_zygote_start(ctx, spec, ret, NULL, err);
}

static int start_locked(struct sb *sb, struct cage_error *err)
{
        struct cage_service *svc = sb->svc;
        json_t *failed = NULL, *info = NULL;
        if (!sb->spec)
                return cage_fail_plain(err, -EPERM,
                                       "sandbox \"%s\" cannot start: the server's configuration no "
                                       "longer allows its spec (%s); remove it",
                                       sb->name, sb->broken);
        int fd = svc_workspace_fd(sb, err);
        if (fd < 0)
                return fd;
        close(fd);
        int r = svc_requirements_prepare(svc, sb->spec, sb->tenant, &info, &failed, err);
        json_decref(info);
        if (r == 0 && failed) {
                r = cage_fail_plain(err, -EINVAL, "requirements: pip could not install them: %s",
                                    json_string_value(json_object_get(failed, "reason")));
                json_decref(failed);
        }
        if (r == 0)
                r = svc_quota_sandbox_start(svc, sb->tenant, sb->spec->memory_mib, err);
        if (r < 0)
                return r;
        r = svc_box_start(svc, sb->spec, sb->workspace, sb->tenant, sb->name, NULL, NULL, &sb->box,
                          &sb->forked_session, err);
        if (r < 0) {
                svc_quota_sandbox_stop(svc, sb->tenant, sb->spec->memory_mib);
                return r;
        }
        struct cage_sandbox_runtime rt = {.host_uid = (uint32_t)cage_box_host_uid(sb->box),
                                          .cgroup = cage_box_cgroup_name(sb->box),
                                          .init_pid = cage_box_init_pid(sb->box),
                                          .boot_id = svc->boot_id,
                                          .server_instance = svc->instance};
        (void)cage_store_set_state(svc->store, sb->id, CAGE_SANDBOX_RUNNING, &rt, NULL);
        json_t *secrets = sb->spec->secrets;
        svc_audit(svc, CAGE_AUDIT_SANDBOX_START, sb->tenant, sb->name, svc_labels(sb), NULL);
        if (json_array_size(secrets))
                svc_audit(svc, CAGE_AUDIT_SECRET_INJECT, sb->tenant, sb->name, svc_labels(sb),
                          json_pack("{s:O}", "secrets", secrets));
        pthread_cond_broadcast(&sb->changed);
        return 0;
}

void svc_drop_session(struct sb *sb)
{
        if (!sb->session)
                return;
        sb->session = cage_session_free(sb->session);
        svc_quota_session_end(sb->svc, sb->tenant);
}

/* Kills the box, waits until no exec uses it, and frees it. */
static void stop_locked(struct sb *sb, const char *how)
{
        if (!sb->box)
                return;
        cage_box_kill(sb->box);
        while (sb->active > 0)
                pthread_cond_wait(&sb->changed, &sb->lock);
        svc_drop_session(sb); /* no call uses it: active is 0 */
        sb->forked_session = cage_session_free(sb->forked_session);
        svc_contexts_stop(sb);
        sb->box = cage_box_destroy(sb->box);
        svc_quota_sandbox_stop(sb->svc, sb->tenant, sb->spec ? sb->spec->memory_mib : 0);
        (void)cage_store_set_state(sb->svc->store, sb->id, CAGE_SANDBOX_STOPPED, NULL, NULL);
        svc_audit(sb->svc, CAGE_AUDIT_SANDBOX_STOP, sb->tenant, sb->name, svc_labels(sb),
                  json_pack("{s:s}", "how", how));
        pthread_cond_broadcast(&sb->changed);
}

int svc_ensure_running(struct sb *sb, bool *restarted, struct cage_error *err)
{
        *restarted = false;
        if (sb->box && !cage_box_alive(sb->box))
                stop_locked(sb, "died"); /* e.g. its pid 1 was OOM-killed */
        if (sb->box)
                return 0;
        *restarted = true;
        return start_locked(sb, err);
}

/* ---- info ---- */

static json_t *iso_time(int64_t ms)
{
        char buf[64];
        time_t s = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&s, &tm);
        size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
        return json_string(buf);
}

static json_t *info_locked(struct sb *sb)
{
        json_t *usage = json_null();
        if (sb->box) {
                struct cage_box_usage u;
                if (cage_box_usage(sb->box, &u) == 0)
                        usage = json_pack("{s:I,s:I}", "cpu_ms", (json_int_t)u.cpu_ms,
                                          "memory_peak_bytes", (json_int_t)u.memory_bytes);
        }
        uint64_t used = 0, total = 0;
        json_t *disk = json_null();
        if (sb->workspace &&
            cage_workspace_usage(sb->svc->ws_base, sb->id, &used, &total, NULL) >= 0)
                disk = json_pack("{s:I,s:I}", "used_bytes", (json_int_t)used, "total_bytes",
                                 (json_int_t)total);
        return json_pack("{s:s, s:s, s:s, s:s?, s:o, s:o, s:O, s:O, s:o, s:o, s:i}", "name",
                         sb->name, "id", sb->id, "state", sb->box ? "running" : "stopped", "image",
                         sb->spec ? sb->spec->image
                                  : json_string_value(json_object_get(sb->stored_doc, "image")),
                         "created", iso_time(sb->created_ms), "last_used",
                         iso_time(sb->last_used_ms), "labels", svc_labels(sb), "spec",
                         sb->spec ? sb->spec->doc : sb->stored_doc, "usage", usage, "disk", disk,
                         "execs_running", (int)sb->active);
}

/* ---- create ---- */

static int count_tenant(struct cage_service *svc, const char *tenant)
{
        if (svc->cfg->n_tenants == 0) /* one tenant: every entry is its */
                return (int)svc->count;
        int n = 0;
        for (struct sb *sb = svc->list; sb; sb = sb->next)
                n += strcmp(sb->tenant, tenant) == 0;
        return n;
}

/* Reserves the name: the new entry is in the registry, locked, before
 * anything slow happens, so a concurrent create of the same name fails. */
static int reserve(struct cage_service *svc, const char *tenant, struct svc_spec *spec,
                   struct sb **ret, struct cage_error *err)
{
        pthread_mutex_lock(&svc->lock);
        int r = 0;
        if (find_locked(svc, tenant, spec->name))
                r = cage_fail_plain(err, -EEXIST, "a sandbox named \"%s\" already exists",
                                    spec->name);
        else if ((uint32_t)count_tenant(svc, tenant) >= svc->cfg->limits.max_sandboxes_per_tenant) {
                cage_metrics_quota_refused("sandboxes");
                r = cage_fail_plain(err, -EUSERS,
                                    "quota sandboxes: this tenant already has %u sandboxes, the "
                                    "most allowed (limits.max_sandboxes_per_tenant); remove one",
                                    svc->cfg->limits.max_sandboxes_per_tenant);
        }
        struct sb *sb = r == 0 ? sb_new(svc, tenant, spec->name, NULL) : NULL;
        if (r == 0 && !sb)
                r = cage_fail(err, -ENOMEM, "sandbox");
        if (sb) {
                sb->refs = 2; /* the registry's and ours */
                sb->spec = spec;
                pthread_mutex_lock(&sb->lock);
                link_locked(svc, sb);
        }
        pthread_mutex_unlock(&svc->lock);
        *ret = sb;
        return r;
}

static int persist_new(struct cage_service *svc, struct sb *sb, struct cage_error *err)
{
        _cleanup_free_ char *spec_json = json_dumps(sb->spec->doc, JSON_COMPACT | JSON_SORT_KEYS);
        _cleanup_free_ char *labels = json_dumps(svc_labels(sb), JSON_COMPACT | JSON_SORT_KEYS);
        struct cage_sandbox_record in = {.tenant = sb->tenant,
                                         .name = sb->name,
                                         .spec_json = spec_json,
                                         .labels_json = labels},
                                   *out = NULL;
        if (!spec_json || !labels)
                return cage_fail(err, -ENOMEM, "spec");
        int r = cage_store_insert(svc->store, &in, &out, err);
        if (r < 0)
                return r;
        snprintf(sb->id, sizeof(sb->id), "%s", out->id);
        sb->created_ms = out->created_ms;
        sb->last_used_ms = out->last_used_ms;
        cage_sandbox_record_free(out);
        return cage_workspace_create(svc->ws_base, sb->id, sb->spec->disk_mib * MIB,
                                     svc->ws_backend, err);
}

/* Called with sb->lock held: marks sb removed, unlocks it and drops it from
 * the registry (and the registry's reference). */
static void forget_locked(struct cage_service *svc, struct sb *sb)
{
        sb->removed = true;
        pthread_mutex_unlock(&sb->lock);
        pthread_mutex_lock(&svc->lock);
        unlink_locked(svc, sb);
        sb->refs--; /* the registry's reference */
        pthread_mutex_unlock(&svc->lock);
        svc_unref(sb);
}

/* Undoes a failed create: nothing of it stays. */
static void abandon(struct cage_service *svc, struct sb *sb)
{
        sb->box = cage_box_destroy(sb->box);
        if (sb->id[0]) {
                (void)cage_workspace_destroy(svc->ws_base, sb->id, NULL);
                (void)cage_store_delete(svc->store, sb->id, NULL);
        }
        forget_locked(svc, sb);
}

int cage_service_sandbox_create(struct cage_service *svc, const char *tenant, const json_t *spec,
                                json_t **ret, struct cage_error *err)
{
        struct svc_spec *parsed = NULL;
        struct sb *sb = NULL;
        int r = svc_spec_parse(svc->cfg, spec, true, NULL, &parsed, err);
        if (r == 0 && (r = svc_spec_check_tenant(parsed, svc->cfg, tenant, err)) < 0)
                parsed = svc_spec_free(parsed);
        if (r == 0 && (r = svc_data_dir_room(svc, err)) < 0)
                parsed = svc_spec_free(parsed);
        if (r == 0 && (r = reserve(svc, tenant, parsed, &sb, err)) < 0)
                svc_spec_free(parsed);
        if (r < 0) {
                svc_audit_denied(svc, r, tenant, NULL, err);
                return r;
        }
        r = persist_new(svc, sb, err);
        if (r == 0)
                r = start_locked(sb, err);
        if (r < 0) {
                abandon(svc, sb);
                return r;
        }
        svc_audit(svc, CAGE_AUDIT_SANDBOX_CREATE, tenant, sb->name, svc_labels(sb),
                  json_pack("{s:s}", "id", sb->id));
        *ret = info_locked(sb);
        unlock_unref(sb);
        return 0;
}

/* ---- get, list, stop, start, kill, remove, logs ---- */

int cage_service_sandbox_get(struct cage_service *svc, const char *tenant, const char *name,
                             json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        int r = lookup_locked(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        *ret = info_locked(sb);
        unlock_unref(sb);
        return 0;
}

static bool label_matches(const struct sb *sb, const char *filter)
{
        if (!filter)
                return true;
        const char *eq = strchr(filter, '=');
        if (!eq)
                return false;
        char key[SVC_NAME_MAX + 1];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - filter), filter);
        const json_t *v = json_object_get(svc_labels(sb), key);
        return json_is_string(v) && strcmp(json_string_value(v), eq + 1) == 0;
}

static int compare_names(const void *a, const void *b)
{
        const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
        const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
        return strcmp(x, y);
}

int cage_service_sandbox_list(struct cage_service *svc, const char *tenant,
                              const char *label_filter, json_t **ret, struct cage_error *err)
{
        if (label_filter && (!strchr(label_filter, '=') || strlen(label_filter) > 512))
                return cage_fail(err, -EINVAL, "label: the filter is KEY=VALUE");
        size_t n;
        _cleanup_free_ struct sb **found = snapshot(svc, tenant, &n);
        if (!found)
                return cage_fail(err, -ENOMEM, "list");
        json_t **items = calloc(n ? n : 1, sizeof(*items));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                pthread_mutex_lock(&found[i]->lock);
                if (items && !found[i]->removed && label_matches(found[i], label_filter))
                        items[k++] = info_locked(found[i]);
                unlock_unref(found[i]);
        }
        if (!items)
                return cage_fail(err, -ENOMEM, "list");
        qsort(items, k, sizeof(*items), compare_names);
        json_t *arr = json_array();
        for (size_t i = 0; i < k; i++)
                json_array_append_new(arr, items[i]);
        free(items);
        *ret = json_pack("{s:o}", "sandboxes", arr);
        return 0;
}

static int stop_or_kill(struct cage_service *svc, const char *tenant, const char *name,
                        const char *how, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        int r = lookup_locked(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        stop_locked(sb, how);
        *ret = info_locked(sb);
        unlock_unref(sb);
        return 0;
}

int cage_service_sandbox_stop(struct cage_service *svc, const char *tenant, const char *name,
                              json_t **ret, struct cage_error *err)
{
        return stop_or_kill(svc, tenant, name, "stop", ret, err);
}

int cage_service_sandbox_kill(struct cage_service *svc, const char *tenant, const char *name,
                              json_t **ret, struct cage_error *err)
{
        return stop_or_kill(svc, tenant, name, "kill", ret, err);
}

int cage_service_sandbox_start(struct cage_service *svc, const char *tenant, const char *name,
                               json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        bool restarted;
        int r = lookup_locked(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        r = svc_ensure_running(sb, &restarted, err);
        if (r == 0)
                *ret = info_locked(sb);
        unlock_unref(sb);
        return r;
}

/* ---- removal: the request ends once the sandbox is dead and gone from
 * the registry, the store and its workspace's name; its teardown (cgroups,
 * uid slot, unmount, deletion of the image) runs on the disposer threads,
 * several at a time (their waits are mostly the disk's). After a crash the
 * start-up sweeps finish what was queued. */

struct disposal {
        struct cage_box *box;         /* pid 1 killed already */
        struct cage_session *session; /* of box */
        char stage[CAGE_WORKSPACE_STAGE_MAX];
        struct disposal *next;
};

static void dispose(struct cage_service *svc, struct disposal *d)
{
        cage_session_free(d->session);
        cage_box_destroy(d->box);
        if (d->stage[0])
                (void)cage_workspace_destroy_retired(svc->ws_base, d->stage, NULL);
        free(d);
}

static void *disposer_main(void *arg)
{
        struct cage_service *svc = arg;
        thread_mark_background();
        pthread_mutex_lock(&svc->lock);
        for (;;) {
                while (!svc->disposals && !svc->dispose_stop)
                        pthread_cond_wait(&svc->dispose_cond, &svc->lock);
                struct disposal *d = svc->disposals;
                if (!d)
                        break; /* stopping, and the queue is empty */
                svc->disposals = d->next;
                pthread_mutex_unlock(&svc->lock);
                dispose(svc, d);
                pthread_mutex_lock(&svc->lock);
        }
        pthread_mutex_unlock(&svc->lock);
        return NULL;
}

/* Queues d, or (no disposer thread) disposes of it here. */
static void queue_disposal(struct cage_service *svc, struct disposal *d)
{
        pthread_mutex_lock(&svc->lock);
        bool queued = svc->n_disposers > 0;
        if (queued) {
                struct disposal **end = &svc->disposals;
                while (*end)
                        end = &(*end)->next;
                *end = d;
                pthread_cond_signal(&svc->dispose_cond);
        }
        pthread_mutex_unlock(&svc->lock);
        if (!queued)
                dispose(svc, d);
}

/* With sb->lock held: kills pid 1 (its pid namespace ends with it), waits
 * until no exec uses the box and hands box and session over to d. */
static void take_box_locked(struct sb *sb, struct disposal *d)
{
        if (!sb->box)
                return;
        cage_box_kill_init(sb->box);
        while (sb->active > 0)
                pthread_cond_wait(&sb->changed, &sb->lock);
        /* At most one of them: the first Python call takes the forked one. */
        d->session = sb->session ? sb->session : sb->forked_session;
        svc_contexts_stop(sb);
        d->box = sb->box;
        if (sb->session)
                svc_quota_session_end(sb->svc, sb->tenant);
        else
                sb->forked_session = NULL;
        sb->session = NULL;
        sb->forked_session = cage_session_free(sb->forked_session);
        sb->box = NULL;
        svc_quota_sandbox_stop(sb->svc, sb->tenant, sb->spec ? sb->spec->memory_mib : 0);
        svc_audit(sb->svc, CAGE_AUDIT_SANDBOX_STOP, sb->tenant, sb->name, svc_labels(sb),
                  json_pack("{s:s}", "how", "remove"));
        pthread_cond_broadcast(&sb->changed);
}

int cage_service_sandbox_remove(struct cage_service *svc, const char *tenant, const char *name,
                                struct cage_error *err)
{
        struct sb *sb;
        int r = lookup_locked(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        struct disposal *d = calloc(1, sizeof(*d));
        if (!d) {
                unlock_unref(sb);
                return cage_fail(err, -ENOMEM, "remove");
        }
        take_box_locked(sb, d);
        debug_pause_point("sandbox-stopped");
        free(sb->workspace);
        sb->workspace = NULL;
        r = cage_workspace_retire(svc->ws_base, sb->id, d->stage, err);
        if (r == 0)
                r = cage_store_delete(svc->store, sb->id, err);
        if (r < 0) { /* stopped, not removed: the store says so */
                (void)cage_store_set_state(svc->store, sb->id, CAGE_SANDBOX_STOPPED, NULL, NULL);
                unlock_unref(sb);
                queue_disposal(svc, d);
                return r;
        }
        svc_audit(svc, CAGE_AUDIT_SANDBOX_REMOVE, tenant, name, svc_labels(sb), NULL);
        forget_locked(svc, sb);
        queue_disposal(svc, d);
        return 0;
}

int cage_service_sandbox_logs(struct cage_service *svc, const char *tenant, const char *name,
                              size_t tail, json_t **ret, struct cage_error *err)
{
        struct sb *sb;
        int r = lookup_locked(svc, tenant, name, &sb, err);
        if (r < 0)
                return r;
        *ret = log_ring_tail(&sb->logs, tail);
        unlock_unref(sb);
        return *ret ? 0 : cage_fail(err, -ENOMEM, "logs");
}

/* ---- opening and recovery ---- */

static int make_dir(const char *path, struct cage_error *err)
{
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return cage_fail(err, -errno, "creating %s", path);
        struct stat st;
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return cage_fail(err, -ENOTDIR, "%s is not a directory", path);
        if (st.st_uid != geteuid() || (st.st_mode & 0022))
                return cage_fail_plain(err, -EPERM,
                                       "%s must be owned by us and not writable by group or others",
                                       path);
        return 0;
}

/* As root, workspace mounts go into a mount namespace of our own, so they
 * vanish with the server. Only possible while we have a single thread. */
static int private_mounts(struct cage_error *err)
{
        if (geteuid() != 0)
                return 0;
        if (unshare(CLONE_NEWNS) < 0)
                return cage_fail(err, -errno,
                                 "a private mount namespace (cage_service_open must be called "
                                 "before any thread starts)");
        /* Host mounts still propagate in; ours never propagate out. */
        if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
                return cage_fail(err, -errno, "making our mounts private");
        return 0;
}

/* A leftover pid 1 of the previous server is dead already (parent-death
 * signal); if one is somehow alive and still in its cgroup, kill it. */
static int kill_leftover(void *ctx, const struct cage_sandbox_record *rec, struct cage_error *err)
{
        struct cage_service *svc = ctx;
        (void)err;
        if (rec->rt.init_pid <= 0 || !rec->rt.cgroup || !rec->rt.boot_id ||
            strcmp(rec->rt.boot_id, svc->boot_id) != 0)
                return 0;
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)rec->rt.init_pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        buf[n] = '\0';
        if (n && strstr(buf, rec->rt.cgroup))
                kill(rec->rt.init_pid, SIGKILL);
        return 0;
}

static int load_sandboxes(struct cage_service *svc, struct cage_error *err)
{
        /* Every tenant's records: the store lists per tenant, so read the
         * configured tenants and the default one. */
        size_t n_tenants = svc->cfg->n_tenants ? svc->cfg->n_tenants : 1;
        for (size_t t = 0; t < n_tenants; t++) {
                const char *tenant = svc->cfg->n_tenants ? svc->cfg->tenants[t].name
                                                         : CAGE_SERVICE_DEFAULT_TENANT;
                struct cage_sandbox_list list = {0};
                int r = cage_store_list(svc->store, tenant, NULL, &list, err);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < list.n; i++) {
                        const struct cage_sandbox_record *rec = list.items[i];
                        struct sb *sb = sb_new(svc, rec->tenant, rec->name, rec->id);
                        if (!sb)
                                continue;
                        sb->stored_doc = json_loads(rec->spec_json, 0, NULL);
                        struct cage_error serr = {0};
                        if (!sb->stored_doc || svc_spec_parse(svc->cfg, sb->stored_doc, true, NULL,
                                                              &sb->spec, &serr) < 0)
                                /* The config changed under it (a secret or a mount is
                                 * gone): listed, removable, not startable. */
                                snprintf(sb->broken, sizeof(sb->broken), "%.200s",
                                         serr.message[0] ? serr.message : "unreadable spec");
                        sb->created_ms = rec->created_ms;
                        sb->last_used_ms = rec->last_used_ms;
                        sb->refs = 1;
                        pthread_mutex_lock(&svc->lock);
                        link_locked(svc, sb);
                        pthread_mutex_unlock(&svc->lock);
                }
                cage_sandbox_list_free(&list);
        }
        return 0;
}

static void *reaper_main(void *arg);

static int open_parts(struct cage_service *svc, struct cage_error *err)
{
        const struct cage_config *cfg = svc->cfg;
        int r;
        if ((r = make_dir(cfg->data_dir, err)) < 0)
                return r;
        if (asprintf(&svc->ws_base, "%s/workspaces", cfg->data_dir) < 0 ||
            asprintf(&svc->runs_base, "%s/runs", cfg->data_dir) < 0)
                return cage_fail(err, -ENOMEM, "paths");
        if ((r = make_dir(svc->ws_base, err)) < 0 || (r = make_dir(svc->runs_base, err)) < 0)
                return r;
        if ((r = private_mounts(err)) < 0)
                return r;
        if ((r = svc_images_open(svc, err)) < 0)
                return r;
        /* The sandboxes of a dead server first (thawed, killed, their groups
         * removed): their mount namespaces hold its workspaces' mounts. */
        launch_sweep_stale_cgroups(STALE_SWEEP_WAIT_MS);
        if ((r = launch_thread_start()) < 0)
                return cage_fail(err, r, "starting the launcher thread");
        if ((r = cage_workspace_sweep(svc->ws_base, err)) < 0)
                return r;
        svc->ws_backend = cage_workspace_backend_detect();
        _cleanup_free_ char *db = NULL;
        if (asprintf(&db, "%s/" STORE_FILE, cfg->data_dir) < 0)
                return cage_fail(err, -ENOMEM, "paths");
        if ((r = cage_store_open(db, &svc->store, err)) < 0 ||
            (r = cage_store_new_id(svc->instance, err)) < 0 ||
            (r = cage_store_read_boot_id(svc->boot_id, err)) < 0)
                return r;
        if ((r = cage_store_mark_all_stopped(svc->store, svc->instance, kill_leftover, svc, err)) <
            0)
                return r;
        struct cage_redactor *red = NULL;
        if ((r = cage_config_redactor(cfg, &red, err)) < 0)
                return r;
        svc->redactor = red;
        if ((r = cage_audit_open(cfg->audit_log, svc->redactor, &svc->audit, err)) < 0)
                return r;
        if ((r = load_sandboxes(svc, err)) < 0)
                return r;
        if ((r = cage_egress_open(&cfg->network, svc->audit, &svc->egress, err)) < 0 ||
            (r = svc_layers_open(svc, err)) < 0)
                return r;
        if ((r = svc_zygotes_open(svc, err)) < 0 ||
            (r = cage_pool_open(cfg, pool_start_box, pool_start_zygote, svc, &svc->pool, err)) <
                    0 ||
            (r = cage_upstreams_open(cfg->upstream_servers, &svc->upstreams, err)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(svc->disposers); i++) {
                if ((r = -pthread_create(&svc->disposers[i], NULL, disposer_main, svc)) < 0)
                        return cage_fail(err, r, "starting the disposer threads");
                svc->n_disposers++;
        }
        r = -pthread_create(&svc->reaper, NULL, reaper_main, svc);
        svc->reaper_running = r == 0;
        return r < 0 ? cage_fail(err, r, "starting the idle reaper") : 0;
}

/* A running named sandbox holds up to ~18 of the server's fds (docs/CONFIG.md,
 * "The server's own limits"): the soft RLIMIT_NOFILE goes up to the hard
 * one, and as root the hard one to fs.nr_open (at most NOFILE_WANT). */
static void raise_nofile(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        char buf[32];
        uint64_t want = NOFILE_WANT, nr_open = 0;
        if (read_file_at(AT_FDCWD, "/proc/sys/fs/nr_open", buf, sizeof(buf)) > 0 &&
            (nr_open = strtoull(buf, NULL, 10)) > 0 && nr_open < want)
                want = nr_open;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
                struct rlimit up = {.rlim_cur = want, .rlim_max = want};
                if (setrlimit(RLIMIT_NOFILE, &up) == 0)
                        return;
        }
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
}

int cage_service_open(const struct cage_config *cfg, struct cage_service **ret,
                      struct cage_error *err)
{
        struct cage_service *svc = calloc(1, sizeof(*svc));
        if (!svc)
                return cage_fail(err, -ENOMEM, "service");
        svc->cfg = cfg;
        pthread_mutex_init(&svc->lock, NULL);
        pthread_mutex_init(&svc->watch_lock, NULL);
        pthread_cond_init(&svc->reaper_cond, NULL);
        pthread_cond_init(&svc->dispose_cond, NULL);
        svc_admission_init(svc);
        raise_nofile();
        svc->index = calloc(INDEX_BUCKETS, sizeof(*svc->index));
        int r = svc->index ? open_parts(svc, err) : cage_fail(err, -ENOMEM, "service");
        if (r < 0) {
                cage_service_close(svc);
                return r;
        }
        *ret = svc;
        return 0;
}

/* ---- the reaper: idle sandboxes and expired runs ---- */

/* References to every entry of the tenant (NULL: of all tenants), in an
 * array to free; each must be dropped with svc_unref(). NULL when out of
 * memory. */
static struct sb **snapshot(struct cage_service *svc, const char *tenant, size_t *ret_n)
{
        size_t n = 0;
        pthread_mutex_lock(&svc->lock);
        struct sb **out = malloc((svc->count ? svc->count : 1) * sizeof(*out));
        for (struct sb *sb = svc->list; sb && out; sb = sb->next)
                if (!tenant || strcmp(sb->tenant, tenant) == 0) {
                        sb->refs++;
                        out[n++] = sb;
                }
        pthread_mutex_unlock(&svc->lock);
        *ret_n = n;
        return out;
}

/* With sb->lock held, no exec running: the sandbox and its session give
 * back their cgroup directory fds (docs/CONFIG.md, "The server's own
 * limits"); the next call opens them again. A session busy with a call of
 * its own (sb->py_lock) is left for the next round. */
static void park_locked(struct sb *sb)
{
        cage_box_park(sb->box);
        if (pthread_mutex_trylock(&sb->py_lock) != 0)
                return;
        cage_session_park(sb->session);
        cage_session_park(sb->forked_session);
        svc_contexts_park(sb);
        pthread_mutex_unlock(&sb->py_lock);
}

/* A last_used_ms a call left for the store (svc_leave). */
struct due_touch {
        char id[CAGE_STORE_ID_LEN + 1];
        int64_t last_used_ms;
};

/* With sb->lock held: sb's due touch goes to (*due)[*n], *due made for
 * cap of them when the first one comes (a touch it cannot hold stays due). */
static void take_touch_locked(struct sb *sb, struct due_touch **due, size_t cap, size_t *n)
{
        if (!sb->touch_due || *n >= cap || (!*due && !(*due = calloc(cap, sizeof(**due)))))
                return;
        sb->touch_due = false;
        snprintf((*due)[*n].id, sizeof((*due)[*n].id), "%s", sb->id);
        (*due)[(*n)++].last_used_ms = sb->last_used_ms;
}

/* The due touches, in one transaction. */
static void store_touches(struct cage_service *svc, const struct due_touch *due, size_t n)
{
        _cleanup_free_ struct cage_store_touch *t = n ? calloc(n, sizeof(*t)) : NULL;
        for (size_t i = 0; t && i < n; i++)
                t[i] = (struct cage_store_touch){.id = due[i].id,
                                                 .last_used_ms = due[i].last_used_ms};
        if (t)
                (void)cage_store_touch_many(svc->store, t, n, NULL);
}

static void stop_idle(struct cage_service *svc)
{
        int64_t now = clock_wall_ms();
        size_t n, n_due = 0;
        _cleanup_free_ struct sb **found = snapshot(svc, NULL, &n);
        _cleanup_free_ struct due_touch *due = NULL;
        for (size_t i = 0; found && i < n; i++) {
                struct sb *sb = found[i];
                pthread_mutex_lock(&sb->lock);
                take_touch_locked(sb, &due, n, &n_due);
                uint64_t idle = sb->spec ? sb->spec->idle_timeout_s : 0;
                if (!sb->removed && sb->box && sb->active == 0 && idle &&
                    now - sb->last_used_ms >= (int64_t)idle * 1000)
                        stop_locked(sb, "idle");
                else if (!sb->removed && sb->box && sb->active == 0 &&
                         now - sb->last_used_ms >= PARK_AFTER_MS)
                        park_locked(sb);
                unlock_unref(sb);
        }
        store_touches(svc, due, n_due);
}

static void *reaper_main(void *arg)
{
        struct cage_service *svc = arg;
        thread_mark_background();
        pthread_mutex_lock(&svc->lock);
        while (!svc->reaper_stop) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += REAPER_PERIOD_S;
                pthread_cond_timedwait(&svc->reaper_cond, &svc->lock, &until);
                if (svc->reaper_stop)
                        break;
                pthread_mutex_unlock(&svc->lock);
                stop_idle(svc);
                svc_expire_runs(svc);
                svc_zygotes_sweep(svc);
                pthread_mutex_lock(&svc->lock);
        }
        pthread_mutex_unlock(&svc->lock);
        return NULL;
}

/* At the end, with the reaper gone: what calls left due goes to the store. */
static void store_last_touches(struct cage_service *svc)
{
        size_t n_due = 0;
        _cleanup_free_ struct due_touch *due = NULL;
        for (struct sb *sb = svc->list; sb; sb = sb->next) {
                pthread_mutex_lock(&sb->lock);
                take_touch_locked(sb, &due, svc->count, &n_due);
                pthread_mutex_unlock(&sb->lock);
        }
        store_touches(svc, due, n_due);
}

struct cage_service *cage_service_close(struct cage_service *svc)
{
        if (!svc)
                return NULL;
        if (svc->reaper_running) {
                pthread_mutex_lock(&svc->lock);
                svc->reaper_stop = true;
                pthread_cond_broadcast(&svc->reaper_cond);
                pthread_mutex_unlock(&svc->lock);
                pthread_join(svc->reaper, NULL);
        }
        pthread_mutex_lock(&svc->lock); /* the disposers finish the queue first */
        svc->dispose_stop = true;
        pthread_cond_broadcast(&svc->dispose_cond);
        pthread_mutex_unlock(&svc->lock);
        for (size_t i = 0; i < svc->n_disposers; i++)
                pthread_join(svc->disposers[i], NULL);
        store_last_touches(svc);
        for (struct sb *sb = svc->list, *next; sb; sb = next) {
                next = sb->next;
                pthread_mutex_lock(&sb->lock);
                stop_locked(sb, "server shutdown");
                if (sb->workspace)
                        (void)cage_workspace_unmount(svc->ws_base, sb->id, NULL);
                pthread_mutex_unlock(&sb->lock);
                sb_free(sb);
        }
        svc->pool = cage_pool_close(svc->pool);
        svc_zygotes_close(svc);
        svc->upstreams = cage_upstreams_close(svc->upstreams);
        svc->egress = cage_egress_close(svc->egress);
        svc_layers_close(svc);
        svc_images_close(svc);
        svc->audit = cage_audit_close(svc->audit);
        svc->redactor = cage_redactor_unref(svc->redactor);
        for (size_t i = 0; i < svc->n_retired; i++)
                cage_redactor_unref(svc->retired[i]);
        free(svc->retired);
        svc->store = cage_store_close(svc->store);
        free(svc->ws_base);
        free(svc->runs_base);
        free(svc->index);
        pthread_mutex_destroy(&svc->lock);
        pthread_mutex_destroy(&svc->watch_lock);
        pthread_cond_destroy(&svc->reaper_cond);
        pthread_cond_destroy(&svc->dispose_cond);
        svc_admission_done(svc);
        free(svc);
        return NULL;
}
