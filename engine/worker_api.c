/*
 * The worker on the application thread: registering tensors, the commit,
 * push and pull requests, and the clock as the application counts its
 * pushes (published in ctx->clock for queries from any thread). The
 * progress thread does the rest (engine/worker.h).
 */
#include <string.h>

#include "engine/worker.h"
#include "util/alloc.h"
#include "util/log.h"

/* Whether a tensor of that name is registered: one lookup, and a scan only
 * when two names share a key. */
static bool eng_worker_registered(const eng_worker_t *w, const char *name)
{
    uintptr_t id1 =
        (uintptr_t)util_keymap_get(&w->names, eng_tensor_name_key(name));
    if (!id1)
        return false;
    if (strcmp(w->tensors[id1 - 1].desc.name, name) == 0)
        return true;
    for (uint32_t i = 0; i < w->ntensors; i++)
        if (strcmp(w->tensors[i].desc.name, name) == 0)
            return true;
    return false;
}

strata_status_t eng_worker_register(strata_ctx_t *ctx,
                                    const eng_tensor_desc_t *desc, void *param,
                                    void *grad, int *id_out)
{
    eng_worker_t *w = ctx->worker;
    if (eng_tensor_desc_check(desc) != STRATA_OK)
        return STRATA_ERR_INVALID;
    if (eng_worker_registered(w, desc->name)) {
        util_error("tensor '%s' is registered twice", desc->name);
        return STRATA_ERR_INVALID;
    }
    if (w->ntensors == w->tcap) {
        uint32_t cap = w->tcap ? 2 * w->tcap : 16;
        eng_wtensor_t *t = util_realloc(w->tensors, sizeof(*t) * cap);
        if (!t) {
            util_error("out of memory registering tensor '%s'", desc->name);
            return STRATA_ERR_NOMEM;
        }
        w->tensors = t;
        w->tcap = cap;
    }
    w->tensors[w->ntensors] = (eng_wtensor_t){
        .desc = *desc, .param = param, .grad = grad, .pushed_at = -1};
    uint64_t key = eng_tensor_name_key(desc->name);
    if (!util_keymap_get(&w->names, key) &&
        util_keymap_put(&w->names, key, (void *)(uintptr_t)(w->ntensors + 1)) !=
            STRATA_OK) {
        util_error("out of memory registering tensor '%s'", desc->name);
        return STRATA_ERR_NOMEM;
    }
    if (id_out)
        *id_out = (int)w->ntensors;
    w->ntensors++;
    return STRATA_OK;
}

uint32_t eng_worker_ntensors(const strata_ctx_t *ctx)
{
    return ctx->worker->ntensors;
}

const eng_tensor_desc_t *eng_worker_tensor(const strata_ctx_t *ctx, uint32_t i,
                                           void **param, void **grad)
{
    const eng_wtensor_t *t = &ctx->worker->tensors[i];
    *param = t->param;
    *grad = t->grad;
    return &t->desc;
}

bool eng_worker_committed(const strata_ctx_t *ctx)
{
    return ctx->worker->api.committed;
}

strata_status_t eng_worker_commit_start(strata_ctx_t *ctx,
                                        strata_request_t **req_out)
{
    eng_worker_api_t *api = &ctx->worker->api;
    uint32_t nt = ctx->worker->ntensors;
    if (!api->pushed_at &&
        !(api->pushed_at = util_malloc(sizeof(int64_t) * (nt ? nt : 1))))
        return STRATA_ERR_NOMEM;
    for (uint32_t i = 0; i < nt; i++)
        api->pushed_at[i] = -1;
    api->released = -1;
    eng_cmd_t cmd = {.type = ENG_CMD_COMMIT};
    cmd.req = eng_req_get(ctx, ENG_REQ_CMD);
    if (!cmd.req)
        return STRATA_ERR_AGAIN;
    strata_status_t st = eng_cmd_submit(ctx, &cmd);
    if (st != STRATA_OK) {
        eng_req_put(cmd.req);
        return st;
    }
    *req_out = cmd.req;
    return STRATA_OK;
}

strata_status_t eng_worker_commit_end(strata_ctx_t *ctx, strata_request_t *req,
                                      int timeout_ms)
{
    eng_worker_api_t *api = &ctx->worker->api;
    strata_status_t st = eng_req_wait(req, timeout_ms);
    if (st == STRATA_ERR_TIMEOUT)
        eng_req_abandon(req);
    else
        eng_req_put(req);
    if (st != STRATA_OK)
        return st;
    api->clock = ctx->start_clock; /* a rejoined worker's first */
    api->committed = true;
    const eng_worker_policy_t *pol = eng_worker_policy(ctx);
    return pol->committed ? pol->committed(ctx) : STRATA_OK;
}

strata_status_t eng_worker_commit(strata_ctx_t *ctx)
{
    if (ctx->worker->api.committed)
        return STRATA_OK;
    strata_request_t *req;
    strata_status_t st = eng_worker_commit_start(ctx, &req);
    return st == STRATA_OK ? eng_worker_commit_end(ctx, req, ctx->timeout_ms)
                           : st;
}

/* ---- pushes ---- */

