/* Encoding and checking of tcp frame headers (wire.h). */
#include "transport/tcp/wire.h"

#include <endian.h>
#include <isa-l/crc.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/transport.h"

static void tp_put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static void tp_put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static uint32_t tp_get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static uint64_t tp_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

void tp_tcp_hdr_encode(const tp_tcp_hdr_t *hdr, uint8_t out[TP_TCP_HDR_LEN])
{
    out[0] = hdr->type;
    out[1] = hdr->flags;
    out[2] = out[3] = 0;
    tp_put32(out + 4, hdr->len);
    tp_put64(out + 8, hdr->key);
    tp_put64(out + 16, hdr->off);
    tp_put32(out + 24, hdr->imm);
    tp_put32(out + 28, hdr->crc);
}

/* The largest payload of each type, and the flags it may carry. */
static const struct {
    uint32_t max_len;
    uint8_t flags;
} tp_tcp_frame_rules[] = {
    [TP_TCP_AUTH] = {TP_AUTH_MSG_MAX, 0},
    [TP_TCP_WRITE] = {UINT32_MAX, TP_TCP_F_IMM | TP_TCP_F_CRC},
    [TP_TCP_MSG] = {TP_MSG_MAX, 0},
    [TP_TCP_BYE] = {0, 0},
    [TP_TCP_REFUSE] = {TP_TCP_REFUSE_MAX, 0},
};

strata_status_t tp_tcp_hdr_decode(const uint8_t in[TP_TCP_HDR_LEN],
                                  tp_tcp_hdr_t *hdr_out, const char **why_out)
{
    tp_tcp_hdr_t h = {
        .type = in[0],
        .flags = in[1],
        .len = tp_get32(in + 4),
        .key = tp_get64(in + 8),
        .off = tp_get64(in + 16),
        .imm = tp_get32(in + 24),
        .crc = tp_get32(in + 28),
    };
    const char *why = NULL;
    if (h.type < TP_TCP_AUTH || h.type > TP_TCP_REFUSE)
        why = "unknown frame type";
    else if (in[2] || in[3])
        why = "reserved header bytes are not zero";
    else if (h.flags & ~tp_tcp_frame_rules[h.type].flags)
        why = "flags not allowed for this frame type";
    else if (h.len > tp_tcp_frame_rules[h.type].max_len)
        why = "payload longer than this frame type allows";
    else if (h.type != TP_TCP_WRITE && h.type != TP_TCP_REFUSE && h.key)
        why = "key set on a frame that has none";
    else if (h.type != TP_TCP_WRITE && (h.off || h.imm || h.crc))
        why = "write fields set on a frame that is no write";
    else if (h.type == TP_TCP_WRITE && !(h.flags & TP_TCP_F_IMM) && h.imm)
        why = "immediate set on a write without one";
    else if (h.type == TP_TCP_WRITE && !(h.flags & TP_TCP_F_CRC) && h.crc)
        why = "crc set on a write without one";
    if (why) {
        *why_out = why;
        return STRATA_ERR_PROTO;
    }
    *hdr_out = h;
    return STRATA_OK;
}

uint32_t tp_tcp_crc_hdr(const uint8_t hdr[TP_TCP_HDR_LEN])
{
    uint8_t copy[TP_TCP_HDR_LEN];
    memcpy(copy, hdr, TP_TCP_HDR_LEN);
    memset(copy + 28, 0, 4);
    return crc32_iscsi(copy, TP_TCP_HDR_LEN, 0xffffffffu);
}

uint32_t tp_tcp_crc_update(uint32_t crc, const void *buf, uint64_t len)
{
    /* ISA-L takes an int length. */
    const uint8_t *p = buf;
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        crc = crc32_iscsi((uint8_t *)p, chunk, crc);
        p += chunk;
        len -= (uint64_t)chunk;
    }
    return crc;
}
