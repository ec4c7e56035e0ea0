/*
 * One worker process of a training job: trains the MLP on its shard of the
 * training set at its scenario's pace, under the policy the driver chose, and
 * reports its progress on the driver's board.
 */
#ifndef STRATA_PERF_TRAIN_WORKER_H
#define STRATA_PERF_TRAIN_WORKER_H

/* Runs the worker described by the board at path; returns an exit code. */
int perf_worker_main(const char *board_path);

#endif /* STRATA_PERF_TRAIN_WORKER_H */
