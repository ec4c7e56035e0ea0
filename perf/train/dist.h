/*
 * The driver's distribution layer, and the only file of it that calls
 * Strata: everything a training program needs to train data-parallel
 * through the public API. Every process of a job joins; aggregators serve
 * until the workers are done; a worker registers its model's tensors, then
 * per minibatch either steps (gradient policies: bsp, ssp, asp, gssp) or
 * trains locally and takes part in a synchronous round when the engine says
 * so (esync, fedavg).
 */
#ifndef STRATA_PERF_TRAIN_DIST_H
#define STRATA_PERF_TRAIN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "perf/train/mlp.h"

typedef struct perf_dist perf_dist_t;

/* Join the job the launcher started (settings from STRATA_*). */
strata_status_t perf_dist_join(perf_dist_t **dist_out);

/* An aggregator serves until every worker has left, then leaves itself and
 * frees dist. */
bool perf_dist_is_aggregator(const perf_dist_t *d);
strata_status_t perf_dist_serve(perf_dist_t *d);

int perf_dist_rank(const perf_dist_t *d);
int perf_dist_worker(const perf_dist_t *d); /* 0..workers-1 */
int perf_dist_workers(const perf_dist_t *d);
int perf_dist_group(const perf_dist_t *d);

/* Memory the transports write the model into without a copy; leaving the
 * job releases it. */
strata_status_t perf_dist_alloc(perf_dist_t *d, size_t bytes, void **ptr_out);

/* Register the MLP's tensors, which live in the flat buffers params and
 * grads, and receive the initial model (the first worker's). */
strata_status_t perf_dist_register(perf_dist_t *d, const perf_mlp_dims_t *dims,
                                   float *params, float *grads);

/* Gradient policies: push grads, wait until params hold the next model. */
strata_status_t perf_dist_step(perf_dist_t *d);

/* The end of a pass over this worker's data (GDTopK's epochs). */
strata_status_t perf_dist_epoch_end(perf_dist_t *d);

/* Round policies, after each local step of step_s seconds: when the engine
 * says the round is ready, synchronise (params become the new global model)
 * and set *synced_out. */
strata_status_t perf_dist_round(perf_dist_t *d, double step_s,
                                bool *synced_out);

/* Bytes this worker has pushed and received. */
void perf_dist_traffic(perf_dist_t *d, uint64_t *pushed_out,
                       uint64_t *pulled_out);

/* This worker's results (one JSON object), which reach rank 0 with its
 * metrics when it leaves the job. */
strata_status_t perf_dist_report(perf_dist_t *d, const char *json);

/* Leave the job (waiting for what is outstanding) and free dist. */
strata_status_t perf_dist_leave(perf_dist_t *d);

#endif /* STRATA_PERF_TRAIN_DIST_H */
