/*
 * GSSP on a worker: strata_epoch_end reports the epoch's iteration time to
 * the coordinator (EPOCH), which groups workers by speed; RANK tells the
 * worker its group and that group's speed rank. The regroup itself
 * (FREEZE, GO) is the push path's, in worker.c.
 */
#include <string.h>

#include "engine/engine.h"
#include "util/log.h"

strata_status_t strata_epoch_end(strata_ctx_t *ctx, double iteration_seconds)
{
    if (!ctx || ctx->role != STRATA_ROLE_WORKER) {
        util_error("strata_epoch_end is for workers");
        return ctx ? STRATA_ERR_STATE : STRATA_ERR_INVALID;
    }
    if (!(iteration_seconds >= 0) || iteration_seconds > 1e9) {
        util_error("strata_epoch_end: iteration_seconds must be >= 0 (0: "
                   "measured), got %g",
                   iteration_seconds);
        return STRATA_ERR_INVALID;
    }
    if (!ctx->policy->ops->regroups)
        return STRATA_OK;
    if (!ctx->api_pushed_at) {
        util_error("strata_epoch_end: no step was taken (commit first)");
        return STRATA_ERR_STATE;
    }
    int64_t steps = ctx->api_clock - ctx->api_epoch_clock;
    if (iteration_seconds == 0 && steps > 0)
        iteration_seconds = (double)ctx->api_compute_ns / 1e9 / (double)steps;
    ctx->api_epoch_clock = ctx->api_clock;
    ctx->api_compute_ns = 0;
    ctx->api_epochs++;
    if (!(iteration_seconds > 0)) {
        util_error("strata_epoch_end: no step in epoch %u to measure",
                   ctx->api_epochs);
        return STRATA_ERR_STATE;
    }
    eng_cmd_t cmd = {.type = ENG_CMD_EPOCH};
    cmd.u.epoch.epoch = ctx->api_epochs;
    cmd.u.epoch.seconds = iteration_seconds;
    strata_status_t st = eng_cmd_submit(ctx, &cmd);
    if (st != STRATA_OK)
        util_error("strata_epoch_end: the command queue is full");
    return st != STRATA_OK ? st : eng_fatal(ctx);
}

void eng_gssp_cmd(strata_ctx_t *ctx, const eng_cmd_t *cmd)
{
    unsigned char buf[32];
    eng_wbuf_t m;
    eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_EPOCH);
    eng_put_u32(&m, cmd->u.epoch.epoch);
    eng_put_f64(&m, cmd->u.epoch.seconds);
    strata_status_t st = eng_send(&ctx->coord_peer, &m, NULL);
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot report the epoch to the coordinator: %s",
                 strata_strerror(st));
    eng_worker_epoch(ctx, cmd->u.epoch.epoch);
}

void eng_gssp_on_rank(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    uint32_t group = eng_get_u32(r);
    double rank = eng_get_f64(r);
    if (!eng_rbuf_ok(r) || group >= ctx->policy->ngroups || !(rank >= 0) ||
        rank > 1) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed RANK from the coordinator");
        return;
    }
    uint64_t bits;
    memcpy(&bits, &rank, sizeof(bits));
    atomic_store(&ctx->group_rank_bits, bits);
}
