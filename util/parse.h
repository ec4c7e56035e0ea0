/* Parsing of the numbers people write in settings and on command lines. */
#ifndef STRATA_UTIL_PARSE_H
#define STRATA_UTIL_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* A byte count: decimal digits, then optionally a unit in any case: b, k/kb/
 * kib, m/mb/mib, g/gb/gib or t/tb/tib (powers of 1024), e.g. "4096", "64K",
 * "4MiB". False for anything else, a sign or blank included, or a value above
 * INT64_MAX. Does not log: the caller knows which setting it was. */
bool util_parse_size(const char *s, uint64_t *bytes_out);

#endif /* STRATA_UTIL_PARSE_H */
