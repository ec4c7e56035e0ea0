#include "util/ring.h"

#include <string.h>

#include "util/alloc.h"

/* The capacity holding min_cap: a power of two, 0 past 2^31. */
static uint32_t util_ring_cap_for(uint32_t min_cap)
{
    if (min_cap > UINT32_C(1) << 31)
        return 0;
    uint32_t cap = 1;
    while (cap < min_cap)
        cap <<= 1;
    return cap;
}

strata_status_t util_ring_init(util_ring_t *r, uint32_t esize, uint32_t min_cap)
{
    *r = (util_ring_t){.esize = esize};
    return util_ring_reserve(r, min_cap);
}

strata_status_t util_ring_reserve(util_ring_t *r, uint32_t min_cap)
{
    if (r->buf && min_cap <= util_ring_cap(r))
        return STRATA_OK;
    uint32_t cap = util_ring_cap_for(min_cap);
    if (cap == 0)
        return STRATA_ERR_RANGE;
    char *buf = util_calloc(cap, r->esize ? r->esize : 1);
    if (!buf)
        return STRATA_ERR_NOMEM;
    /* the elements from the head to the end of the old buffer, then those
     * that wrapped to its start */
    uint32_t first = util_ring_cap(r) - r->head;
    if (first > r->len)
        first = r->len;
    if (r->len) {
        memcpy(buf, util_ring_at(r, 0), (size_t)first * r->esize);
        memcpy(buf + (size_t)first * r->esize, r->buf,
               (size_t)(r->len - first) * r->esize);
    }
    util_free(r->buf);
    r->buf = buf;
    r->mask = cap - 1;
    r->head = 0;
    return STRATA_OK;
}

void util_ring_fini(util_ring_t *r)
{
    util_free(r->buf);
    *r = (util_ring_t){.esize = r->esize};
}
