/*
 * Rounds of model deltas on a worker (STRATA_POLICY=esync or fedavg): what
 * strata_round_ready and strata_round_sync do on the application thread,
 * and the progress thread's part (queries to the State Server, its answers,
 * ROUND to the aggregators).
 *
 * A round is one clock of the gradient path: the worker writes its delta
 * w_local - w_global into its gradient buffers and pushes them; the
 * aggregators' delta update (engine/update.c) applies lr_g times their mean
 * to the global model and write it back into the parameter buffers.
 *
 * ESync queries are pipelined: the query for a local step is sent as the
 * step starts (at the end of the previous strata_round_ready, or of
 * strata_round_sync), so the server stamps the step's start with its own
 * clock, and its answer, "aggregate after this step" or not, is read when
 * the step has ended. Blocking mode waits for that answer; non-blocking
 * mode (the server only sends READY) ends the round at the first step that
 * ends after a READY arrived.
 *
 * A lost aggregator's shard taken over (worker_takeover.c) at resume clock
 * R: a round is a clock, so the shard's rounds P..R-1 are lost. The
 * application writes its parameters between two syncs, so the taker's
 * model of R is asked for (PARAMS) only once this worker is in a sync's
 * exchange (after ROUND, the delta taken): it lands there, as any round's
 * global model. The rounds after it and before R push nothing to the
 * shard and pull no model of it, so the shard's parameters go back to the
 * global model kept (the taker's) at their end: every worker holds the
 * same global model when round R starts.
 */
#include <string.h>

#include <strata/strata_agg.h>

#include "engine/state_server.h"
#include "engine/worker.h"
#include "util/alloc.h"
#include "util/log.h"

struct eng_rounds {
    /* application thread */
    uint64_t round;     /* rounds completed */
    uint32_t steps;     /* local steps in this round */
    uint32_t fixed;     /* fedavg: steps per round; 0: the State Server */
    bool nonblocking;   /* STRATA_ESYNC_NONBLOCKING */
    bool by_steps;      /* STRATA_ESYNC_WEIGHTING=steps */
    uint32_t seq;       /* queries sent */
    bool pending;       /* blocking: the answer for the step in progress */
    double last_step_s; /* duration of the latest local step */
    void **global;      /* [ntensors]: the latest global model */
    /* progress thread -> application thread */
    util_gate_t answered;        /* seq of the latest answer */
    _Atomic int answer;          /* its decision, ENG_SS_* */
    _Atomic int64_t ready_round; /* latest round READY came for, -1 */
    _Atomic int64_t rtt_ns;      /* latest query round trip */
    /* takeover: the clock of the round whose exchange the taker's model
     * lands in (-1: none), published after the shard's push_from */
    _Atomic int64_t taken_round;
    /* progress thread */
    int64_t round_sent; /* the clock of the latest ROUND sent, -1 */
};

static void eng_rounds_free(strata_ctx_t *ctx);

/* After the commit: the initial model is the first global one. */
static strata_status_t eng_rounds_create(strata_ctx_t *ctx)
{
    uint32_t nt = eng_worker_ntensors(ctx);
    eng_rounds_t *r = util_calloc(1, sizeof(*r));
    if (r)
        r->global = util_calloc(nt, sizeof(void *));
    for (uint32_t i = 0; r && r->global && i < nt; i++) {
        void *param, *grad;
        const eng_tensor_desc_t *d = eng_worker_tensor(ctx, i, &param, &grad);
        if (d->dtype != STRATA_FP32 && d->dtype != STRATA_FP64) {
            util_error("tensor '%s' is %s: rounds of model deltas need fp32 "
                       "or fp64 parameters",
                       d->name, strata_dtype_name(d->dtype));
            ctx->rounds = r;
            eng_rounds_free(ctx);
            return STRATA_ERR_UNSUPPORTED;
        }
        size_t bytes = d->count * strata_dtype_size(d->dtype);
        if (!(r->global[i] = util_malloc(bytes ? bytes : 1)))
            break;
        memcpy(r->global[i], param, bytes);
    }
    ctx->rounds = r;
    if (!r || !r->global || (nt > 0 && !r->global[nt - 1])) {
        util_error("out of memory for the global model of the rounds");
        eng_rounds_free(ctx);
        return STRATA_ERR_NOMEM;
    }
    const eng_policy_t *p = ctx->policy;
    r->fixed = p->round_steps;
    r->nonblocking = eng_config_int(ctx->cfg, ENG_CFG_ESYNC_NONBLOCKING) != 0;
    r->by_steps = p->weight_by_steps;
    r->round = (uint64_t)ctx->start_clock; /* a rejoined worker's first */
    util_gate_init(&r->answered, 0);
    atomic_init(&r->answer, ENG_SS_NOT_READY);
    atomic_init(&r->ready_round, -1);
    atomic_init(&r->rtt_ns, 0);
    atomic_init(&r->taken_round, -1);
    r->round_sent = ctx->start_clock - 1;
    return STRATA_OK;
}

