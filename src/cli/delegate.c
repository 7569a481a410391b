/* The lean `codecage` binary's hand-over to `codecage-full`: every command
 * but a cold `codecage run` needs libraries (libcurl, libmicrohttpd,
 * libmagic, libarchive, OpenSSL, SQLite) that a run would otherwise load
 * and relocate on each start, so they live in the full binary, installed
 * next to this one. The hand-over is one execve: same pid, same argv. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "run.h"
#include "util/error.h"

#define FULL_BINARY "codecage-full"

static int full_binary_path(char *buf, size_t size)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
                return -errno;
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (!slash)
                return -ENOENT;
        *slash = '\0';
        if (snprintf(buf, size, "%s/" FULL_BINARY, self) >= (int)size)
                return -ENAMETOOLONG;
        return 0;
}

int cli_exec_full(char **argv)
{
        char path[PATH_MAX];
        int r = full_binary_path(path, sizeof(path));
        if (r == 0) {
                execv(path, argv);
                r = -errno;
        }
        fprintf(stderr,
                "codecage: cannot start %s next to this binary (%s); it serves every "
                "command but `run` and `--version`: reinstall codecage\n",
                FULL_BINARY, strerror(-r));
        return EXIT_CODECAGE_FAILED;
}

/* An OCI reference needs the image store: the full binary runs it. */
int run_use_image(struct run_args *a, struct cage_error *err)
{
        const char *ref = a->spec.image;
        if (strcmp(ref, "host") == 0 || ref[0] == '/')
                return 0;
        size_t n = 0;
        while (a->argv[n])
                n++;
        char **argv = calloc(n + 2, sizeof(*argv));
        if (!argv)
                return cage_fail(err, -ENOMEM, "--image");
        argv[0] = "codecage";
        memcpy(argv + 1, a->argv, n * sizeof(*argv));
        cli_exec_full(argv);
        free(argv);
        return cage_fail_plain(err, -ENOENT, "--image REF needs " FULL_BINARY);
}

struct run_image *run_image_free(struct run_image *img)
{
        (void)img;
        return NULL;
}
