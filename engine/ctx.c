/*
 * A context: its settings, the rank's place in the job and its roles (the
 * coordinator on rank 0, then worker or aggregator), and their teardown.
 * strata_init_with then joins the job (boot.c) and starts the progress
 * thread (loop.c).
 */
#include <stdio.h>
#include <string.h>

#include "agg/agg.h"
#include "engine/engine.h"
#include "util/alloc.h"
#include "util/log.h"

void eng_ctx_free(strata_ctx_t *ctx)
{
    /* The coordinator of a failed job first tells the others why (a
     * little while at most: they may be gone). */
    if (ctx->coord && eng_fatal(ctx) != STRATA_OK)
        util_gate_wait(&ctx->flushed, 1, 1000);
    eng_loop_stop(ctx);
    eng_worker_free(ctx);
    eng_agg_free(ctx);
    eng_coord_free(ctx);
    eng_boot_free(ctx);
    eng_live_free(ctx);
    for (int i = 0; i < ENG_NPROV; i++)
        if (ctx->data_tp[i]) {
            if (ctx->data_listener[i])
                tp_listener_close(ctx->data_listener[i]);
            tp_close(ctx->data_tp[i]);
        }
    if (ctx->coord_tp)
        tp_close(ctx->coord_tp);
    eng_req_pool_free(ctx);
    eng_policy_free(ctx->policy);
    eng_config_free(ctx->cfg);
    util_free(atomic_load(&ctx->report));
    util_free(ctx);
}

static strata_status_t eng_ctx_config(const char *const *settings,
                                      eng_config_t **cfg_out)
{
    eng_config_t *cfg = NULL; /* eng_config_load sets it only on success */
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
    ctx->join_timeout_ms = (int)eng_config_int(cfg, ENG_CFG_JOIN_TIMEOUT_MS);
    ctx->spin_ns = (uint64_t)eng_config_int(cfg, ENG_CFG_SPIN_US) * 1000u;
    ctx->join_timeout_name = "STRATA_JOIN_TIMEOUT_MS";
    if (ctx->join_timeout_ms == 0) {
        ctx->join_timeout_ms = ctx->timeout_ms;
        ctx->join_timeout_name = "STRATA_TIMEOUT_MS";
    }
    if (eng_config_tp_params(cfg, &ctx->tp_params) != STRATA_OK) {
        eng_ctx_free(ctx);
        return STRATA_ERR_INVALID;
    }
    util_gate_init(&ctx->joined, 0);
    util_gate_init(&ctx->committed, 0);
    util_gate_init(&ctx->served, 0);
    util_gate_init(&ctx->flushed, 0);
    util_waitq_init(&ctx->reqq);
    if (eng_req_pool_create(ctx) != STRATA_OK) {
        eng_ctx_free(ctx);
        return STRATA_ERR_NOMEM;
    }
    *ctx_out = ctx;
    return STRATA_OK;
}

/* An aggregator's kernels, from its configuration (not the environment
 * only, as a plain kernel call would read them). */
static strata_status_t eng_ctx_kernels(strata_ctx_t *ctx)
{
    agg_params_t params;
    strata_status_t st = agg_params_read(ctx->cfg, &params);
    return st == STRATA_OK ? agg_init(&params) : st;
}

/* STRATA_SHARDS: at least one shard per aggregator. Checkpoints and
 * protection cover one shard per aggregator (its file, its stripes). */
