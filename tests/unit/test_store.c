/* Unit tests for the sandbox metadata store: what the server and its users
 * rely on - round trips, per-tenant names and isolation, state changes,
 * recovery after a crash (mark_all_stopped, kill -9 mid-write), bounds,
 * schema versioning and refusing unsafe database paths. Each test works in
 * its own temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "services/store.h"

#define SPEC   "{\"image\":\"host\",\"memory_mib\":512}"
#define BOOT   "0b2c7a5e-1f6d-4c1e-9a8b-3d2e1f0a9b8c"
#define OLD1   "11111111111111111111111111111111"
#define OLD2   "22222222222222222222222222222222"
#define OURS   "33333333333333333333333333333333"
#define DBNAME "store.db"

struct tmp {
        char dir[64];
        char db[96];
};

static void tmp_make(struct tmp *t)
{
        snprintf(t->dir, sizeof(t->dir), "/tmp/codecage-store-XXXXXX");
        if (!mkdtemp(t->dir)) {
                perror("mkdtemp");
                abort();
        }
        snprintf(t->db, sizeof(t->db), "%s/" DBNAME, t->dir);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st, (void)flag, (void)ftw;
        remove(path);
        return 0;
}

static void tmp_remove(struct tmp *t)
{
        chmod(t->dir, 0700);
        nftw(t->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct cage_store *open_ok(const char *path)
{
        struct cage_store *s = NULL;
        struct cage_error err = {0};
        int r = cage_store_open(path, &s, &err);
        if (r < 0)
                fprintf(stderr, "  open %s: %s\n", path, err.message);
        CHECK(r == 0 && s);
        return s;
}

static struct cage_sandbox_record rec_new(const char *tenant, const char *name)
{
        return (struct cage_sandbox_record){.tenant = tenant, .name = name, .spec_json = SPEC};
}

static struct cage_sandbox_record *insert_ok(struct cage_store *s, const char *tenant,
                                             const char *name, const char *labels)
{
        struct cage_sandbox_record in = rec_new(tenant, name), *out = NULL;
        struct cage_error err = {0};
        in.labels_json = labels;
        int r = cage_store_insert(s, &in, &out, &err);
        if (r < 0)
                fprintf(stderr, "  insert %s/%s: %s\n", tenant, name, err.message);
        CHECK(r == 0 && out);
        return out;
}

static struct cage_sandbox_runtime rt_running(const char *instance, const char *cgroup, pid_t pid)
{
        return (struct cage_sandbox_runtime){.host_uid = 100000,
                                             .cgroup = cgroup,
                                             .init_pid = pid,
                                             .boot_id = BOOT,
                                             .server_instance = instance};
}

static bool is_hex_id(const char *id)
{
        return id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

/* A valid JSON object of exactly len bytes: {"k":"xxx...x"}. */
static char *json_of_len(size_t len, char fill)
{
        char *s = malloc(len + 1);
        memcpy(s, "{\"k\":\"", 6);
        memset(s + 6, fill, len - 8);
        memcpy(s + len - 2, "\"}", 3);
        return s;
}

