/*
 * A byte FIFO handing out contiguous pieces: allocated at the head, released
 * in the same order at the tail. Holds control-message payloads (queued
 * sends, received messages until reported) without a malloc per message.
 */
#ifndef STRATA_UTIL_BFIFO_H
#define STRATA_UTIL_BFIFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct util_bfifo {
    uint8_t *buf;
    uint64_t cap;  /* a power of two */
    uint64_t head; /* free-running: next allocation */
    uint64_t tail; /* free-running: oldest byte still in use */
} util_bfifo_t;

/* len contiguous bytes, or NULL when they do not fit now. *end_out is what
 * to pass to util_bfifo_release() to free this piece and all before it. */
static inline void *util_bfifo_alloc(util_bfifo_t *f, uint64_t len,
                                     uint64_t *end_out)
{
    if (f->head == f->tail) /* empty: start at the beginning again */
        f->head = f->tail = (f->head + f->cap - 1) & ~(f->cap - 1);
    uint64_t start = f->head, pos = start & (f->cap - 1);
    if (pos + len > f->cap)
        start += f->cap - pos; /* skip the end of the buffer */
    if (len > f->cap || start + len - f->tail > f->cap)
        return NULL;
    f->head = start + len;
    *end_out = f->head;
    return f->buf + (start & (f->cap - 1));
}

static inline void util_bfifo_release(util_bfifo_t *f, uint64_t end)
{
    if (end - f->tail <= f->head - f->tail)
        f->tail = end;
}

#endif /* STRATA_UTIL_BFIFO_H */