static void eng_rounds_free(strata_ctx_t *ctx)
{
    eng_rounds_t *r = ctx->rounds;
    if (!r)
        return;
    for (uint32_t i = 0; r->global && i < eng_worker_ntensors(ctx); i++)
        util_free(r->global[i]);
    util_free(r->global);
    util_free(r);
    ctx->rounds = NULL;
}

/* ---- progress thread ---- */

static void eng_rounds_cmd(strata_ctx_t *ctx, const eng_cmd_t *cmd)
{
    unsigned char buf[64];
    eng_wbuf_t m;
    strata_status_t st;
    if (cmd->type == ENG_CMD_QUERY) {
        eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_QUERY);
        eng_put_u32(&m, cmd->u.query.seq);
        eng_put_u64(&m, cmd->u.query.round);
        eng_put_u32(&m, cmd->u.query.steps);
        eng_put_f64(&m, cmd->u.query.step_s);
        eng_put_f64(&m, cmd->u.query.rtt_s);
        eng_put_u64(&m, util_now_ns()); /* echoed: the round trip */
        eng_put_u8(&m, cmd->u.query.syncing);
        st = eng_send(&ctx->coord_peer, &m, NULL);
    } else {
        eng_wbuf_init(&m, buf, sizeof(buf), ENG_MSG_ROUND);
        eng_put_i64(&m, cmd->u.round.clock);
        eng_put_u32(&m, cmd->u.round.steps);
        st = eng_worker_send_aggs(ctx, &m);
        ctx->rounds->round_sent = cmd->u.round.clock;
        if (st == STRATA_OK)
            eng_worker_takeover_release(ctx);
    }
    if (st != STRATA_OK)
        eng_fail(ctx, st, "cannot send %s: %s",
                 cmd->type == ENG_CMD_QUERY ? "a query to the State Server"
                                            : "ROUND to the aggregators",
                 strata_strerror(st));
}

static void eng_rounds_on_answer(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_rounds_t *ro = ctx->rounds;
    uint32_t seq = eng_get_u32(r);
    uint64_t round = eng_get_u64(r);
    uint8_t decision = eng_get_u8(r);
    strata_status_t st = (strata_status_t)(int16_t)eng_get_u16(r);
    uint64_t sent_ns = eng_get_u64(r);
    if (!eng_rbuf_ok(r) || decision > ENG_SS_READY) {
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "malformed ANSWER from the coordinator");
        return;
    }
    if (st != STRATA_OK) {
        eng_fail(ctx, st, "the State Server refused this worker's query: %s",
                 strata_strerror(st));
        return;
    }
    uint64_t now = util_now_ns();
    atomic_store(&ro->rtt_ns, now > sent_ns ? (int64_t)(now - sent_ns) : 0);
    atomic_store(&ro->answer, decision);
    if (decision == ENG_SS_READY)
        atomic_store(&ro->ready_round, (int64_t)round);
    util_gate_raise(&ro->answered, seq);
}

static void eng_rounds_fail(strata_ctx_t *ctx, strata_status_t status)
{
    if (ctx->rounds)
        util_gate_fail(&ctx->rounds->answered, status);
}

