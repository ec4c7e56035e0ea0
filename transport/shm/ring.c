/* The shm provider's SPSC record ring (ring.h). */
#include "transport/shm/ring.h"

#include <string.h>

#include "transport/transport.h"

_Static_assert(sizeof(tp_shm_ring_hdr_t) <= TP_SHM_RING_DATA,
               "the header fits before the records");
_Static_assert(sizeof(tp_shm_rec_t) == TP_SHM_REC_ALIGN, "one unit");

static uint64_t tp_shm_rec_size(uint32_t payload_len)
{
    return sizeof(tp_shm_rec_t) +
           (((uint64_t)payload_len + TP_SHM_REC_ALIGN - 1) &
            ~(uint64_t)(TP_SHM_REC_ALIGN - 1));
}

void tp_shm_ring_attach(tp_shm_ring_t *r, void *map, uint64_t cap)
{
    r->hdr = map;
    r->data = (uint8_t *)map + TP_SHM_RING_DATA;
    r->cap = cap;
    r->pos = 0;
    r->cached = 0;
}

/* Bytes a record takes at pos, including the padding to the ring's end
 * when it would not fit before it. */
static uint64_t tp_shm_ring_need(const tp_shm_ring_t *r, uint64_t size)
{
    uint64_t to_end = r->cap - (r->pos & (r->cap - 1));
    return size <= to_end ? size : to_end + size;
}

bool tp_shm_ring_room(tp_shm_ring_t *r, uint32_t payload_len)
{
    uint64_t need = tp_shm_ring_need(r, tp_shm_rec_size(payload_len));
    if (r->pos + need - r->cached <= r->cap)
        return true;
    r->cached = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
    return r->pos + need - r->cached <= r->cap;
}

static void tp_shm_ring_put(tp_shm_ring_t *r, uint32_t type, uint32_t len,
                            uint32_t imm, const void *payload)
{
    uint8_t *at = r->data + (r->pos & (r->cap - 1));
    tp_shm_rec_t rec = {.type = type, .len = len, .imm = imm};
    memcpy(at, &rec, sizeof(rec));
    if (payload && len)
        memcpy(at + sizeof(rec), payload, len);
}

bool tp_shm_ring_push(tp_shm_ring_t *r, uint32_t type, uint32_t len,
                      uint32_t imm, const void *payload)
{
    uint64_t size = tp_shm_rec_size(type == TP_SHM_REC_MSG ? len : 0);
    uint64_t to_end = r->cap - (r->pos & (r->cap - 1));
    if (size > to_end) {
        tp_shm_ring_put(r, TP_SHM_REC_PAD, 0, 0, NULL);
        r->pos += to_end;
    }
    tp_shm_ring_put(r, type, len, imm, type == TP_SHM_REC_MSG ? payload : NULL);
    r->pos += size;
    atomic_store_explicit(&r->hdr->head, r->pos, memory_order_release);
    /* Pairs with the consumer's arm: either it sees the new head, or we
     * see it armed. */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&r->hdr->armed, memory_order_relaxed))
        return false;
    return atomic_exchange_explicit(&r->hdr->armed, 0, memory_order_relaxed);
}

bool tp_shm_ring_empty(tp_shm_ring_t *r)
{
    if (r->pos != r->cached)
        return false;
    r->cached = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
    return r->pos == r->cached;
}

strata_status_t tp_shm_ring_peek(tp_shm_ring_t *r, tp_shm_rec_t *rec_out,
                                 const uint8_t **payload_out, bool *got_out,
                                 const char **why_out)
{
    *got_out = false;
    for (;;) {
        if (tp_shm_ring_empty(r))
            return STRATA_OK;
        uint64_t avail = r->cached - r->pos;
        uint64_t at = r->pos & (r->cap - 1), to_end = r->cap - at;
        if (avail > r->cap || avail % TP_SHM_REC_ALIGN) {
            *why_out = "ring head out of range";
            return STRATA_ERR_PROTO;
        }
        tp_shm_rec_t rec;
        memcpy(&rec, r->data + at, sizeof(rec)); /* read once, then check */
        if (rec.type == TP_SHM_REC_PAD) {
            if (avail < to_end) {
                *why_out = "padding beyond the published records";
                return STRATA_ERR_PROTO;
            }
            r->pos += to_end;
            continue;
        }
        uint64_t size =
            tp_shm_rec_size(rec.type == TP_SHM_REC_MSG ? rec.len : 0);
        if ((rec.type != TP_SHM_REC_WRITE_IMM && rec.type != TP_SHM_REC_MSG) ||
            rec.zero != 0 ||
            (rec.type == TP_SHM_REC_MSG &&
             (rec.len > TP_MSG_MAX || rec.imm != 0)) ||
            size > avail || size > to_end) {
            *why_out = "malformed record";
            return STRATA_ERR_PROTO;
        }
        *rec_out = rec;
        *payload_out = r->data + at + sizeof(rec);
        *got_out = true;
        return STRATA_OK;
    }
}

void tp_shm_ring_next(tp_shm_ring_t *r, const tp_shm_rec_t *rec)
{
    r->pos += tp_shm_rec_size(rec->type == TP_SHM_REC_MSG ? rec->len : 0);
}

bool tp_shm_ring_release(tp_shm_ring_t *r)
{
    atomic_store_explicit(&r->hdr->tail, r->pos, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst); /* as in tp_shm_ring_push */
    if (!atomic_load_explicit(&r->hdr->want_space, memory_order_relaxed))
        return false;
    return atomic_exchange_explicit(&r->hdr->want_space, 0,
                                    memory_order_relaxed);
}

bool tp_shm_ring_want_space(tp_shm_ring_t *r, uint32_t payload_len)
{
    atomic_store_explicit(&r->hdr->want_space, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    return !tp_shm_ring_room(r, payload_len);
}

bool tp_shm_ring_arm(tp_shm_ring_t *r)
{
    atomic_store_explicit(&r->hdr->armed, 1, memory_order_relaxed);
    /* Pairs with the producer's fence between publishing and checking. */
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
    return head == r->pos;
}
