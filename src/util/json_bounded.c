/* A memory budget for jansson's parser (json_bounded.h). jansson allocates
 * through one pair of global functions; ours are malloc and free that, in
 * a thread whose budget is armed (only inside json_loadb_bounded()), count
 * what is live and refuse an allocation past the budget, which makes
 * json_loadb() fail cleanly. Every other allocation, in every thread, is
 * plain malloc: the pair is installed once and never changes meaning. */
#include "json_bounded.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define CHUNK_HEADER 16 /* what malloc keeps beside each block, roughly */

struct parse_budget {
        size_t used, max;
        bool exceeded;
};

static _Thread_local struct parse_budget *armed;

static size_t cost_of(void *p)
{
        return malloc_usable_size(p) + CHUNK_HEADER;
}

static void *budget_malloc(size_t size)
{
        void *p = malloc(size);
        struct parse_budget *b = armed;
        if (!p || !b)
                return p;
        size_t cost = cost_of(p);
        if (cost > b->max - b->used) {
                free(p);
                b->exceeded = true;
                return NULL;
        }
        b->used += cost;
        return p;
}

/* A free while armed is of a block the parse allocated: jansson frees
 * nothing else inside json_loadb(). */
static void budget_free(void *p)
{
        struct parse_budget *b = armed;
        if (p && b) {
                size_t cost = cost_of(p);
                b->used = cost < b->used ? b->used - cost : 0;
        }
        free(p);
}

static void install(void)
{
        json_set_alloc_funcs(budget_malloc, budget_free);
}

json_t *json_loadb_bounded(const char *buf, size_t len, size_t flags, size_t mem_max,
                           json_error_t *error, bool *over_budget)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        struct parse_budget b = {.max = mem_max};
        pthread_once(&once, install);
        armed = &b;
        json_t *v = json_loadb(buf, len, flags, error);
        armed = NULL;
        if (over_budget)
                *over_budget = !v && b.exceeded;
        return v;
}

json_t *json_load_request(const char *buf, size_t len, size_t flags, json_error_t *error,
                          bool *over_budget)
{
        size_t extra =
                len > (SIZE_MAX - JSON_REQUEST_BASE) / 4 ? SIZE_MAX - JSON_REQUEST_BASE : 4 * len;
        return json_loadb_bounded(buf, len, flags, JSON_REQUEST_BASE + extra, error, over_budget);
}
