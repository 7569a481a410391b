/* The sandboxes made through the E2B API (e2b.h): for each, the tenant
 * that made it, the template it was asked for, its two access tokens and
 * the end of its life.
 *
 * The registry is what routes the sandbox plane: a request there carries
 * only a sandbox id and a token, so ids are unique across tenants ("i" and
 * 76 random bits in hex) and the registry, not the request, says whose
 * sandbox it is. Tokens are 256 random bits each, held only here: they
 * die with the server, and so do the sandboxes (e2b_registry_free removes
 * them; a sandbox of a server that crashed is a stopped named sandbox the
 * tenant may remove over /v1).
 *
 * The reaper thread removes a sandbox once end_ms has passed (E2B's
 * `timeout`). Locking: reg->lock guards the list and every end_ms; it is
 * never held across a service call.
 *
 * The control plane reaches a sandbox only for the tenant that made it
 * (e2b_registry_get_for, e2b_registry_list). In the unsafe debug build
 * (-Dunsafe_debug=true) only, that check is switched off when
 * CODECAGE_DEBUG_DISABLE names "e2b-tenant", so the security suite can show
 * that it is what keeps another tenant's API key from a sandbox. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "server/e2b.h"
#include "services/service.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

#define REAPER_TICK_MS 500

struct e2b_registry {
        struct cage_service *svc;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct e2b_box **boxes;
        size_t n, cap;
        pthread_t reaper;
        bool reaper_running, stopping;
};

static void random_hex(char *out, size_t n_chars)
{
        static const char hex[] = "0123456789abcdef";
        unsigned char raw[64];
        size_t n = (n_chars + 1) / 2, got = 0;
        while (got < n) {
                ssize_t r = getrandom(raw + got, n - got, 0);
                if (r > 0)
                        got += (size_t)r;
        }
        for (size_t i = 0; i < n_chars; i++)
                out[i] = hex[(raw[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
        out[n_chars] = '\0';
}

bool e2b_token_equal(const char *given, const char *known)
{
        size_t n = strlen(known);
        if (!given || strlen(given) != n)
                return false;
        unsigned char diff = 0;
        for (size_t i = 0; i < n; i++)
                diff |= (unsigned char)(given[i] ^ known[i]);
        return diff == 0;
}

void e2b_box_unref(struct e2b_box *box)
{
        if (!box || __atomic_sub_fetch(&box->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        json_decref(box->metadata);
        pthread_mutex_destroy(&box->lock);
        explicit_bzero(box->envd_token, sizeof(box->envd_token));
        explicit_bzero(box->traffic_token, sizeof(box->traffic_token));
        free(box);
}

static struct e2b_box *box_ref(struct e2b_box *box)
{
        __atomic_add_fetch(&box->refs, 1, __ATOMIC_ACQ_REL);
        return box;
}

/* With reg->lock held: takes box out of the list; false when not there. */
static bool unlist_locked(struct e2b_registry *reg, struct e2b_box *box)
{
        for (size_t i = 0; i < reg->n; i++) {
                if (reg->boxes[i] != box)
                        continue;
                memmove(&reg->boxes[i], &reg->boxes[i + 1], (reg->n - i - 1) * sizeof(box));
                reg->n--;
                return true;
        }
        return false;
}

/* Ends an unlisted box: its commands, then the codecage sandbox. */
static void destroy(struct e2b_registry *reg, struct e2b_box *box)
{
        struct cage_error err = {0};
        e2b_process_end_all(box);
        (void)cage_service_sandbox_remove(reg->svc, box->tenant, box->id, &err);
        e2b_box_unref(box); /* the list's reference */
}

