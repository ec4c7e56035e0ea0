/* CRC-32C through ISA-L. */
#include <isa-l/crc.h>

#include <strata/strata_agg.h>

/* crc32_iscsi(buf, len, init) runs the reflected CRC-32C register from init
 * over buf and returns it without any inversion, and takes an int length:
 * the standard CRC is ~crc32_iscsi(buf, len, ~0) and a chain passes ~crc
 * back in. */
uint32_t strata_crc32c(uint32_t crc, const void *buf, size_t len)
{
    const size_t piece = (size_t)1 << 30;
    unsigned char *p = (unsigned char *)buf; /* ISA-L only reads it */
    uint32_t reg = ~crc;

    while (len > 0) {
        size_t n = len < piece ? len : piece;
        reg = crc32_iscsi(p, (int)n, reg);
        p += n;
        len -= n;
    }
    return ~reg;
}
