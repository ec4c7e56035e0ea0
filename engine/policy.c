/* BSP, SSP and ASP as configurations of the group/staleness mechanism. */
#include "engine/policy.h"

#include <string.h>

#include "engine/alloc.h"
#include "engine/log.h"

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

static const eng_policy_ops_t eng_policies[] = {
    {"bsp", eng_bsp_setup},
    {"ssp", eng_ssp_setup},
    {"asp", eng_asp_setup},
};

/* The choices of STRATA_POLICY and STRATA_OPTIMIZER, in config_keys.def's
 * order. */
static const char *const eng_policy_names[] = {"bsp",  "ssp",   "asp",
                                               "gssp", "esync", "fedavg"};
enum { ENG_OPTIMIZER_SGD, ENG_OPTIMIZER_SUM };

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
        eng_error("STRATA_POLICY=%s is not available in this build (choose "
                  "bsp, ssp or asp)",
                  name);
        return STRATA_ERR_CONFIG;
    }
    int sum_only = eng_config_int(cfg, ENG_CFG_OPTIMIZER) == ENG_OPTIMIZER_SUM;
    if (sum_only && ops != &eng_policies[0]) {
        eng_error("STRATA_OPTIMIZER=sum needs STRATA_POLICY=bsp: the sum "
                  "workers receive is that of one clock of every worker, "
                  "which %s does not wait for",
                  name);
        return STRATA_ERR_CONFIG;
    }
    eng_policy_t *p = eng_calloc(1, sizeof(*p));
    if (p)
        p->group_of = eng_calloc(nworkers ? nworkers : 1, sizeof(uint32_t));
    if (!p || !p->group_of) {
        eng_error("out of memory setting up policy %s for %u workers", name,
                  nworkers);
        eng_policy_free(p);
        return STRATA_ERR_NOMEM;
    }
    p->ops = ops;
    p->nworkers = nworkers;
    p->sum_only = sum_only;
    strata_status_t st = ops->setup(p, cfg);
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
    eng_free(p->group_of);
    eng_free(p);
}

uint32_t eng_policy_group_size(const eng_policy_t *p, uint32_t group)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < p->nworkers; w++)
        n += p->group_of[w] == group;
    return n;
}

double eng_policy_grad_scale(const eng_policy_t *p)
{
    return p->sum_only ? 1.0 : 1.0 / (double)p->nworkers;
}
