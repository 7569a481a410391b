/* Unit tests for the audit log: one valid JSON object per line, appended
 * across reopen and rotation, secrets redacted wherever they appear in a
 * record, oversized records trimmed instead of split, concurrent writers
 * never interleaved, and a symlink at the path refused. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "services/audit.h"
#include "services/redact.h"

#define SECRET "s3cr3t-\"quoted\\back\nline"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void remove_tmpdir(void)
{
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void tmp_path(char *buf, size_t size, const char *name)
{
        if (!tmpdir[0]) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/codecage-test-audit-XXXXXX");
                if (!mkdtemp(tmpdir))
                        abort();
                atexit(remove_tmpdir);
        }
        snprintf(buf, size, "%s/%s", tmpdir, name);
}

static char *slurp(const char *path, size_t *ret_len)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        char *buf = NULL;
        size_t cap = 0, len = 0, n;
        do {
                if (len + 65536 + 1 > cap) {
                        cap = (len + 65536 + 1) * 2;
                        char *b = realloc(buf, cap);
                        if (!b)
                                break;
                        buf = b;
                }
                n = fread(buf + len, 1, 65536, f);
                len += n;
        } while (n > 0);
        fclose(f);
        if (buf)
                buf[len] = '\0';
        *ret_len = len;
        return buf;
}

/* Parses every line of the file; returns them as a JSON array (NULL if any
 * line is not a JSON object or the file does not end with a newline). */
static json_t *read_records(const char *path)
{
        size_t len = 0;
        char *buf = slurp(path, &len);
        if (!buf)
                return NULL;
        json_t *all = json_array();
        bool ok = len == 0 || buf[len - 1] == '\n';
        for (char *line = buf; ok && *line;) {
                char *nl = strchr(line, '\n');
                if (!nl) {
                        ok = false;
                        break;
                }
                json_error_t jerr;
                json_t *rec = json_loadb(line, (size_t)(nl - line), 0, &jerr);
                if (!json_is_object(rec)) {
                        fprintf(stderr, "  bad line: %.200s (%s)\n", line, jerr.text);
                        json_decref(rec);
                        ok = false;
                        break;
                }
                if ((size_t)(nl - line) + 1 > CAGE_AUDIT_LINE_MAX)
                        ok = false;
                json_array_append_new(all, rec);
                line = nl + 1;
        }
        free(buf);
        if (!ok) {
                json_decref(all);
                return NULL;
        }
        return all;
}

static const char *str(json_t *rec, const char *key)
{
        return json_string_value(json_object_get(rec, key));
}

static struct cage_redactor *secret_redactor(void)
{
        struct cage_redactor *r = NULL;
        if (cage_redactor_new(&r) < 0 ||
            cage_redactor_add(r, "API_KEY", SECRET, strlen(SECRET)) < 0 ||
            cage_redactor_add(r, "PARTIAL", "\xa9z", 2) < 0)
                return cage_redactor_unref(r);
        return r;
}

TEST(event_names_round_trip)
{
        static const char *const names[] = {
                "sandbox.create",       "sandbox.start", "sandbox.stop",  "sandbox.remove",
                "exec.start",           "exec.end",      "run.start",     "run.end",
                "file.write",           "file.read",     "file.delete",   "secret.inject",
                "policy.deny",          "auth.deny",     "network.allow", "network.deny",
                "requirements.install", "image.pull",    "image.import",  "image.remove",
        };
        CHECK(sizeof(names) / sizeof(names[0]) == CAGE_AUDIT_EVENT_COUNT);
        for (int i = 0; i < CAGE_AUDIT_EVENT_COUNT; i++) {
                enum cage_audit_event e;
                CHECK_STREQ(cage_audit_event_to_string((enum cage_audit_event)i), names[i]);
                CHECK(cage_audit_event_from_string(names[i], &e) == 0 && (int)e == i);
        }
        enum cage_audit_event e;
        CHECK(cage_audit_event_from_string("exec.ended", &e) == -EINVAL);
        CHECK(cage_audit_event_to_string(CAGE_AUDIT_EVENT_COUNT) == NULL);
}

