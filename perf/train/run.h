/*
 * The driver's side of a training job: it prepares the data once, launches
 * one job per policy on this host (strata-run, or the worker directly for
 * the local policy), evaluates the model the job reports on the test set as
 * training goes, and collects each policy's figures.
 */
#ifndef STRATA_PERF_TRAIN_RUN_H
#define STRATA_PERF_TRAIN_RUN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "perf/train/data.h"
#include "perf/train/mlp.h"
#include "perf/train/scenario.h"

typedef struct perf_point {
    double t_s; /* since the start of training */
    double acc;
} perf_point_t;

/* What became of a speed change's worker: the group it was in when the
 * change was due, and whether (and how long after) it joined another. */
typedef struct perf_change_seen {
    bool seen, moved;
    int from, to;
    double after_s;
} perf_change_seen_t;

typedef struct perf_result {
    char policy[32];
    bool ok;
    double time_to_target_s; /* NAN when the target was not reached */
    double final_acc;
    double final_loss;
    uint64_t bytes_pushed;
    uint64_t bytes_pulled;
    uint64_t steps;    /* minibatches, all workers */
    uint64_t overruns; /* steps whose compute exceeded their padding */
    double job_s;      /* launch to exit, start-up included */
    perf_change_seen_t changes[PERF_MAX_CHANGES];
    perf_point_t *points;
    size_t npoints;
    size_t cap;
} perf_result_t;

typedef struct perf_driver {
    perf_scenario_t sc;
    char tmpdir[1024];       /* the uncompressed training set, the boards */
    char self[PATH_MAX];     /* this program, run again as a worker */
    char launcher[PATH_MAX]; /* strata-run */
    perf_dataset_t train;    /* cut into shards for each job */
    perf_dataset_t test;
    perf_mlp_dims_t dims;
    perf_mlp_work_t *eval;
    float *model;     /* the copy under evaluation */
    double compute_s; /* measured time of one minibatch */
} perf_driver_t;

/* Load the data, write the uncompressed cache the workers read, measure the
 * compute time of a step. launcher may be NULL (next to this program). */
strata_status_t perf_driver_prepare(perf_driver_t *d, const perf_scenario_t *sc,
                                    const char *data_dir, const char *launcher);
/* Run policy p of the scenario; the result is filled even on failure. */
strata_status_t perf_driver_run(perf_driver_t *d, int p, perf_result_t *out);
void perf_driver_cleanup(perf_driver_t *d);

void perf_result_free(perf_result_t *r);

/* The STRATA_* settings of policy p's job. Settings the scenario does not
 * choose (STRATA_TRANSPORT, STRATA_PARTITION_BYTES: the engine's size for
 * the model and the aggregators unless set, STRATA_STALENESS_COST, ...)
 * pass through from the user's environment. */
void perf_policy_setenv(const perf_scenario_t *sc, const perf_policy_t *p);

/* Set by SIGINT/SIGTERM: the running job is stopped and nothing more runs. */
extern volatile int perf_driver_stop;

#endif /* STRATA_PERF_TRAIN_RUN_H */
