/*
 * The coordinator's part of shard protection (agg_protect.c has the
 * aggregators'): which clock the shards are protected at, the rebuild of a
 * lost aggregator's shard, and its takeover by a survivor (agg_takeover.c).
 *
 * Schedule. The coordinator names the clock to protect (the first one is
 * STRATA_PROTECT_EVERY, known to all). Every aggregator says PROTECTED of
 * it: its part done (its pieces all sent, the parity it holds sealed), with
 * the CRC32C of its snapshot and how far it got; or the clock missed (a
 * partition moved past it first). Once every aggregator did its part the
 * clock is agreed; a miss abandons it. Either way the coordinator names
 * the next clock (PROTECT), past every clock the aggregators reached, and
 * each aggregator keeps its data and parity of the agreed clock until the
 * next one is agreed: the survivors always hold the same clock's
 * fragments.
 *
 * Rebuild. An aggregator lost once a clock P is agreed: every survivor
 * sends its fragments of the lost shard's stripes at P to the one that
 * takes the shard over (the survivor holding the fewest shards, then the
 * lowest rank; REBUILD, FRAG relayed here), which decodes the shard and
 * checks it against the CRC32C the lost aggregator had said of P
 * (REBUILT). A lost connection a rank reports once a clock is agreed
 * waits a quarter of STRATA_TIMEOUT_MS for the coordinator to see whether
 * an aggregator was lost (a worker may see it first).
 *
 * Takeover. Every worker still in the job says LOST of the aggregator:
 * the first clock it cannot push without it (its partitions there are
 * stuck). Once the shard is rebuilt and every worker said so, the resume
 * clock R is the latest of P and those clocks, and every rank in the job
 * is told TAKEOVER (lost, taker, P, R): the taker serves the rebuilt shard
 * as the model of clock R and applies pushes from R on; clocks P..R-1 of
 * that shard are lost, no other shard is rolled back. Rebuild and
 * agreement are bounded by half of STRATA_TIMEOUT_MS from the loss. One
 * loss is survived: after a takeover nothing is protected any more (the
 * geometry is one shard per aggregator). Under gssp each worker resumes
 * at a clock of its own (R or later: its group's members at one clock of
 * the group, eng_members_resume, which the taker computes alike from R);
 * no regroup starts while a loss is mended, and one under way ends first,
 * without the lost aggregator (coord_regroup.c).
 * bsp, ssp, asp and gssp only: under esync, fedavg or
 * STRATA_OPTIMIZER=sum, or when a rank failed for another reason
 * meanwhile, the job fails once the shard is rebuilt, saying why.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/coord.h"
#include "engine/protect.h"
#include "util/alloc.h"
#include "util/clock.h"

void eng_coord_protect_init(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    c->prot_every = eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY);
    c->prot_next = c->prot_every;
    c->rebuild_lost = -1;
    c->taken = -1;
}

/* To every aggregator still in the job: one that left or is lost has no
 * part in the protection any more (its disconnect says why). */
static void eng_coord_protect_tell(strata_ctx_t *ctx, eng_wbuf_t *w,
                                   const char *what)
{
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *m = ctx->coord->by_rank[a];
        if (m->peer.ep && m->peer.up && !m->bye &&
            eng_send(&m->peer, w, NULL) != STRATA_OK)
            util_debug("cannot say %s to %s", what, eng_member_name(m));
    }
}

/* PROTECT: the agreed clock, and the next one to protect. */
static void eng_coord_protect_name(strata_ctx_t *ctx, int64_t reached)
{
    eng_coord_t *c = ctx->coord;
    int64_t next = c->prot_next + c->prot_every;
    int64_t past = (reached / c->prot_every + 1) * c->prot_every;
    c->prot_next = next > past ? next : past;
    c->prot_reached = 0;
    for (int a = 0; a < ctx->naggs; a++)
        c->by_rank[a]->prot_said = 0;
    unsigned char buf[32];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_PROTECT);
    eng_put_i64(&w, c->protected_clock);
    eng_put_i64(&w, c->prot_next);
    eng_coord_protect_tell(ctx, &w, "PROTECT");
}

