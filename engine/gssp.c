/*
 * GSSP on a worker, its part of the policy. The engine measures the
 * worker's own step time from its pushes and model arrivals
 * (engine/steptime.h) and reports it to the coordinator (STEPS): every step
 * of the probe, then at most every ENG_GSSP_REPORT_MS; the coordinator groups
 * workers by speed (RANK tells a worker its group's speed rank). A regroup
 * stops the worker's pushes at a clock boundary (FREEZE, FROZEN) until
 * every aggregator has the moves (GO); RANK says its group and the group's
 * rank (a new process in a dropped worker's place learns its group so);
 * finalizing, the worker says which clock it reached (FINAL). strata_epoch_end
 * counts epochs for GDTopK's schedule only.
 */
#include <string.h>

#include "engine/worker.h"
#include "util/log.h"

/* Least interval between two reports after the probe: the coordinator
 * hears a 50 ms step at every step, a 5 ms one every tenth. */
#define ENG_GSSP_REPORT_MS 50

static strata_status_t eng_gssp_epoch_end(strata_ctx_t *ctx,
                                          double iteration_seconds)
{
    (void)iteration_seconds; /* the engine measures steps itself */
    eng_worker_api_t *api = &ctx->worker->api;
    if (!api->committed) {
        util_error("strata_epoch_end: no step was taken (commit first)");
        return STRATA_ERR_STATE;
    }
    eng_cmd_t cmd = {.type = ENG_CMD_EPOCH};
    cmd.u.epoch.epoch = ++api->epochs;
    strata_status_t st = eng_cmd_submit(ctx, &cmd);
    if (st != STRATA_OK)
        util_error("strata_epoch_end: the command queue is full");
    return st != STRATA_OK ? st : eng_fatal(ctx);
}

/* ---- measuring steps ---- */

static void eng_gssp_landed(strata_ctx_t *ctx, int64_t clock)
{
    eng_steptime_landed(&ctx->worker->steptime, clock, util_now_ns());
}

static void eng_gssp_report(strata_ctx_t *ctx, const eng_steptime_t *s,
                            uint64_t now)
{
    double t = eng_steptime_estimate(s, now);
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_STEPS);
    eng_put_u64(&m, s->steps);
    eng_put_f64(&m, t > 1e-6 ? t : 1e-6); /* a step takes some time */
    strata_status_t st = eng_send(&ctx->coord_peer, &m, NULL);
    if (st != STRATA_OK)
        eng_fail_coord_send(ctx, st,
                            "cannot report step times to the coordinator");
}

static void eng_gssp_pushed(strata_ctx_t *ctx, int64_t clock,
                            uint64_t pushed_ns)
{
    eng_worker_t *w = ctx->worker;
    if (!eng_steptime_pushed(&w->steptime, clock, pushed_ns))
        return;
    uint64_t now = util_now_ns();
    if (w->steptime.steps <= ctx->policy->probe_steps ||
        now - w->steptime_sent_ns >= ENG_GSSP_REPORT_MS * 1000000ull) {
        w->steptime_sent_ns = now;
        eng_gssp_report(ctx, &w->steptime, now);
    }
}

/* ---- regrouping ---- */

/* The first clock none of whose gradients has left is where the worker
 * may change group: a clock half pushed stays in the old one. */
static void eng_gssp_on_freeze(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    uint32_t gen = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || !w->layout) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected or malformed FREEZE");
        return;
    }
    w->frozen = true;
    w->freeze_at = w->clock + (w->npushed > 0);
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_FROZEN);
    eng_put_u32(&m, gen);
    eng_put_i64(&m, w->freeze_at);
    strata_status_t st = eng_send(&ctx->coord_peer, &m, NULL);
    if (st != STRATA_OK)
        eng_fail_coord_send(ctx, st, "cannot answer the coordinator's FREEZE");
}

static void eng_gssp_set_rank(strata_ctx_t *ctx, double rank)
{
    uint64_t bits;
    memcpy(&bits, &rank, sizeof(bits));
    atomic_store(&ctx->group_rank_bits, bits);
}

static void eng_gssp_on_go(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_worker_t *w = ctx->worker;
    uint32_t group = eng_get_u32(r);
    double rank = eng_get_f64(r);
    if (!eng_rbuf_ok(r) || !w->frozen || group >= ctx->policy->ngroups) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected or malformed GO");
        return;
    }
    w->frozen = false;
    atomic_store(&ctx->group, (int)group);
    eng_gssp_set_rank(ctx, rank);
    eng_worker_unpark(ctx);
}

static void eng_gssp_on_rank(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    uint32_t group = eng_get_u32(r);
    double rank = eng_get_f64(r);
    if (!eng_rbuf_ok(r) || group >= ctx->policy->ngroups || !(rank >= 0) ||
        rank > 1) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed RANK from the coordinator");
        return;
    }
    atomic_store(&ctx->group, (int)group); /* a rejoiner's first news of it */
    eng_gssp_set_rank(ctx, rank);
}

static bool eng_gssp_on_coord_msg(strata_ctx_t *ctx, unsigned type,
                                  eng_rbuf_t *r)
{
    switch (type) {
    case ENG_MSG_FREEZE:
        eng_gssp_on_freeze(ctx, r);
        return true;
    case ENG_MSG_GO:
        eng_gssp_on_go(ctx, r);
        return true;
    case ENG_MSG_RANK:
        eng_gssp_on_rank(ctx, r);
        return true;
    default:
        return false;
    }
}

/* ---- epochs (GDTopK), leaving ---- */

static void eng_gssp_cmd(strata_ctx_t *ctx, const eng_cmd_t *cmd)
{
    eng_worker_t *w = ctx->worker;
    if (cmd->type != ENG_CMD_EPOCH || !w->topk)
        return;
    uint64_t bits = atomic_load(&ctx->group_rank_bits);
    double rank;
    memcpy(&rank, &bits, sizeof(rank));
    eng_topk_push_epoch(w->topk, cmd->u.epoch.epoch, rank);
}

/* Finalizing: the clocks its groups reached, never reused by a regroup. */
static strata_status_t eng_gssp_leave(strata_ctx_t *ctx)
{
    unsigned char buf[16];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_FINAL);
    eng_put_i64(&m, ctx->worker->clock);
    return eng_send(&ctx->coord_peer, &m, NULL);
}

const eng_worker_policy_t eng_worker_gssp = {
    .epoch_end = eng_gssp_epoch_end,
    .cmd = eng_gssp_cmd,
    .landed = eng_gssp_landed,
    .pushed = eng_gssp_pushed,
    .on_coord_msg = eng_gssp_on_coord_msg,
    .leave = eng_gssp_leave,
};
