/* The learning-rate schedule of the aggregators' SGD: workers announce a
 * rate from a clock on (strata_set_lr); every update of a clock uses the
 * rate announced for the latest clock not after it, so every shard changes
 * at the same clock whatever the order in which partitions reduce. */

#include "engine/aggregator.h"
#include "util/alloc.h"
#include "util/log.h"

/* Announcements every group has passed, but the last of them, no longer
 * decide any update. */
static void eng_agg_lr_prune(strata_ctx_t *ctx, eng_lr_sched_t *s)
{
    int64_t least = INT64_MAX;
    for (uint32_t g = 0; g < ctx->policy->ngroups; g++) {
        int64_t c = ctx->role_ops->group_clock(ctx, g);
        least = c < least ? c : least;
    }
    uint32_t keep = 0;
    while (keep + 1 < s->n && s->clock[keep + 1] <= least)
        keep++;
    for (uint32_t i = keep; i < s->n; i++) {
        s->clock[i - keep] = s->clock[i];
        s->lr[i - keep] = s->lr[i];
    }
    s->n -= keep;
}

static strata_status_t eng_agg_lr_room(strata_ctx_t *ctx, eng_lr_sched_t *s)
{
    if (s->n == s->cap)
        eng_agg_lr_prune(ctx, s);
    if (s->n < s->cap)
        return STRATA_OK;
    uint32_t cap = s->cap ? 2 * s->cap : 16;
    int64_t *clock = util_realloc(s->clock, sizeof(*clock) * cap);
    if (clock)
        s->clock = clock;
    double *lr = clock ? util_realloc(s->lr, sizeof(*lr) * cap) : NULL;
    if (!lr)
        return STRATA_ERR_NOMEM;
    s->lr = lr;
    s->cap = cap;
    return STRATA_OK;
}

strata_status_t eng_agg_lr_announce(strata_ctx_t *ctx, int64_t clock, double lr,
                                    const char *who)
{
    eng_lr_sched_t *s = &ctx->agg->lrs;
    uint32_t at = s->n;
    while (at > 0 && s->clock[at - 1] > clock)
        at--;
    if (at > 0 && s->clock[at - 1] == clock) {
        if (s->lr[at - 1] != lr)
            util_warn("%s announces learning rate %g from clock %lld, which "
                      "another worker announced as %g: keeping %g",
                      who, lr, (long long)clock, s->lr[at - 1], s->lr[at - 1]);
        return STRATA_OK;
    }
    strata_status_t st = eng_agg_lr_room(ctx, s);
    if (st != STRATA_OK) {
        util_error("out of memory keeping a learning-rate change");
        return st;
    }
    at = s->n; /* pruning may have moved entries */
    while (at > 0 && s->clock[at - 1] > clock)
        at--;
    for (uint32_t i = s->n; i > at; i--) {
        s->clock[i] = s->clock[i - 1];
        s->lr[i] = s->lr[i - 1];
    }
    s->clock[at] = clock;
    s->lr[at] = lr;
    s->n++;
    util_debug("learning rate %g from clock %lld (announced by %s)", lr,
               (long long)clock, who);
    return STRATA_OK;
}

double eng_agg_lr_at(const eng_agg_t *a, int64_t clock)
{
    const eng_lr_sched_t *s = &a->lrs;
    for (uint32_t i = s->n; i > 0; i--)
        if (s->clock[i - 1] <= clock)
            return s->lr[i - 1];
    return a->base_lr;
}

void eng_agg_lr_free(eng_agg_t *a)
{
    util_free(a->lrs.clock);
    util_free(a->lrs.lr);
    a->lrs = (eng_lr_sched_t){0};
}
