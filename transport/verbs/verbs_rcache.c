/* The refcounted page-range registration cache of verbs_rcache.h. */
#include "transport/verbs/verbs_rcache.h"

#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

void tp_verbs_rcache_init(tp_verbs_rcache_t *rc,
                          const tp_verbs_rcache_ops_t *ops, size_t page)
{
    memset(rc, 0, sizeof(*rc));
    rc->ops = *ops;
    rc->page = page;
}

void tp_verbs_rcache_fini(tp_verbs_rcache_t *rc)
{
    for (size_t i = 0; i < rc->n; i++) {
        tp_verbs_reg_t *r = rc->regs[i];
        util_warn("verbs: registration %#lx+%lu still has %u references at "
                  "close; released",
                  (unsigned long)r->start, (unsigned long)(r->end - r->start),
                  r->refs);
        rc->ops.dereg(rc->ops.arg, r);
        util_free(r);
    }
    util_free(rc->regs);
    memset(rc, 0, sizeof(*rc));
}

/* Index of the first registration whose start is above addr. */
static size_t tp_verbs_rcache_upper(const tp_verbs_rcache_t *rc, uintptr_t addr)
{
    size_t lo = 0, hi = rc->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rc->regs[mid]->start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Registrations may overlap, so every one starting at or below start is a
 * candidate; the table is small (one entry per live registration). */
static tp_verbs_reg_t *tp_verbs_rcache_find(const tp_verbs_rcache_t *rc,
                                            uintptr_t start, uintptr_t end,
                                            unsigned access)
{
    for (size_t i = tp_verbs_rcache_upper(rc, start); i-- > 0;) {
        tp_verbs_reg_t *r = rc->regs[i];
        if (r->end >= end && (r->access & access) == access)
            return r;
    }
    return NULL;
}

static strata_status_t tp_verbs_rcache_insert(tp_verbs_rcache_t *rc,
                                              tp_verbs_reg_t *reg)
{
    if (rc->n == rc->cap) {
        size_t cap = rc->cap ? 2 * rc->cap : 16;
        tp_verbs_reg_t **regs = util_realloc(rc->regs, cap * sizeof(*regs));
        if (!regs) {
            util_error("verbs: out of memory growing the registration cache "
                       "to %zu entries",
                       cap);
            return STRATA_ERR_NOMEM;
        }
        rc->regs = regs;
        rc->cap = cap;
    }
    size_t at = tp_verbs_rcache_upper(rc, reg->start);
    memmove(rc->regs + at + 1, rc->regs + at, (rc->n - at) * sizeof(*rc->regs));
    rc->regs[at] = reg;
    rc->n++;
    return STRATA_OK;
}

static uintptr_t tp_verbs_rcache_down(const tp_verbs_rcache_t *rc, uintptr_t a)
{
    return a & ~(uintptr_t)(rc->page - 1);
}

tp_verbs_reg_t *tp_verbs_rcache_lookup(const tp_verbs_rcache_t *rc,
                                       const void *addr, size_t len,
                                       unsigned access)
{
    uintptr_t a = (uintptr_t)addr;
    return tp_verbs_rcache_find(
        rc, tp_verbs_rcache_down(rc, a),
        tp_verbs_rcache_down(rc, a + (len ? len : 1) + rc->page - 1), access);
}

strata_status_t tp_verbs_rcache_get(tp_verbs_rcache_t *rc, void *addr,
                                    size_t len, unsigned access,
                                    tp_verbs_reg_t **reg_out)
{
    uintptr_t start = tp_verbs_rcache_down(rc, (uintptr_t)addr);
    uintptr_t end = tp_verbs_rcache_down(rc, (uintptr_t)addr + (len ? len : 1) +
                                                 rc->page - 1);
    tp_verbs_reg_t *r = tp_verbs_rcache_find(rc, start, end, access);
    if (r) {
        r->refs++;
        *reg_out = r;
        return STRATA_OK;
    }
    r = util_calloc(1, sizeof(*r));
    if (!r) {
        util_error("verbs: out of memory for a registration entry");
        return STRATA_ERR_NOMEM;
    }
    r->start = start;
    r->end = end;
    r->access = access;
    r->refs = 1;
    strata_status_t st =
        rc->ops.reg(rc->ops.arg, (void *)start, end - start, access, r);
    if (st != STRATA_OK)
        goto free_reg;
    st = tp_verbs_rcache_insert(rc, r);
    if (st != STRATA_OK)
        goto dereg;
    *reg_out = r;
    return STRATA_OK;

dereg:
    rc->ops.dereg(rc->ops.arg, r);
free_reg:
    util_free(r);
    return st;
}

void tp_verbs_rcache_put(tp_verbs_rcache_t *rc, tp_verbs_reg_t *reg)
{
    if (--reg->refs > 0)
        return;
    for (size_t i = tp_verbs_rcache_upper(rc, reg->start); i-- > 0;) {
        if (rc->regs[i] == reg) {
            memmove(rc->regs + i, rc->regs + i + 1,
                    (rc->n - i - 1) * sizeof(*rc->regs));
            rc->n--;
            break;
        }
    }
    rc->ops.dereg(rc->ops.arg, reg);
    util_free(reg);
}
