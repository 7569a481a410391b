/* The warm pool: sandboxes started in advance, each with a Python session
 * already loaded, for one-shot Python runs that ask for the default policy
 * of the host image (pool_size) or of an image the config's `pool` lists.
 * A pooled sandbox serves exactly one run and is then destroyed (never
 * reused, so nothing of one run can reach the next); background threads
 * refill the pool, forking sandboxes from a zygote per shelf where the
 * image's Python can host one (core/zygote.h). Runs whose policy differs
 * start cold. */
#ifndef CODECAGE_SERVICES_POOL_H
#define CODECAGE_SERVICES_POOL_H

#include <jansson.h>
#include <stdbool.h>

#include "codecage/codecage.h"
#include "core/box.h"
#include "core/zygote.h"
#include "services/sandbox_spec.h"
#include "services/session.h"

struct cage_config;
struct cage_pool;

/* How the pool starts a sandbox for a spec (the service's svc_box_start). */
typedef int (*cage_pool_start_fn)(void *ctx, const struct svc_spec *spec, struct cage_box **ret);
/* How it starts a zygote for a spec (core/zygote.h); on failure err says
 * why, and the shelf starts each sandbox as above instead. */
typedef int (*cage_pool_zygote_fn)(void *ctx, const struct svc_spec *spec, struct cage_zygote **ret,
                                   struct cage_error *err);

/* Shelves of the config's pool_size (host) and `pool` entries; a size of 0
 * keeps nothing (every take is a miss). Each shelf forks its sandboxes from
 * a zygote of its own when start_zygote makes one. */
int cage_pool_open(const struct cage_config *cfg, cage_pool_start_fn start_box,
                   cage_pool_zygote_fn start_zygote, void *start_ctx, struct cage_pool **ret,
                   struct cage_error *err);
struct cage_pool *cage_pool_close(struct cage_pool *p);

/* Whether a run with this spec may use a pooled sandbox: its policy (all
 * but timeout_s and output_max_bytes) is the pool's. */
bool cage_pool_serves(const struct cage_pool *p, const struct svc_spec *spec);
/* A ready sandbox for spec and its session (the caller destroys both), or
 * false on a miss. A shelf that forks its sandboxes makes the caller wait
 * for the next one (in arrival order, up to 2 s) rather than miss. Counts
 * hits and misses. */
bool cage_pool_take(struct cage_pool *p, const struct svc_spec *spec, struct cage_box **box,
                    struct cage_session **session);
/* Counts a run the pool could not serve because of its policy. */
void cage_pool_note_cold(struct cage_pool *p);
/* Destroys a used one-shot sandbox (and its session, may be NULL) off the
 * caller's path: everything in it is killed now, the rest is torn down by
 * a background thread. */
void cage_pool_dispose(struct cage_pool *p, struct cage_box *box, struct cage_session *session);
/* {size, ready, hits, misses, cold, started, failed, avg_start_ms, zygote}
 * of the host image's shelf, and "images": the same for every shelf, with
 * "image". zygote is true while the shelf forks from a zygote; false with
 * "zygote_error" saying why not (the shelf starts sandboxes one by one). */
json_t *cage_pool_stats(struct cage_pool *p);

#endif
