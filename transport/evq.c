/* The event queue of the tcp and shm providers (evq.h). */
#include "transport/evq.h"

#include <string.h>

#include "util/alloc.h"

static uint32_t tp_evq_pow2(uint64_t n)
{
    uint32_t cap = 64;
    while (cap < n)
        cap *= 2;
    return cap;
}

strata_status_t tp_evq_init(tp_evq_t *q, uint32_t arrival_budget,
                            uint64_t payload_bytes)
{
    memset(q, 0, sizeof(*q));
    q->arrival_budget = arrival_budget;
    q->cap = tp_evq_pow2(arrival_budget);
    q->items = util_calloc(q->cap, sizeof(*q->items));
    q->payload.cap = tp_evq_pow2(payload_bytes);
    q->payload.buf = util_malloc(q->payload.cap);
    if (!q->items || !q->payload.buf) {
        tp_evq_fini(q);
        return STRATA_ERR_NOMEM;
    }
    return STRATA_OK;
}

void tp_evq_fini(tp_evq_t *q)
{
    util_free(q->items);
    util_free(q->payload.buf);
    memset(q, 0, sizeof(*q));
}

strata_status_t tp_evq_reserve(tp_evq_t *q, uint32_t n)
{
    uint64_t need = (uint64_t)q->reserved + n + q->arrival_budget;
    if (need > UINT32_MAX / 2)
        return STRATA_ERR_NOMEM;
    if (need > q->cap) {
        uint32_t cap = tp_evq_pow2(need);
        tp_evq_item_t *items = util_malloc((size_t)cap * sizeof(*items));
        if (!items)
            return STRATA_ERR_NOMEM;
        uint64_t n_items = q->head - q->tail;
        for (uint64_t i = 0; i < n_items; i++)
            items[i] = q->items[(q->tail + i) & (q->cap - 1)];
        util_free(q->items);
        q->items = items;
        q->cap = cap;
        q->tail = 0;
        q->head = n_items;
    }
    q->reserved += n;
    return STRATA_OK;
}

void tp_evq_unreserve(tp_evq_t *q, uint32_t n)
{
    q->reserved -= n;
}

tp_evq_item_t *tp_evq_push(tp_evq_t *q)
{
    tp_evq_item_t *it = &q->items[q->head++ & (q->cap - 1)];
    memset(it, 0, sizeof(*it));
    it->live = true;
    return it;
}

bool tp_evq_arrival_take(tp_evq_t *q)
{
    if (q->arrivals >= q->arrival_budget)
        return false;
    q->arrivals++;
    return true;
}

void tp_evq_arrival_cancel(tp_evq_t *q)
{
    q->arrivals--;
}

bool tp_evq_arrival_room(const tp_evq_t *q, uint32_t len)
{
    if (q->arrivals >= q->arrival_budget)
        return false;
    util_bfifo_t f = q->payload; /* a trial allocation on a copy */
    uint64_t end;
    return util_bfifo_alloc(&f, len, &end) != NULL;
}

tp_evq_item_t *tp_evq_push_arrival(tp_evq_t *q, bool taken,
                                   tp_event_type_t type, tp_ep_t *ep,
                                   const void *data, uint32_t len)
{
    if (!taken && q->arrivals >= q->arrival_budget)
        return NULL;
    uint64_t end = 0;
    void *copy = NULL;
    if (type == TP_EV_RECV) {
        copy = util_bfifo_alloc(&q->payload, len, &end);
        if (!copy)
            return NULL;
        memcpy(copy, data, len);
    }
    if (!taken)
        q->arrivals++;
    tp_evq_item_t *it = tp_evq_push(q);
    it->arrival = true;
    it->payload_end = end;
    it->ev.type = type;
    it->ev.ep = ep;
    it->ev.len = len;
    it->ev.data = copy;
    return it;
}

void tp_evq_begin(tp_evq_t *q)
{
    util_bfifo_release(&q->payload, q->release_to);
}

int tp_evq_report(tp_evq_t *q, tp_event_t *events, int max,
                  void (*done)(void *arg, tp_evq_item_t *item), void *arg)
{
    int n = 0;
    while (q->tail != q->head && n < max) {
        tp_evq_item_t *it = &q->items[q->tail++ & (q->cap - 1)];
        if (it->live)
            events[n++] = it->ev;
        if (it->arrival)
            q->arrivals--;
        if (it->payload_end)
            q->release_to = it->payload_end;
        done(arg, it);
    }
    return n;
}

static bool tp_evq_droppable(tp_event_type_t type)
{
    return type != TP_EV_WRITE_DONE && type != TP_EV_SEND_DONE;
}

void tp_evq_drop_ep(tp_evq_t *q, const tp_ep_t *ep)
{
    for (uint64_t i = q->tail; i != q->head; i++) {
        tp_evq_item_t *it = &q->items[i & (q->cap - 1)];
        if (it->ev.ep == ep && tp_evq_droppable(it->ev.type))
            it->live = false;
    }
}

void tp_evq_forget_listener(tp_evq_t *q, const tp_listener_t *listener)
{
    for (uint64_t i = q->tail; i != q->head; i++) {
        tp_evq_item_t *it = &q->items[i & (q->cap - 1)];
        if (it->ev.listener == listener)
            it->ev.listener = NULL;
    }
}
