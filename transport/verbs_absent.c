/*
 * The verbs provider's table in a build without rdma-core (or with
 * -DSTRATA_WITH_VERBS=OFF): never available, and asking for it says why.
 */
#include "transport/provider.h"

#include "util/log.h"

static bool tp_verbs_absent_available(void)
{
    return false;
}

static strata_status_t tp_verbs_absent_open(const tp_params_t *params,
                                            tp_ctx_t **ctx_out)
{
    (void)params;
    (void)ctx_out;
    util_error("verbs provider not compiled in (built without rdma-core or "
               "with -DSTRATA_WITH_VERBS=OFF)");
    return STRATA_ERR_UNSUPPORTED;
}

/* open() never succeeds, so no other entry is ever reached. */
const tp_ops_t tp_verbs_ops = {
    .name = "verbs",
    .available = tp_verbs_absent_available,
    .open = tp_verbs_absent_open,
};
