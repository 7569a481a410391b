/* Sandbox metadata store; see store.h and docs/STORE.md.
 *
 * This file owns the SQLite database file under the data directory: how it
 * is opened (no symlinks, mode 0600, in a directory only we can write), its
 * pragmas (exclusive locking, WAL, synchronous, foreign keys, busy timeout,
 * defensive mode),
 * its schema and forward migrations (PRAGMA user_version), and every SQL
 * statement codecage runs against it.
 *
 * Invariants:
 * - One process owns the file: the connection holds an exclusive lock from
 *   open to close, so records `running` under another server instance
 *   really are leftovers of a dead process.
 * - One connection per store, used only under store->lock (an error-checking
 *   mutex, so a callback that re-enters the store gets -EDEADLK, not a hang).
 * - Every change is one statement or one transaction: a crash leaves each
 *   record as it was before or after a call, never half-written.
 * - A `stopped` record has no runtime fields; a `running` one always names
 *   the boot and server instance that started it (CHECK constraints repeat
 *   the rule, so no code path can store anything else).
 * - Changes to records are committed with synchronous=FULL (durable before
 *   the call returns); only last_used_ms updates use NORMAL (see STORE.md).
 * - Strings are bounded here before SQLite sees them, and again in the
 *   schema. */
#include "services/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"

/* STRICT tables need 3.37, built-in JSON functions 3.38. */
#if SQLITE_VERSION_NUMBER < 3038000
#error "codecage's store needs SQLite >= 3.38"
#endif
#define SQLITE_MIN_VERSION 3038000

#define APPLICATION_ID  0x43414745 /* "CAGE" in the database header */
#define BUSY_TIMEOUT_MS 5000
#define BOOT_ID_PATH    "/proc/sys/kernel/random/boot_id"

/* Schema version 1. Constraint names are the field names users see in
 * error messages ("CHECK constraint failed: cgroup_length"). The JSON
 * columns are checked by STMT_CHECK_JSON instead: with trusted_schema off,
 * SQLite refuses JSON functions inside the schema. */
#define SCHEMA_V1                                                                                  \
        "CREATE TABLE sandboxes ("                                                                 \
        " id TEXT NOT NULL UNIQUE"                                                                 \
        "  CONSTRAINT id_is_hex CHECK (length(id) = 32 AND NOT id GLOB '*[^0-9a-f]*'),"            \
        " tenant TEXT NOT NULL"                                                                    \
        "  CONSTRAINT tenant_length CHECK (length(tenant) BETWEEN 1 AND 63),"                      \
        " name TEXT NOT NULL"                                                                      \
        "  CONSTRAINT name_length CHECK (length(name) BETWEEN 1 AND 63),"                          \
        " spec_json TEXT NOT NULL,"                                                                \
        " labels_json TEXT NOT NULL DEFAULT '{}',"                                                 \
        " state TEXT NOT NULL"                                                                     \
        "  CONSTRAINT state_is_known CHECK (state IN ('running', 'stopped')),"                     \
        " created_ms INTEGER NOT NULL CONSTRAINT created_ms_positive CHECK (created_ms >= 0),"     \
        " last_used_ms INTEGER NOT NULL"                                                           \
        "  CONSTRAINT last_used_ms_positive CHECK (last_used_ms >= 0),"                            \
        " host_uid INTEGER CONSTRAINT host_uid_range CHECK (host_uid BETWEEN 1 AND 4294967294),"   \
        " cgroup TEXT CONSTRAINT cgroup_length CHECK (length(cgroup) BETWEEN 1 AND 255),"          \
        " init_pid INTEGER CONSTRAINT init_pid_positive CHECK (init_pid > 0),"                     \
        " boot_id TEXT CONSTRAINT boot_id_length CHECK (length(boot_id) BETWEEN 1 AND 36),"        \
        " server_instance TEXT"                                                                    \
        "  CONSTRAINT server_instance_length CHECK (length(server_instance) BETWEEN 1 AND 32),"    \
        " CONSTRAINT runtime_matches_state CHECK (CASE state"                                      \
        "  WHEN 'running' THEN boot_id IS NOT NULL AND server_instance IS NOT NULL"                \
        "  ELSE host_uid IS NULL AND cgroup IS NULL AND init_pid IS NULL"                          \
        "   AND boot_id IS NULL AND server_instance IS NULL END),"                                 \
        " UNIQUE (tenant, name)"                                                                   \
        ") STRICT;"                                                                                \
        "PRAGMA application_id = 1128351557;"

/* migrations[v] upgrades schema version v to v + 1, in one transaction.
 * Append only: never edit a migration that has shipped. */
static const char *const migrations[] = {
        SCHEMA_V1,
};
_Static_assert(ELEMENTSOF(migrations) == CAGE_STORE_SCHEMA_VERSION,
               "one migration per schema version");
_Static_assert(APPLICATION_ID == 1128351557, "SCHEMA_V1 spells out APPLICATION_ID");

#define RECORD_COLUMNS                                                                             \
        "id, tenant, name, spec_json, labels_json, state, created_ms, last_used_ms, host_uid, "    \
        "cgroup, init_pid, boot_id, server_instance"
#define SELECT_RECORD "SELECT " RECORD_COLUMNS " FROM sandboxes "
#define STALE_WHERE   "WHERE state = 'running' AND server_instance IS NOT ?1"

/* Positions in RECORD_COLUMNS, which are also the insert's parameters - 1. */
enum column {
        COL_ID,
        COL_TENANT,
        COL_NAME,
        COL_SPEC,
        COL_LABELS,
        COL_STATE,
        COL_CREATED,
        COL_LAST_USED,
        COL_HOST_UID,
        COL_CGROUP,
        COL_INIT_PID,
        COL_BOOT_ID,
        COL_INSTANCE,
        COL_MAX,
};

enum stmt_id {
        STMT_CHECK_JSON,
        STMT_INSERT,
        STMT_GET,
        STMT_GET_ID,
        STMT_LIST,
        STMT_SET_STATE,
        STMT_TOUCH,
        STMT_DELETE,
        STMT_STALE,
        STMT_STOP_STALE,
        STMT_MAX,
};

