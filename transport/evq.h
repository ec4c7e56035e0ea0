/*
 * The queue of events a provider reports from tp_progress(), shared by the
 * tcp and shm providers.
 *
 * Capacity is promised, not grown per message: every endpoint reserves room
 * for the completions of its whole send queue and its two state events when
 * it is created, and arrivals (WRITE_IMM, RECV) are accepted only while the
 * arrival budget has room, so a slow consumer pushes back on its peers
 * instead of growing memory. Received message payloads are copied into a
 * byte FIFO and stay valid until the next tp_progress(), as transport.h
 * promises.
 */
#ifndef STRATA_TRANSPORT_EVQ_H
#define STRATA_TRANSPORT_EVQ_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/transport.h"
#include "util/bfifo.h"

typedef struct tp_evq_item {
    tp_event_t ev;
    uint64_t payload_end; /* RECV: FIFO position to release once reported */
    uint32_t slot;        /* the provider's, e.g. the op a completion frees */
    bool live;            /* false: dropped because its endpoint closed */
    bool arrival;         /* counts against the arrival budget */
} tp_evq_item_t;

typedef struct tp_evq {
    tp_evq_item_t *items;
    uint32_t cap;      /* a power of two */
    uint64_t head;     /* free-running: next push */
    uint64_t tail;     /* free-running: next pop */
    uint32_t reserved; /* room promised to endpoints */
    uint32_t arrival_budget;
    uint32_t arrivals; /* arrival items queued or reserved */
    util_bfifo_t payload;
    uint64_t release_to; /* payload reported last time, freed next time */
} tp_evq_t;

strata_status_t tp_evq_init(tp_evq_t *q, uint32_t arrival_budget,
                            uint64_t payload_bytes);
void tp_evq_fini(tp_evq_t *q);

/* Promise room for n more items (an endpoint's completions and state
 * events); grows the queue. unreserve gives the promise back. */
strata_status_t tp_evq_reserve(tp_evq_t *q, uint32_t n);
void tp_evq_unreserve(tp_evq_t *q, uint32_t n);

/* A new item, zeroed and live, in room promised by tp_evq_reserve(). */
tp_evq_item_t *tp_evq_push(tp_evq_t *q);

/* Take one arrival from the budget now (false: none left), and later push
 * it with tp_evq_push_arrival(q, true, ...) or give it back with
 * tp_evq_arrival_cancel(). */
bool tp_evq_arrival_take(tp_evq_t *q);
void tp_evq_arrival_cancel(tp_evq_t *q);

/* An arrival item; a RECV copies len bytes of data into the payload FIFO.
 * NULL when the budget or the FIFO is full (try again after reporting);
 * taken: the budget was taken with tp_evq_arrival_take() already. */
tp_evq_item_t *tp_evq_push_arrival(tp_evq_t *q, bool taken,
                                   tp_event_type_t type, tp_ep_t *ep,
                                   const void *data, uint32_t len);

/* Whether a RECV of len bytes would be accepted now. */
bool tp_evq_arrival_room(const tp_evq_t *q, uint32_t len);

/* Call at the start of tp_progress(): frees the payloads reported by the
 * previous call. */
void tp_evq_begin(tp_evq_t *q);

/* Moves up to max live items to events; calls done(arg, item) for every
 * item taken off the queue, live or dropped, so the provider can free what
 * the item held. Returns the number of events written. */
int tp_evq_report(tp_evq_t *q, tp_event_t *events, int max,
                  void (*done)(void *arg, tp_evq_item_t *item), void *arg);

static inline bool tp_evq_empty(const tp_evq_t *q)
{
    return q->head == q->tail;
}

/* ep was closed: its arrivals and state events will not be reported (its
 * completions still are). */
void tp_evq_drop_ep(tp_evq_t *q, const tp_ep_t *ep);
/* listener was closed: queued ACCEPTED events no longer name it. */
void tp_evq_forget_listener(tp_evq_t *q, const tp_listener_t *listener);

#endif /* STRATA_TRANSPORT_EVQ_H */
