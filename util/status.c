/* strata_strerror() and strata_version_string(): the library's identity. */
#include <strata/strata.h>

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
