/*
 * The coordinator's part of shard protection (agg_protect.c has the
 * aggregators'): which clock the shards are protected at, the rebuild of a
 * lost aggregator's shard, and its takeover by a survivor (agg_takeover.c).
 *
 * Schedule. The coordinator names the clock to protect (the first one is
 * STRATA_PROTECT_EVERY, known to all). Every aggregator says PROTECTED of
 * it: its part done (its pieces all sent, the parity it holds sealed), with
 * the CRC32C of its snapshot and how far it got (the furthest of its
 * partitions' least clocks: a partition past the named clock is copied
 * where it is, agg_protect.c). Once every aggregator did its part the
 * clock is agreed; a miss (said by no aggregator since then, still read)
 * abandons it. Either way the coordinator names the next clock (PROTECT),
 * past every clock the aggregators reached, and each aggregator keeps its
 * data and parity of the agreed clock until the next one is agreed: the
 * survivors always hold the same clock's fragments.
 *
 * Rebuild. An aggregator lost once a clock P is agreed: every survivor
 * sends its fragments of the lost shard's stripes at P to the one that
 * takes the shard over (the survivor holding the fewest shards, then the
 * lowest rank, of those not taking another lost shard over: each reserved
 * room for one more at the commit; REBUILD, FRAG relayed here), which
 * decodes the shard and checks it against the CRC32C the lost aggregator
 * had said of P (REBUILT). Up to m = STRATA_PROTECT_PARITY aggregators
 * lost before the takeover are rebuilt side by side, each by a survivor of
 * its own, from the fragments the others left (a rebuilder lost is
 * replaced); one more fails the job naming them all. A lost connection a
 * rank reports once a clock is agreed waits a quarter of
 * STRATA_TIMEOUT_MS for the coordinator to see whether an aggregator was
 * lost (a worker may see it first).
 *
 * Takeover. Every worker still in the job says LOST of each lost
 * aggregator: the first clock it cannot push without it (its partitions
 * there are stuck). Once every lost shard is rebuilt and every worker said
 * so of each, every rank in the job is told TAKEOVER (lost, taker, P, R)
 * of each, its resume clock R the latest of P and those clocks of that
 * aggregator: the taker serves the rebuilt shard as the model of clock R
 * and applies pushes from R on; clocks P..R-1 of that shard are lost, no
 * other shard is rolled back. Rebuilds and agreement are bounded by half
 * of STRATA_TIMEOUT_MS from the latest loss. Under gssp each worker resumes at
 * a clock of its own (R or later: its group's members at one clock of the
 * group, eng_members_resume, which the taker computes alike from R); no regroup
 * starts while a loss is mended, and one under way ends first, without
 * the lost aggregators (coord_regroup.c). Under esync and fedavg a round
 * is the clock (the worker's part: rounds.c). When a rank failed for
 * another reason meanwhile, the job fails once the shards are rebuilt,
 * saying why. (Aggregators that only sum protect nothing.)
 *
 * Again. A spare (no shard of its own) that takes a shard over holds that
 * shard's place in the stripes from then on (agg_protect.c), so when
 * every taker was a spare, protection goes on: the next clock is named
 * past every resume clock, and once it is agreed a later loss is rebuilt
 * and taken over as the first was (by another spare, or a survivor with
 * room). The spare that took a shard is not: its two places would be two
 * erasures (failed, named). After a takeover by an aggregator that holds
 * a shard, nothing is protected any more (the geometry is one shard per
 * aggregator): a later loss fails the job.
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
}

/* To every aggregator still in the job: one that left or is lost has no
 * part in the protection any more (its disconnect says why). */
static void eng_coord_protect_tell(strata_ctx_t *ctx, eng_wbuf_t *w,
                                   const char *what)
{
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *m = ctx->coord->by_rank[a];
        if (m->peer.ep && m->peer.up && !m->bye && !m->rebuilding &&
            !m->taken && eng_send(&m->peer, w, NULL) != STRATA_OK)
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
    if (clock != c->prot_next || c->nrebuilding || c->prot_over)
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
        if (c->by_rank[a]->prot_said != clock && !c->by_rank[a]->taken)
            return;
    for (int a = 0; a < ctx->naggs; a++)
        c->by_rank[a]->agreed_crc = c->by_rank[a]->prot_crc;
    if (c->protected_clock == 0 && c->ntaken)
        util_info("every shard protected again at clock %" PRId64
                  " after the takeover by a spare",
                  clock);
    else if (c->protected_clock == 0)
        util_info("every shard protected at clock %" PRId64
                  " (then at debug level)",
                  clock);
    else
        util_debug("every shard protected at clock %" PRId64, clock);
    c->protected_clock = clock;
    eng_metrics_protected(ctx, clock);
    eng_coord_protect_name(ctx, c->prot_reached);
}