/* Reads one integer pragma through a separate, raw SQLite connection. */
static long long raw_pragma(const char *path, const char *sql)
{
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        long long v = -1;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
                v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

static int raw_exec(const char *path, const char *sql)
{
        sqlite3 *db = NULL;
        int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        sqlite3_close(db);
        return rc;
}

TEST(create_get_list_delete_roundtrip)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record *made = insert_ok(s, "acme", "demo", "{\"team\":\"ml\"}");
        struct cage_sandbox_record *got = NULL, *by_id = NULL;
        struct cage_sandbox_list list = {0};

        CHECK(made && is_hex_id(made->id));
        CHECK(made && made->state == CAGE_SANDBOX_STOPPED && made->created_ms > 0 &&
              made->last_used_ms == made->created_ms);
        CHECK(cage_store_get(s, "acme", "demo", &got, &err) == 0);
        CHECK_STREQ(got ? got->id : NULL, made ? made->id : NULL);
        CHECK_STREQ(got ? got->spec_json : NULL, SPEC);
        CHECK_STREQ(got ? got->labels_json : NULL, "{\"team\":\"ml\"}");
        CHECK(got && !got->rt.cgroup && !got->rt.boot_id && !got->rt.server_instance &&
              got->rt.init_pid == 0 && got->rt.host_uid == 0);
        CHECK(made && cage_store_get_by_id(s, made->id, &by_id, &err) == 0);
        CHECK_STREQ(by_id ? by_id->name : NULL, "demo");
        CHECK(cage_store_list(s, "acme", NULL, &list, &err) == 0 && list.n == 1);
        CHECK_STREQ(list.n ? list.items[0]->name : NULL, "demo");

        CHECK(made && cage_store_delete(s, made->id, &err) == 0);
        struct cage_sandbox_record *gone = NULL;
        CHECK(cage_store_get(s, "acme", "demo", &gone, &err) == -ENOENT && !gone);
        CHECK(strstr(err.message, "demo") != NULL);
        CHECK(made && cage_store_delete(s, made->id, &err) == -ENOENT);
        cage_sandbox_list_free(&list);
        CHECK(cage_store_list(s, "acme", NULL, &list, &err) == 0 && list.n == 0);

        cage_sandbox_list_free(&list);
        cage_sandbox_record_free(made);
        cage_sandbox_record_free(got);
        cage_sandbox_record_free(by_id);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(names_are_unique_per_tenant_and_tenants_are_isolated)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record dup = rec_new("acme", "demo"),
                                   *a = insert_ok(s, "acme", "demo", NULL);
        struct cage_sandbox_list mine = {0}, theirs = {0}, nobody = {0};

        CHECK(cage_store_insert(s, &dup, NULL, &err) == -EEXIST);
        CHECK(strstr(err.message, "`demo`") && strstr(err.message, "`acme`"));
        struct cage_sandbox_record *b = insert_ok(s, "globex", "demo", NULL);
        cage_sandbox_record_free(insert_ok(s, "globex", "other", NULL));
        CHECK(a && b && strcmp(a->id, b->id) != 0);

        CHECK(cage_store_list(s, "acme", NULL, &mine, &err) == 0 && mine.n == 1);
        for (size_t i = 0; i < mine.n; i++)
                CHECK_STREQ(mine.items[i]->tenant, "acme");
        CHECK(cage_store_list(s, "globex", NULL, &theirs, &err) == 0 && theirs.n == 2);
        for (size_t i = 0; i < theirs.n; i++)
                CHECK_STREQ(theirs.items[i]->tenant, "globex");
        CHECK(cage_store_list(s, "initech", NULL, &nobody, &err) == 0 && nobody.n == 0);
        struct cage_sandbox_record *cross = NULL;
        CHECK(cage_store_get(s, "acme", "other", &cross, &err) == -ENOENT && !cross);

        cage_sandbox_list_free(&mine);
        cage_sandbox_list_free(&theirs);
        cage_sandbox_list_free(&nobody);
        cage_sandbox_record_free(a);
        cage_sandbox_record_free(b);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(list_is_ordered_by_name_and_filters_labels)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_list all = {0}, ml = {0}, none = {0};
        cage_sandbox_record_free(insert_ok(s, "acme", "charlie", "{\"team\":\"ml\"}"));
        cage_sandbox_record_free(insert_ok(s, "acme", "alpha", "{\"team\":\"web\",\"x\":\"ml\"}"));
        cage_sandbox_record_free(insert_ok(s, "acme", "bravo", "{\"team\":\"ml\",\"a.b\":\"1\"}"));
        cage_sandbox_record_free(insert_ok(s, "globex", "delta", "{\"team\":\"ml\"}"));

        CHECK(cage_store_list(s, "acme", NULL, &all, &err) == 0 && all.n == 3);
        CHECK(all.n == 3 && strcmp(all.items[0]->name, "alpha") == 0 &&
              strcmp(all.items[1]->name, "bravo") == 0 &&
              strcmp(all.items[2]->name, "charlie") == 0);
        CHECK(cage_store_list(s, "acme", "team=ml", &ml, &err) == 0 && ml.n == 2);
        CHECK(ml.n == 2 && strcmp(ml.items[0]->name, "bravo") == 0 &&
              strcmp(ml.items[1]->name, "charlie") == 0);
        cage_sandbox_list_free(&ml);
        CHECK(cage_store_list(s, "acme", "a.b=1", &ml, &err) == 0 && ml.n == 1);
        CHECK(cage_store_list(s, "acme", "team=ops", &none, &err) == 0 && none.n == 0);
        CHECK(cage_store_list(s, "acme", "no-equals-sign", &none, &err) == -EINVAL);
        CHECK(strstr(err.message, "key=value") != NULL);

        cage_sandbox_list_free(&all);
        cage_sandbox_list_free(&ml);
        cage_sandbox_list_free(&none);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(state_update_sets_and_clears_runtime_fields)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record *r = insert_ok(s, "acme", "demo", NULL), *got = NULL;
        struct cage_sandbox_runtime rt = rt_running(OURS, "codecage/sbx-demo", 4242);
        const char *id = r ? r->id : OLD1;

        CHECK(cage_store_set_state(s, id, CAGE_SANDBOX_RUNNING, &rt, &err) == 0);
        CHECK(cage_store_get(s, "acme", "demo", &got, &err) == 0);
        CHECK(got && got->state == CAGE_SANDBOX_RUNNING && got->rt.host_uid == 100000 &&
              got->rt.init_pid == 4242);
        CHECK_STREQ(got ? got->rt.cgroup : NULL, "codecage/sbx-demo");
        CHECK_STREQ(got ? got->rt.boot_id : NULL, BOOT);
        CHECK_STREQ(got ? got->rt.server_instance : NULL, OURS);
        got = cage_sandbox_record_free(got);

        /* Running without knowing which boot / server started it is refused
         * and changes nothing. */
        struct cage_sandbox_runtime bad = rt;
        bad.boot_id = NULL;
        CHECK(cage_store_set_state(s, id, CAGE_SANDBOX_RUNNING, &bad, &err) == -EINVAL);
        CHECK(strstr(err.message, "boot_id") != NULL);
        CHECK(cage_store_get(s, "acme", "demo", &got, &err) == 0);
        CHECK_STREQ(got ? got->rt.boot_id : NULL, BOOT);
        got = cage_sandbox_record_free(got);

        CHECK(cage_store_set_state(s, id, CAGE_SANDBOX_STOPPED, &rt, &err) == 0);
        CHECK(cage_store_get(s, "acme", "demo", &got, &err) == 0);
        CHECK(got && got->state == CAGE_SANDBOX_STOPPED && !got->rt.cgroup && !got->rt.boot_id &&
              !got->rt.server_instance && got->rt.init_pid == 0 && got->rt.host_uid == 0);
        CHECK(cage_store_set_state(s, OLD1, CAGE_SANDBOX_STOPPED, NULL, &err) == -ENOENT);

        cage_sandbox_record_free(got);
        cage_sandbox_record_free(r);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(touch_only_moves_last_used_forward)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record in = rec_new("acme", "demo"), *r = NULL, *got = NULL;
        in.created_ms = 1000;

        CHECK(cage_store_insert(s, &in, &r, &err) == 0 && r && r->last_used_ms == 1000);
        const char *id = r ? r->id : OLD1;
        CHECK(cage_store_touch(s, id, 5000, &err) == 0);
        CHECK(cage_store_touch(s, id, 3000, &err) == 0);
        CHECK(cage_store_get_by_id(s, id, &got, &err) == 0 && got && got->last_used_ms == 5000);
        got = cage_sandbox_record_free(got);
        CHECK(cage_store_touch(s, id, 0, &err) == 0);
        CHECK(cage_store_get_by_id(s, id, &got, &err) == 0 && got && got->last_used_ms > 5000 &&
              got->created_ms == 1000);
        CHECK(cage_store_touch(s, OLD1, 0, &err) == -ENOENT);

        cage_sandbox_record_free(got);
        cage_sandbox_record_free(r);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(touch_many_moves_each_record_forward_and_passes_over_a_gone_one)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record a_in = rec_new("acme", "a"), b_in = rec_new("acme", "b");
        struct cage_sandbox_record *a = NULL, *b = NULL, *got = NULL;
        a_in.created_ms = b_in.created_ms = 1000;
        CHECK(cage_store_insert(s, &a_in, &a, &err) == 0 && a);
        CHECK(cage_store_insert(s, &b_in, &b, &err) == 0 && b);
        if (!a || !b)
                goto out;
        struct cage_store_touch touches[] = {{a->id, 7000}, {OLD1, 9000}, {b->id, 500}};
        CHECK(cage_store_touch_many(s, touches, 3, &err) == 0);
        CHECK(cage_store_get_by_id(s, a->id, &got, &err) == 0 && got && got->last_used_ms == 7000);
        got = cage_sandbox_record_free(got);
        CHECK(cage_store_get_by_id(s, b->id, &got, &err) == 0 && got && got->last_used_ms == 1000);
        got = cage_sandbox_record_free(got);
        struct cage_store_touch bad[] = {{a->id, 8000}, {b->id, -1}};
        CHECK(cage_store_touch_many(s, bad, 2, &err) == -EINVAL);
        CHECK(cage_store_get_by_id(s, a->id, &got, &err) == 0 && got && got->last_used_ms == 7000);
out:
        cage_sandbox_record_free(got);
        cage_sandbox_record_free(a);
        cage_sandbox_record_free(b);
        cage_store_close(s);
        tmp_remove(&t);
}

