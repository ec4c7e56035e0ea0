/* The public API of include/strata/strata.h, over the engine's modules. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "util/alloc.h"
#include "util/log.h"

/* ---- creation and teardown ---- */

/* What strata_transport() says, from the connections made. */
static void eng_name_transport(strata_ctx_t *ctx)
{
    size_t len = 0;
    for (int i = 0; i < ENG_NPROV; i++) {
        bool used = false;
        for (int a = 0; ctx->worker && a < ctx->naggs; a++)
            used |= eng_worker_link_prov(ctx, a) == i;
        if (ctx->agg)
            used = ctx->data_listener[i] != NULL;
        if (!used)
            continue;
        if (ctx->worker && len > 0) {
            snprintf(ctx->transport, sizeof(ctx->transport), "mixed");
            return;
        }
        len +=
            (size_t)snprintf(ctx->transport + len, sizeof(ctx->transport) - len,
                             "%s%s", len ? "+" : "", eng_prov_names[i]);
    }
}

strata_status_t strata_init_with(const char *const *settings,
                                 strata_ctx_t **ctx_out)
{
    if (!ctx_out) {
        util_error("strata_init: ctx_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    strata_ctx_t *ctx;
    strata_status_t st = eng_ctx_create(settings, &ctx);
    if (st != STRATA_OK)
        return st;
    st = eng_boot_prepare(ctx);
    if (st == STRATA_OK)
        st = eng_loop_start(ctx);
    /* The progress thread fails the join itself at the deadline, with the
     * reason, after asking the coordinator (which may take another
     * STRATA_TIMEOUT_MS: eng_fail_soon); this wait only backs it up. */
    if (st == STRATA_OK)
        st = util_gate_wait(&ctx->joined, 1,
                            ctx->join_timeout_ms + ctx->timeout_ms + 2000);
    if (st == STRATA_ERR_TIMEOUT && eng_fatal(ctx) == STRATA_OK)
        util_error("strata_init: the job did not come together within %s=%d",
                   ctx->join_timeout_name, ctx->join_timeout_ms);
    if (st != STRATA_OK) {
        eng_ctx_free(ctx);
        return st;
    }
    eng_name_transport(ctx);
    util_info("rank %d of %d joined as %s over %s", ctx->rank, ctx->size,
              ctx->role == STRATA_ROLE_AGGREGATOR ? "aggregator" : "worker",
              ctx->transport);
    *ctx_out = ctx;
    return STRATA_OK;
}

strata_status_t strata_init(strata_ctx_t **ctx_out)
{
    return strata_init_with(NULL, ctx_out);
}

/* ---- requests ---- */

strata_status_t strata_wait(strata_request_t **req, int timeout_ms)
{
    if (!req || !*req) {
        util_error("strata_wait: no request given");
        return STRATA_ERR_INVALID;
    }
    if ((*req)->kind == ENG_REQ_PUSH)
        eng_worker_waits((*req)->ctx, *req);
    return eng_req_wait_put(req, timeout_ms);
}

strata_status_t strata_test(strata_request_t **req, bool *done_out)
{
    if (!req || !*req || !done_out) {
        util_error("strata_test: no request or no done_out given");
        return STRATA_ERR_INVALID;
    }
    if ((*req)->kind == ENG_REQ_PUSH)
        eng_worker_waits((*req)->ctx, *req);
    bool done;
    strata_status_t st = eng_req_test(req, &done);
    *done_out = done;
    return st;
}

/* ---- lifetime ---- */

static strata_status_t eng_need(const strata_ctx_t *ctx, strata_role_t role,
                                const char *fn)
{
    if (!ctx) {
        util_error("%s: no context given", fn);
        return STRATA_ERR_INVALID;
    }
    if (ctx->role != role) {
        util_error(
            "%s is for %ss; rank %d is %s", fn,
            role == STRATA_ROLE_WORKER ? "worker" : "aggregator", ctx->rank,
            ctx->role == STRATA_ROLE_WORKER ? "a worker" : "an aggregator");
        return STRATA_ERR_STATE;
    }
    return STRATA_OK;
}

strata_status_t strata_serve(strata_ctx_t *ctx)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_AGGREGATOR, "strata_serve");
    if (st != STRATA_OK)
        return st;
    /* Serving lasts as long as training: the wait is renewed while the
     * workers live; a dead one fails the gate within STRATA_TIMEOUT_MS.
     * A job that failed on a timeout fails the gate with that same status,
     * so the job's state, not the wait's, says whether to wait on. */
    do
        st = util_gate_wait(&ctx->served, 1, ctx->timeout_ms);
    while (st == STRATA_ERR_TIMEOUT && eng_fatal(ctx) == STRATA_OK);
    return st == STRATA_ERR_TIMEOUT ? eng_fatal(ctx) : st;
}

