/* Runner for harness.h: runs every case, prints one line per case and the
 * closing "N passed, M failed, K skipped" line; exits 1 on any failure, 77
 * (meson's "skipped") when every case was skipped, else 0. */
#include "harness.h"

#define EXIT_SKIPPED 77

int test_main(const struct test_case *cases, size_t n)
{
        int passed = 0, failed = 0, skipped = 0;
        for (size_t i = 0; i < n; i++) {
                test_failures_in_case = 0;
                test_skipped_in_case = 0;
                cases[i].fn();
                if (test_failures_in_case) {
                        failed++;
                        printf("FAIL %s\n", cases[i].name);
                } else if (test_skipped_in_case) {
                        skipped++;
                        printf("skip %s\n", cases[i].name);
                } else {
                        passed++;
                        printf("ok   %s\n", cases[i].name);
                }
        }
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        if (failed)
                return 1;
        return skipped && (size_t)skipped == n ? EXIT_SKIPPED : 0;
}