struct seen {
        int n;
        char names[8][64];
        char cgroups[8][64];
        pid_t pids[8];
        int fail_at;              /* 1-based call that fails; 0 = never */
        struct cage_store *store; /* set: re-enter the store from the callback */
};

static int collect(void *ctx, const struct cage_sandbox_record *rec, struct cage_error *err)
{
        struct seen *seen = ctx;
        if (seen->store) {
                struct cage_sandbox_record *inner = NULL;
                int r = cage_store_get(seen->store, rec->tenant, rec->name, &inner, err);
                cage_sandbox_record_free(inner);
                return r < 0 ? r : -EPROTO;
        }
        if (seen->n < 8) {
                snprintf(seen->names[seen->n], 64, "%s/%s", rec->tenant, rec->name);
                snprintf(seen->cgroups[seen->n], 64, "%s", rec->rt.cgroup ? rec->rt.cgroup : "");
                seen->pids[seen->n] = rec->rt.init_pid;
        }
        seen->n++;
        if (seen->fail_at && seen->n == seen->fail_at) {
                snprintf(err->message, sizeof(err->message), "cgroup busy");
                err->code = -EBUSY;
                return -EBUSY;
        }
        return 0;
}

/* a, d: running under old instances; b: running under ours; c: stopped. */
static void make_recovery_fixture(struct cage_store *s)
{
        struct cage_error err = {0};
        const char *names[] = {"a", "b", "c", "d"};
        const char *owners[] = {OLD1, OURS, NULL, OLD2};
        for (int i = 0; i < 4; i++) {
                struct cage_sandbox_record in = rec_new(i == 3 ? "globex" : "acme", names[i]);
                char cg[32];
                snprintf(cg, sizeof(cg), "codecage/sbx-%s", names[i]);
                if (owners[i]) {
                        in.state = CAGE_SANDBOX_RUNNING;
                        in.rt = rt_running(owners[i], cg, 1000 + i);
                }
                CHECK(cage_store_insert(s, &in, NULL, &err) == 0);
        }
}

