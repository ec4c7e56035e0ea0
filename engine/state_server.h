/*
 * The ESync State Server's decisions (docs/algorithms.md §2.2, the paper's
 * Algorithm 2, with Strata's decisions of §4.7). Pure logic with an
 * injectable clock; the coordinator's engine carries the messages.
 *
 * A worker queries before each local step with (round, steps done so far in
 * the round, measured step duration, and in non-blocking mode its query round
 * trip). The answer says what to do after training the batch in hand:
 *   NOT_READY  train it, then query again;
 *   READY      train it, then aggregate (push the model delta).
 * So the batch that triggers READY is trained, not dropped, and every worker
 * takes at least one local step per round.
 *
 * The server stamps each query with its own monotonic clock and compares only
 * its own stamps. The slowest worker s (largest step duration c_s among live
 * workers) is READY at its first query of a round: one local step. Its last
 * step is predicted to end c_s after that query arrived. Worker i is READY
 * when the step it is about to take would end after the slowest's, less the
 * slack eps = epsilon * c_s:
 *     c_i + eps > c_s - (now - t_s)
 * With every worker starting a round together this gives worker i
 *     n_i = floor((c_s - eps) / c_i) + 1    local steps, n_s = 1.
 * Nothing is decided before every live worker has announced or reported a
 * duration, nor while the slowest has not started the current round (the
 * others keep training).
 *
 * Non-blocking (delayed-ACK) mode, the paper's §4.2: workers do not wait for
 * the answer; only READY is sent (eng_ss_must_reply) and a worker that gets
 * it finishes the step in progress, then aggregates. A READY that arrives
 * rtt later lands L_i = floor(rtt_i / c_i) steps further, so worker i takes
 * L_i more steps, the slowest finishes after F = c_s (1 + L_s), and
 *     c_i (1 + L_i) + eps > F - (now - t_s),
 *     n_i = max(floor((F - eps) / c_i) + 1, 1 + L_i).
 *
 * A worker silent for longer than the timeout plus its own step duration,
 * and not aggregating (eng_ss_syncing), is dropped: it no longer counts as the
 * slowest nor holds up the round, and its later queries are refused
 * (STRATA_ERR_PEER). Not thread-safe: one thread (the coordinator's) owns a
 * State Server.
 */
#ifndef STRATA_ENGINE_STATE_SERVER_H
#define STRATA_ENGINE_STATE_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#include "engine/config.h"

typedef struct eng_state_server eng_state_server_t;

typedef enum eng_ss_decision {
    ENG_SS_NOT_READY,
    ENG_SS_READY,
} eng_ss_decision_t;

/* Monotonic time in nanoseconds (the server's own clock). */
typedef int64_t (*eng_ss_clock_fn)(void *arg);

typedef struct eng_ss_params {
    uint32_t workers;
    double epsilon;        /* slack as a fraction of the slowest step, [0, 1] */
    bool nonblocking;      /* delayed-ACK mode */
    int64_t timeout_ns;    /* silence that drops a worker (> 0) */
    eng_ss_clock_fn clock; /* NULL: CLOCK_MONOTONIC */
    void *clock_arg;
} eng_ss_params_t;

/* STRATA_ESYNC_EPSILON, STRATA_ESYNC_NONBLOCKING and STRATA_TIMEOUT_MS; the
 * real clock. */
void eng_ss_params_from_config(const eng_config_t *cfg, uint32_t workers,
                               eng_ss_params_t *params_out);

/* Round 0 starts now; every worker counts as heard from now. */
strata_status_t eng_ss_create(const eng_ss_params_t *params,
                              eng_state_server_t **ss_out);
void eng_ss_destroy(eng_state_server_t *ss);

/* The worker's step duration measured before training starts (the paper's
 * RUN-BATCH-DATA-TEST): lets the server know the slowest from the first
 * query of round 0 on. Optional; until every live worker has announced or
 * queried, every answer is NOT_READY. */
strata_status_t eng_ss_announce(eng_state_server_t *ss, uint32_t worker,
                                double step_seconds);

typedef struct eng_ss_query {
    uint32_t worker;
    uint64_t round;      /* rounds the worker has completed (0 first) */
    uint32_t steps;      /* local steps done in this round */
    double step_seconds; /* its measured step duration (> 0) */
    double rtt_seconds;  /* its query round trip (non-blocking mode; >= 0) */
} eng_ss_query_t;

/* Judges one query at the server's current time. A query of a later round
 * starts that round for everyone (the first worker back from aggregating);
 * one of an earlier round is refused (STRATA_ERR_STATE), as is one of a
 * dropped worker (STRATA_ERR_PEER). Drops silent workers first. */
strata_status_t eng_ss_query(eng_state_server_t *ss, const eng_ss_query_t *q,
                             eng_ss_decision_t *decision_out);

/* The worker aggregates the round (it pushed its delta and waits for the
 * model): silent until the next round, it is not dropped for that. */
strata_status_t eng_ss_syncing(eng_state_server_t *ss, uint32_t worker,
                               uint64_t round);

/* Whether the decision must be sent: always when blocking, only READY in
 * non-blocking mode. */
bool eng_ss_must_reply(const eng_state_server_t *ss,
                       eng_ss_decision_t decision);

/* Drops the workers silent for too long; returns how many it dropped now.
 * The engine calls it periodically, so that a round's aggregation does not
 * wait for a dead worker. */
uint32_t eng_ss_expire(eng_state_server_t *ss);

/* The engine saw a worker die (e.g. its connection closed). */
strata_status_t eng_ss_drop(eng_state_server_t *ss, uint32_t worker);
/* A dropped worker is back (a new process in its place, from the round the
 * aggregators agreed): live again, heard from now, nothing done in the
 * current round; its last step duration stands until it reports one. Not
 * dropped: STRATA_ERR_STATE. */
strata_status_t eng_ss_rejoin(eng_state_server_t *ss, uint32_t worker);

bool eng_ss_is_live(const eng_state_server_t *ss, uint32_t worker);
uint32_t eng_ss_live_count(const eng_state_server_t *ss);
uint64_t eng_ss_round(const eng_state_server_t *ss);
/* Local steps the worker takes in the current round once READY (steps at the
 * READY query plus the batch in hand, plus the steps a delayed READY lands
 * later in non-blocking mode); 0 while it is not READY. */
uint32_t eng_ss_planned_steps(const eng_state_server_t *ss, uint32_t worker);

#endif /* STRATA_ENGINE_STATE_SERVER_H */
