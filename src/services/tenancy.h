/* Runs bound to the tenant that made them, and cross-tenant attempts
 * (tenancy.c). Internal to src/services; the front ends' part is
 * cage_service_audit_foreign() in codecage/service.h. */
#ifndef CODECAGE_SERVICES_TENANCY_H
#define CODECAGE_SERVICES_TENANCY_H

#include <stdbool.h>

/* In <runs>/<run_id>/, beside output/: the tenant's name. */
#define RUN_OWNER_FILE "tenant"
/* In <runs>/<run_id>/, beside output/: the bytes of data output/ holds,
 * decimal (run_retention.c). */
#define RUN_BYTES_FILE "bytes"

/* Makes tenant the owner of the run directory run_fd (before anything of
 * the run is kept there). -errno; -EEXIST when it has an owner already. */
int svc_run_bind(int run_fd, const char *tenant);
/* Whether the run directory run_fd belongs to tenant (false without a
 * readable owner). */
bool svc_run_owned_by(int run_fd, const char *tenant);
/* The same in every build: for what the server keeps, not what it serves. */
bool svc_run_owner_is(int run_fd, const char *tenant);

#endif
