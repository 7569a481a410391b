/* Secret redaction: replaces the exact bytes of known secret values with a
 * visible marker "[REDACTED:NAME]" before output reaches a result, a log or
 * the audit log.
 *
 * Rules (docs/AUDIT.md, "Redaction"):
 *  - every occurrence of every secret value is removed, including
 *    occurrences that overlap each other or sit inside a longer secret;
 *  - at each position the longest secret starting there wins; occurrences
 *    that overlap (or are adjacent copies of the same secret) form one
 *    group, and the whole group is replaced by the markers of the
 *    occurrences that extend it, in order, repeated names collapsed:
 *    "[REDACTED:A]" for "AAAA...", "[REDACTED:A][REDACTED:B]" when the end
 *    of A's value overlaps the start of B's, and just "[REDACTED:A]" when
 *    B's value lies inside A's; bytes outside groups are copied unchanged;
 *  - only contiguous, exact bytes are caught: a secret split by a
 *    truncation marker, re-encoded (base64, hex, JSON escapes, reversed,
 *    spaced out) or printed in pieces passes through;
 *  - every non-empty value is redacted, so a very short secret ("1",
 *    "yes") also removes innocent text that happens to contain it.
 *
 * Build a redactor with cage_redactor_new() + cage_redactor_add(), then
 * share it: after the last add it is read-only and cage_redact() is safe
 * from any number of threads. Holders take a reference. */
#ifndef CODECAGE_SERVICES_REDACT_H
#define CODECAGE_SERVICES_REDACT_H

#include <stdbool.h>
#include <stddef.h>

#define CAGE_REDACT_SECRETS_MAX  1536
#define CAGE_REDACT_NAME_MAX     80
#define CAGE_REDACT_VALUE_MAX    (64 * 1024)
#define CAGE_REDACT_INPUT_MAX    (1024ULL * 1024 * 1024)
#define CAGE_REDACT_MARKER_START "[REDACTED:"

struct cage_redactor;

int cage_redactor_new(struct cage_redactor **ret);
/* Adds one secret. name: 1..80 bytes of [A-Za-z0-9_.:-]; value: 1..64 KiB
 * of any bytes. -EINVAL for a bad name or an empty/oversized value,
 * -E2BIG past CAGE_REDACT_SECRETS_MAX. Not safe once the redactor is
 * shared. */
int cage_redactor_add(struct cage_redactor *r, const char *name, const void *value, size_t len);
struct cage_redactor *cage_redactor_ref(struct cage_redactor *r);
/* Drops a reference; the last one wipes the values and frees. Accepts NULL. */
struct cage_redactor *cage_redactor_unref(struct cage_redactor *r);
size_t cage_redactor_count(const struct cage_redactor *r);

/* Writes a redacted copy of in[0..len) to *ret (malloc'ed, NUL-terminated
 * after *ret_len bytes). A NULL or empty redactor copies. -ENOMEM, or
 * -E2BIG for inputs over 1 GiB. */
int cage_redact(const struct cage_redactor *r, const char *in, size_t len, char **ret,
                size_t *ret_len);
/* Whether in[0..len) holds any secret value (no allocation). */
bool cage_redact_needed(const struct cage_redactor *r, const char *in, size_t len);

#endif
