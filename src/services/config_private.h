/* Helpers shared by the files that parse the server config: config.c (the
 * core of the file) and config_network.c (network, pip and fetch). Each
 * reads one member of a JSON object, names the field in its message and
 * returns 0 when the member is absent, 1 when it was read, < 0 on error. */
#ifndef CODECAGE_SERVICES_CONFIG_PRIVATE_H
#define CODECAGE_SERVICES_CONFIG_PRIVATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "config.h"

enum num_kind { NUM_U64, NUM_U32, NUM_DOUBLE };

/* Refuses any key of obj that is not in allowed[] (NULL-terminated). */
int config_check_keys(json_t *obj, const char *where, const char *const *allowed,
                      struct cage_error *err);
int config_get_object(json_t *obj, const char *where, const char *key, json_t **ret,
                      struct cage_error *err);
/* A string of 1..max bytes, borrowed from the JSON tree. */
int config_get_string(json_t *obj, const char *where, const char *key, size_t max, const char **ret,
                      struct cage_error *err);
/* A number of `kind` within [lo, hi]. */
int config_get_number(json_t *obj, const char *where, const char *key, enum num_kind kind,
                      double lo, double hi, double *ret, struct cage_error *err);

/* "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" into *ss (ready for
 * bind()); field names the key in the message. */
int config_parse_addr(const char *field, const char *s, struct sockaddr_storage *ss,
                      socklen_t *ss_len, bool *loopback, struct cage_error *err);
/* config_e2b.c: the "e2b" section. */
int config_parse_e2b(json_t *root, struct cage_config *cfg, struct cage_error *err);

/* config_network.c: the "network", "pip" and "fetch" sections. */
int config_parse_network(json_t *root, struct cage_config *cfg, struct cage_error *err);
void config_free_network(struct cage_config *cfg);

#endif
