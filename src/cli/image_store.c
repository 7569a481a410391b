/* The image store as the command line opens it: the config file given with
 * --config (or the built-in defaults: data_dir /var/lib/codecage), whose
 * data_dir holds the store that `codecage serve` uses too, and progress of
 * pulls and imports on stderr (one updating line on a terminal, one line
 * per step otherwise). Shared by `codecage image` and `codecage run --image`. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "images/images.h"
#include "services/audit.h"
#include "services/config.h"
#include "util/error.h"

int cli_image_store_open(const char *config_path, struct cli_image_store *ret,
                         struct cage_error *err)
{
        char dir[PATH_MAX];
        memset(ret, 0, sizeof(*ret));
        ret->tty = isatty(STDERR_FILENO);
        int r = config_path ? cage_config_load(config_path, &ret->cfg, err)
                            : cage_config_defaults(&ret->cfg, err);
        if (r < 0)
                return r;
        if (snprintf(dir, sizeof(dir), "%s/images", ret->cfg->data_dir) >= (int)sizeof(dir))
                return cage_fail_plain(err, -ENAMETOOLONG, "data_dir is too long");
        return cage_image_store_open(dir, &ret->cfg->images, &ret->store, err);
}

void cli_image_store_close(struct cli_image_store *s)
{
        s->store = cage_image_store_close(s->store);
        s->cfg = cage_config_free(s->cfg);
}

void cli_image_progress(void *userdata, uint64_t done, uint64_t total, const char *status)
{
        struct cli_image_store *s = userdata;
        if (s->tty) {
                if (total)
                        fprintf(stderr, "\r\033[K%s %.1f/%.1f MiB", status, done / 1048576.0,
                                total / 1048576.0);
                else
                        fprintf(stderr, "\r\033[K%s", status);
                return;
        }
        if (strcmp(status, s->last_status) != 0) {
                fprintf(stderr, "%s\n", status);
                snprintf(s->last_status, sizeof(s->last_status), "%s", status);
        }
}

void cli_image_audit(struct cli_image_store *s, enum cage_audit_event event, json_t *fields)
{
        struct cage_audit *audit = NULL;
        struct cage_error err = {0};
        if (fields)
                json_object_set_new(fields, "by", json_string("codecage image"));
        int r = cage_audit_open(s->cfg->audit_log, NULL, &audit, &err);
        if (r == 0)
                r = cage_audit_record(audit, event, NULL, NULL, NULL, fields, &err);
        if (r < 0)
                fprintf(stderr, "codecage: warning: the audit log: %s\n", err.message);
        cage_audit_close(audit);
        json_decref(fields);
}

void cli_image_progress_end(struct cli_image_store *s)
{
        if (s->tty)
                fprintf(stderr, "\r\033[K");
}
