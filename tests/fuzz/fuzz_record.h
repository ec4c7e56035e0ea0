/*
 * The input of the engine fuzz targets: records of a flags byte, a 16-bit
 * little-endian length and that many bytes of message (cut to what is left
 * and to TP_MSG_MAX), sent on the connection the flags choose.
 */
#ifndef STRATA_TESTS_FUZZ_RECORD_H
#define STRATA_TESTS_FUZZ_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

typedef struct fuzz_record {
    uint8_t flags;
    const uint8_t *msg;
    size_t len;
} fuzz_record_t;

/* Reads the record at *pos and moves *pos past it; false at the end. */
static inline bool fuzz_record_next(const uint8_t *data, size_t size,
                                    size_t *pos, fuzz_record_t *rec_out)
{
    size_t i = *pos;
    if (i + 3 > size)
        return false;
    size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
    rec_out->flags = data[i];
    i += 3;
    if (len > size - i)
        len = size - i;
    if (len > TP_MSG_MAX)
        len = TP_MSG_MAX;
    rec_out->msg = data + i;
    rec_out->len = len;
    *pos = i + len;
    return true;
}

#endif
