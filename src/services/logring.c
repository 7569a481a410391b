/* The bounded line ring behind `sandbox logs`; see logring.h. */
#include "logring.h"

#include <stdlib.h>
#include <string.h>

static void evict_oldest(struct log_ring *r)
{
        char *old = r->lines[r->start];
        r->bytes -= strlen(old);
        free(old);
        r->lines[r->start] = NULL;
        r->start = (r->start + 1) % r->cap;
        r->n--;
        r->dropped = true;
}

#define LOG_RING_FIRST_CAP 16

/* A free slot after the last line: the table doubles (its lines in order
 * from slot 0) when full and below LOG_RING_LINES. False when out of memory. */
static bool make_slot(struct log_ring *r)
{
        if (r->n < r->cap)
                return true;
        size_t cap = r->cap ? 2 * r->cap : LOG_RING_FIRST_CAP;
        if (cap > LOG_RING_LINES)
                cap = LOG_RING_LINES;
        char **lines = malloc(cap * sizeof(*lines));
        if (!lines)
                return false;
        for (size_t i = 0; i < r->n; i++)
                lines[i] = r->lines[(r->start + i) % r->cap];
        free(r->lines);
        r->lines = lines;
        r->cap = cap;
        r->start = 0;
        return true;
}

static void push_line(struct log_ring *r, const char *s, size_t len)
{
        static const char marker[] = " [... line cut ...]";
        bool cut = len > LOG_RING_LINE_MAX;
        size_t keep = cut ? LOG_RING_LINE_MAX : len;
        while (cut && keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
                keep--; /* never split a UTF-8 sequence */
        char *line = malloc(keep + (cut ? sizeof(marker) : 1));
        if (!line)
                return;
        memcpy(line, s, keep);
        if (cut)
                memcpy(line + keep, marker, sizeof(marker));
        else
                line[keep] = '\0';
        size_t bytes = strlen(line);
        while (r->n > 0 && (r->n == LOG_RING_LINES || r->bytes + bytes > LOG_RING_BYTES))
                evict_oldest(r);
        if (!make_slot(r)) {
                free(line);
                return;
        }
        r->lines[(r->start + r->n) % r->cap] = line;
        r->n++;
        r->bytes += bytes;
}

/* Joins the partial line with s[0..len) into one line. */
static void push_joined(struct log_ring *r, const char *s, size_t len)
{
        if (!r->partial) {
                push_line(r, s, len);
                return;
        }
        size_t keep = len > LOG_RING_LINE_MAX ? LOG_RING_LINE_MAX + 1 : len;
        char *joined = realloc(r->partial, r->partial_len + keep);
        if (joined) {
                memcpy(joined + r->partial_len, s, keep);
                push_line(r, joined, r->partial_len + keep);
        }
        free(joined ? joined : r->partial);
        r->partial = NULL;
        r->partial_len = 0;
}

void log_ring_append(struct log_ring *r, const char *text, size_t len)
{
        while (len > 0) {
                const char *nl = memchr(text, '\n', len);
                if (!nl)
                        break;
                push_joined(r, text, (size_t)(nl - text));
                len -= (size_t)(nl - text) + 1;
                text = nl + 1;
        }
        if (len == 0)
                return;
        size_t room =
                r->partial_len < LOG_RING_LINE_MAX + 1 ? LOG_RING_LINE_MAX + 1 - r->partial_len : 0;
        size_t add = len < room ? len : room;
        char *p = realloc(r->partial, r->partial_len + add + 1);
        if (!p)
                return;
        memcpy(p + r->partial_len, text, add);
        r->partial = p;
        r->partial_len += add;
}

void log_ring_end_block(struct log_ring *r)
{
        if (!r->partial)
                return;
        push_line(r, r->partial, r->partial_len);
        free(r->partial);
        r->partial = NULL;
        r->partial_len = 0;
}

json_t *log_ring_tail(const struct log_ring *r, size_t tail)
{
        json_t *lines = json_array();
        size_t skip = tail && tail < r->n ? r->n - tail : 0;
        for (size_t i = skip; i < r->n; i++)
                json_array_append_new(lines, json_string(r->lines[(r->start + i) % r->cap]));
        return json_pack("{s:o, s:b}", "lines", lines, "truncated", r->dropped || skip > 0);
}

void log_ring_clear(struct log_ring *r)
{
        while (r->n > 0)
                evict_oldest(r);
        free(r->lines);
        r->lines = NULL;
        r->cap = r->start = 0;
        free(r->partial);
        r->partial = NULL;
        r->partial_len = 0;
        r->dropped = false;
}
