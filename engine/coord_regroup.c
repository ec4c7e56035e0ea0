/*
 * GSSP regrouping, on the coordinator. Workers report their own step times
 * (STEPS); the grouping (engine/grouping.h) probes, then groups them by the
 * cost model and revises the groups as the times change. Every worker learns
 * its group's speed rank when it changes (RANK), and when the assignment
 * changes:
 *   1. FREEZE to every live worker; each stops pushing at its next clock
 *      boundary S and says so at once (FROZEN S).
 *   2. The plan (eng_members_regroup): each group gaining workers starts
 *      afresh at a clock J past every clock of it anyone ever pushed into,
 *      and everyone in it continues there. The same segments are appended
 *      here and, by PLAN / PLAN_END, on every aggregator, which answers
 *      PLANNED.
 *   3. GO to every frozen worker, with its group and rank.
 * Nobody pushes across the boundary while the plan travels, and every
 * aggregator maps each push to the same group clock (engine/members.h), so
 * no gradient is lost or applied twice.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/coord.h"
#include "engine/grouping.h"
#include "engine/members.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

enum { ENG_RG_NOT_ASKED = -1, ENG_RG_ASKED = -2 }; /* frozen_at */

/* Least interval between two evaluations of the grouping: reports arrive
 * from every worker, the programme is O(k n^2). */
#define ENG_RG_EVAL_NS (10 * 1000000ull)

typedef struct eng_regroup {
    eng_grouping_t *grouping;
    eng_members_t *members; /* as the aggregators have them */
    int64_t *frozen_at;     /* [workers]: FROZEN clock; ENG_RG_* above */
    uint32_t *target;       /* [workers]: group after the regroup */
    eng_move_t *moves;      /* [workers]: a regroup's segments */
    bool *planned;          /* [aggregators]: PLANNED said */
    uint64_t rank_gen;      /* ranks last told */
    uint64_t eval_ns;       /* last evaluation */
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
    rg->frozen_at = util_calloc(nw ? nw : 1, sizeof(*rg->frozen_at));
    rg->target = util_calloc(nw ? nw : 1, sizeof(*rg->target));
    rg->moves = util_calloc(nw ? nw : 1, sizeof(*rg->moves));
    rg->planned = util_calloc((size_t)ctx->naggs, sizeof(*rg->planned));
    if (!rg->frozen_at || !rg->target || !rg->moves || !rg->planned)
        return STRATA_ERR_NOMEM;
    return STRATA_OK;
}

static void eng_coord_regroup_free(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    if (!rg)
        return;
    eng_grouping_destroy(rg->grouping);
    eng_members_destroy(rg->members);
    util_free(rg->frozen_at);
    util_free(rg->target);
    util_free(rg->moves);
    util_free(rg->planned);
    util_free(rg);
    ctx->coord->rg = NULL;
}

/* A worker still training: neither gone nor dropped (nor a new process
 * in a dropped one's place whose first clock is still being agreed). */
static eng_member_t *eng_live_worker(strata_ctx_t *ctx, uint32_t w)
{
    eng_member_t *m = ctx->coord->by_rank[ctx->naggs + (int)w];
    return m && !m->bye && !m->dropped && !m->rejoining && m->peer.ep ? m
                                                                      : NULL;
}

/* A worker that finalizes closes its connection after its BYE, which may
 * still be on the way: losing it is no failure here (one lost without BYE
 * fails the job through its disconnect). Nor is an aggregator's under
 * protection: its shard is taken over, or the job fails naming it. */
static void eng_rg_send(strata_ctx_t *ctx, eng_member_t *m, eng_wbuf_t *msg)
{
    strata_status_t st = eng_send(&m->peer, msg, NULL);
    if (st != STRATA_OK &&
        !(st == STRATA_ERR_PEER &&
          (m->peer.rank >= ctx->naggs ||
           eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY) > 0))) {
        eng_fail(ctx, st, "regrouping: cannot send to %s: %s",
                 eng_member_name(m), strata_strerror(st));
    }
}

/* ---- 3. GO ---- */

static void eng_rg_evaluate(strata_ctx_t *ctx);

/* Every live worker is told its group and that group's speed rank: RANK
 * when the ranks changed, GO (to the frozen ones) after a regroup. */
static void eng_rg_tell(strata_ctx_t *ctx, eng_msg_type_t type)
{
    eng_regroup_t *rg = ctx->coord->rg;
    unsigned char buf[32];
    eng_wbuf_t msg;
    rg->rank_gen = eng_grouping_rank_generation(rg->grouping);
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

/* Every worker's group in worker order ('-' for one not training), cut
 * short with "..." when buf is full: who went where is what a reader of
 * the log (and the grouping test) needs, and clocks of different groups do
 * not line up to tell it. */
static void eng_rg_groups_text(strata_ctx_t *ctx, char *buf, size_t size)
{
    eng_regroup_t *rg = ctx->coord->rg;
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t w = 0; w < (uint32_t)ctx->nworkers; w++) {
        char one[16];
        if (eng_live_worker(ctx, w))
            snprintf(one, sizeof(one), "%s%u", w ? "," : "",
                     eng_members_current(rg->members, w)->group);
        else
            snprintf(one, sizeof(one), "%s-", w ? "," : "");
        size_t n = strlen(one);
        if (len + n + 4 > size) {
            snprintf(buf + len, size - len, "...");
            return;
        }
        memcpy(buf + len, one, n + 1);
        len += n;
    }
}

