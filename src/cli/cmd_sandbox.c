/* `codecage sandbox SUBCOMMAND ...`: the command-line client of a running
 * `codecage serve` (create, ls, get, stop, start, kill, rm, logs, exec,
 * shell, cp), over the HTTP API through client.h.
 *
 * All options live in one table; each entry names the subcommands that
 * take it, which makes both the getopt tables and --help. The global
 * options (--url, --socket, --token, --json) are accepted before and after
 * the subcommand word. Options that shape a request (--memory, --env, ...)
 * are written straight into the JSON request of the subcommand.
 *
 * Exit status: exec and shell follow `codecage run` (the program's code,
 * 128+N for signal N, 121..125 for what codecage decided; cli.h); every
 * other subcommand exits 0 on success. Usage errors, server errors and an
 * unreachable server exit 125 with one line `codecage: MESSAGE` on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "core/output.h"
#include "core/spec.h"
#include "services/config.h"
#include "util/cleanup.h"
#include "util/error.h"
#include "util/fdutil.h"

#define INPUT_MAX        (16ULL << 20) /* --stdin, or a script read from stdin */
#define IDLE_TIMEOUT_MAX (365ULL * 24 * 3600)
#define TAIL_MAX         100000000ULL

enum sb_cmd_bit {
        C_GLOBAL = 1 << 0,
        C_CREATE = 1 << 1,
        C_LS = 1 << 2,
        C_GET = 1 << 3,
        C_STOP = 1 << 4,
        C_START = 1 << 5,
        C_KILL = 1 << 6,
        C_RM = 1 << 7,
        C_LOGS = 1 << 8,
        C_EXEC = 1 << 9,
        C_SHELL = 1 << 10,
        C_CP = 1 << 11,
        C_ALL = (1 << 12) - 1,
};

enum sb_opt {
        OPT_URL = 1000,
        OPT_SOCKET,
        OPT_TOKEN,
        OPT_JSON,
        OPT_HELP,
        OPT_IMAGE,
        OPT_MEMORY,
        OPT_CPUS,
        OPT_PIDS,
        OPT_DISK,
        OPT_TIMEOUT,
        OPT_ENV,
        OPT_SECRET,
        OPT_NETWORK,
        OPT_REQUIREMENT,
        OPT_LABEL,
        OPT_LABEL_FILTER,
        OPT_MOUNT,
        OPT_IDLE_TIMEOUT,
        OPT_TAIL,
        OPT_CWD,
        OPT_STDIN,
};

static const struct sb_option {
        const char *name;
        enum sb_opt id;
        const char *arg; /* NULL: a flag */
        unsigned cmds;   /* enum sb_cmd_bit: who takes it */
        const char *help;
} sb_options[] = {
        {"url", OPT_URL, "URL", C_ALL, "the server's HTTP address, http://HOST:PORT"},
        {"socket", OPT_SOCKET, "PATH", C_ALL,
         "the server's Unix socket (default: DATA_DIR/codecage.sock)"},
        {"token", OPT_TOKEN, "TOKEN", C_ALL, "bearer token (default: $CODECAGE_TOKEN)"},
        {"json", OPT_JSON, NULL, C_ALL, "print the server's JSON answer"},
        {"image", OPT_IMAGE, "REF", C_CREATE,
         "root filesystem: host (default) or an OCI image (python:3.12-slim), pulled by the "
         "server on first use"},
        {"memory", OPT_MEMORY, "MIB", C_CREATE, "memory limit (default: the server's)"},
        {"cpus", OPT_CPUS, "N", C_CREATE, "CPU bandwidth, fractional allowed"},
        {"pids", OPT_PIDS, "N", C_CREATE, "processes and threads"},
        {"disk", OPT_DISK, "MIB", C_CREATE, "size of /workspace + /tmp + /dev/shm"},
        {"timeout", OPT_TIMEOUT, "S", C_CREATE, "default wall-clock limit of each exec, seconds"},
        {"timeout", OPT_TIMEOUT, "S", C_EXEC | C_SHELL, "wall-clock limit of this exec, seconds"},
        {"env", OPT_ENV, "K=V", C_CREATE, "set a variable for every exec (repeatable)"},
        {"env", OPT_ENV, "K=V", C_EXEC | C_SHELL, "set a variable for this exec (repeatable)"},
        {"secret", OPT_SECRET, "NAME", C_CREATE,
         "expose the server's secret NAME as variable NAME (repeatable)"},
        {"network", OPT_NETWORK, "HOST", C_CREATE,
         "allow HTTP(S) to HOST, *.DOMAIN or HOST:PORT through the proxy (repeatable)"},
        {"requirement", OPT_REQUIREMENT, "REQ", C_CREATE,
         "install a pip requirement such as numpy==2.1.0 (repeatable)"},
        {"label", OPT_LABEL, "K=V", C_CREATE, "attach a label (repeatable)"},
        {"label", OPT_LABEL_FILTER, "K=V", C_LS, "only sandboxes with this label"},
        {"mount", OPT_MOUNT, "SRC:DST[:rw]", C_CREATE,
         "bind a host path the server allows, read-only unless :rw (repeatable)"},
        {"idle-timeout", OPT_IDLE_TIMEOUT, "S", C_CREATE,
         "stop the sandbox after S idle seconds (0: never)"},
        {"tail", OPT_TAIL, "N", C_LOGS, "only the last N lines"},
        {"cwd", OPT_CWD, "DIR", C_EXEC | C_SHELL, "working directory inside (default /workspace)"},
        {"stdin", OPT_STDIN, NULL, C_EXEC,
         "send codecage's stdin (UTF-8 text, at most 16 MiB) to the command"},
        {"help", OPT_HELP, NULL, C_ALL, "show this help"},
};

