/* The audit log: an append-only JSON Lines file with one record per event
 * (docs/AUDIT.md lists every event and its fields):
 *
 *   {"time":"2026-11-22T09:30:00.123Z","event":"exec.end","tenant":"acme",
 *    "sandbox":"build-1","labels":{"team":"ml"},"status":"ok",...}
 *
 * Guarantees: each record is one line of at most CAGE_AUDIT_LINE_MAX bytes
 * written with a single write(2) on an O_APPEND descriptor under a mutex,
 * so records from any number of threads never interleave; every string in
 * a record (values, label keys, keys inside field values) passes through
 * the redactor before it is serialised, so a secret value never reaches
 * the file even when JSON escaping would change its bytes; an oversized
 * record keeps its identity (time, event, tenant, sandbox) and trims the
 * rest, marked "truncated": true, rather than being split.
 *
 * Callers must never pass secret values or file contents in fields; the
 * redactor is the second line of defence, not the first. */
#ifndef CODECAGE_SERVICES_AUDIT_H
#define CODECAGE_SERVICES_AUDIT_H

#include <jansson.h>

#include "codecage/codecage.h"

struct cage_redactor;

#define CAGE_AUDIT_LINE_MAX   (64 * 1024) /* bytes, including the newline */
#define CAGE_AUDIT_ID_MAX     256         /* bytes kept of tenant and sandbox */
#define CAGE_AUDIT_TRIM_BYTES 1024        /* strings kept when a record is trimmed */
#define CAGE_AUDIT_DEPTH_MAX  16          /* nesting kept inside labels and fields */

enum cage_audit_event {
        CAGE_AUDIT_SANDBOX_CREATE,
        CAGE_AUDIT_SANDBOX_START,
        CAGE_AUDIT_SANDBOX_STOP,
        CAGE_AUDIT_SANDBOX_REMOVE,
        CAGE_AUDIT_EXEC_START,
        CAGE_AUDIT_EXEC_END,
        CAGE_AUDIT_RUN_START,
        CAGE_AUDIT_RUN_END,
        CAGE_AUDIT_FILE_WRITE,
        CAGE_AUDIT_FILE_READ,
        CAGE_AUDIT_FILE_DELETE,
        CAGE_AUDIT_SECRET_INJECT,
        CAGE_AUDIT_POLICY_DENY,
        CAGE_AUDIT_AUTH_DENY,
        CAGE_AUDIT_NETWORK_ALLOW,
        CAGE_AUDIT_NETWORK_DENY,
        CAGE_AUDIT_REQUIREMENTS_INSTALL,
        CAGE_AUDIT_IMAGE_PULL,
        CAGE_AUDIT_IMAGE_IMPORT,
        CAGE_AUDIT_IMAGE_REMOVE,
        CAGE_AUDIT_EVENT_COUNT,
};

/* "sandbox.create", "exec.end", ...; NULL for an unknown value. */
const char *cage_audit_event_to_string(enum cage_audit_event event);
int cage_audit_event_from_string(const char *s, enum cage_audit_event *ret);

struct cage_audit;

/* Opens (creating it with mode 0600) the log at path for appending. A
 * symbolic link at path, anything but a regular file, a file owned by
 * another user or writable by group or others is refused. redactor may be
 * NULL; otherwise the log holds a reference to it. */
int cage_audit_open(const char *path, struct cage_redactor *redactor, struct cage_audit **ret,
                    struct cage_error *err);

/* Appends one record. tenant and sandbox may be NULL (JSON null); labels
 * and fields are borrowed JSON objects or NULL. Field keys are constant
 * identifiers chosen by codecage ([a-z0-9_]{1,64}, not one of time, event,
 * tenant, sandbox, labels, truncated): -EINVAL otherwise. -errno from the
 * write (e.g. -ENOSPC); nothing partial is left behind by a failed
 * serialisation. Safe from any thread. */
int cage_audit_record(struct cage_audit *audit, enum cage_audit_event event, const char *tenant,
                      const char *sandbox, json_t *labels, json_t *fields, struct cage_error *err);

/* Reopens the path (after a log rotation moved the file away). */
int cage_audit_reopen(struct cage_audit *audit, struct cage_error *err);
/* Redacts with `redactor` from now on (a config reload). The caller keeps
 * a reference to the previous one until no record can be using it. */
void cage_audit_set_redactor(struct cage_audit *audit, struct cage_redactor *redactor);

/* Closes the file and drops the redactor reference. Accepts NULL. */
struct cage_audit *cage_audit_close(struct cage_audit *audit);

#endif
