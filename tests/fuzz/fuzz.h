/* Shared by the fuzz targets: the entry point libFuzzer (or replay_main.c)
 * calls, and FUZZ_CHECK, which aborts with the failed invariant. */
#ifndef CODECAGE_TESTS_FUZZ_H
#define CODECAGE_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* For a target's own reference checks: no coverage feedback from them (they
 * would only steer the fuzzer towards the checker) and no tracing cost.
 * The sanitizers still watch them. */
#if defined(__clang__)
#define FUZZ_REFERENCE __attribute__((no_sanitize("coverage")))
#else
#define FUZZ_REFERENCE
#endif

#define FUZZ_CHECK(cond)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

#endif
