/* libFuzzer target for what the HTTP API parses of a request before any
 * handler runs (src/server/routes.c), and of a JSON body after it: the
 * first line of the input is "METHOD TARGET" (a target may carry a query),
 * the rest is the body. Aborts on a broken invariant:
 *  - a route match answers 0, 400, 404 or 405, always with a message;
 *    405 names the allowed methods; 0 names a handler, and its {name} and
 *    {run_id} are valid names, its {path} has no NUL and no ".."
 *    component;
 *  - query values decode to strings, or are refused with -EINVAL;
 *  - a body is one JSON object or refused with a message, and a route
 *    whose strings may hold NUL reads every body another reads, the same;
 *    an object parsed as a sandbox spec (named and one-shot) gives a spec
 *    document that encodes, or an error with a negative code and a
 *    message. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/http.h"
#include "services/config.h"
#include "services/sandbox_spec.h"

#define INPUT_MAX (64 * 1024)

static bool has_dotdot(const char *path)
{
        for (const char *p = path;; p++) {
                size_t n = strcspn(p, "/");
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return true;
                p += n;
                if (!*p)
                        return false;
        }
}

static void check_route(const char *method, const char *target)
{
        struct http_match m;
        struct cage_error msg = {0};
        char allow[64], *path = strdup(target), *value = NULL;
        FUZZ_CHECK(path != NULL);
        char *query = strchr(path, '?');
        if (query)
                *query++ = '\0';
        unsigned status = http_route_match(method, path, &m, allow, &msg);
        FUZZ_CHECK(status == 0 || status == 400 || status == 404 || status == 405);
        FUZZ_CHECK(status == 0 || msg.message[0]);
        FUZZ_CHECK(status != 405 || allow[0]);
        FUZZ_CHECK((status == 0) == (m.fn != NULL));
        FUZZ_CHECK(!m.name || http_name_is_valid(m.name));
        FUZZ_CHECK(!m.run_id || http_name_is_valid(m.run_id));
        FUZZ_CHECK(!m.path || !has_dotdot(m.path));
        http_match_clear(&m);
        int r = http_query_get(query, "tail", &value);
        FUZZ_CHECK(r == 0 || r == 1 || r == -EINVAL);
        FUZZ_CHECK((r == 1) == (value != NULL));
        free(value);
        free(path);
}

static const struct cage_config *config(void)
{
        static struct cage_config *cfg;
        struct cage_error err = {0};
        if (!cfg)
                FUZZ_CHECK(cage_config_defaults(&cfg, &err) == 0);
        return cfg;
}

static void check_spec(const json_t *doc, bool named)
{
        /* What POST /v1/sandboxes and POST /v1/run hand the service. */
        static const char *const run_extra[] = {"argv", "command", "code", "files", "stdin", NULL};
        struct svc_spec *spec = NULL;
        struct cage_error err = {0};
        int r = svc_spec_parse(config(), doc, named, named ? NULL : run_extra, &spec, &err);
        FUZZ_CHECK((r == 0) == (spec != NULL));
        if (r < 0) {
                FUZZ_CHECK(err.message[0]);
                return;
        }
        FUZZ_CHECK(json_is_object(spec->doc));
        char *text = json_dumps(spec->doc, JSON_COMPACT);
        FUZZ_CHECK(text != NULL);
        free(text);
        svc_spec_free(spec);
}

static void check_body(const char *body, size_t len)
{
        json_t *doc = NULL, *with_nul = NULL;
        struct cage_error err = {0}, err_nul = {0};
        int r = http_body_json(body, len, false, &doc, &err);
        int r_nul = http_body_json(body, len, true, &with_nul, &err_nul);
        FUZZ_CHECK((r == 0) == (doc != NULL) && (r_nul == 0) == (with_nul != NULL));
        FUZZ_CHECK(r == 0 || (r == -EINVAL && err.message[0]));
        FUZZ_CHECK(r_nul == 0 || (r_nul == -EINVAL && err_nul.message[0]));
        /* A route that takes NUL reads every other body the same. */
        FUZZ_CHECK(r < 0 || (r_nul == 0 && json_equal(doc, with_nul)));
        json_decref(with_nul);
        if (r < 0)
                return;
        FUZZ_CHECK(json_is_object(doc));
        check_spec(doc, true);
        check_spec(doc, false);
        json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *buf = malloc(size + 1);
        FUZZ_CHECK(buf != NULL);
        memcpy(buf, data, size);
        buf[size] = '\0';
        size_t line = strcspn(buf, "\n");
        const char *body = buf + line + (line < size);
        size_t body_len = size - (size_t)(body - buf);
        buf[line] = '\0';
        char *space = strchr(buf, ' ');
        if (space && strlen(buf) < INPUT_MAX) {
                *space = '\0';
                check_route(buf, space + 1);
        }
        check_body(body, body_len < INPUT_MAX ? body_len : INPUT_MAX);
        free(buf);
        return 0;
}
