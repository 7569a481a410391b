/* The sandbox service's internals, shared by service.c (opening, the
 * registry, lifecycle), service_exec.c (exec and one-shot runs) and
 * service_files.c (workspace files).
 *
 * Locking: svc->lock guards the registry list and each entry's refcount;
 * sb->lock guards everything else of one sandbox. Never take svc->lock
 * while holding an sb->lock. An exec holds no lock while it runs: it counts
 * itself in sb->active, and stop waits for that count to reach zero after
 * killing the box. */
#ifndef CODECAGE_SERVICES_SERVICE_PRIVATE_H
#define CODECAGE_SERVICES_SERVICE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/box.h"
#include "services/audit.h"
#include "services/config.h"
#include "services/egress.h"
#include "services/logring.h"
#include "services/metrics.h"
#include "services/pool.h"
#include "services/redact.h"
#include "services/sandbox_spec.h"
#include "services/service.h"
#include "services/session.h"
#include "services/store.h"
#include "services/upstream.h"
#include "services/workspace.h"

/* A Python context: an extra session of a named sandbox, beside its main
 * one (service_python.c). Started on first use; its id stays until it is
 * removed or the sandbox is. */
#define SVC_CONTEXTS_MAX 16
struct svc_context {
        char id[CAGE_STORE_ID_LEN + 1]; /* "" when the slot is free */
        struct cage_session *session;   /* under py_lock; freed by stop (active == 0) */
};

struct sb {
        struct cage_service *svc;
        unsigned refs; /* under svc->lock */
        char tenant[CAGE_STORE_TENANT_MAX + 1];
        char name[CAGE_STORE_NAME_MAX + 1];
        char id[CAGE_STORE_ID_LEN + 1];
        pthread_mutex_t lock;
        pthread_cond_t changed; /* active dropped, or state changed */
        bool removed;
        struct svc_spec *spec; /* NULL when the stored spec no longer parses */
        json_t *stored_doc;    /* the spec as stored (loaded sandboxes) */
        char broken[256];      /* why spec is NULL */
        struct cage_box *box;  /* NULL while stopped */
        unsigned active;       /* execs running now */
        int64_t created_ms, last_used_ms;
        int64_t touched_ms;           /* when last_used_ms last went to the store */
        bool touch_due;               /* last_used_ms waits for the reaper to store it */
        char *workspace;              /* the mounted workspace directory, or NULL */
        pthread_mutex_t py_lock;      /* one Python call at a time */
        struct cage_session *session; /* under py_lock; freed by stop (active == 0) */
        /* The session a sandbox forked from its image's zygote came with:
         * set by start (sb->lock, no call active), taken by the first
         * Python call (py_lock), which only then counts it as a session. */
        struct cage_session *forked_session;
        struct svc_context contexts[SVC_CONTEXTS_MAX];
        struct log_ring logs;
        struct sb *next, *prev; /* the registry's list */
        struct sb *hnext;       /* the registry's index bucket */
};

struct cage_service {
        /* Swapped by cage_service_reload (SIGHUP): a reader sees the old
         * config or the new one; every config stays alive until close. */
        const struct cage_config *_Atomic cfg;
        struct cage_store *store;
        struct cage_audit *audit;
        struct cage_redactor *_Atomic redactor;
        struct cage_redactor **retired; /* redactors of earlier configs, kept till close */
        size_t n_retired;
        char instance[CAGE_STORE_ID_LEN + 1];
        char boot_id[CAGE_STORE_BOOT_ID_LEN + 1];
        char *ws_base;   /* <data_dir>/workspaces */
        char *runs_base; /* <data_dir>/runs */
        enum cage_workspace_backend ws_backend;
        struct cage_pool *pool;
        struct svc_zygotes *zygotes; /* named sandboxes' templates (zygotes.c) */
        struct cage_upstreams *upstreams;
        struct cage_egress *egress;
        struct svc_layers *layers;       /* installed pip requirements (requirements.c) */
        struct cage_image_store *images; /* <data_dir>/images (service_images.c) */
        pthread_mutex_t lock;
        struct sb *list;   /* every entry, newest first */
        struct sb **index; /* SVC_INDEX_BUCKETS chains by (tenant, name) */
        size_t count;      /* entries in the list */
        pthread_t reaper;
        bool reaper_running, reaper_stop;
        pthread_cond_t reaper_cond;
        /* Removed sandboxes torn down off the request path (service.c). */
        pthread_t disposers[4];
        size_t n_disposers;
        struct disposal *disposals; /* queued, under lock */
        pthread_cond_t dispose_cond;
        bool dispose_stop;
        /* Admission (admission.c): per-tenant usage and the launch gate,
         * under usage_lock (a leaf lock). */
        pthread_mutex_t usage_lock;
        struct svc_usage *usage;
        pthread_cond_t launch_cond;
        uint32_t launches_running;
        _Atomic bool draining; /* cage_service_drain(): /readyz says so */
        /* cage_service_watch(): the front end told of workspace changes */
        pthread_mutex_t watch_lock;
        cage_service_watch_fn watch_fn;
        void *watch_arg;
};

