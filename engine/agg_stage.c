/*
 * Staged models: a clock's model flows back while the clock is still being
 * pushed.
 *
 * When workers may be dropped, a push counts only once its worker said that
 * its whole clock landed everywhere (PUSHED, agg_drop.c), so that every
 * aggregator applies the same pushes. Reducing only then keeps a clock's
 * model writes from overlapping its pushes: over a network a round takes
 * about twice what its busiest link needs. So once every source of a
 * group's clock landed here, the partition is reduced into the stage (out,
 * the tracker and every count untouched) and its model written to the
 * workers that wait for it, straight into their parameter buffers but
 * without the immediate: a worker does not read them before its pull
 * completes (strata.h), and its pull completes only on the immediate.
 *
 * The clock is applied as always once it counts (agg_reduce.c); the stage
 * is then compared with what is applied: the same pushes of the same
 * workers, the same scale and rate, and it is copied into out, and each
 * worker it was written to gets the immediate alone (a zero-length write
 * behind the model's on the same connection). Anything else (a drop changed
 * the pushes that count, or the live count) discards the stage: the clock
 * is applied and its model written in full, as without staging, over what
 * was staged. What is applied, and the model every pull completes with,
 * are thus exactly what they are without staging.
 *
 * Only under bsp (one group, no rounds, dense pushes), for updates that keep
 * no state beside out (sum; sgd without momentum on fp32 and fp64), and not
 * over shm, where a push lands at once. One clock per partition is staged
 * at a time. STRATA_STAGE_MODEL=0 turns it off.
 */
#include <string.h>

#include "engine/aggregator.h"
#include "util/alloc.h"
#include "util/log.h"

static bool eng_stage_fits(const strata_ctx_t *ctx)
{
    const eng_agg_t *a = ctx->agg;
    const eng_policy_t *pol = ctx->policy;
    if (!eng_config_int(ctx->cfg, ENG_CFG_STAGE_MODEL) || !a->drops ||
        pol->ngroups != 1 || pol->apply_on_arrival || pol->ops->rounds ||
        pol->gdtopk)
        return false;
    for (uint32_t i = 0; i < a->nparts; i++)
        if (a->parts[i].momentum || a->parts[i].master)
            return false;
    /* a job on one host: nothing would be staged */
    for (int w = 0; w < ctx->nworkers; w++)
        if (eng_agg_stage_worker(ctx, (uint32_t)w))
            return true;
    return false;
}

strata_status_t eng_agg_stage_setup(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    size_t nw = (size_t)ctx->nworkers;
    for (uint32_t i = 0; i < a->nparts; i++)
        a->parts[i].stage_clock = -1;
    if (!eng_stage_fits(ctx))
        return STRATA_OK;
    uint64_t bytes = a->layout->held_bytes[a->shard];
    void *stage = util_aligned_alloc(4096, bytes ? bytes : 64);
    if (!stage)
        return STRATA_ERR_NOMEM;
    a->stage = stage;
    for (int p = 0; p < ENG_NPROV; p++)
        if (ctx->data_tp[p]) {
            strata_status_t st =
                tp_mr_reg(ctx->data_tp[p], a->stage, bytes ? bytes : 64,
                          TP_ACCESS_LOCAL, &a->stage_mr[p]);
            if (st != STRATA_OK)
                return st;
        }
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        ap->stage_w = util_malloc(sizeof(uint32_t) * nw);
        ap->stage_wc = util_malloc(sizeof(int64_t) * nw);
        ap->staged = util_malloc(sizeof(int64_t) * nw);
        if (!ap->stage_w || !ap->stage_wc || !ap->staged)
            return STRATA_ERR_NOMEM;
        for (size_t w = 0; w < nw; w++)
            ap->staged[w] = -1;
    }
    util_debug("shard %u: models are staged ahead of PUSHED", a->shard);
    return STRATA_OK;
}

