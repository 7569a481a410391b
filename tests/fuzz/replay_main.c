/* Corpus replay driver: a main() for fuzz targets built without libFuzzer.
 * Each argument is a file or a directory of files (not recursive, in name
 * order); every file is handed to LLVMFuzzerTestOneInput() once. A broken
 * invariant aborts the process; a file that cannot be read counts as failed.
 * Closes with the harness-style line "N passed, M failed". */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int read_file(const char *path, uint8_t **ret, size_t *ret_len)
{
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        size_t len = 0, alloc = 0;

        if (!f)
                return -errno;
        for (;;) {
                if (len == alloc) {
                        alloc = alloc ? alloc * 2 : 4096;
                        uint8_t *p = realloc(buf, alloc);
                        if (!p) {
                                free(buf);
                                fclose(f);
                                return -ENOMEM;
                        }
                        buf = p;
                }
                size_t n = fread(buf + len, 1, alloc - len, f);
                len += n;
                if (n == 0)
                        break;
        }
        int r = ferror(f) ? -EIO : 0;
        fclose(f);
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}

/* Runs one file; returns true when it was read and passed. */
static bool run_file(const char *path)
{
        uint8_t *data = NULL;
        size_t len = 0;
        int r = read_file(path, &data, &len);

        if (r < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(-r));
                return false;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        return true;
}

static int is_regular(const struct dirent *de)
{
        return de->d_name[0] != '.';
}

static void run_dir(const char *dir, int *passed, int *failed)
{
        struct dirent **names = NULL;
        int n = scandir(dir, &names, is_regular, alphasort);

        if (n < 0) {
                fprintf(stderr, "%s: %s\n", dir, strerror(errno));
                (*failed)++;
                return;
        }
        for (int i = 0; i < n; i++) {
                char *path = NULL;
                struct stat st;
                if (asprintf(&path, "%s/%s", dir, names[i]->d_name) < 0) {
                        (*failed)++;
                } else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
                        /* skip subdirectories and the like */
                } else if (run_file(path)) {
                        (*passed)++;
                } else {
                        (*failed)++;
                }
                free(path);
                free(names[i]);
        }
        free(names);
}

int main(int argc, char **argv)
{
        int passed = 0, failed = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
                return 2;
        }
        for (int i = 1; i < argc; i++) {
                struct stat st;
                if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
                        run_dir(argv[i], &passed, &failed);
                else if (run_file(argv[i]))
                        passed++;
                else
                        failed++;
        }
        if (passed == 0 && failed == 0) {
                fprintf(stderr, "no inputs found\n");
                failed++;
        }
        printf("%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
}