static enum cage_sandbox_state state_of(struct cage_store *s, const char *tenant, const char *name,
                                        struct cage_sandbox_record *copy)
{
        struct cage_sandbox_record *r = NULL;
        struct cage_error err = {0};
        CHECK(cage_store_get(s, tenant, name, &r, &err) == 0 && r);
        if (!r)
                return (enum cage_sandbox_state) - 1;
        enum cage_sandbox_state st = r->state;
        if (copy)
                *copy = (struct cage_sandbox_record){.rt.cgroup = r->rt.cgroup ? "set" : NULL,
                                                     .rt.init_pid = r->rt.init_pid};
        cage_sandbox_record_free(r);
        return st;
}

TEST(mark_all_stopped_returns_exactly_other_instances_running_records)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct seen seen = {0};
        struct cage_sandbox_record a = {0}, b = {0};
        make_recovery_fixture(s);

        CHECK(cage_store_mark_all_stopped(s, OURS, collect, &seen, &err) == 2);
        CHECK(seen.n == 2);
        CHECK_STREQ(seen.names[0], "acme/a");
        CHECK_STREQ(seen.cgroups[0], "codecage/sbx-a");
        CHECK(seen.pids[0] == 1000);
        CHECK_STREQ(seen.names[1], "globex/d");
        CHECK_STREQ(seen.cgroups[1], "codecage/sbx-d");
        CHECK(seen.pids[1] == 1003);

        CHECK(state_of(s, "acme", "a", &a) == CAGE_SANDBOX_STOPPED && !a.rt.cgroup &&
              a.rt.init_pid == 0);
        CHECK(state_of(s, "acme", "b", &b) == CAGE_SANDBOX_RUNNING && b.rt.cgroup &&
              b.rt.init_pid == 1001);
        CHECK(state_of(s, "acme", "c", NULL) == CAGE_SANDBOX_STOPPED);
        CHECK(state_of(s, "globex", "d", NULL) == CAGE_SANDBOX_STOPPED);

        seen.n = 0;
        CHECK(cage_store_mark_all_stopped(s, OURS, collect, &seen, &err) == 0 && seen.n == 0);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(mark_all_stopped_changes_nothing_when_cleanup_fails)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct seen seen = {.fail_at = 2};
        make_recovery_fixture(s);

        CHECK(cage_store_mark_all_stopped(s, OURS, collect, &seen, &err) == -EBUSY);
        CHECK(strstr(err.message, "`d`") && strstr(err.message, "cgroup busy"));
        CHECK(state_of(s, "acme", "a", NULL) == CAGE_SANDBOX_RUNNING);
        CHECK(state_of(s, "globex", "d", NULL) == CAGE_SANDBOX_RUNNING);

        /* A callback that calls back into the store gets an error, not a hang. */
        struct seen reenter = {.store = s};
        CHECK(cage_store_mark_all_stopped(s, OURS, collect, &reenter, &err) == -EDEADLK);
        CHECK(state_of(s, "acme", "a", NULL) == CAGE_SANDBOX_RUNNING);

        seen = (struct seen){0};
        CHECK(cage_store_mark_all_stopped(s, OURS, collect, &seen, &err) == 2 && seen.n == 2);
        cage_store_close(s);
        tmp_remove(&t);
}