/* The taker's model may land once the application is in the exchange of
 * the round it is stuck in (its delta taken: ROUND sent). */
static bool eng_rounds_take_now(strata_ctx_t *ctx, int64_t stuck)
{
    eng_rounds_t *r = ctx->rounds;
    if (r->round_sent < stuck)
        return false;
    atomic_store_explicit(&r->taken_round, r->round_sent, memory_order_release);
    return true;
}

static bool eng_rounds_on_coord_msg(strata_ctx_t *ctx, unsigned type,
                                    eng_rbuf_t *r)
{
    if (type != ENG_MSG_ANSWER || !ctx->rounds)
        return false;
    eng_rounds_on_answer(ctx, r);
    return true;
}

/* ---- application thread ---- */

/* Ask the State Server about the step starting now. */
static strata_status_t eng_rounds_query(strata_ctx_t *ctx)
{
    eng_rounds_t *r = ctx->rounds;
    eng_cmd_t cmd = {.type = ENG_CMD_QUERY};
    cmd.u.query.seq = ++r->seq;
    cmd.u.query.round = r->round;
    cmd.u.query.steps = r->steps;
    cmd.u.query.step_s = r->last_step_s;
    cmd.u.query.rtt_s =
        r->nonblocking ? (double)atomic_load(&r->rtt_ns) / 1e9 : 0.0;
    strata_status_t st = eng_cmd_submit(ctx, &cmd);
    r->pending = st == STRATA_OK && !r->nonblocking;
    return st;
}

/* Blocking mode: the answer for the step that just ended. */
static strata_status_t eng_rounds_answer(strata_ctx_t *ctx, bool *ready)
{
    eng_rounds_t *r = ctx->rounds;
    strata_status_t st = util_gate_wait(&r->answered, r->seq, ctx->timeout_ms);
    if (st == STRATA_ERR_TIMEOUT)
        util_error("strata_round_ready: the State Server did not answer "
                   "within STRATA_TIMEOUT_MS=%d",
                   ctx->timeout_ms);
    r->pending = false;
    *ready = st == STRATA_OK && atomic_load(&r->answer) == ENG_SS_READY &&
             atomic_load(&r->ready_round) == (int64_t)r->round;
    return st;
}

strata_status_t eng_rounds_ready(strata_ctx_t *ctx, double step_seconds,
                                 bool *ready_out)
{
    strata_status_t st = STRATA_OK;
    eng_rounds_t *r = ctx->rounds;
    r->steps++;
    r->last_step_s = step_seconds;
    bool ready = false;
    if (r->fixed)
        ready = r->steps >= r->fixed;
    else if (r->nonblocking)
        ready = atomic_load(&r->ready_round) == (int64_t)r->round;
    else if (r->pending)
        st = eng_rounds_answer(ctx, &ready);
    if (st == STRATA_OK && !ready && !r->fixed)
        st = eng_rounds_query(ctx); /* about the next step */
    *ready_out = ready;
    return st;
}

/* The delta, times the local steps when the mean is weighted by them, into
 * the gradient buffers. */
static void eng_rounds_delta(strata_ctx_t *ctx)
{
    eng_rounds_t *r = ctx->rounds;
    double k = r->by_steps ? (double)r->steps : 1.0;
    for (uint32_t i = 0; i < eng_worker_ntensors(ctx); i++) {
        void *param, *grad;
        const eng_tensor_desc_t *d = eng_worker_tensor(ctx, i, &param, &grad);
        if (d->dtype == STRATA_FP32) {
            const float *p = param, *g0 = r->global[i];
            float *g = grad, kf = (float)k;
            for (size_t j = 0; j < d->count; j++)
                g[j] = (p[j] - g0[j]) * kf;
        } else {
            const double *p = param, *g0 = r->global[i];
            double *g = grad;
            for (size_t j = 0; j < d->count; j++)
                g[j] = (p[j] - g0[j]) * k;
        }
    }
}

/* Round `clock` was lost on the partitions taken over (before their R)
 * after the taker's model landed: neither pushed nor pulled there, so
 * their parameters go back to the global model. */