static void eng_rg_go(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    eng_rg_tell(ctx, ENG_MSG_GO);
    uint32_t k = eng_grouping_count(rg->grouping);
    char groups[256];
    eng_rg_groups_text(ctx, groups, sizeof(groups));
    util_info("regroup %u done: %u group%s, predicted %.2fx BSP's rate; "
              "workers' groups %s",
              rg->gen, k, k == 1 ? "" : "s",
              eng_grouping_rate(rg->grouping) /
                  eng_grouping_rate_bsp(rg->grouping),
              groups);
    rg->phase = ENG_RG_IDLE;
    eng_coord_rejoin_next(ctx); /* one that waited for the regroup */
    eng_rg_evaluate(ctx);
}

/* An aggregator in the job: not one lost, whose shard is (to be) taken
 * over: it takes no plan, and the regroup goes on without it. */
static bool eng_rg_agg_in(const strata_ctx_t *ctx, int a)
{
    const eng_member_t *m = ctx->coord->by_rank[a];
    return !m->taken && !m->rebuilding;
}

/* Aggregators in the job that have not said PLANNED yet. */
static uint32_t eng_rg_unplanned(const strata_ctx_t *ctx)
{
    uint32_t n = 0;
    for (int a = 0; a < ctx->naggs; a++)
        n += eng_rg_agg_in(ctx, a) && !ctx->coord->rg->planned[a];
    return n;
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
    rg->planned[m->peer.rank] = true;
    if (eng_rg_unplanned(ctx) == 0) {
        eng_rg_go(ctx);
        eng_coord_takeover_try(ctx); /* one that waited for the regroup */
    }
}

/* ---- 2. the plan ---- */

static void eng_rg_send_aggs(strata_ctx_t *ctx, eng_wbuf_t *msg)
{
    for (int a = 0; a < ctx->naggs; a++)
        if (eng_rg_agg_in(ctx, a))
            eng_rg_send(ctx, ctx->coord->by_rank[a], msg);
}

/* Plan the moves here and send them to every aggregator, as many to a
 * PLAN message as fit. */
static strata_status_t eng_rg_plan(strata_ctx_t *ctx, uint32_t *nmoves)
{
    eng_regroup_t *rg = ctx->coord->rg;
    strata_status_t st = eng_members_regroup(rg->members, rg->frozen_at,
                                             rg->target, rg->moves, nmoves);
    if (st != STRATA_OK)
        return st;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN);
    eng_put_u32(&msg, rg->gen);
    for (uint32_t i = 0; i < *nmoves; i++) {
        const eng_move_t *mv = &rg->moves[i];
        util_debug("regroup %u: worker %u from clock %" PRId64
                   " into group %u at its clock %" PRId64,
                   rg->gen, mv->worker, mv->start, mv->group, mv->group_clock);
        if (eng_wbuf_room(&msg) < 24) {
            eng_rg_send_aggs(ctx, &msg);
            eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN);
            eng_put_u32(&msg, rg->gen);
        }
        eng_put_u32(&msg, mv->worker);
        eng_put_i64(&msg, mv->start);
        eng_put_u32(&msg, mv->group);
        eng_put_i64(&msg, mv->group_clock);
    }
    eng_rg_send_aggs(ctx, &msg);
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
    memset(rg->planned, 0, sizeof(*rg->planned) * (size_t)ctx->naggs);
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_PLAN_END);
    eng_put_u32(&msg, rg->gen);
    eng_put_u32(&msg, nmoves);
    eng_rg_send_aggs(ctx, &msg);
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

/* ---- 1. evaluating, FREEZE ---- */

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

/* Between regroups: let the grouping revise the groups from the latest
 * times, and regroup if it changed them. */
static void eng_rg_evaluate(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    /* A rejoin's clock is agreed on the current segments, and so is a
     * lost shard's resume clock (the lost aggregator plans nothing). */
    if (rg->phase != ENG_RG_IDLE || ctx->coord->joining >= 0 ||
        ctx->coord->nrebuilding || eng_fatal(ctx))
        return;
    rg->eval_ns = util_now_ns();
    bool probing = eng_grouping_probing(rg->grouping), changed = false;
    strata_status_t st = eng_grouping_evaluate(rg->grouping, &changed);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "grouping the workers failed: %s",
                 strata_strerror(st));
        return;
    }
    if (!changed) { /* ranks may have changed: GDTopK's ratios */
        if (!probing &&
            eng_grouping_rank_generation(rg->grouping) != rg->rank_gen)
            eng_rg_tell(ctx, ENG_MSG_RANK);
        return;
    }
    uint32_t k = eng_grouping_count(rg->grouping);
    util_info("%s: regrouping into %u group%s",
              probing ? "probe done" : "speeds changed", k, k == 1 ? "" : "s");
    eng_rg_freeze(ctx);
}

