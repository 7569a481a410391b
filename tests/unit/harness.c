/* Runner for harness.h: runs every case, prints one line per case and the
 * closing "N passed, M failed" line; exits non-zero on any failure. */
#include "harness.h"

int test_main(const struct test_case *cases, size_t n)
{
        int passed = 0, failed = 0;
        for (size_t i = 0; i < n; i++) {
                test_failures_in_case = 0;
                cases[i].fn();
                if (test_failures_in_case) {
                        failed++;
                        printf("FAIL %s\n", cases[i].name);
                } else {
                        passed++;
                        printf("ok   %s\n", cases[i].name);
                }
        }
        printf("%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
}
