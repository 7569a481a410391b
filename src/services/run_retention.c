/* What the server keeps of one-shot runs in <data_dir>/runs/, and for how
 * long: a run's directory (service_exec.c) holds output/, RUN_OWNER_FILE
 * and RUN_BYTES_FILE, the bytes of data its output/ holds. A run goes when
 * it is older than retention_s, or when its tenant's newer runs need the
 * room of its artifacts_mib quota: then that tenant's oldest runs go first,
 * never the run just kept. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service_private.h"
#include "services/files.h"
#include "services/tenancy.h"
#include "util/cleanup.h"
#include "util/clock.h"

#define BYTES_TEXT_MAX 24

bool svc_run_id_valid(const char *id)
{
        return id && strlen(id) == CAGE_STORE_ID_LEN &&
               strspn(id, "0123456789abcdef") == CAGE_STORE_ID_LEN;
}

int svc_run_write_bytes(int run_fd, uint64_t bytes)
{
        char text[BYTES_TEXT_MAX];
        int len = snprintf(text, sizeof(text), "%" PRIu64 "\n", bytes);
        _cleanup_close_ int fd = openat(run_fd, RUN_BYTES_FILE,
                                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, text, (size_t)len);
        return n == len ? 0 : n < 0 ? -errno : -EIO;
}

/* The bytes a run holds; 0 without a readable RUN_BYTES_FILE. */
static uint64_t run_bytes(int run_fd)
{
        char text[BYTES_TEXT_MAX];
        _cleanup_close_ int fd =
                openat(run_fd, RUN_BYTES_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
        if (n <= 0)
                return 0;
        text[n] = '\0';
        return strtoull(text, NULL, 10);
}

void svc_run_remove(int runs_fd, const char *run_id)
{
        _cleanup_close_ int fd = openat(runs_fd, run_id, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
                (void)cage_files_delete(fd, "output", true, NULL);
                (void)unlinkat(fd, RUN_BYTES_FILE, 0);
                (void)unlinkat(fd, RUN_OWNER_FILE, 0);
        }
        (void)unlinkat(runs_fd, run_id, AT_REMOVEDIR);
}

void svc_expire_runs(struct cage_service *svc)
{
        DIR *d = opendir(svc->runs_base);
        if (!d)
                return;
        int64_t cutoff = clock_wall_ms() / 1000 - (int64_t)svc->cfg->retention_s;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                if (!svc_run_id_valid(de->d_name) ||
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    st.st_mtime > cutoff)
                        continue;
                svc_run_remove(dirfd(d), de->d_name);
        }
        closedir(d);
}

/* ---- a tenant's artifacts_mib ---- */

struct kept_run {
        char id[CAGE_STORE_ID_LEN + 1];
        struct timespec mtime;
        uint64_t bytes;
};

struct tenant_runs {
        struct kept_run *v;
        size_t n, cap;
        uint64_t bytes; /* of all of them */
};

static int add_run(struct tenant_runs *t, const char *id, const struct stat *st, uint64_t bytes)
{
        if (t->n == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 64;
                struct kept_run *v = realloc(t->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        struct kept_run *k = &t->v[t->n++];
        memcpy(k->id, id, CAGE_STORE_ID_LEN); /* a valid id: exactly that long */
        k->id[CAGE_STORE_ID_LEN] = '\0';
        k->mtime = st->st_mtim;
        k->bytes = bytes;
        t->bytes += bytes;
        return 0;
}

/* Tenant's runs in runs_fd other than `except`. */
static int list_tenant_runs(int runs_fd, const char *tenant, const char *except,
                            struct tenant_runs *t)
{
        DIR *d = fdopendir(dup(runs_fd));
        if (!d)
                return -errno;
        struct dirent *de;
        int r = 0;
        while (r == 0 && (de = readdir(d))) {
                struct stat st;
                if (!svc_run_id_valid(de->d_name) || strcmp(de->d_name, except) == 0)
                        continue;
                _cleanup_close_ int fd =
                        openat(runs_fd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0 && fstat(fd, &st) == 0 && svc_run_owner_is(fd, tenant))
                        r = add_run(t, de->d_name, &st, run_bytes(fd));
        }
        closedir(d);
        return r;
}

static int cmp_oldest_first(const void *a, const void *b)
{
        const struct kept_run *x = a, *y = b;
        if (x->mtime.tv_sec != y->mtime.tv_sec)
                return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
        if (x->mtime.tv_nsec != y->mtime.tv_nsec)
                return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
        return strcmp(x->id, y->id);
}

int svc_runs_trim_tenant(struct cage_service *svc, const char *tenant, const char *kept_run_id,
                         uint64_t kept_bytes, uint64_t max_bytes)
{
        _cleanup_close_ int runs_fd =
                open(svc->runs_base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (runs_fd < 0)
                return -errno;
        struct tenant_runs t = {0};
        int r = list_tenant_runs(runs_fd, tenant, kept_run_id, &t);
        if (r == 0 && t.n > 1)
                qsort(t.v, t.n, sizeof(*t.v), cmp_oldest_first);
        for (size_t i = 0; r == 0 && i < t.n && t.bytes + kept_bytes > max_bytes; i++) {
                svc_run_remove(runs_fd, t.v[i].id);
                t.bytes -= t.v[i].bytes;
        }
        free(t.v);
        return r;
}
