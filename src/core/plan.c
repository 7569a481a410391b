/* Launch plan construction; see plan.h.
 *
 * The `host` image exposes the host's /usr (and the top-level bin/sbin/lib*
 * entries, as symlinks when the host has merged /usr) read-only, and an /etc
 * holding only what programs need: the dynamic linker cache, TLS
 * certificates, the alternatives links, and synthetic passwd, group, hosts,
 * resolv.conf, nsswitch.conf and hostname. Nothing else of the host's /etc,
 * and no /root, /home, /var or /run, is visible. A directory image exposes
 * that directory's top level read-only instead. */
#include "plan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define SCRATCH_BYTES_PER_INODE 8192 /* 131072 files in the default 1 GiB */
#define SCRATCH_INODES_MIN      1024

static const char etc_passwd[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                 "sandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n"
                                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char etc_group[] = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n";
static const char etc_hosts[] = "127.0.0.1\tlocalhost codecage\n::1\tlocalhost ip6-localhost "
                                "ip6-loopback\n";
static const char etc_resolv[] = "# codecage: no DNS inside the sandbox\n";
static const char etc_nsswitch[] = "passwd: files\ngroup: files\nhosts: files dns\n";
static const char etc_hostname[] = "codecage\n";

#define LD_CACHE_MAX (16 * 1024 * 1024)

static pthread_once_t ld_cache_once = PTHREAD_ONCE_INIT;
static char *ld_cache;
static size_t ld_cache_len;

static void load_ld_cache(void)
{
        _cleanup_close_ int fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > LD_CACHE_MAX)
                return;
        char *buf = malloc((size_t)st.st_size);
        if (!buf)
                return;
        ssize_t n = read_full(fd, buf, (size_t)st.st_size);
        if (n != st.st_size) {
                free(buf);
                return;
        }
        ld_cache = buf;
        ld_cache_len = (size_t)n;
}

static struct root_entry *add_entry(struct launch_plan *plan, enum root_entry_kind kind,
                                    const char *path, const char *source)
{
        if (plan->n_root >= ROOT_ENTRIES_MAX)
                return NULL;
        struct root_entry *e = &plan->root[plan->n_root++];
        *e = (struct root_entry){.kind = kind};
        snprintf(e->path, sizeof(e->path), "%s", path);
        if (source)
                snprintf(e->source, sizeof(e->source), "%s", source);
        return e;
}

static int add_data(struct launch_plan *plan, const char *path, const char *data, size_t len)
{
        struct root_entry *e = add_entry(plan, ROOT_ENTRY_FILE_DATA, path, NULL);
        if (!e)
                return -E2BIG;
        e->data = data;
        e->data_len = len;
        return 0;
}

/* Mirrors host path `host` at `path`: a symlink as the same symlink, a
 * directory or file as a read-only bind; absent entries are skipped. */
