/* libFuzzer target for src/util/base64.c, the strict decoder of file
 * contents sent in JSON (HTTP API, MCP write_file), and the encoder it is
 * paired with (mcp_base64(), src/server/mcp_content.c). Aborts on a broken
 * invariant:
 *  - the input, encoded, decodes back to exactly the input;
 *  - an encoding is canonical: 4 * ceil(n / 3) characters of the alphabet;
 *  - whatever the decoder accepts is the one encoding of what it decoded
 *    (encoding the result gives the input back), NUL-terminated, and it
 *    accepts nothing whose length is not a multiple of 4. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/mcp.h"
#include "util/base64.h"

static void check_round_trip(const uint8_t *data, size_t size)
{
        char *enc = mcp_base64(data, size);
        FUZZ_CHECK(enc);
        size_t elen = strlen(enc);
        FUZZ_CHECK(elen == (size + 2) / 3 * 4);
        FUZZ_CHECK(
                strspn(enc, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
                elen);
        void *dec = NULL;
        size_t dlen = 0;
        FUZZ_CHECK(cage_base64_decode(enc, elen, &dec, &dlen) == 0);
        FUZZ_CHECK(dlen == size);
        FUZZ_CHECK(size == 0 || memcmp(dec, data, size) == 0);
        free(dec);
        free(enc);
}

static void check_decode(const uint8_t *data, size_t size)
{
        void *dec = NULL;
        size_t dlen = 0;
        int r = cage_base64_decode((const char *)data, size, &dec, &dlen);
        if (r < 0) {
                FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
                return;
        }
        FUZZ_CHECK(size % 4 == 0);
        FUZZ_CHECK(dlen <= size / 4 * 3 && dlen + 2 >= size / 4 * 3);
        FUZZ_CHECK(((const char *)dec)[dlen] == '\0');
        char *enc = mcp_base64(dec, dlen);
        FUZZ_CHECK(enc);
        FUZZ_CHECK(strlen(enc) == size && memcmp(enc, data, size) == 0);
        free(enc);
        free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_round_trip(data, size);
        check_decode(data, size);
        return 0;
}
