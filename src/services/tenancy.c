/* Which tenant holds a one-shot run, and attempts of one tenant on what
 * another holds.
 *
 * A run's artifacts live in <data_dir>/runs/<run_id>/ (service_exec.c);
 * the file RUN_OWNER_FILE beside output/ names the tenant that made the
 * run. A run directory without a readable owner serves nobody, so the owner
 * is written (mode 0600, exclusively) after output/ is copied and flushed:
 * it publishes the copy whole, and a copy that failed is never served. Runs are
 * bound like sandboxes: for every other tenant a run does not exist.
 *
 * A request of one tenant for a sandbox name or run that only another
 * tenant holds is answered "not found", and audited as auth.deny with
 * reason "forbidden" (cage_service_audit_foreign): the front ends call it
 * when a lookup came back -ENOENT, with what they know of the peer.
 *
 * Builds made with -Dunsafe_debug=true stop checking the owner when
 * CODECAGE_DEBUG_DISABLE names "run-tenant", so the security suite can show
 * that the check is what keeps another tenant out; normal builds have no
 * such switch. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service_private.h"
#include "services/tenancy.h"
#include "util/cleanup.h"
#include "util/fdutil.h"

#define OWNER_MAX (CAGE_STORE_TENANT_MAX + 1)

int svc_run_bind(int run_fd, const char *tenant)
{
        size_t len = strlen(tenant);
        if (len == 0 || len >= OWNER_MAX)
                return -EINVAL;
        _cleanup_close_ int fd = openat(run_fd, RUN_OWNER_FILE,
                                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, tenant, len);
        return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

/* The owner of the run directory run_fd into out; false without one. */
static bool run_owner(int run_fd, char out[OWNER_MAX + 1])
{
        _cleanup_close_ int fd =
                openat(run_fd, RUN_OWNER_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, out, OWNER_MAX + 1);
        if (n <= 0 || n > OWNER_MAX)
                return false;
        out[n] = '\0';
        return strlen(out) == (size_t)n;
}

static bool switched_off(void)
{
#ifdef CODECAGE_UNSAFE_DEBUG
        const char *off = getenv("CODECAGE_DEBUG_DISABLE");
        if (off && strstr(off, "run-tenant"))
                return true;
#endif
        return false;
}

bool svc_run_owner_is(int run_fd, const char *tenant)
{
        char owner[OWNER_MAX + 1];
        return run_owner(run_fd, owner) && strcmp(owner, tenant) == 0;
}

bool svc_run_owned_by(int run_fd, const char *tenant)
{
        return switched_off() || svc_run_owner_is(run_fd, tenant);
}

/* Whether the run's owner is a tenant other than `tenant`. */
static bool run_foreign(struct cage_service *svc, const char *tenant, const char *run_id)
{
        char owner[OWNER_MAX + 1];
        _cleanup_free_ char *dir = NULL;
        if (strchr(run_id, '/') || run_id[0] == '.' ||
            asprintf(&dir, "%s/%s", svc->runs_base, run_id) < 0)
                return false;
        _cleanup_close_ int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd >= 0 && run_owner(fd, owner) && strcmp(owner, tenant) != 0;
}

/* Whether another tenant has a sandbox `name` and `tenant` has none. */
static bool sandbox_foreign(struct cage_service *svc, const char *tenant, const char *name)
{
        bool mine = false, theirs = false;
        pthread_mutex_lock(&svc->lock);
        for (struct sb *sb = svc->list; sb; sb = sb->next) {
                if (sb->removed || strcmp(sb->name, name) != 0)
                        continue;
                if (strcmp(sb->tenant, tenant) == 0)
                        mine = true;
                else
                        theirs = true;
        }
        pthread_mutex_unlock(&svc->lock);
        return theirs && !mine;
}

void cage_service_audit_forbidden(struct cage_service *svc, const char *tenant, const char *sandbox,
                                  const struct cage_service_peer *peer)
{
        static const struct cage_service_peer none = {0};
        if (!peer)
                peer = &none;
        json_t *f = json_pack("{s:s, s:s?, s:s?, s:s?}", "reason", "forbidden", "remote",
                              peer->remote, "method", peer->method, "route", peer->route);
        if (f && peer->call)
                json_object_set_new(f, "call", json_string(peer->call));
        svc_audit(svc, CAGE_AUDIT_AUTH_DENY, tenant, sandbox, NULL, f);
}

bool cage_service_audit_foreign(struct cage_service *svc, const char *tenant, const char *sandbox,
                                const char *run_id, const struct cage_service_peer *peer)
{
        if (!tenant || (!sandbox && !run_id))
                return false;
        bool foreign =
                sandbox ? sandbox_foreign(svc, tenant, sandbox) : run_foreign(svc, tenant, run_id);
        if (foreign)
                cage_service_audit_forbidden(svc, tenant, sandbox ? sandbox : run_id, peer);
        return foreign;
}
