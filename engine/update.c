/* The aggregator's update rules: SGD on the model, the plain sum, or the mean
 * of model deltas; over dense and sparse sources. */
#include "engine/update.h"

#include <stdbool.h>
#include <string.h>

#include "util/log.h"

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

/* The dense sources of a call, gathered into u->dense; how many. */
static size_t eng_dense_of(const eng_update_t *u, const eng_src_t *srcs,
                           size_t nsrc)
{
    size_t n = 0;
    for (size_t i = 0; i < nsrc; i++)
        if (srcs[i].nsparse == ENG_SRC_DENSE)
            u->dense[n++] = srcs[i].p;
    return n;
}

/* dst (=, or += when acc) scale * the sum of every source: dense ones
 * reduced in one pass, sparse ones scatter-added. */
static strata_status_t eng_sum_into(const eng_update_t *u, strata_dtype_t dtype,
                                    void *dst, const eng_src_t *srcs,
                                    size_t nsrc, size_t count, double scale,
                                    int acc)
{
    size_t ndense = eng_dense_of(u, srcs, nsrc);
    strata_status_t st = STRATA_OK;
    if (ndense > 0)
        st = eng_reduce_many(u->pool, dtype, dst, u->dense, ndense, count,
                             scale, acc);
    else if (!acc)
        memset(dst, 0, count * strata_dtype_size(dtype));
    for (size_t i = 0; st == STRATA_OK && i < nsrc; i++)
        if (srcs[i].nsparse != ENG_SRC_DENSE)
            st = strata_sparse_scatter_add(dtype, dst, count, srcs[i].p,
                                           srcs[i].nsparse, (float)scale);
    return st;
}

static strata_status_t eng_sgd_check(const eng_update_t *u,
                                     strata_dtype_t dtype, const char *tensor)
{
    if (dtype != STRATA_FP64) /* fp32, or 16-bit with a master copy */
        return STRATA_OK;
    if (dtype == STRATA_FP64 && u->momentum == 0 && u->weight_decay == 0)
        return STRATA_OK;
    util_error("tensor '%s' is fp64: the aggregators' SGD keeps fp64 models "
               "only without momentum or weight decay (use fp32, or "
               "STRATA_OPTIMIZER=sum and update on the workers)",
               tensor);
    return STRATA_ERR_UNSUPPORTED;
}

/* The sum of a 16-bit partition's sources in fp32 (scratch): dense ones
 * widened, sparse ones scatter-added. */
static strata_status_t eng_sum_f32(const eng_update_t *u, strata_dtype_t dtype,
                                   const eng_src_t *srcs, size_t nsrc,
                                   size_t count)
{
    float *sum = u->scratch;
    memset(sum, 0, count * sizeof(float));
    strata_status_t st = STRATA_OK;
    for (size_t i = 0; st == STRATA_OK && i < nsrc; i++)
        st = srcs[i].nsparse == ENG_SRC_DENSE
                 ? strata_axpy(dtype, sum, srcs[i].p, count, 1.0f)
                 : strata_sparse_scatter_add(STRATA_FP32, sum, count, srcs[i].p,
                                             srcs[i].nsparse, 1.0f);
    return st;
}

/* SGD on a 16-bit partition's fp32 master copy, then out = the master
 * rounded. */
static strata_status_t
eng_sgd_master(const eng_update_t *u, const strata_sgd_t *sgd,
               strata_dtype_t dtype, void *out, float *master, float *momentum,
               const eng_src_t *srcs, size_t nsrc, size_t count)
{
    size_t ndense = eng_dense_of(u, srcs, nsrc);
    strata_status_t st;
    if (ndense == nsrc && nsrc <= STRATA_REDUCE_MAX_SOURCES) {
        st = strata_sgd_update_sum_mt(u->pool, sgd, dtype, master, momentum,
                                      u->dense, nsrc, count);
    } else {
        st = eng_sum_f32(u, dtype, srcs, nsrc, count);
        if (st == STRATA_OK)
            st = strata_sgd_update(sgd, STRATA_FP32, master, momentum,
                                   u->scratch, count);
    }
    return st == STRATA_OK ? strata_master_store(dtype, out, master, count)
                           : st;
}

