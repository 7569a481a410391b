/* Host identity for sandboxes; see userns.h. */
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec.h"
#include "util/error.h"
#include "util/fdutil.h"

/* The slots' lock file, opened once for the process: one byte per slot,
 * held with an open-file-description lock (F_OFD_SETLK), so a sandbox's
 * slot costs no fd of its own and a crash frees it with the process. Locks
 * of one open file description never conflict with each other, so the
 * slots this process holds are also kept in `held`.
 *
 * Each process takes the first free slot from a base of its own, chosen
 * at random once: processes rarely collide, and the slots one process
 * holds stay contiguous. The kernel merges adjacent locks of one open file
 * description into one range, and every lock call walks the file's list of
 * ranges: with random slots that list had an entry per live sandbox. */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static int slots_fd = -1;
static uint8_t held[UID_SLOT_COUNT / 8];
static unsigned int slots_base;

static int open_slots_locked(void)
{
        if (slots_fd >= 0)
                return 0;
        if (mkdir("/run/codecage", 0700) < 0 && errno != EEXIST)
                return -errno;
        if (mkdir(UID_SLOT_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        int fd = open(UID_SLOT_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        slots_fd = fd;
        if (getrandom(&slots_base, sizeof(slots_base), GRND_NONBLOCK) != sizeof(slots_base))
                slots_base = (unsigned int)getpid();
        slots_base %= UID_SLOT_COUNT;
        return 0;
}

static int lock_byte(unsigned int slot, short type)
{
        struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
        return fcntl(slots_fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

static bool is_held(unsigned int slot)
{
        return held[slot / 8] & (1u << (slot % 8));
}

static void set_held(unsigned int slot, bool on)
{
        if (on)
                held[slot / 8] |= (uint8_t)(1u << (slot % 8));
        else
                held[slot / 8] &= (uint8_t) ~(1u << (slot % 8));
}

/* The first slot from `from` on (wrapping) that this process does not
 * hold; UID_SLOT_COUNT when it holds them all. */
static unsigned int next_unheld_locked(unsigned int from)
{
        for (unsigned int i = 0; i < UID_SLOT_COUNT; i++) {
                unsigned int slot = (from + i) % UID_SLOT_COUNT;
                if (held[slot / 8] == 0xff && slot % 8 == 0) {
                        i += 7; /* a whole byte held */
                        continue;
                }
                if (!is_held(slot))
                        return slot;
        }
        return UID_SLOT_COUNT;
}

/* 0: slot is ours now; -EAGAIN: taken (here or by another process). */
static int try_slot_locked(unsigned int slot)
{
        if (is_held(slot))
                return -EAGAIN;
        int r = lock_byte(slot, F_WRLCK);
        if (r == -EACCES || r == -EAGAIN)
                return -EAGAIN;
        if (r == 0)
                set_held(slot, true);
        return r;
}

int cage_id_slot_acquire(struct id_slot *ret, struct cage_error *err)
{
        if (geteuid() != 0) {
                *ret = (struct id_slot){
                        .privileged = false, .host_uid = geteuid(), .host_gid = getegid()};
                return 0;
        }
        pthread_mutex_lock(&slots_lock);
        int r = open_slots_locked();
        if (r < 0) {
                pthread_mutex_unlock(&slots_lock);
                return cage_fail(err, r, "opening " UID_SLOT_FILE);
        }
        unsigned int slot = slots_base;
        for (unsigned int tries = 0; tries < 256; tries++) {
                slot = next_unheld_locked(slot);
                if (slot == UID_SLOT_COUNT)
                        break;
                r = try_slot_locked(slot);
                if (r == -EAGAIN) { /* another process's */
                        slot = (slot + 1) % UID_SLOT_COUNT;
                        continue;
                }
                pthread_mutex_unlock(&slots_lock);
                if (r < 0)
                        return cage_fail(err, r, "locking uid slot %u", slot);
                *ret = (struct id_slot){.privileged = true,
                                        .host_uid = UID_SLOT_BASE + slot,
                                        .host_gid = UID_SLOT_BASE + slot,
                                        .held = true};
                return 0;
        }
        pthread_mutex_unlock(&slots_lock);
        return cage_fail(err, -EAGAIN, "no free uid slot after 256 tries");
}

void cage_id_slot_release(struct id_slot *slot)
{
        if (!slot->held)
                return;
        unsigned int n = slot->host_uid - UID_SLOT_BASE;
        pthread_mutex_lock(&slots_lock);
        if (n < UID_SLOT_COUNT && is_held(n)) {
                (void)lock_byte(n, F_UNLCK);
                set_held(n, false);
        }
        pthread_mutex_unlock(&slots_lock);
        slot->held = false;
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
