/* The result contract as a jansson object, for callers that add fields
 * (artifacts, restarted, run_id) before serialising. */
#ifndef CODECAGE_CORE_RESULT_JSON_H
#define CODECAGE_CORE_RESULT_JSON_H

#include <jansson.h>

#include "codecage/codecage.h"

/* A new object (caller decrefs), NULL on ENOMEM. "artifacts" is []. */
json_t *cage_result_to_json_object(const struct cage_result *r);

#endif