static strata_status_t eng_push_args(strata_ctx_t *ctx, strata_request_t *req,
                                     const int *tensors, size_t n)
{
    const eng_worker_api_t *api = &ctx->worker->api;
    uint32_t nt = ctx->worker->ntensors;
    if (n > nt || (n > 0 && !tensors)) {
        util_error("strata_push: %zu tensors given, %u registered", n, nt);
        return STRATA_ERR_INVALID;
    }
    if (n > 0 && !req->tensors &&
        !(req->tensors = util_malloc(sizeof(uint32_t) * nt)))
        return STRATA_ERR_NOMEM;
    int64_t c = api->clock;
    for (size_t i = 0; i < n; i++) {
        if (tensors[i] < 0 || (uint32_t)tensors[i] >= nt) {
            util_error("strata_push: tensor id %d is not registered (0..%u)",
                       tensors[i], nt - 1);
            return STRATA_ERR_INVALID;
        }
        if (api->pushed_at[tensors[i]] == c) {
            util_error("strata_push: tensor id %d was already pushed in "
                       "clock %lld",
                       tensors[i], (long long)c);
            return STRATA_ERR_STATE;
        }
        for (size_t j = 0; j < i; j++)
            if (tensors[j] == tensors[i]) {
                util_error("strata_push: tensor id %d given twice", tensors[i]);
                return STRATA_ERR_INVALID;
            }
        req->tensors[i] = (uint32_t)tensors[i];
    }
    if (n == 0 && api->npushed > 0) {
        util_error("strata_push of every tensor: %u of them were already "
                   "pushed in clock %lld",
                   api->npushed, (long long)c);
        return STRATA_ERR_STATE;
    }
    req->ntensors = (uint32_t)n;
    return STRATA_OK;
}

/* The clock, as the application thread counts it: it advances when every
 * tensor has been pushed. */
static void eng_push_count(strata_ctx_t *ctx, const strata_request_t *req)
{
    eng_worker_api_t *api = &ctx->worker->api;
    uint32_t nt = ctx->worker->ntensors;
    uint32_t n = req->ntensors ? req->ntensors : nt;
    for (uint32_t i = 0; i < n; i++)
        api->pushed_at[req->ntensors ? req->tensors[i] : i] = api->clock;
    api->npushed += n;
    if (api->npushed == nt) {
        api->npushed = 0;
        api->clock++;
        atomic_store_explicit(&ctx->clock, api->clock, memory_order_relaxed);
    }
}

strata_status_t eng_worker_push(strata_ctx_t *ctx, const int *tensors,
                                size_t ntensors, strata_request_t **req_out)
{
    strata_request_t *req = eng_req_get(ctx, ENG_REQ_PUSH);
    if (!req)
        return STRATA_ERR_NOMEM;
    strata_status_t st = eng_push_args(ctx, req, tensors, ntensors);
    req->pushed_ns = util_now_ns(); /* gssp's step times, the hand-off */
    req->clock = ctx->worker->api.clock;
    eng_cmd_t cmd = {.type = ENG_CMD_PUSH, .req = req};
    if (st == STRATA_OK)
        st = eng_cmd_submit(ctx, &cmd);
    if (st != STRATA_OK) {
        eng_req_put(req);
        return st;
    }
    eng_push_count(ctx, req);
    *req_out = req;
    return STRATA_OK;
}

void eng_worker_waits(strata_ctx_t *ctx, const strata_request_t *req)
{
    eng_worker_t *w = ctx->worker;
    if (!w->reads_in_place || req->clock != w->api.clock ||
        w->api.released == req->clock ||
        atomic_load_explicit(&req->done, memory_order_acquire))
        return;
    eng_cmd_t cmd = {.type = ENG_CMD_RELEASE, .u.release_clock = req->clock};
    if (eng_cmd_submit(ctx, &cmd) == STRATA_OK)
        w->api.released = req->clock;
}

/* The learning rate of the aggregators' SGD from the first clock this
 * worker has not begun to push. */
strata_status_t eng_worker_set_lr(strata_ctx_t *ctx, double lr)
{
    const eng_worker_api_t *api = &ctx->worker->api;
    eng_cmd_t cmd = {.type = ENG_CMD_LR};
    cmd.u.lr.clock = api->clock + (api->npushed > 0);
    cmd.u.lr.lr = lr;
    return eng_cmd_submit(ctx, &cmd);
}

/* ---- pulls ---- */

strata_status_t eng_worker_pull(strata_ctx_t *ctx, int64_t clock,
                                strata_request_t **req_out)
{
    int64_t now = ctx->worker->api.clock;
    if (clock < 0 || clock > now) {
        util_error("strata_pull: clock %lld is not in [0, %lld], the clocks "
                   "pushed so far",
                   (long long)clock, (long long)now);
        return STRATA_ERR_INVALID;
    }
    strata_request_t *req = eng_req_get(ctx, ENG_REQ_PULL);
    if (!req)
        return STRATA_ERR_NOMEM;
    req->clock = clock;
    req->gate = &ctx->worker->pull_gate;
    *req_out = req;
    return STRATA_OK;
}

strata_status_t eng_worker_epoch_end(strata_ctx_t *ctx,
                                     double iteration_seconds)
{
    const eng_worker_policy_t *pol = eng_worker_policy(ctx);
    return pol->epoch_end ? pol->epoch_end(ctx, iteration_seconds) : STRATA_OK;
}
