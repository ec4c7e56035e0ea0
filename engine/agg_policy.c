/*
 * The aggregator's part of the policies:
 *   gssp           a regroup's plan (PLAN, PLAN_END): the moves appended to
 *                  the membership, made on each partition when due
 *   esync, fedavg  ROUND (the local steps behind a worker's deltas)
 */
#include "engine/aggregator.h"
#include "util/log.h"

/* ---- gssp ---- */

/* A regroup's moves (gen, then worker, start, group, group clock each),
 * appended to the membership at once: the workers are frozen until every
 * aggregator has them, so none of their new pushes has come yet. */
static strata_status_t eng_on_plan(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t gen = eng_get_u32(r);
    if (gen != a->plan_gen) {
        a->plan_gen = gen;
        a->plan_moves = 0;
    }
    strata_status_t st = STRATA_OK;
    while (st == STRATA_OK && !r->bad && r->pos < r->len) {
        uint32_t w = eng_get_u32(r);
        int64_t start = eng_get_i64(r);
        uint32_t group = eng_get_u32(r);
        int64_t clock = eng_get_i64(r);
        if (!r->bad)
            st = eng_members_move(a->members, w, start, group, clock);
        a->plan_moves++;
    }
    return st == STRATA_OK && eng_rbuf_ok(r) ? STRATA_OK : STRATA_ERR_PROTO;
}

/* The plan is complete: make the moves that are due, and say so. */
static strata_status_t eng_on_plan_end(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t gen = eng_get_u32(r), nmoves = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || gen != a->plan_gen || nmoves != a->plan_moves)
        return STRATA_ERR_PROTO;
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        ap->moves = 0;
        for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++)
            ap->moves +=
                ap->seg_at[w] + 1 < eng_members_nsegments(a->members, w);
        strata_status_t st = eng_agg_moves(ctx, ap);
        if (st != STRATA_OK)
            return st;
        eng_try_reduce(ctx, i);
        eng_serve(ctx, i);
    }
    atomic_fetch_add_explicit(&a->regroups, 1, memory_order_relaxed);
    unsigned char buf[16];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_PLANNED);
    eng_put_u32(&m, gen);
    return eng_send(&ctx->coord_peer, &m, NULL);
}

static strata_status_t eng_gssp_coord_msg(strata_ctx_t *ctx, unsigned type,
                                          eng_rbuf_t *r)
{
    if (type == ENG_MSG_PLAN)
        return eng_on_plan(ctx, r);
    if (type == ENG_MSG_PLAN_END)
        return eng_on_plan_end(ctx, r);
    return STRATA_ERR_PROTO;
}

const eng_agg_policy_t eng_agg_gssp = {
    .on_coord_msg = eng_gssp_coord_msg,
};

/* ---- esync, fedavg ---- */

static bool eng_on_round(eng_wlink_t *l, eng_rbuf_t *r)
{
    int64_t clock = eng_get_i64(r);
    uint32_t steps = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || clock < 0 || steps == 0)
        return false;
    l->round_clock[clock & 1] = clock;
    l->round_steps[clock & 1] = steps;
    return true;
}

static bool eng_rounds_worker_msg(strata_ctx_t *ctx, eng_wlink_t *l,
                                  unsigned type, eng_rbuf_t *r)
{
    (void)ctx;
    return type == ENG_MSG_ROUND && eng_on_round(l, r);
}

const eng_agg_policy_t eng_agg_rounds = {
    .on_worker_msg = eng_rounds_worker_msg,
};
