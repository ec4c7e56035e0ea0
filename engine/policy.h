/*
 * Synchronisation policies: configurations of one mechanism. Workers are
 * split into groups; at every clock the aggregators sum each group's
 * gradients once every live member has pushed them, apply the sum to the
 * global model, and advance the group's clock. The staleness tracker then
 * serves worker w of group g the model for clock c once
 *     clock(g) >= c - intra_staleness  and  min clock >= c - inter_staleness.
 * A policy chooses the groups, the two bounds, the scale of the summed
 * gradient and how the workers drive it:
 *     bsp     one group, bounds 0               (synchronous SGD)
 *     ssp     one group per worker, inter s     (STRATA_STALENESS)
 *     asp     one group per worker, inter inf
 *     gssp    speed groups (engine/grouping.h, regrouped at epoch
 *             boundaries), intra STRATA_INTRA_STALENESS (> 0: each push
 *             applied on arrival), inter STRATA_INTER_STALENESS; optionally
 *             GDTopK-sparsified pushes
 *     esync   rounds of model deltas, one group, bounds 0; the State Server
 *             (engine/state_server.h) says when a round ends
 *     fedavg  the same rounds, STRATA_FEDAVG_STEPS local steps each
 * Gradient policies are driven by strata_step (or push and pull); round
 * policies by strata_round_ready and strata_round_sync.
 */
#ifndef STRATA_ENGINE_POLICY_H
#define STRATA_ENGINE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"

typedef struct eng_policy eng_policy_t;
/* Each role's part of a policy: hooks its role calls where the policy does
 * more than set groups and bounds (declared with the role: engine/coord.h,
 * engine/worker.h, engine/aggregator.h). */
typedef struct eng_coord_policy eng_coord_policy_t;
typedef struct eng_worker_policy eng_worker_policy_t;
typedef struct eng_agg_policy eng_agg_policy_t;

typedef struct eng_policy_ops {
    const char *name;
    /* Groups and bounds at the start of the job (group_of is allocated, all
     * zero). */
    strata_status_t (*setup)(eng_policy_t *p, const eng_config_t *cfg);
    /* What a reduction is multiplied by: eng_policy_scale. */
    double (*scale)(const eng_policy_t *p, uint32_t live, uint32_t group_size,
                    size_t n, uint64_t weight, uint64_t staleness);
    /* Workers sync rounds of model deltas (strata_round_ready/_sync) rather
     * than step on gradients: the public calls that drive it. */
    bool rounds;
    /* Rounds end when the State Server says so (else after a fixed number
     * of local steps). */
    bool state_server;
    /* The coordinator's, the workers' and the aggregators' parts; NULL: the
     * role does nothing of its own under the policy. */
    const eng_coord_policy_t *coord;
    const eng_worker_policy_t *worker;
    const eng_agg_policy_t *agg;
} eng_policy_ops_t;

/* The roles' parts of the policies, each defined with its role. */
extern const eng_coord_policy_t eng_coord_gssp, eng_coord_esync;
extern const eng_worker_policy_t eng_worker_gssp, eng_worker_rounds;
extern const eng_agg_policy_t eng_agg_gssp, eng_agg_rounds;

struct eng_policy {
    const eng_policy_ops_t *ops;
    uint32_t nworkers;
    uint32_t ngroups;   /* group slots: the most groups there can be */
    uint32_t *group_of; /* [nworkers]: initial group of each worker index */
    int64_t intra_staleness, inter_staleness; /* INT64_MAX: unbounded */
    int sum_only; /* STRATA_OPTIMIZER=sum: the reduced sum is the result */
    bool apply_on_arrival; /* gssp with intra > 0: no per-clock sum */
    bool scale_by_group;   /* STRATA_GSSP_SCALE=group */
    bool inverse_lr;       /* STRATA_STALENESS_LR=inverse */
    bool gdtopk;           /* STRATA_GDTOPK=1 */
    uint32_t flush_epochs; /* STRATA_TOPK_FLUSH_EPOCHS */
    uint32_t probe_steps;  /* STRATA_GSSP_PROBE_STEPS */
    bool weight_by_steps;  /* STRATA_ESYNC_WEIGHTING=steps */
    double global_lr;      /* STRATA_ESYNC_GLOBAL_LR */
    uint32_t round_steps;  /* fedavg: local steps per round; 0: the State
                              Server ends rounds (esync) */
};

/* The policy STRATA_POLICY names, set up for nworkers workers. A policy that
 * is not available, or settings that contradict it, are STRATA_ERR_CONFIG
 * (logged naming the settings). */
strata_status_t eng_policy_create(const eng_config_t *cfg, uint32_t nworkers,
                                  eng_policy_t **policy_out);
void eng_policy_free(eng_policy_t *p);

/* Members of a group (at the start of the job). */
uint32_t eng_policy_group_size(const eng_policy_t *p, uint32_t group);

/*
 * What a reduction of n sources is multiplied by before the update:
 *  - gradient policies: 1/N of the live workers (`live`: those not dropped
 *    by the update's clock, engine/aggregator.h), so that a full
 *    synchronous clock
 *    applies the mean gradient (and an asynchronous push 1/N of its own, as
 *    the GSSP reference does); 1/group_size with STRATA_GSSP_SCALE=group; 1
 *    under STRATA_OPTIMIZER=sum. With STRATA_STALENESS_LR=inverse, divided
 *    by the update's staleness (when above 1).
 *  - round policies: lr_g / n, the mean of the n deltas (equal weights), or
 *    lr_g / weight when deltas come pre-multiplied by their local steps and
 *    weight is the sum of those steps.
 * weight is the sum of the sources' step counts (round policies weighted by
 * steps), else unused.
 */
static inline double eng_policy_scale(const eng_policy_t *p, uint32_t live,
                                      uint32_t group_size, size_t n,
                                      uint64_t weight, uint64_t staleness)
{
    return p->ops->scale(p, live, group_size, n, weight, staleness);
}

#endif /* STRATA_ENGINE_POLICY_H */