static void check_refused(struct cage_store *s, struct cage_sandbox_record in, const char *field)
{
        struct cage_error err = {0};
        int r = cage_store_insert(s, &in, NULL, &err);
        CHECK(r == -EINVAL);
        if (!strstr(err.message, field)) {
                fprintf(stderr, "  message `%s` does not name `%s`\n", err.message, field);
                CHECK(strstr(err.message, field) != NULL);
        }
}

TEST(oversize_and_invalid_fields_are_refused)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        char name64[65], name63[64];
        memset(name64, 'n', 64), name64[64] = '\0';
        memset(name63, 'n', 63), name63[63] = '\0';
        char *spec_max = json_of_len(CAGE_STORE_SPEC_MAX, 's');
        char *spec_big = json_of_len(CAGE_STORE_SPEC_MAX + 1, 's');
        char *labels_max = json_of_len(CAGE_STORE_LABELS_MAX, 'l');
        char *labels_big = json_of_len(CAGE_STORE_LABELS_MAX + 1, 'l');
        struct cage_sandbox_record in;

        check_refused(s, rec_new("acme", name64), "name");
        check_refused(s, rec_new(name64, "demo"), "tenant");
        check_refused(s, rec_new("acme", ""), "name");
        in = rec_new("acme", "demo"), in.spec_json = spec_big;
        check_refused(s, in, "spec_json");
        in = rec_new("acme", "demo"), in.labels_json = labels_big;
        check_refused(s, in, "labels_json");
        in = rec_new("acme", "demo"), in.spec_json = "{not json";
        check_refused(s, in, "spec_json");
        in = rec_new("acme", "demo"), in.labels_json = "[\"a\"]";
        check_refused(s, in, "labels_json");
        in = rec_new("acme", "demo"), in.id = "NOT-A-HEX-ID";
        check_refused(s, in, "id");

        /* Exactly at every bound is fine. */
        in = rec_new(name63, name63), in.spec_json = spec_max, in.labels_json = labels_max;
        struct cage_sandbox_record *ok = NULL;
        CHECK(cage_store_insert(s, &in, &ok, &err) == 0 && ok);
        CHECK(ok && strlen(ok->spec_json) == CAGE_STORE_SPEC_MAX &&
              strlen(ok->labels_json) == CAGE_STORE_LABELS_MAX);

        char cgroup[CAGE_STORE_CGROUP_MAX + 2];
        memset(cgroup, 'c', sizeof(cgroup) - 1), cgroup[sizeof(cgroup) - 1] = '\0';
        struct cage_sandbox_runtime rt = rt_running(OURS, cgroup, 1);
        CHECK(ok && cage_store_set_state(s, ok->id, CAGE_SANDBOX_RUNNING, &rt, &err) == -EINVAL);
        CHECK(strstr(err.message, "cgroup") != NULL);

        struct cage_sandbox_list list = {0};
        CHECK(cage_store_list(s, "acme", NULL, &list, &err) == 0 && list.n == 0);
        cage_sandbox_list_free(&list);
        CHECK(cage_store_list(s, name63, NULL, &list, &err) == 0 && list.n == 1);
        CHECK(list.n == 1 && list.items[0]->state == CAGE_SANDBOX_STOPPED);
        cage_sandbox_list_free(&list);

        cage_sandbox_record_free(ok);
        free(spec_max), free(spec_big), free(labels_max), free(labels_big);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(reopen_keeps_data_and_schema_is_versioned)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        struct cage_sandbox_record *a = insert_ok(s, "acme", "a", "{\"k\":\"v\"}");
        cage_sandbox_record_free(insert_ok(s, "acme", "b", NULL));
        struct cage_sandbox_runtime rt = rt_running(OLD1, "codecage/sbx-a", 77);
        CHECK(a && cage_store_set_state(s, a->id, CAGE_SANDBOX_RUNNING, &rt, &err) == 0);
        struct stat st;
        CHECK(stat(t.db, &st) == 0 && (st.st_mode & 07777) == 0600);
        char wal[128];
        snprintf(wal, sizeof(wal), "%s-wal", t.db);
        CHECK(stat(wal, &st) == 0 && (st.st_mode & 07777) == 0600);
        s = cage_store_close(s);

        s = open_ok(t.db);
        if (!s)
                return;
        struct cage_sandbox_list list = {0};
        struct cage_sandbox_record *got = NULL;
        CHECK(cage_store_list(s, "acme", NULL, &list, &err) == 0 && list.n == 2);
        CHECK(cage_store_get(s, "acme", "a", &got, &err) == 0);
        CHECK(got && a && strcmp(got->id, a->id) == 0 && got->state == CAGE_SANDBOX_RUNNING &&
              got->rt.init_pid == 77);
        CHECK_STREQ(got ? got->labels_json : NULL, "{\"k\":\"v\"}");
        CHECK(cage_store_check(s, &err) == 0);
        cage_store_close(s);

        CHECK(raw_pragma(t.db, "PRAGMA user_version") == CAGE_STORE_SCHEMA_VERSION);
        CHECK(raw_pragma(t.db, "PRAGMA application_id") == 0x43414745);
        CHECK(raw_pragma(t.db, "SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = "
                               "'wal'") == 1);
        cage_sandbox_list_free(&list);
        cage_sandbox_record_free(got);
        cage_sandbox_record_free(a);
        tmp_remove(&t);
}