/* Prepared once per store, on first use, and kept (SQLITE_PREPARE_PERSISTENT). */
static const char *const stmt_sql[STMT_MAX] = {
        [STMT_CHECK_JSON] = "SELECT json_valid(?1), "
                            "CASE WHEN json_valid(?2) THEN json_type(?2) = 'object' ELSE 0 END",
        [STMT_INSERT] = "INSERT INTO sandboxes (" RECORD_COLUMNS ") "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        [STMT_GET] = SELECT_RECORD "WHERE tenant = ?1 AND name = ?2",
        [STMT_GET_ID] = SELECT_RECORD "WHERE id = ?1",
        /* Labels match on string values only; json_each copes with any key. */
        [STMT_LIST] = SELECT_RECORD "WHERE tenant = ?1 AND (?2 IS NULL OR EXISTS ("
                                    "SELECT 1 FROM json_each(labels_json) "
                                    "WHERE key = ?2 AND type = 'text' AND value = ?3)) "
                                    "ORDER BY name",
        [STMT_SET_STATE] = "UPDATE sandboxes SET state = ?2, host_uid = ?3, cgroup = ?4, "
                           "init_pid = ?5, boot_id = ?6, server_instance = ?7 WHERE id = ?1",
        [STMT_TOUCH] = "UPDATE sandboxes SET last_used_ms = max(last_used_ms, ?2) WHERE id = ?1",
        [STMT_DELETE] = "DELETE FROM sandboxes WHERE id = ?1",
        [STMT_STALE] = SELECT_RECORD STALE_WHERE " ORDER BY tenant, name",
        [STMT_STOP_STALE] = "UPDATE sandboxes SET state = 'stopped', host_uid = NULL, "
                            "cgroup = NULL, init_pid = NULL, boot_id = NULL, "
                            "server_instance = NULL " STALE_WHERE,
};

struct cage_store {
        pthread_mutex_t lock;
        bool lock_ready;
        bool sync_full; /* current PRAGMA synchronous: FULL or NORMAL */
        sqlite3 *db;
        sqlite3_stmt *stmts[STMT_MAX];
};

static const char *const state_names[] = {
        [CAGE_SANDBOX_STOPPED] = "stopped",
        [CAGE_SANDBOX_RUNNING] = "running",
};

const char *cage_sandbox_state_to_string(enum cage_sandbox_state state)
{
        if ((size_t)state >= ELEMENTSOF(state_names))
                return NULL;
        return state_names[state];
}

int cage_sandbox_state_from_string(const char *s, enum cage_sandbox_state *ret)
{
        for (size_t i = 0; s && i < ELEMENTSOF(state_names); i++)
                if (strcmp(s, state_names[i]) == 0) {
                        *ret = (enum cage_sandbox_state)i;
                        return 0;
                }
        return -EINVAL;
}

/* ---- errors ------------------------------------------------------------ */

/* SQLite result code -> -errno. Unique-key violations are -EEXIST; other
 * constraint failures mean the input was invalid. */
static int sql_errno(sqlite3 *db, int rc)
{
        int sys;

        switch (rc & 0xff) {
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_CONSTRAINT:
                if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
                        return -EEXIST;
                return -EINVAL;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_TOOBIG:
                return -E2BIG;
        case SQLITE_CANTOPEN:
                if (rc == SQLITE_CANTOPEN_SYMLINK)
                        return -ELOOP;
                /* fall through */
        case SQLITE_IOERR:
                sys = db ? sqlite3_system_errno(db) : 0;
                return sys > 0 ? -sys : -EIO;
        default:
                return -EIO;
        }
}

