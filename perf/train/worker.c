/* The training loop of one worker process. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "perf/train/board.h"
#include "perf/train/data.h"
#include "perf/train/dist.h"
#include "perf/train/log.h"
#include "perf/train/mlp.h"
#include "perf/train/pace.h"
#include "perf/train/worker.h"

typedef struct worker {
    perf_board_t *board;
    perf_worker_job_t *job; /* --job: no driver */
    const perf_scenario_t *sc;
    const perf_policy_t *policy;
    perf_dist_t *dist; /* NULL for the local policy */
    bool dist_params;  /* params came from Strata */
    int index;
    int workers;
    perf_board_slot_t *slot;
    bool reporter; /* hands the driver the model to evaluate */
    int64_t t0_ns, deadline_ns;
    bool changed[PERF_MAX_CHANGES]; /* speed changes made */
    uint64_t rounds;
    uint64_t epoch; /* of the sampler, at the last epoch end */

    perf_dataset_t train; /* this worker's shard */
    perf_sampler_t sampler;
    perf_pace_t pace;

    perf_mlp_dims_t dims;
    perf_mlp_work_t *work;
    size_t nparams;
    float *params;
    float *grads;
    float *global; /* round policies' reporter: the last global model */
    float *x;
    uint8_t *y;
    uint32_t *batch;
} worker_t;

/* The parameters live in memory from Strata when distributed, so that the
 * model lands in them without a copy; strata_finalize releases it. */
static strata_status_t alloc_params(worker_t *w)
{
    size_t bytes = w->nparams * sizeof(float);
    if (w->dist) {
        w->dist_params = true;
        return perf_dist_alloc(w->dist, bytes, (void **)&w->params);
    }
    w->params = malloc(bytes);
    if (!w->params) {
        perf_error("cannot allocate a model of %zu bytes", bytes);
        return STRATA_ERR_NOMEM;
    }
    return STRATA_OK;
}

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
    strata_status_t st = alloc_params(w);
    if (st != STRATA_OK)
        return st;
    w->grads = calloc(w->nparams, sizeof(float));
    w->x = malloc(b * w->dims.in * sizeof(float));
    w->y = malloc(b);
    w->batch = malloc(b * sizeof(uint32_t));
    if (w->reporter && w->policy->drive == PERF_DRIVE_ROUNDS)
        w->global = malloc(w->nparams * sizeof(float));
    if (!w->grads || !w->x || !w->y || !w->batch ||
        (w->reporter && w->policy->drive == PERF_DRIVE_ROUNDS && !w->global)) {
        perf_error("cannot allocate the gradients and a batch of %zu", b);
        return STRATA_ERR_NOMEM;
    }
    perf_mlp_init(&w->dims, w->sc->seed, w->params);
    if (w->global)
        memcpy(w->global, w->params, w->nparams * sizeof(float));
    st = perf_mlp_work_create(&w->dims, b, &w->work);
    if (st == STRATA_OK && w->dist)
        st = perf_dist_register(w->dist, &w->dims, w->params, w->grads);
    return st;
}

/* Under --job, this worker's shard cut from the training set in memory,
 * as the driver cuts it. */
static strata_status_t cut_shard(worker_t *w)
{
    uint32_t *idx;
    size_t count;
    strata_status_t st =
        perf_shard_make(w->job->train, w->workers, w->index, w->sc->noniid,
                        w->sc->seed, &idx, &count);
    if (st != STRATA_OK)
        return st;
    st = perf_dataset_subset(w->job->train, idx, count, &w->train);
    free(idx);
    return st;
}

/* This worker's shard, written by the driver or cut here, and its pace. */
static strata_status_t setup_shard(worker_t *w)
{
    char split[64];
    snprintf(split, sizeof(split), "shard-%d-of-%d", w->index, w->workers);
    strata_status_t st =
        w->job ? cut_shard(w)
               : perf_dataset_load(w->board->data_dir, split, &w->train);
    if (st != STRATA_OK)
        return st;
    w->train.scale = w->board->input_scale;
    w->train.shift = w->board->input_shift;
    uint64_t seed = w->sc->seed * 1000003u + (uint64_t)w->index;
    perf_pace_init(&w->pace, w->sc->speeds[w->index], w->sc->base_step_s,
                   w->sc->jitter, seed);
    return perf_sampler_init(&w->sampler, w->train.count, seed);
}