static void eng_rounds_restore(strata_ctx_t *ctx, int64_t clock)
{
    eng_rounds_t *r = ctx->rounds;
    int64_t landed =
        atomic_load_explicit(&r->taken_round, memory_order_acquire);
    if (landed < 0 || clock <= landed)
        return;
    const eng_worker_t *w = ctx->worker;
    const eng_layout_t *lay = w->layout;
    for (uint32_t p = 0; p < lay->nparts; p++) {
        const eng_partition_t *part = &lay->parts[p];
        for (uint32_t k = 0; clock < w->push_from[p] && k < part->npieces;
             k++) {
            const eng_piece_t *pc = &lay->pieces[part->first_piece + k];
            void *param, *grad;
            eng_worker_tensor(ctx, pc->tensor, &param, &grad);
            memcpy((char *)param + pc->tensor_off,
                   (const char *)r->global[pc->tensor] + pc->tensor_off,
                   pc->len);
        }
    }
}

static void eng_rounds_keep_global(strata_ctx_t *ctx)
{
    for (uint32_t i = 0; i < eng_worker_ntensors(ctx); i++) {
        void *param, *grad;
        const eng_tensor_desc_t *d = eng_worker_tensor(ctx, i, &param, &grad);
        memcpy(ctx->rounds->global[i], param,
               d->count * strata_dtype_size(d->dtype));
    }
}

/* Push the deltas and wait for the new global model. A worker that died
 * or fell silent holds the round up until it is dropped (STRATA_TIMEOUT_MS
 * plus its step after its last word), so the wait is twice the timeout. */
static strata_status_t eng_rounds_exchange(strata_ctx_t *ctx)
{
    strata_request_t *push, *pull = NULL;
    strata_status_t st = eng_worker_push(ctx, NULL, 0, &push);
    if (st != STRATA_OK)
        return st;
    st = eng_worker_pull(ctx, ctx->worker->api.clock, &pull);
    if (st == STRATA_OK)
        st = eng_req_wait_put(&pull, 2 * ctx->timeout_ms);
    strata_status_t pst = eng_req_wait_put(&push, st == STRATA_OK ? -1 : 0);
    if (pull) /* timed out: a pull holds nothing in the engine */
        eng_req_wait_put(&pull, 0);
    return st != STRATA_OK ? st : pst;
}

strata_status_t eng_rounds_sync(strata_ctx_t *ctx)
{
    strata_status_t st = STRATA_OK;
    eng_rounds_t *r = ctx->rounds;
    if (r->steps == 0) {
        util_error("strata_round_sync: no local step in round %llu",
                   (unsigned long long)r->round);
        return STRATA_ERR_STATE;
    }
    eng_rounds_delta(ctx);
    if (!r->fixed) { /* the State Server: silent now, but not lost */
        eng_cmd_t q = {.type = ENG_CMD_QUERY};
        q.u.query.seq = r->seq;
        q.u.query.round = r->round;
        q.u.query.steps = r->steps;
        q.u.query.step_s = r->last_step_s;
        q.u.query.syncing = true;
        st = eng_cmd_submit(ctx, &q);
    }
    eng_cmd_t cmd = {.type = ENG_CMD_ROUND};
    cmd.u.round.clock = ctx->worker->api.clock;
    cmd.u.round.steps = r->steps;
    if (st == STRATA_OK)
        st = eng_cmd_submit(ctx, &cmd);
    if (st == STRATA_OK)
        st = eng_rounds_exchange(ctx);
    if (st != STRATA_OK)
        return st;
    eng_rounds_restore(ctx, cmd.u.round.clock);
    eng_rounds_keep_global(ctx);
    r->round++;
    r->steps = 0;
    r->pending = false;
    return r->fixed ? STRATA_OK : eng_rounds_query(ctx);
}

const eng_worker_policy_t eng_worker_rounds = {
    .committed = eng_rounds_create,
    .cmd = eng_rounds_cmd,
    .on_coord_msg = eng_rounds_on_coord_msg,
    .take_now = eng_rounds_take_now,
    .fail = eng_rounds_fail,
    .free = eng_rounds_free,
};