void eng_coord_on_protected(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    int64_t clock = eng_get_i64(r);
    bool missed = eng_get_u8(r) != 0;
    uint32_t crc = eng_get_u32(r);
    int64_t reached = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || m->peer.rank >= ctx->naggs || clock < 1 ||
        c->prot_every == 0) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed PROTECTED from %s",
                 eng_member_name(m));
        return;
    }
    if (clock != c->prot_next || c->rebuild_lost >= 0 || c->taken >= 0)
        return; /* an abandoned clock's late word, or protection over */
    c->prot_reached = reached > c->prot_reached ? reached : c->prot_reached;
    if (missed) {
        util_debug("%s missed protected clock %" PRId64 " (it reached %" PRId64
                   ")",
                   eng_member_name(m), clock, reached);
        eng_coord_protect_name(ctx, c->prot_reached);
        return;
    }
    m->prot_said = clock;
    m->prot_crc = crc;
    for (int a = 0; a < ctx->naggs; a++)
        if (c->by_rank[a]->prot_said != clock)
            return;
    for (int a = 0; a < ctx->naggs; a++)
        c->by_rank[a]->agreed_crc = c->by_rank[a]->prot_crc;
    if (c->protected_clock == 0)
        util_info("every shard protected at clock %" PRId64
                  " (then at debug level)",
                  clock);
    else
        util_debug("every shard protected at clock %" PRId64, clock);
    c->protected_clock = clock;
    eng_metrics_protected(ctx, clock);
    eng_coord_protect_name(ctx, c->prot_reached);
}

bool eng_coord_protect_lost(strata_ctx_t *ctx, eng_member_t *m, const char *msg)
{
    eng_coord_t *c = ctx->coord;
    if (c->rebuild_lost >= 0) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s %s %s while the shard of aggregator rank %d was being "
                 "rebuilt: the job cannot go on",
                 m->peer.rank < ctx->naggs ? "aggregator" : "worker",
                 eng_member_name(m), msg, c->rebuild_lost);
        return true;
    }
    if (m->peer.rank >= ctx->naggs || c->protected_clock == 0)
        return false;
    if (c->taken >= 0) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "aggregator %s %s; the shards are no longer protected since "
                 "shard %d was taken over (one loss is survived): the job "
                 "cannot go on",
                 eng_member_name(m), msg, c->taken);
        return true;
    }
    /* The rebuilder takes the shard over: it never travels again. */
    bool alive[AGG_EC_MAX_FRAGMENTS] = {false};
    uint32_t held[AGG_EC_MAX_FRAGMENTS];
    for (int a = 0; a < ctx->naggs && a < AGG_EC_MAX_FRAGMENTS; a++) {
        const eng_member_t *o = c->by_rank[a];
        alive[a] = a != m->peer.rank && o->peer.up && !o->bye;
        /* protection: one shard each until a takeover, none on a spare */
        held[a] = !ctx->roster->spare[a];
    }
    int by = ctx->naggs <= AGG_EC_MAX_FRAGMENTS
                 ? eng_protect_taker(held, alive, (uint32_t)ctx->naggs)
                 : -1;
    if (by < 0)
        return false;
    c->held_until_ns = 0; /* the rebuild's end decides */
    c->rebuild_lost = m->peer.rank;
    c->rebuild_by = by;
    c->rebuilt = false;
    c->rebuild_start_ns = util_now_ns();
    eng_metrics_stamp(&ctx->cnt.tk_loss_ns);
    c->rebuild_deadline_ns =
        c->rebuild_start_ns + (uint64_t)ctx->timeout_ms * 500000u;
    snprintf(c->rebuild_why, sizeof(c->rebuild_why), "aggregator %s %s",
             eng_member_name(m), msg);
    util_warn("%s; its shard is rebuilt at clock %" PRId64
              " by aggregator rank %d, which takes it over",
              c->rebuild_why, c->protected_clock, by);
    unsigned char buf[64];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_REBUILD);
    eng_put_u32(&w, (uint32_t)m->peer.rank);
    eng_put_i64(&w, c->protected_clock);
    eng_put_u32(&w, (uint32_t)by);
    eng_put_u32(&w, m->agreed_crc);
    eng_coord_protect_tell(ctx, &w, "REBUILD");
    return true;
}