/* cage_fail() for a failed SQLite call: "<what>: <SQLite's message>". */
static int sql_fail(sqlite3 *db, struct cage_error *err, int rc, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int sql_fail(sqlite3 *db, struct cage_error *err, int rc, const char *fmt, ...)
{
        char what[CAGE_ERROR_MESSAGE_MAX / 2];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return cage_fail(err, sql_errno(db, rc), "%s: %s", what,
                         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

/* ---- cleanup helpers ----------------------------------------------------- */

static void unlockp(pthread_mutex_t **lock)
{
        if (*lock)
                pthread_mutex_unlock(*lock);
}

static void finalizep(sqlite3_stmt **st)
{
        sqlite3_finalize(*st);
}

/* Cached statements are reset (not finalized) when a call is done. */
static void resetp(sqlite3_stmt **st)
{
        if (*st) {
                sqlite3_reset(*st);
                sqlite3_clear_bindings(*st);
        }
}

/* Rolls back a transaction still open when its scope ends (an error path). */
static void rollbackp(sqlite3 **db)
{
        if (*db && !sqlite3_get_autocommit(*db))
                sqlite3_exec(*db, "ROLLBACK", NULL, NULL, NULL);
}

static void storep(struct cage_store **s)
{
        cage_store_close(*s);
}

static void listp(struct cage_sandbox_list *list)
{
        cage_sandbox_list_free(list);
}

#define _cleanup_unlock_   __attribute__((cleanup(unlockp)))
#define _cleanup_finalize_ __attribute__((cleanup(finalizep)))
#define _cleanup_reset_    __attribute__((cleanup(resetp)))
#define _cleanup_rollback_ __attribute__((cleanup(rollbackp), unused))
#define _cleanup_store_    __attribute__((cleanup(storep)))
#define _cleanup_list_     __attribute__((cleanup(listp)))

static int store_lock(struct cage_store *s, pthread_mutex_t **ret, struct cage_error *err)
{
        int r = pthread_mutex_lock(&s->lock);
        if (r != 0)
                return cage_fail(err, -r, "lock the store (called from a store callback?)");
        *ret = &s->lock;
        return 0;
}

static int store_stmt(struct cage_store *s, enum stmt_id id, sqlite3_stmt **ret,
                      struct cage_error *err)
{
        if (!s->stmts[id]) {
                int rc = sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                            &s->stmts[id], NULL);
                if (rc != SQLITE_OK)
                        return sql_fail(s->db, err, rc, "prepare store statement %d", (int)id);
        }
        *ret = s->stmts[id];
        return 0;
}

static int exec_sql(sqlite3 *db, const char *sql, struct cage_error *err)
{
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return sql_fail(db, err, rc, "store: `%s`", sql);
        return 0;
}

/* Record changes are durable before they return (FULL); last_used_ms
 * updates are not worth an fsync each (NORMAL). Switching is free. */
static int store_durability(struct cage_store *s, bool full, struct cage_error *err)
{
        if (s->sync_full == full)
                return 0;
        int r = exec_sql(s->db, full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
                         err);
        if (r < 0)
                return r;
        s->sync_full = full;
        return 0;
}

/* ---- validation ---------------------------------------------------------- */

/* A bounded, non-empty string; NULL is fine unless required. */
static int check_text(const char *field, const char *value, size_t max, bool required,
                      struct cage_error *err)
{
        if (!value)
                return required ? cage_fail(err, -EINVAL, "%s is required.", field) : 0;
        size_t n = strlen(value);
        if (n == 0)
                return cage_fail(err, -EINVAL, "%s must not be empty.", field);
        if (n > max)
                return cage_fail(err, -EINVAL, "%s is %zu bytes; at most %zu are allowed.", field,
                                 n, max);
        return 0;
}

static bool id_valid(const char *id)
{
        if (!id || strlen(id) != CAGE_STORE_ID_LEN)
                return false;
        return strspn(id, "0123456789abcdef") == CAGE_STORE_ID_LEN;
}

static int check_id(const char *field, const char *id, struct cage_error *err)
{
        if (!id_valid(id))
                return cage_fail(err, -EINVAL, "%s must be %d lowercase hex digits.", field,
                                 CAGE_STORE_ID_LEN);
        return 0;
}

static int check_runtime(enum cage_sandbox_state state, const struct cage_sandbox_runtime *rt,
                         struct cage_error *err)
{
        int r;

        if (state == CAGE_SANDBOX_STOPPED)
                return 0;
        if (state != CAGE_SANDBOX_RUNNING)
                return cage_fail(err, -EINVAL, "state %d is not running or stopped.", (int)state);
        if (!rt)
                return cage_fail(err, -EINVAL, "a running sandbox needs its runtime fields.");
        if ((r = check_text("boot_id", rt->boot_id, CAGE_STORE_BOOT_ID_LEN, true, err)) < 0 ||
            (r = check_text("server_instance", rt->server_instance, CAGE_STORE_INSTANCE_MAX, true,
                            err)) < 0 ||
            (r = check_text("cgroup", rt->cgroup, CAGE_STORE_CGROUP_MAX, false, err)) < 0)
                return r;
        if (rt->host_uid == (uint32_t)-1)
                return cage_fail(err, -EINVAL, "host_uid must be below 4294967295.");
        if (rt->init_pid < 0)
                return cage_fail(err, -EINVAL, "init_pid must be a pid or 0.");
        return 0;
}

static int check_record(const struct cage_sandbox_record *rec, struct cage_error *err)
{
        int r;

        if ((rec->id && (r = check_id("id", rec->id, err)) < 0) ||
            (r = check_text("tenant", rec->tenant, CAGE_STORE_TENANT_MAX, true, err)) < 0 ||
            (r = check_text("name", rec->name, CAGE_STORE_NAME_MAX, true, err)) < 0 ||
            (r = check_text("spec_json", rec->spec_json, CAGE_STORE_SPEC_MAX, true, err)) < 0 ||
            (r = check_text("labels_json", rec->labels_json, CAGE_STORE_LABELS_MAX, false, err)) <
                    0)
                return r;
        if (rec->created_ms < 0 || rec->last_used_ms < 0)
                return cage_fail(err, -EINVAL, "created_ms and last_used_ms must not be negative.");
        return check_runtime(rec->state, &rec->rt, err);
}

/* ---- rows <-> records ---------------------------------------------------- */

static int bind_text(sqlite3_stmt *st, int idx, const char *s)
{
        return s ? sqlite3_bind_text(st, idx, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, idx);
}

static int bind_int_or_null(sqlite3_stmt *st, int idx, int64_t v)
{
        return v ? sqlite3_bind_int64(st, idx, v) : sqlite3_bind_null(st, idx);
}

/* Binds state at state_idx and the five runtime columns at rt_first,
 * rt_first + 1, ...; a stopped sandbox stores NULLs whatever rt says. */
static int bind_state(sqlite3_stmt *st, int state_idx, int rt_first, enum cage_sandbox_state state,
                      const struct cage_sandbox_runtime *rt)
{
        static const struct cage_sandbox_runtime none = {0};
        if (state != CAGE_SANDBOX_RUNNING || !rt)
                rt = &none;
        int rc = bind_text(st, state_idx, cage_sandbox_state_to_string(state));
        if (rc == SQLITE_OK)
                rc = bind_int_or_null(st, rt_first, rt->host_uid);
        if (rc == SQLITE_OK)
                rc = bind_text(st, rt_first + 1, rt->cgroup);
        if (rc == SQLITE_OK)
                rc = bind_int_or_null(st, rt_first + 2, rt->init_pid);
        if (rc == SQLITE_OK)
                rc = bind_text(st, rt_first + 3, rt->boot_id);
        if (rc == SQLITE_OK)
                rc = bind_text(st, rt_first + 4, rt->server_instance);
        return rc;
}

static int bind_insert(sqlite3_stmt *st, const struct cage_sandbox_record *rec, const char *id,
                       int64_t created, int64_t last_used)
{
        int rc = bind_text(st, COL_ID + 1, id);
        if (rc == SQLITE_OK)
                rc = bind_text(st, COL_TENANT + 1, rec->tenant);
        if (rc == SQLITE_OK)
                rc = bind_text(st, COL_NAME + 1, rec->name);
        if (rc == SQLITE_OK)
                rc = bind_text(st, COL_SPEC + 1, rec->spec_json);
        if (rc == SQLITE_OK)
                rc = bind_text(st, COL_LABELS + 1, rec->labels_json ? rec->labels_json : "{}");
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(st, COL_CREATED + 1, created);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(st, COL_LAST_USED + 1, last_used);
        if (rc == SQLITE_OK)
                rc = bind_state(st, COL_STATE + 1, COL_HOST_UID + 1, rec->state, &rec->rt);
        return rc;
}

/* bind_state() binds the runtime columns as one run, in this order. */
_Static_assert(COL_CGROUP == COL_HOST_UID + 1 && COL_INIT_PID == COL_HOST_UID + 2 &&
                       COL_BOOT_ID == COL_HOST_UID + 3 && COL_INSTANCE == COL_HOST_UID + 4,
               "RECORD_COLUMNS order");

static const int text_columns[] = {COL_ID,     COL_TENANT, COL_NAME,    COL_SPEC,
                                   COL_LABELS, COL_CGROUP, COL_BOOT_ID, COL_INSTANCE};

/* Copies the current row into one allocation: the struct, then its strings. */
static int record_from_row(sqlite3_stmt *st, struct cage_sandbox_record **ret,
                           struct cage_error *err)
{
        const char *text[COL_MAX] = {0};
        size_t len[COL_MAX] = {0};
        size_t size = sizeof(struct cage_sandbox_record);

        for (size_t i = 0; i < ELEMENTSOF(text_columns); i++) {
                int c = text_columns[i];
                text[c] = (const char *)sqlite3_column_text(st, c);
                len[c] = (size_t)sqlite3_column_bytes(st, c);
                if (text[c])
                        size += len[c] + 1;
        }
        enum cage_sandbox_state state;
        const char *state_text = (const char *)sqlite3_column_text(st, COL_STATE);
        if (cage_sandbox_state_from_string(state_text, &state) < 0)
                return cage_fail(err, -EIO, "store holds an unknown sandbox state `%s`",
                                 state_text ? state_text : "(null)");

        struct cage_sandbox_record *rec = calloc(1, size);
        if (!rec)
                return cage_fail(err, -ENOMEM, "read sandbox record");
        char *p = (char *)(rec + 1);
        const char **dst[COL_MAX] = {
                [COL_ID] = &rec->id,
                [COL_TENANT] = &rec->tenant,
                [COL_NAME] = &rec->name,
                [COL_SPEC] = &rec->spec_json,
                [COL_LABELS] = &rec->labels_json,
                [COL_CGROUP] = &rec->rt.cgroup,
                [COL_BOOT_ID] = &rec->rt.boot_id,
                [COL_INSTANCE] = &rec->rt.server_instance,
        };
        for (size_t i = 0; i < ELEMENTSOF(text_columns); i++) {
                int c = text_columns[i];
                if (!text[c])
                        continue;
                memcpy(p, text[c], len[c]);
                p[len[c]] = '\0';
                *dst[c] = p;
                p += len[c] + 1;
        }
        rec->state = state;
        rec->created_ms = sqlite3_column_int64(st, COL_CREATED);
        rec->last_used_ms = sqlite3_column_int64(st, COL_LAST_USED);
        rec->rt.host_uid = (uint32_t)sqlite3_column_int64(st, COL_HOST_UID);
        rec->rt.init_pid = (pid_t)sqlite3_column_int64(st, COL_INIT_PID);
        *ret = rec;
        return 0;
}

/* Steps a lookup statement that matches at most one row. */
static int fetch_one(sqlite3 *db, sqlite3_stmt *st, const char *what,
                     struct cage_sandbox_record **ret, struct cage_error *err)
{
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
                return record_from_row(st, ret, err);
        if (rc == SQLITE_DONE)
                return cage_fail(err, -ENOENT, "%s not found", what);
        return sql_fail(db, err, rc, "read %s", what);
}

static int get_by_id_locked(struct cage_store *s, const char *id, struct cage_sandbox_record **ret,
                            struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        char what[64];
        int r = store_stmt(s, STMT_GET_ID, &st, err);
        if (r < 0)
                return r;
        int rc = bind_text(st, 1, id);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "bind sandbox id");
        snprintf(what, sizeof(what), "sandbox id %s", id);
        return fetch_one(s->db, st, what, ret, err);
}

/* ---- opening ------------------------------------------------------------- */

/* The database file itself: opened without following a symlink, created
 * 0600 if missing (and its directory entry synced), a regular file of ours
 * with a single link. Returns its stat for the check after SQLite opens it. */
static int open_db_file(int dirfd, const char *dir, const char *base, struct stat *ret_st,
                        struct cage_error *err)
{
        bool created = false;
        _cleanup_close_ int fd = openat(dirfd, base, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
                fd = openat(dirfd, base,
                            O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
                created = true;
        }
        if (fd < 0 && errno == ELOOP)
                return cage_fail(err, -ELOOP, "store `%s/%s` is a symbolic link, refusing it", dir,
                                 base);
        if (fd < 0)
                return cage_fail(err, -errno, "open store `%s/%s`", dir, base);

        struct stat st;
        if (fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "stat store `%s/%s`", dir, base);
        if (!S_ISREG(st.st_mode))
                return cage_fail(err, -EINVAL, "store `%s/%s` is not a regular file.", dir, base);
        if (st.st_uid != geteuid())
                return cage_fail(err, -EPERM, "store `%s/%s` belongs to uid %u, not to uid %u", dir,
                                 base, (unsigned)st.st_uid, (unsigned)geteuid());
        /* SQLite's locks are per inode; a second name would bypass them. */
        if (st.st_nlink != 1)
                return cage_fail(err, -EMLINK, "store `%s/%s` has %ju hard links", dir, base,
                                 (uintmax_t)st.st_nlink);
        if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0)
                return cage_fail(err, -errno, "chmod 0600 store `%s/%s`", dir, base);
        if (created && fsync(dirfd) < 0)
                return cage_fail(err, -errno, "sync store directory `%s`", dir);
        *ret_st = st;
        return 0;
}

/* SQLite opens <db>-wal and <db>-shm itself and would follow a symlink
 * planted there; refuse anything but our own regular files. */
static int check_sidecar(int dirfd, const char *dir, const char *base, const char *suffix,
                         struct cage_error *err)
{
        char name[NAME_MAX + 1];
        struct stat st;

        if ((size_t)snprintf(name, sizeof(name), "%s%s", base, suffix) >= sizeof(name))
                return cage_fail(err, -ENAMETOOLONG, "store file name `%s%s`", base, suffix);
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : cage_fail(err, -errno, "stat `%s/%s`", dir, name);
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
                return cage_fail(err, -EPERM, "`%s/%s` is not a regular file owned by uid %u", dir,
                                 name, (unsigned)geteuid());
        return 0;
}

/* Resolves the directory (symlinks there are the admin's choice), checks
 * that only we can write it, prepares the file and returns the resolved
 * path SQLite will open with SQLITE_OPEN_NOFOLLOW. */
static int prepare_path(const char *path, char **ret_path, struct stat *ret_st,
                        struct cage_error *err)
{
        if (!path || path[0] != '/')
                return cage_fail(err, -EINVAL, "store path `%s` must be absolute.",
                                 path ? path : "(null)");
        if (strlen(path) >= PATH_MAX)
                return cage_fail(err, -ENAMETOOLONG, "store path");
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return cage_fail(err, -ENOMEM, "store path");
        char *slash = strrchr(copy, '/');
        const char *base = slash + 1;
        if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return cage_fail(err, -EINVAL, "store path `%s` must name a file.", path);
        *slash = '\0';

        _cleanup_free_ char *dir = realpath(copy[0] ? copy : "/", NULL);
        if (!dir)
                return cage_fail(err, -errno, "resolve store directory `%s`", copy[0] ? copy : "/");
        _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (dirfd < 0 || fstat(dirfd, &st) < 0)
                return cage_fail(err, -errno, "open store directory `%s`", dir);
        /* Whoever can write the directory can swap the database under us. */
        if (st.st_uid != geteuid() && st.st_uid != 0)
                return cage_fail(err, -EPERM, "store directory `%s` belongs to uid %u", dir,
                                 (unsigned)st.st_uid);
        if (st.st_mode & (S_IWGRP | S_IWOTH))
                return cage_fail(err, -EPERM,
                                 "store directory `%s` is writable by group or others (mode %04o)",
                                 dir, (unsigned)(st.st_mode & 07777));

        int r = open_db_file(dirfd, dir, base, ret_st, err);
        if (r < 0)
                return r;
        if ((r = check_sidecar(dirfd, dir, base, "-wal", err)) < 0 ||
            (r = check_sidecar(dirfd, dir, base, "-shm", err)) < 0)
                return r;
        if (asprintf(ret_path, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, base) < 0)
                return cage_fail(err, -ENOMEM, "store path");
        return 0;
}

static int pragma_int(sqlite3 *db, const char *sql, int64_t *ret, struct cage_error *err)
{
        _cleanup_finalize_ sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
                return sql_fail(db, err, rc, "store: `%s`", sql);
        *ret = sqlite3_column_int64(st, 0);
        return 0;
}

/* A fresh (empty) database or one of ours; never rewrite someone else's. */
static int check_identity(sqlite3 *db, const char *path, struct cage_error *err)
{
        int64_t app_id, version, n_objects;
        int r;

        if ((r = pragma_int(db, "PRAGMA application_id", &app_id, err)) < 0 ||
            (r = pragma_int(db, "PRAGMA user_version", &version, err)) < 0 ||
            (r = pragma_int(db, "SELECT count(*) FROM sqlite_schema", &n_objects, err)) < 0)
                return r;
        if (app_id == APPLICATION_ID || (app_id == 0 && version == 0 && n_objects == 0))
                return 0;
        return cage_fail(err, -EINVAL,
                         "`%s` is not a codecage store (application_id %#llx, user_version %lld).",
                         path, (unsigned long long)app_id, (long long)version);
}

static int set_wal(sqlite3 *db, struct cage_error *err)
{
        _cleanup_finalize_ sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
                return sql_fail(db, err, rc, "store: set journal_mode WAL");
        const char *mode = (const char *)sqlite3_column_text(st, 0);
        if (!mode || strcmp(mode, "wal") != 0)
                return cage_fail(err, -ENOTSUP, "store: journal_mode is `%s`, not wal",
                                 mode ? mode : "(null)");
        return 0;
}

static int configure(sqlite3 *db, const char *path, struct cage_error *err)
{
        int64_t fk;
        int r;

        sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
        /* No writable_schema tricks, no schema-defined functions with side
         * effects, no extension loading: the file is data, not code. */
        sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
        /* One process owns the store: the first access takes the file lock
         * and keeps it until close, so a second server on the same data
         * directory fails here instead of "recovering" a live server's
         * sandboxes. With EXCLUSIVE set before WAL, no -shm file is used. */
        if ((r = exec_sql(db, "PRAGMA locking_mode = EXCLUSIVE", err)) < 0)
                return r;
        if ((r = check_identity(db, path, err)) < 0 || (r = set_wal(db, err)) < 0 ||
            (r = exec_sql(db,
                          "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;"
                          " PRAGMA journal_size_limit = 4194304;", /* 4 MiB */
                          err)) < 0 ||
            (r = pragma_int(db, "PRAGMA foreign_keys", &fk, err)) < 0)
                return r;
        if (fk != 1)
                return cage_fail(err, -ENOTSUP, "store: this SQLite cannot enforce foreign keys");
        return 0;
}

/* Runs migrations[from] if the database is still at version `from` once
 * the write lock is held (another process may have migrated meanwhile). */
static int migrate_step(sqlite3 *db, int64_t from, struct cage_error *err)
{
        int64_t version;
        char bump[64];
        int r = exec_sql(db, "BEGIN IMMEDIATE", err);
        if (r < 0)
                return r;
        _cleanup_rollback_ sqlite3 *txn = db;
        if ((r = pragma_int(db, "PRAGMA user_version", &version, err)) < 0)
                return r;
        if (version == from) {
                snprintf(bump, sizeof(bump), "PRAGMA user_version = %lld", (long long)from + 1);
                int rc = sqlite3_exec(db, migrations[from], NULL, NULL, NULL);
                if (rc == SQLITE_OK)
                        rc = sqlite3_exec(db, bump, NULL, NULL, NULL);
                if (rc != SQLITE_OK)
                        return sql_fail(db, err, rc, "migrate store to schema version %lld",
                                        (long long)from + 1);
        }
        return exec_sql(db, "COMMIT", err);
}

static int migrate(sqlite3 *db, const char *path, struct cage_error *err)
{
        for (;;) {
                int64_t version;
                int r = pragma_int(db, "PRAGMA user_version", &version, err);
                if (r < 0)
                        return r;
                if (version == CAGE_STORE_SCHEMA_VERSION)
                        return 0;
                if (version < 0 || version > CAGE_STORE_SCHEMA_VERSION)
                        return cage_fail(err, -ENOTSUP,
                                         "store `%s` has schema version %lld; this codecage knows "
                                         "versions up to %d",
                                         path, (long long)version, CAGE_STORE_SCHEMA_VERSION);
                if ((r = migrate_step(db, version, err)) < 0)
                        return r;
        }
}

static int store_new(struct cage_store **ret, struct cage_error *err)
{
        _cleanup_store_ struct cage_store *s = calloc(1, sizeof(*s));
        pthread_mutexattr_t attr;

        if (!s)
                return cage_fail(err, -ENOMEM, "allocate store");
        if (pthread_mutexattr_init(&attr) != 0)
                return cage_fail(err, -ENOMEM, "store mutex");
        /* Error-checking: relocking from a callback fails instead of hanging. */
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
        int r = pthread_mutex_init(&s->lock, &attr);
        pthread_mutexattr_destroy(&attr);
        if (r != 0)
                return cage_fail(err, -r, "store mutex");
        s->lock_ready = true;
        s->sync_full = true;
        *ret = TAKE_PTR(s);
        return 0;
}

int cage_store_open(const char *path, struct cage_store **ret, struct cage_error *err)
{
        _cleanup_free_ char *real = NULL;
        _cleanup_store_ struct cage_store *s = NULL;
        struct stat before = {0}, after;

        if (sqlite3_libversion_number() < SQLITE_MIN_VERSION)
                return cage_fail(err, -ENOTSUP, "store needs SQLite >= 3.38, found %s",
                                 sqlite3_libversion());
        int r = prepare_path(path, &real, &before, err);
        if (r < 0 || (r = store_new(&s, err)) < 0)
                return r;
        /* We created the file above: SQLite must neither create one nor
         * follow a symlink swapped in since (NOFOLLOW); our own mutex
         * serialises the connection (NOMUTEX). */
        int rc =
                sqlite3_open_v2(real, &s->db,
                                SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX |
                                        SQLITE_OPEN_PRIVATECACHE | SQLITE_OPEN_EXRESCODE,
                                NULL);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "open store `%s`", real);
        if (lstat(real, &after) < 0)
                return cage_fail(err, -errno, "stat store `%s`", real);
        if (after.st_dev != before.st_dev || after.st_ino != before.st_ino)
                return cage_fail(err, -ESTALE, "store `%s` was replaced while being opened", real);
        r = configure(s->db, real, err);
        if (r >= 0)
                r = migrate(s->db, real, err);
        if (r == -EBUSY)
                return cage_fail(err, r, "store `%s` is in use by another process", real);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

struct cage_store *cage_store_close(struct cage_store *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < STMT_MAX; i++)
                sqlite3_finalize(s->stmts[i]);
        /* Every statement is finalized, so this closes (and checkpoints). */
        sqlite3_close(s->db);
        if (s->lock_ready)
                pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

/* ---- operations ---------------------------------------------------------- */

/* spec_json must be JSON and labels_json a JSON object. */
static int check_json(struct cage_store *s, const char *spec, const char *labels,
                      struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        int r = store_stmt(s, STMT_CHECK_JSON, &st, err);
        if (r < 0)
                return r;
        int rc = bind_text(st, 1, spec);
        if (rc == SQLITE_OK)
                rc = bind_text(st, 2, labels);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
                return sql_fail(s->db, err, rc, "check spec_json and labels_json");
        if (!sqlite3_column_int(st, 0))
                return cage_fail(err, -EINVAL, "spec_json is not valid JSON.");
        if (!sqlite3_column_int(st, 1))
                return cage_fail(err, -EINVAL, "labels_json must be a JSON object.");
        return 0;
}

static int insert_locked(struct cage_store *s, const struct cage_sandbox_record *rec,
                         const char *id, struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        int64_t created = rec->created_ms ? rec->created_ms : clock_wall_ms();
        int64_t last_used = rec->last_used_ms ? rec->last_used_ms : created;

        int r = check_json(s, rec->spec_json, rec->labels_json ? rec->labels_json : "{}", err);
        if (r < 0 || (r = store_durability(s, true, err)) < 0 ||
            (r = store_stmt(s, STMT_INSERT, &st, err)) < 0)
                return r;
        int rc = bind_insert(st, rec, id, created, last_used);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "bind sandbox `%s`", rec->name);
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
                return 0;
        if (rc == SQLITE_CONSTRAINT_UNIQUE && strstr(sqlite3_errmsg(s->db), "sandboxes.id"))
                return cage_fail(err, -EEXIST, "sandbox id %s is already taken", id);
        if (rc == SQLITE_CONSTRAINT_UNIQUE)
                return cage_fail(err, -EEXIST, "sandbox `%s` already exists for tenant `%s`",
                                 rec->name, rec->tenant);
        return sql_fail(s->db, err, rc, "insert sandbox `%s`", rec->name);
}

