/*
 * Reading the small files a user names (the settings file, the job secret,
 * the coordinator's address): only a regular file, only up to a bound, and
 * never a wait (a FIFO or a device named by mistake would block the reader
 * forever, a directory reads as an empty file).
 */
#ifndef STRATA_UTIL_FILE_H
#define STRATA_UTIL_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include <strata/strata.h>

/* Reads the whole of the regular file PATH, at most MAX bytes, into a
 * NUL-terminated buffer the caller frees with util_free(). Errors are
 * STRATA_ERR_CONFIG, logged once as "WHAT: why" (WHAT names the file, e.g.
 * "STRATA_CONFIG=/etc/strata.conf"), except that a file that does not exist
 * is STRATA_ERR_AGAIN, not logged, when MISSING_OK. */
strata_status_t util_file_read(const char *path, const char *what, size_t max,
                               bool missing_ok, char **text_out,
                               size_t *len_out);

#endif /* STRATA_UTIL_FILE_H */