void eng_agg_stage_free(eng_agg_t *a)
{
    for (uint32_t i = 0; a->parts && i < a->nparts; i++) {
        util_free(a->parts[i].stage_w);
        util_free(a->parts[i].stage_wc);
        util_free(a->parts[i].staged);
    }
    for (int p = 0; p < ENG_NPROV; p++)
        if (a->stage_mr[p])
            tp_mr_dereg(a->stage_mr[p]);
    util_free(a->stage);
}

bool eng_agg_stage_worker(const strata_ctx_t *ctx, uint32_t w)
{
    const eng_wlink_t *l = ctx->agg->links[w];
    return l && l->peer.tp &&
           eng_prov_index(tp_name(l->peer.tp)) != ENG_PROV_SHM;
}

void eng_agg_stage(strata_ctx_t *ctx, eng_apart_t *ap, int64_t c, uint32_t n,
                   double scale)
{
    eng_agg_t *a = ctx->agg;
    const eng_partition_t *part = ap->part;
    void *dst = (char *)a->stage + part->held_off;
    for (uint32_t k = 0; k < n; k++)
        if (a->srcs[k].nsparse != ENG_SRC_DENSE)
            return;
    uint64_t t0 = util_now_ns();
    if (!ctx->policy->sum_only) /* sgd steps the model; sum replaces it */
        memcpy(dst, (char *)a->out + part->held_off, part->bytes);
    a->upd.lr = eng_agg_lr_at(a, c);
    strata_status_t st = a->upd.ops->apply(
        &a->upd, part->dtype, dst, NULL, NULL, a->srcs, n, part->count, scale);
    atomic_fetch_add_explicit(&ctx->cnt.reduce_ns, util_now_ns() - t0,
                              memory_order_relaxed);
    if (st != STRATA_OK) /* applied (and failed, naming it) once it counts */
        return;
    ap->stage_clock = c;
    ap->stage_n = n;
    ap->stage_scale = scale;
    ap->stage_lr = a->upd.lr;
    memcpy(ap->stage_w, a->src_w, sizeof(uint32_t) * n);
    memcpy(ap->stage_wc, a->src_wc, sizeof(int64_t) * n);
    uint32_t i = (uint32_t)(ap - a->parts);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t w = a->src_w[k];
        eng_wlink_t *l = a->links[w];
        /* Only a worker that pushed this clock as its own clock c and holds
         * the model of c: the one it is served next. */
        if (a->src_wc[k] != c || !eng_agg_stage_worker(ctx, w) || !l->peer.ep ||
            !l->params_ready || l->left || a->dropped[w] ||
            ap->served[w] != c || ap->want[w] <= c)
            continue;
        ap->staged[w] = c + 1;
        eng_wlink_queue(ctx, l, i, ENG_SEND_STAGED, c + 1);
    }
}

bool eng_agg_stage_take(strata_ctx_t *ctx, eng_apart_t *ap, int64_t c,
                        uint32_t n, double scale)
{
    eng_agg_t *a = ctx->agg;
    if (ap->stage_clock < 0)
        return false;
    bool same = ap->stage_clock == c && ap->stage_n == n &&
                ap->stage_scale == scale && ap->stage_lr == a->upd.lr;
    for (uint32_t k = 0; same && k < n; k++)
        same = ap->stage_w[k] == a->src_w[k] && ap->stage_wc[k] == a->src_wc[k];
    if (!same) {
        for (int w = 0; w < ctx->nworkers; w++)
            ap->staged[w] = -1;
        a->unstaged_clocks++;
        util_debug("partition %u: its model of clock %lld, staged from %u "
                   "pushes, is discarded: clock %lld counts %u pushes (a "
                   "drop changed what counts)",
                   ap->index, (long long)ap->stage_clock, ap->stage_n,
                   (long long)c, n);
    }
    ap->stage_clock = -1;
    if (!same)
        return false;
    memcpy((char *)a->out + ap->part->held_off,
           (char *)a->stage + ap->part->held_off, ap->part->bytes);
    a->staged_clocks++;
    return true;
}
