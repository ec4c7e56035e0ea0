/*
 * One worker process of a training job: trains the MLP on its shard of the
 * training set at its scenario's pace, under the policy the driver chose, and
 * reports its progress on the driver's board.
 */
#ifndef STRATA_PERF_TRAIN_WORKER_H
#define STRATA_PERF_TRAIN_WORKER_H

#include <stdbool.h>

#include "perf/train/board.h"
#include "perf/train/data.h"
#include "perf/train/dist.h"

/* Runs the worker described by the board at path; returns an exit code. */
int perf_worker_main(const char *board_path);

/* The global models a reporter saw, kept every `every_s` of training to be
 * evaluated once it is over (--job: no driver evaluates while it runs). */
typedef struct perf_snaps {
    size_t n, cap, params;
    double every_s;
    int64_t next_ns;
    double *t_s;  /* since the start of training */
    float *model; /* cap x params */
} perf_snaps_t;

/* One rank of a job that another launcher started (--job). The board is
 * this process's own, filled like the driver's but for data_dir: a worker
 * takes its shard of `train` (the whole training set, standardised). A
 * worker's reporter keeps its models in `snaps`; before leaving the job,
 * every worker calls `report` with its board slot, its own final model and
 * whether it reports the model (its results then reach rank 0 with its
 * metrics). */
typedef struct perf_worker_job {
    const perf_dataset_t *train;
    perf_snaps_t *snaps;
    strata_status_t (*report)(void *arg, perf_dist_t *dist, int index,
                              const perf_board_slot_t *slot,
                              const float *final_model, bool reporter);
    void *arg;
    int rank_out; /* this process's rank in the job */
} perf_worker_job_t;

/* 0 when this rank's part of the job succeeded. */
int perf_worker_run(perf_board_t *board, perf_worker_job_t *job);

#endif /* STRATA_PERF_TRAIN_WORKER_H */