TEST(newer_schema_and_foreign_databases_are_refused)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db), *again = NULL;
        if (!s)
                return;
        struct cage_error err = {0};
        cage_store_close(s);

        CHECK(raw_exec(t.db, "PRAGMA user_version = 99") == SQLITE_OK);
        CHECK(cage_store_open(t.db, &again, &err) == -ENOTSUP && !again);
        CHECK(strstr(err.message, "99") != NULL);

        char other[128];
        snprintf(other, sizeof(other), "%s/other.db", t.dir);
        CHECK(raw_exec(other, "CREATE TABLE precious (x); INSERT INTO precious VALUES (1)") ==
              SQLITE_OK);
        CHECK(cage_store_open(other, &again, &err) == -EINVAL && !again);
        CHECK(strstr(err.message, "not a codecage store") != NULL);
        CHECK(raw_pragma(other, "SELECT count(*) FROM sqlite_schema") == 1);
        tmp_remove(&t);
}

TEST(symlink_at_db_path_is_refused)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = NULL;
        struct cage_error err = {0};
        char target[128], dangling[128], link_path[128];
        snprintf(target, sizeof(target), "%s/precious", t.dir);
        snprintf(dangling, sizeof(dangling), "%s/not-there", t.dir);
        snprintf(link_path, sizeof(link_path), "%s/dangling.db", t.dir);
        FILE *f = fopen(target, "w");
        CHECK(f && fputs("precious", f) >= 0);
        if (f)
                fclose(f);

        CHECK(symlink(target, t.db) == 0);
        CHECK(cage_store_open(t.db, &s, &err) == -ELOOP && !s);
        CHECK(strstr(err.message, "symbolic link") != NULL);
        struct stat st;
        CHECK(stat(target, &st) == 0 && st.st_size == 8);

        CHECK(symlink(dangling, link_path) == 0);
        CHECK(cage_store_open(link_path, &s, &err) == -ELOOP && !s);
        CHECK(access(dangling, F_OK) < 0 && errno == ENOENT);

        /* A symlinked *directory* is an admin's choice and is followed. */
        char real_dir[128], dir_link[128], via_link[160];
        snprintf(real_dir, sizeof(real_dir), "%s/real", t.dir);
        snprintf(dir_link, sizeof(dir_link), "%s/link", t.dir);
        snprintf(via_link, sizeof(via_link), "%s/store.db", dir_link);
        CHECK(mkdir(real_dir, 0700) == 0 && symlink(real_dir, dir_link) == 0);
        s = open_ok(via_link);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(unsafe_paths_are_refused)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = NULL;
        struct cage_error err = {0};

        CHECK(cage_store_open("relative/store.db", &s, &err) == -EINVAL && !s);
        CHECK(chmod(t.dir, 0777) == 0);
        CHECK(cage_store_open(t.db, &s, &err) == -EPERM && !s);
        CHECK(strstr(err.message, "writable by group or others") != NULL);
        CHECK(access(t.db, F_OK) < 0);
        CHECK(chmod(t.dir, 0700) == 0);

        char wal[128];
        snprintf(wal, sizeof(wal), "%s-wal", t.db);
        char target[128];
        snprintf(target, sizeof(target), "%s/wal-target", t.dir);
        CHECK(symlink(target, wal) == 0);
        CHECK(cage_store_open(t.db, &s, &err) == -EPERM && !s);
        CHECK(access(target, F_OK) < 0);
        tmp_remove(&t);
}

