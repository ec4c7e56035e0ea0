/* The public API of include/strata/strata.h, over the engine's modules. */
#include <stdio.h>
#include <string.h>

#include "agg/agg.h"
#include "engine/engine.h"
#include "util/alloc.h"
#include "util/log.h"

/* ---- creation and teardown ---- */

static void eng_ctx_free(strata_ctx_t *ctx)
{
    /* The coordinator of a failed job first tells the others why (a
     * little while at most: they may be gone). */
    if (ctx->coord && eng_fatal(ctx) != STRATA_OK)
        util_gate_wait(&ctx->flushed, 1, 1000);
    eng_loop_stop(ctx);
    eng_rounds_free(ctx);
    eng_worker_free(ctx);
    eng_agg_free(ctx);
    eng_coord_free(ctx);
    eng_boot_free(ctx);
    for (int i = 0; i < ENG_NPROV; i++)
        if (ctx->data_tp[i]) {
            if (ctx->data_listener[i])
                tp_listener_close(ctx->data_listener[i]);
            tp_close(ctx->data_tp[i]);
        }
    if (ctx->coord_tp)
        tp_close(ctx->coord_tp);
    for (int i = 0; ctx->req_pool && i < ENG_REQ_POOL; i++)
        util_free(ctx->req_pool[i].tensors);
    util_free(ctx->req_pool);
    util_free(ctx->api_pushed_at);
    eng_policy_free(ctx->policy);
    eng_config_free(ctx->cfg);
    util_free(ctx);
}

static strata_status_t eng_ctx_config(const char *const *settings,
                                      eng_config_t **cfg_out)
{
    eng_config_t *cfg;
    strata_status_t st = eng_config_load(&cfg);
    for (size_t i = 0; st == STRATA_OK && settings && settings[i]; i++) {
        const char *eq = strchr(settings[i], '=');
        char key[128];
        if (!eq || eq == settings[i] || (size_t)(eq - settings[i]) >= 128) {
            util_error("strata_init_with: setting '%s' is not KEY=VALUE",
                       settings[i]);
            st = STRATA_ERR_CONFIG;
            break;
        }
        snprintf(key, sizeof(key), "%.*s", (int)(eq - settings[i]),
                 settings[i]);
        st = eng_config_set(cfg, key, eq + 1);
    }
    if (st != STRATA_OK) {
        if (cfg)
            eng_config_free(cfg);
        return st;
    }
    *cfg_out = cfg;
    return STRATA_OK;
}

static strata_status_t eng_ctx_new(eng_config_t *cfg, strata_ctx_t **ctx_out)
{
    strata_ctx_t *ctx = util_calloc(1, sizeof(*ctx));
    if (!ctx) {
        eng_config_free(cfg);
        return STRATA_ERR_NOMEM;
    }
    ctx->cfg = cfg;
    ctx->epfd = ctx->cmd_efd = -1;
    ctx->timeout_ms = (int)eng_config_int(cfg, ENG_CFG_TIMEOUT_MS);
    util_gate_init(&ctx->joined, 0);
    util_gate_init(&ctx->committed, 0);
    util_gate_init(&ctx->served, 0);
    util_gate_init(&ctx->flushed, 0);
    util_waitq_init(&ctx->reqq);
    ctx->req_pool = util_calloc(ENG_REQ_POOL, sizeof(*ctx->req_pool));
    if (!ctx->req_pool) {
        eng_ctx_free(ctx);
        return STRATA_ERR_NOMEM;
    }
    for (int i = ENG_REQ_POOL - 1; i >= 0; i--) {
        ctx->req_pool[i].ctx = ctx;
        ctx->req_pool[i].next_free = ctx->req_free;
        ctx->req_free = &ctx->req_pool[i];
    }
    *ctx_out = ctx;
    return STRATA_OK;
}

