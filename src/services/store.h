/* Persistent sandbox metadata: one SQLite database under the server's data
 * directory that keeps every named sandbox (tenant, name, id, spec, labels,
 * state) and, while it runs, what the running incarnation holds on the host
 * (uid slot, cgroup, init pid, boot id, server instance), so that the next
 * server start can find and remove whatever a crashed or kill -9'd server
 * left behind. See docs/STORE.md for the schema and the recovery algorithm.
 *
 * One struct cage_store is one connection guarded by one mutex: every call
 * is safe from any thread. The connection locks the file exclusively until
 * cage_store_close(), so only one process (one server) uses a store at a
 * time. A store is not fork-safe; open it after fork(). Strings are UTF-8
 * text; the store bounds them but does not judge names (the spec does).
 * All functions return >= 0 on success and -errno on failure, filling the
 * caller's struct cage_error; nothing here logs or exits. */
#ifndef CODECAGE_SERVICES_STORE_H
#define CODECAGE_SERVICES_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "codecage/codecage.h"

/* Bounds, in bytes, not counting the terminating NUL. */
#define CAGE_STORE_TENANT_MAX   63
#define CAGE_STORE_NAME_MAX     63
#define CAGE_STORE_SPEC_MAX     (64 * 1024)
#define CAGE_STORE_LABELS_MAX   (16 * 1024)
#define CAGE_STORE_CGROUP_MAX   255
#define CAGE_STORE_ID_LEN       32 /* 128 random bits as lowercase hex */
#define CAGE_STORE_BOOT_ID_LEN  36 /* /proc/sys/kernel/random/boot_id */
#define CAGE_STORE_INSTANCE_MAX 32 /* server_instance, normally a store id */

/* The schema version this code writes (PRAGMA user_version). */
#define CAGE_STORE_SCHEMA_VERSION 1

/* Zero is "stopped", so a zero-initialised record is a stopped sandbox. */
enum cage_sandbox_state {
        CAGE_SANDBOX_STOPPED,
        CAGE_SANDBOX_RUNNING,
};

const char *cage_sandbox_state_to_string(enum cage_sandbox_state state);
/* "running" / "stopped" -> *ret; -EINVAL for anything else. */
int cage_sandbox_state_from_string(const char *s, enum cage_sandbox_state *ret);

/* What the current incarnation of a running sandbox holds on the host.
 * All of it is NULL / 0 while the sandbox is stopped. */
struct cage_sandbox_runtime {
        uint32_t host_uid;           /* uid slot; 0 = none (uid 0 is never a slot) */
        const char *cgroup;          /* cgroup name; NULL = none yet */
        pid_t init_pid;              /* host pid of its pid 1; 0 = none yet */
        const char *boot_id;         /* boot id when started; required while running */
        const char *server_instance; /* server that started it; required while running */
};

/* One sandbox. Records returned by the store are a single allocation (the
 * strings point into it), released with cage_sandbox_record_free(). The
 * same struct, filled by the caller, is the input of cage_store_insert(). */
struct cage_sandbox_record {
        const char *id;          /* CAGE_STORE_ID_LEN hex; NULL on insert = generate */
        const char *tenant;      /* 1..63 bytes */
        const char *name;        /* 1..63 bytes, unique per tenant */
        const char *spec_json;   /* the validated spec, valid JSON, <= 64 KiB */
        const char *labels_json; /* a JSON object, <= 16 KiB; NULL on insert = "{}" */
        enum cage_sandbox_state state;
        int64_t created_ms;   /* Unix epoch ms; 0 on insert = now */
        int64_t last_used_ms; /* 0 on insert = created_ms */
        struct cage_sandbox_runtime rt;
};

struct cage_sandbox_list {
        struct cage_sandbox_record **items;
        size_t n;
};

struct cage_store;

/* Called by cage_store_mark_all_stopped() for each leftover record, inside
 * its transaction and under the store lock (so it must not call the store).
 * Returning < 0 rolls everything back; the callback must be idempotent. */
typedef int (*cage_store_stale_fn)(void *ctx, const struct cage_sandbox_record *rec,
                                   struct cage_error *err);

/* Opens or creates the store at an absolute path whose directory is not
 * writable by group or others. Refuses a symlink at the path. */
int cage_store_open(const char *path, struct cage_store **ret, struct cage_error *err);
/* Closes the store; accepts NULL; returns NULL. */
struct cage_store *cage_store_close(struct cage_store *store);

/* Inserts a new sandbox; *ret (optional) receives the stored record, with
 * its id and timestamps. -EEXIST when the tenant already has that name. */
int cage_store_insert(struct cage_store *store, const struct cage_sandbox_record *rec,
                      struct cage_sandbox_record **ret, struct cage_error *err);
/* -ENOENT when the tenant has no sandbox of that name. */
int cage_store_get(struct cage_store *store, const char *tenant, const char *name,
                   struct cage_sandbox_record **ret, struct cage_error *err);
int cage_store_get_by_id(struct cage_store *store, const char *id, struct cage_sandbox_record **ret,
                         struct cage_error *err);
/* The tenant's sandboxes ordered by name; label_filter is NULL or "key=value"
 * (matches records whose labels_json has that key with that string value). */
int cage_store_list(struct cage_store *store, const char *tenant, const char *label_filter,
                    struct cage_sandbox_list *ret, struct cage_error *err);
/* Sets state and runtime fields in one statement. Running needs rt with a
 * boot_id and server_instance; stopped clears the runtime fields (rt is
 * ignored). -ENOENT when no such id. */
int cage_store_set_state(struct cage_store *store, const char *id, enum cage_sandbox_state state,
                         const struct cage_sandbox_runtime *rt, struct cage_error *err);
/* Raises last_used_ms to now_ms (0 = the current time); never lowers it. */
int cage_store_touch(struct cage_store *store, const char *id, int64_t now_ms,
                     struct cage_error *err);
struct cage_store_touch {
        const char *id;
        int64_t last_used_ms;
};
/* cage_store_touch() of n records in one transaction; a record that is
 * gone is passed over. */
int cage_store_touch_many(struct cage_store *store, const struct cage_store_touch *touches,
                          size_t n, struct cage_error *err);
/* -ENOENT when no such id. */
int cage_store_delete(struct cage_store *store, const char *id, struct cage_error *err);
/* At server start: hands every record left `running` by another server
 * instance to fn, then sets them all `stopped` with runtime fields cleared,
 * in one transaction. Returns how many records were stopped. */
int cage_store_mark_all_stopped(struct cage_store *store, const char *current_server_instance,
                                cage_store_stale_fn fn, void *ctx, struct cage_error *err);
/* PRAGMA integrity_check: 0 when "ok", else -EIO with the first problem. */
int cage_store_check(struct cage_store *store, struct cage_error *err);

/* Releases one record; accepts NULL; returns NULL. */
struct cage_sandbox_record *cage_sandbox_record_free(struct cage_sandbox_record *rec);
/* Releases every record of the list and empties it; accepts an empty list. */
void cage_sandbox_list_free(struct cage_sandbox_list *list);

/* A fresh random id (128 bits from getrandom, lowercase hex): sandbox ids
 * and server instance ids. */
int cage_store_new_id(char ret[CAGE_STORE_ID_LEN + 1], struct cage_error *err);
/* The kernel's boot id, so a pid recorded before a reboot is never trusted. */
int cage_store_read_boot_id(char ret[CAGE_STORE_BOOT_ID_LEN + 1], struct cage_error *err);

#endif
