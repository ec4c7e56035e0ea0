/*
 * What an aggregator does with a group's gradients for one partition, as an
 * ops table chosen by STRATA_OPTIMIZER:
 *   sgd  the model (the out buffer, in the tensors' dtype) takes an SGD step
 *        with momentum and weight decay on the scaled sum; without momentum
 *        and weight decay this is one pass: out += -lr * scale * sum
 *   sum  out = sum: workers receive the reduced gradients themselves
 * Round-based policies (ESync, FedAvg) add a delta-averaging entry.
 * Every kernel comes from agg/ and runs on the aggregator's reduction pool.
 */
#ifndef STRATA_ENGINE_UPDATE_H
#define STRATA_ENGINE_UPDATE_H

#include <stddef.h>

#include <strata/strata.h>
#include <strata/strata_agg.h>

#include "engine/config.h"

typedef struct eng_update {
    const struct eng_update_ops *ops;
    double lr, momentum, weight_decay;
    double scale; /* the policy's factor on a group's sum */
    strata_reduce_pool_t *pool;
    void *scratch; /* a partition's worth, for the sum before an SGD step */
} eng_update_t;

typedef struct eng_update_ops {
    const char *name;
    /* Whether partitions of this dtype can be updated (logged if not). */
    strata_status_t (*check)(const eng_update_t *u, strata_dtype_t dtype,
                             const char *tensor);
    /* Whether the rule keeps state beyond out (momentum buffers, in fp32). */
    int needs_momentum;
    strata_status_t (*apply)(const eng_update_t *u, strata_dtype_t dtype,
                             void *out, float *momentum,
                             const void *const *srcs, size_t nsrc,
                             size_t count);
} eng_update_ops_t;

/* From STRATA_OPTIMIZER, STRATA_LR, STRATA_MOMENTUM, STRATA_WEIGHT_DECAY. */
void eng_update_init(eng_update_t *u, const eng_config_t *cfg, double scale);

/* dst (=, or += when acc) scale * sum of nsrc sources, any number of them,
 * on the pool. */
strata_status_t eng_reduce_many(strata_reduce_pool_t *pool,
                                strata_dtype_t dtype, void *dst,
                                const void *const *srcs, size_t nsrc,
                                size_t count, double scale, int acc);

#endif /* STRATA_ENGINE_UPDATE_H */