int cage_store_insert(struct cage_store *s, const struct cage_sandbox_record *rec,
                      struct cage_sandbox_record **ret, struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        char id[CAGE_STORE_ID_LEN + 1];

        int r = check_record(rec, err);
        if (r < 0)
                return r;
        if (rec->id)
                memcpy(id, rec->id, sizeof(id));
        else if ((r = cage_store_new_id(id, err)) < 0)
                return r;
        if ((r = store_lock(s, &lock, err)) < 0 || (r = insert_locked(s, rec, id, err)) < 0)
                return r;
        return ret ? get_by_id_locked(s, id, ret, err) : 0;
}

int cage_store_get(struct cage_store *s, const char *tenant, const char *name,
                   struct cage_sandbox_record **ret, struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        char what[CAGE_STORE_NAME_MAX + CAGE_STORE_TENANT_MAX + 32];

        int r = check_text("tenant", tenant, CAGE_STORE_TENANT_MAX, true, err);
        if (r < 0 || (r = check_text("name", name, CAGE_STORE_NAME_MAX, true, err)) < 0 ||
            (r = store_lock(s, &lock, err)) < 0 || (r = store_stmt(s, STMT_GET, &st, err)) < 0)
                return r;
        int rc = bind_text(st, 1, tenant);
        if (rc == SQLITE_OK)
                rc = bind_text(st, 2, name);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "bind sandbox `%s`", name);
        snprintf(what, sizeof(what), "sandbox `%s` of tenant `%s`", name, tenant);
        return fetch_one(s->db, st, what, ret, err);
}

