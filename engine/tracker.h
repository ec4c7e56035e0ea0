/*
 * The staleness tracker: which pulls may be served, without a lock.
 *
 * Clocks. A clock value counts completed clocks: worker clock c means the
 * updates of the worker's clocks 0..c-1 have been applied. A group's clock is
 * the least clock of its live members; the minimum clock is the least clock
 * of every live worker, i.e. of the slowest group.
 *
 * Rule. Worker w of group g may be served the pull for clock c once
 *     clock(g) >= c - intra_staleness   and   min clock >= c - inter_staleness
 * (a pull for clock c is served once every group has completed clock
 * c - s - 1). The engine's policies are configurations of this:
 *     BSP   one group, intra = 0            SSP(s)  a group per worker, inter s
 *     ASP   a group per worker, inter inf   GSSP    speed groups, intra s_in
 *                                                   (0: synchronous sum), inter
 *                                                   s_out (default inf)
 * ENG_TRACKER_INF (INT64_MAX, what an F_INF setting reads back as) means no
 * bound.
 *
 * Threads. Aggregator progress and reduction threads call the advance, drop,
 * move and record functions concurrently; application threads park in
 * eng_tracker_wait_pull. Nothing here takes a lock or allocates after
 * eng_tracker_create; an advance reads every worker's word once (a cache line
 * per 8 workers) and makes a system call only when a thread is parked.
 * The published group clocks and minimum are lower bounds of the true ones
 * that catch up before the advancing call returns, so a pull is never served
 * early; tests/model/tracker.pml model-checks this and the parking with spin.
 *
 * Staleness. The tracker also counts the versions applied to the model it
 * guards. The staleness of an update is the number of versions applied since
 * its worker (or group) last pulled; every recorded update lands in a
 * histogram the engine exposes in its metrics.
 */
#ifndef STRATA_ENGINE_TRACKER_H
#define STRATA_ENGINE_TRACKER_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

#define ENG_TRACKER_INF INT64_MAX
/* Largest clock a worker can reach (a clock shares a 64-bit word with a
 * 16-bit group id or generation). */
#define ENG_TRACKER_MAX_CLOCK ((INT64_C(1) << 48) - 2)
#define ENG_TRACKER_MAX_GROUPS 65536
/* Histogram bucket b >= 1 holds staleness in [2^(b-1), 2^b); bucket 0 holds
 * staleness 0. */
#define ENG_TRACKER_HIST_BUCKETS 65

typedef struct eng_tracker eng_tracker_t;

typedef struct eng_tracker_params {
    uint32_t workers;
    uint32_t groups;
    int64_t intra_staleness; /* >= 0, ENG_TRACKER_INF: none */
    int64_t inter_staleness; /* >= 0, ENG_TRACKER_INF: none */
    /* group_of[w] for each worker; NULL puts every worker in group 0. */
    const uint32_t *group_of;
} eng_tracker_params_t;

typedef struct eng_tracker_stats {
    uint64_t updates;       /* updates recorded */
    uint64_t staleness_sum; /* sum over them: mean = sum / updates */
    uint64_t staleness_max;
    uint64_t version;  /* versions applied so far */
    int64_t min_clock; /* ENG_TRACKER_INF once every worker is dropped */
    uint64_t hist[ENG_TRACKER_HIST_BUCKETS];
} eng_tracker_stats_t;

/* Every worker starts at clock 0 and every version at 0. Checks the
 * parameters (each group id < groups), logging what is wrong. */
strata_status_t eng_tracker_create(const eng_tracker_params_t *params,
                                   eng_tracker_t **tracker_out);
void eng_tracker_destroy(eng_tracker_t *t);

/* ---- clocks: aggregator threads ---- */

/* The update of the worker's clock `clock - 1` has been applied: its clock
 * becomes `clock`. Apply-on-arrival mode (intra-group SSP, ASP). A clock that
 * does not move forward is an error (an update applied twice). */
strata_status_t eng_tracker_advance_worker(eng_tracker_t *t, uint32_t worker,
                                           int64_t clock);

/* The group's summed update for clock `clock - 1` has been applied: every
 * live member's clock becomes `clock` (members already there stay).
 * Synchronous mode. Not moving the group's clock forward is an error. */
strata_status_t eng_tracker_advance_group(eng_tracker_t *t, uint32_t group,
                                          int64_t clock);