TEST(second_process_cannot_open_a_store_in_use)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        cage_sandbox_record_free(insert_ok(s, "acme", "demo", NULL));
        pid_t pid = fork();
        if (pid == 0) {
                struct cage_store *other = NULL;
                struct cage_error err = {0};
                int r = cage_store_open(t.db, &other, &err);
                _exit(r == -EBUSY && strstr(err.message, "in use") ? 0 : 1);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        cage_store_close(s);

        /* Once the owner is gone the store opens again. */
        s = open_ok(t.db);
        cage_store_close(s);
        tmp_remove(&t);
}

/* ---- crash safety ---------------------------------------------------------- */

#define CRASH_SPEC_PAD 12000

static void crash_spec(char *buf, size_t size, int round, int i)
{
        int n = snprintf(buf, size, "{\"round\":%d,\"i\":%d,\"pad\":\"", round, i);
        memset(buf + n, 'a' + (i % 26), CRASH_SPEC_PAD);
        snprintf(buf + n + CRASH_SPEC_PAD, size - (size_t)n - CRASH_SPEC_PAD, "\"}");
}

/* Inserts records as fast as it can, flipping one record's state between
 * inserts, and reports each committed index on wfd; never returns. */
static void crash_child(const char *path, int wfd, int round)
{
        struct cage_store *s = NULL;
        struct cage_error err = {0};
        static char spec[CRASH_SPEC_PAD + 128];
        if (cage_store_open(path, &s, &err) < 0)
                _exit(3);
        for (int i = 0;; i++) {
                char name[32];
                struct cage_sandbox_record in = rec_new("acme", name), *first = NULL;
                snprintf(name, sizeof(name), "r%d-%06d", round, i);
                crash_spec(spec, sizeof(spec), round, i);
                in.spec_json = spec;
                if (cage_store_insert(s, &in, NULL, &err) < 0)
                        _exit(4);
                struct cage_sandbox_runtime rt = rt_running(OLD1, "codecage/x", 100 + i);
                if (cage_store_get(s, "acme", "r0-000000", &first, &err) == 0)
                        cage_store_set_state(s, first->id,
                                             i % 2 ? CAGE_SANDBOX_RUNNING : CAGE_SANDBOX_STOPPED,
                                             &rt, &err);
                cage_sandbox_record_free(first);
                if (write(wfd, &i, sizeof(i)) != sizeof(i))
                        _exit(5);
        }
}

/* Kills a writer after `after` commits, then returns the last index it
 * reported committed (-1 if none). */
static int crash_round(const char *path, int round, int after)
{
        int fds[2];
        CHECK(pipe2(fds, O_CLOEXEC) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
                close(fds[0]);
                crash_child(path, fds[1], round);
        }
        close(fds[1]);
        int i, last = -1;
        while (read(fds[0], &i, sizeof(i)) == sizeof(i)) {
                last = i;
                if (i + 1 >= after)
                        break;
        }
        kill(pid, SIGKILL);
        while (read(fds[0], &i, sizeof(i)) == sizeof(i))
                last = i;
        close(fds[0]);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        return last;
}

TEST(kill_9_mid_write_keeps_every_committed_record)
{
        struct tmp t;
        tmp_make(&t);
        static const int after[] = {5, 37, 80};
        int last[3];
        static char want[CRASH_SPEC_PAD + 128];

        for (int round = 0; round < 3; round++) {
                last[round] = crash_round(t.db, round, after[round]);
                CHECK(last[round] + 1 >= after[round]);

                struct cage_store *s = open_ok(t.db);

                if (!s)

                        return;
                struct cage_error err = {0};
                if (!s)
                        break;
                CHECK(cage_store_check(s, &err) == 0);
                for (int r = 0; r <= round; r++) {
                        int missing = 0, wrong = 0;
                        for (int i = 0; i <= last[r]; i++) {
                                char name[32];
                                struct cage_sandbox_record *got = NULL;
                                snprintf(name, sizeof(name), "r%d-%06d", r, i);
                                crash_spec(want, sizeof(want), r, i);
                                if (cage_store_get(s, "acme", name, &got, &err) < 0)
                                        missing++;
                                else if (strcmp(got->spec_json, want) != 0)
                                        wrong++;
                                cage_sandbox_record_free(got);
                        }
                        CHECK(missing == 0 && wrong == 0);
                }
                /* The flipped record is in one of its two valid shapes. */
                struct cage_sandbox_record *first = NULL;
                CHECK(cage_store_get(s, "acme", "r0-000000", &first, &err) == 0);
                CHECK(first && (first->state == CAGE_SANDBOX_RUNNING) ==
                                       (first->rt.server_instance != NULL));
                cage_sandbox_record_free(first);
                cage_store_close(s);
        }
        tmp_remove(&t);
}

