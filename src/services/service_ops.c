/* What an operator watches (docs/OPERATIONS.md): the Prometheus text of
 * the whole service (the counters of metrics.c, per-tenant usage, the
 * registry, the pool's shelves, the image store, the data directory's
 * disk, the process's fds, memory and threads), readiness with its
 * reasons, and draining before a shutdown.
 *
 * A scrape takes the registry's lock once to count sandboxes per tenant
 * and the pool's once for its shelves; the image store's size is a walk
 * of its blobs, so it is cached for IMAGE_SIZE_TTL_MS. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/cgroup.h"
#include "core/launcher.h"
#include "service_private.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fdutil.h"

#define IMAGE_SIZE_TTL_MS 60000
#define DISK_MIN_FREE     (128ULL * 1024 * 1024) /* readiness: at least this free ... */
#define DISK_MIN_PERCENT  5                      /* ... or this share of a smaller disk */
#define DISK_MIN_INODES   1024

static void series(FILE *out, const char *name, const char *type, const char *help, double v)
{
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, v);
}

static void gauge(FILE *out, const char *name, const char *help, double v)
{
        series(out, name, "gauge", help, v);
}

static void counter(FILE *out, const char *name, const char *help, double v)
{
        series(out, name, "counter", help, v);
}

/* ---- the process ---- */

static unsigned count_fds(void)
{
        _cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
        unsigned n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)))
                n += de->d_name[0] != '.';
        return n ? n - 1 : 0; /* the directory's own fd */
}

/* utime, stime (clock ticks), threads, start time (ticks after boot), vsize
 * and rss (pages) from /proc/self/stat. */
struct proc_stat {
        unsigned long long utime, stime, threads, start, vsize, rss;
};

static int read_proc_stat(struct proc_stat *ret)
{
        char buf[1024];
        ssize_t n = read_file_at(AT_FDCWD, "/proc/self/stat", buf, sizeof(buf));
        if (n <= 0)
                return -EIO;
        char *p = strrchr(buf, ')'); /* the command may hold spaces */
        if (!p)
                return -EIO;
        /* Fields from 3 (state) on; utime is 14, stime 15, threads 20,
         * starttime 22, vsize 23, rss 24. */
        unsigned long long f[25] = {0};
        int i = 3;
        for (char *tok = strtok(p + 2, " "); tok && i < 25; tok = strtok(NULL, " "), i++)
                f[i] = strtoull(tok, NULL, 10);
        *ret = (struct proc_stat){.utime = f[14],
                                  .stime = f[15],
                                  .threads = f[20],
                                  .start = f[22],
                                  .vsize = f[23],
                                  .rss = f[24]};
        return 0;
}

static double boot_time_s(void)
{
        char buf[4096];
        ssize_t n = read_file_at(AT_FDCWD, "/proc/stat", buf, sizeof(buf) - 1);
        const char *p = n > 0 ? strstr(buf, "\nbtime ") : NULL;
        return p ? strtod(p + 7, NULL) : 0;
}

static void render_process(FILE *out)
{
        struct proc_stat st;
        struct rlimit rl;
        double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
        gauge(out, "process_open_fds", "Open file descriptors of the server.", count_fds());
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
                gauge(out, "process_max_fds", "The server's RLIMIT_NOFILE.",
                      rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur);
        if (read_proc_stat(&st) < 0)
                return;
        counter(out, "process_cpu_seconds_total", "CPU time of the server (user and system).",
                (double)(st.utime + st.stime) / tick);
        gauge(out, "process_resident_memory_bytes", "Resident memory of the server.",
              (double)st.rss * page);
        gauge(out, "process_virtual_memory_bytes", "Virtual memory of the server.",
              (double)st.vsize);
        gauge(out, "process_threads", "Threads of the server.", (double)st.threads);
        gauge(out, "process_start_time_seconds", "When the server started, Unix time.",
              boot_time_s() + (double)st.start / tick);
}

/* ---- the service ---- */

static void render_sandboxes(struct cage_service *svc, FILE *out)
{
        fprintf(out, "# HELP codecage_sandboxes Named sandboxes held (running or stopped), per "
                     "tenant.\n# TYPE codecage_sandboxes gauge\n");
        pthread_mutex_lock(&svc->lock);
        /* Sandboxes of one tenant are counted in one pass over a sorted copy
         * of the tenant names would cost an allocation; tenants are few, so
         * count per distinct tenant as it first appears. */
        for (struct sb *sb = svc->list; sb; sb = sb->next) {
                bool seen = false;
                for (struct sb *o = svc->list; o != sb && !seen; o = o->next)
                        seen = strcmp(o->tenant, sb->tenant) == 0;
                if (seen)
                        continue;
                unsigned n = 0;
                for (struct sb *o = sb; o; o = o->next)
                        n += strcmp(o->tenant, sb->tenant) == 0;
                fprintf(out, "codecage_sandboxes{tenant=\"");
                cage_metrics_label(out, sb->tenant);
                fprintf(out, "\"} %u\n", n);
        }
        pthread_mutex_unlock(&svc->lock);
}

