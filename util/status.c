/* strata_strerror() and strata_version_string(): the library's identity;
 * the statuses of system errors. */
#include "util/status.h"

#include <errno.h>

const char *strata_strerror(strata_status_t status)
{
    switch (status) {
#define STRATA_STATUS_TEXT(name, value, text)                                  \
    case name:                                                                 \
        return text;
        STRATA_STATUS_LIST(STRATA_STATUS_TEXT)
#undef STRATA_STATUS_TEXT
    }
    return "unknown status";
}

const char *strata_version_string(void)
{
    return STRATA_VERSION_STRING;
}

strata_status_t util_errno_status(int err, strata_status_t otherwise)
{
    return err == EMFILE || err == ENFILE ? STRATA_ERR_NOFILE
           : err == ENOMEM                ? STRATA_ERR_NOMEM
                                          : otherwise;
}
