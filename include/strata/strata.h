/*
 * Strata: gradient aggregation for heterogeneous training clusters over RDMA.
 *
 * This is the public C API a training framework sees. Every function that can
 * fail returns a strata_status_t; 0 (STRATA_OK) means success, and the
 * function that detected an error has already logged it with its context.
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Status codes. X(name, value, description): the list is the single source of
 * the enum and of strata_strerror()'s text.
 */
#define STRATA_STATUS_LIST(X)                                                  \
    X(STRATA_OK, 0, "success")                                                 \
    X(STRATA_INPROGRESS, 1, "operation in progress")                           \
    X(STRATA_ERR_INVALID, 2, "invalid argument")                               \
    X(STRATA_ERR_CONFIG, 3, "invalid configuration")                           \
    X(STRATA_ERR_NOMEM, 4, "out of memory")                                    \
    X(STRATA_ERR_IO, 5, "input/output error")                                  \
    X(STRATA_ERR_TIMEOUT, 6, "timed out")                                      \
    X(STRATA_ERR_PEER, 7, "peer failed or disconnected")                       \
    X(STRATA_ERR_PROTO, 8, "malformed or unexpected message")                  \
    X(STRATA_ERR_AUTH, 9, "authentication failed")                             \
    X(STRATA_ERR_UNSUPPORTED, 10, "not supported or not compiled in")          \
    X(STRATA_ERR_NO_DEVICE, 11, "no usable device")                            \
    X(STRATA_ERR_AGAIN, 12, "resource temporarily unavailable")                \
    X(STRATA_ERR_MISMATCH, 13, "mismatch between ranks")                       \
    X(STRATA_ERR_STATE, 14, "operation not valid in the current state")        \
    X(STRATA_ERR_RANGE, 15, "value out of range")                              \
    X(STRATA_ERR_CANCELED, 16, "operation canceled")                           \
    X(STRATA_ERR_NOFILE, 17,                                                   \
      "out of file descriptors (raise the limit: ulimit -n)")

#define STRATA_STATUS_ENUM_ENTRY(name, value, text) name = value,
typedef enum strata_status {
    STRATA_STATUS_LIST(STRATA_STATUS_ENUM_ENTRY)
} strata_status_t;
#undef STRATA_STATUS_ENUM_ENTRY

/* A fixed English description of a status; never NULL, even for unknown codes.
 */
const char *strata_strerror(strata_status_t status);

/* Element types of tensors and of the reduction kernels. fp16 is IEEE
 * binary16; bf16 is the upper half of an fp32. */
typedef enum strata_dtype {
    STRATA_FP32,
    STRATA_FP64,
    STRATA_FP16,
    STRATA_BF16,
} strata_dtype_t;

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH" (of the library loaded, which
 * may differ from the header's STRATA_VERSION_* the caller was built with). */
const char *strata_version_string(void);

/*
 * ---- The engine -------------------------------------------------------------
 *
 * A job is N processes: ranks 0..S-1 are aggregators (S =
 * STRATA_NUM_AGGREGATORS; rank 0 also coordinates), the others are workers.
 * Every process calls strata_init(), which learns its rank from the launcher
 * (strata-run, mpirun, srun, torchrun or STRATA_RANK/STRATA_SIZE), meets the
 * others through the coordinator and returns its role.
 *
 *   Aggregator:  strata_init -> strata_serve -> strata_finalize
 *                (strata-agg is a program doing exactly that)
 *   Worker:      strata_init -> strata_tensor_register... -> strata_commit
 *                -> loop { compute gradients; strata_step } -> strata_finalize
 *
 * Workers register the same tensors in the same order, each with a parameter
 * buffer (where the model arrives) and a gradient buffer (what is pushed).
 * Aggregators hold the model, sharded; each worker's gradients travel straight
 * from its gradient buffers to the aggregators, which reduce them, apply the
 * update and write the fresh model straight into the workers' parameter
 * buffers. Which gradients are reduced together and how stale a model may be
 * is the synchronisation policy (STRATA_POLICY): bsp, ssp (STRATA_STALENESS)
 * or asp.
 *
 * Clocks: a worker's clock is the number of steps it has pushed. Pushing the
 * gradients of clock c asks for the model of clock c + 1, which the
 * aggregators write into the parameter buffers as soon as the policy allows:
 * once every worker's clock c + 1 - s gradients are in (s = 0 for bsp), and
 * always including this worker's own ones. So between a push and the
 * completion of the matching pull, parameter buffers are being written and
 * must not be read.
 *
 * Thread safety: the calls on one context must not overlap (serialise them if
 * several threads use it), except strata_metrics(), strata_group_clocks(),
 * strata_last_error(), strata_setting() and the queries (strata_rank() ...),
 * which any thread may call at any time; strata_strerror(),
 * strata_version_string() and the strata_log_* calls need no context and
 * are safe from any thread. Separate contexts are independent, and each runs
 * one background progress thread. A few things are per process, not per
 * context: the log level and handler, the rank shown in log lines (the
 * latest context's), and the reduction kernels
 * and their thread count (STRATA_SIMD, STRATA_REDUCE_THREADS: read by the
 * first reduction, again by each aggregator's strata_init, and changed by
 * strata_simd_select).
 *
 * Every wait is bounded by STRATA_TIMEOUT_MS: a dead or silent peer turns into
 * STRATA_ERR_PEER or STRATA_ERR_TIMEOUT, never into a hang.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strata_ctx strata_ctx_t;
typedef struct strata_request strata_request_t;

typedef enum strata_role {
    STRATA_ROLE_WORKER,
    STRATA_ROLE_AGGREGATOR,
} strata_role_t;

/* Settings are environment variables STRATA_* (or lines of the file named by
 * STRATA_CONFIG); an unknown one is an error, so that a typo does not go
 * unnoticed. Bindings and programs built on Strata name their own settings
 * STRATA_EXT_<BINDING>_* (the Python package: STRATA_EXT_PY_*): the library
 * never reads these and never refuses them. */