static strata_status_t eng_ctx_roles(strata_ctx_t *ctx)
{
    strata_status_t st = eng_launch_detect(ctx->cfg, &ctx->launch);
    if (st != STRATA_OK)
        return st;
    ctx->rank = ctx->launch.rank;
    ctx->size = ctx->launch.size;
    ctx->naggs = ctx->launch.num_aggregators;
    ctx->nworkers = ctx->size - ctx->naggs;
    ctx->local_rank = ctx->launch.local_rank;
    util_log_set_rank(ctx->rank);
    bool agg = eng_launch_is_aggregator(&ctx->launch, ctx->rank);
    ctx->role = agg ? STRATA_ROLE_AGGREGATOR : STRATA_ROLE_WORKER;
    ctx->worker_index = agg ? -1 : ctx->rank - ctx->naggs;
    st = eng_policy_create(ctx->cfg, (uint32_t)ctx->nworkers, &ctx->policy);
    if (st == STRATA_OK)
        atomic_init(&ctx->group,
                    agg ? -1 : (int)ctx->policy->group_of[ctx->worker_index]);
    if (st == STRATA_OK && agg)
        st = agg_init(ctx->cfg);
    if (st == STRATA_OK && ctx->rank == 0)
        st = eng_coord_create(ctx);
    if (st == STRATA_OK)
        st = agg ? eng_agg_create(ctx) : eng_worker_create(ctx);
    return st;
}

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
    eng_config_t *cfg;
    strata_ctx_t *ctx;
    strata_status_t st = eng_ctx_config(settings, &cfg);
    if (st == STRATA_OK)
        st = eng_ctx_new(cfg, &ctx);
    if (st != STRATA_OK)
        return st;
    st = eng_ctx_roles(ctx);
    if (st == STRATA_OK)
        st = eng_boot_prepare(ctx);
    if (st == STRATA_OK)
        st = eng_loop_start(ctx);
    /* The progress thread fails the join itself at the deadline (plus a
     * grace of at most a second for the coordinator's word), with the
     * reason; this wait only backs it up. */
    if (st == STRATA_OK)
        st = util_gate_wait(&ctx->joined, 1, ctx->timeout_ms + 2000);
    if (st == STRATA_ERR_TIMEOUT && eng_fatal(ctx) == STRATA_OK)
        util_error("strata_init: the job did not come together within "
                   "STRATA_TIMEOUT_MS=%d",
                   ctx->timeout_ms);
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

/* A request the application gave up waiting for: freed once complete. */
static void eng_req_abandon(strata_request_t *req)
{
    req->abandoned = true;
}

static void eng_req_reclaim(strata_ctx_t *ctx)
{
    for (int i = 0; i < ENG_REQ_POOL; i++) {
        strata_request_t *req = &ctx->req_pool[i];
        if (req->abandoned && atomic_load(&req->done)) {
            req->abandoned = false;
            req->next_free = ctx->req_free;
            ctx->req_free = req;
        }
    }
}

static strata_request_t *eng_req_get(strata_ctx_t *ctx, eng_req_kind_t kind)
{
    if (!ctx->req_free)
        eng_req_reclaim(ctx);
    strata_request_t *req = ctx->req_free;
    if (!req) {
        util_error("more than %d requests outstanding: wait for some",
                   ENG_REQ_POOL);
        return NULL;
    }
    ctx->req_free = req->next_free;
    req->kind = kind;
    req->status = STRATA_OK;
    req->clock = 0;
    req->outstanding = 0;
    req->ntensors = 0;
    atomic_store(&req->done, 0);
    return req;
}

static void eng_req_put(strata_request_t *req)
{
    strata_ctx_t *ctx = req->ctx;
    req->next_free = ctx->req_free;
    ctx->req_free = req;
}

static strata_status_t eng_req_cond(void *arg)
{
    strata_request_t *req = arg;
    return atomic_load_explicit(&req->done, memory_order_acquire)
               ? STRATA_OK
               : STRATA_ERR_AGAIN;
}