bool eng_coord_protect_hold(strata_ctx_t *ctx, eng_member_t *m,
                            strata_status_t st, const char *reason)
{
    eng_coord_t *c = ctx->coord;
    if (m->said_lost && (int)m->lost_agg == c->taken)
        return true; /* what it saw of the loss the takeover mended */
    if (c->rebuild_lost < 0 &&
        (c->protected_clock == 0 || c->taken >= 0 || st != STRATA_ERR_PEER))
        return false;
    /* A worker that said LOST waits for the takeover; any other failure is
     * one a takeover does not mend: it ends the job once the rebuild did. */
    if (!m->said_lost && !c->unmended[0])
        snprintf(c->unmended, sizeof(c->unmended), "%s: %s", eng_member_name(m),
                 reason);
    if (c->rebuild_lost >= 0) {
        eng_coord_takeover_try(ctx);
        return true;
    }
    if (!c->held_until_ns) {
        c->held_until_ns = util_now_ns() + (uint64_t)ctx->timeout_ms * 250000u;
        snprintf(c->held_why, sizeof(c->held_why), "%s: %s", eng_member_name(m),
                 reason);
    }
    return true;
}

/* LOST: a worker's link to an aggregator broke, and the first clock it
 * cannot push without it. */
void eng_coord_on_lost(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    uint32_t agg = eng_get_u32(r);
    int64_t first = eng_get_i64(r);
    if (ctx->coord->taken >= 0)
        return; /* nothing is protected any more: its FAILED decides */
    if (!eng_rbuf_ok(r) || m->peer.rank < ctx->naggs ||
        agg >= (uint32_t)ctx->naggs || first < 0 || m->said_lost) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed or repeated LOST from %s",
                 eng_member_name(m));
        return;
    }
    m->said_lost = true;
    m->lost_agg = agg;
    m->lost_first = first;
    util_debug("%s lost aggregator rank %u: it cannot push clock %" PRId64
               " without it",
               eng_member_name(m), agg, first);
    eng_coord_takeover_try(ctx);
}

void eng_coord_on_rebuilt(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    uint32_t lost = eng_get_u32(r);
    int64_t clock = eng_get_i64(r);
    uint8_t ok = eng_get_u8(r);
    uint64_t bytes = eng_get_u64(r);
    char why[TP_MSG_MAX];
    eng_get_str(r, why, sizeof(why));
    if (!eng_rbuf_ok(r) || m->peer.rank >= ctx->naggs ||
        (int64_t)lost != c->rebuild_lost || clock != c->protected_clock) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected REBUILT from %s",
                 eng_member_name(m));
        return;
    }
    double ms = (double)(util_now_ns() - c->rebuild_start_ns) / 1e6;
    if (!ok) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; its shard cannot be rebuilt at clock %" PRId64
                 ": %s (%s)",
                 c->rebuild_why, clock, why, eng_member_name(m));
        return;
    }
    util_info("shard %u rebuilt at clock %" PRId64 " by aggregator rank %d "
              "in %.1f ms: %" PRIu64 " bytes, its CRC32C matches",
              lost, clock, m->peer.rank, ms, bytes);
    c->rebuilt = true;
    eng_metrics_stamp(&ctx->cnt.tk_rebuilt_ns);
    eng_coord_takeover_try(ctx);
}

/* The shard of the lost aggregator, rebuilt, goes to its rebuilder once
 * every worker still in the job said how far it can push without it
 * (LOST): TAKEOVER to every rank in the job. A failure a takeover does
 * not mend, or a policy it is not built for, ends the job instead. */
