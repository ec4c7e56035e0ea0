/*
 * GSSP regrouping, on the coordinator. Workers report each epoch's
 * iteration time (EPOCH); once every live worker has ended epoch e, the
 * grouping (engine/grouping.h) classifies them, every worker learns its
 * group's speed rank (RANK), and if a worker's group changed:
 *   1. FREEZE to every live worker; each stops pushing at its next clock
 *      boundary S and says so (FROZEN S).
 *   2. The moves: worker w joins group g so that its push of worker clock
 *      S_w is g's clock J_g, past every clock of g anyone ever pushed into
 *      (its workers at their FROZEN clocks, those that left it at their
 *      last), so no group clock is completed twice. The same segments are
 *      appended here and, by PLAN / PLAN_END, on every aggregator, which
 *      answers PLANNED.
 *   3. GO to every frozen worker, with its group and rank.
 * Nobody pushes across the boundary while the plan travels, and every
 * aggregator maps each push to the same group clock (engine/members.h), so
 * no gradient is lost or applied twice.
 */
#include <inttypes.h>
#include <string.h>

#include "engine/coord.h"
#include "engine/grouping.h"
#include "engine/members.h"
#include "util/alloc.h"
#include "util/log.h"

enum { ENG_RG_NOT_ASKED = -1, ENG_RG_ASKED = -2 }; /* frozen_at */

typedef struct eng_regroup {
    eng_grouping_t *grouping;
    eng_members_t *members; /* as the aggregators have them */
    uint32_t *epochs;       /* [workers]: epochs reported */
    uint32_t classified;    /* epochs classified */
    int64_t *frozen_at;     /* [workers]: FROZEN clock; ENG_RG_* below */
    uint32_t *target;       /* [workers]: group after the regroup */
    int64_t *join_clock;    /* [groups]: J of the groups gaining workers */
    int64_t *high;          /* [groups]: clocks that ended segments reached */
    int64_t *final;         /* [workers]: FINAL clock, -1 */
    uint32_t gen, waiting;  /* the regroup under way; answers awaited */
    enum { ENG_RG_IDLE, ENG_RG_FREEZING, ENG_RG_PLANNING } phase;
} eng_regroup_t;

static strata_status_t eng_coord_regroup_create(strata_ctx_t *ctx)
{
    const eng_policy_t *p = ctx->policy;
    uint32_t nw = (uint32_t)ctx->nworkers;
    eng_regroup_t *rg = util_calloc(1, sizeof(*rg));
    ctx->coord->rg = rg;
    if (!rg)
        return STRATA_ERR_NOMEM;
    eng_grouping_params_t gp;
    eng_grouping_params_from_config(ctx->cfg, nw, &gp);
    strata_status_t st = eng_grouping_create(&gp, &rg->grouping);
    if (st == STRATA_OK)
        st = eng_members_create(nw, p->ngroups, p->group_of, &rg->members);
    if (st != STRATA_OK)
        return st;
    rg->epochs = util_calloc(nw ? nw : 1, sizeof(*rg->epochs));
    rg->frozen_at = util_calloc(nw ? nw : 1, sizeof(*rg->frozen_at));
    rg->target = util_calloc(nw ? nw : 1, sizeof(*rg->target));
    rg->join_clock = util_calloc(p->ngroups, sizeof(*rg->join_clock));
    rg->high = util_calloc(p->ngroups, sizeof(*rg->high));
    rg->final = util_calloc(nw ? nw : 1, sizeof(*rg->final));
    if (!rg->epochs || !rg->frozen_at || !rg->target || !rg->join_clock ||
        !rg->high || !rg->final)
        return STRATA_ERR_NOMEM;
    for (uint32_t w = 0; w < nw; w++)
        rg->final[w] = -1;
    return STRATA_OK;
}

static void eng_coord_regroup_free(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    if (!rg)
        return;
    eng_grouping_destroy(rg->grouping);
    eng_members_destroy(rg->members);
    util_free(rg->epochs);
    util_free(rg->frozen_at);
    util_free(rg->target);
    util_free(rg->join_clock);
    util_free(rg->high);
    util_free(rg->final);
    util_free(rg);
    ctx->coord->rg = NULL;
}