/* The aggregators lost and being rebuilt (taken: false) or taken over
 * (true), as "<noun> 1", "<noun>s 1 and 3" or "<noun>s 1, 2 and 3". */
static const char *eng_coord_lost_list(strata_ctx_t *ctx, bool taken,
                                       const char *noun, char *buf, size_t size)
{
    int n = 0, total = 0;
    for (int a = 0; a < ctx->naggs; a++) {
        const eng_member_t *o = ctx->coord->by_rank[a];
        total += taken ? o->taken : o->rebuilding;
    }
    snprintf(buf, size, "%s%s ", noun, total > 1 ? "s" : "");
    for (int a = 0; a < ctx->naggs; a++) {
        const eng_member_t *o = ctx->coord->by_rank[a];
        if (!(taken ? o->taken : o->rebuilding))
            continue;
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%d",
                 n == 0           ? ""
                 : n + 1 == total ? " and "
                                  : ", ",
                 a);
        n++;
    }
    return buf;
}

/* The survivor that rebuilds lost aggregator l's shard and takes it over
 * (it never travels again): of those in the job and not lost, the one
 * holding the fewest shards, then the lowest rank; one that takes another
 * shard over already has no room for this one (each reserved room for
 * one more at the commit). REBUILD to every survivor; false when no
 * survivor can take it. */
static bool eng_coord_rebuild_assign(strata_ctx_t *ctx, eng_member_t *l)
{
    eng_coord_t *c = ctx->coord;
    bool alive[AGG_EC_MAX_FRAGMENTS] = {false};
    uint32_t held[AGG_EC_MAX_FRAGMENTS];
    for (int a = 0; a < ctx->naggs && a < AGG_EC_MAX_FRAGMENTS; a++) {
        const eng_member_t *o = c->by_rank[a];
        alive[a] =
            o->peer.up && !o->bye && !o->rebuilding && !o->taken && !o->took;
        /* protection: one shard each until a takeover, none on a spare */
        held[a] = !ctx->roster->spare[a];
    }
    for (int a = 0; a < ctx->naggs && a < AGG_EC_MAX_FRAGMENTS; a++) {
        const eng_member_t *o = c->by_rank[a];
        if (o->rebuilding && o != l && o->rebuild_by >= 0)
            alive[o->rebuild_by] = false; /* it takes o's shard */
    }
    int by = ctx->naggs <= AGG_EC_MAX_FRAGMENTS
                 ? eng_protect_taker(held, alive, (uint32_t)ctx->naggs)
                 : -1;
    l->rebuild_by = by;
    l->rebuilt = false;
    if (by < 0)
        return false;
    util_warn("%s; its shard is rebuilt at clock %" PRId64
              " by aggregator rank %d, which takes it over",
              l->lost_why, c->protected_clock, by);
    unsigned char buf[64];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_REBUILD);
    eng_put_u32(&w, (uint32_t)l->peer.rank);
    eng_put_i64(&w, c->protected_clock);
    eng_put_u32(&w, (uint32_t)by);
    eng_put_u32(&w, l->agreed_crc);
    eng_coord_protect_tell(ctx, &w, "REBUILD");
    return true;
}

