/*
 * A FIFO of fixed-size elements: pushed at the tail, popped at the head,
 * read anywhere in between by position from the head. The capacity is a
 * power of two, so a position is masked, never divided. The engine's write
 * queues (a worker's pushes to an aggregator, an aggregator's model writes
 * to a worker) are rings.
 */
#ifndef STRATA_UTIL_RING_H
#define STRATA_UTIL_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

typedef struct util_ring {
    void *buf;
    uint32_t esize; /* bytes per element */
    uint32_t mask;  /* capacity - 1; a zeroed ring holds nothing */
    uint32_t head;  /* slot of the oldest element */
    uint32_t len;
} util_ring_t;

/* Room for at least min_cap elements of esize bytes. STRATA_ERR_NOMEM, or
 * STRATA_ERR_RANGE past 2^31 elements. */
strata_status_t util_ring_init(util_ring_t *r, uint32_t esize,
                               uint32_t min_cap);
/* Room for at least min_cap, the elements kept in order; on an error the
 * ring is as it was. */
strata_status_t util_ring_reserve(util_ring_t *r, uint32_t min_cap);
void util_ring_fini(util_ring_t *r);

static inline uint32_t util_ring_len(const util_ring_t *r)
{
    return r->len;
}

static inline uint32_t util_ring_cap(const util_ring_t *r)
{
    return r->buf ? r->mask + 1 : 0;
}

static inline bool util_ring_full(const util_ring_t *r)
{
    return r->len == util_ring_cap(r);
}

/* The i-th element from the head; i < util_ring_len(r). */
static inline void *util_ring_at(const util_ring_t *r, uint32_t i)
{
    return (char *)r->buf + (size_t)((r->head + i) & r->mask) * r->esize;
}

/* The oldest element, or NULL when the ring is empty. */
static inline void *util_ring_peek(const util_ring_t *r)
{
    return r->len ? util_ring_at(r, 0) : NULL;
}

/* A new element at the tail for the caller to fill, or NULL when full. */
static inline void *util_ring_push(util_ring_t *r)
{
    if (util_ring_full(r))
        return NULL;
    return util_ring_at(r, r->len++);
}

/* Drops the oldest element, if any. */
static inline void util_ring_pop(util_ring_t *r)
{
    if (r->len) {
        r->head = (r->head + 1) & r->mask;
        r->len--;
    }
}

#endif /* STRATA_UTIL_RING_H */