static void *reaper_main(void *arg)
{
        struct e2b_registry *reg = arg;
        pthread_mutex_lock(&reg->lock);
        while (!reg->stopping) {
                uint64_t now = clock_wall_ms();
                struct e2b_box *expired = NULL;
                for (size_t i = 0; i < reg->n && !expired; i++)
                        if (reg->boxes[i]->end_ms <= now)
                                expired = reg->boxes[i];
                if (expired) {
                        unlist_locked(reg, expired);
                        pthread_mutex_unlock(&reg->lock);
                        destroy(reg, expired);
                        pthread_mutex_lock(&reg->lock);
                        continue;
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += REAPER_TICK_MS * 1000000L;
                ts.tv_sec += ts.tv_nsec / 1000000000L;
                ts.tv_nsec %= 1000000000L;
                pthread_cond_timedwait(&reg->cond, &reg->lock, &ts);
        }
        pthread_mutex_unlock(&reg->lock);
        return NULL;
}

struct e2b_registry *e2b_registry_new(struct cage_service *svc)
{
        struct e2b_registry *reg = calloc(1, sizeof(*reg));
        if (!reg)
                return NULL;
        reg->svc = svc;
        pthread_mutex_init(&reg->lock, NULL);
        pthread_cond_init(&reg->cond, NULL);
        if (pthread_create(&reg->reaper, NULL, reaper_main, reg) != 0) {
                e2b_registry_free(reg);
                return NULL;
        }
        reg->reaper_running = true;
        return reg;
}

void e2b_registry_free(struct e2b_registry *reg)
{
        if (!reg)
                return;
        pthread_mutex_lock(&reg->lock);
        reg->stopping = true;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        if (reg->reaper_running)
                pthread_join(reg->reaper, NULL);
        while (reg->n > 0) {
                struct e2b_box *box = reg->boxes[reg->n - 1];
                reg->n--;
                destroy(reg, box);
        }
        e2b_process_wait_idle();
        free(reg->boxes);
        pthread_mutex_destroy(&reg->lock);
        pthread_cond_destroy(&reg->cond);
        free(reg);
}

static int list_add(struct e2b_registry *reg, struct e2b_box *box)
{
        pthread_mutex_lock(&reg->lock);
        if (reg->n == reg->cap) {
                size_t cap = reg->cap ? reg->cap * 2 : 16;
                struct e2b_box **nb = realloc(reg->boxes, cap * sizeof(*nb));
                if (!nb) {
                        pthread_mutex_unlock(&reg->lock);
                        return -ENOMEM;
                }
                reg->boxes = nb;
                reg->cap = cap;
        }
        reg->boxes[reg->n++] = box_ref(box);
        pthread_mutex_unlock(&reg->lock);
        return 0;
}

static struct e2b_box *box_new(const char *tenant, const char *template_id, json_t *metadata)
{
        struct e2b_box *box = calloc(1, sizeof(*box));
        if (!box)
                return NULL;
        box->refs = 1;
        pthread_mutex_init(&box->lock, NULL);
        box->id[0] = 'i';
        random_hex(box->id + 1, E2B_ID_LEN - 1);
        random_hex(box->envd_token, E2B_TOKEN_LEN);
        random_hex(box->traffic_token, E2B_TOKEN_LEN);
        snprintf(box->tenant, sizeof(box->tenant), "%s", tenant);
        snprintf(box->template_id, sizeof(box->template_id), "%s", template_id);
        box->metadata = metadata ? json_deep_copy(metadata) : json_object();
        box->next_pid = 1000;
        if (!box->metadata) {
                e2b_box_unref(box);
                return NULL;
        }
        return box;
}

/* What the created sandbox's info says it got. */
static void take_info(struct e2b_box *box, const json_t *info)
{
        const json_t *spec = json_object_get(info, "spec");
        box->cpus = json_number_value(json_object_get(spec, "cpus"));
        box->memory_mib = (uint64_t)json_integer_value(json_object_get(spec, "memory_mib"));
        const json_t *net = json_object_get(spec, "network");
        box->network = json_is_array(net) && json_array_size(net) > 0;
}

int e2b_registry_create(struct e2b_registry *reg, const char *tenant, json_t *spec,
                        const char *template_id, uint64_t timeout_s, json_t *metadata,
                        struct e2b_box **ret, struct cage_error *err)
{
        struct e2b_box *box = box_new(tenant, template_id, metadata);
        if (!box)
                return cage_fail(err, -ENOMEM, "sandbox");
        json_auto_t *info = NULL;
        int r = json_object_set_new(spec, "name", json_string(box->id)) < 0 ? -ENOMEM : 0;
        if (r == 0)
                r = cage_service_sandbox_create(reg->svc, tenant, spec, &info, err);
        if (r < 0) {
                e2b_box_unref(box);
                return r;
        }
        take_info(box, info);
        box->started_ms = clock_wall_ms();
        box->end_ms = box->started_ms + timeout_s * 1000;
        if ((r = list_add(reg, box)) < 0) {
                struct cage_error ignored;
                (void)cage_service_sandbox_remove(reg->svc, tenant, box->id, &ignored);
                e2b_box_unref(box);
                return cage_fail(err, r, "sandbox");
        }
        *ret = box;
        return 0;
}

struct e2b_box *e2b_registry_get(struct e2b_registry *reg, const char *id)
{
        struct e2b_box *found = NULL;
        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n && !found; i++)
                if (strcmp(reg->boxes[i]->id, id) == 0)
                        found = box_ref(reg->boxes[i]);
        pthread_mutex_unlock(&reg->lock);
        return found;
}

static bool tenant_owns(const struct e2b_box *box, const char *tenant)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "e2b-tenant"))
                return true;
#endif
        return strcmp(box->tenant, tenant) == 0;
}

struct e2b_box *e2b_registry_get_for(struct e2b_registry *reg, const char *tenant, const char *id)
{
        struct e2b_box *box = e2b_registry_get(reg, id);
        if (box && !tenant_owns(box, tenant)) {
                e2b_box_unref(box);
                return NULL;
        }
        return box;
}

int e2b_registry_list(struct e2b_registry *reg, const char *tenant, struct e2b_box ***ret,
                      size_t *ret_n)
{
        pthread_mutex_lock(&reg->lock);
        struct e2b_box **out = calloc(reg->n + 1, sizeof(*out));
        size_t n = 0;
        for (size_t i = 0; out && i < reg->n; i++)
                if (tenant_owns(reg->boxes[i], tenant))
                        out[n++] = box_ref(reg->boxes[i]);
        pthread_mutex_unlock(&reg->lock);
        if (!out)
                return -ENOMEM;
        *ret = out;
        *ret_n = n;
        return 0;
}

int e2b_registry_kill(struct e2b_registry *reg, struct e2b_box *box)
{
        pthread_mutex_lock(&reg->lock);
        bool listed = unlist_locked(reg, box);
        pthread_mutex_unlock(&reg->lock);
        if (!listed)
                return -ENOENT;
        destroy(reg, box);
        return 0;
}

void e2b_registry_set_end(struct e2b_registry *reg, struct e2b_box *box, uint64_t end_ms,
                          bool only_later)
{
        pthread_mutex_lock(&reg->lock);
        if (!only_later || end_ms > box->end_ms)
                box->end_ms = end_ms;
        pthread_mutex_unlock(&reg->lock);
}

uint64_t e2b_registry_end(struct e2b_registry *reg, struct e2b_box *box)
{
        pthread_mutex_lock(&reg->lock);
        uint64_t end = box->end_ms;
        pthread_mutex_unlock(&reg->lock);
        return end;
}
