/* What `codecage run` parsed (cmd_run.c), shared with the code that turns
 * --image REF into a root: run_image.c in the full binary, run_delegate.c
 * in the lean one, which hands such a run to the full binary. */
#ifndef CODECAGE_CLI_RUN_H
#define CODECAGE_CLI_RUN_H

#include <stdbool.h>

#include "core/spec.h"

struct run_image; /* an image leased from the store for the run */

struct run_args {
        struct cage_spec spec;
        char **argv; /* "run" and its arguments as given, for a hand-over */
        bool json;
        bool output_max_set, output_stop_set, workdir_set, user_set;
        const char *config;
        struct run_image *image; /* --image REF, leased while it runs */
        char *env_pass_storage[CAGE_ENV_MAX];
        size_t n_env_pass;
        int stdin_fd;
};

/* --image host and --image DIR need nothing; --image REF becomes the
 * image's root, with its Env, WorkingDir and User under the options. The
 * lean binary does not return for REF: it execs the full one. */
int run_use_image(struct run_args *a, struct cage_error *err);
struct run_image *run_image_free(struct run_image *img);

#endif
