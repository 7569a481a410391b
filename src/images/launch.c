/* What an image gives a sandbox's launch beyond its root: its User,
 * resolved in the image's own passwd and group files, and its WorkingDir
 * when the image has that directory. Files of the image are read inside its
 * root (openat2 RESOLVE_IN_ROOT): an image's symlinks never lead out. Used
 * by the service and by `codecage run --image`. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "images/images.h"
#include "images/images_private.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define ACCOUNTS_FILE_MAX (1024 * 1024) /* bytes read of an image's passwd or group */
#define ID_MAX            4294967294ULL
#define WORKDIR_MAX       1024

static int open_in_image(const struct cage_image *image, const char *rel, uint64_t flags)
{
        _cleanup_close_ int root = open(image->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return -errno;
        /* An image's /etc/passwd may be a symlink to anything: inside its
         * root it can only name the image's own files. */
        uint64_t resolve =
                image_guard_on(GUARD_ACCOUNTS) ? RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS : 0;
        struct open_how how = {.flags = flags | O_CLOEXEC, .resolve = resolve};
        int fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
        return fd < 0 ? -errno : fd;
}

/* etc/<name> of the image, NUL-terminated, at most ACCOUNTS_FILE_MAX. */
static int read_accounts(const struct cage_image *image, const char *name, char **ret)
{
        char rel[32];
        snprintf(rel, sizeof(rel), "etc/%s", name);
        _cleanup_close_ int fd = open_in_image(image, rel, O_RDONLY | O_NONBLOCK);
        if (fd < 0)
                return fd;
        char *buf = malloc(ACCOUNTS_FILE_MAX + 1);
        if (!buf)
                return -ENOMEM;
        ssize_t n = read_full(fd, buf, ACCOUNTS_FILE_MAX);
        if (n < 0) {
                free(buf);
                return (int)n;
        }
        buf[n] = '\0';
        *ret = buf;
        return 0;
}

static bool parse_id(const char *s, uint32_t *ret)
{
        char *end;
        if (s[0] < '0' || s[0] > '9')
                return false;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end || v > ID_MAX)
                return false;
        *ret = (uint32_t)v;
        return true;
}

/* `name` in passwd/group text ("name:x:id:gid:..."): its id (field 3) and,
 * when gid is not NULL, its group (field 4). */
static bool lookup(const char *text, const char *name, uint32_t *id, uint32_t *gid)
{
        size_t len = strlen(name);
        for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
                if (strncmp(line, name, len) != 0 || line[len] != ':')
                        continue;
                char fields[3][24] = {{0}};
                const char *p = line + len + 1;
                for (int f = 0; f < 3 && (p = strchr(p, ':')); f++) {
                        p++;
                        size_t n = strcspn(p, ":\n");
                        snprintf(fields[f], sizeof(fields[f]), "%.*s", (int)n, p);
                }
                return parse_id(fields[0], id) && (!gid || parse_id(fields[1], gid));
        }
        return false;
}

/* One side of User ("name" or "1000"): 1 for a number (no group known), 0
 * for a name found in etc/<file>. */
static int resolve_one(const struct cage_image *image, const char *file, const char *what,
                       uint32_t *id, uint32_t *gid, struct cage_error *err)
{
        if (parse_id(what, id))
                return 1;
        _cleanup_free_ char *text = NULL;
        if (read_accounts(image, file, &text) == 0 && lookup(text, what, id, gid))
                return 0;
        return cage_fail_plain(err, -EINVAL,
                               "image \"%s\": its User names \"%s\", which is not in its /etc/%s",
                               image->ref[0] ? image->ref : image->id, what, file);
}

int cage_image_user(const struct cage_image *image, uint32_t *ret_uid, uint32_t *ret_gid,
                    struct cage_error *err)
{
        char user[256];
        uint32_t uid = 0, gid = 0;
        if (image->user[0]) {
                snprintf(user, sizeof(user), "%s", image->user);
                char *group = strchr(user, ':');
                if (group)
                        *group++ = '\0';
                int r = resolve_one(image, "passwd", user, &uid, &gid, err);
                if (r < 0)
                        return r;
                if (r == 1)
                        gid = uid;
                if (group && (r = resolve_one(image, "group", group, &gid, NULL, err)) < 0)
                        return r;
        }
        *ret_uid = uid;
        *ret_gid = gid;
        return 0;
}

const char *cage_image_workdir(const struct cage_image *image)
{
        const char *wd = image->working_dir;
        if (wd[0] != '/' || strstr(wd, "/./") || strstr(wd, "/../") || strstr(wd, "//") ||
            strlen(wd) > WORKDIR_MAX)
                return NULL;
        if (!wd[1])
                return wd;
        int fd = open_in_image(image, wd + 1, O_PATH | O_DIRECTORY);
        if (fd < 0)
                return NULL;
        close(fd);
        return wd;
}

/* The name of uid in passwd text ("name:x:uid:..."), into buf; false when
 * no line has that uid. */
static bool name_of_uid(const char *text, uint32_t uid, char *buf, size_t size)
{
        for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
                size_t name_len = strcspn(line, ":\n");
                const char *p = line[name_len] == ':' ? strchr(line + name_len + 1, ':') : NULL;
                uint32_t id;
                char field[24];
                if (!p)
                        continue;
                snprintf(field, sizeof(field), "%.*s", (int)strcspn(p + 1, ":\n"), p + 1);
                if (parse_id(field, &id) && id == uid && name_len < size) {
                        snprintf(buf, size, "%.*s", (int)name_len, line);
                        return true;
                }
        }
        return false;
}

void cage_image_user_name(const struct cage_image *image, char *buf, size_t size)
{
        char user[256];
        uint32_t uid;
        snprintf(user, sizeof(user), "%s", image->user);
        user[strcspn(user, ":")] = '\0';
        buf[0] = '\0';
        if (!user[0]) {
                snprintf(buf, size, "root");
        } else if (!parse_id(user, &uid)) {
                snprintf(buf, size, "%s", user);
        } else {
                _cleanup_free_ char *text = NULL;
                if (read_accounts(image, "passwd", &text) == 0)
                        (void)name_of_uid(text, uid, buf, size);
        }
}
