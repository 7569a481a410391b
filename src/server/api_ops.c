/* The operator's routes: /metrics (Prometheus text, format 0.0.4) and
 * /readyz (readiness with reasons). /healthz (liveness) is in
 * api_sandbox.c. What they report is the service's (service_ops.c). */
#include <errno.h>
#include <stdlib.h>

#include "server/http.h"
#include "services/service.h"
#include "util/error.h"

int api_metrics(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        char *text;
        size_t len;
        int rc = cage_service_metrics(c->ctx->svc, &text, &len);
        if (rc < 0)
                return cage_fail(err, rc, "metrics");
        r->status = 200;
        r->raw = text;
        r->raw_len = len;
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 0;
}

/* 200 when ready, 503 with the reasons when not (draining included). */
int api_readyz(struct http_call *c, struct http_reply *r, struct cage_error *err)
{
        json_t *doc = NULL;
        bool ready = cage_service_ready(c->ctx->svc, &doc);
        if (!doc)
                return cage_fail(err, -ENOMEM, "readyz");
        json_object_set_new(doc, "version", json_string(CODECAGE_VERSION));
        http_reply_json(r, ready ? 200 : 503, doc);
        return 0;
}