/* Admission (admission.c). Quotas refuse with -EUSERS and a message naming
 * the quota; the matching release never fails. */
int svc_admission_init(struct cage_service *svc);
void svc_admission_done(struct cage_service *svc);
int svc_quota_sandbox_start(struct cage_service *svc, const char *tenant, uint64_t memory_mib,
                            struct cage_error *err);
void svc_quota_sandbox_stop(struct cage_service *svc, const char *tenant, uint64_t memory_mib);
int svc_quota_session_start(struct cage_service *svc, const char *tenant, struct cage_error *err);
void svc_quota_session_end(struct cage_service *svc, const char *tenant);
/* Reserves (memory_mib > 0, checked) or gives back (< 0) memory of a
 * one-shot run. */
int svc_quota_memory(struct cage_service *svc, const char *tenant, int64_t memory_mib,
                     struct cage_error *err);
/* One call (exec, Python call, one-shot run): counted against the
 * tenant's `runs` quota and in the metrics from begin to end. end is called
 * whatever begin returned, with the call's result (or NULL). */
struct svc_call {
        struct cage_service *svc;
        const char *tenant;
        enum cage_metric_kind kind;
        uint64_t start_ms;
        bool admitted;
};
int svc_call_begin(struct cage_service *svc, const char *tenant, enum cage_metric_kind kind,
                   struct svc_call *call, struct cage_error *err);
void svc_call_end(struct svc_call *call, int r, const json_t *result);
/* A slot of limits.launches_max for a launch a request asked for (waits;
 * -EUSERS after a minute or when io's cancel fd fires); release after. */
int svc_launch_acquire(struct cage_service *svc, const struct cage_service_io *io,
                       struct cage_error *err);
void svc_launch_release(struct cage_service *svc);
/* -ENOSPC (507) with a message when data_dir's filesystem is below its
 * reserve (service_ops.c): a new workspace would fill it. */
int svc_data_dir_room(struct cage_service *svc, struct cage_error *err);
/* data_dir's free bytes above that reserve into *ret (0 when none). */
int svc_data_dir_spare(struct cage_service *svc, uint64_t *ret, struct cage_error *err);
/* Calls running now, every tenant's. */
unsigned svc_calls_in_flight(struct cage_service *svc);
/* The per-tenant gauges in the text exposition format. */
void svc_usage_render(struct cage_service *svc, FILE *out);

/* With py_lock or sb->lock held (and no call using it): frees the
 * sandbox's session, if any, and gives its `sessions` quota back. */
void svc_drop_session(struct sb *sb);

/* The sandbox's labels (borrowed). */
json_t *svc_labels(const struct sb *sb);

/* The tenant's sandbox `name` with a reference held, or -ENOENT. */
int svc_lookup(struct cage_service *svc, const char *tenant, const char *name, struct sb **ret,
               struct cage_error *err);
void svc_unref(struct sb *sb);

/* With sb->lock held: makes sure the box runs (starting it if stopped or
 * dead; *restarted says so). */
int svc_ensure_running(struct sb *sb, bool *restarted, struct cage_error *err);
/* Marks a call as running on sb (starting the sandbox if needed): the box,
 * an fd of the workspace; leave() ends it. */
int svc_enter(struct sb *sb, bool *restarted, struct cage_box **box, int *ws_fd,
              struct cage_error *err);
