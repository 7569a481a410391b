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
 * leads out (or a symlink where a file is expected: final components are
 * never followed), -EPERM not a regular file, -ENOSPC the workspace is full.
 * Names from the file system that are not valid UTF-8 appear in JSON with
 * U+FFFD in place of the invalid bytes. */
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
/* {"path": p, "entries": [{name, path, type, size, mtime}], "truncated": b}
 * sorted by name; type is "file", "dir", "symlink" or "other"; mtime is Unix
 * seconds; path is relative to the workspace. A directory of more than
 * CAGE_FILES_LIST_MAX entries is not an error: the first
 * CAGE_FILES_LIST_MAX entries in directory order are returned (sorted) with
 * "truncated": true. */
int cage_files_list(int root_fd, const char *path, json_t **ret, struct cage_error *err);
/* The same with at most max (<= CAGE_FILES_LIST_MAX) entries read. */
int cage_files_list_max(int root_fd, const char *path, size_t max, json_t **ret,
                        struct cage_error *err);
/* {name, path, type, size, mtime, mime} (mime only for regular files). */
int cage_files_stat(int root_fd, const char *path, json_t **ret, struct cage_error *err);
/* Creates the directory and its missing parents; an existing one is fine. */
int cage_files_mkdir(int root_fd, const char *path, struct cage_error *err);
/* Removes a file, symlink or empty directory; recursive removes a tree
 * (never following links; walked fd by fd, -E2BIG past 1,000,000 entries or
 * 256 levels, what was removed stays removed). The root itself cannot be
 * removed (-EINVAL). */
int cage_files_delete(int root_fd, const char *path, bool recursive, struct cage_error *err);
/* Renames from to to (replacing a file there), creating the missing parent
 * directories of to; neither may be the root. */
int cage_files_move(int root_fd, const char *from, const char *to, struct cage_error *err);

/* Content sniffing (libmagic), e.g. "image/png"; never fails: unknown
 * content is "application/octet-stream". Safe from any thread (one libmagic
 * cookie per thread); the string stays valid until the next call from the
 * same thread. */
const char *cage_files_mime(const void *data, size_t len);

/* Artifacts: files new or changed under output/ of the workspace between a
 * snapshot taken before an exec and a scan after it. */
struct cage_artifact_snapshot;
/* A missing output/ (or one that is a symlink) is an empty snapshot. The
 * scan looks at most at CAGE_ARTIFACTS_SCAN_MAX entries, 64 levels deep. */
int cage_artifacts_snapshot(int root_fd, struct cage_artifact_snapshot **ret,
                            struct cage_error *err);
/* [{name, path, size, mime}] of regular files under output/ that are not in
 * `before` or whose size, mtime or inode changed (before NULL: all of
 * them). path is "output/..." relative to the workspace. Symlinks, FIFOs
 * and other non-regular files are skipped, never opened. */
int cage_artifacts_collect(int root_fd, const struct cage_artifact_snapshot *before, json_t **ret,
                           struct cage_error *err);
struct cage_artifact_snapshot *cage_artifact_snapshot_free(struct cage_artifact_snapshot *s);

/* Copies the directory src_path of a workspace (e.g. "output") into the
 * trusted host directory dst_dir_fd (expected empty): directories (0755)
 * and regular files (0644, owned by the caller), never following links and
 * skipping symlinks, FIFOs, sockets and devices. Walked fd by fd like the
 * other operations. max_entries bounds the entries looked at (copied or
 * skipped) and max_bytes the bytes of data copied; past either, or past 64
 * levels, it stops with -E2BIG and what was copied stays. A file is copied
 * up to its size when it was opened, sparsely: only its data extents
 * (SEEK_DATA) are copied and charged, its holes stay holes. *ret_bytes
 * (when not NULL) gets the bytes of data copied. Used to keep a one-shot
 * run's output/ after its sandbox is gone. */
int cage_files_copy_tree(int src_root_fd, const char *src_path, int dst_dir_fd, uint64_t max_bytes,
                         uint32_t max_entries, uint64_t *ret_bytes, struct cage_error *err);

#endif
