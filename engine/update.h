/*
 * What an aggregator does with a group's gradients for one partition, as an
 * ops table chosen by the policy and STRATA_OPTIMIZER:
 *   sgd    the model (the out buffer, in the tensors' dtype) takes an SGD
 *          step with momentum and weight decay on the scaled sum; without
 *          momentum and weight decay this is one pass: out += -lr*scale*sum.
 *          An fp16 or bf16 model is an fp32 master copy that takes the step
 *          and is rounded into out after each (so that steps smaller than
 *          half a 16-bit ulp still add up)
 *   sum    out = scale * sum: workers receive the reduced gradients
 *   delta  (esync, fedavg) out += scale * sum of model deltas, where scale
 *          is lr_g over the number of deltas (or their total local steps)
 * A source is a dense partition, or (GDTopK) a list of (uint32 index, fp32
 * value) entries that are scatter-added. Every kernel comes from agg/ and
 * runs on the aggregator's reduction pool.
 */
#ifndef STRATA_ENGINE_UPDATE_H
#define STRATA_ENGINE_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>
#include <strata/strata_agg.h>

#include "engine/config.h"

/* nsparse of a dense source. */
#define ENG_SRC_DENSE UINT32_MAX

typedef struct eng_src {
    const void *p;
    uint32_t nsparse; /* entries of a sparse source; ENG_SRC_DENSE */
} eng_src_t;

typedef struct eng_update {
    const struct eng_update_ops *ops;
    double lr, momentum, weight_decay;
    strata_reduce_pool_t *pool;
    void *scratch; /* a partition's worth (in fp32 for 16-bit ones), for the
                      sum before an SGD step */
    const void **dense; /* [max sources]: the dense ones of a call */
} eng_update_t;

typedef struct eng_update_ops {
    const char *name;
    /* Whether partitions of this dtype can be updated (logged if not). */
    strata_status_t (*check)(const eng_update_t *u, strata_dtype_t dtype,
                             const char *tensor);
    /* Whether the rule keeps state beyond out in fp32: momentum buffers,
     * and master copies of fp16 and bf16 partitions. */
    int needs_momentum;
    /* master: the fp32 master copy of a 16-bit out, or NULL. */
    strata_status_t (*apply)(const eng_update_t *u, strata_dtype_t dtype,
                             void *out, float *master, float *momentum,
                             const eng_src_t *srcs, size_t nsrc, size_t count,
                             double scale);
} eng_update_ops_t;

/* From STRATA_OPTIMIZER, STRATA_LR, STRATA_MOMENTUM, STRATA_WEIGHT_DECAY;
 * `rounds` (esync, fedavg) chooses delta whatever the optimizer. dense is
 * an array of max_sources pointers the caller keeps. */
void eng_update_init(eng_update_t *u, const eng_config_t *cfg, int rounds,
                     const void **dense);

/* dst (=, or += when acc) scale * sum of nsrc dense sources, any number of
 * them, on the pool. */
strata_status_t eng_reduce_many(strata_reduce_pool_t *pool,
                                strata_dtype_t dtype, void *dst,
                                const void *const *srcs, size_t nsrc,
                                size_t count, double scale, int acc);

#endif /* STRATA_ENGINE_UPDATE_H */