void svc_leave(struct sb *sb, const struct cage_result *logged);
/* With no call active: frees the sessions of every context (ids kept);
 * park: gives back their cgroup fds instead (service_python.c). */
void svc_contexts_stop(struct sb *sb);
void svc_contexts_park(struct sb *sb);

/* With sb->lock held: mounts the workspace if needed; an O_PATH fd of it. */
int svc_workspace_fd(struct sb *sb, struct cage_error *err);

/* Starts a box for spec (the requirements layer, if any, already in
 * spec->requirements_dir) and, when the spec lists hosts, its egress proxy,
 * audited as tenant/name (name NULL for one-shot runs; phase NULL but for
 * internal phases). With session, a sandbox its image's zygote can make is
 * forked from it, its Python session in *session (else NULL). */
int svc_box_start(struct cage_service *svc, const struct svc_spec *spec, const char *workspace,
                  const char *tenant, const char *name, const char *phase,
                  const struct cage_service_io *io, struct cage_box **ret,
                  struct cage_session **session, struct cage_error *err);

/* Zygotes (zygotes.c): a template for spec (the pool's shelves; *rootfs,
 * if asked, the image root it runs), and the named sandboxes' templates,
 * one per image: svc_zygote_fork makes a sandbox of spec (cs: its launch
 * spec) with its session ready, or fails (-ENOTSUP: none can) and the
 * caller starts it as every sandbox. */
int svc_zygote_start(struct cage_service *svc, const struct svc_spec *spec,
                     struct cage_zygote **ret, char **rootfs, struct cage_error *err);
int svc_zygotes_open(struct cage_service *svc, struct cage_error *err);
void svc_zygotes_close(struct cage_service *svc);
int svc_zygote_fork(struct cage_service *svc, const struct svc_spec *spec,
                    const struct cage_spec *cs, struct cage_box **box,
                    struct cage_session **session, struct cage_error *err);
/* Each image's template: running, sandboxes made, the last error. */
json_t *svc_zygotes_stats(struct cage_service *svc);
/* Frees retired templates whose sandboxes all ended (the idle reaper). */
void svc_zygotes_sweep(struct cage_service *svc);

/* Images (service_images.c): the store, and an image for a launch — got,
 * or pulled on first use when the pull policy allows (progress through
 * io->on_status, cancelled by io->cancel_fd; io may be NULL), with its
 * User resolved. "host" gives no image. The lease is attached to the box
 * that uses the image, or released. */
int svc_images_open(struct cage_service *svc, struct cage_error *err);
void svc_images_close(struct cage_service *svc);
int svc_image_acquire(struct cage_service *svc, const char *ref, const char *tenant,
                      const struct cage_service_io *io, struct svc_image_launch *ret,
                      struct cage_error *err);
void svc_image_attach(struct cage_box *box, struct svc_image_launch *launch);
void svc_image_release(struct svc_image_launch *launch);

/* Pip requirements (requirements.c): makes sure spec's requirement set is
 * installed in a cached layer and points spec->requirements_dir at it.
 * Returns 0 with *ret_info ({cached, duration_ms}, or NULL without
 * requirements) — or, when pip failed, with *ret_failed a result document
 * (status "error", pip's output) instead; < 0 for codecage's own failures. */
struct svc_layers;
int svc_requirements_prepare(struct cage_service *svc, struct svc_spec *spec, const char *tenant,
                             json_t **ret_info, json_t **ret_failed, struct cage_error *err);
int svc_layers_open(struct cage_service *svc, struct cage_error *err);
void svc_layers_close(struct cage_service *svc);

/* Audit helpers: never fail the operation they describe. */
void svc_audit(struct cage_service *svc, enum cage_audit_event ev, const char *tenant,
               const char *sandbox, json_t *labels, json_t *fields);

/* A policy.deny record when r is a refusal by policy. */
void svc_audit_denied(struct cage_service *svc, int r, const char *tenant, const char *sandbox,
                      const struct cage_error *err);

/* The result contract as JSON, with secrets redacted from the text. */
json_t *svc_result_json(struct cage_service *svc, struct cage_result *res, json_t *artifacts);

/* A request's timeout_s (number, > 0, at most the config's maximum) in ms;
 * dflt_ms when absent. */
