/* User namespace identity: which host uid/gid a sandbox's user maps to, and
 * writing the maps. As root every concurrent sandbox gets a distinct host uid
 * from a reserved range (a "slot": a byte of UID_SLOT_FILE locked by the
 * process for the life of the sandbox, so a crash frees it); otherwise the caller's own uid is
 * used, as bubblewrap does. Inside, the program runs as spec->uid (SANDBOX_UID unless an image's
 * User says otherwise), mapped to that host id. */
#ifndef CODECAGE_CORE_USERNS_H
#define CODECAGE_CORE_USERNS_H

#include <stdbool.h>
#include <sys/types.h>

#include "codecage/codecage.h"

#define UID_SLOT_BASE  0x60000000u /* 1610612736: far above any real user */
#define UID_SLOT_COUNT 65536u
#define UID_SLOT_DIR   "/run/codecage/uid-slots"
#define UID_SLOT_FILE  UID_SLOT_DIR "/locks" /* byte N: slot N (F_OFD_SETLK) */

struct id_slot {
        bool privileged; /* we are root: maps may name any host uid */
        uid_t host_uid;
        gid_t host_gid;
        bool held; /* this process holds the slot (privileged only) */
};

int cage_id_slot_acquire(struct id_slot *ret, struct cage_error *err);
void cage_id_slot_release(struct id_slot *slot);
/* Writes setgroups/uid_map/gid_map of pid's user namespace. */
/* Maps the program's ids inside (uid, gid) to the slot's host ids. */
int cage_userns_write_maps(pid_t pid, const struct id_slot *slot, uint32_t uid, uint32_t gid,
                           struct cage_error *err);
/* A zygote's template (zygote.h): root inside is the slot's host id, and
 * every other slot's host id maps to itself, so the template can give each
 * sandbox it forks a host id of its own (the server's slot for it). Only
 * for a privileged slot. */
int cage_userns_write_template_maps(pid_t pid, const struct id_slot *slot, struct cage_error *err);

#endif
