/*
 * Zero copy on one host (engine/worker.h): the aggregator reduces a
 * worker's gradients where they lie, mapped from its strata_alloc block
 * (GRADS), and the worker may write them again once told the reduction
 * read them: by the model write of the next clock, which is served only
 * after that reduction (eng_may_serve), or by CONSUMED where no model write
 * follows at once. The reduction waits for the worker's whole clock
 * (PUSHED), so a push the application waits on before its clock is whole
 * is copied into its slot instead when the worker asks (RELEASE); so is
 * every push still held when the worker's connection closes.
 */
#include <string.h>

#include "engine/aggregator.h"
#include "util/log.h"

/* held[i], bit 2 + p: the worker asked for its push of clock parity p to
 * be released before that push landed. */
#define ENG_HELD_ASKED 4u

const void *eng_src_addr(const eng_agg_t *a, const eng_wlink_t *l, uint32_t i,
                         int64_t clock)
{
    if (l->held[i] >> (clock & 1) & 1)
        return l->in_place[i];
    return eng_slot(a, l, &a->parts[i], clock);
}

void eng_agg_consumed(strata_ctx_t *ctx, uint32_t i, uint32_t w, int64_t wc)
{
    eng_agg_t *a = ctx->agg;
    eng_wlink_t *l = eng_agg_src_link(a, w, wc);
    uint8_t bit = (uint8_t)(1u << (wc & 1));
    if (!(l->held[i] & bit))
        return;
    l->held[i] &= (uint8_t)~bit;
    /* The serve that followed the reduction queued the model of a later
     * clock: its write says so, without a message (nor a wake-up). */
    if (l != a->links[w] || a->parts[i].served[w] <= wc)
        eng_send_part_clock(&l->peer, ENG_MSG_CONSUMED, i, wc);
}

/* l's push of `clock` on partition i, if held in place, is copied into its
 * slot, where the reduction reads it from now on. */
static bool eng_unhold(eng_agg_t *a, eng_wlink_t *l, uint32_t i, int64_t clock)
{
    uint8_t bit = (uint8_t)(1u << (clock & 1));
    if (!(l->held[i] & bit))
        return false;
    memcpy(eng_slot(a, l, &a->parts[i], clock), l->in_place[i],
           a->parts[i].part->bytes);
    l->held[i] &= (uint8_t)~bit;
    return true;
}

/* The worker waits on its push of clock c on partition i: that push, and
 * an older one still held (the same memory, unchanged since), are copied
 * and said CONSUMED, oldest first. */
static void eng_release(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i,
                        int64_t c)
{
    for (int64_t k = c > 0 ? c - 1 : c; k <= c; k++)
        if (eng_unhold(ctx->agg, l, i, k))
            eng_send_part_clock(&l->peer, ENG_MSG_CONSUMED, i, k);
}

void eng_agg_held(strata_ctx_t *ctx, eng_wlink_t *l, uint32_t i, int64_t c)
{
    eng_apart_t *ap = &ctx->agg->parts[i];
    uint8_t asked = (uint8_t)(ENG_HELD_ASKED << (c & 1));
    l->held[i] |= (uint8_t)(1u << (c & 1));
    atomic_fetch_add_explicit(&ctx->cnt.in_place_pushes, 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->cnt.in_place_bytes, ap->part->bytes,
                              memory_order_relaxed);
    if (l->held[i] & asked) {
        l->held[i] &= (uint8_t)~asked;
        eng_release(ctx, l, i, c);
    }
}

bool eng_agg_on_release(strata_ctx_t *ctx, eng_wlink_t *l, eng_rbuf_t *r)
{
    eng_agg_t *a = ctx->agg;
    uint32_t i = eng_get_u32(r);
    int64_t c = eng_get_i64(r);
    if (!eng_rbuf_ok(r) || i >= a->nparts || !l->in_place[i] ||
        a->links[l->widx] != l)
        return false;
    /* Its notice may come after (it waited in the worker's queue). */
    int64_t last = a->parts[i].arrived[l->widx];
    if (c == last + 1)
        l->held[i] |= (uint8_t)(ENG_HELD_ASKED << (c & 1));
    else if (c == last)
        eng_release(ctx, l, i, c);
    else
        return false;
    return true;
}

void eng_wlink_unmap(strata_ctx_t *ctx, eng_wlink_t *l)
{
    eng_agg_t *a = ctx->agg;
    uint32_t kept = 0;
    for (uint32_t i = 0; l->in_place && i < a->nparts; i++) {
        for (int64_t parity = 0; parity < 2; parity++)
            kept += eng_unhold(a, l, i, parity);
        l->held[i] = 0;
        l->in_place[i] = NULL;
    }
    if (kept)
        util_info("%s: %u partition pushes it announced in place copied "
                  "before its connection closes",
                  eng_peer_name(&l->peer), kept);
}