static int mirror_host(struct launch_plan *plan, const char *path, const char *host)
{
        struct stat st;
        if (lstat(host, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (S_ISLNK(st.st_mode)) {
                char target[256];
                ssize_t n = readlink(host, target, sizeof(target) - 1);
                if (n < 0)
                        return -errno;
                target[n] = '\0';
                return add_entry(plan, ROOT_ENTRY_SYMLINK, path, target) ? 0 : -E2BIG;
        }
        enum root_entry_kind kind =
                S_ISDIR(st.st_mode) ? ROOT_ENTRY_DIR_BIND : ROOT_ENTRY_FILE_BIND;
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                return 0;
        return add_entry(plan, kind, path, host) ? 0 : -E2BIG;
}

static int build_host_etc(struct launch_plan *plan)
{
        static const char *const mirrored[][2] = {
                {"etc/ssl/certs", "/etc/ssl/certs"},
                {"etc/ssl/openssl.cnf", "/etc/ssl/openssl.cnf"},
                {"etc/alternatives", "/etc/alternatives"},
                {"etc/localtime", "/etc/localtime"},
                {"etc/os-release", "/etc/os-release"},
        };
        int r = 0;
        pthread_once(&ld_cache_once, load_ld_cache);
        if (!add_entry(plan, ROOT_ENTRY_EMPTY_DIR, "etc", NULL) ||
            !add_entry(plan, ROOT_ENTRY_EMPTY_DIR, "etc/ssl", NULL))
                return -E2BIG;
        if ((r = add_data(plan, "etc/passwd", etc_passwd, sizeof(etc_passwd) - 1)) < 0 ||
            (r = add_data(plan, "etc/group", etc_group, sizeof(etc_group) - 1)) < 0 ||
            (r = add_data(plan, "etc/hosts", etc_hosts, sizeof(etc_hosts) - 1)) < 0 ||
            (r = add_data(plan, "etc/resolv.conf", etc_resolv, sizeof(etc_resolv) - 1)) < 0 ||
            (r = add_data(plan, "etc/nsswitch.conf", etc_nsswitch, sizeof(etc_nsswitch) - 1)) < 0 ||
            (r = add_data(plan, "etc/hostname", etc_hostname, sizeof(etc_hostname) - 1)) < 0)
                return r;
        if (ld_cache && (r = add_data(plan, "etc/ld.so.cache", ld_cache, ld_cache_len)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(mirrored); i++)
                if ((r = mirror_host(plan, mirrored[i][0], mirrored[i][1])) < 0)
                        return r;
        return 0;
}

static int build_host_image(struct launch_plan *plan)
{
        static const char *const top[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
        int r;
        for (size_t i = 0; i < ELEMENTSOF(top); i++) {
                char host[64];
                snprintf(host, sizeof(host), "/%s", top[i]);
                if ((r = mirror_host(plan, top[i], host)) < 0)
                        return r;
        }
        if ((r = build_host_etc(plan)) < 0)
                return r;
        if (!add_entry(plan, ROOT_ENTRY_EMPTY_DIR, "var", NULL) ||
            !add_entry(plan, ROOT_ENTRY_SYMLINK, "var/tmp", "/tmp"))
                return -E2BIG;
        return 0;
}

static bool reserved_top_level(const char *name)
{
        static const char *const reserved[] = {".",   "..",  "proc",      "dev",       "sys",
                                               "tmp", "run", "workspace", "lost+found"};
        for (size_t i = 0; i < ELEMENTSOF(reserved); i++)
                if (strcmp(name, reserved[i]) == 0)
                        return true;
        return false;
}

/* The image's own /etc stays, but for the files that describe this
 * sandbox (its name and its network), which are ours when the image has
 * them. */
static int cover_image_etc(struct launch_plan *plan)
{
        static const struct {
                const char *path;
                const char *data;
                size_t len;
        } covered[] = {
                {"etc/hosts", etc_hosts, sizeof(etc_hosts) - 1},
                {"etc/resolv.conf", etc_resolv, sizeof(etc_resolv) - 1},
                {"etc/hostname", etc_hostname, sizeof(etc_hostname) - 1},
        };
        for (size_t i = 0; i < ELEMENTSOF(covered); i++) {
                struct root_entry *e = add_entry(plan, ROOT_ENTRY_FILE_OVER, covered[i].path, NULL);
                if (!e)
                        return -E2BIG;
                e->data = covered[i].data;
                e->data_len = covered[i].len;
        }
        return 0;
}

static int build_dir_image(struct launch_plan *plan, const char *dir, struct cage_error *err)
{
        DIR *d = opendir(dir);
        if (!d)
                return cage_fail(err, -errno, "image: cannot open directory \"%s\"", dir);
        int r = 0;
        struct dirent *de;
        while (r == 0 && (de = readdir(d))) {
                if (reserved_top_level(de->d_name))
                        continue;
                char host[PATH_MAX];
                if (snprintf(host, sizeof(host), "%s/%s", dir, de->d_name) >= (int)sizeof(host))
                        continue;
                r = mirror_host(plan, de->d_name, host);
        }
        closedir(d);
        if (r == 0)
                r = cover_image_etc(plan);
        if (r < 0)
                return cage_fail(err, r, "image: reading \"%s\"", dir);
        return 0;
}

/* /proc files that reveal host-wide state. Only those this kernel lets an
 * unprivileged user open at all need a mask (the others are mode 0400 root
 * and the sandbox user has no capabilities): fewer mounts per launch. */
static const char *const proc_sensitive[] = {
        "kcore",         "keys",      "key-users",  "timer_list",  "sched_debug",
        "latency_stats", "kmsg",      "kpagecount", "kpageflags",  "kpagecgroup",
        "sysrq-trigger", "kallsyms",  "config.gz",  "vmallocinfo", "pagetypeinfo",
        "slabinfo",      "buddyinfo", "zoneinfo",   "mtrr",        "iomem",
};

static void plan_proc_masks(struct launch_plan *plan)
{
        plan->n_proc_masked = 0;
        for (size_t i = 0; i < ELEMENTSOF(proc_sensitive); i++) {
                char path[64];
                struct stat st;
                snprintf(path, sizeof(path), "/proc/%s", proc_sensitive[i]);
                if (stat(path, &st) == 0 && (st.st_mode & (S_IROTH | S_IWOTH)) &&
                    plan->n_proc_masked < ELEMENTSOF(plan->proc_masked))
                        plan->proc_masked[plan->n_proc_masked++] = proc_sensitive[i];
        }
}

static const char *const default_env[] = {
        "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        "HOME=/workspace",
        "USER=sandbox",
        "LOGNAME=sandbox",
        "LANG=C.UTF-8",
        "TMPDIR=/tmp",
};

static bool env_overridden(const struct cage_spec *spec, const char *def)
{
        size_t klen = (size_t)(strchr(def, '=') - def) + 1;
        for (size_t i = 0; i < spec->n_env; i++)
                if (strncmp(spec->env[i], def, klen) == 0)
                        return true;
        return false;
}

void plan_arg_area(uintptr_t *ret_start, uintptr_t *ret_end)
{
        _cleanup_close_ int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        char buf[2048];
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        *ret_start = *ret_end = 0;
        if (n <= 0)
                return;
        buf[n] = '\0';
        char *p = strrchr(buf, ')'); /* comm may hold spaces */
        if (!p)
                return;
        unsigned long long start = 0, end = 0;
        /* p + 2 is field 3; arg_start and arg_end are fields 48 and 49. */
        p += 2;
        for (int field = 3; field < 48 && p; field++)
                if ((p = strchr(p, ' ')))
                        p++;
        if (p && sscanf(p, "%llu %llu", &start, &end) == 2 && end > start)
                *ret_start = (uintptr_t)start, *ret_end = (uintptr_t)end;
}

/* The supervisor's argv area, which init, a copy of the supervisor, wipes
 * before the program starts. */
static void find_arg_area(struct launch_plan *plan)
{
        plan_arg_area(&plan->arg_start, &plan->arg_end);
}

char *plan_copy_str(char **pos, const char *s)
{
        if (!s)
                return NULL;
        size_t n = strlen(s) + 1;
        char *d = memcpy(*pos, s, n);
        *pos += n;
        return d;
}

/* Copies what the program's exec needs out of the spec (whose strings may
 * sit in the argv area init wipes): argv, workdir and the env strings. */
static int copy_exec_strings(struct launch_plan *plan, const struct cage_spec *spec,
                             const char **envp, size_t n_env)
{
        size_t argc = 0, bytes = strlen(spec->workdir) + 1;
        while (spec->argv[argc])
                bytes += strlen(spec->argv[argc++]) + 1;
        for (size_t i = 0; i < n_env; i++)
                bytes += strlen(envp[i]) + 1;
        char **argv = calloc(argc + 1, sizeof(*argv));
        char *pos = malloc(bytes);
        if (!argv || !pos) {
                free(argv);
                free(pos);
                return -ENOMEM;
        }
        plan->strings = pos;
        for (size_t i = 0; i < argc; i++)
                argv[i] = plan_copy_str(&pos, spec->argv[i]);
        plan->argv = argv;
        plan->workdir = plan_copy_str(&pos, spec->workdir);
        for (size_t i = 0; i < n_env; i++)
                envp[i] = plan_copy_str(&pos, envp[i]);
        return 0;
}

/* The environment is rebuilt from nothing: fixed defaults, then the spec's
 * variables (which win). Nothing of the supervisor's environment leaks. */
static int build_env(struct launch_plan *plan, const struct cage_spec *spec)
{
        if (spec->debug_disable & CAGE_DEBUG_KEEP_ENV) {
                extern char **environ;
                plan->envp = environ;
                plan->envp_borrowed = true;
                plan->path_env = getenv("PATH");
                return copy_exec_strings(plan, spec, NULL, 0);
        }
        size_t n = 0, max = ELEMENTSOF(default_env) + spec->n_env + 1;
        const char **envp = calloc(max, sizeof(*envp));
        if (!envp)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(default_env); i++)
                if (!env_overridden(spec, default_env[i]))
                        envp[n++] = default_env[i];
        for (size_t i = 0; i < spec->n_env; i++)
                envp[n++] = spec->env[i];
        envp[n] = NULL;
        int r = copy_exec_strings(plan, spec, envp, n);
        if (r < 0) {
                free(envp);
                return r;
        }
        plan->path_env = NULL;
        for (size_t i = 0; i < n; i++)
                if (strncmp(envp[i], "PATH=", 5) == 0)
                        plan->path_env = envp[i] + 5;
        plan->envp = (char *const *)envp;
        return 0;
}

static bool spec_mounts_workspace(const struct cage_spec *spec)
{
        for (size_t i = 0; i < spec->n_mounts; i++)
                if (strcmp(spec->mounts[i].target, "/workspace") == 0)
                        return true;
        return false;
}

/* A missing mount source or image is the caller's mistake: say so before
 * launching, as an invalid request rather than an internal error. */
int plan_check_inputs(const struct cage_spec *spec, struct cage_error *err)
{
        struct stat st;
        if (strcmp(spec->image, "host") != 0 &&
            (stat(spec->image, &st) < 0 || !S_ISDIR(st.st_mode)))
                return cage_fail(err, -ENOTDIR, "image: \"%s\" is not a directory", spec->image);
        for (size_t i = 0; i < spec->n_mounts; i++) {
                if (stat(spec->mounts[i].source, &st) < 0)
                        return cage_fail(err, -errno, "mounts[%zu].source \"%s\"", i,
                                         spec->mounts[i].source);
                if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                        return cage_fail(err, -EINVAL,
                                         "mounts[%zu].source \"%s\": only directories and regular "
                                         "files can be mounted",
                                         i, spec->mounts[i].source);
        }
        return 0;
}

int plan_build_process(struct launch_plan *plan, const struct cage_spec *spec,
                       struct cage_error *err)
{
        plan->spec = spec;
        plan->disable = spec->debug_disable;
        plan->scratch_workspace = !spec_mounts_workspace(spec);
        /* tmpfs inodes cost kernel memory and are otherwise unbounded: one
         * per SCRATCH_BYTES_PER_INODE of the disk size (0: unlimited). */
        bool unlimited = spec->debug_disable & CAGE_DEBUG_NO_LIMITS;
        uint64_t size = unlimited ? 0 : spec->disk_bytes;
        uint64_t inodes = unlimited ? 0 : size / SCRATCH_BYTES_PER_INODE;
        if (!unlimited && inodes < SCRATCH_INODES_MIN)
                inodes = SCRATCH_INODES_MIN;
        snprintf(plan->scratch_opts, sizeof(plan->scratch_opts),
                 "size=%llu,nr_inodes=%llu,mode=0755", (unsigned long long)size,
                 (unsigned long long)inodes);
        int r = build_env(plan, spec);
        return r < 0 ? cage_fail(err, r, "building the environment") : 0;
}

int plan_build(struct launch_plan *plan, const struct cage_spec *spec, struct cage_error *err)
{
        int r;
        plan->spec = spec;
        plan->disable = spec->debug_disable;
        plan->n_root = 0;
        if (!plan->root && !(plan->root = calloc(ROOT_ENTRIES_MAX, sizeof(*plan->root))))
                return cage_fail(err, -ENOMEM, "launch plan");
        if (spec->debug_disable & CAGE_DEBUG_HOST_ROOTFS)
                r = build_dir_image(plan, "/", err);
        else if (strcmp(spec->image, "host") == 0)
                r = build_host_image(plan) < 0 ? cage_fail(err, -E2BIG, "image: host") : 0;
        else
                r = build_dir_image(plan, spec->image, err);
        if (r < 0)
                return r;
        if (!add_entry(plan, ROOT_ENTRY_EMPTY_DIR, "run", NULL))
                return cage_fail(err, -E2BIG, "image: more than %d top-level entries",
                                 ROOT_ENTRIES_MAX);
        plan_proc_masks(plan);
        if ((r = plan_build_process(plan, spec, err)) < 0)
                return r;
        find_arg_area(plan);
        return 0;
}

void plan_free(struct launch_plan *plan)
{
        if (!plan->envp_borrowed)
                free((void *)plan->envp);
        plan->envp = NULL;
        free((void *)plan->argv);
        free(plan->strings);
        plan->argv = NULL;
        plan->strings = NULL;
        free(plan->root);
        plan->root = NULL;
        plan->n_root = 0;
}