int cage_store_get_by_id(struct cage_store *s, const char *id, struct cage_sandbox_record **ret,
                         struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;

        int r = check_id("id", id, err);
        if (r < 0 || (r = store_lock(s, &lock, err)) < 0)
                return r;
        return get_by_id_locked(s, id, ret, err);
}

static int list_push(struct cage_sandbox_list *list, size_t *cap, struct cage_sandbox_record *rec,
                     struct cage_error *err)
{
        if (list->n == *cap) {
                size_t n = *cap ? *cap * 2 : 16;
                struct cage_sandbox_record **items = reallocarray(list->items, n, sizeof(*items));
                if (!items) {
                        cage_sandbox_record_free(rec);
                        return cage_fail(err, -ENOMEM, "list sandboxes");
                }
                list->items = items;
                *cap = n;
        }
        list->items[list->n++] = rec;
        return 0;
}

/* Splits "key=value" into a NUL-terminated copy: *ret_key, *ret_value. */
static int parse_label_filter(const char *filter, char **ret_key, const char **ret_value,
                              struct cage_error *err)
{
        int r = check_text("label filter", filter, CAGE_STORE_LABELS_MAX, false, err);
        if (r < 0 || !filter)
                return r;
        const char *eq = strchr(filter, '=');
        if (!eq || eq == filter)
                return cage_fail(err, -EINVAL, "label filter `%s` must be key=value.", filter);
        char *key = strndup(filter, (size_t)(eq - filter));
        if (!key)
                return cage_fail(err, -ENOMEM, "label filter");
        *ret_key = key;
        *ret_value = eq + 1;
        return 0;
}