static const char *eng_req_what(const strata_request_t *req, char *buf,
                                size_t len)
{
    static const char *const what[] = {"push", "pull", "operation"};
    snprintf(buf, len, "%s", what[req->kind]);
    if (req->kind == ENG_REQ_PULL)
        snprintf(buf, len, "pull of clock %lld", (long long)req->clock);
    return buf;
}

/* Waits, logging a timeout; the request stays pending then. */
static strata_status_t eng_req_wait(strata_request_t *req, int timeout_ms)
{
    strata_ctx_t *ctx = req->ctx;
    if (timeout_ms < 0)
        timeout_ms = ctx->timeout_ms;
    strata_status_t st;
    if (req->kind == ENG_REQ_PULL)
        st = util_gate_wait(eng_worker_pull_gate(ctx), req->clock, timeout_ms);
    else if ((st = util_waitq_wait(&ctx->reqq, eng_req_cond, req,
                                   timeout_ms)) == STRATA_OK)
        st = req->status;
    if (st == STRATA_ERR_TIMEOUT && timeout_ms > 0) {
        char what[64];
        util_error("strata_wait: the %s did not complete within %d ms",
                   eng_req_what(req, what, sizeof(what)), timeout_ms);
    }
    return st;
}

/* Submit a command and wait for it. */
static strata_status_t eng_run(strata_ctx_t *ctx, eng_cmd_t *cmd,
                               int timeout_ms)
{
    cmd->req = eng_req_get(ctx, ENG_REQ_CMD);
    if (!cmd->req)
        return STRATA_ERR_AGAIN;
    strata_status_t st = eng_cmd_submit(ctx, cmd);
    if (st == STRATA_OK)
        st = eng_req_wait(cmd->req, timeout_ms);
    if (st == STRATA_ERR_TIMEOUT)
        eng_req_abandon(cmd->req);
    else
        eng_req_put(cmd->req);
    return st;
}

strata_status_t strata_wait(strata_request_t **req, int timeout_ms)
{
    if (!req || !*req) {
        util_error("strata_wait: no request given");
        return STRATA_ERR_INVALID;
    }
    strata_status_t st = eng_req_wait(*req, timeout_ms);
    if (st != STRATA_ERR_TIMEOUT) {
        eng_req_put(*req);
        *req = NULL;
    }
    return st;
}

