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
 * An optimizer's state is staged with the model: sgd's momentum, and an
 * fp16 or bf16 model's fp32 master, are copied and updated beside it.
 *
 * The clock is applied as always once it counts (agg_reduce.c); the stage
 * is then compared with what is applied: the same pushes of the same
 * workers, the same scale and rate. If it holds that, it becomes the
 * model: the partition's two buffers (in out and in stage) swap roles, as
 * do its momentum and master with the staged ones, so nothing is copied
 * at the end of the round; and each worker it was written to gets the
 * immediate alone (a zero-length write behind the model's on the same
 * connection). Anything else (a drop changed the pushes that count, or the
 * live count) discards the stage: the clock is applied and its model
 * written in full, as without staging, over what was staged. What is
 * applied, the optimizer's state, and the model every pull completes with,
 * are thus exactly what they are without staging.
 *
 * Only under bsp (one group, no rounds, dense pushes), and not over shm,
 * where a push lands at once. One clock per partition is staged at a time:
 * a partition is staged, or reduced, only while no write out of either of
 * its buffers is pending, and a write reads the buffer it was queued from.
 * STRATA_STAGE_MODEL=0 turns it off.
 */
#include <string.h>

#include "engine/aggregator.h"
#include "util/alloc.h"
#include "util/log.h"

/* A partition's momentum or master: fp32, one per element. */
static size_t eng_stage_state_bytes(const eng_apart_t *ap)
{
    return ap->part->count * sizeof(float);
}

static bool eng_stage_fits(const strata_ctx_t *ctx)
{
    const eng_agg_t *a = ctx->agg;
    const eng_policy_t *pol = ctx->policy;
    if (!eng_config_int(ctx->cfg, ENG_CFG_STAGE_MODEL) || !a->drops ||
        pol->ngroups != 1 || pol->apply_on_arrival || pol->ops->rounds ||
        pol->gdtopk)
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
        if (ap->momentum &&
            !(ap->stage_momentum = util_malloc(eng_stage_state_bytes(ap))))
            return STRATA_ERR_NOMEM;
        if (ap->master &&
            !(ap->stage_master = util_malloc(eng_stage_state_bytes(ap))))
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
        util_free(a->parts[i].stage_momentum);
        util_free(a->parts[i].stage_master);
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
    void *dst = eng_agg_stage_buf(a, ap);
    float *momentum = ap->stage_momentum, *master = ap->stage_master;
    for (uint32_t k = 0; k < n; k++)
        if (a->srcs[k].nsparse != ENG_SRC_DENSE)
            return;
    uint64_t t0 = util_now_ns();
    /* sgd steps the state it has (a master is rounded into the whole
     * model); sum replaces the model */
    if (momentum)
        memcpy(momentum, ap->momentum, eng_stage_state_bytes(ap));
    if (master)
        memcpy(master, ap->master, eng_stage_state_bytes(ap));
    else if (!ctx->policy->sum_only)
        memcpy(dst, eng_agg_model(a, ap), part->bytes);
    a->upd.lr = eng_agg_lr_at(a, c);
    strata_status_t st =
        a->upd.ops->apply(&a->upd, part->dtype, dst, master, momentum, a->srcs,
                          n, part->count, scale);
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
    float *momentum = ap->momentum, *master = ap->master;
    ap->momentum = ap->stage_momentum;
    ap->stage_momentum = momentum;
    ap->master = ap->stage_master;
    ap->stage_master = master;
    ap->flip = !ap->flip;
    a->staged_clocks++;
    return true;
}