int cage_store_list(struct cage_store *s, const char *tenant, const char *label_filter,
                    struct cage_sandbox_list *ret, struct cage_error *err)
{
        _cleanup_free_ char *key = NULL;
        const char *value = NULL;
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        _cleanup_list_ struct cage_sandbox_list list = {0};
        size_t cap = 0;

        int r = check_text("tenant", tenant, CAGE_STORE_TENANT_MAX, true, err);
        if (r < 0 || (r = parse_label_filter(label_filter, &key, &value, err)) < 0 ||
            (r = store_lock(s, &lock, err)) < 0 || (r = store_stmt(s, STMT_LIST, &st, err)) < 0)
                return r;
        int rc = bind_text(st, 1, tenant);
        if (rc == SQLITE_OK)
                rc = bind_text(st, 2, key);
        if (rc == SQLITE_OK)
                rc = bind_text(st, 3, value);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "bind sandbox list of `%s`", tenant);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct cage_sandbox_record *rec;
                if ((r = record_from_row(st, &rec, err)) < 0 ||
                    (r = list_push(&list, &cap, rec, err)) < 0)
                        return r;
        }
        if (rc != SQLITE_DONE)
                return sql_fail(s->db, err, rc, "list sandboxes of tenant `%s`", tenant);
        *ret = list;
        list = (struct cage_sandbox_list){0};
        return 0;
}

