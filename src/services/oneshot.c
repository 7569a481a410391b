/* The lifecycle of a one-shot run, shell (service_exec.c) and Python
 * (service_python.c) alike: the spec, the files' check, a run id, the
 * sandbox — a warm one from the pool for Python runs the pool serves, else
 * the requirements layer and a fresh sandbox (with a session for Python) —
 * its workspace with the run's files and a snapshot of output/, then after
 * the run the artifacts (kept for the retention period, for this tenant
 * only), the run id and the requirements' note in the result, and the
 * disposal off the request path. What runs in between is the caller's. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "service_private.h"
#include "services/files.h"
#include "util/error.h"

int svc_oneshot_prepare(struct cage_service *svc, const char *tenant, const json_t *req,
                        const char *const *extra, struct svc_oneshot *o, struct cage_error *err)
{
        *o = (struct svc_oneshot){.ws = -1};
        int r = svc_spec_parse(svc->cfg, req, false, extra, &o->spec, err);
        if (r == 0)
                r = svc_check_files(req, err);
        if (r == 0)
                r = cage_store_new_id(o->run_id, err);
        /* The run's memory counts against the tenant's memory_mib quota. */
        if (r == 0 && (r = svc_quota_memory(svc, tenant, (int64_t)o->spec->memory_mib, err)) == 0) {
                o->tenant = tenant;
                o->reserved_mib = o->spec->memory_mib;
        }
        return r;
}

/* A warm sandbox with its session, when the run may have one. */
static bool take_pooled(struct cage_service *svc, struct svc_oneshot *o)
{
        if (!cage_pool_serves(svc->pool, o->spec)) {
                cage_pool_note_cold(svc->pool);
                return false;
        }
        o->pooled = cage_pool_take(svc->pool, o->spec, &o->box, &o->session);
        return o->pooled;
}

static int start_fresh(struct cage_service *svc, const char *tenant, bool session,
                       const struct cage_service_io *io, struct svc_oneshot *o,
                       struct cage_error *err)
{
        int r = svc_requirements_prepare(svc, o->spec, tenant, &o->requirements, &o->failed, err);
        if (r < 0 || o->failed)
                return r;
        r = svc_box_start(svc, o->spec, NULL, tenant, NULL, NULL, io, &o->box, NULL, err);
        if (r == 0 && session)
                r = svc_session_start(o->box, o->spec->image, &o->session, err);
        return r;
}

int svc_oneshot_start(struct cage_service *svc, const char *tenant, const json_t *req, bool session,
                      const struct cage_service_io *io, struct svc_oneshot *o,
                      struct cage_error *err)
{
        int r = 0;
        if (!(session && take_pooled(svc, o)))
                r = start_fresh(svc, tenant, session, io, o, err);
        if (r < 0 || o->failed)
                return r;
        if ((o->ws = svc_open_run_workspace(o->box, err)) < 0)
                return o->ws;
        if ((r = svc_put_run_files(svc, tenant, o->spec->labels, o->box, req, o->ws, err)) < 0)
                return r;
        (void)cage_artifacts_snapshot(o->ws, &o->before, NULL);
        return 0;
}

json_t *svc_oneshot_failed_result(struct svc_oneshot *o)
{
        json_t *res = o->failed;
        o->failed = NULL;
        json_object_set_new(res, "run_id", json_string(o->run_id));
        return res;
}

void svc_oneshot_finish(struct cage_service *svc, const char *tenant, struct svc_oneshot *o,
                        json_t *result)
{
        json_t *artifacts = NULL;
        if (cage_artifacts_collect(o->ws, o->before, &artifacts, NULL) < 0)
                artifacts = json_array();
        struct cage_error err = {0};
        if (json_array_size(artifacts) &&
            svc_keep_run_output(svc, tenant, o->ws, o->run_id, o->spec->disk_mib << 20, &err) < 0)
                json_object_set_new(result, "artifacts_error", json_string(err.message));
        json_object_set_new(result, "artifacts", artifacts ? artifacts : json_array());
        json_object_set_new(result, "run_id", json_string(o->run_id));
        if (o->requirements)
                json_object_set(result, "requirements", o->requirements);
}

void svc_oneshot_free(struct cage_service *svc, struct svc_oneshot *o)
{
        if (o->ws >= 0)
                close(o->ws);
        if (o->box)
                cage_pool_dispose(svc->pool, o->box, o->session);
        else
                cage_session_free(o->session);
        cage_artifact_snapshot_free(o->before);
        json_decref(o->requirements);
        json_decref(o->failed);
        svc_spec_free(o->spec);
        if (o->reserved_mib)
                (void)svc_quota_memory(svc, o->tenant, -(int64_t)o->reserved_mib, NULL);
        *o = (struct svc_oneshot){.ws = -1};
}