/* A worker still training: neither gone nor dropped. */
static eng_member_t *eng_live_worker(strata_ctx_t *ctx, uint32_t w)
{
    eng_member_t *m = ctx->coord->by_rank[ctx->naggs + (int)w];
    return m && !m->bye && !m->dropped && m->peer.ep ? m : NULL;
}

/* A worker that finalizes closes its connection after its BYE, which may
 * still be on the way: losing it is no failure here (one lost without BYE
 * fails the job through its disconnect). */
static void eng_rg_send(strata_ctx_t *ctx, eng_member_t *m, eng_wbuf_t *msg)
{
    strata_status_t st = eng_send(&m->peer, msg, NULL);
    if (st != STRATA_OK &&
        !(st == STRATA_ERR_PEER && m->peer.rank >= ctx->naggs)) {
        eng_fail(ctx, st, "regrouping: cannot send to %s: %s",
                 eng_member_name(m), strata_strerror(st));
    }
}

/* ---- 3. GO ---- */

static void eng_rg_maybe_classify(strata_ctx_t *ctx);

/* Every live worker is told its group and that group's speed rank: RANK
 * after a classification, GO (to the frozen ones) after a regroup. */
static void eng_rg_tell(strata_ctx_t *ctx, eng_msg_type_t type)
{
    eng_regroup_t *rg = ctx->coord->rg;
    unsigned char buf[32];
    eng_wbuf_t msg;
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
        eng_member_t *m = eng_live_worker(ctx, w);
        if (!m || (type == ENG_MSG_GO && rg->frozen_at[w] < 0))
            continue;
        uint32_t g = eng_members_current(rg->members, w)->group;
        eng_wbuf_init(&msg, buf, sizeof(buf), type);
        eng_put_u32(&msg, g);
        eng_put_f64(&msg, eng_grouping_rank(rg->grouping, g));
        eng_rg_send(ctx, m, &msg);
    }
}

static void eng_rg_go(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    eng_rg_tell(ctx, ENG_MSG_GO);
    util_info("regroup %u done: %u groups (GVF %.3f)", rg->gen,
              eng_grouping_count(rg->grouping), eng_grouping_gvf(rg->grouping));
    rg->phase = ENG_RG_IDLE;
    eng_rg_maybe_classify(ctx);
}

static void eng_coord_on_planned(strata_ctx_t *ctx, eng_member_t *m,
                                 eng_rbuf_t *r)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t gen = eng_get_u32(r);
    if (!eng_rbuf_ok(r) || !rg || rg->phase != ENG_RG_PLANNING ||
        gen != rg->gen || m->peer.rank >= ctx->naggs) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected PLANNED from %s",
                 eng_member_name(m));
        return;
    }
    if (--rg->waiting == 0)
        eng_rg_go(ctx);
}

/* ---- 2. the plan ---- */

static void eng_rg_raise(int64_t *v, int64_t to)
{
    if (to > *v)
        *v = to;
}

/* J of every group that gains workers: past every clock of the group that
 * anyone ever pushed into (its members now, and those that left it), so no
 * clock is completed twice; and, into a group left empty, no earlier than
 * the group clocks its movers had reached (the tracker's least clock is
 * below those). */
static void eng_rg_join_clocks(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t nw = (uint32_t)ctx->nworkers;
    for (uint32_t g = 0; g < ctx->policy->ngroups; g++)
        rg->join_clock[g] = rg->high[g];
    for (uint32_t w = 0; w < nw; w++) {
        const eng_segment_t *s = eng_members_current(rg->members, w);
        if (rg->frozen_at[w] >= 0) {
            eng_rg_raise(&rg->join_clock[s->group],
                         rg->frozen_at[w] + s->offset);
            eng_rg_raise(&rg->join_clock[rg->target[w]],
                         rg->frozen_at[w] + s->offset);
        }
    }
    for (uint32_t w = 0; w < nw; w++) {
        const eng_segment_t *s = eng_members_current(rg->members, w);
        if (rg->frozen_at[w] >= 0 && s->group != rg->target[w])
            eng_rg_raise(&rg->high[s->group], rg->frozen_at[w] + s->offset);
    }
}

