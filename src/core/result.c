/* The result contract: status names, freeing, and the JSON rendering
 * (DESIGN section 3). `truncated` is null when nothing was cut, else an
 * object with one {kept, total} entry per cut stream. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codecage/codecage.h"
#include "core/result_json.h"
#include "util/cleanup.h"

static const char *const status_names[] = {
        [CAGE_STATUS_OK] = "ok",
        [CAGE_STATUS_ERROR] = "error",
        [CAGE_STATUS_TIMEOUT] = "timeout",
        [CAGE_STATUS_OOM] = "oom",
        [CAGE_STATUS_OUTPUT_LIMIT] = "output_limit",
        [CAGE_STATUS_CANCELLED] = "cancelled",
        [CAGE_STATUS_INTERNAL_ERROR] = "internal_error",
};

const char *cage_status_to_string(enum cage_status status)
{
        if ((size_t)status >= ELEMENTSOF(status_names))
                return "internal_error";
        return status_names[status];
}

void cage_result_free(struct cage_result *result)
{
        if (!result)
                return;
        free(result->out.data);
        free(result->err.data);
        result->out.data = result->err.data = NULL;
}

static json_t *stream_text(const struct cage_stream *s)
{
        return json_stringn(s->data ? s->data : "", s->data ? s->len : 0);
}

static json_t *truncation(const struct cage_result *r)
{
        if (!r->out.truncated && !r->err.truncated)
                return json_null();
        json_t *t = json_object();
        const struct cage_stream *streams[] = {&r->out, &r->err};
        const char *names[] = {"stdout", "stderr"};
        for (size_t i = 0; i < 2; i++)
                if (streams[i]->truncated)
                        json_object_set_new(t, names[i],
                                            json_pack("{s:I,s:I}", "kept",
                                                      (json_int_t)streams[i]->kept, "total",
                                                      (json_int_t)streams[i]->total));
        return t;
}

json_t *cage_result_to_json_object(const struct cage_result *r)
{
        json_t *o = json_object();
        if (!o)
                return NULL;
        json_object_set_new(o, "status", json_string(cage_status_to_string(r->status)));
        json_object_set_new(o, "exit_code",
                            r->exit_code >= 0 ? json_integer(r->exit_code) : json_null());
        json_object_set_new(o, "signal", r->signal ? json_integer(r->signal) : json_null());
        json_object_set_new(o, "stdout", stream_text(&r->out));
        json_object_set_new(o, "stderr", stream_text(&r->err));
        json_object_set_new(o, "truncated", truncation(r));
        json_object_set_new(o, "duration_ms", json_integer((json_int_t)r->duration_ms));
        json_object_set_new(o, "cpu_ms", json_integer((json_int_t)r->cpu_ms));
        json_object_set_new(o, "peak_memory_bytes", json_integer((json_int_t)r->peak_memory_bytes));
        json_object_set_new(o, "artifacts", json_array());
        json_object_set_new(o, "reason", r->reason[0] ? json_string(r->reason) : json_null());
        json_object_set_new(o, "limits_backend",
                            json_string(r->limits_backend ? r->limits_backend : "none"));
        return o;
}

char *cage_result_to_json(const struct cage_result *r)
{
        json_t *o = cage_result_to_json_object(r);
        if (!o)
                return NULL;
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return s;
}