static void pool_series(FILE *out, const char *name, json_t *shelves, const char *key)
{
        size_t i;
        json_t *s;
        json_array_foreach(shelves, i, s)
        {
                fprintf(out, "%s{image=\"", name);
                cage_metrics_label(out, json_string_value(json_object_get(s, "image")));
                fprintf(out, "\"} %lld\n", (long long)json_integer_value(json_object_get(s, key)));
        }
}

static void render_pool(struct cage_service *svc, FILE *out)
{
        json_auto_t *st = cage_pool_stats(svc->pool);
        json_t *shelves = json_object_get(st, "images");
        static const struct {
                const char *name, *type, *key, *help;
        } series[] = {
                {"codecage_pool_size", "gauge", "size", "Warm sandboxes a shelf keeps."},
                {"codecage_pool_ready", "gauge", "ready", "Warm sandboxes ready now."},
                {"codecage_pool_hits_total", "counter", "hits", "Runs served by a warm sandbox."},
                {"codecage_pool_misses_total", "counter", "misses",
                 "Runs the pool could serve but had nothing ready for (they started cold)."},
        };
        for (size_t i = 0; i < ELEMENTSOF(series); i++) {
                fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", series[i].name, series[i].help,
                        series[i].name, series[i].type);
                pool_series(out, series[i].name, shelves, series[i].key);
        }
        counter(out, "codecage_pool_cold_total",
                "One-shot Python runs whose policy no shelf serves (started cold).",
                (double)json_integer_value(json_object_get(st, "cold")));
}

static void render_images(struct cage_service *svc, FILE *out)
{
        static _Atomic uint64_t cached, cached_at;
        uint64_t now = clock_mono_ms(), at = atomic_load(&cached_at);
        if (svc->images && (!at || now - at > IMAGE_SIZE_TTL_MS)) {
                uint64_t size;
                struct cage_error err = {0};
                if (cage_image_store_size(svc->images, &size, &err) == 0) {
                        atomic_store(&cached, size);
                        atomic_store(&cached_at, now ? now : 1);
                }
        }
        gauge(out, "codecage_image_store_bytes", "Bytes of the image store (blobs and roots).",
              (double)atomic_load(&cached));
}

static void render_disk(struct cage_service *svc, FILE *out)
{
        struct statvfs vfs;
        if (statvfs(svc->cfg->data_dir, &vfs) < 0)
                return;
        gauge(out, "codecage_data_dir_free_bytes", "Free bytes of data_dir's filesystem.",
              (double)vfs.f_bavail * (double)vfs.f_frsize);
        gauge(out, "codecage_data_dir_size_bytes", "Size of data_dir's filesystem.",
              (double)vfs.f_blocks * (double)vfs.f_frsize);
}

int cage_service_metrics(struct cage_service *svc, char **ret, size_t *ret_len)
{
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        if (!out)
                return -ENOMEM;
        fprintf(out,
                "# HELP codecage_build_info The running version.\n"
                "# TYPE codecage_build_info gauge\ncodecage_build_info{version=\"%s\"} 1\n",
                CODECAGE_VERSION);
        gauge(out, "codecage_ready", "1 when /readyz answers 200.",
              cage_service_ready(svc, NULL) ? 1 : 0);
        cage_metrics_render(out);
        svc_usage_render(svc, out);
        render_sandboxes(svc, out);
        render_pool(svc, out);
        render_images(svc, out);
        render_disk(svc, out);
        render_process(out);
        if (fclose(out) != 0) {
                free(text);
                return -ENOMEM;
        }
        *ret = text;
        *ret_len = len;
        return 0;
}

/* ---- readiness ---- */

static void check(json_t *checks, json_t *reasons, const char *name, bool ok, const char *why)
{
        json_object_set_new(checks, name, json_boolean(ok));
        if (!ok)
                json_array_append_new(reasons, json_sprintf("%s: %s", name, why));
}

static bool store_ok(struct cage_service *svc)
{
        struct cage_sandbox_record *rec = NULL;
        struct cage_error err = {0};
        /* A lookup of an id no record has: the database answers or not. */
        int r = svc->store ? cage_store_get_by_id(svc->store, "00000000000000000000000000000000",
                                                  &rec, &err)
                           : -EIO;
        cage_sandbox_record_free(rec);
        return r == 0 || r == -ENOENT;
}

static bool cgroups_ok(void)
{
        struct cgroup_host host;
        struct cage_error err = {0};
        if (launch_detect_cgroups(&host, &err) < 0)
                return false;
        if (host.backend == CGROUP_BACKEND_V2)
                return access(host.v2_parent, W_OK) == 0;
        if (host.backend == CGROUP_BACKEND_V1)
                return access(host.v1_root, R_OK) == 0;
        return true; /* none: the configuration chose no cgroups */
}