/* Append the moves here and send them to every aggregator. */
static strata_status_t eng_rg_plan(strata_ctx_t *ctx, uint32_t *nmoves)
{
    eng_regroup_t *rg = ctx->coord->rg;
    eng_rg_join_clocks(ctx);
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN);
    eng_put_u32(&msg, rg->gen);
    *nmoves = 0;
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
        const eng_segment_t *s = eng_members_current(rg->members, w);
        uint32_t g = rg->target[w];
        if (rg->frozen_at[w] < 0 || s->group == g)
            continue;
        strata_status_t st = eng_members_move(rg->members, w, rg->frozen_at[w],
                                              g, rg->join_clock[g]);
        if (st != STRATA_OK)
            return st;
        util_debug("regroup %u: worker %u from clock %" PRId64
                   " into group %u at its clock %" PRId64,
                   rg->gen, w, rg->frozen_at[w], g, rg->join_clock[g]);
        if (eng_wbuf_room(&msg) < 24) {
            for (int a = 0; a < ctx->naggs; a++)
                eng_rg_send(ctx, ctx->coord->by_rank[a], &msg);
            eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN);
            eng_put_u32(&msg, rg->gen);
        }
        eng_put_u32(&msg, w);
        eng_put_i64(&msg, rg->frozen_at[w]);
        eng_put_u32(&msg, g);
        eng_put_i64(&msg, rg->join_clock[g]);
        (*nmoves)++;
    }
    for (int a = 0; a < ctx->naggs; a++)
        eng_rg_send(ctx, ctx->coord->by_rank[a], &msg);
    return STRATA_OK;
}

static void eng_rg_frozen_all(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t nmoves;
    strata_status_t st = eng_rg_plan(ctx, &nmoves);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "regroup %u: cannot plan the moves: %s", rg->gen,
                 strata_strerror(st));
        return;
    }
    unsigned char buf[32];
    eng_wbuf_t msg;
    rg->phase = ENG_RG_PLANNING;
    rg->waiting = (uint32_t)ctx->naggs;
    for (int a = 0; a < ctx->naggs; a++) {
        eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN_END);
        eng_put_u32(&msg, rg->gen);
        eng_put_u32(&msg, nmoves);
        eng_rg_send(ctx, ctx->coord->by_rank[a], &msg);
    }
}

static void eng_coord_on_frozen(strata_ctx_t *ctx, eng_member_t *m,
                                eng_rbuf_t *r)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t gen = eng_get_u32(r);
    int64_t at = eng_get_i64(r);
    int w = m->peer.rank - ctx->naggs;
    if (m->bye) /* it finalized after the FREEZE: counted out already */
        return;
    if (!eng_rbuf_ok(r) || !rg || rg->phase != ENG_RG_FREEZING ||
        gen != rg->gen || w < 0 || rg->frozen_at[w] != ENG_RG_ASKED || at < 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected FROZEN from %s",
                 eng_member_name(m));
        return;
    }
    rg->frozen_at[w] = at;
    if (--rg->waiting == 0)
        eng_rg_frozen_all(ctx);
}

/* ---- 1. classifying, FREEZE ---- */

static void eng_rg_freeze(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    const uint32_t *a = eng_grouping_assignment(rg->grouping);
    unsigned char buf[16];
    eng_wbuf_t msg;
    rg->gen++;
    rg->phase = ENG_RG_FREEZING;
    rg->waiting = 0;
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
        eng_member_t *m = eng_live_worker(ctx, w);
        rg->frozen_at[w] = m ? ENG_RG_ASKED : ENG_RG_NOT_ASKED;
        rg->target[w] = a[w];
        if (!m)
            continue;
        eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_FREEZE);
        eng_put_u32(&msg, rg->gen);
        eng_rg_send(ctx, m, &msg);
        rg->waiting++;
    }
    if (rg->waiting == 0)
        eng_rg_frozen_all(ctx);
}

/* Once every live worker has ended the next epoch: classify, and regroup
 * if the grouping changed. */
