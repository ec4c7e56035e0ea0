/* Statuses of system errors (strata_strerror() is in strata.h). */
#ifndef STRATA_UTIL_STATUS_H
#define STRATA_UTIL_STATUS_H

#include <strata/strata.h>

/* The status of a failed call's errno: STRATA_ERR_NOFILE for a descriptor
 * limit (EMFILE, ENFILE), STRATA_ERR_NOMEM for ENOMEM, else otherwise. */
strata_status_t util_errno_status(int err, strata_status_t otherwise);

#endif /* STRATA_UTIL_STATUS_H */