static strata_status_t eng_sgd_apply(const eng_update_t *u,
                                     strata_dtype_t dtype, void *out,
                                     float *master, float *momentum,
                                     const eng_src_t *srcs, size_t nsrc,
                                     size_t count, double scale)
{
    strata_sgd_t sgd = {.lr = (float)u->lr,
                        .momentum = (float)u->momentum,
                        .weight_decay = (float)u->weight_decay,
                        .grad_scale = (float)scale};
    if (master)
        return eng_sgd_master(u, &sgd, dtype, out, master, momentum, srcs, nsrc,
                              count);
    if (u->momentum == 0 && u->weight_decay == 0)
        return eng_sum_into(u, dtype, out, srcs, nsrc, count, -u->lr * scale,
                            1);
    size_t ndense = eng_dense_of(u, srcs, nsrc);
    if (ndense == nsrc && nsrc <= STRATA_REDUCE_MAX_SOURCES)
        /* sum and step in one pass */
        return strata_sgd_update_sum_mt(u->pool, &sgd, dtype, out, momentum,
                                        u->dense, nsrc, count);
    strata_status_t st =
        eng_sum_into(u, dtype, u->scratch, srcs, nsrc, count, 1.0, 0);
    if (st != STRATA_OK)
        return st;
    return strata_sgd_update(&sgd, dtype, out, momentum, u->scratch, count);
}

static strata_status_t eng_any_check(const eng_update_t *u,
                                     strata_dtype_t dtype, const char *tensor)
{
    (void)u, (void)dtype, (void)tensor;
    return STRATA_OK;
}

static strata_status_t eng_sum_apply(const eng_update_t *u,
                                     strata_dtype_t dtype, void *out,
                                     float *master, float *momentum,
                                     const eng_src_t *srcs, size_t nsrc,
                                     size_t count, double scale)
{
    (void)master, (void)momentum;
    return eng_sum_into(u, dtype, out, srcs, nsrc, count, scale, 0);
}

static strata_status_t eng_delta_check(const eng_update_t *u,
                                       strata_dtype_t dtype, const char *tensor)
{
    (void)u;
    if (dtype == STRATA_FP32 || dtype == STRATA_FP64)
        return STRATA_OK;
    util_error("tensor '%s' is %s: model deltas are averaged on fp32 and fp64 "
               "models only",
               tensor, strata_dtype_name(dtype));
    return STRATA_ERR_UNSUPPORTED;
}

static strata_status_t eng_delta_apply(const eng_update_t *u,
                                       strata_dtype_t dtype, void *out,
                                       float *master, float *momentum,
                                       const eng_src_t *srcs, size_t nsrc,
                                       size_t count, double scale)
{
    (void)master, (void)momentum;
    return eng_sum_into(u, dtype, out, srcs, nsrc, count, scale, 1);
}

static const eng_update_ops_t eng_update_sgd = {"sgd", eng_sgd_check, 1,
                                                eng_sgd_apply};
static const eng_update_ops_t eng_update_sum = {"sum", eng_any_check, 0,
                                                eng_sum_apply};
static const eng_update_ops_t eng_update_delta = {"delta", eng_delta_check, 0,
                                                  eng_delta_apply};

void eng_update_init(eng_update_t *u, const eng_config_t *cfg, int rounds,
                     const void **dense)
{
    /* STRATA_OPTIMIZER's choices are sgd|sum. */
    bool sum = eng_config_int(cfg, ENG_CFG_OPTIMIZER) == 1;
    *u = (eng_update_t){
        .ops = rounds ? &eng_update_delta
                      : (sum ? &eng_update_sum : &eng_update_sgd),
        .lr = eng_config_double(cfg, ENG_CFG_LR),
        .momentum = eng_config_double(cfg, ENG_CFG_MOMENTUM),
        .weight_decay = eng_config_double(cfg, ENG_CFG_WEIGHT_DECAY),
        .dense = dense,
    };
}