strata_status_t strata_finalize(strata_ctx_t *ctx)
{
    if (!ctx)
        return STRATA_OK;
    eng_cmd_t cmd = {.type = ENG_CMD_FINALIZE};
    strata_status_t st = eng_run(ctx, &cmd, ctx->timeout_ms);
    strata_status_t fatal = eng_fatal(ctx);
    eng_loop_stop(ctx);
    const char *path = eng_config_str(ctx->cfg, ENG_CFG_METRICS);
    if (ctx->coord && *path) {
        strata_status_t mst = eng_coord_write_metrics(ctx, path);
        st = st == STRATA_OK ? mst : st;
    }
    eng_ctx_free(ctx);
    return fatal != STRATA_OK ? fatal : st;
}

/* ---- queries ---- */

strata_role_t strata_role(const strata_ctx_t *ctx)
{
    return ctx->role;
}

int strata_rank(const strata_ctx_t *ctx)
{
    return ctx->rank;
}

int strata_size(const strata_ctx_t *ctx)
{
    return ctx->size;
}

int strata_local_rank(const strata_ctx_t *ctx)
{
    return atomic_load(&((strata_ctx_t *)ctx)->local_rank);
}

int strata_num_workers(const strata_ctx_t *ctx)
{
    return ctx->nworkers;
}

int strata_num_aggregators(const strata_ctx_t *ctx)
{
    return ctx->naggs;
}

int strata_worker_index(const strata_ctx_t *ctx)
{
    return ctx->worker_index;
}

int strata_group(const strata_ctx_t *ctx)
{
    return atomic_load(&((strata_ctx_t *)ctx)->group);
}

int64_t strata_clock(const strata_ctx_t *ctx)
{
    return atomic_load_explicit(&((strata_ctx_t *)ctx)->clock,
                                memory_order_relaxed);
}

const char *strata_transport(const strata_ctx_t *ctx)
{
    return ctx->transport;
}

size_t strata_partition_bytes(const strata_ctx_t *ctx)
{
    return (size_t)atomic_load(&((strata_ctx_t *)ctx)->partition_bytes);
}

/* ---- memory ---- */

strata_status_t strata_alloc(strata_ctx_t *ctx, size_t bytes, void **ptr_out)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_WORKER, "strata_alloc");
    if (st != STRATA_OK)
        return st;
    if (!ptr_out) {
        util_error("strata_alloc: ptr_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    eng_cmd_t cmd = {.type = ENG_CMD_ALLOC,
                     .u.alloc = {.bytes = bytes, .ptr_out = ptr_out}};
    return eng_run(ctx, &cmd, ctx->timeout_ms);
}

void strata_free(strata_ctx_t *ctx, void *ptr)
{
    if (!ptr || eng_need(ctx, STRATA_ROLE_WORKER, "strata_free") != STRATA_OK)
        return;
    eng_cmd_t cmd = {.type = ENG_CMD_FREE, .u.free_ptr = ptr};
    eng_run(ctx, &cmd, ctx->timeout_ms);
}

/* ---- tensors ---- */