TEST(records_are_json_lines)
{
        char path[128];
        tmp_path(path, sizeof(path), "basic.jsonl");
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
        if (!a)
                return;
        struct stat st;
        CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);

        json_t *labels = json_pack("{s:s}", "team", "ml");
        json_t *fields = json_pack("{s:s, s:i, s:n, s:I}", "status", "ok", "exit_code", 0, "signal",
                                   "peak_memory_bytes", (json_int_t)12345678);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "acme", "build-1", labels, fields, &err) ==
              0);
        CHECK(cage_audit_record(a, CAGE_AUDIT_AUTH_DENY, NULL, NULL, NULL, NULL, &err) == 0);
        json_t *inject = json_pack("{s:s}", "name", "API_KEY");
        CHECK(cage_audit_record(a, CAGE_AUDIT_SECRET_INJECT, "acme", "build-1", labels, inject,
                                &err) == 0);
        cage_audit_close(a);

        json_t *recs = read_records(path);
        CHECK(recs && json_array_size(recs) == 3);
        json_t *r0 = json_array_get(recs, 0);
        const char *time = str(r0, "time");
        CHECK(time && strlen(time) == 24 && time[4] == '-' && time[10] == 'T' && time[19] == '.' &&
              time[23] == 'Z');
        CHECK_STREQ(str(r0, "event"), "exec.end");
        CHECK_STREQ(str(r0, "tenant"), "acme");
        CHECK_STREQ(str(r0, "sandbox"), "build-1");
        CHECK_STREQ(str(json_object_get(r0, "labels"), "team"), "ml");
        CHECK_STREQ(str(r0, "status"), "ok");
        CHECK(json_integer_value(json_object_get(r0, "peak_memory_bytes")) == 12345678);
        CHECK(json_is_null(json_object_get(r0, "signal")));
        CHECK(json_object_get(r0, "truncated") == NULL);
        /* The record's own keys come first, in a fixed order. */
        const char *first = json_object_iter_key(json_object_iter(r0));
        CHECK_STREQ(first, "time");

        json_t *r1 = json_array_get(recs, 1);
        CHECK_STREQ(str(r1, "event"), "auth.deny");
        CHECK(json_is_null(json_object_get(r1, "tenant")));
        CHECK(json_is_null(json_object_get(r1, "sandbox")));
        CHECK(json_object_size(json_object_get(r1, "labels")) == 0);
        CHECK_STREQ(str(json_array_get(recs, 2), "name"), "API_KEY");
        json_decref(recs);
        json_decref(labels);
        json_decref(fields);
        json_decref(inject);
}

TEST(records_append_across_reopen_and_rotation)
{
        char path[128], rotated[128];
        tmp_path(path, sizeof(path), "append.jsonl");
        tmp_path(rotated, sizeof(rotated), "append.jsonl.1");
        struct cage_error err = {0};
        for (int round = 0; round < 3; round++) {
                struct cage_audit *a = NULL;
                CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
                CHECK(cage_audit_record(a, CAGE_AUDIT_SANDBOX_CREATE, "t", "s", NULL, NULL, &err) ==
                      0);
                cage_audit_close(a);
        }
        json_t *recs = read_records(path);
        CHECK(recs && json_array_size(recs) == 3);
        json_decref(recs);

        /* logrotate moves the file away; reopen starts a new one. */
        struct cage_audit *a = NULL;
        CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
        CHECK(rename(path, rotated) == 0);
        CHECK(cage_audit_record(a, CAGE_AUDIT_SANDBOX_STOP, "t", "s", NULL, NULL, &err) == 0);
        CHECK(cage_audit_reopen(a, &err) == 0);
        CHECK(cage_audit_record(a, CAGE_AUDIT_SANDBOX_REMOVE, "t", "s", NULL, NULL, &err) == 0);
        cage_audit_close(a);
        recs = read_records(rotated);
        CHECK(recs && json_array_size(recs) == 4);
        json_decref(recs);
        recs = read_records(path);
        CHECK(recs && json_array_size(recs) == 1);
        CHECK(recs && strcmp(str(json_array_get(recs, 0), "event"), "sandbox.remove") == 0);
        json_decref(recs);
}

