/*
 * The tcp provider's wire format. Every frame is a 32-byte little-endian
 * header, then len payload bytes:
 *
 *   0  u8  type      AUTH, WRITE, MSG, BYE or REFUSE
 *   1  u8  flags     WRITE: IMM (deliver imm), CRC (crc is set)
 *   2  u16 zero
 *   4  u32 len       payload bytes
 *   8  u64 key       WRITE: target region; REFUSE: the status; else 0
 *  16  u64 off       WRITE: offset in the region; else 0
 *  24  u32 imm       WRITE with IMM: the immediate; else 0
 *  28  u32 crc       WRITE with CRC: CRC32C of the header (this field 0)
 *                    followed by the payload; else 0
 *
 * AUTH carries one auth.h message, MSG one control message, REFUSE the
 * reason (text) the sender is about to close the connection for, BYE
 * nothing: the sender closes on purpose.
 */
#ifndef STRATA_TRANSPORT_TCP_WIRE_H
#define STRATA_TRANSPORT_TCP_WIRE_H

#include <stdint.h>

#include <strata/strata.h>

#define TP_TCP_HDR_LEN 32
#define TP_TCP_REFUSE_MAX 256

enum tp_tcp_frame {
    TP_TCP_AUTH = 1,
    TP_TCP_WRITE = 2,
    TP_TCP_MSG = 3,
    TP_TCP_BYE = 4,
    TP_TCP_REFUSE = 5,
};

enum {
    TP_TCP_F_IMM = 1u << 0,
    TP_TCP_F_CRC = 1u << 1,
};

typedef struct tp_tcp_hdr {
    uint8_t type;
    uint8_t flags;
    uint32_t len;
    uint64_t key;
    uint64_t off;
    uint32_t imm;
    uint32_t crc;
} tp_tcp_hdr_t;

void tp_tcp_hdr_encode(const tp_tcp_hdr_t *hdr, uint8_t out[TP_TCP_HDR_LEN]);

/* Decodes and checks the header on its own: a known type, flags and fields
 * that type allows, a payload no longer than the type allows. On error
 * *why_out says what was wrong (a static string). Whether a WRITE fits a
 * region is the receiver's check (tp_tcp_write_fits). */
strata_status_t tp_tcp_hdr_decode(const uint8_t in[TP_TCP_HDR_LEN],
                                  tp_tcp_hdr_t *hdr_out, const char **why_out);

/* [off, off + len) lies within a region of region_len bytes. */
static inline int tp_tcp_write_fits(const tp_tcp_hdr_t *hdr,
                                    uint64_t region_len)
{
    return hdr->off <= region_len && hdr->len <= region_len - hdr->off;
}

/* CRC32C (iSCSI polynomial) of the header with its crc field zeroed; chain
 * the payload with tp_tcp_crc_update. */
uint32_t tp_tcp_crc_hdr(const uint8_t hdr[TP_TCP_HDR_LEN]);
uint32_t tp_tcp_crc_update(uint32_t crc, const void *buf, uint64_t len);

#endif /* STRATA_TRANSPORT_TCP_WIRE_H */
