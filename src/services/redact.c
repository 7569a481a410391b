/* Secret redaction; the rules are in redact.h.
 *
 * One left-to-right pass over the input finds, at each position, the
 * longest secret starting there: a 64 Kibit bitmap of the secrets' first
 * two bytes rejects almost every position with one load, and the few hits
 * binary-search the secrets sorted by (first two bytes, length descending).
 * Matches therefore arrive in start order, which makes grouping a single
 * open interval [group_start, group_end): a match that starts inside it
 * extends it (adding a marker if it reaches further and names another
 * secret), one that lies wholly inside it adds nothing, and any other match
 * closes the group. Memory beyond the output is O(1) per call, and time is
 * O(len) plus the cost of the candidate comparisons. */
#include "redact.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "util/cleanup.h"

struct redact_secret {
        char *name;
        unsigned char *value;
        size_t len;
};

struct cage_redactor {
        atomic_uint refs;
        struct redact_secret *secrets;
        size_t n;
        /* Secrets of two bytes or more, sorted by prefix key, then longest
         * first, then in the order they were added. */
        uint32_t *order;
        size_t n_order;
        uint64_t prefix_bits[65536 / 64];
        int32_t single[256]; /* one-byte secrets: index, or -1 */
};

static unsigned prefix_key(const unsigned char *p)
{
        return (unsigned)p[0] << 8 | p[1];
}

int cage_redactor_new(struct cage_redactor **ret)
{
        struct cage_redactor *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        atomic_init(&r->refs, 1);
        for (size_t i = 0; i < ELEMENTSOF(r->single); i++)
                r->single[i] = -1;
        *ret = r;
        return 0;
}

static bool name_is_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > CAGE_REDACT_NAME_MAX)
                return false;
        return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-") ==
               n;
}

static int order_cmp(const void *a, const void *b, void *ctx)
{
        const struct redact_secret *secrets = ctx;
        uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
        const struct redact_secret *sa = &secrets[ia], *sb = &secrets[ib];
        unsigned ka = prefix_key(sa->value), kb = prefix_key(sb->value);
        if (ka != kb)
                return ka < kb ? -1 : 1;
        if (sa->len != sb->len)
                return sa->len > sb->len ? -1 : 1;
        return ia < ib ? -1 : ia > ib;
}

/* Re-derives the lookup structures after an add. */
static int reindex(struct cage_redactor *r)
{
        uint32_t *order = reallocarray(r->order, r->n, sizeof(*order));
        if (!order)
                return -ENOMEM;
        r->order = order;
        r->n_order = 0;
        memset(r->prefix_bits, 0, sizeof(r->prefix_bits));
        for (size_t i = 0; i < ELEMENTSOF(r->single); i++)
                r->single[i] = -1;
        for (size_t i = 0; i < r->n; i++) {
                const struct redact_secret *s = &r->secrets[i];
                if (s->len == 1) {
                        if (r->single[s->value[0]] < 0)
                                r->single[s->value[0]] = (int32_t)i;
                        continue;
                }
                unsigned key = prefix_key(s->value);
                r->prefix_bits[key / 64] |= 1ULL << (key % 64);
                order[r->n_order++] = (uint32_t)i;
        }
        qsort_r(order, r->n_order, sizeof(*order), order_cmp, r->secrets);
        return 0;
}

