/* GDTopK's worker side: residuals, sparse or dense send buffers. */
#include "engine/topk_push.h"

#include <string.h>

#include <strata/strata_agg.h>

#include "engine/gdtopk.h"
#include "util/alloc.h"
#include "util/log.h"

struct eng_topk_push {
    const eng_layout_t *lay;
    strata_topk_t *topk;
    uint64_t *off;     /* [nparts]: bytes before the partition in the model */
    uint64_t *res_off; /* [nparts]: elements before it in the residual */
    bool *flush;       /* [nparts]: the next push is dense */
    float *residual;   /* [elements of the model], fp32 */
    char *send;        /* [2][model]: per clock parity */
    uint64_t model_bytes;
    tp_mr_t *mr[ENG_NPROV];
    eng_gdtopk_plan_t plan;
    uint32_t flush_epochs;
};

strata_status_t eng_topk_push_create(strata_ctx_t *ctx, const eng_layout_t *lay,
                                     const bool *uses, eng_topk_push_t **out)
{
    eng_topk_push_t *t = util_calloc(1, sizeof(*t));
    if (!t)
        return STRATA_ERR_NOMEM;
    *out = t;
    t->lay = lay;
    t->flush_epochs = ctx->policy->flush_epochs;
    t->off = util_calloc(lay->nparts, sizeof(*t->off));
    t->res_off = util_calloc(lay->nparts, sizeof(*t->res_off));
    t->flush = util_calloc(lay->nparts, sizeof(*t->flush));
    uint64_t max_count = 1, elements = 0;
    for (uint32_t p = 0; t->off && t->res_off && p < lay->nparts; p++) {
        t->off[p] = t->model_bytes;
        t->res_off[p] = elements;
        t->model_bytes += lay->parts[p].bytes;
        elements += lay->parts[p].count;
        if (lay->parts[p].count > max_count)
            max_count = lay->parts[p].count;
    }
    t->residual = util_aligned_alloc(64, elements * sizeof(float) + 64);
    t->send = util_aligned_alloc(4096, 2 * t->model_bytes + 64);
    if (!t->off || !t->res_off || !t->flush || !t->residual || !t->send)
        return STRATA_ERR_NOMEM;
    memset(t->residual, 0, elements * sizeof(float));
    strata_status_t st =
        strata_topk_create(max_count, (uint64_t)ctx->rank, &t->topk);
    for (int i = 0; st == STRATA_OK && i < ENG_NPROV; i++)
        if (uses[i])
            st = tp_mr_reg(ctx->data_tp[i], t->send, 2 * t->model_bytes,
                           TP_ACCESS_LOCAL, &t->mr[i]);
    eng_gdtopk_plan(0, 1, t->flush_epochs, &t->plan);
    if (st != STRATA_OK)
        util_error("GDTopK: cannot set up the send buffers: %s",
                   strata_strerror(st));
    return st;
}

void eng_topk_push_free(eng_topk_push_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < ENG_NPROV; i++)
        if (t->mr[i])
            tp_mr_dereg(t->mr[i]);
    strata_topk_destroy(t->topk);
    util_free(t->off);
    util_free(t->res_off);
    util_free(t->flush);
    util_free(t->residual);
    util_free(t->send);
    util_free(t);
}

bool eng_topk_push_covers(const eng_topk_push_t *t, uint32_t p)
{
    return eng_gdtopk_dtype(t->lay->parts[p].dtype);
}

tp_mr_t *eng_topk_push_mr(const eng_topk_push_t *t, int prov)
{
    return t->mr[prov];
}

void eng_topk_push_epoch(eng_topk_push_t *t, uint32_t epoch_ended, double rank)
{
    eng_gdtopk_plan_t ended;
    eng_gdtopk_plan(rank, epoch_ended, t->flush_epochs, &ended);
    eng_gdtopk_plan(rank, epoch_ended + 1, t->flush_epochs, &t->plan);
    if (ended.flush_after)
        for (uint32_t p = 0; p < t->lay->nparts; p++)
            t->flush[p] = true;
}

/* residual += the partition's gradients, piece by piece, widened to fp32. */
static strata_status_t eng_topk_gather(eng_topk_push_t *t, uint32_t p,
                                       float *res, void *const *grads)
{
    const eng_partition_t *part = &t->lay->parts[p];
    size_t es = strata_dtype_size(part->dtype);
    strata_status_t st = STRATA_OK;
    for (uint32_t k = 0; st == STRATA_OK && k < part->npieces; k++) {
        const eng_piece_t *pc = &t->lay->pieces[part->first_piece + k];
        const char *g = (const char *)grads[pc->tensor] + pc->tensor_off;
        st = strata_axpy(part->dtype, res + pc->part_off / es, g, pc->len / es,
                         1.0f);
    }
    return st;
}

strata_status_t eng_topk_push_prepare(eng_topk_push_t *t, uint32_t p, int64_t c,
                                      void *const *grads, eng_topk_write_t *out)
{
    const eng_partition_t *part = &t->lay->parts[p];
    float *res = t->residual + t->res_off[p];
    out->off = (uint64_t)(c & 1) * t->model_bytes + t->off[p];
    char *buf = t->send + out->off;
    strata_status_t st = eng_topk_gather(t, p, res, grads);
    if (st != STRATA_OK)
        return st;
    size_t k = strata_topk_k(part->count, t->plan.ratio);
    if (t->flush[p] || k * sizeof(strata_sparse_t) >= part->bytes) {
        /* dense: everything, in the partition's dtype */
        st = strata_residual_flush(part->dtype, buf, res, part->count);
        if (st != STRATA_OK)
            return st;
        t->flush[p] = false;
        out->len = (uint32_t)part->bytes;
        out->sparse = false;
        return STRATA_OK;
    }
    size_t n = 0;
    st = strata_topk_sparsify(t->topk, res, NULL, part->count, t->plan.ratio,
                              t->plan.sample_ratio, (strata_sparse_t *)buf, &n);
    if (st != STRATA_OK)
        return st;
    if (n == 0) { /* nothing to send: one explicit zero keeps the clock */
        ((strata_sparse_t *)buf)[0] = (strata_sparse_t){0, 0.0f};
        n = 1;
    }
    out->len = (uint32_t)(n * sizeof(strata_sparse_t));
    out->sparse = true;
    return STRATA_OK;
}
