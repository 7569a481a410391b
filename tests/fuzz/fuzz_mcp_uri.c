/* libFuzzer target for the codecage:// resource URIs of MCP
 * (src/server/mcp_resources.c parses them, mcp_content.c builds them): the
 * bytes are a URI to parse and, split at the first NUL, a sandbox name or
 * run id and a path to build one from. Aborts on a broken invariant:
 *  - a parsed URI names a valid id (HTTP_NAME_MAX at most, no "/", "?" or
 *    "#") and a non-empty path no longer than the URI, and building the URI
 *    again from its fields parses back to the same fields;
 *  - for any valid name and non-empty path, the built URI parses back to
 *    exactly that name and path (percent-encoding round trips). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/http.h"
#include "server/mcp.h"

#define INPUT_MAX 2048

static void check_build(bool run, const char *id, const char *path)
{
        char *uri = run ? mcp_uri_run(id, path) : mcp_uri_sandbox_file(id, path);
        FUZZ_CHECK(uri);
        struct mcp_resource_uri u = {0};
        FUZZ_CHECK(mcp_resource_uri_parse(uri, &u) == 0);
        FUZZ_CHECK(u.run == run);
        FUZZ_CHECK(strcmp(u.id, id) == 0);
        FUZZ_CHECK(strcmp(u.path, path) == 0);
        mcp_resource_uri_clear(&u);
        free(uri);
}

static void check_parse(const char *uri)
{
        struct mcp_resource_uri u = {0};
        if (mcp_resource_uri_parse(uri, &u) == 0) {
                FUZZ_CHECK(u.id && u.path);
                FUZZ_CHECK(http_name_is_valid(u.id));
                FUZZ_CHECK(strlen(u.id) <= HTTP_NAME_MAX && !strpbrk(u.id, "/?#"));
                FUZZ_CHECK(u.path[0] && strlen(u.path) <= strlen(uri));
                check_build(u.run, u.id, u.path);
        }
        mcp_resource_uri_clear(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char s[INPUT_MAX + 1];
        size_t n = size < INPUT_MAX ? size : INPUT_MAX;
        memcpy(s, data, n);
        s[n] = '\0';
        check_parse(s);
        size_t first = strlen(s);
        if (first < n) {
                const char *path = s + first + 1;
                if (http_name_is_valid(s) && path[0]) {
                        check_build(true, s, path);
                        check_build(false, s, path);
                }
        }
        return 0;
}
