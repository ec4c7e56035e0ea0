/* strata_alloc's blocks: memory every transport the worker uses can write
 * into. */
#include "engine/worker.h"
#include "util/alloc.h"
#include "util/log.h"

eng_block_t *eng_block_find(eng_worker_t *w, const void *p, size_t len)
{
    for (eng_block_t *b = w->blocks; b; b = b->next)
        if ((const char *)p >= (char *)b->addr &&
            (const char *)p + len <= (char *)b->addr + b->len)
            return b;
    return NULL;
}

static void eng_block_free(eng_block_t *b)
{
    for (int i = 0; i < ENG_NPROV; i++)
        if (b->mr[i] && i != b->owner)
            tp_mr_dereg(b->mr[i]);
    if (b->owner >= 0)
        tp_mr_dereg(b->mr[b->owner]); /* frees the memory too */
    else
        util_free(b->addr);
    util_free(b);
}

/* Memory every transport in use can write into: from the transport that
 * needs its own allocations (shm), registered with the others. */
strata_status_t eng_block_alloc(strata_ctx_t *ctx, size_t len, void **ptr_out)
{
    eng_worker_t *w = ctx->worker;
    eng_block_t *b = util_calloc(1, sizeof(*b));
    if (!b)
        return STRATA_ERR_NOMEM;
    b->len = len ? len : 1;
    b->owner = -1;
    for (int i = 0; i < ENG_NPROV; i++)
        if (w->uses[i] &&
            !(tp_caps(ctx->data_tp[i]) & TP_CAP_REMOTE_ANY_MEMORY))
            b->owner = i;
    strata_status_t st = STRATA_OK;
    if (b->owner >= 0)
        st = tp_mem_alloc(ctx->data_tp[b->owner], b->len,
                          TP_ACCESS_REMOTE_WRITE, &b->addr, &b->mr[b->owner]);
    else if (!(b->addr = util_aligned_alloc(4096, b->len)))
        st = STRATA_ERR_NOMEM;
    for (int i = 0; st == STRATA_OK && i < ENG_NPROV; i++)
        if (w->uses[i] && i != b->owner)
            st = tp_mr_reg(ctx->data_tp[i], b->addr, b->len,
                           TP_ACCESS_REMOTE_WRITE, &b->mr[i]);
    if (st != STRATA_OK) {
        util_error("strata_alloc of %zu bytes failed: %s", len,
                   strata_strerror(st));
        if (b->addr || b->mr[0] || b->mr[1] || b->mr[2])
            eng_block_free(b);
        else
            util_free(b);
        return st;
    }
    b->next = w->blocks;
    w->blocks = b;
    *ptr_out = b->addr;
    return STRATA_OK;
}

strata_status_t eng_block_release(strata_ctx_t *ctx, void *ptr)
{
    eng_worker_t *w = ctx->worker;
    for (eng_block_t **pp = &w->blocks; *pp; pp = &(*pp)->next)
        if ((*pp)->addr == ptr) {
            eng_block_t *b = *pp;
            /* Its mapping there would go with it, while read. */
            if (b->read_in_place && !w->left) {
                util_error("strata_free: %p holds gradients the aggregators "
                           "read in place until strata_finalize (which frees "
                           "it)",
                           ptr);
                return STRATA_ERR_STATE;
            }
            *pp = b->next;
            eng_block_free(b);
            return STRATA_OK;
        }
    util_error("strata_free: %p was not returned by strata_alloc", ptr);
    return STRATA_ERR_INVALID;
}

void eng_blocks_free(eng_worker_t *w)
{
    while (w->blocks) {
        eng_block_t *b = w->blocks;
        w->blocks = b->next;
        eng_block_free(b);
    }
}
