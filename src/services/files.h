/* Workspace files: the file operations of the API, done by the server on a
 * sandbox's workspace directory, and the artifact scan of output/.
 *
 * Every operation takes an O_PATH fd of the workspace root and a client
 * path, and resolves it beneath that root with openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), so no symlink, bind or ".."
 * planted by sandbox code can lead outside. Client paths are checked
 * before any syscall (cage_files_check_path): relative, or under
 * "/workspace/"; no "..", no empty or "." components beyond what is
 * normalised away, no NUL, at most CAGE_FILES_PATH_MAX bytes.
 *
 * Reads open with O_NONBLOCK and refuse anything but a regular file (a FIFO
 * or device planted by the sandbox never blocks the server), and read at
 * most `max` bytes. Files and directories the server creates get the owner
 * of the workspace root, so the sandbox user owns them inside.
 *
 * All functions return >= 0 or -errno with a message naming the client
 * path (never the host path): -EINVAL bad path, -ENOENT missing,
 * -EISDIR/-ENOTDIR wrong type, -E2BIG too large, -EXDEV/-ELOOP a link that
 * leads out, -EPERM not a regular file. */
#ifndef CODECAGE_SERVICES_FILES_H
#define CODECAGE_SERVICES_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codecage/codecage.h"

#define CAGE_FILES_PATH_MAX     1024
#define CAGE_FILES_LIST_MAX     10000 /* entries returned by one list */
#define CAGE_ARTIFACTS_MAX      1000  /* artifacts reported per exec */
#define CAGE_ARTIFACTS_SCAN_MAX 20000 /* entries looked at per scan */

/* Checks and normalises a client path into out ("a/b"; "" for the root). */
int cage_files_check_path(const char *path, char out[CAGE_FILES_PATH_MAX + 1],
                          struct cage_error *err);

/* Writes data to path (replacing it; created 0644), creating missing
 * parent directories (0755). Written to a temporary name and renamed, so a
 * reader never sees half a file. */
int cage_files_write(int root_fd, const char *path, const void *data, size_t len,
                     struct cage_error *err);
/* Reads a regular file of at most max bytes into *ret_data (malloc'ed,
 * NUL-terminated after *ret_len bytes). */
int cage_files_read(int root_fd, const char *path, size_t max, void **ret_data, size_t *ret_len,
                    struct cage_error *err);
/* {"path": p, "entries": [{name, path, type, size, mtime}]} sorted by name;
 * type is "file", "dir", "symlink" or "other"; mtime is Unix seconds. */
int cage_files_list(int root_fd, const char *path, json_t **ret, struct cage_error *err);
/* {name, path, type, size, mtime, mime} (mime only for regular files). */
int cage_files_stat(int root_fd, const char *path, json_t **ret, struct cage_error *err);
/* Creates the directory and its missing parents; an existing one is fine. */
int cage_files_mkdir(int root_fd, const char *path, struct cage_error *err);
/* Removes a file, symlink or empty directory; recursive removes a tree
 * (never following links). The root itself cannot be removed. */
int cage_files_delete(int root_fd, const char *path, bool recursive, struct cage_error *err);

/* Content sniffing (libmagic), e.g. "image/png"; never fails: unknown
 * content is "application/octet-stream". Safe from any thread. */
const char *cage_files_mime(const void *data, size_t len);

/* Artifacts: files new or changed under output/ of the workspace between a
 * snapshot taken before an exec and a scan after it. */
struct cage_artifact_snapshot;
/* A missing output/ is an empty snapshot. */
int cage_artifacts_snapshot(int root_fd, struct cage_artifact_snapshot **ret,
                            struct cage_error *err);
/* [{name, path, size, mime}] of regular files under output/ that are not in
 * `before` or whose size, mtime or inode changed (before NULL: all of
 * them). path is "output/..." relative to the workspace. Symlinks, FIFOs
 * and other non-regular files are skipped, never opened. */
int cage_artifacts_collect(int root_fd, const struct cage_artifact_snapshot *before,
                           json_t **ret, struct cage_error *err);
struct cage_artifact_snapshot *cage_artifact_snapshot_free(struct cage_artifact_snapshot *s);

#endif