bool eng_coord_protect_lost(strata_ctx_t *ctx, eng_member_t *m, const char *msg)
{
    eng_coord_t *c = ctx->coord;
    bool agg = m->peer.rank < ctx->naggs;
    char list[128];
    if (c->nrebuilding && !agg) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "worker %s %s while the shard%s of aggregator %s %s being "
                 "rebuilt: the job cannot go on",
                 eng_member_name(m), msg, c->nrebuilding > 1 ? "s" : "",
                 eng_coord_lost_list(ctx, false, "rank", list, sizeof(list)),
                 c->nrebuilding > 1 ? "were" : "was");
        return true;
    }
    if (!agg || c->protected_clock == 0 || m->rebuilding || m->taken)
        return false;
    if (c->prot_over) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "aggregator %s %s; the shards are no longer protected since "
                 "%s %s taken over: the job cannot go on",
                 eng_member_name(m), msg,
                 eng_coord_lost_list(ctx, true, "shard", list, sizeof(list)),
                 c->ntaken > 1 ? "were" : "was");
        return true;
    }
    for (int a = 0; m->took && a < ctx->naggs; a++) {
        const eng_member_t *t = c->by_rank[a];
        if (!t->taken || t->rebuild_by != m->peer.rank)
            continue;
        eng_fail(ctx, STRATA_ERR_PEER,
                 "aggregator %s %s; the spare held shard %d's place in the "
                 "protection beside its own since it took that shard over, "
                 "and rebuilding two places of one aggregator is not built: "
                 "the job cannot go on",
                 eng_member_name(m), msg, a);
        return true;
    }
    m->rebuilding = true;
    snprintf(m->lost_why, sizeof(m->lost_why), "aggregator %s %s",
             eng_member_name(m), msg);
    int parity = (int)eng_config_int(ctx->cfg, ENG_CFG_PROTECT_PARITY);
    uint64_t now = util_now_ns();
    if (c->nrebuilding++ == 0)
        c->rebuild_start_ns = now;
    eng_metrics_stamp(&ctx->cnt.tk_loss_ns); /* the first loss's */
    c->rebuild_deadline_ns = now + (uint64_t)ctx->timeout_ms * 500000u;
    c->held_until_ns = 0; /* the rebuilds' end decides */
    if (c->nrebuilding > parity) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; aggregator %s lost before their shards were "
                 "taken over: %d parity fragments (STRATA_PROTECT_PARITY) "
                 "rebuild at most %d: the job cannot go on",
                 m->lost_why,
                 eng_coord_lost_list(ctx, false, "rank", list, sizeof(list)),
                 parity, parity);
        return true;
    }
    /* A shard whose rebuilder is lost goes to another survivor. */
    eng_member_t *homeless = NULL;
    m->rebuild_by = -1;
    for (int a = 0; a < ctx->naggs && !homeless; a++) {
        eng_member_t *o = c->by_rank[a];
        if (o->rebuilding && o != m && o->rebuild_by == m->peer.rank &&
            !eng_coord_rebuild_assign(ctx, o))
            homeless = o;
    }
    if (!homeless && !eng_coord_rebuild_assign(ctx, m))
        homeless = m;
    if (homeless)
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; aggregator %s lost at once, and no survivor is "
                 "left to take shard %d over (each takes one more shard at "
                 "most): the job cannot go on",
                 m->lost_why,
                 eng_coord_lost_list(ctx, false, "rank", list, sizeof(list)),
                 homeless->peer.rank);
    return true;
}

/* Whether every aggregator worker m said LOST of was taken over: what it
 * saw of those losses the takeovers mended. */
static bool eng_coord_lost_mended(strata_ctx_t *ctx, const eng_member_t *m)
{
    if (!m->lost_first)
        return false;
    for (int a = 0; a < ctx->naggs; a++)
        if (m->lost_first[a] >= 0 && !ctx->coord->by_rank[a]->taken)
            return false;
    return true;
}