/* Runs a cached single-row UPDATE/DELETE keyed by id (?1); -ENOENT if no
 * row matched. bind() fills the other parameters. */
static int change_by_id(struct cage_store *s, enum stmt_id which, const char *id, bool durable,
                        int (*bind)(sqlite3_stmt *st, const void *arg), const void *arg,
                        const char *what, struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        _cleanup_reset_ sqlite3_stmt *st = NULL;

        int r = check_id("id", id, err);
        if (r < 0 || (r = store_lock(s, &lock, err)) < 0 ||
            (r = store_durability(s, durable, err)) < 0 || (r = store_stmt(s, which, &st, err)) < 0)
                return r;
        int rc = bind_text(st, 1, id);
        if (rc == SQLITE_OK && bind)
                rc = bind(st, arg);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "%s sandbox id %s", what, id);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
                return sql_fail(s->db, err, rc, "%s sandbox id %s", what, id);
        if (sqlite3_changes(s->db) == 0)
                return cage_fail(err, -ENOENT, "%s sandbox id %s", what, id);
        return 0;
}

struct state_args {
        enum cage_sandbox_state state;
        const struct cage_sandbox_runtime *rt;
};

static int bind_state_args(sqlite3_stmt *st, const void *arg)
{
        const struct state_args *a = arg;
        return bind_state(st, 2, 3, a->state, a->rt);
}

int cage_store_set_state(struct cage_store *s, const char *id, enum cage_sandbox_state state,
                         const struct cage_sandbox_runtime *rt, struct cage_error *err)
{
        struct state_args args = {state, rt};
        int r = check_runtime(state, rt, err);
        if (r < 0)
                return r;
        return change_by_id(s, STMT_SET_STATE, id, true, bind_state_args, &args, "set state of",
                            err);
}

static int bind_touch(sqlite3_stmt *st, const void *arg)
{
        return sqlite3_bind_int64(st, 2, *(const int64_t *)arg);
}

int cage_store_touch(struct cage_store *s, const char *id, int64_t now, struct cage_error *err)
{
        if (now < 0)
                return cage_fail(err, -EINVAL, "last_used_ms must not be negative.");
        if (now == 0)
                now = clock_wall_ms();
        return change_by_id(s, STMT_TOUCH, id, false, bind_touch, &now, "touch", err);
}

static int check_touches(const struct cage_store_touch *t, size_t n, struct cage_error *err)
{
        int r = 0;
        for (size_t i = 0; r == 0 && i < n; i++) {
                r = check_id("id", t[i].id, err);
                if (r == 0 && t[i].last_used_ms < 0)
                        r = cage_fail(err, -EINVAL, "last_used_ms must not be negative.");
        }
        return r;
}

static int touch_one(struct cage_store *s, const struct cage_store_touch *t, struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        int r = store_stmt(s, STMT_TOUCH, &st, err);
        if (r < 0)
                return r;
        int rc = bind_text(st, 1, t->id);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(st, 2, t->last_used_ms);
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_DONE)
                return 0;
        return sql_fail(s->db, err, rc, "touch sandbox id %s", t->id);
}