static void eng_rg_maybe_classify(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t nlive = 0;
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++)
        if (eng_live_worker(ctx, w)) {
            if (rg->epochs[w] <= rg->classified)
                return;
            nlive++;
        }
    if (rg->phase != ENG_RG_IDLE || nlive == 0 || eng_fatal(ctx))
        return;
    rg->classified++;
    bool changed = false;
    strata_status_t st = eng_grouping_epoch(rg->grouping, &changed);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "grouping after epoch %u failed: %s", rg->classified,
                 strata_strerror(st));
        return;
    }
    if (!changed) { /* ranks may have changed: GDTopK's ratios */
        eng_rg_tell(ctx, ENG_MSG_RANK);
        return;
    }
    util_info("epoch %u: regrouping into %u groups", rg->classified,
              eng_grouping_count(rg->grouping));
    eng_rg_freeze(ctx);
}

static void eng_coord_on_epoch(strata_ctx_t *ctx, eng_member_t *m,
                               eng_rbuf_t *r)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t epoch = eng_get_u32(r);
    double seconds = eng_get_f64(r);
    int w = m->peer.rank - ctx->naggs;
    if (!eng_rbuf_ok(r) || !rg || w < 0 || epoch != rg->epochs[w] + 1) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected EPOCH from %s",
                 eng_member_name(m));
        return;
    }
    strata_status_t st =
        eng_grouping_report(rg->grouping, (uint32_t)w, seconds);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "the iteration time %s reported was refused",
                 eng_member_name(m));
        return;
    }
    rg->epochs[w] = epoch;
    eng_rg_maybe_classify(ctx);
}

static void eng_coord_on_final(strata_ctx_t *ctx, eng_member_t *m,
                               eng_rbuf_t *r)
{
    eng_regroup_t *rg = ctx->coord->rg;
    int64_t clock = eng_get_i64(r);
    int w = m->peer.rank - ctx->naggs;
    if (!eng_rbuf_ok(r) || !rg || w < 0 || clock < 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected FINAL from %s",
                 eng_member_name(m));
        return;
    }
    rg->final[w] = clock;
}

/* A worker finalized (or was dropped): it no longer takes part. */
static void eng_coord_regroup_left(strata_ctx_t *ctx, eng_member_t *m)
{
    eng_regroup_t *rg = ctx->coord->rg;
    int w = m->peer.rank - ctx->naggs;
    if (!rg || w < 0)
        return;
    const eng_segment_t *s = eng_members_current(rg->members, (uint32_t)w);
    if (rg->final[w] >= 0)
        eng_rg_raise(&rg->high[s->group], rg->final[w] + s->offset);
    eng_grouping_drop(rg->grouping, (uint32_t)w);
    if (rg->phase == ENG_RG_FREEZING && rg->frozen_at[w] == ENG_RG_ASKED) {
        rg->frozen_at[w] = ENG_RG_NOT_ASKED;
        if (--rg->waiting == 0)
            eng_rg_frozen_all(ctx);
    } else if (rg->phase == ENG_RG_IDLE)
        eng_rg_maybe_classify(ctx);
}

static strata_status_t eng_coord_gssp_create(strata_ctx_t *ctx)
{
    strata_status_t st = eng_coord_regroup_create(ctx);
    if (st != STRATA_OK)
        util_error("cannot set up the coordinator's grouping: %s",
                   strata_strerror(st));
    return st;
}

static bool eng_coord_gssp_msg(strata_ctx_t *ctx, eng_member_t *m,
                               unsigned type, eng_rbuf_t *r)
{
    switch (type) {
    case ENG_MSG_EPOCH:
        eng_coord_on_epoch(ctx, m, r);
        return true;
    case ENG_MSG_FROZEN:
        eng_coord_on_frozen(ctx, m, r);
        return true;
    case ENG_MSG_PLANNED:
        eng_coord_on_planned(ctx, m, r);
        return true;
    case ENG_MSG_FINAL:
        eng_coord_on_final(ctx, m, r);
        return true;
    default:
        return false;
    }
}

const eng_coord_policy_t eng_coord_gssp = {
    .create = eng_coord_gssp_create,
    .free = eng_coord_regroup_free,
    .on_msg = eng_coord_gssp_msg,
    .left = eng_coord_regroup_left,
};