bool eng_coord_protect_hold(strata_ctx_t *ctx, eng_member_t *m,
                            strata_status_t st, const char *reason)
{
    eng_coord_t *c = ctx->coord;
    if (eng_coord_lost_mended(ctx, m))
        return true;
    if (!c->nrebuilding &&
        (c->protected_clock == 0 || c->prot_over || st != STRATA_ERR_PEER))
        return false;
    /* A worker that said LOST waits for the takeover; any other failure is
     * one a takeover does not mend: it ends the job once the rebuild did. */
    if (!m->lost_first && !c->unmended[0])
        snprintf(c->unmended, sizeof(c->unmended), "%s: %s", eng_member_name(m),
                 reason);
    if (c->nrebuilding) {
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
    if (ctx->coord->prot_over)
        return; /* nothing is protected any more: its FAILED decides */
    if (!eng_rbuf_ok(r) || m->peer.rank < ctx->naggs ||
        agg >= (uint32_t)ctx->naggs || first < 0 ||
        (m->lost_first && m->lost_first[agg] >= 0)) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed or repeated LOST from %s",
                 eng_member_name(m));
        return;
    }
    if (!m->lost_first) {
        m->lost_first = util_malloc((size_t)ctx->naggs * sizeof(int64_t));
        if (!m->lost_first) {
            eng_fail(ctx, STRATA_ERR_NOMEM, "out of memory for the LOST of %s",
                     eng_member_name(m));
            return;
        }
        for (int a = 0; a < ctx->naggs; a++)
            m->lost_first[a] = -1;
    }
    m->lost_first[agg] = first;
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
    eng_member_t *l =
        eng_rbuf_ok(r) && lost < (uint32_t)ctx->naggs ? c->by_rank[lost] : NULL;
    /* A survivor that cannot send its fragments says so too. */
    if (!l || m->peer.rank >= ctx->naggs || !l->rebuilding ||
        (ok && l->rebuild_by != m->peer.rank) || clock != c->protected_clock) {
        eng_fail(ctx, STRATA_ERR_PROTO, "unexpected REBUILT from %s",
                 eng_member_name(m));
        return;
    }
    double ms = (double)(util_now_ns() - c->rebuild_start_ns) / 1e6;
    if (!ok) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; its shard cannot be rebuilt at clock %" PRId64
                 ": %s (%s)",
                 l->lost_why, clock, why, eng_member_name(m));
        return;
    }
    util_info("shard %u rebuilt at clock %" PRId64 " by aggregator rank %d "
              "in %.1f ms: %" PRIu64 " bytes, its CRC32C matches",
              lost, clock, m->peer.rank, ms, bytes);
    l->rebuilt = true;
    eng_metrics_stamp(&ctx->cnt.tk_rebuilt_ns);
    eng_coord_takeover_try(ctx);
}

/* TAKEOVER of lost aggregator l's shard by its rebuilder to every rank in
 * the job: resumed at the latest of the protected clock and the first
 * clock every worker cannot push without l (each worker at a clock of its
 * own under gssp). False when the job failed instead. */
static bool eng_coord_takeover(strata_ctx_t *ctx, eng_member_t *l)
{
    eng_coord_t *c = ctx->coord;
    int64_t resume = c->protected_clock;
    for (int r = ctx->naggs; r < ctx->size; r++) {
        const eng_member_t *m = c->by_rank[r];
        if (m && !m->bye && !m->dropped && m->lost_first[l->peer.rank] > resume)
            resume = m->lost_first[l->peer.rank];
    }
    int64_t *at = util_calloc((size_t)ctx->nworkers, sizeof(*at)), lo, hi;
    if (!at) {
        eng_fail(ctx, STRATA_ERR_NOMEM, "%s: out of memory taking it over",
                 l->lost_why);
        return false;
    }
    if (!eng_coord_resume_clocks(ctx, resume, at, &lo, &hi)) {
        util_free(at); /* a regroup ends first: asked again then */
        return false;
    }
    /* Protection, if it goes on, is named past every resume clock. */
    int64_t past = hi > resume ? hi : resume;
    c->prot_reached = past > c->prot_reached ? past : c->prot_reached;
    unsigned char buf[32];
    eng_wbuf_t w;
    for (int r = 0; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (!m || m->rebuilding || m->taken || !m->peer.ep || m->bye ||
            m->dropped)
            continue;
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_TAKEOVER);
        eng_put_u32(&w, (uint32_t)l->peer.rank);
        eng_put_u32(&w, (uint32_t)l->rebuild_by);
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
    /* the metrics name the first takeover, and count the others */
    eng_metrics_takeover(ctx, (uint32_t)l->peer.rank, (uint32_t)l->rebuild_by,
                         c->protected_clock, resume);
    util_warn("%s; shard %d taken over by aggregator rank %d, resumed at "
              "clock %" PRId64 " (protected at %" PRId64 ": clocks %" PRId64
              "..%" PRId64 " of it lost)%s, %.1f ms after the loss",
              l->lost_why, l->peer.rank, l->rebuild_by, resume,
              c->protected_clock, c->protected_clock, resume - 1, each,
              (double)(util_now_ns() - c->rebuild_start_ns) / 1e6);
    /* strata-run: the job goes on without it */
    eng_launch_tell(&ctx->launch, "dropped %d", l->peer.rank);
    return true;
}

