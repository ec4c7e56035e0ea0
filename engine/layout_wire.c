/* Sending and reassembling a layout in control messages. */
#include "engine/layout_wire.h"

#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

/* Bytes a tensor takes in a TENSORS message: its name's length, the name,
 * dtype and count. */
#define ENG_TENSOR_WIRE_MIN (2 + 1 + 8)
static size_t eng_tensor_wire_len(const eng_tensor_desc_t *t)
{
    return ENG_TENSOR_WIRE_MIN + strlen(t->name);
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
    rx->started = true;
    return STRATA_OK;
}

/* Room for k more tensors. The array grows as their descriptions arrive
 * (doubling, up to the announced count), not at LAYOUT: a count of up to
 * 2^24 there would take 4.5 GB before one description came. (A chunk's k
 * is bounded by its bytes.) */
static strata_status_t eng_layout_rx_room(eng_layout_rx_t *rx, uint32_t k,
                                          const char *from)
{
    uint32_t need = rx->nreceived + k;
    if (need <= rx->cap)
        return STRATA_OK;
    uint64_t cap = (uint64_t)rx->cap * 2;
    cap = cap < need ? need : cap > rx->ntensors ? rx->ntensors : cap;
    eng_tensor_desc_t *t =
        util_realloc(rx->tensors, (size_t)cap * sizeof(*rx->tensors));
    if (!t) {
        util_error("out of memory for %llu of the %u tensors of the layout "
                   "from %s",
                   (unsigned long long)cap, rx->ntensors, from);
        return STRATA_ERR_NOMEM;
    }
    rx->tensors = t;
    rx->cap = (uint32_t)cap;
    return STRATA_OK;
}

static strata_status_t eng_layout_rx_chunk(eng_layout_rx_t *rx, eng_rbuf_t *r,
                                           const char *from)
{
    uint32_t first = eng_get_u32(r);
    uint32_t k = eng_get_u16(r);
    if (!rx->started || first != rx->nreceived ||
        k > rx->ntensors - rx->nreceived ||
        k > (r->len - r->pos) / ENG_TENSOR_WIRE_MIN)
        r->bad = true;
    else {
        strata_status_t st = eng_layout_rx_room(rx, k, from);
        if (st != STRATA_OK)
            return st;
    }
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