#define STRATA_EXT_PREFIX "STRATA_EXT_"

/* Join the job with the settings of the environment (and STRATA_CONFIG).
 * Collective: returns once every rank has joined, or fails (unreachable
 * coordinator, wrong job secret, bad settings) within STRATA_TIMEOUT_MS. */
strata_status_t strata_init(strata_ctx_t **ctx_out);

/* As strata_init(), with settings given as "KEY=VALUE" strings (STRATA_KEY or
 * key) that override the environment; NULL-terminated, may be NULL. */
strata_status_t strata_init_with(const char *const *settings,
                                 strata_ctx_t **ctx_out);

/* Leave the job and free the context. A worker first waits for its
 * outstanding requests; every rank waits (bounded) until the coordinator has
 * seen every worker leave. Returns the first error the context met, if any. */
strata_status_t strata_finalize(strata_ctx_t *ctx);

/* Aggregators: run the aggregator until every worker has finalized, or until
 * the job fails (then returns the error). */
strata_status_t strata_serve(strata_ctx_t *ctx);

/* ---- queries (any thread, any time) ---- */
strata_role_t strata_role(const strata_ctx_t *ctx);
int strata_rank(const strata_ctx_t *ctx);
int strata_size(const strata_ctx_t *ctx);
/* Rank among the processes on this host. */
int strata_local_rank(const strata_ctx_t *ctx);
int strata_num_workers(const strata_ctx_t *ctx);
int strata_num_aggregators(const strata_ctx_t *ctx);
/* 0..num_workers-1 for a worker (its data shard, say), -1 for an aggregator. */
int strata_worker_index(const strata_ctx_t *ctx);
/* The worker's current group (0 under bsp; its own under ssp and asp, and
 * under gssp until the probe's end). */
int strata_group(const strata_ctx_t *ctx);
/* The worker's clock: the number of steps it has pushed. */
int64_t strata_clock(const strata_ctx_t *ctx);
/* The transport a worker reaches the aggregators over: "verbs", "tcp",
 * "shm", or "mixed" when it differs between aggregators; for an aggregator,
 * the ones it accepts workers on, such as "tcp+shm". */
const char *strata_transport(const strata_ctx_t *ctx);
/* The size of the partitions the model is cut into: STRATA_PARTITION_BYTES,
 * or the one the engine picked for the model and for whether the job spans
 * hosts (docs/engine.md); 0 before the layout is known (a worker's
 * strata_commit, an aggregator's first layout). */
size_t strata_partition_bytes(const strata_ctx_t *ctx);

/* ---- memory ---- */

/* Memory every transport can write into directly. Parameter buffers from
 * here receive the model without a copy on every transport; other memory
 * works too, but a transport that cannot register it (shm) lands the model
 * in a staging buffer and copies it (counted in the metrics). */
strata_status_t strata_alloc(strata_ctx_t *ctx, size_t bytes, void **ptr_out);
void strata_free(strata_ctx_t *ctx, void *ptr);

/* ---- tensors (workers) ---- */