void eng_coord_takeover_try(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (c->rebuild_lost < 0 || !c->rebuilt || eng_fatal(ctx))
        return;
    if (c->unmended[0] || !ctx->policy->ops->takeover) {
        char why[sizeof(c->unmended) + 64];
        if (c->unmended[0])
            snprintf(why, sizeof(why), "%s", c->unmended);
        else
            snprintf(why, sizeof(why),
                     "taking a shard over is built for bsp, ssp, asp and "
                     "gssp, not for STRATA_POLICY=%s",
                     ctx->policy->ops->name);
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; its shard was rebuilt at clock %" PRId64
                 " by aggregator rank %d, but %s: the job cannot go on",
                 c->rebuild_why, c->protected_clock, c->rebuild_by, why);
        return;
    }
    int64_t resume = c->protected_clock;
    for (int r = ctx->naggs; r < ctx->size; r++) {
        const eng_member_t *m = c->by_rank[r];
        if (!m || m->bye || m->dropped)
            continue;
        if (!m->said_lost || m->lost_agg != (uint32_t)c->rebuild_lost)
            return; /* the rebuild's deadline bounds the wait */
        resume = m->lost_first > resume ? m->lost_first : resume;
    }
    int lost = c->rebuild_lost;
    int64_t *at = util_calloc((size_t)ctx->nworkers, sizeof(*at)), lo, hi;
    if (!at) {
        eng_fail(ctx, STRATA_ERR_NOMEM, "%s: out of memory taking it over",
                 c->rebuild_why);
        return;
    }
    if (!eng_coord_resume_clocks(ctx, resume, at, &lo, &hi)) {
        util_free(at); /* a regroup ends first: asked again then */
        return;
    }
    unsigned char buf[32];
    eng_wbuf_t w;
    for (int r = 0; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (r == lost || !m || !m->peer.ep || m->bye || m->dropped)
            continue;
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_TAKEOVER);
        eng_put_u32(&w, (uint32_t)lost);
        eng_put_u32(&w, (uint32_t)c->rebuild_by);
        eng_put_i64(&w, c->protected_clock);
        eng_put_i64(&w, r < ctx->naggs ? resume : at[r - ctx->naggs]);
        if (eng_send(&m->peer, &w, NULL) != STRATA_OK)
            util_debug("cannot say TAKEOVER to %s", eng_member_name(m));
    }
    util_free(at);
    char each[96] = "";
    if (lo != resume || hi != resume)
        snprintf(each, sizeof(each),
                 " (its groups at their own clocks: the workers' from %" PRId64
                 " to %" PRId64 ")",
                 lo, hi);
    eng_metrics_takeover(ctx, (uint32_t)lost, (uint32_t)c->rebuild_by,
                         c->protected_clock, resume);
    util_warn("%s; shard %d taken over by aggregator rank %d, resumed at "
              "clock %" PRId64 " (protected at %" PRId64 ": clocks %" PRId64
              "..%" PRId64 " of it lost)%s, %.1f ms after the loss",
              c->rebuild_why, lost, c->rebuild_by, resume, c->protected_clock,
              c->protected_clock, resume - 1, each,
              (double)(util_now_ns() - c->rebuild_start_ns) / 1e6);
    /* strata-run: the job goes on without it */
    eng_launch_tell(&ctx->launch, "dropped %d", lost);
    c->taken = lost;
    c->rebuild_lost = -1;
    c->held_until_ns = 0;
    c->nbye++; /* the lost aggregator's part in the job is over */
}

void eng_coord_protect_check(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    uint64_t now = util_now_ns();
    if (eng_fatal(ctx))
        return;
    if (c->held_until_ns && now >= c->held_until_ns) {
        eng_fail(ctx, STRATA_ERR_PEER, "%s", c->held_why);
        return;
    }
    if (c->rebuild_lost < 0 || now < c->rebuild_deadline_ns)
        return;
    const eng_member_t *silent = NULL;
    for (int r = ctx->naggs; r < ctx->size && c->rebuilt && !silent; r++) {
        const eng_member_t *m = c->by_rank[r];
        silent = m && !m->bye && !m->dropped && !m->said_lost ? m : NULL;
    }
    if (silent) {
        eng_fail(ctx, STRATA_ERR_TIMEOUT,
                 "%s; its shard was rebuilt at clock %" PRId64
                 " by aggregator rank %d, but worker rank %d did not say how "
                 "far it got without it within %d ms (half of "
                 "STRATA_TIMEOUT_MS)",
                 c->rebuild_why, c->protected_clock, c->rebuild_by,
                 silent->peer.rank, ctx->timeout_ms / 2);
        return;
    }
    eng_fail(ctx, STRATA_ERR_TIMEOUT,
             "%s; the rebuild of its shard by aggregator rank %d did not "
             "complete within %d ms (half of STRATA_TIMEOUT_MS)",
             c->rebuild_why, c->rebuild_by, ctx->timeout_ms / 2);
}