/* A dead worker leaves every minimum for good; its parked waits return
 * STRATA_ERR_PEER. Dropping twice is harmless. */
strata_status_t eng_tracker_drop_worker(eng_tracker_t *t, uint32_t worker);
/* Drops every live member of the group. */
strata_status_t eng_tracker_drop_group(eng_tracker_t *t, uint32_t group);

/* Regrouping: the worker leaves its group and joins `group` at `clock`, the
 * clock of that group its next update belongs to (its clock counter follows
 * the new group's, so it may go down). The caller agrees the switch so that
 * `group` does not complete `clock` without this worker, and so that the
 * worker's last update in its old group is applied before the call (nothing
 * lost, nothing applied twice). `clock` must be at least the group's clock
 * (unless no live worker is in it) and the minimum clock: published clocks
 * never go back. Safe against concurrent advances and drops; concurrent moves
 * are serialized (a regrouping is meant to come from one thread). */
strata_status_t eng_tracker_move_worker(eng_tracker_t *t, uint32_t worker,
                                        uint32_t group, int64_t clock);

/* A dropped worker is back (a new process in its place): it joins `group`
 * at `clock` under the same conditions as a move. Not dropped: an error. */
strata_status_t eng_tracker_rejoin_worker(eng_tracker_t *t, uint32_t worker,
                                          uint32_t group, int64_t clock);

/* ---- the rule: any thread ---- */

/* Whether the rule serves `worker` the pull for `clock` now (false for a
 * dropped worker). Never blocks. */
bool eng_tracker_may_pull(const eng_tracker_t *t, uint32_t worker,
                          int64_t clock);

/* Parks until eng_tracker_may_pull holds (STRATA_OK), the worker is dropped
 * (STRATA_ERR_PEER), the tracker is closed (STRATA_ERR_CANCELED) or
 * timeout_ms passes (STRATA_ERR_TIMEOUT, logged with the clocks). */
strata_status_t eng_tracker_wait_pull(eng_tracker_t *t, uint32_t worker,
                                      int64_t clock, int64_t timeout_ms);

/* Every current and future wait returns STRATA_ERR_CANCELED (shutdown). */
void eng_tracker_close(eng_tracker_t *t);

int64_t eng_tracker_min_clock(const eng_tracker_t *t);
/* ENG_TRACKER_INF for a dropped worker, -1 for an out-of-range id. */
int64_t eng_tracker_worker_clock(const eng_tracker_t *t, uint32_t worker);
/* -1 for an out-of-range id. */
int64_t eng_tracker_group_clock(const eng_tracker_t *t, uint32_t group);
/* The worker's current group, or UINT32_MAX for an out-of-range id. */
uint32_t eng_tracker_group_of(const eng_tracker_t *t, uint32_t worker);

/* ---- staleness: aggregator threads ---- */

/* Versions applied so far. */
uint64_t eng_tracker_version(const eng_tracker_t *t);

/* The worker (group) was served the model at `version`. */
strata_status_t eng_tracker_note_pull(eng_tracker_t *t, uint32_t worker,
                                      uint64_t version);
strata_status_t eng_tracker_note_group_pull(eng_tracker_t *t, uint32_t group,
                                            uint64_t version);

/* An update of the worker (group) is being applied: counts a version and
 * records the update's staleness (versions applied since the worker's or
 * group's last noted pull) in the histogram. Outputs the new version and the
 * staleness (for a 1/staleness learning rate); either may be NULL. */
strata_status_t eng_tracker_record_update(eng_tracker_t *t, uint32_t worker,
                                          uint64_t *version_out,
                                          uint64_t *staleness_out);
strata_status_t eng_tracker_record_group_update(eng_tracker_t *t,
                                                uint32_t group,
                                                uint64_t *version_out,
                                                uint64_t *staleness_out);

/* A snapshot; counters are read one by one, so concurrent records may be
 * partly included. */
void eng_tracker_stats(const eng_tracker_t *t, eng_tracker_stats_t *out);

/* The histogram bucket of a staleness value. */
static inline unsigned eng_tracker_hist_bucket(uint64_t staleness)
{
    return staleness == 0 ? 0 : 64u - (unsigned)__builtin_clzll(staleness);
}

#endif /* STRATA_ENGINE_TRACKER_H */