struct sb_command;

struct sb_ctx {
        const struct sb_command *cmd;
        struct cage_client_target target;
        char *socket_storage;
        bool json, send_stdin, help;
        json_t *req; /* create: the spec; exec, shell: the exec request */
        const char *label_filter;
        uint64_t tail;
        bool tail_set;
        char **pos; /* positional arguments */
        int n_pos;
        struct cage_client *client;
        struct cage_error err;
};

struct sb_command {
        const char *name;
        unsigned bit;
        int (*fn)(struct sb_ctx *x); /* exit status, or -errno with x->err */
        const char *args;
        int min_args, max_args; /* max -1: any number */
        const char *help;
};

/* ---- options ---------------------------------------------------------- */

static json_t *req_member(struct sb_ctx *x, const char *key, bool array)
{
        json_t *v = json_object_get(x->req, key);
        if (!v && json_object_set_new(x->req, key, array ? json_array() : json_object()) == 0)
                v = json_object_get(x->req, key);
        return v;
}

/* Whole numbers go out as JSON integers, the rest as reals. */
static int set_number(struct sb_ctx *x, const char *key, double v)
{
        json_t *n = v == floor(v) && fabs(v) < 9007199254740992.0 ? json_integer((json_int_t)v)
                                                                  : json_real(v);
        if (json_object_set_new(x->req, key, n) < 0)
                return cage_fail(&x->err, -ENOMEM, "%s", key);
        return 0;
}

static int set_string(struct sb_ctx *x, const char *opt, const char *key, const char *v)
{
        if (json_object_set_new(x->req, key, json_string(v)) < 0)
                return cage_fail(&x->err, -EINVAL, "%s: \"%s\" is not UTF-8 text", opt, v);
        return 0;
}

static int set_u64(struct sb_ctx *x, const char *opt, const char *key, const char *v, uint64_t lo,
                   uint64_t hi)
{
        uint64_t n;
        int r = parse_u64_range(opt, v, lo, hi, &n, &x->err);
        return r < 0 ? r : set_number(x, key, (double)n);
}

static int set_real(struct sb_ctx *x, const char *opt, const char *key, const char *v, double lo,
                    double hi)
{
        double d;
        int r = parse_double_range(opt, v, lo, hi, &d, &x->err);
        return r < 0 ? r : set_number(x, key, d);
}

/* K=V into the object x->req[key]. */
static int add_kv(struct sb_ctx *x, const char *opt, const char *key, const char *kv)
{
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv)
                return cage_fail(&x->err, -EINVAL, "%s: \"%s\" is not KEY=VALUE", opt, kv);
        _cleanup_free_ char *k = strndup(kv, (size_t)(eq - kv));
        json_t *obj = req_member(x, key, false);
        if (!k || !obj)
                return cage_fail(&x->err, -ENOMEM, "%s", opt);
        if (json_object_set_new(obj, k, json_string(eq + 1)) < 0)
                return cage_fail(&x->err, -EINVAL, "%s: \"%s\" is not UTF-8 text", opt, kv);
        return 0;
}

/* SRC:DST[:rw] (":ro" accepted) into x->req.mounts. Modifies v. */
static int add_mount(struct sb_ctx *x, char *v)
{
        struct cage_mount m;
        bool rw = false;
        char *last = strrchr(v, ':');
        if (last && (strcmp(last, ":rw") == 0 || strcmp(last, ":ro") == 0)) {
                rw = last[2] == 'w';
                *last = '\0';
        }
        int r = parse_mount("--mount", v, rw, &m, &x->err);
        if (r < 0)
                return r;
        json_t *list = req_member(x, "mounts", true);
        json_t *o = json_pack("{s:s, s:s, s:b}", "source", m.source, "target", m.target, "writable",
                              m.writable);
        if (!o)
                return cage_fail(&x->err, -EINVAL, "--mount: \"%s\" is not UTF-8 text", v);
        if (!list || json_array_append_new(list, o) < 0)
                return cage_fail(&x->err, -ENOMEM, "--mount");
        return 0;
}

/* Appends v to the spec's list `field` (the server checks the value). */
static int add_to_list(struct sb_ctx *x, const char *opt, const char *field, const char *v)
{
        json_t *list = req_member(x, field, true);
        if (!list || json_array_append_new(list, json_string(v)) < 0)
                return cage_fail(&x->err, -EINVAL, "%s: \"%s\" is not UTF-8 text", opt, v);
        return 0;
}