/* This worker's speed changes that are due (--speed-change). */
static void change_speed(worker_t *w)
{
    const perf_scenario_t *sc = w->sc;
    for (int i = 0; i < sc->nchanges; i++) {
        const perf_speed_change_t *c = &sc->changes[i];
        if (c->worker != w->index || w->changed[i] ||
            perf_now_ns() < w->t0_ns + (int64_t)(c->at_s * 1e9))
            continue;
        w->changed[i] = true;
        perf_pace_slow_down(&w->pace, c->factor);
    }
}

/* Forward and backward on the next minibatch; the step's pace starts here. */
static void minibatch(worker_t *w)
{
    size_t b = (size_t)w->sc->batch;
    change_speed(w);
    perf_pace_begin(&w->pace);
    perf_sampler_next(&w->sampler, b, w->batch);
    perf_dataset_gather(&w->train, w->batch, b, w->x, w->y);
    perf_mlp_loss_grad(w->work, w->params, w->x, w->y, b, w->grads);
}

/* Under --job, the reporter keeps a global model every --eval-every. */
static void keep_snapshot(worker_t *w)
{
    perf_snaps_t *s = w->job ? w->job->snaps : NULL;
    int64_t now = perf_now_ns(), every = (int64_t)(s ? s->every_s * 1e9 : 0);
    if (!s || s->n == s->cap || now < s->next_ns)
        return;
    memcpy(s->model + s->n * s->params, w->params, s->params * sizeof(float));
    s->t_s[s->n++] = (double)(now - w->t0_ns) * 1e-9;
    if (s->next_ns == 0)
        s->next_ns = w->t0_ns;
    while (s->next_ns <= now)
        s->next_ns += every;
}

/* Progress on the board; the model too when the driver asked for it and
 * params hold a global model. */
static void publish(worker_t *w, bool global)
{
    perf_board_slot_t *s = w->slot;
    atomic_store_explicit(&s->clock, w->pace.steps, memory_order_relaxed);
    atomic_store_explicit(&s->rounds, w->rounds, memory_order_relaxed);
    atomic_store_explicit(&s->overruns, w->pace.overruns, memory_order_relaxed);
    atomic_store_explicit(&s->compute_us, (uint64_t)(w->pace.compute_s * 1e6),
                          memory_order_relaxed);
    if (w->dist) {
        uint64_t pushed = 0, pulled = 0;
        perf_dist_traffic(w->dist, &pushed, &pulled);
        atomic_store_explicit(&s->bytes_pushed, pushed, memory_order_relaxed);
        atomic_store_explicit(&s->bytes_pulled, pulled, memory_order_relaxed);
        atomic_store_explicit(&s->group, perf_dist_group(w->dist),
                              memory_order_relaxed);
    }
    if (w->reporter && global) {
        perf_board_offer(w->board, w->params);
        keep_snapshot(w);
    }
}

/* At the end of each pass over the shard: GDTopK's schedule follows the
 * epochs. (GSSP groups by the step times the engine measures itself.) */
static strata_status_t end_epoch(worker_t *w)
{
    if (w->sampler.epoch == w->epoch)
        return STRATA_OK;
    w->epoch = w->sampler.epoch;
    return perf_dist_epoch_end(w->dist);
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
        publish(w, true);
    }
    return STRATA_OK;
}

/* bsp, ssp, asp, gssp: the aggregators apply the update. */
static strata_status_t drive_gradient(worker_t *w)
{
    while (time_left(w)) {
        minibatch(w);
        perf_pace_end(&w->pace);
        strata_status_t st = perf_dist_step(w->dist);
        if (st == STRATA_OK)
            st = end_epoch(w);
        if (st != STRATA_OK)
            return st;
        publish(w, true);
    }
    return STRATA_OK;
}

/* esync, fedavg: local SGD steps, and a synchronous round when the engine
 * says so; only then do params hold the global model. */
static strata_status_t drive_rounds(worker_t *w)
{
    while (time_left(w)) {
        minibatch(w);
        perf_mlp_sgd(w->nparams, (float)w->sc->lr, w->grads, w->params);
        perf_pace_end(&w->pace);
        bool synced;
        strata_status_t st = perf_dist_round(w->dist, w->pace.last_s, &synced);
        if (st != STRATA_OK)
            return st;
        if (synced) {
            w->rounds++;
            if (w->global)
                memcpy(w->global, w->params, w->nparams * sizeof(float));
        }
        publish(w, synced);
    }
    return STRATA_OK;
}