static void eng_coord_on_steps(strata_ctx_t *ctx, eng_member_t *m,
                               eng_rbuf_t *r)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint64_t steps = eng_get_u64(r);
    double seconds = eng_get_f64(r);
    int w = m->peer.rank - ctx->naggs;
    if (!eng_rbuf_ok(r) || !rg || w < 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected STEPS from %s",
                 eng_member_name(m));
        return;
    }
    strata_status_t st =
        eng_grouping_measure(rg->grouping, (uint32_t)w, seconds, steps);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "the step time %s reported was refused",
                 eng_member_name(m));
        return;
    }
    util_debug("grouping: worker %d steps %.2f ms (%" PRIu64 " measured)", w,
               seconds * 1e3, steps);
    if (eng_grouping_probing(rg->grouping) ||
        util_now_ns() - rg->eval_ns >= ENG_RG_EVAL_NS)
        eng_rg_evaluate(ctx);
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
    eng_members_retire(rg->members, (uint32_t)w, clock);
}

/* A worker finalized (or was dropped): it no longer takes part. */
static void eng_coord_regroup_left(strata_ctx_t *ctx, eng_member_t *m)
{
    eng_regroup_t *rg = ctx->coord->rg;
    int w = m->peer.rank - ctx->naggs;
    if (!rg || w < 0)
        return;
    /* A dropped worker's clocks end at its boundary. */
    if (m->dropped && m->drop_at >= 0)
        eng_members_retire(rg->members, (uint32_t)w, m->drop_at);
    eng_grouping_drop(rg->grouping, (uint32_t)w);
    if (rg->phase == ENG_RG_FREEZING && rg->frozen_at[w] == ENG_RG_ASKED) {
        rg->frozen_at[w] = ENG_RG_NOT_ASKED;
        if (--rg->waiting == 0)
            eng_rg_frozen_all(ctx);
    } else if (rg->phase == ENG_RG_IDLE)
        eng_rg_evaluate(ctx);
}

/* A rejoin waits for a regroup under way to end (eng_rg_go). */
static bool eng_coord_regroup_holds(strata_ctx_t *ctx)
{
    eng_regroup_t *rg = ctx->coord->rg;
    return rg && rg->phase != ENG_RG_IDLE;
}

/* A lost shard's resume clocks, on the segments the taker has too. A
 * regroup under way ends first, without the lost aggregator's PLANNED
 * (STRATA_ERR_AGAIN until then: eng_coord_on_planned asks again). */
static strata_status_t
eng_coord_regroup_takeover(strata_ctx_t *ctx, int64_t from, int64_t *resume_out)
{
    eng_regroup_t *rg = ctx->coord->rg;
    if (rg->phase == ENG_RG_PLANNING && eng_rg_unplanned(ctx) == 0)
        eng_rg_go(ctx);
    if (rg->phase != ENG_RG_IDLE)
        return STRATA_ERR_AGAIN;
    eng_members_resume(rg->members, from, resume_out);
    return STRATA_OK;
}

/* A dropped worker's new process is back in the segment the aggregators
 * keep it in: its group is that segment's, and the grouping counts it
 * again from its first reported steps (none yet: no regroup until then).
 * It learns its group and that group's rank at once. */
static void eng_coord_regroup_rejoined(strata_ctx_t *ctx, eng_member_t *m)
{
    eng_regroup_t *rg = ctx->coord->rg;
    uint32_t w = (uint32_t)(m->peer.rank - ctx->naggs);
    if (!rg)
        return;
    uint32_t g = eng_members_current(rg->members, w)->group;
    strata_status_t st = eng_grouping_rejoin(rg->grouping, w, g);
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "the grouping cannot take %s back: %s",
                 eng_member_name(m), strata_strerror(st));
        return;
    }
    unsigned char buf[32];
    eng_wbuf_t msg;
    eng_wbuf_init(&msg, buf, sizeof(buf), ENG_MSG_RANK);
    eng_put_u32(&msg, g);
    eng_put_f64(&msg, eng_grouping_rank(rg->grouping, g));
    eng_rg_send(ctx, m, &msg);
    util_info("%s is back in group %u", eng_member_name(m), g);
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
    case ENG_MSG_STEPS:
        eng_coord_on_steps(ctx, m, r);
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
    .holds_rejoin = eng_coord_regroup_holds,
    .rejoined = eng_coord_regroup_rejoined,
    .takeover = eng_coord_regroup_takeover,
};
