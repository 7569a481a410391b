/* Host identity for sandboxes; see userns.h. */
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec.h"
#include "util/error.h"
#include "util/fdutil.h"

static int mkdir_p_root_only(void)
{
        if (mkdir("/run/codecage", 0700) < 0 && errno != EEXIST)
                return -errno;
        if (mkdir(UID_SLOT_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int try_slot(unsigned int slot)
{
        char path[96];
        snprintf(path, sizeof(path), UID_SLOT_DIR "/%u", slot);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

int cage_id_slot_acquire(struct id_slot *ret, struct cage_error *err)
{
        if (geteuid() != 0) {
                *ret = (struct id_slot){.privileged = false,
                                        .host_uid = geteuid(),
                                        .host_gid = getegid(),
                                        .lock_fd = -1};
                return 0;
        }
        int r = mkdir_p_root_only();
        if (r < 0)
                return cage_fail(err, r, "creating " UID_SLOT_DIR);
        /* Start at a random slot so concurrent launchers rarely collide. */
        unsigned int start = 0;
        if (getrandom(&start, sizeof(start), GRND_NONBLOCK) != sizeof(start))
                start = (unsigned int)getpid();
        for (unsigned int i = 0; i < 256; i++) {
                unsigned int slot = (start + i) % UID_SLOT_COUNT;
                int fd = try_slot(slot);
                if (fd == -EWOULDBLOCK)
                        continue;
                if (fd < 0)
                        return cage_fail(err, fd, "locking uid slot %u", slot);
                *ret = (struct id_slot){.privileged = true,
                                        .host_uid = UID_SLOT_BASE + slot,
                                        .host_gid = UID_SLOT_BASE + slot,
                                        .lock_fd = fd};
                return 0;
        }
        return cage_fail(err, -EAGAIN, "no free uid slot after 256 tries");
}

void cage_id_slot_release(struct id_slot *slot)
{
        if (slot->lock_fd >= 0)
                close(slot->lock_fd);
        slot->lock_fd = -1;
}

static int write_proc(pid_t pid, const char *file, const char *content)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
        return write_file_at(AT_FDCWD, path, content);
}

int cage_userns_write_maps(pid_t pid, const struct id_slot *slot, uint32_t uid, uint32_t gid,
                           struct cage_error *err)
{
        char map[64];
        int r;
        /* Unprivileged: setgroups must be denied before gid_map may be
         * written. Privileged: leave it allowed so the child can clear the
         * supplementary groups it inherited from root. */
        if (!slot->privileged && (r = write_proc(pid, "setgroups", "deny")) < 0)
                return cage_fail(err, r, "writing /proc/%d/setgroups", (int)pid);
        snprintf(map, sizeof(map), "%u %u 1\n", uid, (unsigned)slot->host_uid);
        if ((r = write_proc(pid, "uid_map", map)) < 0)
                return cage_fail(err, r, "writing uid_map \"%u %u 1\"", uid,
                                 (unsigned)slot->host_uid);
        snprintf(map, sizeof(map), "%u %u 1\n", gid, (unsigned)slot->host_gid);
        if ((r = write_proc(pid, "gid_map", map)) < 0)
                return cage_fail(err, r, "writing gid_map \"%u %u 1\"", gid,
                                 (unsigned)slot->host_gid);
        return 0;
}

/* "0 <slot> 1" and the rest of the slot range mapped to itself. */
static void template_map(char *buf, size_t size, unsigned slot_id)
{
        unsigned below = slot_id - UID_SLOT_BASE, above = UID_SLOT_COUNT - below - 1;
        int n = snprintf(buf, size, "0 %u 1\n", slot_id);
        if (below)
                n += snprintf(buf + n, size - (size_t)n, "%u %u %u\n", UID_SLOT_BASE, UID_SLOT_BASE,
                              below);
        if (above)
                snprintf(buf + n, size - (size_t)n, "%u %u %u\n", slot_id + 1, slot_id + 1, above);
}

int cage_userns_write_template_maps(pid_t pid, const struct id_slot *slot, struct cage_error *err)
{
        char map[128];
        int r;
        if (!slot->privileged)
                return cage_fail_plain(err, -ENOTSUP, "a zygote needs the server to run as root");
        template_map(map, sizeof(map), (unsigned)slot->host_uid);
        if ((r = write_proc(pid, "uid_map", map)) < 0)
                return cage_fail(err, r, "writing the template's uid_map");
        template_map(map, sizeof(map), (unsigned)slot->host_gid);
        if ((r = write_proc(pid, "gid_map", map)) < 0)
                return cage_fail(err, r, "writing the template's gid_map");
        return 0;
}