/* Every shelf has been filled once (or has given up and says why). */
static bool pool_warm(struct cage_service *svc)
{
        json_auto_t *st = cage_pool_stats(svc->pool);
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(st, "images"), i, s)
        {
                json_int_t size = json_integer_value(json_object_get(s, "size"));
                if (json_integer_value(json_object_get(s, "started")) < size &&
                    json_integer_value(json_object_get(s, "ready")) < size &&
                    json_integer_value(json_object_get(s, "failed")) == 0)
                        return false;
        }
        return true;
}

/* data_dir's free space against the reserve: DISK_MIN_FREE, or
 * DISK_MIN_PERCENT of a smaller filesystem, and DISK_MIN_INODES. */
static int disk_room(struct cage_service *svc, uint64_t *ret_avail, uint64_t *ret_want)
{
        struct statvfs vfs;
        if (statvfs(svc->cfg->data_dir, &vfs) < 0)
                return -errno;
        uint64_t size = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        *ret_avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        *ret_want = size / 100 * DISK_MIN_PERCENT;
        if (*ret_want > DISK_MIN_FREE)
                *ret_want = DISK_MIN_FREE;
        bool ok = *ret_avail >= *ret_want && (vfs.f_files == 0 || vfs.f_favail >= DISK_MIN_INODES);
        return ok ? 0 : -ENOSPC;
}

static bool disk_ok(struct cage_service *svc)
{
        uint64_t avail, want;
        return disk_room(svc, &avail, &want) == 0;
}

int svc_data_dir_room(struct cage_service *svc, struct cage_error *err)
{
        uint64_t avail = 0, want = 0;
        int r = disk_room(svc, &avail, &want);
        if (r == -ENOSPC)
                return cage_fail_plain(err, r,
                                       "the server's data_dir is full (%llu MiB free, it keeps "
                                       "%llu MiB in reserve): no new workspace can be made; "
                                       "try again later",
                                       (unsigned long long)(avail >> 20),
                                       (unsigned long long)(want >> 20));
        return r < 0 ? cage_fail(err, r, "data_dir") : 0;
}

int svc_data_dir_spare(struct cage_service *svc, uint64_t *ret, struct cage_error *err)
{
        uint64_t avail = 0, want = 0;
        int r = disk_room(svc, &avail, &want);
        *ret = r == 0 ? avail - want : 0;
        return r < 0 && r != -ENOSPC ? cage_fail(err, r, "data_dir") : 0;
}

bool cage_service_ready(struct cage_service *svc, json_t **ret)
{
        json_t *checks = json_object(), *reasons = json_array();
        check(checks, reasons, "accepting", !atomic_load(&svc->draining),
              "the server is draining before it stops");
        check(checks, reasons, "store", store_ok(svc), "the metadata store does not answer");
        check(checks, reasons, "cgroups", cgroups_ok(),
              "the cgroup hierarchy cannot be used (codecage doctor says why)");
        check(checks, reasons, "pool", pool_warm(svc), "the warm pool is still filling");
        check(checks, reasons, "disk", disk_ok(svc), "data_dir's filesystem is (nearly) full");
        bool ready = json_array_size(reasons) == 0;
        if (ret)
                *ret = json_pack("{s:s, s:o, s:o}", "status", ready ? "ready" : "not_ready",
                                 "checks", checks, "reasons", reasons);
        else {
                json_decref(checks);
                json_decref(reasons);
        }
        return ready;
}

/* ---- lifecycle ---- */

int cage_service_reload(struct cage_service *svc, const struct cage_config *cfg,
                        struct cage_error *err)
{
        struct cage_redactor *red = NULL;
        int r = cage_config_redactor(cfg, &red, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&svc->lock);
        struct cage_redactor **more =
                reallocarray(svc->retired, svc->n_retired + 1, sizeof(*svc->retired));
        if (!more) {
                pthread_mutex_unlock(&svc->lock);
                cage_redactor_unref(red);
                return cage_fail(err, -ENOMEM, "reload");
        }
        svc->retired = more;
        /* The old redactor may be in use by a call now: kept until close. */
        svc->retired[svc->n_retired++] = atomic_exchange(&svc->redactor, red);
        svc->cfg = cfg;
        pthread_mutex_unlock(&svc->lock);
        cage_audit_set_redactor(svc->audit, red);
        cage_egress_set_config(svc->egress, &cfg->network);
        return 0;
}

const struct cage_config *cage_service_config(struct cage_service *svc)
{
        return atomic_load(&svc->cfg);
}

struct cage_redactor *cage_service_redactor(struct cage_service *svc)
{
        return atomic_load(&svc->redactor);
}

int cage_service_reopen_audit(struct cage_service *svc, struct cage_error *err)
{
        return cage_audit_reopen(svc->audit, err);
}

unsigned cage_service_calls_in_flight(struct cage_service *svc)
{
        return svc_calls_in_flight(svc);
}

bool cage_service_healthy(struct cage_service *svc)
{
        return store_ok(svc);
}

void cage_service_drain(struct cage_service *svc)
{
        atomic_store(&svc->draining, true);
}

bool cage_service_draining(struct cage_service *svc)
{
        return atomic_load(&svc->draining);
}