static strata_status_t eng_ctx_shards(strata_ctx_t *ctx)
{
    int64_t s = eng_config_int(ctx->cfg, ENG_CFG_SHARDS);
    ctx->nshards = (uint32_t)(s ? s : ctx->naggs);
    if (s == 0)
        return STRATA_OK;
    if (s < ctx->naggs) {
        util_error("STRATA_SHARDS=%lld is fewer than the %d aggregators "
                   "(STRATA_NUM_AGGREGATORS): each holds at least one shard",
                   (long long)s, ctx->naggs);
        return STRATA_ERR_CONFIG;
    }
    const char *other = NULL;
    if (s != ctx->naggs && eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY))
        other = "STRATA_PROTECT_EVERY";
    if (s != ctx->naggs && eng_config_str(ctx->cfg, ENG_CFG_CHECKPOINT_DIR)[0])
        other = "STRATA_CHECKPOINT_DIR";
    if (other) {
        util_error("STRATA_SHARDS=%lld on %d aggregators with %s: checkpoints "
                   "and protection cover one shard per aggregator (leave "
                   "STRATA_SHARDS unset or at %d)",
                   (long long)s, ctx->naggs, other, ctx->naggs);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

/* STRATA_SPARE (strata-agg --spare): an aggregator rank that waits for a
 * shard to take over, which only protection makes possible. */
static strata_status_t eng_ctx_spare(const strata_ctx_t *ctx)
{
    if (!eng_config_int(ctx->cfg, ENG_CFG_SPARE))
        return STRATA_OK;
    if (ctx->role != STRATA_ROLE_AGGREGATOR) {
        util_error("STRATA_SPARE=1 (strata-agg --spare) on rank %d, a "
                   "worker (ranks 0..%d aggregate): only an aggregator rank "
                   "can be a spare",
                   ctx->rank, ctx->naggs - 1);
        return STRATA_ERR_CONFIG;
    }
    if (!eng_config_int(ctx->cfg, ENG_CFG_PROTECT_EVERY)) {
        util_error("aggregator rank %d is a spare (strata-agg --spare, "
                   "STRATA_SPARE=1) but STRATA_PROTECT_EVERY is 0: a spare "
                   "takes over a lost shard rebuilt from its protection",
                   ctx->rank);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

static strata_status_t eng_ctx_roles(strata_ctx_t *ctx)
{
    strata_status_t st = eng_launch_detect(ctx->cfg, &ctx->launch);
    if (st != STRATA_OK)
        return st;
    ctx->rank = ctx->launch.rank;
    ctx->tp_params.route_to = ctx->launch.coord; /* picks the interface */
    ctx->size = ctx->launch.size;
    ctx->naggs = ctx->launch.num_aggregators;
    ctx->nworkers = ctx->size - ctx->naggs;
    ctx->local_rank = ctx->launch.local_rank;
    util_log_set_rank(ctx->rank);
    bool agg = eng_launch_is_aggregator(&ctx->launch, ctx->rank);
    ctx->role = agg ? STRATA_ROLE_AGGREGATOR : STRATA_ROLE_WORKER;
    ctx->worker_index = agg ? -1 : ctx->rank - ctx->naggs;
    st = eng_ctx_shards(ctx);
    if (st == STRATA_OK)
        st = eng_ctx_spare(ctx);
    if (st == STRATA_OK)
        st = eng_fd_budget(ctx);
    if (st == STRATA_OK)
        st = eng_live_create(ctx);
    if (st != STRATA_OK)
        return st;
    st = eng_policy_create(ctx->cfg, (uint32_t)ctx->nworkers, &ctx->policy);
    if (st == STRATA_OK)
        atomic_init(&ctx->group,
                    agg ? -1 : (int)ctx->policy->group_of[ctx->worker_index]);
    if (st == STRATA_OK && agg)
        st = eng_ctx_kernels(ctx);
    if (st == STRATA_OK && ctx->rank == 0)
        st = eng_coord_create(ctx);
    if (st == STRATA_OK)
        st = agg ? eng_agg_create(ctx) : eng_worker_create(ctx);
    return st;
}

strata_status_t eng_ctx_create(const char *const *settings,
                               strata_ctx_t **ctx_out)
{
    eng_config_t *cfg;
    strata_ctx_t *ctx;
    strata_status_t st = eng_ctx_config(settings, &cfg);
    if (st == STRATA_OK)
        st = eng_ctx_new(cfg, &ctx);
    if (st != STRATA_OK)
        return st;
    st = eng_ctx_roles(ctx);
    if (st != STRATA_OK) {
        eng_ctx_free(ctx);
        return st;
    }
    *ctx_out = ctx;
    return STRATA_OK;
}
