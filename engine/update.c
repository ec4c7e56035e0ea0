/* The aggregator's update rules: SGD on the model, or the plain sum. */
#include "engine/update.h"

#include <stdbool.h>

#include "engine/log.h"

strata_status_t eng_reduce_many(strata_reduce_pool_t *pool,
                                strata_dtype_t dtype, void *dst,
                                const void *const *srcs, size_t nsrc,
                                size_t count, double scale, int acc)
{
    strata_status_t st = STRATA_OK;
    for (size_t i = 0; st == STRATA_OK && i < nsrc;
         i += STRATA_REDUCE_MAX_SOURCES) {
        size_t n = nsrc - i < STRATA_REDUCE_MAX_SOURCES
                       ? nsrc - i
                       : STRATA_REDUCE_MAX_SOURCES;
        st = acc || i > 0 ? strata_reduce_acc_mt(pool, dtype, dst, srcs + i, n,
                                                 count, scale)
                          : strata_reduce_mt(pool, dtype, dst, srcs + i, n,
                                             count, scale);
    }
    return st;
}

static strata_status_t eng_sgd_check(const eng_update_t *u,
                                     strata_dtype_t dtype, const char *tensor)
{
    if (dtype == STRATA_FP32)
        return STRATA_OK;
    if (dtype == STRATA_FP64 && u->momentum == 0 && u->weight_decay == 0)
        return STRATA_OK;
    eng_error("tensor '%s' is %s: the aggregators' SGD keeps %s models "
              "only %s (use fp32, or STRATA_OPTIMIZER=sum and update on the "
              "workers)",
              tensor, strata_dtype_name(dtype), strata_dtype_name(dtype),
              dtype == STRATA_FP64 ? "without momentum or weight decay"
                                   : "once an fp32 master copy exists");
    return STRATA_ERR_UNSUPPORTED;
}

static strata_status_t eng_sgd_apply(const eng_update_t *u,
                                     strata_dtype_t dtype, void *out,
                                     float *momentum, const void *const *srcs,
                                     size_t nsrc, size_t count)
{
    if (u->momentum == 0 && u->weight_decay == 0)
        return eng_reduce_many(u->pool, dtype, out, srcs, nsrc, count,
                               -u->lr * u->scale, 1);
    strata_sgd_t sgd = {.lr = (float)u->lr,
                        .momentum = (float)u->momentum,
                        .weight_decay = (float)u->weight_decay,
                        .grad_scale = (float)u->scale};
    if (nsrc <= STRATA_REDUCE_MAX_SOURCES) /* sum and step in one pass */
        return strata_sgd_update_sum_mt(u->pool, &sgd, dtype, out, momentum,
                                        srcs, nsrc, count);
    strata_status_t st =
        eng_reduce_many(u->pool, dtype, u->scratch, srcs, nsrc, count, 1.0, 0);
    if (st != STRATA_OK)
        return st;
    return strata_sgd_update(&sgd, dtype, out, momentum, u->scratch, count);
}

static strata_status_t eng_sum_check(const eng_update_t *u,
                                     strata_dtype_t dtype, const char *tensor)
{
    (void)u, (void)dtype, (void)tensor;
    return STRATA_OK;
}

static strata_status_t eng_sum_apply(const eng_update_t *u,
                                     strata_dtype_t dtype, void *out,
                                     float *momentum, const void *const *srcs,
                                     size_t nsrc, size_t count)
{
    (void)momentum;
    return eng_reduce_many(u->pool, dtype, out, srcs, nsrc, count, u->scale, 0);
}

static const eng_update_ops_t eng_update_sgd = {"sgd", eng_sgd_check, 1,
                                                eng_sgd_apply};
static const eng_update_ops_t eng_update_sum = {"sum", eng_sum_check, 0,
                                                eng_sum_apply};

void eng_update_init(eng_update_t *u, const eng_config_t *cfg, double scale)
{
    /* STRATA_OPTIMIZER's choices are sgd|sum. */
    bool sum = eng_config_int(cfg, ENG_CFG_OPTIMIZER) == 1;
    *u = (eng_update_t){
        .ops = sum ? &eng_update_sum : &eng_update_sgd,
        .lr = eng_config_double(cfg, ENG_CFG_LR),
        .momentum = eng_config_double(cfg, ENG_CFG_MOMENTUM),
        .weight_decay = eng_config_double(cfg, ENG_CFG_WEIGHT_DECAY),
        .scale = scale,
    };
}