static int apply_spec_option(struct sb_ctx *x, int id, char *v)
{
        switch (id) {
        case OPT_IMAGE:
                return set_string(x, "--image", "image", v);
        case OPT_MEMORY:
                return set_u64(x, "--memory", "memory_mib", v, SPEC_MEMORY_MIN / MIB,
                               SPEC_MEMORY_MAX / MIB);
        case OPT_CPUS:
                return set_real(x, "--cpus", "cpus", v, SPEC_CPUS_MIN, SPEC_CPUS_MAX);
        case OPT_PIDS:
                return set_u64(x, "--pids", "pids", v, SPEC_PIDS_MIN, SPEC_PIDS_MAX);
        case OPT_DISK:
                return set_u64(x, "--disk", "disk_mib", v, SPEC_DISK_MIN / MIB,
                               SPEC_DISK_MAX / MIB);
        case OPT_TIMEOUT:
                return set_real(x, "--timeout", "timeout_s", v, 0.001,
                                (double)SPEC_TIMEOUT_MAX_MS / 1000.0);
        case OPT_IDLE_TIMEOUT:
                return set_u64(x, "--idle-timeout", "idle_timeout_s", v, 0, IDLE_TIMEOUT_MAX);
        case OPT_ENV:
                return add_kv(x, "--env", "env", v);
        case OPT_LABEL:
                return add_kv(x, "--label", "labels", v);
        case OPT_SECRET:
                return add_to_list(x, "--secret", "secrets", v);
        case OPT_NETWORK:
                return add_to_list(x, "--network", "network", v);
        case OPT_REQUIREMENT:
                return add_to_list(x, "--requirement", "requirements", v);
        case OPT_MOUNT:
                return add_mount(x, v);
        case OPT_CWD:
                return set_string(x, "--cwd", "cwd", v);
        }
        return cage_fail(&x->err, -EINVAL, "unknown option");
}

static int apply_option(struct sb_ctx *x, int id, char *v)
{
        switch (id) {
        case OPT_URL:
                x->target.url = v;
                return 0;
        case OPT_SOCKET:
                x->target.socket = v;
                return 0;
        case OPT_TOKEN:
                x->target.token = v;
                return 0;
        case OPT_JSON:
                x->json = true;
                return 0;
        case OPT_HELP:
                x->help = true;
                return 0;
        case OPT_STDIN:
                x->send_stdin = true;
                return 0;
        case OPT_LABEL_FILTER:
                if (!strchr(v, '=') || v[0] == '=')
                        return cage_fail(&x->err, -EINVAL, "--label: \"%s\" is not KEY=VALUE", v);
                x->label_filter = v;
                return 0;
        case OPT_TAIL:
                x->tail_set = true;
                return parse_u64_range("--tail", v, 0, TAIL_MAX, &x->tail, &x->err);
        }
        return apply_spec_option(x, id, v);
}

static int bad_option(struct sb_ctx *x, unsigned bit, char **argv)
{
        /* optopt: the character of an unknown short option, else 0 or the
         * id of a long option that lacks its value. */
        char shortopt[3] = {'-', (char)optopt, '\0'};
        const char *bad = optopt > 0 && optopt < 256 ? shortopt : argv[optind - 1];
        return cage_fail(&x->err, -EINVAL,
                         "unknown or incomplete option \"%s\"%s (see codecage sandbox %s%s--help)",
                         bad, bit == C_EXEC && optopt < 256 ? "; the command goes after --" : "",
                         bit == C_GLOBAL ? "" : argv[0], bit == C_GLOBAL ? "" : " ");
}

/* Parses the options of `bit` in argv[1..]; argv[0] is the command word.
 * Before the subcommand word (C_GLOBAL) parsing stops at the first
 * non-option; after it, options and arguments may mix until "--".
 * Returns the index of the first argument, or -errno. */
static int parse_options(struct sb_ctx *x, unsigned bit, int argc, char **argv)
{
        struct option longopts[ELEMENTSOF(sb_options) + 1];
        size_t n = 0;
        for (size_t i = 0; i < ELEMENTSOF(sb_options); i++)
                if (sb_options[i].cmds & bit)
                        longopts[n++] =
                                (struct option){sb_options[i].name,
                                                sb_options[i].arg ? required_argument : no_argument,
                                                NULL, (int)sb_options[i].id};
        longopts[n] = (struct option){0};
        optind = 0; /* a full reset: this is the second parse of the process */
        opterr = 0;
        int c, r;
        while ((c = getopt_long(argc, argv, bit == C_GLOBAL ? "+" : "", longopts, NULL)) != -1) {
                if (c == '?' || c == ':')
                        return bad_option(x, bit, argv);
                if ((r = apply_option(x, c, optarg)) < 0)
                        return r;
        }
        return optind;
}

/* ---- output helpers ------------------------------------------------------ */