static strata_status_t drive(worker_t *w)
{
    switch (w->policy->drive) {
    case PERF_DRIVE_LOCAL:
        return drive_local(w);
    case PERF_DRIVE_GRADIENT:
        return drive_gradient(w);
    case PERF_DRIVE_ROUNDS:
        return drive_rounds(w);
    }
    return STRATA_ERR_INVALID;
}

/* Who this process is: the only worker of a local run, or whatever the job
 * made it. Aggregators serve and are done. */
static strata_status_t join(worker_t *w, bool *served_out)
{
    *served_out = false;
    w->index = 0;
    w->workers = 1;
    if (w->policy->drive == PERF_DRIVE_LOCAL)
        return STRATA_OK;
    strata_status_t st = perf_dist_join(&w->dist);
    if (st != STRATA_OK)
        return st;
    if (w->job)
        w->job->rank_out = perf_dist_rank(w->dist);
    if (perf_dist_is_aggregator(w->dist)) {
        *served_out = true;
        st = perf_dist_serve(w->dist);
        w->dist = NULL;
        return st;
    }
    w->index = perf_dist_worker(w->dist);
    w->workers = perf_dist_workers(w->dist);
    if (w->workers != w->board->workers) {
        perf_error("the job has %d workers, the scenario %d (--speeds, "
                   "--scenario): launch as many worker ranks as it has",
                   w->workers, w->board->workers);
        return STRATA_ERR_MISMATCH;
    }
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "strata-train worker %d", w->index);
    perf_log_set_prefix(prefix);
    return STRATA_OK;
}

static strata_status_t train(worker_t *w)
{
    w->slot = &w->board->slots[w->index];
    w->reporter = w->dist == NULL || w->index == perf_scenario_reporter(w->sc);
    strata_status_t st = setup_shard(w);
    if (st == STRATA_OK)
        st = setup_model(w);
    if (st != STRATA_OK)
        return st;
    atomic_store(&w->slot->state, PERF_SLOT_TRAINING);
    w->t0_ns = perf_board_start(w->board);
    w->deadline_ns = w->t0_ns + (int64_t)(w->sc->budget_s * 1e9);
    st = drive(w);
    if (st != STRATA_OK)
        return st;
    publish(w, false);
    const float *final = w->global ? w->global : w->params;
    if (w->reporter)
        perf_board_finish(w->board, final);
    if (w->job)
        return w->job->report(w->job->arg, w->dist, w->index, w->slot, final,
                              w->reporter);
    return STRATA_OK;
}

/* After leaving the job, which released the parameters if Strata's. */
static void worker_free(worker_t *w)
{
    if (!w->dist_params)
        free(w->params);
    free(w->grads);
    free(w->global);
    free(w->x);
    free(w->y);
    free(w->batch);
    perf_mlp_work_free(w->work);
    perf_sampler_free(&w->sampler);
    perf_dataset_free(&w->train);
}

int perf_worker_main(const char *board_path)
{
    perf_board_t *board;
    if (perf_board_open(board_path, &board) != STRATA_OK)
        return 1;
    int rc = perf_worker_run(board, NULL);
    perf_board_close(board);
    return rc;
}

int perf_worker_run(perf_board_t *board, perf_worker_job_t *job)
{
    worker_t w = {.board = board, .job = job};
    /* Each worker computes on one thread: the cores are shared by every
     * process of the job. */
    openblas_set_num_threads(1);
    perf_log_set_prefix("strata-train worker");
    w.sc = &w.board->scenario;
    w.policy = &w.sc->policies[w.board->policy];
    bool served;
    strata_status_t st = join(&w, &served);
    if (st == STRATA_OK && !served)
        st = train(&w);
    if (w.slot)
        atomic_store(&w.slot->state,
                     st == STRATA_OK ? PERF_SLOT_DONE : PERF_SLOT_FAILED);
    if (w.dist) {
        strata_status_t left = perf_dist_leave(w.dist);
        st = st != STRATA_OK ? st : left;
        w.dist = NULL;
    }
    worker_free(&w);
    return st == STRATA_OK ? 0 : 1;
}
