/* The audit log; the record format and guarantees are in audit.h and
 * docs/AUDIT.md.
 *
 * A record is built as a fresh JSON tree (never the caller's objects), with
 * every string value and every key below the top level redacted as raw
 * bytes before serialisation: redacting the serialised line instead would
 * miss secrets whose JSON escaping differs from their bytes (quotes,
 * backslashes, control characters) and could cut through the JSON syntax.
 * Serialisation happens outside the lock; only the write(2) is inside. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "redact.h"
#include "services/metrics.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

struct cage_audit {
        pthread_mutex_t lock; /* guards fd and the write */
        int fd;
        char *path;
        struct cage_redactor *_Atomic redactor; /* swapped on reload; callers keep old ones */
};

static const char *const event_names[CAGE_AUDIT_EVENT_COUNT] = {
        [CAGE_AUDIT_SANDBOX_CREATE] = "sandbox.create",
        [CAGE_AUDIT_SANDBOX_START] = "sandbox.start",
        [CAGE_AUDIT_SANDBOX_STOP] = "sandbox.stop",
        [CAGE_AUDIT_SANDBOX_REMOVE] = "sandbox.remove",
        [CAGE_AUDIT_EXEC_START] = "exec.start",
        [CAGE_AUDIT_EXEC_END] = "exec.end",
        [CAGE_AUDIT_RUN_START] = "run.start",
        [CAGE_AUDIT_RUN_END] = "run.end",
        [CAGE_AUDIT_FILE_WRITE] = "file.write",
        [CAGE_AUDIT_FILE_READ] = "file.read",
        [CAGE_AUDIT_FILE_DELETE] = "file.delete",
        [CAGE_AUDIT_SECRET_INJECT] = "secret.inject",
        [CAGE_AUDIT_POLICY_DENY] = "policy.deny",
        [CAGE_AUDIT_AUTH_DENY] = "auth.deny",
        [CAGE_AUDIT_NETWORK_ALLOW] = "network.allow",
        [CAGE_AUDIT_NETWORK_DENY] = "network.deny",
        [CAGE_AUDIT_REQUIREMENTS_INSTALL] = "requirements.install",
        [CAGE_AUDIT_IMAGE_PULL] = "image.pull",
        [CAGE_AUDIT_IMAGE_IMPORT] = "image.import",
        [CAGE_AUDIT_IMAGE_REMOVE] = "image.remove",
};

/* Keys the record itself uses; fields cannot override them. */
static const char *const reserved_keys[] = {"time",    "event",  "tenant",
                                            "sandbox", "labels", "truncated"};

const char *cage_audit_event_to_string(enum cage_audit_event event)
{
        if ((unsigned)event >= CAGE_AUDIT_EVENT_COUNT)
                return NULL;
        return event_names[event];
}

int cage_audit_event_from_string(const char *s, enum cage_audit_event *ret)
{
        for (size_t i = 0; s && i < CAGE_AUDIT_EVENT_COUNT; i++)
                if (strcmp(s, event_names[i]) == 0) {
                        *ret = (enum cage_audit_event)i;
                        return 0;
                }
        return -EINVAL;
}

/* ---- opening ------------------------------------------------------------ */

