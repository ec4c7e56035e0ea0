/* Sending and reassembling a layout in control messages. */
#include "engine/layout_wire.h"

#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

/* Bytes a tensor takes in a TENSORS message. */
static size_t eng_tensor_wire_len(const eng_tensor_desc_t *t)
{
    return 2 + strlen(t->name) + 1 + 8;
}

strata_status_t eng_layout_send(eng_peer_t *peer,
                                const eng_tensor_desc_t *tensors, uint32_t n,
                                uint64_t partition_bytes)
{
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_LAYOUT);
    eng_put_u64(&w, eng_layout_hash(tensors, n, partition_bytes));
    eng_put_u32(&w, n);
    eng_put_u64(&w, partition_bytes);
    strata_status_t st = eng_send(peer, &w, NULL);
    for (uint32_t i = 0; st == STRATA_OK && i < n;) {
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_TENSORS);
        eng_put_u32(&w, i);
        size_t count_at = w.len;
        eng_put_u16(&w, 0);
        uint16_t k = 0;
        for (; i < n && eng_wbuf_room(&w) >= eng_tensor_wire_len(&tensors[i]);
             i++, k++) {
            eng_put_str(&w, tensors[i].name);
            eng_put_u8(&w, (uint8_t)tensors[i].dtype);
            eng_put_u64(&w, tensors[i].count);
        }
        buf[count_at] = (unsigned char)k;
        buf[count_at + 1] = (unsigned char)(k >> 8);
        st = eng_send(peer, &w, NULL);
    }
    return st;
}

static strata_status_t eng_layout_rx_start(eng_layout_rx_t *rx, eng_rbuf_t *r,
                                           const char *from)
{
    rx->hash = eng_get_u64(r);
    rx->ntensors = eng_get_u32(r);
    rx->partition_bytes = eng_get_u64(r);
    if (!eng_rbuf_ok(r) || rx->started || rx->ntensors == 0 ||
        rx->ntensors > (1u << 24)) {
        util_error("malformed or repeated LAYOUT from %s", from);
        return STRATA_ERR_PROTO;
    }
    rx->tensors = util_calloc(rx->ntensors, sizeof(*rx->tensors));
    if (!rx->tensors) {
        util_error("out of memory for a layout of %u tensors from %s",
                   rx->ntensors, from);
        return STRATA_ERR_NOMEM;
    }
    rx->started = true;
    return STRATA_OK;
}

static strata_status_t eng_layout_rx_chunk(eng_layout_rx_t *rx, eng_rbuf_t *r,
                                           const char *from)
{
    uint32_t first = eng_get_u32(r);
    uint32_t k = eng_get_u16(r);
    if (!rx->started || first != rx->nreceived ||
        k > rx->ntensors - rx->nreceived)
        r->bad = true;
    for (uint32_t i = 0; i < k && !r->bad; i++) {
        eng_tensor_desc_t *t = &rx->tensors[first + i];
        eng_get_str(r, t->name, sizeof(t->name));
        t->dtype = (strata_dtype_t)eng_get_u8(r);
        t->count = eng_get_u64(r);
    }
    if (!eng_rbuf_ok(r)) {
        util_error("malformed TENSORS message from %s", from);
        return STRATA_ERR_PROTO;
    }
    rx->nreceived += k;
    if (rx->nreceived < rx->ntensors)
        return STRATA_OK;
    if (eng_layout_hash(rx->tensors, rx->ntensors, rx->partition_bytes) !=
        rx->hash) {
        util_error("the layout from %s does not match its own hash", from);
        return STRATA_ERR_PROTO;
    }
    rx->complete = true;
    return STRATA_OK;
}

strata_status_t eng_layout_rx_msg(eng_layout_rx_t *rx, unsigned type,
                                  eng_rbuf_t *r, const char *from)
{
    if (type == ENG_MSG_LAYOUT)
        return eng_layout_rx_start(rx, r, from);
    return eng_layout_rx_chunk(rx, r, from);
}

void eng_layout_rx_free(eng_layout_rx_t *rx)
{
    util_free(rx->tensors);
    *rx = (eng_layout_rx_t){0};
}
