/*
 * Synchronisation policies: configurations of one mechanism. Workers are
 * split into groups; at every clock the aggregators sum each group's
 * gradients once every live member has pushed them, apply the sum to the
 * global model, and advance the group's clock. The staleness tracker then
 * serves worker w of group g the model for clock c once
 *     clock(g) >= c - intra_staleness  and  min clock >= c - inter_staleness.
 * A policy chooses the groups, the two bounds and the scale of the summed
 * gradient:
 *     bsp    one group, bounds 0               (synchronous SGD)
 *     ssp    one group per worker, inter s     (STRATA_STALENESS)
 *     asp    one group per worker, inter inf
 * GSSP (speed groups, regrouped at epoch boundaries), ESync and FedAvg (rounds
 * of model deltas) add ops to the same table.
 */
#ifndef STRATA_ENGINE_POLICY_H
#define STRATA_ENGINE_POLICY_H

#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"

typedef struct eng_policy eng_policy_t;

typedef struct eng_policy_ops {
    const char *name;
    /* Groups and bounds at the start of the job (group_of is allocated, all
     * zero). */
    strata_status_t (*setup)(eng_policy_t *p, const eng_config_t *cfg);
} eng_policy_ops_t;

struct eng_policy {
    const eng_policy_ops_t *ops;
    uint32_t nworkers;
    uint32_t ngroups;
    uint32_t *group_of; /* [nworkers]: group of each worker index */
    int64_t intra_staleness, inter_staleness; /* INT64_MAX: unbounded */
    int sum_only; /* STRATA_OPTIMIZER=sum: the reduced sum is the result */
};

/* The policy STRATA_POLICY names, set up for nworkers workers. A policy that
 * is not available, or settings that contradict it, are STRATA_ERR_CONFIG
 * (logged naming the settings). */
strata_status_t eng_policy_create(const eng_config_t *cfg, uint32_t nworkers,
                                  eng_policy_t **policy_out);
void eng_policy_free(eng_policy_t *p);

/* Members of a group (at the start of the job). */
uint32_t eng_policy_group_size(const eng_policy_t *p, uint32_t group);

/* What a group's summed gradient is multiplied by before the update: 1/N of
 * all workers, so that a full synchronous clock applies the mean gradient
 * (and an asynchronous push 1/N of its own, as the GSSP reference does); 1
 * under STRATA_OPTIMIZER=sum. */
double eng_policy_grad_scale(const eng_policy_t *p);

#endif /* STRATA_ENGINE_POLICY_H */
