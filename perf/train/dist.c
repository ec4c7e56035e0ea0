/* Data-parallel training through Strata's public API, nothing else. */
#include <stdlib.h>

#include "perf/train/dist.h"
#include "perf/train/log.h"

struct perf_dist {
    strata_ctx_t *ctx;
};

strata_status_t perf_dist_join(perf_dist_t **dist_out)
{
    perf_dist_t *d = calloc(1, sizeof(*d));
    if (!d) {
        perf_error("cannot allocate the distribution context");
        return STRATA_ERR_NOMEM;
    }
    strata_status_t st = strata_init(&d->ctx); /* logged by Strata */
    if (st != STRATA_OK) {
        free(d);
        return st;
    }
    *dist_out = d;
    return STRATA_OK;
}

bool perf_dist_is_aggregator(const perf_dist_t *d)
{
    return strata_role(d->ctx) == STRATA_ROLE_AGGREGATOR;
}

strata_status_t perf_dist_serve(perf_dist_t *d)
{
    strata_status_t st = strata_serve(d->ctx);
    strata_status_t fin = strata_finalize(d->ctx);
    free(d);
    return st != STRATA_OK ? st : fin;
}

int perf_dist_rank(const perf_dist_t *d)
{
    return strata_rank(d->ctx);
}

int perf_dist_worker(const perf_dist_t *d)
{
    return strata_worker_index(d->ctx);
}

int perf_dist_workers(const perf_dist_t *d)
{
    return strata_num_workers(d->ctx);
}

int perf_dist_group(const perf_dist_t *d)
{
    return strata_group(d->ctx);
}

strata_status_t perf_dist_alloc(perf_dist_t *d, size_t bytes, void **ptr_out)
{
    return strata_alloc(d->ctx, bytes, ptr_out);
}

strata_status_t perf_dist_register(perf_dist_t *d, const perf_mlp_dims_t *dims,
                                   float *params, float *grads)
{
    perf_mlp_tensor_t t[PERF_MLP_TENSORS];
    perf_mlp_tensors(dims, t);
    for (int i = 0; i < PERF_MLP_TENSORS; i++) {
        strata_status_t st = strata_tensor_register(
            d->ctx, t[i].name, params + t[i].offset, grads + t[i].offset,
            t[i].count, STRATA_FP32, NULL);
        if (st != STRATA_OK)
            return st;
    }
    return strata_commit(d->ctx);
}

strata_status_t perf_dist_step(perf_dist_t *d)
{
    return strata_step(d->ctx);
}

strata_status_t perf_dist_epoch_end(perf_dist_t *d)
{
    return strata_epoch_end(d->ctx, 0);
}

strata_status_t perf_dist_round(perf_dist_t *d, double step_s, bool *synced_out)
{
    bool ready = false;
    strata_status_t st = strata_round_ready(d->ctx, step_s, &ready);
    if (st == STRATA_OK && ready)
        st = strata_round_sync(d->ctx);
    if (st == STRATA_OK)
        *synced_out = ready;
    return st;
}

void perf_dist_traffic(perf_dist_t *d, uint64_t *pushed_out,
                       uint64_t *pulled_out)
{
    strata_metrics_t m = STRATA_METRICS_INIT;
    if (strata_metrics(d->ctx, &m) != STRATA_OK)
        return; /* the counters keep their last values */
    *pushed_out = m.bytes_pushed;
    *pulled_out = m.bytes_pulled;
}

strata_status_t perf_dist_report(perf_dist_t *d, const char *json)
{
    return strata_report(d->ctx, json); /* logged by Strata */
}

strata_status_t perf_dist_leave(perf_dist_t *d)
{
    strata_status_t st = strata_finalize(d->ctx);
    free(d);
    return st;
}