static int print_json(struct sb_ctx *x, const json_t *doc)
{
        _cleanup_free_ char *s =
                json_dumps(doc ? doc : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
                return cage_fail(&x->err, -ENOMEM, "printing the answer");
        printf("%s\n", s);
        return 0;
}

/* The server's times, ISO 8601 UTC ("2025-01-02T03:04:05.678Z") or epoch
 * milliseconds, shown in local time; anything else as it came. */
static const char *format_time(const json_t *v, char *buf, size_t size)
{
        struct tm tm = {0};
        time_t secs;
        const char *s = json_string_value(v),
                   *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
        if (end && (*end == '.' || *end == 'Z'))
                secs = timegm(&tm);
        else if (json_is_number(v))
                secs = (time_t)(json_number_value(v) / 1000.0);
        else
                return s ? s : "-";
        if (!localtime_r(&secs, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
                return "-";
        return buf;
}

static const char *str_or_dash(const json_t *obj, const char *key)
{
        const char *s = json_string_value(json_object_get(obj, key));
        return s ? s : "-";
}

/* Text from the sandbox, neutralised when it goes to a terminal. */
static void write_text(int fd, const char *s, size_t len)
{
        _cleanup_free_ char *clean = NULL;
        size_t clean_len;
        if (isatty(fd) && cage_sanitize_text(s, len, &clean, &clean_len) == 0) {
                s = clean;
                len = clean_len;
        }
        (void)write_all(fd, s, len);
}

static char *sandbox_path(const char *name, const char *suffix)
{
        _cleanup_free_ char *esc = cage_client_escape(name, false);
        char *path;
        if (!esc || asprintf(&path, "/v1/sandboxes/%s%s", esc, suffix) < 0)
                return NULL;
        return path;
}

/* Reads all of fd, at most max bytes, NUL-terminated. */
static int read_bounded(struct sb_ctx *x, int fd, const char *what, char **ret, size_t *ret_len)
{
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
                if (cap - len < 2) {
                        size_t ncap = cap ? cap * 2 : 65536;
                        if (ncap > INPUT_MAX + 2)
                                ncap = INPUT_MAX + 2;
                        char *b = realloc(buf, ncap);
                        if (!b)
                                return cage_fail(&x->err, -ENOMEM, "%s", what);
                        buf = b;
                        cap = ncap;
                }
                ssize_t n = read(fd, buf + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return cage_fail(&x->err, -errno, "reading %s", what);
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > INPUT_MAX)
                        return cage_fail(&x->err, -EINVAL,
                                         "%s is larger than %llu MiB (copy large data in with "
                                         "`codecage sandbox cp`)",
                                         what, INPUT_MAX >> 20);
        }
        buf[len] = '\0';
        *ret_len = len;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* ---- create, ls, get, stop/start/kill, rm, logs --------------------------- */

static int do_create(struct sb_ctx *x)
{
        _cleanup_json_ json_t *info = NULL;
        int r = set_string(x, "NAME", "name", x->pos[0]);
        if (r == 0)
                r = cage_client_json(x->client, "POST", "/v1/sandboxes", x->req, &info, &x->err);
        if (r < 0)
                return r;
        if (x->json)
                return print_json(x, info);
        const char *name = json_string_value(json_object_get(info, "name"));
        printf("%s\n", name ? name : x->pos[0]);
        return 0;
}

static int column_width(const json_t *list, const char *key, int min)
{
        for (size_t i = 0; i < json_array_size(list); i++) {
                size_t n = strlen(str_or_dash(json_array_get(list, i), key));
                if (n > (size_t)min)
                        min = n > 256 ? 256 : (int)n;
        }
        return min;
}

static void print_table(const json_t *list)
{
        int w_name = column_width(list, "name", 4), w_state = column_width(list, "state", 5),
            w_image = column_width(list, "image", 5);
        printf("%-*s  %-*s  %-*s  %-19s  %s\n", w_name, "NAME", w_state, "STATE", w_image, "IMAGE",
               "CREATED", "LAST-USED");
        for (size_t i = 0; i < json_array_size(list); i++) {
                const json_t *s = json_array_get(list, i);
                char created[64], used[64];
                printf("%-*s  %-*s  %-*s  %-19s  %s\n", w_name, str_or_dash(s, "name"), w_state,
                       str_or_dash(s, "state"), w_image, str_or_dash(s, "image"),
                       format_time(json_object_get(s, "created"), created, sizeof(created)),
                       format_time(json_object_get(s, "last_used"), used, sizeof(used)));
        }
}

static int do_ls(struct sb_ctx *x)
{
        _cleanup_free_ char *filter =
                x->label_filter ? cage_client_escape(x->label_filter, false) : NULL;
        _cleanup_free_ char *path = NULL;
        _cleanup_json_ json_t *doc = NULL;
        if ((x->label_filter && !filter) ||
            asprintf(&path, "/v1/sandboxes%s%s", filter ? "?label=" : "", filter ? filter : "") < 0)
                return cage_fail(&x->err, -ENOMEM, "ls");
        int r = cage_client_json(x->client, "GET", path, NULL, &doc, &x->err);
        if (r < 0)
                return r;
        if (x->json)
                return print_json(x, doc);
        json_t *list = json_object_get(doc, "sandboxes");
        if (!json_is_array(list))
                return cage_fail(&x->err, -EPROTO, "the codecage server sent no sandbox list");
        print_table(list);
        return 0;
}

/* `get` in plain mode: one "key  value" line per field, in the server's
 * order; objects (labels, spec, usage) as compact JSON. */
static int do_get(struct sb_ctx *x)
{
        _cleanup_free_ char *path = sandbox_path(x->pos[0], "");
        _cleanup_json_ json_t *info = NULL;
        int r = path ? cage_client_json(x->client, "GET", path, NULL, &info, &x->err)
                     : cage_fail(&x->err, -ENOMEM, "get");
        if (r < 0 || x->json)
                return r < 0 ? r : print_json(x, info);
        for (void *it = json_object_iter(info); it; it = json_object_iter_next(info, it)) {
                const char *key = json_object_iter_key(it);
                json_t *v = json_object_iter_value(it);
                char buf[64];
                _cleanup_free_ char *dump = NULL;
                const char *text = json_string_value(v);
                if (strcmp(key, "created") == 0 || strcmp(key, "last_used") == 0)
                        text = format_time(v, buf, sizeof(buf));
                else if (!text)
                        text = dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                printf("%-10s %s\n", key, text ? text : "-");
        }
        return 0;
}

/* stop, start, kill: POST /v1/sandboxes/NAME/<subcommand>. */
static int do_action(struct sb_ctx *x)
{
        _cleanup_free_ char *suffix = NULL, *path = NULL;
        _cleanup_json_ json_t *info = NULL;
        if (asprintf(&suffix, "/%s", x->cmd->name) < 0 || !(path = sandbox_path(x->pos[0], suffix)))
                return cage_fail(&x->err, -ENOMEM, "%s", x->cmd->name);
        int r = cage_client_json(x->client, "POST", path, NULL, &info, &x->err);
        if (r < 0 || x->json)
                return r < 0 ? r : print_json(x, info);
        printf("%s\n", x->pos[0]);
        return 0;
}

/* Removes every NAME given; reports each failure and carries on. */
static int do_rm(struct sb_ctx *x)
{
        int code = 0;
        for (int i = 0; i < x->n_pos; i++) {
                _cleanup_free_ char *path = sandbox_path(x->pos[i], "");
                _cleanup_json_ json_t *doc = NULL;
                int r = path ? cage_client_json(x->client, "DELETE", path, NULL, &doc, &x->err)
                             : cage_fail(&x->err, -ENOMEM, "rm");
                if (r < 0) {
                        fprintf(stderr, "codecage: %s\n", x->err.message);
                        code = EXIT_CODECAGE_FAILED;
                } else if (x->json) {
                        if (doc)
                                print_json(x, doc);
                } else {
                        printf("%s\n", x->pos[i]);
                }
        }
        return code;
}

static int do_logs(struct sb_ctx *x)
{
        char suffix[64];
        snprintf(suffix, sizeof(suffix), "/logs%s%llu", x->tail_set ? "?tail=" : "",
                 (unsigned long long)x->tail);
        if (!x->tail_set)
                suffix[5] = '\0';
        _cleanup_free_ char *path = sandbox_path(x->pos[0], suffix);
        _cleanup_json_ json_t *doc = NULL;
        int r = path ? cage_client_json(x->client, "GET", path, NULL, &doc, &x->err)
                     : cage_fail(&x->err, -ENOMEM, "logs");
        if (r < 0 || x->json)
                return r < 0 ? r : print_json(x, doc);
        json_t *lines = json_object_get(doc, "lines");
        for (size_t i = 0; i < json_array_size(lines); i++) {
                json_t *line = json_array_get(lines, i);
                size_t len = json_string_length(line);
                const char *s = json_string_value(line);
                if (!s)
                        continue;
                write_text(1, s, len);
                if (len == 0 || s[len - 1] != '\n')
                        (void)write_all(1, "\n", 1);
        }
        if (json_is_true(json_object_get(doc, "truncated")))
                fprintf(stderr, "codecage: older log lines were dropped; only the most recent "
                                "are kept\n");
        return 0;
}

/* ---- exec, shell ---------------------------------------------------------- */

/* Live output of an exec: chunks to our stdout/stderr, neutralised on a
 * terminal; the result event kept. */
struct exec_out {
        bool tty[3];
        struct text_sanitizer san[3];
        json_t *result;
};

static void write_live(struct exec_out *o, int fd, const char *p, size_t len, bool flush)
{
        if (!o->tty[fd]) {
                (void)write_all(fd, p, len);
                return;
        }
        do {
                char out[3 * (4096 + 4)];
                size_t chunk = len > 4096 ? 4096 : len;
                size_t n = text_sanitizer_feed(&o->san[fd], p, chunk, out, flush && chunk == len);
                (void)write_all(fd, out, n);
                p += chunk;
                len -= chunk;
        } while (len > 0);
}

static int on_exec_event(void *ctx, const char *event, const char *data, size_t len,
                         struct cage_error *err)
{
        struct exec_out *o = ctx;
        int fd = strcmp(event, "stdout") == 0 ? 1 : strcmp(event, "stderr") == 0 ? 2 : 0;
        bool is_result = strcmp(event, "result") == 0, is_error = strcmp(event, "error") == 0;
        if (!fd && !is_result && !is_error)
                return 0; /* events this client does not know */
        _cleanup_json_ json_t *doc = json_loadb(data, len, 0, NULL);
        if (!json_is_object(doc))
                return cage_fail(err, -EPROTO, "the codecage server sent an invalid \"%s\" event",
                                 event);
        if (is_error)
                return cage_client_api_error(doc, 0, err);
        if (is_result) {
                json_decref(o->result);
                o->result = TAKE_PTR(doc);
                return 0;
        }
        json_t *chunk = json_object_get(doc, "data");
        if (!json_is_string(chunk))
                return cage_fail(err, -EPROTO, "the codecage server sent an invalid \"%s\" event",
                                 event);
        write_live(o, fd, json_string_value(chunk), json_string_length(chunk), false);
        return 0;
}

/* The exit status of `codecage run` for a result document. */
static int exit_code_for(const json_t *res)
{
        static const struct {
                const char *status;
                int code;
        } codes[] = {
                {"timeout", EXIT_TIMEOUT},
                {"oom", EXIT_OOM},
                {"output_limit", EXIT_OUTPUT_LIMIT},
                {"cancelled", EXIT_CANCELLED},
                {"internal_error", EXIT_CODECAGE_FAILED},
        };
        const char *status = json_string_value(json_object_get(res, "status"));
        json_int_t sig = json_integer_value(json_object_get(res, "signal"));
        json_t *code = json_object_get(res, "exit_code");
        if (status && (strcmp(status, "ok") == 0 || strcmp(status, "error") == 0)) {
                if (sig > 0 && sig < 128)
                        return 128 + (int)sig;
                if (json_is_integer(code) && json_integer_value(code) >= 0 &&
                    json_integer_value(code) <= 255)
                        return (int)json_integer_value(code);
                return EXIT_CODECAGE_FAILED;
        }
        for (size_t i = 0; status && i < ELEMENTSOF(codes); i++)
                if (strcmp(status, codes[i].status) == 0)
                        return codes[i].code;
        return EXIT_CODECAGE_FAILED;
}

/* A line on stderr for any status other than the program's own exit. */
static void report_status(const json_t *res)
{
        const char *status = json_string_value(json_object_get(res, "status"));
        const char *reason = json_string_value(json_object_get(res, "reason"));
        json_int_t sig = json_integer_value(json_object_get(res, "signal"));
        if (!status || (strcmp(status, "ok") != 0 && strcmp(status, "error") != 0))
                fprintf(stderr, "codecage: %s: %s\n", status ? status : "unknown status",
                        reason ? reason : "no reason given");
        else if (sig > 0)
                fprintf(stderr, "codecage: %s\n", reason ? reason : "killed by a signal");
}

static int exec_streaming(struct sb_ctx *x, const char *path, json_t **ret)
{
        struct exec_out o = {0};
        _cleanup_json_ json_t *plain = NULL;
        for (int fd = 1; fd <= 2; fd++)
                o.tty[fd] = isatty(fd);
        int r = cage_client_stream(x->client, path, x->req, on_exec_event, &o, &plain, &x->err);
        for (int fd = 1; fd <= 2; fd++)
                if (o.tty[fd])
                        write_live(&o, fd, "", 0, true);
        if (r < 0) {
                json_decref(o.result);
                return r;
        }
        if (!o.result && plain) { /* a server that answered without streaming */
                json_t *out = json_object_get(plain, "stdout"),
                       *err = json_object_get(plain, "stderr");
                write_live(&o, 1, json_string_value(out) ?: "", json_string_length(out), true);
                write_live(&o, 2, json_string_value(err) ?: "", json_string_length(err), true);
                o.result = TAKE_PTR(plain);
        }
        if (!o.result)
                return cage_fail(&x->err, -EPROTO,
                                 "the codecage server ended the exec without a result");
        *ret = o.result;
        return 0;
}

/* Runs x->req in sandbox NAME; big_input: the request carries input from
 * our stdin, the likely cause of a 413. */
static int run_exec(struct sb_ctx *x, bool big_input)
{
        _cleanup_free_ char *path = sandbox_path(x->pos[0], "/exec");
        _cleanup_json_ json_t *res = NULL;
        if (!path)
                return cage_fail(&x->err, -ENOMEM, "exec");
        int r = x->json ? cage_client_json(x->client, "POST", path, x->req, &res, &x->err)
                        : exec_streaming(x, path, &res);
        if (r == -E2BIG && big_input) {
                size_t n = strlen(x->err.message);
                snprintf(x->err.message + n, sizeof(x->err.message) - n,
                         "; copy large input in with `codecage sandbox cp` instead");
        }
        if (r < 0)
                return r;
        if (x->json)
                return print_json(x, res);
        report_status(res);
        return exit_code_for(res);
}

/* Our stdin, whole, as a JSON string into x->req[key]. */
static int req_from_stdin(struct sb_ctx *x, const char *key, const char *what)
{
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = read_bounded(x, 0, what, &text, &len);
        if (r < 0)
                return r;
        if (json_object_set_new(x->req, key, json_stringn(text, len)) < 0)
                return cage_fail(&x->err, -EINVAL,
                                 "%s is not UTF-8 text (copy binary data in with `codecage "
                                 "sandbox cp`)",
                                 what);
        return 0;
}

static int do_exec(struct sb_ctx *x)
{
        json_t *argv = json_array();
        if (json_object_set_new(x->req, "argv", argv) < 0)
                return cage_fail(&x->err, -ENOMEM, "exec");
        for (int i = 1; i < x->n_pos; i++)
                if (json_array_append_new(argv, json_string(x->pos[i])) < 0)
                        return cage_fail(&x->err, -EINVAL, "exec: \"%s\" is not UTF-8 text",
                                         x->pos[i]);
        int r = x->send_stdin ? req_from_stdin(x, "stdin", "--stdin: the input") : 0;
        return r < 0 ? r : run_exec(x, x->send_stdin);
}

static int do_shell(struct sb_ctx *x)
{
        int r = x->n_pos > 1 ? set_string(x, "SCRIPT", "script", x->pos[1])
                             : req_from_stdin(x, "script", "the script on stdin");
        return r < 0 ? r : run_exec(x, x->n_pos == 1);
}

/* ---- cp ------------------------------------------------------------------- */

/* NAME:PATH splits in place; a local path may be written ./a:b or /a:b. */
static bool split_remote(char *arg, char **ret_name, char **ret_path)
{
        char *colon = strchr(arg, ':');
        if (!colon || colon == arg || arg[0] == '.' || memchr(arg, '/', (size_t)(colon - arg)))
                return false;
        *colon = '\0';
        *ret_name = arg;
        *ret_path = colon + 1;
        return true;
}

static const char *last_component(const char *path)
{
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* The API path of NAME:PATH's file; PATH is relative to /workspace (a
 * leading /workspace/ is accepted). An empty or '/'-ended PATH takes
 * local_name as its last component. */
static int remote_file_path(struct sb_ctx *x, const char *name, const char *path,
                            const char *local_name, char **ret)
{
        if (strncmp(path, "/workspace/", 11) == 0)
                path += 11;
        else if (strcmp(path, "/workspace") == 0)
                path = "";
        else if (path[0] == '/')
                return cage_fail(&x->err, -EINVAL,
                                 "cp: \"%s:%s\": sandbox paths are relative to /workspace (or "
                                 "start with /workspace/)",
                                 name, path);
        bool dir = path[0] == '\0' || path[strlen(path) - 1] == '/';
        if (dir && !local_name)
                return cage_fail(&x->err, -EINVAL, "cp: \"%s:%s\" names no file", name, path);
        _cleanup_free_ char *full = NULL, *esc = NULL, *suffix = NULL;
        if (asprintf(&full, "%s%s", path, dir ? local_name : "") < 0 ||
            !(esc = cage_client_escape(full, true)) || asprintf(&suffix, "/files/%s", esc) < 0 ||
            !(*ret = sandbox_path(name, suffix)))
                return cage_fail(&x->err, -ENOMEM, "cp");
        return 0;
}

static int cp_upload(struct sb_ctx *x, const char *src, const char *name, const char *path)
{
        _cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        _cleanup_free_ char *api = NULL;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return cage_fail(&x->err, -errno, "cp: cannot open \"%s\"", src);
        if (!S_ISREG(st.st_mode))
                return cage_fail(&x->err, -EINVAL, "cp: \"%s\" is not a regular file", src);
        if ((uint64_t)st.st_size > CAGE_CLIENT_DOWNLOAD_MAX)
                return cage_fail(&x->err, -EINVAL, "cp: \"%s\" is larger than %llu MiB", src,
                                 CAGE_CLIENT_DOWNLOAD_MAX >> 20);
        int r = remote_file_path(x, name, path, last_component(src), &api);
        return r < 0 ? r : cage_client_upload(x->client, api, fd, (uint64_t)st.st_size, &x->err);
}

/* Into a temporary file next to the destination, renamed over it once
 * complete, so an interrupted copy never leaves a partial DST. */
static int download_into(struct sb_ctx *x, const char *api, const char *dst)
{
        _cleanup_free_ char *tmp = NULL;
        const char *slash = strrchr(dst, '/');
        int dir_len = slash ? (int)(slash - dst) + 1 : 0;
        if (asprintf(&tmp, "%.*s.%s.XXXXXX", dir_len, dst, last_component(dst)) < 0)
                return cage_fail(&x->err, -ENOMEM, "cp");
        _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return cage_fail(&x->err, -errno, "cp: cannot create a file next to \"%s\"", dst);
        mode_t mask = umask(0);
        umask(mask);
        int r = cage_client_download(x->client, api, fd, CAGE_CLIENT_DOWNLOAD_MAX, NULL, &x->err);
        if (r == 0 && (fchmod(fd, 0666 & ~mask) < 0 || fsync(fd) < 0 || rename(tmp, dst) < 0))
                r = cage_fail(&x->err, -errno, "cp: writing \"%s\"", dst);
        if (r < 0)
                unlink(tmp);
        return r;
}

static int cp_download(struct sb_ctx *x, const char *name, const char *path, const char *dst)
{
        _cleanup_free_ char *api = NULL, *target = NULL;
        int r = remote_file_path(x, name, path, NULL, &api);
        if (r < 0)
                return r;
        if (strcmp(dst, "-") == 0)
                return cage_client_download(x->client, api, 1, CAGE_CLIENT_DOWNLOAD_MAX, NULL,
                                            &x->err);
        struct stat st;
        if (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)) {
                if (asprintf(&target, "%s/%s", dst, last_component(path)) < 0)
                        return cage_fail(&x->err, -ENOMEM, "cp");
                dst = target;
        }
        return download_into(x, api, dst);
}

static int do_cp(struct sb_ctx *x)
{
        char *src = x->pos[0], *dst = x->pos[1], *name, *path;
        bool src_remote = split_remote(src, &name, &path);
        if (src_remote == split_remote(dst, &name, &path))
                return cage_fail(&x->err, -EINVAL,
                                 "cp: exactly one of SRC and DST must be NAME:PATH (write a local "
                                 "path with a colon as ./FILE)");
        return src_remote ? cp_download(x, name, path, dst) : cp_upload(x, src, name, path);
}

/* ---- the command ---------------------------------------------------------- */

static const struct sb_command sb_commands[] = {
        {"create", C_CREATE, do_create, "NAME", 1, 1, "create a named sandbox"},
        {"ls", C_LS, do_ls, "", 0, 0, "list sandboxes"},
        {"get", C_GET, do_get, "NAME", 1, 1, "show one sandbox"},
        {"stop", C_STOP, do_action, "NAME", 1, 1, "stop its processes; the workspace is kept"},
        {"start", C_START, do_action, "NAME", 1, 1, "start a stopped sandbox again"},
        {"kill", C_KILL, do_action, "NAME", 1, 1, "like stop, with SIGKILL at once"},
        {"rm", C_RM, do_rm, "NAME [NAME...]", 1, -1, "remove sandboxes and their workspaces"},
        {"logs", C_LOGS, do_logs, "NAME", 1, 1, "print the output of past execs"},
        {"exec", C_EXEC, do_exec, "NAME -- CMD [ARGS...]", 2, -1, "run a command in a sandbox"},
        {"shell", C_SHELL, do_shell, "NAME [SCRIPT]", 1, 2,
         "run a /bin/sh script (read from stdin when omitted)"},
        {"cp", C_CP, do_cp, "SRC DST", 2, 2, "copy a file in or out; one side is NAME:PATH"},
};

static void print_options(FILE *f, unsigned bit)
{
        for (size_t i = 0; i < ELEMENTSOF(sb_options); i++) {
                if (!(sb_options[i].cmds & bit))
                        continue;
                char left[48];
                snprintf(left, sizeof(left), "--%s%s%s", sb_options[i].name,
                         sb_options[i].arg ? " " : "", sb_options[i].arg ? sb_options[i].arg : "");
                fprintf(f, "  %-24s %s\n", left, sb_options[i].help);
        }
}

static void usage(FILE *f, const struct sb_command *cmd)
{
        if (cmd) {
                fprintf(f, "usage: codecage sandbox %s [options] %s\n\n%s.\n\noptions:\n",
                        cmd->name, cmd->args, cmd->help);
                print_options(f, cmd->bit);
                if (cmd->bit & (C_EXEC | C_SHELL))
                        fprintf(f,
                                "\nexit status: as `codecage run`: the program's, 128+N if "
                                "killed by signal N,\n%d timeout, %d out of memory, %d output "
                                "limit, %d cancelled, %d codecage failed.\nWith --json: 0 "
                                "whenever a result is printed.\n",
                                EXIT_TIMEOUT, EXIT_OOM, EXIT_OUTPUT_LIMIT, EXIT_CANCELLED,
                                EXIT_CODECAGE_FAILED);
                return;
        }
        fprintf(f, "usage: codecage sandbox [options] COMMAND [options] [ARGS...]\n\n"
                   "Manages named sandboxes on a running `codecage serve`.\n\ncommands:\n");
        for (size_t i = 0; i < ELEMENTSOF(sb_commands); i++)
                fprintf(f, "  %-8s %-24s %s\n", sb_commands[i].name, sb_commands[i].args,
                        sb_commands[i].help);
        fprintf(f, "\noptions (before or after COMMAND):\n");
        print_options(f, C_GLOBAL);
        fprintf(f, "\n`codecage sandbox COMMAND --help` describes each command. Errors exit %d.\n",
                EXIT_CODECAGE_FAILED);
}

static int resolve_target(struct sb_ctx *x)
{
        struct cage_config *cfg = NULL;
        if (x->target.url && x->target.socket)
                return cage_fail(&x->err, -EINVAL, "--url and --socket exclude each other");
        const char *env = getenv("CODECAGE_TOKEN");
        if (!x->target.token && env && env[0])
                x->target.token = env;
        if (x->target.url || x->target.socket)
                return 0;
        /* The socket a `codecage serve` without listen.unix opens. */
        int r = cage_config_defaults(&cfg, &x->err);
        if (r < 0)
                return r;
        x->socket_storage = cfg->listen_unix ? strdup(cfg->listen_unix) : NULL;
        cage_config_free(cfg);
        if (!x->socket_storage)
                return cage_fail(&x->err, -ENOMEM, "the default socket path");
        x->target.socket = x->socket_storage;
        return 0;
}

static const struct sb_command *find_command(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(sb_commands); i++)
                if (strcmp(name, sb_commands[i].name) == 0)
                        return &sb_commands[i];
        return NULL;
}

static int check_args(struct sb_ctx *x)
{
        const struct sb_command *cmd = x->cmd;
        if (x->n_pos >= cmd->min_args && (cmd->max_args < 0 || x->n_pos <= cmd->max_args))
                return 0;
        if (cmd->bit == C_EXEC && x->n_pos == 1)
                return cage_fail(&x->err, -EINVAL,
                                 "exec: no command given: codecage sandbox exec NAME -- CMD "
                                 "[ARGS...]");
        return cage_fail(&x->err, -EINVAL, "%s: expected %s%s(see codecage sandbox %s --help)",
                         cmd->name, cmd->args, cmd->args[0] ? " " : "nothing ", cmd->name);
}

/* Parses, connects and runs the subcommand; the exit status, or -errno. */
static int sandbox_main(struct sb_ctx *x, int argc, char **argv)
{
        int first = parse_options(x, C_GLOBAL, argc, argv);
        if (first < 0 || x->help || first >= argc) {
                if (first >= 0)
                        usage(x->help ? stdout : stderr, NULL);
                return first < 0 ? first : x->help ? 0 : EXIT_CODECAGE_FAILED;
        }
        if (!(x->cmd = find_command(argv[first])))
                return cage_fail(&x->err, -EINVAL,
                                 "unknown sandbox command \"%s\" (see codecage sandbox --help)",
                                 argv[first]);
        int n = parse_options(x, x->cmd->bit, argc - first, argv + first);
        if (n < 0 || x->help) {
                if (x->help && n >= 0)
                        usage(stdout, x->cmd);
                return n < 0 ? n : 0;
        }
        x->pos = argv + first + n;
        x->n_pos = argc - first - n;
        int r = check_args(x);
        if (r == 0)
                r = resolve_target(x);
        if (r == 0)
                r = cage_client_new(&x->target, &x->client, &x->err);
        return r < 0 ? r : x->cmd->fn(x);
}

int cmd_sandbox(int argc, char **argv)
{
        struct sb_ctx x = {.req = json_object()};
        int r = x.req ? sandbox_main(&x, argc, argv) : cage_fail(&x.err, -ENOMEM, "sandbox");
        if (r < 0)
                fprintf(stderr, "codecage: %s\n", x.err.message);
        fflush(stdout);
        json_decref(x.req);
        cage_client_free(x.client);
        free(x.socket_storage);
        return r < 0 ? EXIT_CODECAGE_FAILED : r;
}
