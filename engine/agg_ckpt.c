/*
 * The aggregator's checkpoints (engine/ckpt.h has the files).
 *
 * A partition is copied into the staging buffer right after the update that
 * brings its slowest group to the checkpoint's clock c (under bsp: the
 * model after clock c - 1's gradients, exactly); once every partition of
 * the shard is copied the writer thread takes the buffer. A partition that
 * moved past c before being copied, or a writer still busy with the
 * previous checkpoint, skips c. The clocks of a job started from a
 * checkpoint count on from its clock in the files' names, so that the
 * newest file stays the newest.
 */
#include <inttypes.h>
#include <string.h>

#include "engine/aggregator.h"
#include "engine/ckpt.h"
#include "util/log.h"

static void eng_agg_ckpt_copy(eng_agg_t *a, eng_apart_t *ap, bool out)
{
    char *staging = eng_ckpt_staging(a->ckpt);
    char *model = eng_agg_model(a, ap);
    size_t mom = ap->momentum ? ap->part->count * sizeof(float) : 0;
    if (out)
        memcpy(staging + ap->part->shard_off, model, ap->part->bytes);
    else
        memcpy(model, staging + ap->part->shard_off, ap->part->bytes);
    if (mom == 0) /* no momentum: NULL, which memcpy must not get */
        return;
    if (out)
        memcpy(staging + ap->state_off, ap->momentum, mom);
    else
        memcpy(ap->momentum, staging + ap->state_off, mom);
}

strata_status_t eng_agg_ckpt_setup(strata_ctx_t *ctx)
{
    eng_agg_t *a = ctx->agg;
    const char *dir = eng_config_str(ctx->cfg, ENG_CFG_CHECKPOINT_DIR);
    if (!dir[0])
        return STRATA_OK;
    if (a->nparts == 0)
        return STRATA_OK; /* no model here; the others do not wait for it */
    if (ctx->policy->sum_only) {
        util_info("STRATA_CHECKPOINT_DIR: the aggregators only sum, they "
                  "keep no model to checkpoint");
        return STRATA_OK;
    }
    uint64_t bytes = a->layout->shard_bytes[a->shard];
    for (uint32_t i = 0; i < a->nparts; i++) {
        eng_apart_t *ap = &a->parts[i];
        ap->state_off = bytes;
        ap->ckpt_at = -1;
        bytes += ap->momentum ? ap->part->count * sizeof(float) : 0;
    }
    eng_ckpt_shape_t shape = {.shard = a->shard,
                              .nshards = (uint32_t)ctx->naggs,
                              .layout_hash = a->layout->hash,
                              .bytes = bytes,
                              .shard_nparts = a->layout->shard_nparts};
    strata_status_t st = eng_ckpt_open(dir, &shape, &a->ckpt);
    int64_t clock = -1;
    if (st == STRATA_OK)
        st = eng_ckpt_load(a->ckpt, &clock);
    if (st != STRATA_OK)
        return st;
    a->ckpt_every = eng_config_int(ctx->cfg, ENG_CFG_CHECKPOINT_EVERY);
    a->ckpt_next = a->ckpt_every;
    if (clock >= 0) {
        for (uint32_t i = 0; i < a->nparts; i++)
            eng_agg_ckpt_copy(a, &a->parts[i], false);
        a->ckpt_base = clock;
        a->restored = true;
    }
    return STRATA_OK;
}

static void eng_agg_ckpt_skip(eng_agg_t *a, int64_t clock, const char *why)
{
    if (a->ckpt_skipped++ == 0)
        util_warn("shard %u: checkpoint of clock %" PRId64
                  " skipped: %s (further skips are logged at debug level)",
                  a->shard, a->ckpt_base + a->ckpt_next, why);
    else
        util_debug("shard %u: checkpoint of clock %" PRId64 " skipped: %s",
                   a->shard, a->ckpt_base + a->ckpt_next, why);
    a->ckpt_next = (clock / a->ckpt_every + 1) * a->ckpt_every;
    a->ckpt_ncopied = 0;
}

void eng_agg_ckpt_note(strata_ctx_t *ctx, uint32_t i)
{
    eng_agg_t *a = ctx->agg;
    eng_apart_t *ap = &a->parts[i];
    if (!a->ckpt)
        return;
    int64_t c = eng_tracker_min_clock(ap->tracker);
    if (c < a->ckpt_next || c == ENG_TRACKER_INF || ap->ckpt_at == a->ckpt_next)
        return;
    if (c > a->ckpt_next) {
        eng_agg_ckpt_skip(a, c, "a partition moved past it first");
        return;
    }
    if (eng_ckpt_busy(a->ckpt)) {
        eng_agg_ckpt_skip(a, c, "the previous one is still being written");
        return;
    }
    eng_agg_ckpt_copy(a, ap, true);
    ap->ckpt_at = a->ckpt_next;
    if (++a->ckpt_ncopied < a->nparts)
        return;
    eng_ckpt_write(a->ckpt, a->ckpt_base + a->ckpt_next);
    a->ckpt_next += a->ckpt_every;
    a->ckpt_ncopied = 0;
}

void eng_agg_ckpt_free(eng_agg_t *a)
{
    eng_ckpt_close(a->ckpt);
    a->ckpt = NULL;
}
