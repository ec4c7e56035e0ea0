/* Every policy as a configuration of the group/staleness mechanism. */
#include "engine/policy.h"

#include <string.h>

#include "engine/grouping.h"
#include "util/alloc.h"
#include "util/log.h"

static strata_status_t eng_bsp_setup(eng_policy_t *p, const eng_config_t *cfg)
{
    (void)cfg;
    p->ngroups = 1;
    p->intra_staleness = 0;
    p->inter_staleness = 0;
    return STRATA_OK;
}

/* One group per worker: a worker's push is its group's whole clock. */
static void eng_group_per_worker(eng_policy_t *p)
{
    p->ngroups = p->nworkers;
    for (uint32_t w = 0; w < p->nworkers; w++)
        p->group_of[w] = w;
    p->intra_staleness = 0; /* a worker always sees its own updates */
}

static strata_status_t eng_ssp_setup(eng_policy_t *p, const eng_config_t *cfg)
{
    eng_group_per_worker(p);
    p->inter_staleness = eng_config_int(cfg, ENG_CFG_STALENESS);
    return STRATA_OK;
}

static strata_status_t eng_asp_setup(eng_policy_t *p, const eng_config_t *cfg)
{
    (void)cfg;
    eng_group_per_worker(p);
    p->inter_staleness = INT64_MAX;
    return STRATA_OK;
}

/* Speed groups: the grouping's slots and its initial assignment (manual
 * groups, or everyone in group 0 until the first measurements), which every
 * rank computes alike from the shared settings. */
static strata_status_t eng_gssp_setup(eng_policy_t *p, const eng_config_t *cfg)
{
    eng_grouping_params_t gp;
    eng_grouping_params_from_config(cfg, p->nworkers, &gp);
    eng_grouping_t *g;
    strata_status_t st = eng_grouping_create(&gp, &g);
    if (st != STRATA_OK)
        return st;
    p->ngroups = eng_grouping_capacity(g);
    memcpy(p->group_of, eng_grouping_assignment(g),
           sizeof(uint32_t) * p->nworkers);
    eng_grouping_destroy(g);
    p->intra_staleness = eng_config_int(cfg, ENG_CFG_INTRA_STALENESS);
    p->inter_staleness = eng_config_int(cfg, ENG_CFG_INTER_STALENESS);
    p->apply_on_arrival = p->intra_staleness > 0;
    /* STRATA_GSSP_SCALE's choices are world|group. */
    p->scale_by_group = eng_config_int(cfg, ENG_CFG_GSSP_SCALE) == 1;
    p->gdtopk = eng_config_int(cfg, ENG_CFG_GDTOPK) != 0;
    p->flush_epochs = (uint32_t)eng_config_int(cfg, ENG_CFG_TOPK_FLUSH_EPOCHS);
    p->probe_steps = (uint32_t)eng_config_int(cfg, ENG_CFG_GSSP_PROBE_STEPS);
    return STRATA_OK;
}

/* Rounds: one synchronous group whose clock is the round. */
static strata_status_t eng_rounds_setup(eng_policy_t *p,
                                        const eng_config_t *cfg)
{
    eng_bsp_setup(p, cfg);
    /* STRATA_ESYNC_WEIGHTING's choices are equal|steps. */
    p->weight_by_steps = eng_config_int(cfg, ENG_CFG_ESYNC_WEIGHTING) == 1;
    p->global_lr = eng_config_double(cfg, ENG_CFG_ESYNC_GLOBAL_LR);
    /* fedavg: STRATA_FEDAVG_STEPS local steps per round; esync: the State
     * Server ends each. */
    if (!p->ops->state_server)
        p->round_steps = (uint32_t)eng_config_int(cfg, ENG_CFG_FEDAVG_STEPS);
    return STRATA_OK;
}

/* Gradient policies: 1/N of all workers, so that a full synchronous clock
 * applies the mean gradient; see eng_policy_scale. */
static double eng_grad_scale(const eng_policy_t *p, uint32_t live,
                             uint32_t group_size, size_t n, uint64_t weight,
                             uint64_t staleness)
{
    (void)n;
    (void)weight;
    if (p->sum_only)
        return 1.0;
    uint32_t d = p->scale_by_group && group_size > 0 ? group_size : live;
    double s = 1.0 / (double)(d > 0 ? d : 1);
    if (p->inverse_lr && staleness > 1)
        s /= (double)staleness;
    return s;
}

/* Round policies: the mean of the deltas, times the global rate. */
static double eng_rounds_scale(const eng_policy_t *p, uint32_t live,
                               uint32_t group_size, size_t n, uint64_t weight,
                               uint64_t staleness)
{
    (void)live;
    (void)group_size;
    (void)staleness;
    double d = p->weight_by_steps ? (double)weight : (double)n;
    return d > 0 ? p->global_lr / d : 0;
}

