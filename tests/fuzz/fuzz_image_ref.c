/* libFuzzer target for src/images/reference.c: the bytes are an image
 * reference to parse and, split at the first newline, an allow pattern and
 * a reference to match. Aborts on any broken invariant:
 *  - a parsed reference has a registry and a repository, a tag or a digest,
 *    and a normalised text shorter than CAGE_IMAGE_REF_MAX;
 *  - parsing the normalised text again gives the same reference;
 *  - a normalised reference matches itself as a pattern, and its
 *    repository (without tag or digest) as a pattern matches it too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "images/images.h"

#define INPUT_MAX 1024

static void check_parse(const char *s)
{
        struct cage_image_ref r, again;
        if (cage_image_ref_parse(s, &r, NULL) < 0)
                return;
        FUZZ_CHECK(r.registry[0] && r.repository[0]);
        FUZZ_CHECK(r.tag[0] || r.digest[0]);
        FUZZ_CHECK(strlen(r.full) < CAGE_IMAGE_REF_MAX);
        FUZZ_CHECK(!r.digest[0] || cage_image_digest_valid(r.digest));
        FUZZ_CHECK(cage_image_ref_parse(r.full, &again, NULL) == 0);
        FUZZ_CHECK(strcmp(r.full, again.full) == 0);
        FUZZ_CHECK(cage_image_ref_matches(r.full, r.full));
        char repo[CAGE_IMAGE_REF_MAX + 8];
        snprintf(repo, sizeof(repo), "%s/%s", r.registry, r.repository);
        FUZZ_CHECK(cage_image_ref_matches(repo, r.full));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char s[INPUT_MAX + 1];
        size_t n = size < INPUT_MAX ? size : INPUT_MAX;
        memcpy(s, data, n);
        s[n] = '\0';
        check_parse(s);
        char *nl = strchr(s, '\n');
        if (nl) {
                *nl = '\0';
                (void)cage_image_ref_matches(s, nl + 1);
                check_parse(nl + 1);
        }
        return 0;
}
