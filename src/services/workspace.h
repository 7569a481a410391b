/* Persistent workspaces of named sandboxes: one directory per sandbox under
 * the server's data directory (`base`), holding what the sandbox sees as
 * /workspace, capped at its disk_mib and surviving server crashes and
 * restarts. See docs/WORKSPACES.md.
 *
 * On-disk layout of <base>/<id>/ (mode 0700, owned by the server):
 *   LOOP backend: image       sparse ext4 image of disk_bytes (0600)
 *                 mnt/        where the image is mounted (nosuid,nodev)
 *   DIR backend:  data/       the workspace itself (no hard cap)
 *                 disk_bytes  the nominal cap, decimal
 * The workspace root (the image's root, or data/) and its output/ are owned
 * by CAGE_WORKSPACE_OWNER_UID:GID (the server's uid when it is not root);
 * an idmapped bind shows them as the sandbox user's. Work in progress lives
 * under <base>/.creating-<id>-* and <base>/.deleting-<id>-*, which
 * cage_workspace_sweep() removes: <id> itself appears (rename) only when
 * complete and disappears (rename) before its contents are deleted.
 *
 * Invariants: the sandbox never gets the image or the block device, only
 * the mounted tree; one image is attached to at most one loop device at a
 * time (the loop holds an exclusive flock on the image, so a second mount
 * while an old one lives on, e.g. in a sandbox's namespace, is -EBUSY);
 * loop devices are LO_FLAGS_AUTOCLEAR, so they go away with their last
 * mount. Deletions walk fd-relative and never follow a symlink or cross a
 * mount.
 *
 * Threads: no global state. Calls for different ids may run concurrently;
 * calls for one id must be serialised by the caller. cage_workspace_sweep()
 * runs alone (server start). mkfs.ext4 is run as a child process that is
 * reaped here: a SIGCHLD handler must not reap children it does not know.
 *
 * All functions return >= 0 or -errno with a message in err: -EINVAL bad id
 * or size, -ENOENT no such workspace, -EEXIST already exists, -EBUSY in use,
 * -EUCLEAN damaged (neither image nor data/, or a root not owned by
 * OWNER). */
#ifndef CODECAGE_SERVICES_WORKSPACE_H
#define CODECAGE_SERVICES_WORKSPACE_H

#include <stdint.h>

#include "codecage/codecage.h"

/* On-disk owner of workspace files (idmapped to the sandbox user inside). */
#define CAGE_WORKSPACE_OWNER_UID 0x5fff0000u
#define CAGE_WORKSPACE_OWNER_GID 0x5fff0000u

#define CAGE_WORKSPACE_ID_MAX 64
/* ext4 needs room for its superblocks, inode tables and a journal: below
 * 8 MiB there is next to nothing left for files. Usable space is always a
 * little less than disk_bytes (about 1 MiB at 8 MiB, ~2% at 1 GiB). */
#define CAGE_WORKSPACE_MIN_BYTES (8ull << 20)
#define CAGE_WORKSPACE_MAX_BYTES (1ull << 40) /* 1 TiB, the CLI's --disk range */
/* cage_workspace_usage() on a DIR workspace stops counting after this many
 * entries or this depth, and then reports a lower bound. */
#define CAGE_WORKSPACE_DU_MAX_ENTRIES 1000000
#define CAGE_WORKSPACE_DU_MAX_DEPTH   64
/* mkfs.ext4 gets this long before it is killed. */
#define CAGE_WORKSPACE_MKFS_TIMEOUT_MS 30000

enum cage_workspace_backend {
        CAGE_WORKSPACE_LOOP, /* ext4 image on a loop device: hard cap */
        CAGE_WORKSPACE_DIR,  /* plain directory: no hard cap (non-root) */
};

/* "loop" / "dir"; NULL for an unknown value. */
const char *cage_workspace_backend_to_string(enum cage_workspace_backend b);

/* Which backend this process can use: LOOP when it is root, can open
 * /dev/loop-control and finds mkfs.ext4 under /usr/sbin or /sbin; else DIR. */
enum cage_workspace_backend cage_workspace_backend_detect(void);

/* Creates <base>/<id>/ holding an empty workspace of disk_bytes
 * (CAGE_WORKSPACE_MIN_BYTES..MAX_BYTES, -EINVAL outside, naming disk_mib):
 * LOOP formats a sparse image as ext4 (root owned by OWNER, an empty
 * output/, no lost+found); DIR makes data/ and data/output/ (chowned to
 * OWNER when root). id: [a-z0-9-]{1,64}. base must exist. -EEXIST if the
 * workspace exists. Nothing is left behind on failure. */
int cage_workspace_create(const char *base, const char *id, uint64_t disk_bytes,
                          enum cage_workspace_backend backend, struct cage_error *err);

/* Makes the workspace usable and returns in *ret_path (malloc'ed, absolute,
 * base canonicalised) the directory to bind as /workspace: LOOP attaches the
 * image to a loop device and mounts it (ext4, nosuid,nodev,discard) at
 * <base>/<id>/mnt, and is idempotent when it is already mounted there; DIR
 * returns <base>/<id>/data. Checks that the root is a directory owned by
 * OWNER (-EUCLEAN otherwise) and recreates a missing output/. */
int cage_workspace_mount(const char *base, const char *id, char **ret_path, struct cage_error *err);

/* Unmounts a LOOP workspace (every mount stacked on mnt); lazily
 * (MNT_DETACH) only when the filesystem is busy. Idempotent: not mounted,
 * a DIR workspace or no workspace at all is success. */
int cage_workspace_unmount(const char *base, const char *id, struct cage_error *err);

/* Unmounts, detaches any loop device still bound to the image and removes
 * <base>/<id> entirely, never following symlinks nor crossing mounts
 * inside. Idempotent: a missing workspace is success. */
int cage_workspace_destroy(const char *base, const char *id, struct cage_error *err);

/* cage_workspace_destroy() in two steps, the slow one off the caller's
 * path. Retire renames <base>/<id> (mounted or not) to a fresh
 * ".deleting-" name, returned in stage (at least CAGE_WORKSPACE_STAGE_MAX
 * bytes; "" when there was no workspace): from then on <id> is free and the
 * workspace is the sweep's to finish after a crash. Destroy-retired then
 * unmounts it, detaches its loop device and removes it. */
#define CAGE_WORKSPACE_STAGE_MAX 128
int cage_workspace_retire(const char *base, const char *id, char *stage, struct cage_error *err);
int cage_workspace_destroy_retired(const char *base, const char *stage, struct cage_error *err);

/* Bytes used and the capacity: LOOP from statvfs of the mounted filesystem
 * (-ENOTCONN when not mounted; total is the cap minus ext4's metadata);
 * DIR by counting allocated blocks under data/ (total is the nominal
 * disk_bytes). Returns 0, or 1 when a DIR count stopped at
 * CAGE_WORKSPACE_DU_MAX_ENTRIES / _DEPTH and *used is a lower bound. */
int cage_workspace_usage(const char *base, const char *id, uint64_t *used, uint64_t *total,
                         struct cage_error *err);

/* At server start, before any other call: unmounts every mount strictly
 * beneath base (from /proc/self/mountinfo, deepest first), detaches loop
 * devices whose backing file lies beneath base (/sys/block/loop*), and
 * removes interrupted creations and deletions. Returns how many things it
 * cleaned; on a failure it still tries everything, then returns the first
 * error. */
int cage_workspace_sweep(const char *base, struct cage_error *err);

#endif