/* Register a tensor of `count` elements of `dtype`: `grad` is pushed, the
 * model arrives in `param` (with STRATA_OPTIMIZER=sum the reduced gradient
 * arrives there; param may then equal grad for an in-place reduction). Names
 * are unique, at most 255 bytes. Every worker registers the same tensors in
 * the same order. *id_out (may be NULL) identifies it in strata_push(). */
strata_status_t strata_tensor_register(strata_ctx_t *ctx, const char *name,
                                       void *param, void *grad, size_t count,
                                       strata_dtype_t dtype, int *id_out);

/* End registration: the coordinator checks that every worker registered the
 * same layout (a mismatch is STRATA_ERR_MISMATCH naming the first tensor
 * that differs), and every worker receives the initial model, the first
 * worker's parameters (not under STRATA_OPTIMIZER=sum). Collective among
 * workers; called by the first strata_push/strata_pull/strata_step if not
 * called before. */
strata_status_t strata_commit(strata_ctx_t *ctx);

/* ---- data (workers) ---- */

/* Push gradients of the current clock, asynchronously: the tensors listed
 * (ids from strata_tensor_register), or all when ntensors is 0. A partition
 * leaves when every tensor in it has been pushed, so pushing tensors as
 * backpropagation produces them overlaps communication with computation.
 * When every tensor has been pushed the clock advances. The request completes
 * when the gradient buffers may be written again, which is once every
 * tensor sharing a partition with its tensors was pushed too (a partition
 * leaves whole): over shm, for gradients in strata_alloc memory, once the
 * aggregators reduced them in place (STRATA_ZERO_COPY), which they do once
 * the clock's every tensor is pushed. strata_wait or strata_test on a push
 * of a clock not pushed whole has that clock's gradients copied instead,
 * so such a push completes without the rest of its clock, at the cost of
 * the copy. Any number of requests may be outstanding (the pool grows;
 * STRATA_ERR_NOMEM when memory runs out). */
strata_status_t strata_push(strata_ctx_t *ctx, const int *tensors,
                            size_t ntensors, strata_request_t **req_out);

/* The model for `clock` (at most the current clock): completes when every
 * parameter buffer holds it. Pulling a clock the worker has not pushed up to
 * asks the aggregators for it explicitly. */
strata_status_t strata_pull(strata_ctx_t *ctx, int64_t clock,
                            strata_request_t **req_out);

/* Wait for a request for at most timeout_ms (negative: STRATA_TIMEOUT_MS).
 * When it completes, *req is freed and set to NULL and its status returned;
 * STRATA_ERR_TIMEOUT leaves it pending. */
strata_status_t strata_wait(strata_request_t **req, int timeout_ms);
/* Like strata_wait() without waiting: *done_out is true when it completed. */
strata_status_t strata_test(strata_request_t **req, bool *done_out);

/* STRATA_OPTIMIZER=sgd (bsp, ssp, asp, gssp): the aggregators' learning
 * rate from now on, for a schedule (an LR scheduler's steps). It applies
 * from the first clock this worker has not begun to push (the next
 * strata_step's; the current one's while none of its tensors was pushed),
 * on every aggregator from that same clock, so every shard of the model
 * changes at once. Every worker announces the same change at the same clock
 * (identical schedulers do): an aggregator keeps the first announcement of a
 * clock. strata_setting still reports the job's initial STRATA_LR. Under
 * gssp after a regroup the clock is the group's. */
strata_status_t strata_set_lr(strata_ctx_t *ctx, double lr);

/* One training step: push every gradient of the current clock, then wait
 * until the parameters hold the model for the next one. */
strata_status_t strata_step(strata_ctx_t *ctx);

/* The end of an epoch, for STRATA_POLICY=gssp (other policies: nothing to
 * do, STRATA_OK): GDTopK's ratios and dense flushes follow the epochs
 * (STRATA_GDTOPK=1). Grouping does not need it: under gssp the engine
 * measures each worker's own step time (from its model arrivals to its next
 * push, without the time it waited) and groups workers by speed after a
 * probe of STRATA_GSSP_PROBE_STEPS steps, then regroups whenever speeds
 * change (a cost model, STRATA_GROUPS, STRATA_STALENESS_COST,
 * STRATA_REGROUP_GAIN, or STRATA_GROUPING=manual:...). A regroup stops every
 * worker's pushes at its next clock boundary until all aggregators know the
 * new groups, so no gradient is lost or applied twice; strata_group() then
 * gives the new group. iteration_seconds (>= 0) is accepted and ignored:
 * earlier versions grouped by it. */
