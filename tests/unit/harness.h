/* A tiny unit-test harness: TEST(name) defines a test, CHECK(cond) records a
 * failure without stopping, RUN_TESTS() runs them all and prints the closing
 * line "N passed, M failed". Each test binary is its own process (meson runs
 * them with a timeout). */
#ifndef CODECAGE_TEST_HARNESS_H
#define CODECAGE_TEST_HARNESS_H

#include <stdio.h>
#include <string.h>

struct test_case {
        const char *name;
        void (*fn)(void);
};

extern int test_failures_in_case;
extern int test_skipped_in_case;

/* Ends the case as skipped (it cannot run here), saying why. A binary whose
 * every case skipped exits 77, which meson reports as a skip. */
#define SKIP(...)                                                                                  \
        do {                                                                                       \
                printf("  skip: " __VA_ARGS__);                                                    \
                printf("\n");                                                                      \
                test_skipped_in_case = 1;                                                          \
                return;                                                                            \
        } while (0)

#define CHECK(cond)                                                                                \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
                        test_failures_in_case++;                                                   \
                }                                                                                  \
        } while (0)

#define CHECK_STREQ(a, b)                                                                          \
        do {                                                                                       \
                const char *a_ = (a), *b_ = (b);                                                   \
                if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                           \
                        fprintf(stderr, "  %s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__,         \
                                a_ ? a_ : "(null)", b_ ? b_ : "(null)");                           \
                        test_failures_in_case++;                                                   \
                }                                                                                  \
        } while (0)

#define TEST(name) static void name(void)

int test_main(const struct test_case *cases, size_t n);

#define RUN_TESTS(...)                                                                             \
        int test_failures_in_case;                                                                 \
        int test_skipped_in_case;                                                                  \
        int main(void)                                                                             \
        {                                                                                          \
                static const struct test_case cases_[] = {__VA_ARGS__};                            \
                return test_main(cases_, sizeof(cases_) / sizeof(cases_[0]));                      \
        }

#define T(fn)                                                                                      \
        {                                                                                          \
#fn, fn                                                                            \
        }

#endif
