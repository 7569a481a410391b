/* Idmapped bind mounts for sandboxes run by root. A host directory owned by
 * uid O / gid G is mounted so that inside it O/G appear as the sandbox user
 * (its host uid is a per-sandbox slot), and files the sandbox creates land
 * on disk owned by O/G. The mount is prepared detached in the supervisor
 * (only init-namespace root may idmap) and moved into place by the child. */
#ifndef CODECAGE_CORE_IDMAP_H
#define CODECAGE_CORE_IDMAP_H

#include <stdbool.h>
#include <sys/types.h>

#include "codecage/codecage.h"

/* Returns a detached mount of `source` (O_CLOEXEC fd) whose owner maps to
 * host_uid/host_gid, with read-only/nosuid/nodev set as asked; or -errno
 * (-EINVAL / -EOPNOTSUPP when the filesystem or kernel cannot idmap). */
/* The same without the idmapping (as root, where the filesystem cannot
 * idmap): a detached bind with its flags set, taken from the caller's mount
 * namespace whatever namespace the sandbox is cloned from. */
int bind_tree_open(const char *source, bool writable, struct cage_error *err);
int idmap_mount_open(const char *source, uid_t host_uid, gid_t host_gid, bool writable,
                     struct cage_error *err);

#endif
