/* GDTopK's per-group upload-ratio schedule. */
#include "engine/gdtopk.h"

#include <inttypes.h>
#include <math.h>

#include "util/log.h"

double eng_gdtopk_steady_ratio(double rank)
{
    double r = rank > 0 ? (rank < 1 ? rank : 1) : 0; /* NaN: the fastest */
    return pow(ENG_GDTOPK_RATIO_FASTEST, 1 - r) *
           pow(ENG_GDTOPK_RATIO_SLOWEST, r);
}

strata_status_t eng_gdtopk_plan(double rank, uint32_t epoch,
                                uint32_t flush_epochs,
                                eng_gdtopk_plan_t *plan_out)
{
    if (!(rank >= 0 && rank <= 1) || epoch == 0 || flush_epochs == 0) {
        util_error("gdtopk: rank %g must be in [0, 1], epoch %" PRIu32
                   " and flush period %" PRIu32 " at least 1",
                   rank, epoch, flush_epochs);
        return STRATA_ERR_INVALID;
    }
    double steady = eng_gdtopk_steady_ratio(rank);
    eng_gdtopk_plan_t p = {
        .ratio = ENG_GDTOPK_RATIO_WARMUP,
        .sample_ratio = ENG_GDTOPK_SAMPLE_WARMUP,
        .flush_after = epoch % flush_epochs == 0,
    };
    if (epoch > 1) {
        double base = ENG_GDTOPK_BASE_FASTEST + ENG_GDTOPK_BASE_SPAN * rank;
        double warm = pow(base, (double)(epoch - 1));
        p.ratio =
            epoch > ENG_GDTOPK_WARMUP_EPOCHS || warm < steady ? steady : warm;
        p.sample_ratio =
            ENG_GDTOPK_SAMPLE_FASTEST + ENG_GDTOPK_SAMPLE_SPAN * rank;
    }
    *plan_out = p;
    return STRATA_OK;
}
