/* Unit tests for the launch plan: the host image exposes only the allowed
 * /etc entries, the environment is rebuilt from the spec, /proc masks cover
 * what an unprivileged user could open, and exec strings are copied. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "core/plan.h"
#include "core/spec.h"
#include "harness.h"

static char *argv_true[] = {"/bin/true", "arg", NULL};

static const struct root_entry *find(const struct launch_plan *p, const char *path)
{
        for (size_t i = 0; i < p->n_root; i++)
                if (strcmp(p->root[i].path, path) == 0)
                        return &p->root[i];
        return NULL;
}

static bool env_has(const struct launch_plan *p, const char *kv)
{
        for (size_t i = 0; p->envp[i]; i++)
                if (strcmp(p->envp[i], kv) == 0)
                        return true;
        return false;
}

TEST(host_image_has_only_allowed_etc_entries)
{
        struct cage_spec s;
        struct launch_plan p = {0};
        cage_spec_init(&s);
        s.argv = argv_true;
        CHECK(plan_build(&p, &s, NULL) == 0);
        static const char *const allowed[] = {
                "etc/passwd",         "etc/group",        "etc/hosts",       "etc/resolv.conf",
                "etc/nsswitch.conf",  "etc/hostname",     "etc/ld.so.cache", "etc/ssl",
                "etc/ssl/certs",      "etc/alternatives", "etc/localtime",   "etc/os-release",
                "etc/ssl/openssl.cnf"};
        for (size_t i = 0; i < p.n_root; i++) {
                const char *path = p.root[i].path;
                if (strncmp(path, "etc/", 4) != 0)
                        continue;
                bool ok = false;
                for (size_t j = 0; j < sizeof(allowed) / sizeof(allowed[0]); j++)
                        ok = ok || strcmp(path, allowed[j]) == 0;
                if (!ok)
                        fprintf(stderr, "  unexpected /%s\n", path);
                CHECK(ok);
        }
        CHECK(find(&p, "etc/shadow") == NULL);
        CHECK(find(&p, "root") == NULL && find(&p, "home") == NULL);
        const struct root_entry *usr = find(&p, "usr");
        CHECK(usr && usr->kind == ROOT_ENTRY_DIR_BIND);
        const struct root_entry *pw = find(&p, "etc/passwd");
        CHECK(pw && pw->kind == ROOT_ENTRY_FILE_DATA &&
              memmem(pw->data, pw->data_len, "sandbox:x:1000", 14));
        plan_free(&p);
}

TEST(env_is_defaults_plus_spec_only)
{
        struct cage_spec s;
        struct launch_plan p = {0};
        cage_spec_init(&s);
        s.argv = argv_true;
        s.env[0] = "HOME=/tmp";
        s.env[1] = "FOO=bar";
        s.n_env = 2;
        setenv("CODECAGE_TEST_LEAK", "leak", 1);
        CHECK(plan_build(&p, &s, NULL) == 0);
        CHECK(env_has(&p, "FOO=bar"));
        CHECK(env_has(&p, "HOME=/tmp"));
        CHECK(!env_has(&p, "HOME=/workspace"));
        CHECK(env_has(&p, "LANG=C.UTF-8"));
        CHECK(!env_has(&p, "CODECAGE_TEST_LEAK=leak"));
        CHECK(p.path_env && strstr(p.path_env, "/usr/bin"));
        plan_free(&p);
}

TEST(exec_strings_are_copies)
{
        struct cage_spec s;
        struct launch_plan p = {0};
        char arg0[] = "/bin/echo", arg1[] = "hi";
        char *argv[] = {arg0, arg1, NULL};
        cage_spec_init(&s);
        s.argv = argv;
        CHECK(plan_build(&p, &s, NULL) == 0);
        arg1[0] = 'X'; /* the caller's memory may change (init wipes argv) */
        CHECK_STREQ(p.argv[0], "/bin/echo");
        CHECK_STREQ(p.argv[1], "hi");
        CHECK(p.argv[2] == NULL);
        CHECK_STREQ(p.workdir, "/workspace");
        plan_free(&p);
}

TEST(proc_masks_cover_files_others_can_open)
{
        struct cage_spec s;
        struct launch_plan p = {0};
        cage_spec_init(&s);
        s.argv = argv_true;
        CHECK(plan_build(&p, &s, NULL) == 0);
        struct stat st;
        if (stat("/proc/keys", &st) == 0 && (st.st_mode & S_IROTH)) {
                bool masked = false;
                for (size_t i = 0; i < p.n_proc_masked; i++)
                        masked = masked || strcmp(p.proc_masked[i], "keys") == 0;
                CHECK(masked);
        }
        for (size_t i = 0; i < p.n_proc_masked; i++)
                CHECK(strcmp(p.proc_masked[i], "kmsg") != 0 ||
                      (stat("/proc/kmsg", &st) == 0 && (st.st_mode & 0006)));
        plan_free(&p);
}

TEST(directory_image_mirrors_top_level_without_reserved_names)
{
        char dir[] = "/tmp/codecage-plan-XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        char path[256];
        snprintf(path, sizeof(path), "%s/proc", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/data", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/link", dir);
        CHECK(symlink("/elsewhere", path) == 0);
        struct cage_spec s;
        struct launch_plan p = {0};
        cage_spec_init(&s);
        s.argv = argv_true;
        s.image = dir;
        CHECK(plan_build(&p, &s, NULL) == 0);
        CHECK(find(&p, "data") && find(&p, "data")->kind == ROOT_ENTRY_DIR_BIND);
        const struct root_entry *link = find(&p, "link");
        CHECK(link && link->kind == ROOT_ENTRY_SYMLINK);
        CHECK(link && strcmp(link->source, "/elsewhere") == 0);
        CHECK(find(&p, "proc") == NULL);
        CHECK(find(&p, "usr") == NULL);
        plan_free(&p);
        snprintf(path, sizeof(path), "rm -rf %s", dir);
        CHECK(system(path) == 0);
}

RUN_TESTS(T(host_image_has_only_allowed_etc_entries), T(env_is_defaults_plus_spec_only),
          T(exec_strings_are_copies), T(proc_masks_cover_files_others_can_open),
          T(directory_image_mirrors_top_level_without_reserved_names))
