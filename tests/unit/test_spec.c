/* Unit tests for spec defaults and validation: each bad field is refused
 * with a message that names the field and the allowed range. */
#include <errno.h>
#include <string.h>

#include "core/spec.h"
#include "harness.h"

static char *argv_ok[] = {"/bin/true", NULL};

static void good_spec(struct cage_spec *s)
{
        cage_spec_init(s);
        s->argv = argv_ok;
}

static int validate_msg(const struct cage_spec *s, char *msg, size_t size)
{
        struct cage_error err = {0};
        int r = cage_spec_validate(s, &err);
        snprintf(msg, size, "%s", err.message);
        return r;
}

TEST(defaults_are_secure_and_valid)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
        CHECK(s.memory_bytes == 512 * MIB);
        CHECK(s.pids == 256);
        CHECK(s.disk_bytes == 1024 * MIB);
        CHECK(s.timeout_ms == 30000);
        CHECK(s.output_max_bytes == 65536);
        CHECK_STREQ(s.image, "host");
        CHECK(s.n_env == 0 && s.n_mounts == 0);
}

TEST(memory_out_of_range_names_field_and_range)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.memory_bytes = 1 * MIB;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
        CHECK(strstr(msg, "memory_mib") != NULL);
        CHECK(strstr(msg, "16..1048576") != NULL);
}

TEST(cpus_must_be_finite_and_in_range)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.cpus = 0.0;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
        CHECK(strstr(msg, "cpus") != NULL);
        s.cpus = 0.5;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
        s.cpus = 1.0 / 0.0;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
}

TEST(pids_disk_timeout_nofile_ranges)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.pids = 1;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "pids"));
        good_spec(&s);
        s.disk_bytes = 0;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "disk_mib"));
        good_spec(&s);
        s.timeout_ms = 0;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "timeout_ms"));
        good_spec(&s);
        s.nofile = 3;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "nofile"));
}

TEST(argv_required)
{
        struct cage_spec s;
        char msg[512];
        char *empty[] = {"", NULL};
        cage_spec_init(&s);
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "argv"));
        s.argv = empty;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
}

TEST(image_must_be_host_or_absolute)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.image = "relative/dir";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "image"));
        s.image = "/srv/rootfs";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
        s.image = "/srv/../etc";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
}

TEST(mount_targets_are_checked)
{
        struct cage_spec s;
        char msg[512];
        static const char *const bad_targets[] = {"/",     "/proc",    "/proc/sys", "/dev/x",
                                                  "/etc",  "/usr/lib", "rel",       "/a/../b",
                                                  "/a//b", "/a/."};
        for (size_t i = 0; i < sizeof(bad_targets) / sizeof(bad_targets[0]); i++) {
                good_spec(&s);
                s.mounts[0] = (struct cage_mount){.source = "/srv", .target = bad_targets[i]};
                s.n_mounts = 1;
                int r = validate_msg(&s, msg, sizeof(msg));
                CHECK(r == -EINVAL);
                CHECK(strstr(msg, "mounts[0].target") != NULL);
        }
        good_spec(&s);
        s.mounts[0] = (struct cage_mount){.source = "/srv/data", .target = "/data"};
        s.n_mounts = 1;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
        s.mounts[0].source = "srv";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "mounts[0].source"));
        /* /procfoo is not /proc */
        s.mounts[0] = (struct cage_mount){.source = "/srv", .target = "/procfoo"};
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
}

TEST(env_entries_need_a_name)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.env[0] = "=oops";
        s.n_env = 1;
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "env[0]"));
        s.env[0] = "NOEQUALS";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL);
        s.env[0] = "A=";
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
}

TEST(debug_switches_refused_in_normal_builds)
{
        struct cage_spec s;
        char msg[512];
        good_spec(&s);
        s.debug_disable = CAGE_DEBUG_NO_SECCOMP;
#ifdef CODECAGE_UNSAFE_DEBUG
        CHECK(validate_msg(&s, msg, sizeof(msg)) == 0);
#else
        CHECK(validate_msg(&s, msg, sizeof(msg)) == -EINVAL && strstr(msg, "unsafe_debug"));
#endif
}

RUN_TESTS(T(defaults_are_secure_and_valid), T(memory_out_of_range_names_field_and_range),
          T(cpus_must_be_finite_and_in_range), T(pids_disk_timeout_nofile_ranges), T(argv_required),
          T(image_must_be_host_or_absolute), T(mount_targets_are_checked),
          T(env_entries_need_a_name), T(debug_switches_refused_in_normal_builds))
