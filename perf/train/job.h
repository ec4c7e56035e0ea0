/*
 * strata-train --job: one rank of a training job that another launcher
 * started (mpirun, srun, torchrun, strata-run), on any hosts and transport.
 * Every rank reads the data set itself; workers train their shard, the
 * reporter keeps the global model as training goes and evaluates it at the
 * end; every worker's results reach rank 0 over the job (strata_report),
 * and rank 0 prints the policy's line of the table and its JSON.
 */
#ifndef STRATA_PERF_TRAIN_JOB_H
#define STRATA_PERF_TRAIN_JOB_H

#include "perf/train/cli.h"

/* Runs this rank; returns an exit code (rank 0: 0 only if every worker
 * trained and reported). */
int perf_job_main(const perf_cli_t *cli);

#endif /* STRATA_PERF_TRAIN_JOB_H */