/* Each policy: its groups and bounds, its scale, and what each role does
 * under it beyond them. */
static const eng_policy_ops_t eng_policies[] = {
    {.name = "bsp", .setup = eng_bsp_setup, .scale = eng_grad_scale},
    {.name = "ssp", .setup = eng_ssp_setup, .scale = eng_grad_scale},
    {.name = "asp", .setup = eng_asp_setup, .scale = eng_grad_scale},
    {.name = "gssp",
     .setup = eng_gssp_setup,
     .scale = eng_grad_scale,
     .coord = &eng_coord_gssp,
     .worker = &eng_worker_gssp,
     .agg = &eng_agg_gssp},
    {.name = "esync",
     .setup = eng_rounds_setup,
     .scale = eng_rounds_scale,
     .rounds = true,
     .state_server = true,
     .coord = &eng_coord_esync,
     .worker = &eng_worker_rounds,
     .agg = &eng_agg_rounds},
    {.name = "fedavg",
     .setup = eng_rounds_setup,
     .scale = eng_rounds_scale,
     .rounds = true,
     .worker = &eng_worker_rounds,
     .agg = &eng_agg_rounds},
};

/* The choices of STRATA_POLICY and STRATA_OPTIMIZER, in config_keys.def's
 * order. */
static const char *const eng_policy_names[] = {"bsp",  "ssp",   "asp",
                                               "gssp", "esync", "fedavg"};
enum { ENG_OPTIMIZER_SGD, ENG_OPTIMIZER_SUM };

/* Settings that contradict the policy, logged naming them. */
static strata_status_t eng_policy_check(const eng_config_t *cfg,
                                        const eng_policy_ops_t *ops)
{
    if (eng_config_int(cfg, ENG_CFG_OPTIMIZER) == ENG_OPTIMIZER_SUM &&
        ops != &eng_policies[0]) {
        util_error("STRATA_OPTIMIZER=sum needs STRATA_POLICY=bsp: the sum "
                   "workers receive is that of one clock of every worker, "
                   "which %s does not wait for",
                   ops->name);
        return STRATA_ERR_CONFIG;
    }
    if (eng_config_int(cfg, ENG_CFG_GDTOPK) && ops->setup != eng_gssp_setup) {
        util_error("STRATA_GDTOPK=1 needs STRATA_POLICY=gssp (its ratios "
                   "follow the speed rank of each group), not %s",
                   ops->name);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

strata_status_t eng_policy_create(const eng_config_t *cfg, uint32_t nworkers,
                                  eng_policy_t **policy_out)
{
    int64_t idx = eng_config_int(cfg, ENG_CFG_POLICY);
    const char *name = idx >= 0 && idx < 6 ? eng_policy_names[idx] : "?";
    const eng_policy_ops_t *ops = NULL;
    for (size_t i = 0; i < sizeof(eng_policies) / sizeof(*eng_policies); i++)
        if (strcmp(eng_policies[i].name, name) == 0)
            ops = &eng_policies[i];
    if (!ops) {
        util_error("STRATA_POLICY=%s is not available in this build", name);
        return STRATA_ERR_CONFIG;
    }
    strata_status_t st = eng_policy_check(cfg, ops);
    if (st != STRATA_OK)
        return st;
    eng_policy_t *p = util_calloc(1, sizeof(*p));
    if (p)
        p->group_of = util_calloc(nworkers ? nworkers : 1, sizeof(uint32_t));
    if (!p || !p->group_of) {
        util_error("out of memory setting up policy %s for %u workers", name,
                   nworkers);
        eng_policy_free(p);
        return STRATA_ERR_NOMEM;
    }
    p->ops = ops;
    p->nworkers = nworkers;
    p->sum_only = eng_config_int(cfg, ENG_CFG_OPTIMIZER) == ENG_OPTIMIZER_SUM;
    /* STRATA_STALENESS_LR's choices are none|inverse. */
    p->inverse_lr = eng_config_int(cfg, ENG_CFG_STALENESS_LR) == 1;
    st = ops->setup(p, cfg);
    if (st != STRATA_OK) {
        eng_policy_free(p);
        return st;
    }
    *policy_out = p;
    return STRATA_OK;
}

void eng_policy_free(eng_policy_t *p)
{
    if (!p)
        return;
    util_free(p->group_of);
    util_free(p);
}

uint32_t eng_policy_group_size(const eng_policy_t *p, uint32_t group)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < p->nworkers; w++)
        n += p->group_of[w] == group;
    return n;
}