/* The shards of the lost aggregators, rebuilt, go to their rebuilders
 * together once every worker still in the job said how far it can push
 * without each (LOST): TAKEOVER of each to every rank in the job (until
 * then a survivor keeps its fragments for a rebuild still to come). A
 * failure a takeover does not mend ends the job instead. */
void eng_coord_takeover_try(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    eng_member_t *first = NULL;
    if (!c->nrebuilding || eng_fatal(ctx))
        return;
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *l = c->by_rank[a];
        if (l->rebuilding && !l->rebuilt)
            return;
        first = l->rebuilding && !first ? l : first;
    }
    if (c->unmended[0]) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "%s; its shard was rebuilt at clock %" PRId64
                 " by aggregator rank %d, but %s: the job cannot go on",
                 first->lost_why, c->protected_clock, first->rebuild_by,
                 c->unmended);
        return;
    }
    for (int r = ctx->naggs; r < ctx->size; r++) {
        const eng_member_t *m = c->by_rank[r];
        if (!m || m->bye || m->dropped)
            continue;
        for (int a = 0; a < ctx->naggs; a++)
            if (c->by_rank[a]->rebuilding &&
                (!m->lost_first || m->lost_first[a] < 0))
                return; /* the rebuild's deadline bounds the wait */
    }
    /* Taken by spares, every place is held again (agg_protect.c). */
    const bool *spare = eng_spare_shards(ctx);
    bool again = spare != NULL;
    for (int a = 0; a < ctx->naggs; a++) {
        const eng_member_t *l = c->by_rank[a];
        if (l->rebuilding)
            again = again && spare[l->rebuild_by] && !spare[a];
    }
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *l = c->by_rank[a];
        if (!l->rebuilding)
            continue;
        if (!eng_coord_takeover(ctx, l))
            return;
        l->rebuilding = false;
        l->taken = true;
        c->by_rank[l->rebuild_by]->took = true;
        c->ntaken++;
        c->nbye++; /* the lost aggregator's part in the job is over */
    }
    c->nrebuilding = 0;
    c->held_until_ns = 0;
    c->prot_over = !again;
    if (again) { /* from the next clock named past every resume clock */
        c->protected_clock = 0;
        util_info("shard protection goes on from the next clock named: a "
                  "shard taken over by a spare keeps its place");
        eng_coord_protect_name(ctx, c->prot_reached);
    }
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
    if (!c->nrebuilding || now < c->rebuild_deadline_ns)
        return;
    const eng_member_t *pending = NULL, *silent = NULL;
    for (int a = 0; a < ctx->naggs && !pending; a++) {
        const eng_member_t *l = c->by_rank[a];
        pending = l->rebuilding && !l->rebuilt ? l : NULL;
    }
    for (int a = 0; a < ctx->naggs && !pending && !silent; a++) {
        const eng_member_t *l = c->by_rank[a];
        for (int r = ctx->naggs; r < ctx->size && l->rebuilding && !silent;
             r++) {
            const eng_member_t *m = c->by_rank[r];
            silent = m && !m->bye && !m->dropped &&
                             (!m->lost_first || m->lost_first[a] < 0)
                         ? m
                         : NULL;
        }
        if (silent) {
            eng_fail(ctx, STRATA_ERR_TIMEOUT,
                     "%s; its shard was rebuilt at clock %" PRId64
                     " by aggregator rank %d, but worker rank %d did not say "
                     "how far it got without it within %d ms (half of "
                     "STRATA_TIMEOUT_MS)",
                     l->lost_why, c->protected_clock, l->rebuild_by,
                     silent->peer.rank, ctx->timeout_ms / 2);
            return;
        }
    }
    eng_fail(ctx, STRATA_ERR_TIMEOUT,
             "%s; the rebuild of its shard by aggregator rank %d did not "
             "complete within %d ms (half of STRATA_TIMEOUT_MS)",
             pending->lost_why, pending->rebuild_by, ctx->timeout_ms / 2);
}
