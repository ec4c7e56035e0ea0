/*
 * The board: a small shared-memory file through which the driver watches a
 * running job. It is instrumentation, not distribution (gradients and models
 * move only through the Strata API): the driver writes the scenario there
 * before launching; each worker publishes its progress counters in its own
 * slot; the reporting worker hands the driver a copy of the model when asked,
 * and its final model at the end, so that the driver evaluates on the test
 * set without slowing any worker.
 */
#ifndef STRATA_PERF_TRAIN_BOARD_H
#define STRATA_PERF_TRAIN_BOARD_H

#include <stdatomic.h>
#include <stdint.h>

#include <strata/strata.h>

#include "perf/train/scenario.h"

typedef enum perf_slot_state {
    PERF_SLOT_STARTING,
    PERF_SLOT_TRAINING,
    PERF_SLOT_DONE,
    PERF_SLOT_FAILED,
} perf_slot_state_t;

/* Written by one worker only; read by the driver. */
typedef struct perf_board_slot {
    _Atomic int32_t state;
    _Atomic int32_t group;
    _Atomic uint64_t clock;  /* minibatches trained */
    _Atomic uint64_t rounds; /* synchronous rounds (esync, fedavg) */
    _Atomic uint64_t bytes_pushed;
    _Atomic uint64_t bytes_pulled;
    _Atomic uint64_t overruns;   /* steps slower than their padding */
    _Atomic uint64_t compute_us; /* compute time, before padding */
} perf_board_slot_t;

/* Snapshot handshake: the driver moves IDLE -> WANTED, the reporter copies
 * the model and moves WANTED -> READY, the driver reads and moves READY ->
 * IDLE. Each side writes the model area only in its own states. */
enum { PERF_SNAP_IDLE, PERF_SNAP_WANTED, PERF_SNAP_READY };

typedef struct perf_board {
    uint32_t magic;
    uint32_t version;
    uint64_t size;   /* of the whole mapping */
    uint64_t params; /* model elements */
    /* Filled by the driver before it launches the job. */
    perf_scenario_t scenario;
    int policy;          /* index into scenario.policies */
    int workers;         /* worker processes: 1 for the local policy */
    char data_dir[1024]; /* holds shard-I-of-N-{images,labels}-... */
    float input_scale;   /* standardisation of the pixels, from the */
    float input_shift;   /* statistics of the whole training set */
    /* Shared while the job runs. */
    _Atomic int64_t t0_ns; /* CLOCK_MONOTONIC at the start of training */
    _Atomic int32_t snap_state;
    int64_t snap_ns;           /* when the snapshot was taken */
    _Atomic int32_t final_set; /* the final model is in place */
    int64_t final_ns;
    perf_board_slot_t slots[PERF_MAX_WORKERS];
    /* then, 64-byte aligned: float snapshot[params], float final[params] */
} perf_board_t;

/* The driver: create path, zeroed, for a model of `params` elements; the
 * driver then fills the fields above the shared ones. */
strata_status_t perf_board_create(const char *path, uint64_t params,
                                  perf_board_t **board_out);
/* A worker: map the board the driver made. */
strata_status_t perf_board_open(const char *path, perf_board_t **board_out);
void perf_board_close(perf_board_t *b);

float *perf_board_snapshot(perf_board_t *b);
float *perf_board_final(perf_board_t *b);

/* Reporter side: when the driver asked, copy params and the time. */
void perf_board_offer(perf_board_t *b, const float *params);
/* Reporter side: publish the model at the end of training. */
void perf_board_finish(perf_board_t *b, const float *params);

/* Driver side: ask for a snapshot (no effect while one is pending). */
void perf_board_request(perf_board_t *b);
/* Driver side: 1 and the snapshot's time when one is ready; call
 * perf_board_release once done reading perf_board_snapshot(). */
int perf_board_ready(perf_board_t *b, int64_t *ns_out);
void perf_board_release(perf_board_t *b);

/* The common start of training: the first worker to call sets it. */
int64_t perf_board_start(perf_board_t *b);

#endif /* STRATA_PERF_TRAIN_BOARD_H */