int cage_store_touch_many(struct cage_store *s, const struct cage_store_touch *touches, size_t n,
                          struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        int r = check_touches(touches, n, err);
        if (r < 0 || n == 0 || (r = store_lock(s, &lock, err)) < 0 ||
            (r = store_durability(s, false, err)) < 0 ||
            (r = exec_sql(s->db, "BEGIN IMMEDIATE", err)) < 0)
                return r;
        _cleanup_rollback_ sqlite3 *txn = s->db;
        for (size_t i = 0; i < n; i++)
                if ((r = touch_one(s, &touches[i], err)) < 0)
                        return r;
        return exec_sql(s->db, "COMMIT", err);
}

int cage_store_delete(struct cage_store *s, const char *id, struct cage_error *err)
{
        return change_by_id(s, STMT_DELETE, id, true, NULL, NULL, "delete", err);
}

/* Hands each stale record to fn; returns how many, or fn's error. */
static int hand_over_stale(struct cage_store *s, const char *instance, cage_store_stale_fn fn,
                           void *ctx, struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        int r = store_stmt(s, STMT_STALE, &st, err);
        if (r < 0)
                return r;
        int rc = bind_text(st, 1, instance);
        if (rc != SQLITE_OK)
                return sql_fail(s->db, err, rc, "bind server instance");
        int n = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct cage_sandbox_record *rec;
                struct cage_error cb_err = {0};
                if ((r = record_from_row(st, &rec, err)) < 0)
                        return r;
                r = fn ? fn(ctx, rec, &cb_err) : 0;
                if (r < 0)
                        r = cage_fail(err, r, "clean up sandbox `%s` of tenant `%s` (id %s)%s%s",
                                      rec->name, rec->tenant, rec->id, cb_err.code ? ": " : "",
                                      cb_err.code ? cb_err.message : "");
                cage_sandbox_record_free(rec);
                if (r < 0)
                        return r;
                n++;
        }
        if (rc != SQLITE_DONE)
                return sql_fail(s->db, err, rc, "read running sandboxes");
        return n;
}

static int stop_stale(struct cage_store *s, const char *instance, struct cage_error *err)
{
        _cleanup_reset_ sqlite3_stmt *st = NULL;
        int r = store_stmt(s, STMT_STOP_STALE, &st, err);
        if (r < 0)
                return r;
        int rc = bind_text(st, 1, instance);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
                return sql_fail(s->db, err, rc, "mark leftover sandboxes stopped");
        return sqlite3_changes(s->db);
}

int cage_store_mark_all_stopped(struct cage_store *s, const char *current_server_instance,
                                cage_store_stale_fn fn, void *ctx, struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;

        int r = check_text("server_instance", current_server_instance, CAGE_STORE_INSTANCE_MAX,
                           true, err);
        if (r < 0 || (r = store_lock(s, &lock, err)) < 0 ||
            (r = store_durability(s, true, err)) < 0 ||
            (r = exec_sql(s->db, "BEGIN IMMEDIATE", err)) < 0)
                return r;
        /* Cleanup happens before the records change, inside the transaction:
         * a crash halfway leaves them `running`, so the next start retries. */
        _cleanup_rollback_ sqlite3 *txn = s->db;
        int handed = hand_over_stale(s, current_server_instance, fn, ctx, err);
        if (handed < 0)
                return handed;
        int stopped = stop_stale(s, current_server_instance, err);
        if (stopped < 0)
                return stopped;
        if (stopped != handed)
                return cage_fail(err, -EIO, "stopped %d leftover sandboxes but handed over %d",
                                 stopped, handed);
        if ((r = exec_sql(s->db, "COMMIT", err)) < 0)
                return r;
        return stopped;
}

int cage_store_check(struct cage_store *s, struct cage_error *err)
{
        _cleanup_unlock_ pthread_mutex_t *lock = NULL;
        _cleanup_finalize_ sqlite3_stmt *st = NULL;

        int r = store_lock(s, &lock, err);
        if (r < 0)
                return r;
        int rc = sqlite3_prepare_v2(s->db, "PRAGMA integrity_check(1)", -1, &st, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
                return sql_fail(s->db, err, rc, "store integrity check");
        const char *res = (const char *)sqlite3_column_text(st, 0);
        if (!res || strcmp(res, "ok") != 0)
                return cage_fail(err, -EIO, "store integrity check: %s", res ? res : "(null)");
        return 0;
}

struct cage_sandbox_record *cage_sandbox_record_free(struct cage_sandbox_record *rec)
{
        free(rec);
        return NULL;
}

void cage_sandbox_list_free(struct cage_sandbox_list *list)
{
        if (!list)
                return;
        for (size_t i = 0; i < list->n; i++)
                cage_sandbox_record_free(list->items[i]);
        free(list->items);
        list->items = NULL;
        list->n = 0;
}

/* ---- ids ----------------------------------------------------------------- */

int cage_store_new_id(char ret[CAGE_STORE_ID_LEN + 1], struct cage_error *err)
{
        static const char hex[] = "0123456789abcdef";
        unsigned char bytes[CAGE_STORE_ID_LEN / 2];
        size_t got = 0;

        while (got < sizeof(bytes)) {
                ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return cage_fail(err, -errno, "getrandom for a sandbox id");
                got += (size_t)n;
        }
        for (size_t i = 0; i < sizeof(bytes); i++) {
                ret[2 * i] = hex[bytes[i] >> 4];
                ret[2 * i + 1] = hex[bytes[i] & 0xf];
        }
        ret[CAGE_STORE_ID_LEN] = '\0';
        return 0;
}

int cage_store_read_boot_id(char ret[CAGE_STORE_BOOT_ID_LEN + 1], struct cage_error *err)
{
        char buf[64];
        ssize_t n;

        _cleanup_close_ int fd = open(BOOT_ID_PATH, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return cage_fail(err, -errno, "open %s", BOOT_ID_PATH);
        do
                n = read(fd, buf, sizeof(buf) - 1);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return cage_fail(err, -errno, "read %s", BOOT_ID_PATH);
        while (n > 0 && buf[n - 1] == '\n')
                n--;
        if (n != CAGE_STORE_BOOT_ID_LEN)
                return cage_fail(err, -EIO, "%s holds %zd bytes, expected %d", BOOT_ID_PATH, n,
                                 CAGE_STORE_BOOT_ID_LEN);
        memcpy(ret, buf, CAGE_STORE_BOOT_ID_LEN);
        ret[CAGE_STORE_BOOT_ID_LEN] = '\0';
        return 0;
}