strata_status_t strata_tensor_register(strata_ctx_t *ctx, const char *name,
                                       void *param, void *grad, size_t count,
                                       strata_dtype_t dtype, int *id_out)
{
    strata_status_t st =
        eng_need(ctx, STRATA_ROLE_WORKER, "strata_tensor_register");
    if (st != STRATA_OK)
        return st;
    if (eng_worker_committed(ctx)) {
        util_error("strata_tensor_register('%s'): the layout is already "
                   "committed",
                   name ? name : "(null)");
        return STRATA_ERR_STATE;
    }
    if (!name || !param || !grad) {
        util_error("strata_tensor_register('%s'): name, param and grad must "
                   "not be NULL",
                   name ? name : "(null)");
        return STRATA_ERR_INVALID;
    }
    eng_tensor_desc_t d = {.dtype = dtype, .count = count};
    if (strlen(name) > ENG_TENSOR_NAME_MAX) {
        util_error("tensor name '%.40s...' is longer than %d bytes", name,
                   ENG_TENSOR_NAME_MAX);
        return STRATA_ERR_INVALID;
    }
    snprintf(d.name, sizeof(d.name), "%s", name);
    return eng_worker_register(ctx, &d, param, grad, id_out);
}

strata_status_t strata_commit(strata_ctx_t *ctx)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_WORKER, "strata_commit");
    if (st != STRATA_OK || eng_worker_committed(ctx))
        return st;
    return eng_worker_commit(ctx);
}

/* ---- data ---- */

strata_status_t strata_push(strata_ctx_t *ctx, const int *tensors,
                            size_t ntensors, strata_request_t **req_out)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_WORKER, "strata_push");
    if (st == STRATA_OK && !req_out) {
        util_error("strata_push: req_out must not be NULL");
        st = STRATA_ERR_INVALID;
    }
    if (st == STRATA_OK)
        st = strata_commit(ctx);
    if (st == STRATA_OK && ctx->policy->ops->rounds) {
        util_error("strata_push: STRATA_POLICY=%s workers train locally and "
                   "call strata_round_ready and strata_round_sync",
                   ctx->policy->ops->name);
        st = STRATA_ERR_STATE;
    }
    if (st != STRATA_OK)
        return st;
    return eng_worker_push(ctx, tensors, ntensors, req_out);
}

strata_status_t strata_set_lr(strata_ctx_t *ctx, double lr)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_WORKER, "strata_set_lr");
    if (st != STRATA_OK)
        return st;
    if (ctx->policy->ops->rounds || ctx->policy->sum_only) {
        util_error("strata_set_lr: the aggregators apply no learning rate "
                   "under STRATA_POLICY=%s%s: change the local optimizer's",
                   ctx->policy->ops->name,
                   ctx->policy->sum_only ? " with STRATA_OPTIMIZER=sum" : "");
        return STRATA_ERR_STATE;
    }
    if (!(lr > 0) || lr > 1e6) {
        util_error("strata_set_lr: %g is not a learning rate in (0, 1e6]", lr);
        return STRATA_ERR_RANGE;
    }
    return eng_worker_set_lr(ctx, lr);
}

strata_status_t strata_pull(strata_ctx_t *ctx, int64_t clock,
                            strata_request_t **req_out)
{
    strata_status_t st = eng_need(ctx, STRATA_ROLE_WORKER, "strata_pull");
    if (st == STRATA_OK && !req_out) {
        util_error("strata_pull: req_out must not be NULL");
        st = STRATA_ERR_INVALID;
    }
    if (st == STRATA_OK)
        st = strata_commit(ctx);
    if (st != STRATA_OK)
        return st;
    return eng_worker_pull(ctx, clock, req_out);
}

strata_status_t strata_step(strata_ctx_t *ctx)
{
    strata_request_t *push, *pull = NULL;
    strata_status_t st = strata_push(ctx, NULL, 0, &push);
    if (st != STRATA_OK)
        return st;
    st = strata_pull(ctx, strata_clock(ctx), &pull);
    if (st == STRATA_OK)
        st = strata_wait(&pull, -1);
    if (st != STRATA_OK && pull)
        eng_req_put(pull); /* a pull holds nothing in the engine */
    strata_status_t pst = eng_req_wait(push, st == STRATA_OK ? -1 : 0);
    if (pst == STRATA_ERR_TIMEOUT)
        eng_req_abandon(push);
    else
        eng_req_put(push);
    return st != STRATA_OK ? st : pst;
}

/* ---- policies' own calls ---- */

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
    return eng_worker_epoch_end(ctx, iteration_seconds);
}