strata_status_t strata_epoch_end(strata_ctx_t *ctx, double iteration_seconds);

/* ---- rounds of model deltas (STRATA_POLICY=esync or fedavg) ----
 *
 * Workers train locally (their own optimizer on their parameter buffers)
 * and, at the end of a round, average their models:
 *
 *   loop { local step (time it); strata_round_ready(ctx, seconds, &ready);
 *          if (ready) strata_round_sync(ctx); }
 *
 * strata_round_ready: call after every local step with its duration in
 * seconds (> 0). *ready_out is true when the round ends after this step.
 * fedavg: after STRATA_FEDAVG_STEPS local steps. esync: when the State
 * Server in the coordinator says so (the ESync paper's Algorithm 2, judged
 * by the server's clock only: fast workers take more local steps, all end
 * together); the query for a step is sent as it starts, so the answer
 * usually waits on the worker's side. STRATA_ESYNC_NONBLOCKING=1 never
 * waits: the round ends at the first step that ends after the server's
 * READY arrived. Round 0 is the warm-up in which the server learns every
 * worker's step time.
 *
 * strata_round_sync: push the delta w_local - w_global (into the gradient
 * buffers, which it overwrites), wait until the aggregators applied
 * w_global += STRATA_ESYNC_GLOBAL_LR * mean delta (equal weights, or by
 * local steps with STRATA_ESYNC_WEIGHTING=steps) and the parameter buffers
 * hold the new global model. fp32 and fp64 tensors. A worker that dies or
 * falls silent for STRATA_TIMEOUT_MS is dropped from the job and the others
 * go on without it; calls of a dropped worker return STRATA_ERR_PEER.
 */
strata_status_t strata_round_ready(strata_ctx_t *ctx, double step_seconds,
                                   bool *ready_out);
strata_status_t strata_round_sync(strata_ctx_t *ctx);

/* ---- metrics ---- */

/* Staleness of applied updates (model versions applied since the pusher
 * last pulled): bucket 0 counts staleness 0, bucket b >= 1 counts
 * [2^(b-1), 2^b), the last bucket everything above. */
#define STRATA_STALENESS_BUCKETS 32

/* The struct grows at its end, never changing what is there: the caller sets
 * size to sizeof(strata_metrics_t) as its header has it (STRATA_METRICS_INIT),
 * the library fills that much (no more than it knows) and sets size to what
 * it filled. */
typedef struct strata_metrics {
    size_t size;
    /* gradient bytes this worker wrote, or this aggregator received */
    uint64_t bytes_pushed;
    /* model bytes written to this worker, or by this aggregator */
    uint64_t bytes_pulled;
    /* worker: push requests completed, and full models received;
     * aggregator: partition gradients received, partition models written */
    uint64_t pushes, pulls;
    /* copies through a staging buffer (parameter memory a transport cannot
     * write into: use strata_alloc) */
    uint64_t staging_copies, staging_bytes;
    /* aggregator: partition reductions, the time in them (reduce and
     * update), and partition updates applied */
    uint64_t reductions, reduce_ns, updates;
    /* worker: its clock; aggregator: the least group clock of its shard */
    int64_t clock;
    /* aggregator: staleness of the updates it applied */
    uint64_t staleness[STRATA_STALENESS_BUCKETS];
    /* Where a round's time goes (strata-bench-pushpull --breakdown), sums.
     * Worker: rounds timed (clocks whose model completed); a push from the
     * application's call to the progress thread taking it (a wake-up), and
     * the progress thread posting its writes; from a clock's last write
     * posted to its whole model landed (aggregators and transport); and
     * from that model landed to the application awake in the pull's wait
     * (a wake-up; only waits that slept or spun). */
    uint64_t rounds, push_handoff_ns, push_post_ns, round_trip_ns,
        pull_wakeup_ns;
    /* aggregator: from a partition's last arrival to the start of its
     * reduction (waiting on model writes still in flight), and serving it
     * (the model writes posted) */
    uint64_t reduce_wait_ns, serve_ns;
    /* Zero copy on one host (STRATA_ZERO_COPY, shm, gradients in
     * strata_alloc memory). Worker: partition pushes an aggregator read in
     * place, and their bytes, none of them copied; aggregator: the same,
     * of every worker. */
    uint64_t in_place_pushes, in_place_bytes;
    /* Shard protection (STRATA_PROTECT_EVERY). Aggregator: the latest clock
     * every shard is protected at (0: none yet). */
    int64_t protected_clock;
    /* Takeovers of a lost aggregator's shard by a survivor this rank was
     * told of, and the first one's words (the ranks -1 before): the lost
     * aggregator's rank, the taker's, the protected clock P the shard was
     * rebuilt at and the clock R it resumed at (a worker's own: under
     * gssp each group resumes at a clock of its own). The shard's updates
     * of clocks P..R-1 are lost (lost_clocks = R - P); no other shard's. */
    uint64_t takeovers;
    int64_t takeover_lost_rank, takeover_taker_rank;
    int64_t takeover_protected_clock, takeover_resume_clock,
        takeover_lost_clocks;
    /* When this rank saw each stage of the first, CLOCK_MONOTONIC in ns (0: not
     * seen; ranks on one host share the clock): the loss (coordinator:
     * detected; worker: its link broke), the shard rebuilt (coordinator:
     * told so; taker: decoded, its CRC32C checked), TAKEOVER (coordinator:
     * sent; other ranks: received), the shard installed (taker: its model
     * of R in place, every worker given its slots), and resumed (taker:
     * clock R of the shard applied; worker: its whole model of clock R or
     * later landed, the first round after the loss). The coordinator's
     * rank keeps the earliest of what it saw as either. */
    uint64_t takeover_loss_ns, takeover_rebuilt_ns, takeover_told_ns,
        takeover_installed_ns, takeover_resumed_ns;
} strata_metrics_t;