static int open_log(const char *path, int *ret_fd, struct cage_error *err)
{
        /* O_NOFOLLOW: a symlink planted at the path must not redirect the log
         * into another file. O_NONBLOCK: a FIFO must not block the open. */
        _cleanup_close_ int fd =
                open(path,
                     O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK,
                     0600);
        if (fd < 0 && errno == ELOOP)
                return cage_fail(err, -ELOOP,
                                 "audit_log: \"%s\" is a symbolic link, which is refused", path);
        if (fd < 0)
                return cage_fail(err, -errno, "audit_log: cannot open \"%s\"", path);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return cage_fail(err, -errno, "audit_log: cannot stat \"%s\"", path);
        if (!S_ISREG(st.st_mode))
                return cage_fail(err, -EINVAL, "audit_log: \"%s\" is not a regular file", path);
        if (st.st_uid != geteuid())
                return cage_fail(err, -EPERM,
                                 "audit_log: \"%s\" is owned by uid %u, not by codecage (uid %u)",
                                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        if (st.st_mode & (S_IWGRP | S_IWOTH))
                return cage_fail(err, -EPERM,
                                 "audit_log: \"%s\" is writable by group or others (mode %04o); "
                                 "anyone could forge records",
                                 path, (unsigned)(st.st_mode & 07777));
        int r = fd_set_nonblock(fd, false);
        if (r < 0)
                return cage_fail(err, r, "audit_log: \"%s\"", path);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int cage_audit_open(const char *path, struct cage_redactor *redactor, struct cage_audit **ret,
                    struct cage_error *err)
{
        if (!path || path[0] != '/')
                return cage_fail(err, -EINVAL, "audit_log: \"%s\" must be an absolute path",
                                 path ? path : "");
        _cleanup_free_ struct cage_audit *a = calloc(1, sizeof(*a));
        if (!a)
                return cage_fail(err, -ENOMEM, "audit_log");
        a->path = strdup(path);
        if (!a->path)
                return cage_fail(err, -ENOMEM, "audit_log");
        int r = open_log(path, &a->fd, err);
        if (r < 0) {
                free(a->path);
                return r;
        }
        r = -pthread_mutex_init(&a->lock, NULL);
        if (r < 0) {
                close(a->fd);
                free(a->path);
                return cage_fail(err, r, "audit_log: mutex");
        }
        a->redactor = cage_redactor_ref(redactor);
        *ret = TAKE_PTR(a);
        return 0;
}

void cage_audit_set_redactor(struct cage_audit *a, struct cage_redactor *redactor)
{
        struct cage_redactor *old = atomic_exchange(&a->redactor, cage_redactor_ref(redactor));
        cage_redactor_unref(old);
}

int cage_audit_reopen(struct cage_audit *a, struct cage_error *err)
{
        int fd, r = open_log(a->path, &fd, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&a->lock);
        int old = a->fd;
        a->fd = fd;
        pthread_mutex_unlock(&a->lock);
        close(old);
        return 0;
}

struct cage_audit *cage_audit_close(struct cage_audit *a)
{
        if (!a)
                return NULL;
        pthread_mutex_destroy(&a->lock);
        if (a->fd >= 0)
                close(a->fd);
        cage_redactor_unref(a->redactor);
        free(a->path);
        free(a);
        return NULL;
}

/* ---- building a record -------------------------------------------------- */

struct build {
        const struct cage_redactor *redactor;
        size_t trim; /* cut strings to this many bytes; 0 = keep all */
        bool truncated;
};

/* Length of the longest prefix of s[0..len) of at most max bytes that does
 * not end inside a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t len, size_t max)
{
        if (len <= max)
                return len;
        size_t n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
                n--;
        return n;
}

/* A JSON string of s[0..len): redacted, cut when trimming, and valid UTF-8
 * (redacting a value that is not UTF-8 can split a character; the non-ASCII
 * bytes of such a string become '?'). */
static json_t *clean_string(struct build *b, const char *s, size_t len)
{
        _cleanup_free_ char *red = NULL;
        size_t n = len;
        if (cage_redact_needed(b->redactor, s, len)) {
                if (cage_redact(b->redactor, s, len, &red, &n) < 0)
                        return NULL;
                s = red;
        }
        if (b->trim && n > b->trim) {
                n = utf8_cut(s, n, b->trim);
                b->truncated = true;
        }
        json_t *j = json_stringn(s, n);
        if (j || !n)
                return j;
        _cleanup_free_ char *ascii = malloc(n);
        if (!ascii)
                return NULL;
        for (size_t i = 0; i < n; i++)
                ascii[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
        return json_stringn(ascii, n);
}

/* A redacted copy of v; keys are redacted too. NULL on ENOMEM. */
static json_t *clean_value(struct build *b, json_t *v, unsigned depth)
{
        if (depth > CAGE_AUDIT_DEPTH_MAX) {
                b->truncated = true;
                return json_string("[...]");
        }
        if (json_is_string(v))
                return clean_string(b, json_string_value(v), json_string_length(v));
        if (json_is_object(v)) {
                json_auto_t *o = json_object();
                if (!o)
                        return NULL;
                const char *key;
                json_t *child;
                json_object_foreach(v, key, child)
                {
                        json_auto_t *k = clean_string(b, key, strlen(key));
                        if (!k || json_object_set_new(o, json_string_value(k),
                                                      clean_value(b, child, depth + 1)) < 0)
                                return NULL;
                }
                return json_incref(o);
        }
        if (json_is_array(v)) {
                json_auto_t *a = json_array();
                if (!a)
                        return NULL;
                size_t i;
                json_t *child;
                json_array_foreach(v, i, child)
                {
                        if (json_array_append_new(a, clean_value(b, child, depth + 1)) < 0)
                                return NULL;
                }
                return json_incref(a);
        }
        return json_copy(v); /* numbers, booleans, null */
}

static bool field_key_is_valid(const char *k)
{
        size_t n = strlen(k);
        if (n == 0 || n > 64 || strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(reserved_keys); i++)
                if (strcmp(k, reserved_keys[i]) == 0)
                        return false;
        return true;
}

static void format_time(char *buf, size_t size)
{
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

struct record_in {
        const char *time, *event, *tenant, *sandbox;
        json_t *labels, *fields;
};

static json_t *id_value(struct build *b, const char *s)
{
        if (!s)
                return json_null();
        size_t len = strlen(s);
        size_t keep = utf8_cut(s, len, CAGE_AUDIT_ID_MAX);
        if (keep < len)
                b->truncated = true;
        return clean_string(b, s, keep);
}

/* Serialises one record: level 0 keeps everything, level 1 trims strings,
 * level 2 also drops labels and fields. *ret ends with a newline. */
static int render(const struct cage_redactor *red, const struct record_in *in, int level,
                  char **ret, size_t *ret_len)
{
        struct build b = {.redactor = red, .trim = level ? CAGE_AUDIT_TRIM_BYTES : 0};
        json_auto_t *rec = json_object();
        if (!rec || json_object_set_new(rec, "time", json_string(in->time)) < 0 ||
            json_object_set_new(rec, "event", json_string(in->event)) < 0 ||
            json_object_set_new(rec, "tenant", id_value(&b, in->tenant)) < 0 ||
            json_object_set_new(rec, "sandbox", id_value(&b, in->sandbox)) < 0)
                return -ENOMEM;
        json_t *labels = in->labels && level < 2 ? clean_value(&b, in->labels, 1) : json_object();
        if (json_object_set_new(rec, "labels", labels) < 0)
                return -ENOMEM;
        if (level >= 2 && ((in->labels && json_object_size(in->labels)) ||
                           (in->fields && json_object_size(in->fields))))
                b.truncated = true;
        const char *key;
        json_t *v;
        if (level < 2 && in->fields)
                json_object_foreach(in->fields, key, v)
                {
                        if (json_object_set_new(rec, key, clean_value(&b, v, 1)) < 0)
                                return -ENOMEM;
                }
        if (b.truncated && json_object_set_new(rec, "truncated", json_true()) < 0)
                return -ENOMEM;
        char *s = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!s)
                return -ENOMEM;
        size_t n = strlen(s);
        char *line = realloc(s, n + 2);
        if (!line) {
                free(s);
                return -ENOMEM;
        }
        line[n++] = '\n';
        line[n] = '\0';
        *ret = line;
        *ret_len = n;
        return 0;
}

int cage_audit_record(struct cage_audit *a, enum cage_audit_event event, const char *tenant,
                      const char *sandbox, json_t *labels, json_t *fields, struct cage_error *err)
{
        const char *name = cage_audit_event_to_string(event);
        if (!a || !name)
                return cage_fail(err, -EINVAL, "audit: unknown event %d", (int)event);
        if (labels && !json_is_object(labels))
                return cage_fail(err, -EINVAL, "audit %s: labels must be a JSON object", name);
        if (fields && !json_is_object(fields))
                return cage_fail(err, -EINVAL, "audit %s: fields must be a JSON object", name);
        const char *key;
        json_t *v;
        if (fields)
                json_object_foreach(fields, key, v)
                {
                        (void)v;
                        if (!field_key_is_valid(key))
                                return cage_fail(
                                        err, -EINVAL,
                                        "audit %s: field \"%.64s\" must be [a-z0-9_]{1,64} "
                                        "and not a key the record itself uses",
                                        name, key);
                }
        char now[64];
        format_time(now, sizeof(now));
        struct record_in in = {now, name, tenant, sandbox, labels, fields};
        _cleanup_free_ char *line = NULL;
        size_t len = 0;
        for (int level = 0; level < 3; level++) {
                free(TAKE_PTR(line));
                int r = render(a->redactor, &in, level, &line, &len);
                if (r < 0)
                        return cage_fail(err, r, "audit %s: building the record", name);
                if (len <= CAGE_AUDIT_LINE_MAX)
                        break;
        }
        if (len > CAGE_AUDIT_LINE_MAX)
                return cage_fail(err, -E2BIG, "audit %s: record too large", name);
        /* One write(2) on an O_APPEND fd: the kernel appends it whole. The
         * loop only matters when the disk fills mid-record. */
        pthread_mutex_lock(&a->lock);
        int r = write_all(a->fd, line, len);
        pthread_mutex_unlock(&a->lock);
        if (r < 0) {
                cage_metrics_audit_error();
                return cage_fail(err, r, "audit %s: writing \"%s\"", name, a->path);
        }
        return 0;
}