int svc_parse_timeout(const struct cage_config *cfg, const json_t *in, uint64_t dflt_ms,
                      uint64_t *ret, struct cage_error *err);

/* One-shot runs (service_exec.c): the request's `files`, written as the
 * sandbox's user; the scratch /workspace of a one-shot sandbox; keeping
 * output/ for the retention period; removing expired runs. */
int svc_check_files(const json_t *req, struct cage_error *err);
int svc_put_files(struct cage_service *svc, const char *tenant, json_t *labels, const json_t *req,
                  int ws, struct cage_error *err);
int svc_put_run_files(struct cage_service *svc, const char *tenant, json_t *labels,
                      struct cage_box *box, const json_t *req, int ws, struct cage_error *err);
/* Downloads url for `files` (fetch.c): checked like sandbox traffic
 * against the server's network.allow; field names it in errors. */
int svc_fetch_url(struct cage_service *svc, const char *tenant, json_t *labels, const char *url,
                  const char *field, void **ret_data, size_t *ret_len, struct cage_error *err);
int svc_open_run_workspace(struct cage_box *box, struct cage_error *err);
/* Keeps output/ of a one-shot run for the retention period, readable by
 * tenant only (tenancy.c): at most disk_bytes (the run's disk) and the
 * tenant's artifacts_mib of data, none when data_dir is down to its
 * reserve; the error says why they were not kept. */
int svc_keep_run_output(struct cage_service *svc, const char *tenant, int ws, const char *run_id,
                        uint64_t disk_bytes, struct cage_error *err);

/* One-shot runs, shell and Python alike (oneshot.c): prepare parses the
 * spec (with the caller's extra fields), checks `files` and makes a run id;
 * start gets the sandbox (a warm one with its session when `session` and
 * the pool serves the spec; else the requirements layer — with o->failed
 * set, pip's failure is the run's result — and a fresh sandbox, with a
 * session when asked), writes the files and snapshots output/; finish adds
 * the artifacts (kept for tenant), run_id and requirements to a result;
 * free disposes of it all. */
struct svc_oneshot {
        struct svc_spec *spec;
        char run_id[CAGE_STORE_ID_LEN + 1];
        struct cage_box *box;
        struct cage_session *session;
        bool pooled;
        int ws;
        struct cage_artifact_snapshot *before;
        json_t *requirements; /* {installed, cached, duration_ms} or NULL */
        json_t *failed;       /* pip's failure as the run's result, or NULL */
        const char *tenant;   /* whose memory_mib quota holds reserved_mib */
        uint64_t reserved_mib;
};
int svc_oneshot_prepare(struct cage_service *svc, const char *tenant, const json_t *req,
                        const char *const *extra, struct svc_oneshot *o, struct cage_error *err);
int svc_oneshot_start(struct cage_service *svc, const char *tenant, const json_t *req, bool session,
                      const struct cage_service_io *io, struct svc_oneshot *o,
                      struct cage_error *err);
json_t *svc_oneshot_failed_result(struct svc_oneshot *o);
void svc_oneshot_finish(struct cage_service *svc, const char *tenant, struct svc_oneshot *o,
                        json_t *result);
void svc_oneshot_free(struct cage_service *svc, struct svc_oneshot *o);
/* A Python session in box, whose image is `image` (service_python.c): an
 * image without python3 is named in the error. */
int svc_session_start(struct cage_box *box, const char *image, struct cage_session **ret,
                      struct cage_error *err);
/* Kept runs (run_retention.c): whether id is one (32 lowercase hex
 * digits); a run's RUN_BYTES_FILE; removing one from the directory
 * runs_fd (or AT_FDCWD with a path); removing those older than
 * retention_s; and removing tenant's oldest runs, never kept_run_id, while
 * with kept_bytes they hold more than max_bytes. */
bool svc_run_id_valid(const char *id);
int svc_run_write_bytes(int run_fd, uint64_t bytes);
void svc_run_remove(int runs_fd, const char *run_id);
void svc_expire_runs(struct cage_service *svc);
int svc_runs_trim_tenant(struct cage_service *svc, const char *tenant, const char *kept_run_id,
                         uint64_t kept_bytes, uint64_t max_bytes);

#endif