static strata_status_t eng_need_rounds(strata_ctx_t *ctx, const char *fn)
{
    if (!ctx || ctx->role != STRATA_ROLE_WORKER) {
        util_error("%s is for workers", fn);
        return ctx ? STRATA_ERR_STATE : STRATA_ERR_INVALID;
    }
    if (!ctx->policy->ops->rounds) {
        util_error("%s is for STRATA_POLICY=esync or fedavg; %s workers call "
                   "strata_step",
                   fn, ctx->policy->ops->name);
        return STRATA_ERR_STATE;
    }
    if (!ctx->rounds) {
        util_error("%s: call strata_commit before the first local step (it "
                   "writes the initial model into the parameters)",
                   fn);
        return STRATA_ERR_STATE;
    }
    return eng_fatal(ctx);
}

strata_status_t strata_round_ready(strata_ctx_t *ctx, double step_seconds,
                                   bool *ready_out)
{
    strata_status_t st = eng_need_rounds(ctx, "strata_round_ready");
    if (st != STRATA_OK)
        return st;
    if (!ready_out || !(step_seconds > 0) || step_seconds > 1e9) {
        util_error("strata_round_ready: step_seconds must be a positive "
                   "duration (got %g) and ready_out not NULL",
                   step_seconds);
        return STRATA_ERR_INVALID;
    }
    return eng_rounds_ready(ctx, step_seconds, ready_out);
}

strata_status_t strata_round_sync(strata_ctx_t *ctx)
{
    strata_status_t st = eng_need_rounds(ctx, "strata_round_sync");
    return st != STRATA_OK ? st : eng_rounds_sync(ctx);
}

/* ---- metrics ---- */

strata_status_t strata_metrics(strata_ctx_t *ctx, strata_metrics_t *m_out)
{
    if (!ctx || !m_out) {
        util_error("strata_metrics: ctx and m_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    size_t size = m_out->size;
    if (size < offsetof(strata_metrics_t, bytes_pushed) + sizeof(uint64_t)) {
        util_error("strata_metrics: m_out->size is %zu; set it to "
                   "sizeof(strata_metrics_t) (STRATA_METRICS_INIT)",
                   size);
        return STRATA_ERR_INVALID;
    }
    strata_metrics_t m;
    eng_metrics_read(ctx, &m);
    m.size = size < sizeof(m) ? size : sizeof(m);
    memcpy(m_out, &m, m.size); /* a caller built against an older header */
    return STRATA_OK;
}

strata_status_t strata_report(strata_ctx_t *ctx, const char *json)
{
    if (!ctx || !json) {
        util_error("strata_report: ctx and json must not be NULL");
        return STRATA_ERR_INVALID;
    }
    size_t len = strlen(json);
    if (len >= STRATA_REPORT_MAX || len < 2 || json[0] != '{' ||
        json[len - 1] != '}' || strpbrk(json, "\r\n")) {
        util_error("strata_report: expected one JSON object of fewer than %d "
                   "bytes on one line, got %zu bytes starting '%.16s'",
                   STRATA_REPORT_MAX, len, json);
        return STRATA_ERR_INVALID;
    }
    char *copy = util_strdup(json);
    if (!copy) {
        util_error("strata_report: out of memory for %zu bytes", len);
        return STRATA_ERR_NOMEM;
    }
    /* Read by the progress thread when it says BYE. */
    util_free(
        atomic_exchange_explicit(&ctx->report, copy, memory_order_acq_rel));
    return STRATA_OK;
}

strata_status_t strata_group_clocks(strata_ctx_t *ctx, int64_t *clocks,
                                    size_t max, size_t *ngroups_out)
{
    if (!ctx || !ngroups_out || (max > 0 && !clocks)) {
        util_error("strata_group_clocks: missing ctx, clocks or ngroups_out");
        return STRATA_ERR_INVALID;
    }
    if (!ctx->role_ops->group_clock) { /* a worker: its own clock */
        if (max > 0)
            clocks[0] = strata_clock(ctx);
        *ngroups_out = 1;
        return STRATA_OK;
    }
    uint32_t ng = ctx->policy->ngroups;
    for (uint32_t g = 0; g < ng && g < max; g++)
        clocks[g] = ctx->role_ops->group_clock(ctx, g);
    *ngroups_out = ng;
    return STRATA_OK;
}
