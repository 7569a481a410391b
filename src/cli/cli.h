/* Subcommands of the codecage CLI and the helpers they share. */
#ifndef CODECAGE_CLI_CLI_H
#define CODECAGE_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>

#include "codecage/codecage.h"
#include "services/audit.h"

/* Exit codes of `codecage run` besides the program's own (see docs/CLI.md). */
enum {
        EXIT_OUTPUT_LIMIT = 121,
        EXIT_OOM = 122,
        EXIT_CANCELLED = 123,
        EXIT_TIMEOUT = 124,
        EXIT_CODECAGE_FAILED = 125, /* usage error or internal error */
        EXIT_CANNOT_EXECUTE = 126,
        EXIT_NOT_FOUND = 127,
};

/* fds 0-2 must exist so no pipe or file we open lands on them. */
void cli_ensure_std_fds(void);
/* The lean binary: exec codecage-full (next to it) with argv; returns only
 * after printing why it could not (then EXIT_CODECAGE_FAILED). */
int cli_exec_full(char **argv);

int cmd_run(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_sandbox(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_image(int argc, char **argv);
/* MCP (cmd_mcp.c): `codecage mcp`, and the --mcp-* options of serve, taken
 * out of argv before cmd_serve() sees it (-EINVAL after a message). */
int cmd_mcp(int argc, char **argv);
int mcp_serve_options_take(int *argc, char **argv);

/* Value parsers: 0 on success, -EINVAL with a message naming the option and
 * the allowed range in err otherwise. */
int parse_u64_range(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *ret,
                    struct cage_error *err);
int parse_seconds_ms(const char *opt, const char *s, uint64_t max_ms, uint64_t *ret,
                     struct cage_error *err);
int parse_double_range(const char *opt, const char *s, double lo, double hi, double *ret,
                       struct cage_error *err);
int parse_mount(const char *opt, char *s, bool writable, struct cage_mount *ret,
                struct cage_error *err);
int parse_debug_disable(const char *s, uint32_t *ret, struct cage_error *err);

/* Runs getopt_long over argv with opts (no short options): on(ctx, c,
 * optarg) for each option but --help ('h', which prints usage to stdout and
 * makes the result 1) and unknown ones (usage to stderr, -EINVAL). on
 * returns 0 or -EINVAL. Then 0. */
struct option;
int cli_getopt(int argc, char **argv, const struct option *opts,
               int (*on)(void *ctx, int c, char *arg), void (*usage)(FILE *f), void *ctx);

/* Blocks SIGINT and SIGTERM (taken later through sigwait or a signalfd)
 * and fills *ret with them; call before any thread exists. */
void cli_block_stop_signals(sigset_t *ret);

/* The image store of the config's data_dir (image_store.c). */
struct cage_config;
struct cage_image_store;
struct cli_image_store {
        struct cage_config *cfg;
        struct cage_image_store *store;
        bool tty; /* progress as one updating line */
        char last_status[256];
};
/* config_path NULL: the built-in defaults. */
int cli_image_store_open(const char *config_path, struct cli_image_store *ret,
                         struct cage_error *err);
void cli_image_store_close(struct cli_image_store *s);
/* A cage_image_progress_fn whose userdata is the cli_image_store. */
void cli_image_progress(void *userdata, uint64_t done, uint64_t total, const char *status);
void cli_image_progress_end(struct cli_image_store *s);
/* An image.* record in the config's audit log (a warning when it cannot be
 * written); takes fields. */
void cli_image_audit(struct cli_image_store *s, enum cage_audit_event event, json_t *fields);

#endif