int cage_redactor_add(struct cage_redactor *r, const char *name, const void *value, size_t len)
{
        if (!r || !name_is_valid(name) || !value || len == 0 || len > CAGE_REDACT_VALUE_MAX)
                return -EINVAL;
        if (r->n >= CAGE_REDACT_SECRETS_MAX)
                return -E2BIG;
        struct redact_secret *v = reallocarray(r->secrets, r->n + 1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        r->secrets = v;
        _cleanup_free_ char *n = strdup(name);
        _cleanup_free_ unsigned char *val = malloc(len);
        if (!n || !val)
                return -ENOMEM;
        memcpy(val, value, len);
        v[r->n++] = (struct redact_secret){TAKE_PTR(n), TAKE_PTR(val), len};
        return reindex(r);
}

struct cage_redactor *cage_redactor_ref(struct cage_redactor *r)
{
        if (r)
                atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
        return r;
}

struct cage_redactor *cage_redactor_unref(struct cage_redactor *r)
{
        if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
                return NULL;
        for (size_t i = 0; i < r->n; i++) {
                explicit_bzero(r->secrets[i].value, r->secrets[i].len);
                free(r->secrets[i].value);
                free(r->secrets[i].name);
        }
        free(r->secrets);
        free(r->order);
        free(r);
        return NULL;
}

size_t cage_redactor_count(const struct cage_redactor *r)
{
        return r ? r->n : 0;
}

/* The longest secret starting at in[i], or -1. */
static ssize_t match_at(const struct cage_redactor *r, const unsigned char *in, size_t len,
                        size_t i)
{
        size_t avail = len - i;
        if (avail >= 2) {
                unsigned key = prefix_key(in + i);
                if (r->prefix_bits[key / 64] & (1ULL << (key % 64))) {
                        /* First entry with this key; entries follow longest first. */
                        size_t lo = 0, hi = r->n_order;
                        while (lo < hi) {
                                size_t mid = lo + (hi - lo) / 2;
                                if (prefix_key(r->secrets[r->order[mid]].value) < key)
                                        lo = mid + 1;
                                else
                                        hi = mid;
                        }
                        for (size_t j = lo; j < r->n_order; j++) {
                                const struct redact_secret *s = &r->secrets[r->order[j]];
                                if (prefix_key(s->value) != key)
                                        break;
                                if (s->len <= avail && memcmp(in + i, s->value, s->len) == 0)
                                        return r->order[j];
                        }
                }
        }
        return r->single[in[i]];
}

struct outbuf {
        char *data;
        size_t len, cap;
};

static int out_append(struct outbuf *o, const void *p, size_t n)
{
        if (n == 0)
                return 0;
        if (n > SIZE_MAX - 1 - o->len)
                return -ENOMEM;
        if (o->len + n + 1 > o->cap) {
                size_t cap = o->cap ? o->cap : 256;
                while (cap < o->len + n + 1)
                        cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
                char *d = realloc(o->data, cap);
                if (!d)
                        return -ENOMEM;
                o->data = d;
                o->cap = cap;
        }
        memcpy(o->data + o->len, p, n);
        o->len += n;
        o->data[o->len] = '\0';
        return 0;
}

static int out_marker(struct outbuf *o, const char *name)
{
        int r;
        if ((r = out_append(o, CAGE_REDACT_MARKER_START, strlen(CAGE_REDACT_MARKER_START))) < 0 ||
            (r = out_append(o, name, strlen(name))) < 0)
                return r;
        return out_append(o, "]", 1);
}

int cage_redact(const struct cage_redactor *r, const char *in, size_t len, char **ret,
                size_t *ret_len)
{
        if (len > CAGE_REDACT_INPUT_MAX)
                return -E2BIG;
        /* Sized for the common case: no secret, or a few markers. */
        struct outbuf o = {0};
        o.cap = len + 128;
        o.data = malloc(o.cap);
        if (!o.data)
                return -ENOMEM;
        o.data[0] = '\0';
        if (len == 0) {
                *ret = o.data;
                *ret_len = 0;
                return 0;
        }

        const unsigned char *p = (const unsigned char *)in;
        size_t copied = 0; /* input bytes [0, copied) are in the output */
        size_t group_end = 0;
        ssize_t last = -1; /* secret of the last marker in the open group */
        int rc = 0;
        for (size_t i = 0; r && r->n && i < len && rc >= 0; i++) {
                ssize_t k = match_at(r, p, len, i);
                if (k < 0)
                        continue;
                size_t end = i + r->secrets[k].len;
                bool joins = last >= 0 && (i < group_end || (i == group_end && k == last));
                if (joins && end <= group_end)
                        continue; /* wholly inside what the group already covers */
                if (!joins) {
                        /* Close the open group (its bytes are skipped) and copy
                         * the plain bytes up to this match. */
                        if (last >= 0)
                                copied = group_end;
                        rc = out_append(&o, in + copied, i - copied);
                        copied = i;
                        last = -1;
                }
                if (rc >= 0 && k != last)
                        rc = out_marker(&o, r->secrets[k].name);
                last = k;
                group_end = end;
        }
        if (rc >= 0) {
                if (last >= 0)
                        copied = group_end;
                rc = out_append(&o, in + copied, len - copied);
        }
        if (rc < 0) {
                free(o.data);
                return rc;
        }
        *ret = o.data;
        *ret_len = o.len;
        return 0;
}

bool cage_redact_needed(const struct cage_redactor *r, const char *in, size_t len)
{
        if (!r || !r->n)
                return false;
        for (size_t i = 0; i < len; i++)
                if (match_at(r, (const unsigned char *)in, len, i) >= 0)
                        return true;
        return false;
}
