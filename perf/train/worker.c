/* The training loop of one worker process. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#include "perf/train/board.h"
#include "perf/train/data.h"
#include "perf/train/log.h"
#include "perf/train/mlp.h"
#include "perf/train/pace.h"
#include "perf/train/worker.h"

typedef struct worker {
    perf_board_t *board;
    const perf_scenario_t *sc;
    const perf_policy_t *policy;
    int index;
    int workers;
    perf_board_slot_t *slot;
    bool reporter; /* hands the driver the model to evaluate */
    int64_t deadline_ns;

    perf_dataset_t train; /* this worker's shard */
    perf_sampler_t sampler;
    perf_pace_t pace;

    perf_mlp_dims_t dims;
    perf_mlp_work_t *work;
    size_t nparams;
    float *params;
    float *grads;
    float *x;
    uint8_t *y;
    uint32_t *batch;
} worker_t;

/* The model, the same initial one in every process, and its buffers. */
static strata_status_t setup_model(worker_t *w)
{
    w->dims =
        (perf_mlp_dims_t){w->train.dim, (size_t)w->sc->hidden, PERF_CLASSES};
    w->nparams = perf_mlp_param_count(&w->dims);
    if (w->nparams != w->board->params) {
        perf_error("the driver's model has %llu parameters, this one %zu",
                   (unsigned long long)w->board->params, w->nparams);
        return STRATA_ERR_MISMATCH;
    }
    size_t b = (size_t)w->sc->batch;
    w->params = malloc(w->nparams * sizeof(float));
    w->grads = calloc(w->nparams, sizeof(float));
    w->x = malloc(b * w->dims.in * sizeof(float));
    w->y = malloc(b);
    w->batch = malloc(b * sizeof(uint32_t));
    if (!w->params || !w->grads || !w->x || !w->y || !w->batch) {
        perf_error("cannot allocate the model and a batch of %zu", b);
        return STRATA_ERR_NOMEM;
    }
    perf_mlp_init(&w->dims, w->sc->seed, w->params);
    return perf_mlp_work_create(&w->dims, b, &w->work);
}

/* This worker's shard, written by the driver, and its pace. */
static strata_status_t setup_shard(worker_t *w)
{
    char split[64];
    snprintf(split, sizeof(split), "shard-%d-of-%d", w->index, w->workers);
    strata_status_t st =
        perf_dataset_load(w->board->data_dir, split, &w->train);
    if (st != STRATA_OK)
        return st;
    w->train.scale = w->board->input_scale;
    w->train.shift = w->board->input_shift;
    uint64_t seed = w->sc->seed * 1000003u + (uint64_t)w->index;
    perf_pace_init(&w->pace, w->sc->speeds[w->index], w->sc->base_step_s,
                   w->sc->jitter, seed);
    return perf_sampler_init(&w->sampler, w->train.count, seed);
}

/* Forward and backward on the next minibatch; the step's pace starts here. */
static void minibatch(worker_t *w)
{
    size_t b = (size_t)w->sc->batch;
    perf_pace_begin(&w->pace);
    perf_sampler_next(&w->sampler, b, w->batch);
    perf_dataset_gather(&w->train, w->batch, b, w->x, w->y);
    perf_mlp_loss_grad(w->work, w->params, w->x, w->y, b, w->grads);
}

static void publish(worker_t *w)
{
    perf_board_slot_t *s = w->slot;
    atomic_store_explicit(&s->clock, w->pace.steps, memory_order_relaxed);
    atomic_store_explicit(&s->overruns, w->pace.overruns, memory_order_relaxed);
    atomic_store_explicit(&s->compute_us, (uint64_t)(w->pace.compute_s * 1e6),
                          memory_order_relaxed);
    if (w->reporter)
        perf_board_offer(w->board, w->params);
}

static bool time_left(const worker_t *w)
{
    return perf_now_ns() < w->deadline_ns;
}

/* Sequential SGD in this process: the reference the others are judged by. */
static strata_status_t drive_local(worker_t *w)
{
    while (time_left(w)) {
        minibatch(w);
        perf_mlp_sgd(w->nparams, (float)w->sc->lr, w->grads, w->params);
        perf_pace_end(&w->pace);
        publish(w);
    }
    return STRATA_OK;
}

static void worker_free(worker_t *w)
{
    perf_mlp_work_free(w->work);
    perf_sampler_free(&w->sampler);
    perf_dataset_free(&w->train);
    free(w->params);
    free(w->grads);
    free(w->x);
    free(w->y);
    free(w->batch);
    perf_board_close(w->board);
}

static strata_status_t run(worker_t *w)
{
    if (w->policy->drive != PERF_DRIVE_LOCAL) {
        perf_error("policy %s needs Strata's training API, which this "
                   "build does not have yet",
                   w->policy->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    w->index = 0;
    w->workers = w->board->workers;
    w->slot = &w->board->slots[w->index];
    w->reporter = true;
    strata_status_t st = setup_shard(w);
    if (st == STRATA_OK)
        st = setup_model(w);
    if (st != STRATA_OK)
        return st;
    atomic_store(&w->slot->state, PERF_SLOT_TRAINING);
    int64_t t0 = perf_board_start(w->board);
    w->deadline_ns = t0 + (int64_t)(w->sc->budget_s * 1e9);
    st = drive_local(w);
    if (st != STRATA_OK)
        return st;
    publish(w);
    if (w->reporter)
        perf_board_finish(w->board, w->params);
    return STRATA_OK;
}

int perf_worker_main(const char *board_path)
{
    worker_t w = {0};
    /* Each worker computes on one thread: the cores are shared by every
     * process of the job. */
    openblas_set_num_threads(1);
    perf_log_set_prefix("strata-train worker");
    strata_status_t st = perf_board_open(board_path, &w.board);
    if (st != STRATA_OK)
        return 1;
    w.sc = &w.board->scenario;
    w.policy = &w.sc->policies[w.board->policy];
    st = run(&w);
    if (w.slot)
        atomic_store(&w.slot->state,
                     st == STRATA_OK ? PERF_SLOT_DONE : PERF_SLOT_FAILED);
    worker_free(&w);
    return st == STRATA_OK ? 0 : 1;
}
