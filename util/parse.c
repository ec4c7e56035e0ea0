/* Number parsing shared by the settings and the tools; see parse.h. */
#include "util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <strings.h>

bool util_parse_size(const char *s, uint64_t *bytes_out)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                 {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                 {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
    if (!isdigit((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno)
        return false;
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        if (strcasecmp(end, units[u].suffix) != 0)
            continue;
        if (n > (unsigned long long)INT64_MAX >> units[u].shift)
            return false;
        *bytes_out = (uint64_t)n << units[u].shift;
        return true;
    }
    return false;
}