strata_status_t strata_test(strata_request_t **req, int *done_out)
{
    if (!req || !*req || !done_out) {
        util_error("strata_test: no request or no done_out given");
        return STRATA_ERR_INVALID;
    }
    strata_request_t *r = *req;
    strata_status_t st;
    bool done;
    if (r->kind == ENG_REQ_PULL) {
        st = util_gate_wait(eng_worker_pull_gate(r->ctx), r->clock, 0);
        done = st != STRATA_ERR_TIMEOUT;
    } else {
        done = eng_req_cond(r) == STRATA_OK;
        st = r->status;
    }
    *done_out = done;
    if (!done)
        return STRATA_OK;
    eng_req_put(r);
    *req = NULL;
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
     * workers live; a dead one fails the gate within STRATA_TIMEOUT_MS. */
    do
        st = util_gate_wait(&ctx->served, 1, ctx->timeout_ms);
    while (st == STRATA_ERR_TIMEOUT);
    return st;
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
    if (ctx->api_pushed_at) {
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
    if (st != STRATA_OK || ctx->api_pushed_at)
        return st;
    uint32_t nt = eng_worker_ntensors(ctx);
    int64_t *pushed_at = util_malloc(sizeof(int64_t) * (nt ? nt : 1));
    if (!pushed_at)
        return STRATA_ERR_NOMEM;
    for (uint32_t i = 0; i < nt; i++)
        pushed_at[i] = -1;
    eng_cmd_t cmd = {.type = ENG_CMD_COMMIT};
    st = eng_run(ctx, &cmd, ctx->timeout_ms);
    if (st != STRATA_OK) {
        util_free(pushed_at);
        return st;
    }
    ctx->api_pushed_at = pushed_at;
    ctx->api_step_end_ns = util_now_ns();
    return ctx->policy->ops->rounds ? eng_rounds_create(ctx) : STRATA_OK;
}

/* ---- data ---- */

static strata_status_t eng_push_args(strata_ctx_t *ctx, strata_request_t *req,
                                     const int *tensors, size_t n)
{
    uint32_t nt = eng_worker_ntensors(ctx);
    if (n > nt || (n > 0 && !tensors)) {
        util_error("strata_push: %zu tensors given, %u registered", n, nt);
        return STRATA_ERR_INVALID;
    }
    if (n > 0 && !req->tensors &&
        !(req->tensors = util_malloc(sizeof(uint32_t) * nt)))
        return STRATA_ERR_NOMEM;
    int64_t c = ctx->api_clock;
    for (size_t i = 0; i < n; i++) {
        if (tensors[i] < 0 || (uint32_t)tensors[i] >= nt) {
            util_error("strata_push: tensor id %d is not registered (0..%u)",
                       tensors[i], nt - 1);
            return STRATA_ERR_INVALID;
        }
        if (ctx->api_pushed_at[tensors[i]] == c) {
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
    if (n == 0 && ctx->api_npushed > 0) {
        util_error("strata_push of every tensor: %u of them were already "
                   "pushed in clock %lld",
                   ctx->api_npushed, (long long)c);
        return STRATA_ERR_STATE;
    }
    req->ntensors = (uint32_t)n;
    return STRATA_OK;
}

/* The clock, as the application thread counts it: it advances when every
 * tensor has been pushed. */
static void eng_push_count(strata_ctx_t *ctx, const strata_request_t *req)
{
    uint32_t nt = eng_worker_ntensors(ctx);
    uint32_t n = req->ntensors ? req->ntensors : nt;
    for (uint32_t i = 0; i < n; i++)
        ctx->api_pushed_at[req->ntensors ? req->tensors[i] : i] =
            ctx->api_clock;
    ctx->api_npushed += n;
    if (ctx->api_npushed == nt) {
        ctx->api_npushed = 0;
        ctx->api_clock++;
        atomic_store_explicit(&ctx->clock, ctx->api_clock,
                              memory_order_relaxed);
    }
}

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
    if (st == STRATA_OK && ctx->policy->ops->rounds && !ctx->api_in_round) {
        util_error("strata_push: STRATA_POLICY=%s workers train locally and "
                   "call strata_round_ready and strata_round_sync",
                   ctx->policy->ops->name);
        st = STRATA_ERR_STATE;
    }
    if (st != STRATA_OK)
        return st;
    strata_request_t *req = eng_req_get(ctx, ENG_REQ_PUSH);
    if (!req)
        return STRATA_ERR_AGAIN;
    st = eng_push_args(ctx, req, tensors, ntensors);
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
    int64_t now = strata_clock(ctx);
    if (clock < 0 || clock > now) {
        util_error("strata_pull: clock %lld is not in [0, %lld], the clocks "
                   "pushed so far",
                   (long long)clock, (long long)now);
        return STRATA_ERR_INVALID;
    }
    strata_request_t *req = eng_req_get(ctx, ENG_REQ_PULL);
    if (!req)
        return STRATA_ERR_AGAIN;
    req->clock = clock;
    *req_out = req;
    return STRATA_OK;
}

strata_status_t strata_step(strata_ctx_t *ctx)
{
    strata_request_t *push, *pull;
    if (ctx && ctx->api_pushed_at) /* the step's computation (GSSP speed) */
        ctx->api_compute_ns += util_now_ns() - ctx->api_step_end_ns;
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
    ctx->api_step_end_ns = util_now_ns();
    return st != STRATA_OK ? st : pst;
}

/* ---- metrics ---- */

strata_status_t strata_metrics(strata_ctx_t *ctx, strata_metrics_t *m_out)
{
    if (!ctx || !m_out) {
        util_error("strata_metrics: ctx and m_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    eng_metrics_read(ctx, m_out);
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
