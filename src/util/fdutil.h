/* File-descriptor helpers: full reads/writes that retry on EINTR, closing
 * every inherited fd, and small file writes used on hot paths (no stdio). */
#ifndef CODECAGE_UTIL_FDUTIL_H
#define CODECAGE_UTIL_FDUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all of buf; returns 0 or -errno. */
int write_all(int fd, const void *buf, size_t len);
/* Writes all of buf to a non-blocking fd (a socket: without SIGPIPE),
 * waiting for room until deadline_ms (CLOCK_MONOTONIC milliseconds);
 * 0, -ETIMEDOUT, or -errno (-EPIPE: the reader is gone). */
int write_all_until(int fd, const void *buf, size_t len, uint64_t deadline_ms);
/* Reads up to len bytes, retrying short reads until EOF; returns bytes read
 * or -errno. */
ssize_t read_full(int fd, void *buf, size_t len);
/* open(path, O_WRONLY|O_CLOEXEC) + write_all + close; 0 or -errno. */
int write_file_at(int dirfd, const char *path, const char *content);
/* Reads a small file into buf (NUL-terminated, truncated to size-1). */
ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size);
/* Closes every fd >= lowfd except those in keep[] (sorted or not). */
int close_fds_from(int lowfd, const int *keep, size_t n_keep);
/* openat2() with O_CLOEXEC added, retried a few times on EAGAIN (a rename
 * raced a RESOLVE_* lookup) and EINTR; the fd or -errno. */
int openat2_retry(int dfd, const char *path, uint64_t flags, mode_t mode, uint64_t resolve);
/* Closes *fd if it is open and sets it to -1. */
void close_fd(int *fd);
int fd_set_cloexec(int fd, bool on);
int fd_set_nonblock(int fd, bool on);
#define FD_SEND_MAX 16 /* the most fds one fd_send() passes */
/* sendmsg() of buf on a Unix socket with fds (n at most FD_SEND_MAX) as
 * SCM_RIGHTS, without SIGPIPE, retried on EINTR; bytes sent or -errno. */
ssize_t fd_send(int sock, const void *buf, size_t len, const int *fds, size_t n);

#endif