TEST(secrets_are_redacted_everywhere_in_a_record)
{
        char path[128];
        tmp_path(path, sizeof(path), "secrets.jsonl");
        struct cage_redactor *red = secret_redactor();
        CHECK(red != NULL);
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        CHECK(cage_audit_open(path, red, &a, &err) == 0);
        cage_redactor_unref(red); /* the log keeps its own reference */
        if (!a)
                return;
        json_t *labels = json_pack("{s:s, s:s}", "owner", "x" SECRET "y", SECRET, "as-a-key");
        json_t *fields = json_pack("{s:s, s:[s, {s:s}], s:s}", "reason", "saw " SECRET, "argv",
                                   "curl", "env", "TOKEN=" SECRET, "label", "caf\xc3\xa9z");
        CHECK(cage_audit_record(a, CAGE_AUDIT_POLICY_DENY, "acme", "sb-" SECRET, labels, fields,
                                &err) == 0);
        cage_audit_close(a);

        size_t len = 0;
        char *raw = slurp(path, &len);
        CHECK(raw != NULL);
        if (!raw)
                return;
        /* Neither the raw bytes nor their JSON-escaped form are in the file. */
        CHECK(strstr(raw, "s3cr3t") == NULL);
        CHECK(strstr(raw, SECRET) == NULL);
        free(raw);

        json_t *recs = read_records(path);
        CHECK(recs && json_array_size(recs) == 1);
        json_t *r = json_array_get(recs, 0);
        CHECK_STREQ(str(r, "sandbox"), "sb-[REDACTED:API_KEY]");
        CHECK_STREQ(str(json_object_get(r, "labels"), "owner"), "x[REDACTED:API_KEY]y");
        CHECK_STREQ(str(json_object_get(r, "labels"), "[REDACTED:API_KEY]"), "as-a-key");
        CHECK_STREQ(str(r, "reason"), "saw [REDACTED:API_KEY]");
        json_t *nested = json_array_get(json_object_get(r, "argv"), 1);
        CHECK_STREQ(str(nested, "env"), "TOKEN=[REDACTED:API_KEY]");
        /* Redaction cut a UTF-8 character in two: the line is still valid
         * JSON, with the broken bytes replaced. */
        const char *label = str(r, "label");
        CHECK(label && strstr(label, "[REDACTED:PARTIAL]") && strncmp(label, "caf", 3) == 0);
        json_decref(recs);
        json_decref(labels);
        json_decref(fields);
}

TEST(oversized_records_are_trimmed_not_split)
{
        char path[128];
        tmp_path(path, sizeof(path), "big.jsonl");
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
        if (!a)
                return;
        char *big = malloc(200000);
        memset(big, 'x', 199999);
        big[199999] = '\0';
        json_t *fields = json_pack("{s:s, s:i}", "command", big, "exit_code", 3);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_START, "acme", "s1", NULL, fields, &err) == 0);
        json_t *many = json_object();
        json_t *arr = json_array();
        for (int i = 0; i < 20000; i++)
                json_array_append_new(arr, json_integer(i));
        json_object_set_new(many, "pids", arr);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "acme", "s1", NULL, many, &err) == 0);
        cage_audit_close(a);

        json_t *recs = read_records(path); /* also checks every line <= 64 KiB */
        CHECK(recs && json_array_size(recs) == 2);
        json_t *r0 = json_array_get(recs, 0), *r1 = json_array_get(recs, 1);
        CHECK(json_is_true(json_object_get(r0, "truncated")));
        CHECK(strlen(str(r0, "command")) == CAGE_AUDIT_TRIM_BYTES);
        CHECK(json_integer_value(json_object_get(r0, "exit_code")) == 3);
        CHECK(json_is_true(json_object_get(r1, "truncated")));
        CHECK_STREQ(str(r1, "event"), "exec.end");
        CHECK_STREQ(str(r1, "tenant"), "acme");
        CHECK(json_object_get(r1, "pids") == NULL);
        json_decref(recs);
        json_decref(fields);
        json_decref(many);
        free(big);
}

TEST(bad_records_are_refused_and_write_nothing)
{
        char path[128];
        tmp_path(path, sizeof(path), "bad.jsonl");
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
        if (!a)
                return;
        json_t *clash = json_pack("{s:s}", "event", "forged");
        json_t *upper = json_pack("{s:s}", "Status", "ok");
        json_t *notobj = json_string("x");
        CHECK(cage_audit_record(a, CAGE_AUDIT_EVENT_COUNT, "t", "s", NULL, NULL, &err) == -EINVAL);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "t", "s", NULL, clash, &err) == -EINVAL);
        CHECK(strstr(err.message, "event") != NULL);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "t", "s", NULL, upper, &err) == -EINVAL);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "t", "s", notobj, NULL, &err) == -EINVAL);
        CHECK(cage_audit_record(a, CAGE_AUDIT_EXEC_END, "t", "s", NULL, notobj, &err) == -EINVAL);
        cage_audit_close(a);
        struct stat st;
        CHECK(stat(path, &st) == 0 && st.st_size == 0);
        json_decref(clash);
        json_decref(upper);
        json_decref(notobj);
}