/* ---- threads --------------------------------------------------------------- */

#define THREADS            8
#define INSERTS_PER_THREAD 40

struct worker {
        struct cage_store *store;
        int index;
        int failures;
};

static void *worker_run(void *arg)
{
        struct worker *w = arg;
        for (int i = 0; i < INSERTS_PER_THREAD; i++) {
                char name[32];
                struct cage_error err = {0};
                struct cage_sandbox_record in = rec_new("acme", name), *out = NULL;
                struct cage_sandbox_list list = {0};
                snprintf(name, sizeof(name), "t%d-%03d", w->index, i);
                if (cage_store_insert(w->store, &in, &out, &err) < 0 ||
                    cage_store_touch(w->store, out->id, 0, &err) < 0 ||
                    cage_store_list(w->store, "acme", NULL, &list, &err) < 0)
                        w->failures++;
                cage_sandbox_list_free(&list);
                cage_sandbox_record_free(out);
        }
        return NULL;
}

TEST(one_store_is_shared_by_many_threads)
{
        struct tmp t;
        tmp_make(&t);
        struct cage_store *s = open_ok(t.db);
        if (!s)
                return;
        struct cage_error err = {0};
        pthread_t th[THREADS];
        struct worker w[THREADS];

        for (int i = 0; i < THREADS; i++) {
                w[i] = (struct worker){.store = s, .index = i};
                CHECK(pthread_create(&th[i], NULL, worker_run, &w[i]) == 0);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(th[i], NULL);
                CHECK(w[i].failures == 0);
        }
        struct cage_sandbox_list list = {0};
        CHECK(cage_store_list(s, "acme", NULL, &list, &err) == 0 &&
              list.n == THREADS * INSERTS_PER_THREAD);
        CHECK(cage_store_check(s, &err) == 0);
        cage_sandbox_list_free(&list);
        cage_store_close(s);
        tmp_remove(&t);
}

TEST(ids_states_and_boot_id)
{
        char a[CAGE_STORE_ID_LEN + 1], b[CAGE_STORE_ID_LEN + 1];
        char boot[CAGE_STORE_BOOT_ID_LEN + 1];
        struct cage_error err = {0};
        enum cage_sandbox_state st;

        CHECK(cage_store_new_id(a, &err) == 0 && cage_store_new_id(b, &err) == 0);
        CHECK(is_hex_id(a) && is_hex_id(b) && strcmp(a, b) != 0);
        CHECK(cage_store_read_boot_id(boot, &err) == 0 && strlen(boot) == 36 && boot[8] == '-');
        CHECK_STREQ(cage_sandbox_state_to_string(CAGE_SANDBOX_RUNNING), "running");
        CHECK_STREQ(cage_sandbox_state_to_string(CAGE_SANDBOX_STOPPED), "stopped");
        CHECK(cage_sandbox_state_from_string("running", &st) == 0 && st == CAGE_SANDBOX_RUNNING);
        CHECK(cage_sandbox_state_from_string("stopped", &st) == 0 && st == CAGE_SANDBOX_STOPPED);
        CHECK(cage_sandbox_state_from_string("removed", &st) == -EINVAL);
}

RUN_TESTS(T(create_get_list_delete_roundtrip),
          T(names_are_unique_per_tenant_and_tenants_are_isolated),
          T(list_is_ordered_by_name_and_filters_labels),
          T(state_update_sets_and_clears_runtime_fields), T(touch_only_moves_last_used_forward),
          T(touch_many_moves_each_record_forward_and_passes_over_a_gone_one),
          T(mark_all_stopped_returns_exactly_other_instances_running_records),
          T(mark_all_stopped_changes_nothing_when_cleanup_fails),
          T(oversize_and_invalid_fields_are_refused), T(reopen_keeps_data_and_schema_is_versioned),
          T(newer_schema_and_foreign_databases_are_refused), T(symlink_at_db_path_is_refused),
          T(unsafe_paths_are_refused), T(second_process_cannot_open_a_store_in_use),
          T(kill_9_mid_write_keeps_every_committed_record), T(one_store_is_shared_by_many_threads),
          T(ids_states_and_boot_id))
