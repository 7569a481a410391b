/* Unit tests for the result contract's JSON: field names and types,
 * null exit_code for a signal, the truncated object, reason. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codecage/codecage.h"
#include "harness.h"

static json_t *render(const struct cage_result *r)
{
        char *s = cage_result_to_json(r);
        json_t *j = s ? json_loads(s, 0, NULL) : NULL;
        free(s);
        return j;
}

TEST(ok_result_has_every_contract_field)
{
        struct cage_result r = {.status = CAGE_STATUS_OK,
                                .exit_code = 0,
                                .duration_ms = 5,
                                .cpu_ms = 3,
                                .peak_memory_bytes = 4096,
                                .limits_backend = "v1"};
        r.out.data = "hi\n";
        r.out.len = 3;
        json_t *j = render(&r);
        CHECK(j != NULL);
        static const char *const keys[] = {"status",      "exit_code", "signal",
                                           "stdout",      "stderr",    "truncated",
                                           "duration_ms", "cpu_ms",    "peak_memory_bytes",
                                           "artifacts",   "reason"};
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                CHECK(json_object_get(j, keys[i]) != NULL);
        CHECK_STREQ(json_string_value(json_object_get(j, "status")), "ok");
        CHECK(json_integer_value(json_object_get(j, "exit_code")) == 0);
        CHECK(json_is_null(json_object_get(j, "signal")));
        CHECK(json_is_null(json_object_get(j, "truncated")));
        CHECK(json_is_null(json_object_get(j, "reason")));
        CHECK_STREQ(json_string_value(json_object_get(j, "stdout")), "hi\n");
        CHECK(json_is_array(json_object_get(j, "artifacts")));
        json_decref(j);
}

TEST(signal_makes_exit_code_null)
{
        struct cage_result r = {.status = CAGE_STATUS_ERROR, .exit_code = -1, .signal = 9};
        snprintf(r.reason, sizeof(r.reason), "killed by signal 9");
        json_t *j = render(&r);
        CHECK(json_is_null(json_object_get(j, "exit_code")));
        CHECK(json_integer_value(json_object_get(j, "signal")) == 9);
        CHECK_STREQ(json_string_value(json_object_get(j, "reason")), "killed by signal 9");
        json_decref(j);
}

TEST(truncated_lists_only_cut_streams)
{
        struct cage_result r = {.status = CAGE_STATUS_OK};
        r.err.truncated = true;
        r.err.kept = 10;
        r.err.total = 1000;
        json_t *j = render(&r);
        json_t *t = json_object_get(j, "truncated");
        CHECK(json_is_object(t));
        CHECK(json_object_get(t, "stdout") == NULL);
        CHECK(json_integer_value(json_object_get(json_object_get(t, "stderr"), "kept")) == 10);
        CHECK(json_integer_value(json_object_get(json_object_get(t, "stderr"), "total")) == 1000);
        json_decref(j);
}

TEST(status_names)
{
        CHECK_STREQ(cage_status_to_string(CAGE_STATUS_OUTPUT_LIMIT), "output_limit");
        CHECK_STREQ(cage_status_to_string(CAGE_STATUS_INTERNAL_ERROR), "internal_error");
        CHECK_STREQ(cage_status_to_string((enum cage_status)99), "internal_error");
}

RUN_TESTS(T(ok_result_has_every_contract_field), T(signal_makes_exit_code_null),
          T(truncated_lists_only_cut_streams), T(status_names))
