/* Liveness: beats, who is watched, who is stalled (engine/live.h). */
#include "engine/live.h"

#include <stdio.h>

#include "engine/engine.h"
#include "util/alloc.h"
#include "util/log.h"

strata_status_t eng_live_create(strata_ctx_t *ctx)
{
    eng_live_t *lv = &ctx->live;
    size_t n = (size_t)ctx->size;
    lv->nranks = ctx->size;
    lv->heard_ns = util_calloc(n, sizeof(*lv->heard_ns));
    lv->progress = util_malloc(n * sizeof(*lv->progress));
    lv->moved_ns = util_calloc(n, sizeof(*lv->moved_ns));
    if (!lv->heard_ns || !lv->progress || !lv->moved_ns) {
        util_error("out of memory for the liveness of %d ranks", ctx->size);
        return STRATA_ERR_NOMEM;
    }
    for (size_t r = 0; r < n; r++)
        lv->progress[r] = -1;
    uint64_t timeout_ns = (uint64_t)ctx->timeout_ms * 1000000u;
    lv->silent_ns = timeout_ns / 2;
    lv->period_ns = timeout_ns / 8 ? timeout_ns / 8 : 1;
    return STRATA_OK;
}

void eng_live_free(strata_ctx_t *ctx)
{
    eng_live_t *lv = &ctx->live;
    util_free(lv->heard_ns);
    util_free(lv->progress);
    util_free(lv->moved_ns);
    *lv = (eng_live_t){0};
}

void eng_live_watch(strata_ctx_t *ctx, int r)
{
    if (r >= 0 && r < ctx->live.nranks)
        ctx->live.heard_ns[r] = util_now_ns();
}

void eng_live_unwatch(strata_ctx_t *ctx, int r)
{
    if (r >= 0 && r < ctx->live.nranks)
        ctx->live.heard_ns[r] = 0;
}

void eng_live_heard(strata_ctx_t *ctx, int r)
{
    if (r >= 0 && r < ctx->live.nranks && ctx->live.heard_ns[r])
        ctx->live.heard_ns[r] = util_now_ns();
}

void eng_live_progress(strata_ctx_t *ctx, int r, int64_t progress)
{
    eng_live_t *lv = &ctx->live;
    if (r < 0 || r >= lv->nranks || lv->progress[r] == progress)
        return;
    lv->progress[r] = progress;
    lv->moved_ns[r] = util_now_ns();
}

int eng_live_stalled(const strata_ctx_t *ctx, uint64_t *silent_ns_out)
{
    const eng_live_t *lv = &ctx->live;
    uint64_t now = util_now_ns(), longest = 0;
    int who = -1;
    for (int r = 0; r < lv->nranks; r++) {
        uint64_t heard = lv->heard_ns[r];
        if (heard && now - heard >= lv->silent_ns && now - heard > longest) {
            longest = now - heard;
            who = r;
        }
    }
    *silent_ns_out = longest;
    return who;
}

int64_t eng_live_progress_of(const strata_ctx_t *ctx, int r,
                             uint64_t *since_ns_out)
{
    const eng_live_t *lv = &ctx->live;
    *since_ns_out = lv->moved_ns[r];
    return lv->progress[r];
}

void eng_live_describe(const strata_ctx_t *ctx, uint64_t silent_ns, char *buf,
                       size_t len)
{
    snprintf(buf, len,
             "nothing from it for %.1f s, where a live rank says something "
             "every %.1f s (STRATA_TIMEOUT_MS=%d): stopped, hung or cut off",
             (double)silent_ns / 1e9, (double)ctx->live.period_ns / 1e9,
             ctx->timeout_ms);
}

/* ---- the beat (progress thread) ---- */