TEST(unsafe_paths_are_refused)
{
        char path[128], target[128];
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        tmp_path(target, sizeof(target), "target");
        tmp_path(path, sizeof(path), "link.jsonl");
        int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        CHECK(fd >= 0);
        if (fd >= 0)
                close(fd);
        CHECK(symlink(target, path) == 0);
        CHECK(cage_audit_open(path, NULL, &a, &err) == -ELOOP);
        CHECK(strstr(err.message, "symbolic link") != NULL);
        /* A dangling symlink must not create its target either. */
        tmp_path(path, sizeof(path), "dangling.jsonl");
        tmp_path(target, sizeof(target), "created-through-link");
        CHECK(symlink(target, path) == 0);
        CHECK(cage_audit_open(path, NULL, &a, &err) == -ELOOP);
        CHECK(access(target, F_OK) < 0);

        /* A file others may write could hold forged records. */
        tmp_path(path, sizeof(path), "shared.jsonl");
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        CHECK(fd >= 0 && fchmod(fd, 0666) == 0);
        if (fd >= 0)
                close(fd);
        CHECK(cage_audit_open(path, NULL, &a, &err) == -EPERM);
        CHECK(strstr(err.message, "writable by group or others") != NULL);

        tmp_path(path, sizeof(path), "fifo.jsonl");
        CHECK(mkfifo(path, 0600) == 0);
        CHECK(cage_audit_open(path, NULL, &a, &err) < 0); /* never blocks */
        CHECK(cage_audit_open(tmpdir, NULL, &a, &err) < 0);
        CHECK(cage_audit_open("relative.jsonl", NULL, &a, &err) == -EINVAL);
        CHECK(a == NULL);
}

struct writer {
        struct cage_audit *audit;
        int id;
        int failures;
};

enum { THREADS = 8, PER_THREAD = 400 };

static void *writer_main(void *arg)
{
        struct writer *w = arg;
        char *pad = malloc(40000);
        for (int i = 0; i < PER_THREAD; i++) {
                /* Sizes from tiny to ~40 KB, so large writes race small ones. */
                size_t n = (size_t)((i * 7919 + w->id * 104729) % 40000);
                memset(pad, 'a' + w->id, n);
                pad[n] = '\0';
                json_t *f = json_pack("{s:i, s:i, s:s}", "writer", w->id, "seq", i, "pad", pad);
                if (cage_audit_record(w->audit, CAGE_AUDIT_FILE_WRITE, "t", "s", NULL, f, NULL) < 0)
                        w->failures++;
                json_decref(f);
        }
        free(pad);
        return NULL;
}

TEST(concurrent_records_never_interleave)
{
        char path[128];
        tmp_path(path, sizeof(path), "threads.jsonl");
        struct cage_audit *a = NULL;
        struct cage_error err = {0};
        CHECK(cage_audit_open(path, NULL, &a, &err) == 0);
        if (!a)
                return;
        pthread_t th[THREADS];
        struct writer w[THREADS];
        for (int i = 0; i < THREADS; i++) {
                w[i] = (struct writer){a, i, 0};
                CHECK(pthread_create(&th[i], NULL, writer_main, &w[i]) == 0);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(th[i], NULL);
                CHECK(w[i].failures == 0);
        }
        cage_audit_close(a);

        json_t *recs = read_records(path);
        CHECK(recs && json_array_size(recs) == THREADS * PER_THREAD);
        int next[THREADS] = {0};
        size_t i;
        json_t *r;
        json_array_foreach(recs, i, r)
        {
                int id = (int)json_integer_value(json_object_get(r, "writer"));
                int seq = (int)json_integer_value(json_object_get(r, "seq"));
                const char *pad = str(r, "pad");
                size_t n = (size_t)((seq * 7919 + id * 104729) % 40000);
                bool ok = id >= 0 && id < THREADS && seq == next[id] && pad && strlen(pad) == n &&
                          strspn(pad, (char[]){(char)('a' + id), 0}) == n;
                CHECK(ok);
                if (!ok)
                        break;
                next[id]++;
        }
        json_decref(recs);
}

RUN_TESTS(T(event_names_round_trip), T(records_are_json_lines),
          T(records_append_across_reopen_and_rotation),
          T(secrets_are_redacted_everywhere_in_a_record),
          T(oversized_records_are_trimmed_not_split), T(bad_records_are_refused_and_write_nothing),
          T(unsafe_paths_are_refused), T(concurrent_records_never_interleave))