#define STRATA_METRICS_INIT                                                    \
    {                                                                          \
        .size = sizeof(strata_metrics_t)                                       \
    }

strata_status_t strata_metrics(strata_ctx_t *ctx, strata_metrics_t *m_out);

/* The clock of every group on an aggregator's shard (the least over its
 * partitions); a worker's own clock on a worker (one value). Writes at most
 * max values; *ngroups_out is the number of groups. */
strata_status_t strata_group_clocks(strata_ctx_t *ctx, int64_t *clocks,
                                    size_t max, size_t *ngroups_out);

/* With STRATA_METRICS=path, rank 0 writes the metrics of every rank that
 * finalized, as JSON ({"ranks": [{"rank": 0, "role": "aggregator", ...},
 * ...]}), to path when the job ends. */

/* The application's own results of this rank, one JSON object of at most
 * STRATA_REPORT_MAX bytes on one line, which reaches rank 0 over the job:
 * it goes with this rank's metrics when it finalizes (under "report"), so
 * that rank 0 has every rank's results on any launcher and any host. A
 * later call replaces it; call before strata_finalize (before strata_serve
 * on an aggregator). */
#define STRATA_REPORT_MAX 2048
strata_status_t strata_report(strata_ctx_t *ctx, const char *json);

/* ---- for bindings: errors, logs, settings ---- */

/* The text of the last failure, for an exception's message. Once the
 * context's job failed, the job's failure as the coordinator named it
 * ("worker rank 3 (pid 1234 ...) disconnected ..."); otherwise the last error
 * a call of the calling thread logged (read it right after the call that
 * failed; ctx may be NULL, as after a failed strata_init). Copies at most
 * len - 1 bytes and a NUL into buf; returns the text's length (0: none).
 * Any thread, any time. */
size_t strata_last_error(const strata_ctx_t *ctx, char *buf, size_t len);

typedef enum strata_log_level {
    STRATA_LOG_ERROR,
    STRATA_LOG_WARN,
    STRATA_LOG_INFO,
    STRATA_LOG_DEBUG,
    STRATA_LOG_TRACE,
} strata_log_level_t;

/* Receives every log line, formatted as on stderr without the newline. */
typedef void (*strata_log_fn)(void *arg, strata_log_level_t level,
                              const char *line);

/* Per process: send the log to fn instead of stderr (NULL: back to stderr).
 * fn runs on any thread (progress threads included), one line at a time,
 * and must not call libstrata. */
void strata_log_set_handler(strata_log_fn fn, void *arg);
/* Per process: the level below which lines are dropped (STRATA_LOG sets it
 * at the first strata_init). */
void strata_log_set_level(strata_log_level_t level);

/* The effective value of a setting, as text (what strata-config --dump
 * prints): key is STRATA_KEY or key, any case. For a worker's wrapper to
 * choose hooks or rounds, or check its optimizer against STRATA_LR.
 * STRATA_ERR_INVALID: no such setting; STRATA_ERR_RANGE: len is too small
 * (*len_out, if not NULL, says how much is needed, NUL included). Any
 * thread, any time. */
strata_status_t strata_setting(const strata_ctx_t *ctx, const char *key,
                               char *buf, size_t len, size_t *len_out);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_STRATA_H */