/* This rank's BEAT to the coordinator, with how far it has got. */
static void eng_live_beat(strata_ctx_t *ctx)
{
    if (ctx->rank == 0 || !ctx->coord_peer.up || ctx->bye_sent)
        return;
    int64_t progress =
        ctx->role == STRATA_ROLE_WORKER
            ? atomic_load_explicit(&ctx->clock, memory_order_relaxed)
            : (int64_t)atomic_load_explicit(&ctx->cnt.updates,
                                            memory_order_relaxed);
    unsigned char buf[16];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_BEAT);
    eng_put_i64(&w, progress);
    strata_status_t st = eng_send(&ctx->coord_peer, &w, NULL);
    if (st != STRATA_OK)
        eng_fail_coord_send(ctx, st, "cannot say BEAT to the coordinator");
}

/* The coordinator is silent: this rank fails naming it, and tells it, so
 * that it names itself too when it wakes. */
static void eng_live_lost_coord(strata_ctx_t *ctx, uint64_t silent_ns)
{
    char why[256];
    eng_live_describe(ctx, silent_ns, why, sizeof(why));
    eng_fail_tell(ctx, STRATA_ERR_PEER, "%s stopped responding: %s",
                  eng_peer_name(&ctx->coord_peer), why);
}

/* Whether this process went without running for longer than a peer may be
 * silent (since the last turn began, or the last check in this turn): the
 * others gave up on it, and its peers' silence was its own. */
static bool eng_live_ran_late(strata_ctx_t *ctx)
{
    eng_live_t *lv = &ctx->live;
    uint64_t now = util_now_ns(), idle = now - lv->ran_ns;
    bool watching = false;
    lv->ran_ns = now;
    if (!ctx->live_timer.fn || idle <= lv->silent_ns ||
        eng_fatal(ctx) != STRATA_OK)
        return false;
    for (int r = 0; r < lv->nranks; r++)
        if (lv->heard_ns[r]) {
            lv->heard_ns[r] = now; /* their silence was ours */
            watching = true;
        }
    if (ctx->coord_ops && watching) {
        eng_fail(ctx, STRATA_ERR_PEER,
                 "this rank, the coordinator (rank 0), did not run for %.1f s "
                 "(stopped, or starved of CPU), where the others give up on "
                 "a rank silent for %.1f s (STRATA_TIMEOUT_MS=%d)",
                 (double)idle / 1e9, (double)lv->silent_ns / 1e9,
                 ctx->timeout_ms);
        return true;
    }
    util_info("this process did not run for %.1f s (stopped, or starved of "
              "CPU): its peers get a fresh %.1f s",
              (double)idle / 1e9, (double)lv->silent_ns / 1e9);
    return true;
}

void eng_live_check(strata_ctx_t *ctx)
{
    eng_live_ran_late(ctx);
}

static void eng_live_tick(strata_ctx_t *ctx)
{
    eng_live_t *lv = &ctx->live;
    uint64_t now = util_now_ns();
    if (eng_fatal(ctx) != STRATA_OK)
        return;
    if (ctx->bye_sent)
        eng_live_unwatch(ctx, 0);
    eng_live_beat(ctx);
    if (ctx->coord_ops && ctx->coord_ops->beat)
        ctx->coord_ops->beat(ctx);
    uint64_t silent_ns;
    int r;
    while (eng_fatal(ctx) == STRATA_OK &&
           (r = eng_live_stalled(ctx, &silent_ns)) >= 0) {
        eng_live_unwatch(ctx, r);
        if (ctx->coord_ops && ctx->coord_ops->stalled)
            ctx->coord_ops->stalled(ctx, r, silent_ns);
        else if (r == 0)
            eng_live_lost_coord(ctx, silent_ns);
    }
    ctx->live_timer.at_ns = now + lv->period_ns;
}

void eng_live_start(strata_ctx_t *ctx)
{
    if (ctx->live_timer.fn)
        return;
    ctx->live.ran_ns = util_now_ns();
    ctx->live_timer =
        (eng_timer_t){.at_ns = util_now_ns(), .fn = eng_live_tick};
}
