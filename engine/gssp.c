/*
 * GSSP on a worker: strata_epoch_end reports the epoch's iteration time to
 * the coordinator (EPOCH), which groups workers by speed; RANK tells the
 * worker its group and that group's speed rank. The regroup itself
 * (FREEZE, GO) is the push path's, in worker.c.
 */
#include <string.h>

#include "engine/worker.h"
#include "util/log.h"

strata_status_t eng_gssp_epoch_end(strata_ctx_t *ctx, double iteration_seconds)
{
    eng_worker_api_t *api = &ctx->worker->api;
    if (!api->pushed_at) {
        util_error("strata_epoch_end: no step was taken (commit first)");
        return STRATA_ERR_STATE;
    }
    int64_t steps = api->clock - api->epoch_clock;
    if (iteration_seconds == 0 && steps > 0)
        iteration_seconds = (double)api->compute_ns / 1e9 / (double)steps;
    api->epoch_clock = api->clock;
    api->compute_ns = 0;
    api->epochs++;
    if (!(iteration_seconds > 0)) {
        util_error("strata_epoch_end: no step in epoch %u to measure",
                   api->epochs);
        return STRATA_ERR_STATE;
    }
    eng_cmd_t cmd = {.type = ENG_CMD_EPOCH};
    cmd.u.epoch.epoch = api->epochs;
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
